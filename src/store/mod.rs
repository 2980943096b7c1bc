//! The database handle over SQLite or PostgreSQL, chosen by the URL, and the only place that
//! writes SQL.
//!
//! Queries are runtime-checked and written once in a portable subset (`$n` placeholders, TEXT
//! ids, integer unix-millisecond times, `ON CONFLICT`, `RETURNING`); backend-specific SQL appears
//! only where semantics differ. SQLite gets one writer connection (SQLite admits one writer at a
//! time anyway, and this way writers queue in-process instead of spinning on `SQLITE_BUSY`) and
//! a pool of readers.

pub mod a2a;
pub mod blobs;
pub mod email;
pub mod jobs;
pub mod messages;

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{ConnectOptions, FromRow, PgPool, Postgres, Sqlite, SqlitePool};

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
    Sqlite { write: SqlitePool, read: SqlitePool },
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

/// A row type decodable from both engines.
pub trait Row: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin {}
impl<T> Row for T where T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{}

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
    Sqlite(sqlx::Transaction<'static, Sqlite>),
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
            Self::Sqlite(tx) => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query(&sql), args)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected()
            }
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
            Self::Sqlite(tx) => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query_as::<_, T>(&sql), args)
                    .fetch_all(&mut **tx)
                    .await?
            }
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
            Self::Sqlite(tx) => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query_as::<_, T>(&sql), args)
                    .fetch_optional(&mut **tx)
                    .await?
            }
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
            Self::Sqlite(tx) => tx.commit().await?,
            Self::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

/// For SQLite, rewrites `$1, $2, … $n` to anonymous `?` when every placeholder appears once and
/// in order (true of all multi-row statements). SQLite looks named parameters up by a linear
/// scan, so binding a statement with hundreds of `$N` costs time quadratic in their number;
/// anonymous ones bind by position.
fn sqlite_sql(sql: &str) -> std::borrow::Cow<'_, str> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let (mut expected, mut last, mut i) = (1usize, 0usize, 0usize);
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits > 0 {
                let n: usize = sql[i + 1..i + 1 + digits].parse().unwrap_or(0);
                if n != expected {
                    return std::borrow::Cow::Borrowed(sql);
                }
                expected += 1;
                out.push_str(&sql[last..i]);
                out.push('?');
                i += 1 + digits;
                last = i;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&sql[last..]);
    std::borrow::Cow::Owned(out)
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
            let base = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_millis(cfg.busy_timeout_ms))
                .foreign_keys(true)
                .log_statements(log::LevelFilter::Trace)
                .log_slow_statements(log::LevelFilter::Warn, Duration::from_secs(1));
            let memory = url.contains(":memory:") || url.contains("mode=memory");
            // An embedded file cannot hang up: no ping (a round trip to the connection's
            // thread) before every use.
            let write = SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .test_before_acquire(false)
                .connect_with(base.clone())
                .await?;
            let read = if memory {
                write.clone()
            } else {
                SqlitePoolOptions::new()
                    .max_connections(cfg.max_connections.max(1))
                    .test_before_acquire(false)
                    .connect_with(base)
                    .await?
            };
            Ok(Self {
                pools: Pools::Sqlite { write, read },
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
            Pools::Sqlite { write, .. } => SQLITE_MIGRATOR.run(write).await?,
            Pools::Postgres(pool) => POSTGRES_MIGRATOR.run(pool).await?,
        }
        Ok(())
    }

    /// The engine.
    #[must_use]
    pub fn backend(&self) -> Backend {
        match self.pools {
            Pools::Sqlite { .. } => Backend::Sqlite,
            Pools::Postgres(_) => Backend::Postgres,
        }
    }

    /// The PostgreSQL pool, for `LISTEN`.
    #[must_use]
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.pools {
            Pools::Postgres(p) => Some(p),
            Pools::Sqlite { .. } => None,
        }
    }

    /// Begins a write transaction.
    ///
    /// # Errors
    /// Database errors.
    pub async fn begin(&self) -> Result<Tx> {
        Ok(match &self.pools {
            Pools::Sqlite { write, .. } => Tx::Sqlite(write.begin().await?),
            Pools::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// Runs one writing statement in its own transaction.
    ///
    /// # Errors
    /// Database errors.
    pub async fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        Ok(match &self.pools {
            Pools::Sqlite { write, .. } => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query(&sql), args)
                    .execute(write)
                    .await?
                    .rows_affected()
            }
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
            Pools::Sqlite { write, .. } => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query_as::<_, T>(&sql), args)
                    .fetch_all(write)
                    .await?
            }
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
            Pools::Sqlite { read, .. } => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query_as::<_, T>(&sql), args)
                    .fetch_all(read)
                    .await?
            }
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
            Pools::Sqlite { read, .. } => {
                let sql = sqlite_sql(sql);
                bind_all!(sqlx::query_as::<_, T>(&sql), args)
                    .fetch_optional(read)
                    .await?
            }
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
        #[derive(sqlx::FromRow)]
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

    /// Closes the pools.
    pub async fn close(&self) {
        match &self.pools {
            Pools::Sqlite { write, read } => {
                read.close().await;
                write.close().await;
            }
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
    fn sqlite_placeholders_become_positional_only_when_in_order() {
        assert_eq!(
            sqlite_sql("VALUES ($1, $2), ($3, $4)"),
            "VALUES (?, ?), (?, ?)"
        );
        assert_eq!(
            sqlite_sql("SELECT '$x' WHERE a = $1"),
            "SELECT '$x' WHERE a = ?"
        );
        let reused = "UPDATE t SET a = $2 WHERE b = $1";
        assert_eq!(sqlite_sql(reused), reused);
        let twice = "SELECT $1 WHERE x = $1";
        assert_eq!(sqlite_sql(twice), twice);
    }

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
