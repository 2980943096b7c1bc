//! `[console]`: the operator's web console on the private metrics listener.

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The web console at `/console` on `server.metrics_bind`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve the console.
    pub enabled: bool,
    /// The sign-in token; required when the metrics listener is not on a loopback address.
    pub token: Option<Secret>,
    /// Host names the private listener answers besides the loopback literals (`127.0.0.1`,
    /// `[::1]`, `localhost`) and the address a request arrived at: a request naming any other
    /// `Host` gets 421, so a DNS-rebinding page cannot read the console or the metrics.
    pub hostnames: Vec<String>,
    /// A console session (its cookie) ends after this many minutes without a request.
    pub session_idle_minutes: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token: None,
            hostnames: Vec::new(),
            session_idle_minutes: 12 * 60,
        }
    }
}

impl ConsoleConfig {
    /// A console reachable from other hosts needs a token.
    pub(super) fn check(&self, metrics_bind: std::net::SocketAddr, problems: &mut Vec<String>) {
        if self.enabled && self.token.is_none() && !metrics_bind.ip().is_loopback() {
            problems.push(format!(
                "console.token: required when server.metrics_bind ({metrics_bind}) is not a \
                 loopback address (or set console.enabled = false)"
            ));
        }
        if self
            .token
            .as_ref()
            .is_some_and(|t| t.expose().trim().is_empty())
        {
            problems.push("console.token: empty".into());
        }
        for h in &self.hostnames {
            let plain = !h.is_empty()
                && h.len() <= 253
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !plain {
                problems.push(format!(
                    "console.hostnames: {h:?} is not a host name (no scheme, port or path)"
                ));
            }
        }
        if self.session_idle_minutes == 0 {
            problems.push("console.session_idle_minutes: must be at least 1".into());
        }
    }
}
