//! `[server]`: the HTTP listeners and the public URL everything else is named under.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// HTTP serving.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the public HTTP listener.
    pub bind: SocketAddr,
    /// Public base URL with scheme; defaults to `http://{bind}`.
    pub public_url: Option<String>,
    /// Address of the Prometheus metrics listener.
    pub metrics_bind: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for in-flight work before releasing it.
    pub shutdown_grace_seconds: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            metrics_bind: SocketAddr::from(([127, 0, 0, 1], 9464)),
            workers: 2,
            max_body_bytes: 1024 * 1024,
            shutdown_grace_seconds: 30,
        }
    }
}
