//! A refusal of an inbound request: the HTTP status and a reason safe to show the peer, made
//! from the core's error classes by the one mapping in `http`.

/// A refusal: HTTP status and a reason safe to show the peer.
#[derive(Debug)]
pub(super) struct Reject(pub u16, pub String);

impl Reject {
    pub(super) fn unauth(why: impl std::fmt::Display) -> Self {
        Self(401, format!("authentication failed: {why}"))
    }
    pub(super) fn invalid(why: impl Into<String>) -> Self {
        Self(400, why.into())
    }
}

impl From<crate::Error> for Reject {
    fn from(e: crate::Error) -> Self {
        Self(crate::http::status_of(e.kind()).as_u16(), e.to_string())
    }
}
