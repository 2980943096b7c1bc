//! The database handle over SQLite or PostgreSQL, chosen by the URL, and the only place that
//! writes SQL.
//!
//! Queries are runtime-checked and written once in a portable subset (`$n` placeholders, TEXT
//! ids, integer unix-millisecond times, `ON CONFLICT`, `RETURNING`); backend-specific SQL appears
//! only where semantics differ. SQLite (the `sqlite` module) runs statements on the calling task
//! with one writer connection (SQLite admits one writer at a time anyway, and this way writers
//! queue in-process instead of spinning on `SQLITE_BUSY`) and a pool of readers; PostgreSQL goes
//! through sqlx's pool.

pub mod a2a;
pub mod blobs;
pub mod email;
pub mod jobs;
pub mod messages;
pub mod recent;
mod sqlite;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, FromRow, PgPool, Postgres};

use crate::config::DatabaseConfig;
use crate::error::{Error, Result};

static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");

/// Which engine a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite (the embedded default).
    Sqlite,
    /// PostgreSQL (several instances may share it).
    Postgres,
}

#[derive(Debug, Clone)]
enum Pools {
    Sqlite(Arc<sqlite::Sqlite>),
    Postgres(PgPool),
}

/// A cheap-to-clone database handle.
#[derive(Debug, Clone)]
pub struct Db {
    pools: Pools,
}

/// A bound query argument (the portable subset's value types).
#[derive(Debug, Clone)]
pub enum Arg<'a> {
    /// TEXT.
    Text(&'a str),
    /// Nullable TEXT.
    OptText(Option<&'a str>),
    /// INTEGER / BIGINT.
    Int(i64),
    /// Nullable INTEGER / BIGINT.
    OptInt(Option<i64>),
    /// BLOB / BYTEA.
    Bytes(&'a [u8]),
}

/// A row type decodable from both engines: sqlx's `FromRow` for PostgreSQL, serde (columns by
/// name) for SQLite.
pub trait Row: for<'r> FromRow<'r, PgRow> + serde::de::DeserializeOwned + Send + Unpin {}
impl<T> Row for T where T: for<'r> FromRow<'r, PgRow> + serde::de::DeserializeOwned + Send + Unpin {}

macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                Arg::Text(s) => q.bind(*s),
                Arg::OptText(s) => q.bind(*s),
                Arg::Int(i) => q.bind(*i),
                Arg::OptInt(i) => q.bind(*i),
                Arg::Bytes(b) => q.bind(*b),
            };
        }
        q
    }};
}

/// An open transaction on either engine.
#[derive(Debug)]
pub enum Tx {
    /// SQLite.
    Sqlite(sqlite::Tx),
    /// PostgreSQL.
    Postgres(sqlx::Transaction<'static, Postgres>),
}

impl Tx {
    /// Runs a statement; returns the number of rows affected.
    ///
    /// # Errors
    /// Database errors.
    pub async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        Ok(match self {
            Self::Sqlite(tx) => tx.execute(sql, args)?,
            Self::Postgres(tx) => bind_all!(sqlx::query(sql), args)
                .execute(&mut **tx)
                .await?
                .rows_affected(),
        })
    }

    /// Runs a query returning rows.
    ///
    /// # Errors
    /// Database errors.
    pub async fn fetch_all<T: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<T>> {
        Ok(match self {
            Self::Sqlite(tx) => tx.fetch(sql, args, usize::MAX)?,
            Self::Postgres(tx) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(&mut **tx)
                    .await?
            }
        })
    }

    /// Runs a query returning at most one row.
    ///
    /// # Errors
    /// Database errors.
    pub async fn fetch_optional<T: Row>(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> Result<Option<T>> {
        Ok(match self {
            Self::Sqlite(tx) => tx.fetch(sql, args, 1)?.pop(),
            Self::Postgres(tx) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_optional(&mut **tx)
                    .await?
            }
        })
    }

    /// Wakes workers of `kind` on every instance once this transaction commits (PostgreSQL
    /// `NOTIFY`; SQLite has one process and wakes in-process after commit).
    ///
    /// # Errors
    /// Database errors.
    pub async fn notify(&mut self, kind: &str) -> Result<()> {
        if let Self::Postgres(_) = self {
            self.execute(
                "SELECT pg_notify('switchboard_jobs', $1)",
                &[Arg::Text(kind)],
            )
            .await?;
        }
        Ok(())
    }

    /// Commits.
    ///
    /// # Errors
    /// Database errors; nothing was committed.
    pub async fn commit(self) -> Result<()> {
        match self {
            Self::Sqlite(tx) => tx.commit()?,
            Self::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

/// `($1, $2), ($3, $4), …`: the VALUES list of a multi-row statement with `rows` rows of `cols`
/// columns, numbering placeholders from `$first`. Batches go to the database as one statement,
/// not one round trip per row.
#[must_use]
pub fn values_list(rows: usize, cols: usize, first: usize) -> String {
    let mut s = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        if r > 0 {
            s.push_str(", ");
        }
        s.push('(');
        for c in 0..cols {
            if c > 0 {
                s.push_str(", ");
            }
            s.push('$');
            s.push_str(&(first + r * cols + c).to_string());
        }
        s.push(')');
    }
    s
}

/// The VALUES list and the flattened arguments of a multi-row statement: one row of `N`
/// arguments per item.
pub fn rows<'a, T, const N: usize>(
    items: &'a [T],
    row: impl Fn(&'a T) -> [Arg<'a>; N],
) -> (String, Vec<Arg<'a>>) {
    (
        values_list(items.len(), N, 1),
        items.iter().flat_map(row).collect(),
    )
}

/// `$first, $first+1, …` for an `IN (…)` list of `n` items.
#[must_use]
pub fn in_list(n: usize, first: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits for the first item of a group commit, lets every other runnable task add to it, and
/// takes what has queued up (at most `max`). Without the pause, a writer woken by the first
/// item would commit it alone: the runtime runs a freshly woken task next, before the tasks
/// that are about to send more.
pub async fn gather<T>(rx: &mut tokio::sync::mpsc::Receiver<T>, max: usize) -> Option<Vec<T>> {
    let first = rx.recv().await?;
    tokio::task::yield_now().await;
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// The `LISTEN` channel job wakeups travel on.
pub const NOTIFY_CHANNEL: &str = "switchboard_jobs";

impl Db {
    /// Connects (creating an SQLite file if missing) without migrating.
    ///
    /// # Errors
    /// When the URL is unusable or the database unreachable.
    pub async fn connect(cfg: &DatabaseConfig) -> Result<Self> {
        let url = cfg.url.expose();
        if url.starts_with("sqlite:") {
            let db = sqlite::Sqlite::open(
                url,
                cfg.max_connections,
                Duration::from_millis(cfg.busy_timeout_ms),
            )?;
            Ok(Self {
                pools: Pools::Sqlite(Arc::new(db)),
            })
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let opts = PgConnectOptions::from_str(url)?
                .log_statements(log::LevelFilter::Trace)
                .log_slow_statements(log::LevelFilter::Warn, Duration::from_secs(1));
            let pool = PgPoolOptions::new()
                .max_connections(cfg.max_connections.max(2))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(opts)
                .await?;
            Ok(Self {
                pools: Pools::Postgres(pool),
            })
        } else {
            Err(Error::Config(
                "database.url: must start with sqlite:, postgres:// or postgresql://".into(),
            ))
        }
    }

    /// Connects and applies the embedded migrations.
    ///
    /// # Errors
    /// As [`Db::connect`], or a failed migration.
    pub async fn open(cfg: &DatabaseConfig) -> Result<Self> {
        let db = Self::connect(cfg).await?;
        db.migrate().await?;
        Ok(db)
    }

    /// Applies the embedded migrations (PostgreSQL serialises concurrent instances with an
    /// advisory lock).
    ///
    /// # Errors
    /// A failed migration.
    pub async fn migrate(&self) -> Result<()> {
        match &self.pools {
            Pools::Sqlite(db) => db.migrate(&SQLITE_MIGRATOR).await?,
            Pools::Postgres(pool) => POSTGRES_MIGRATOR.run(pool).await?,
        }
        Ok(())
    }

    /// The engine.
    #[must_use]
    pub fn backend(&self) -> Backend {
        match self.pools {
            Pools::Sqlite(_) => Backend::Sqlite,
            Pools::Postgres(_) => Backend::Postgres,
        }
    }

    /// The PostgreSQL pool, for `LISTEN`.
    #[must_use]
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.pools {
            Pools::Postgres(p) => Some(p),
            Pools::Sqlite(_) => None,
        }
    }

    /// Begins a write transaction.
    ///
    /// # Errors
    /// Database errors.
    pub async fn begin(&self) -> Result<Tx> {
        Ok(match &self.pools {
            Pools::Sqlite(db) => Tx::Sqlite(db.begin().await?),
            Pools::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// Runs one writing statement in its own transaction.
    ///
    /// # Errors
    /// Database errors.
    pub async fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        Ok(match &self.pools {
            Pools::Sqlite(db) => db.execute(sql, args).await?,
            Pools::Postgres(p) => bind_all!(sqlx::query(sql), args)
                .execute(p)
                .await?
                .rows_affected(),
        })
    }

    /// Runs a writing statement that returns rows (`UPDATE … RETURNING`).
    ///
    /// # Errors
    /// Database errors.
    pub async fn write_fetch_all<T: Row>(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<T>> {
        Ok(match &self.pools {
            Pools::Sqlite(db) => db.write_fetch_all(sql, args).await?,
            Pools::Postgres(p) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(p)
                    .await?
            }
        })
    }

    /// Runs a read-only query.
    ///
    /// # Errors
    /// Database errors.
    pub async fn fetch_all<T: Row>(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<T>> {
        Ok(match &self.pools {
            Pools::Sqlite(db) => db.fetch(sql, args, usize::MAX).await?,
            Pools::Postgres(p) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_all(p)
                    .await?
            }
        })
    }

    /// Runs a read-only query returning at most one row.
    ///
    /// # Errors
    /// Database errors.
    pub async fn fetch_optional<T: Row>(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<T>> {
        Ok(match &self.pools {
            Pools::Sqlite(db) => db.fetch(sql, args, 1).await?.pop(),
            Pools::Postgres(p) => {
                bind_all!(sqlx::query_as::<_, T>(sql), args)
                    .fetch_optional(p)
                    .await?
            }
        })
    }

    /// Whether the database answers and every embedded migration is applied.
    ///
    /// # Errors
    /// Database errors (the database is not ready).
    pub async fn ready(&self) -> Result<bool> {
        #[derive(sqlx::FromRow, serde::Deserialize)]
        struct Applied {
            n: i64,
        }
        let expected = match self.backend() {
            Backend::Sqlite => SQLITE_MIGRATOR.iter().count(),
            Backend::Postgres => POSTGRES_MIGRATOR.iter().count(),
        };
        let row: Option<Applied> = self
            .fetch_optional(
                "SELECT COUNT(*) AS n FROM _sqlx_migrations WHERE success = TRUE",
                &[],
            )
            .await?;
        Ok(row.is_some_and(|r| usize::try_from(r.n).is_ok_and(|n| n >= expected)))
    }

    /// Closes the connections.
    pub async fn close(&self) {
        match &self.pools {
            Pools::Sqlite(db) => db.close().await,
            Pools::Postgres(p) => p.close().await,
        }
    }
}

/// Migration file names of one engine, for the test that both engines stay in step.
#[must_use]
pub fn migration_names(backend: Backend) -> Vec<String> {
    let m = match backend {
        Backend::Sqlite => &SQLITE_MIGRATOR,
        Backend::Postgres => &POSTGRES_MIGRATOR,
    };
    m.iter()
        .map(|m| format!("{}_{}", m.version, m.description))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_lists() {
        assert_eq!(values_list(2, 3, 1), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(values_list(1, 2, 4), "($4, $5)");
        assert_eq!(in_list(3, 2), "$2, $3, $4");
    }

    #[test]
    fn both_engines_have_the_same_migrations() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let list = |d: &str| {
            let mut v: Vec<String> = std::fs::read_dir(root.join(d))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(list("sqlite"), list("postgres"));
        assert!(!list("sqlite").is_empty());
        assert_eq!(
            migration_names(Backend::Sqlite),
            migration_names(Backend::Postgres)
        );
    }
}
