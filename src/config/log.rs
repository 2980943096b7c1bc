//! `[log]`: the log format, the filter, and the access log.

use serde::{Deserialize, Serialize};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Logging.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `pretty` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info,switchboard=debug`; `RUST_LOG` wins when set.
    pub filter: String,
    /// One INFO line per HTTP request on each listener (target `switchboard::access`): client
    /// address, method, path without its query, status, bytes, duration, user agent. Off by
    /// default.
    pub access: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Pretty,
            filter: "info".into(),
            access: false,
        }
    }
}
