//! `[net]`: outbound HTTP: timeouts, limits, and the private-address guard.

use serde::{Deserialize, Serialize};

/// Outbound HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// DEVELOPMENT ONLY: allow loopback, private and link-local targets and plain `http://`.
    pub allow_private_addresses: bool,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
    /// Whole-request timeout unless a caller sets its own.
    pub timeout_ms: u64,
    /// Largest response body read.
    pub max_body_bytes: usize,
    /// Redirects followed.
    pub max_redirects: usize,
    /// `User-Agent` sent.
    pub user_agent: String,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            allow_private_addresses: false,
            connect_timeout_ms: 5_000,
            timeout_ms: 30_000,
            max_body_bytes: 1024 * 1024,
            max_redirects: 3,
            user_agent: concat!("switchboard/", env!("CARGO_PKG_VERSION")).into(),
        }
    }
}
