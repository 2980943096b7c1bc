//! A refusal of an inbound request: the HTTP status and a reason safe to show the peer, made
//! from the core's error classes by the one mapping in `http`.

/// A refusal: HTTP status, a reason safe to show the peer, and when it may try again.
#[derive(Debug)]
pub(super) struct Reject {
    pub status: u16,
    pub reason: String,
    /// Seconds the peer should wait before trying again (`Retry-After`), when known: a rate
    /// limit's window. A 503 without one is told 60.
    pub retry_after_s: Option<u64>,
}

impl Reject {
    pub(super) fn new(status: u16, reason: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.into(),
            retry_after_s: None,
        }
    }
    pub(super) fn unauth(why: impl std::fmt::Display) -> Self {
        Self::new(401, format!("authentication failed: {why}"))
    }
    pub(super) fn invalid(why: impl Into<String>) -> Self {
        Self::new(400, why)
    }
}

impl From<crate::Error> for Reject {
    fn from(e: crate::Error) -> Self {
        let retry_after_s = match &e {
            crate::Error::RateLimited { retry_after_s } => Some(*retry_after_s),
            _ => None,
        };
        Self {
            retry_after_s,
            ..Self::new(crate::http::status_of(e.kind()).as_u16(), e.to_string())
        }
    }
}
