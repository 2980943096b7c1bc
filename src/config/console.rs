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
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            token: None,
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
    }
}
