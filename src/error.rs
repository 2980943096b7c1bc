//! Errors classified once in the core and rendered by each transport in its own terms.
//!
//! No HTTP, JSON-RPC or SMTP types appear here: adapters map [`ErrorKind`] to their wire.
//! Display strings are safe to show to a peer; sources stay attached for the logs.

use std::time::Duration;

/// The class of a failure, which each transport renders (DESIGN.md §5).
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
    /// The named thing does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A body or message over its limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// The configuration is unusable; each line is one problem.
    #[error("configuration: {0}")]
    Config(String),
    /// The database failed.
    #[error("database unavailable")]
    Database(#[from] sqlx::Error),
    /// The embedded SQLite database failed.
    #[error("database unavailable")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored row could not be decoded into its type.
    #[error("stored data is corrupt")]
    Row(String),
    /// A migration failed.
    #[error("database migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored row could not be decoded.
    #[error("stored data is corrupt")]
    Corrupt(#[source] serde_json::Error),
    /// The server could not start (a port in use, no TLS roots…).
    #[error("start-up failed: {0}")]
    Startup(String),
    /// The service is shutting down or overloaded.
    #[error("temporarily unavailable")]
    Unavailable,
}

impl Error {
    /// The class of this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Invalid(_) => ErrorKind::Invalid,
            Self::Unauthenticated => ErrorKind::Unauthenticated,
            Self::Forbidden => ErrorKind::Forbidden,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::TooLarge(_) => ErrorKind::TooLarge,
            Self::Config(_) | Self::Corrupt(_) | Self::Row(_) | Self::Startup(_) => {
                ErrorKind::Permanent
            }
            Self::Database(_) | Self::Sqlite(_) | Self::Migrate(_) | Self::Unavailable => {
                ErrorKind::Temporary
            }
        }
    }
}

impl From<crate::message::ValidationError> for Error {
    fn from(e: crate::message::ValidationError) -> Self {
        Self::Invalid(e.0)
    }
}

/// The result type of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    },
    /// Will fail again: other 4xx, refused targets, malformed answers.
    #[error("permanent failure: {reason}")]
    Permanent {
        /// What happened.
        reason: String,
    },
}

impl OutboundError {
    /// A temporary failure without a `Retry-After`.
    pub fn temporary(reason: impl Into<String>) -> Self {
        Self::Temporary {
            reason: reason.into(),
            retry_after: None,
        }
    }

    /// A permanent failure.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Self::Permanent {
            reason: reason.into(),
        }
    }
}
