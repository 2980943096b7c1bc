//! Errors classified once in the core and rendered by each transport in its own terms.
//!
//! No HTTP, JSON-RPC or SMTP types appear here: adapters map [`ErrorKind`] to their wire.
//! Display strings are safe to show to a peer; sources stay attached for the logs.

use std::time::Duration;

/// The class of a failure, which each transport renders (`docs/architecture.md`, Errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed input.
    Invalid,
    /// Missing or failed authentication.
    Unauthenticated,
    /// Authenticated but not allowed.
    Forbidden,
    /// No such thing.
    NotFound,
    /// Input over a size limit.
    TooLarge,
    /// Slow down.
    RateLimited,
    /// Try again later.
    Temporary,
    /// Will not succeed on retry.
    Permanent,
}

/// The library's error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input failed validation; the text says what.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// Authentication missing or failed.
    #[error("authentication required")]
    Unauthenticated,
    /// The principal may not do this.
    #[error("forbidden")]
    Forbidden,
    /// The agent's access rules refuse this sender (`[agents.access]`).
    #[error("this agent does not accept messages from this sender")]
    Refused {
        /// Whether the sender presented any verified identity: without one, authenticating
        /// may help; with one, it will not.
        authenticated: bool,
    },
    /// A block refuses this sender (`[[moderation.blocks]]` or one added at run time).
    #[error("this sender is blocked")]
    Blocked,
    /// Over a rate limit (`[limits]`); the peer may try again after the given seconds.
    #[error("rate limited; retry after {retry_after_s} s")]
    RateLimited {
        /// Seconds until the window that refused ends.
        retry_after_s: u64,
    },
    /// The named thing does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A body or message over its limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The configuration is unusable; each line is one problem.
    #[error("configuration: {0}")]
    Config(String),
    /// The database failed; the text gives the driver's cause (remote parties are told only
    /// [`Error::public_text`]).
    #[error("database unavailable (PostgreSQL): {0}")]
    Database(#[from] sqlx::Error),
    /// The embedded SQLite database failed, as [`Error::Database`].
    #[error("database unavailable (SQLite): {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database could not be reached at start; the text names where and why (never the
    /// password).
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    /// A migration failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Stored data (a row, a JSON body) could not be decoded into its type; the text says
    /// what, for the logs.
    #[error("stored data is corrupt")]
    Corrupt(String),
    /// The server could not start (a port in use, no TLS roots…).
    #[error("start-up failed: {0}")]
    Startup(String),
    /// The service is shutting down or overloaded.
    #[error("temporarily unavailable")]
    Unavailable,
}

impl Error {
    /// Stored data that could not be decoded ([`Error::Corrupt`]).
    pub fn corrupt(e: impl std::fmt::Display) -> Self {
        Self::Corrupt(e.to_string())
    }

    /// What a remote party is told of this error: its text, except that a failure of this
    /// server's database or data names no internal detail (the logs have it).
    #[must_use]
    pub fn public_text(&self) -> String {
        match self {
            Self::Database(_) | Self::Sqlite(_) | Self::Migrate(_) | Self::Connect(_) => {
                "database unavailable".into()
            }
            Self::Corrupt(_) => "stored data is corrupt".into(),
            _ => self.to_string(),
        }
    }

    /// The class of this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Invalid(_) => ErrorKind::Invalid,
            Self::Unauthenticated => ErrorKind::Unauthenticated,
            Self::Forbidden | Self::Refused { .. } | Self::Blocked => ErrorKind::Forbidden,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::RateLimited { .. } => ErrorKind::RateLimited,
            Self::TooLarge(_) => ErrorKind::TooLarge,
            Self::Config(_) | Self::Corrupt(_) | Self::Startup(_) => ErrorKind::Permanent,
            Self::Database(_)
            | Self::Sqlite(_)
            | Self::Migrate(_)
            | Self::Connect(_)
            | Self::Unavailable => ErrorKind::Temporary,
        }
    }
}

impl From<crate::message::ValidationError> for Error {
    fn from(e: crate::message::ValidationError) -> Self {
        Self::Invalid(e.0)
    }
}

/// One classification of this library's errors for an outbound step (a delivery, a job, an
/// agent call's preparation): what retrying can fix (the database, shutting down, a rate limit)
/// is temporary; corrupt data, bad input, configuration and refusals are permanent. The reason
/// names the cause (for a database error, the driver's own text), never a secret.
impl From<Error> for OutboundError {
    fn from(e: Error) -> Self {
        let reason = match &e {
            Error::Corrupt(detail) => detail.clone(),
            other => match std::error::Error::source(other) {
                Some(cause) => format!("{other}: {cause}"),
                None => other.to_string(),
            },
        };
        match e.kind() {
            ErrorKind::Temporary | ErrorKind::RateLimited => Self::temporary(reason),
            _ => Self::permanent(reason),
        }
    }
}

/// The result type of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a peer answered to an outbound call, in its protocol's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerStatus {
    /// An HTTP status code.
    Http(u16),
    /// An SMTP reply code.
    Smtp(u16),
}

impl PeerStatus {
    /// Whether the peer refused the request itself (HTTP 4xx, SMTP 5xx): it was reached and
    /// answered, so this says nothing about its health.
    #[must_use]
    pub fn is_refusal(self) -> bool {
        match self {
            Self::Http(code) => (400..500).contains(&code),
            Self::Smtp(code) => (500..600).contains(&code),
        }
    }
}

/// How an outbound call (agent backend, delivery, fetch) failed, which decides its retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    /// Worth retrying: 5xx, 408, 429, timeouts, connection errors.
    #[error("temporary failure: {reason}")]
    Temporary {
        /// What happened (for operators; never relayed to peers).
        reason: String,
        /// The peer's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
        /// What the peer answered, when it answered.
        status: Option<PeerStatus>,
    },
    /// Will fail again: other 4xx, refused targets, malformed answers.
    #[error("permanent failure: {reason}")]
    Permanent {
        /// What happened.
        reason: String,
        /// What the peer answered, when it answered.
        status: Option<PeerStatus>,
    },
}

impl OutboundError {
    /// A temporary failure without a `Retry-After`.
    pub fn temporary(reason: impl Into<String>) -> Self {
        Self::Temporary {
            reason: reason.into(),
            retry_after: None,
            status: None,
        }
    }

    /// A permanent failure.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Self::Permanent {
            reason: reason.into(),
            status: None,
        }
    }

    /// The same failure, recording what the peer answered.
    #[must_use]
    pub fn with_status(mut self, peer: PeerStatus) -> Self {
        match &mut self {
            Self::Temporary { status, .. } | Self::Permanent { status, .. } => *status = Some(peer),
        }
        self
    }

    /// What the peer answered, when it answered.
    #[must_use]
    pub fn status(&self) -> Option<PeerStatus> {
        match self {
            Self::Temporary { status, .. } | Self::Permanent { status, .. } => *status,
        }
    }

    /// What happened (for operators' logs; never relayed to peers).
    #[must_use]
    pub fn reason(&self) -> &str {
        match self {
            Self::Temporary { reason, .. } | Self::Permanent { reason, .. } => reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_status_is_carried_and_classified() {
        let e = OutboundError::permanent("HTTP 404").with_status(PeerStatus::Http(404));
        assert_eq!(e.status(), Some(PeerStatus::Http(404)));
        assert!(e.status().is_some_and(PeerStatus::is_refusal));
        assert!(!PeerStatus::Http(503).is_refusal());
        assert!(PeerStatus::Smtp(550).is_refusal());
        assert!(!PeerStatus::Smtp(451).is_refusal());
        assert_eq!(OutboundError::temporary("timeout").status(), None);
        assert_eq!(e.reason(), "HTTP 404");
    }
}
