//! `[database]`: which database, and how many connections to it.

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://path` (created if missing) or `postgres://…`.
    pub url: Secret,
    /// Pool size (SQLite readers; PostgreSQL connections).
    pub max_connections: u32,
    /// How long a statement waits for a locked SQLite database.
    pub busy_timeout_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("sqlite://switchboard.db"),
            max_connections: 8,
            busy_timeout_ms: 5_000,
        }
    }
}

impl DatabaseConfig {
    /// The URL must name a supported engine.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        let url = self.url.expose();
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            problems
                .push("database.url: must start with sqlite:, postgres:// or postgresql://".into());
        }
    }
}
