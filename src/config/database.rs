//! `[database]`: which database, how many connections to it, and when a commit counts as done.

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
    /// When a commit returns, and so when what it holds is acknowledged (`250`, `202`, a
    /// JSON-RPC result): [`Durability`]. Unset, each engine keeps what it did before the
    /// setting existed: `periodic` on SQLite, `fsync` on PostgreSQL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    /// Retention: messages and responses stored more than this many days ago, and attachments
    /// nothing refers to any more, are erased by the retention task (checked every minute).
    /// 0, the default, keeps them until their author deletes them
    /// ([safety](../../docs/safety.md#deletion-and-retention)).
    pub retention_days: u32,
}

/// When a commit returns, which is when what it holds is acknowledged to whoever sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Once the database has the commit, before it is on disk; the disk follows within a
    /// bounded delay. SQLite: written to the WAL (in the operating system's hands), flushed
    /// every 100 ms. PostgreSQL: `synchronous_commit = off` (the WAL writer flushes every
    /// `wal_writer_delay`). A crash of switchboard loses nothing; a power cut (on PostgreSQL
    /// also a crash of the database server) can lose what was acknowledged in that delay.
    Periodic,
    /// Only once the commit is on disk. SQLite: the WAL is `fsync`ed after the commit, one
    /// sync serving every commit made meanwhile (a group commit of many messages is one sync).
    /// PostgreSQL: `synchronous_commit = on`. Nothing acknowledged is lost to a power cut.
    Fsync,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("sqlite://switchboard.db"),
            max_connections: 8,
            busy_timeout_ms: 5_000,
            durability: None,
            retention_days: 0,
        }
    }
}

impl DatabaseConfig {
    /// The URL must name a supported engine.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if self.engine().is_none() {
            problems
                .push("database.url: must start with sqlite:, postgres:// or postgresql://".into());
        }
    }

    /// Whether the URL names SQLite (`Some(true)`), PostgreSQL (`Some(false)`) or neither.
    fn engine(&self) -> Option<bool> {
        let url = self.url.expose();
        if url.starts_with("sqlite:") {
            Some(true)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(false)
        } else {
            None
        }
    }

    /// The durability in effect: the one set, else the engine's default (`periodic` on
    /// SQLite, `fsync` on PostgreSQL).
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability.unwrap_or(match self.engine() {
            Some(true) => Durability::Periodic,
            _ => Durability::Fsync,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<Config, crate::error::Error> {
        Config::load(
            None,
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn durability_is_read_and_defaults_by_engine() {
        let url = "SWITCHBOARD__DATABASE__URL";
        let pg = "postgres://u@db/x";
        let c = load(&[]).unwrap();
        assert_eq!(c.database.durability, None);
        assert_eq!(c.database.durability(), Durability::Periodic, "SQLite");
        assert_eq!(
            load(&[(url, pg)]).unwrap().database.durability(),
            Durability::Fsync
        );
        for (engine, set, want) in [
            ("sqlite://x.db", "fsync", Durability::Fsync),
            (pg, "periodic", Durability::Periodic),
        ] {
            let c = load(&[(url, engine), ("SWITCHBOARD__DATABASE__DURABILITY", set)]).unwrap();
            assert_eq!(c.database.durability(), want, "{engine} {set}");
        }
        let file: DatabaseConfig = toml::from_str("durability = \"fsync\"").unwrap();
        assert_eq!(file.durability, Some(Durability::Fsync));
        let e = toml::from_str::<DatabaseConfig>("durability = \"always\"").unwrap_err();
        assert!(e.to_string().contains("periodic"), "{e}");
        let e = load(&[("SWITCHBOARD__DATABASE__DURABILITY", "FSYNC")]).unwrap_err();
        assert!(e.to_string().contains("durability"), "{e}");
    }

    #[test]
    fn retention_is_off_unless_set() {
        assert_eq!(load(&[]).unwrap().database.retention_days, 0);
        let c = load(&[("SWITCHBOARD__DATABASE__RETENTION_DAYS", "30")]).unwrap();
        assert_eq!(c.database.retention_days, 30);
        let file: DatabaseConfig = toml::from_str("retention_days = 7").unwrap();
        assert_eq!(file.retention_days, 7);
        assert!(toml::from_str::<DatabaseConfig>("retention_days = -1").is_err());
    }
}
