//! The database handle over SQLite or PostgreSQL, chosen by the URL, the portable helpers every
//! query uses, and the SQL of the core tables (messages, threads, jobs, blobs, keys, used attestations, policy states, reports, the audit log)
//! and of erasing messages ([`erasure`]). A
//! transport's own tables have their SQL in the transport's folder (`store.rs` there), over the
//! same handle and helpers.
//!
//! Queries are runtime-checked and written once in a portable subset (`$n` placeholders, TEXT
//! ids, integer unix-millisecond times, `ON CONFLICT`, `RETURNING`); backend-specific SQL appears
//! only where semantics differ. SQLite (the `sqlite` module) runs statements on the calling task
//! with one writer connection (SQLite admits one writer at a time anyway, and this way writers
//! queue in-process instead of spinning on `SQLITE_BUSY`) and a pool of readers; PostgreSQL goes
//! through sqlx's pool.

pub mod attestations;
pub mod audit;
pub mod blobs;
pub mod blocks;
pub mod erasure;
pub mod jobs;
pub mod keys;
pub mod messages;
pub mod policy;
pub mod recent;
pub mod reports;
pub mod runs;
mod sqlite;
pub mod threads;
pub mod usage;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection, FromRow, PgConnection, PgPool, Postgres};

use crate::config::{DatabaseConfig, Durability};
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
    durability: Durability,
    /// The engine and where it is (`PostgreSQL at host:port`, `SQLite at path`), for errors
    /// and readiness; never a password.
    target: Arc<str>,
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

    /// Sends `lines` on the PostgreSQL channel `channel` once this transaction commits, in as few
    /// notifications as fit under PostgreSQL's payload limit (nothing on SQLite, which has one
    /// instance).
    ///
    /// # Errors
    /// Database errors.
    pub async fn notify_lines(&mut self, channel: &str, lines: &[String]) -> Result<()> {
        /// Below PostgreSQL's 8000-byte limit on a payload.
        const MAX_PAYLOAD: usize = 7000;
        if !matches!(self, Self::Postgres(_)) {
            return Ok(());
        }
        let mut payload = String::new();
        for line in lines {
            if !payload.is_empty() && payload.len() + line.len() + 1 > MAX_PAYLOAD {
                self.pg_notify(channel, &payload).await?;
                payload.clear();
            }
            if !payload.is_empty() {
                payload.push('\n');
            }
            payload.push_str(line);
        }
        if !payload.is_empty() {
            self.pg_notify(channel, &payload).await?;
        }
        Ok(())
    }

    async fn pg_notify(&mut self, channel: &str, payload: &str) -> Result<()> {
        self.execute(
            "SELECT pg_notify($1, $2)",
            &[Arg::Text(channel), Arg::Text(payload)],
        )
        .await
        .map(drop)
    }

    /// Commits; returns once the commit is as durable as `database.durability` promises
    /// ([`Durability`]: on disk with `fsync`).
    ///
    /// # Errors
    /// Database errors: nothing was committed, or (`fsync`) it is not known to be on disk.
    pub async fn commit(self) -> Result<()> {
        match self {
            Self::Sqlite(tx) => {
                // The writer is free again before the commit waits for the disk.
                if let Some(durable) = tx.commit()? {
                    durable.wait().await?;
                }
            }
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

/// What a group-commit writer ([`group_commit`]) commits: a batch of pending items in one
/// transaction, with one result per item.
#[async_trait::async_trait]
pub trait GroupCommit: Send + Sync + 'static {
    /// A pending item, with whatever its waiter is answered through.
    type Item: Send + 'static;
    /// What one item's waiter learns of a commit that succeeded.
    type Output: Send + 'static;
    /// What is left to do after a commit that its waiters need not wait for
    /// ([`GroupCommit::then`]).
    type Then: Send + 'static;

    /// The most items committed together.
    fn max_batch(&self) -> usize;

    /// Whether `item` can be committed with `batch`; when not, it waits for a later batch (the
    /// order of the items held back is kept). Every item can, unless said otherwise.
    fn joins(&self, batch: &[Self::Item], item: &Self::Item) -> bool {
        let _ = (batch, item);
        true
    }

    /// Commits `batch` in one transaction and does what its waiters must see done; returns one
    /// output per item, in order, and what is left to do once they are answered. On an error
    /// nothing was committed, and the items may be committed again (one by one).
    ///
    /// # Errors
    /// Database errors, or an item the batch cannot hold.
    async fn commit(&self, batch: &mut [Self::Item]) -> Result<(Vec<Self::Output>, Self::Then)>;

    /// Answers the waiter of `item`.
    fn answer(&self, item: Self::Item, result: Result<Self::Output>);

    /// Does what is left after a commit ([`GroupCommit::commit`]), once its waiters are
    /// answered: they are on their way while it runs, and the next batch waits for it. Nothing,
    /// unless said otherwise.
    fn then(&self, then: Self::Then) {
        drop(then);
    }
}

/// The error a waiter of a failed group commit is told: what it did wrong, never internal
/// detail (the writer logs that once).
fn for_waiter(e: &Error) -> Error {
    match e {
        Error::Invalid(why) => Error::Invalid(why.clone()),
        _ => Error::Unavailable,
    }
}

/// Runs a group-commit writer until every sender of `rx` is gone: waits for the first item of a
/// batch, lets every other runnable task add to it, takes what has queued up (at most
/// [`GroupCommit::max_batch`], holding back items that do not [`GroupCommit::joins`] it),
/// commits it in one transaction and answers each waiter. Without the pause, a writer woken by
/// the first item would commit it alone: the runtime runs a freshly woken task next, before the
/// tasks that are about to send more. When a batch of several fails, each of its items is
/// committed on its own, so that one bad item does not fail the others.
pub async fn group_commit<C: GroupCommit>(c: C, mut rx: tokio::sync::mpsc::Receiver<C::Item>) {
    let max = c.max_batch().max(1);
    let mut held: std::collections::VecDeque<C::Item> = std::collections::VecDeque::new();
    loop {
        let first = match held.pop_front() {
            Some(item) => item,
            None => match rx.recv().await {
                Some(item) => {
                    // Let the tasks that are about to send join this batch.
                    tokio::task::yield_now().await;
                    item
                }
                None => return,
            },
        };
        let mut batch = vec![first];
        let mut later = std::collections::VecDeque::new();
        while batch.len() < max {
            let next = match held.pop_front() {
                Some(item) => item,
                None => match rx.try_recv() {
                    Ok(item) => item,
                    Err(_) => break,
                },
            };
            if c.joins(&batch, &next) {
                batch.push(next);
            } else {
                later.push_back(next);
            }
        }
        later.append(&mut held);
        held = later;
        match c.commit(&mut batch).await {
            Ok((outputs, then)) => {
                answer_all(&c, batch, outputs);
                c.then(then);
            }
            Err(e) if batch.len() > 1 => {
                tracing::warn!(error = %e, n = batch.len(), "group commit failed; committing one by one");
                for item in batch {
                    let mut one = vec![item];
                    match c.commit(&mut one).await {
                        Ok((outputs, then)) => {
                            answer_all(&c, one, outputs);
                            c.then(then);
                        }
                        Err(e) => fail_all(&c, one, &e),
                    }
                }
            }
            Err(e) => fail_all(&c, batch, &e),
        }
    }
}

fn answer_all<C: GroupCommit>(c: &C, batch: Vec<C::Item>, outputs: Vec<C::Output>) {
    let n = outputs.len();
    let mut outputs = outputs.into_iter();
    for item in batch {
        match outputs.next() {
            Some(out) => c.answer(item, Ok(out)),
            None => {
                tracing::error!(
                    expected = n,
                    "group commit answered fewer items than it held"
                );
                c.answer(item, Err(Error::Unavailable));
            }
        }
    }
}

fn fail_all<C: GroupCommit>(c: &C, batch: Vec<C::Item>, e: &Error) {
    tracing::error!(error = %e, n = batch.len(), "group commit failed");
    for item in batch {
        c.answer(item, Err(for_waiter(e)));
    }
}

/// How long connecting to PostgreSQL may take, at start and when the pool opens a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection to PostgreSQL failed, in words that name the cause (connection refused,
/// an unknown host, a refused password) and never the password itself.
fn connect_cause(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::Tls(tls) => format!("TLS: {tls}"),
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
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
        let durability = cfg.durability();
        if url.starts_with("sqlite:") {
            let db = sqlite::Sqlite::open(
                url,
                cfg.max_connections,
                Duration::from_millis(cfg.busy_timeout_ms),
                durability,
            )?;
            let target = match sqlite::file_of(url) {
                Some(file) => format!("SQLite at {}", file.display()),
                None => "SQLite in memory".to_owned(),
            };
            Ok(Self {
                pools: Pools::Sqlite(Arc::new(db)),
                durability,
                target: target.into(),
            })
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            // Set on every connection, whatever the server's default: the mode is a promise.
            let synchronous_commit = match durability {
                Durability::Periodic => "off",
                Durability::Fsync => "on",
            };
            let opts = PgConnectOptions::from_str(url)?
                .options([("synchronous_commit", synchronous_commit)])
                .log_statements(log::LevelFilter::Trace)
                .log_slow_statements(log::LevelFilter::Warn, Duration::from_secs(1));
            // One connection first, on its own: a pool that cannot connect only says that it
            // timed out, while this says where and why.
            let target = match opts.get_socket() {
                Some(socket) => socket.display().to_string(),
                None => format!("{}:{}", opts.get_host(), opts.get_port()),
            };
            match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&opts)).await {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                }
                Ok(Err(e)) => {
                    return Err(Error::Connect(format!(
                        "PostgreSQL at {target}: {}",
                        connect_cause(&e)
                    )));
                }
                Err(_) => {
                    return Err(Error::Connect(format!(
                        "PostgreSQL at {target}: no answer within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    )));
                }
            }
            let pool = PgPoolOptions::new()
                .max_connections(cfg.max_connections.max(2))
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_lazy_with(opts);
            Ok(Self {
                pools: Pools::Postgres(pool),
                durability,
                target: format!("PostgreSQL at {target}").into(),
            })
        } else {
            Err(Error::Config(
                "database.url: must start with sqlite:, postgres:// or postgresql://".into(),
            ))
        }
    }

    /// Opens a database that exists already and applies the embedded migrations: what the
    /// operator's commands use, so that one run in the wrong directory, or without the
    /// configuration, fails instead of creating an empty database.
    ///
    /// # Errors
    /// [`Error::Config`] naming the missing SQLite file; as [`Db::open`].
    pub async fn open_existing(cfg: &DatabaseConfig) -> Result<Self> {
        if let Some(file) = sqlite::file_of(cfg.url.expose())
            && !file.exists()
        {
            let shown = std::path::absolute(&file).unwrap_or(file);
            return Err(Error::Config(format!(
                "database.url: no database at {} (only `switchboard serve` creates one); \
                 pass --config FILE or set SWITCHBOARD_CONFIG to the configuration of the \
                 server, or SWITCHBOARD__DATABASE__URL to its database",
                shown.display()
            )));
        }
        Self::open(cfg).await
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

    /// The engine and where it is: `PostgreSQL at host:port` (or its socket), `SQLite at
    /// path`, `SQLite in memory`.
    #[must_use]
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The engine.
    #[must_use]
    pub fn backend(&self) -> Backend {
        match self.pools {
            Pools::Sqlite(_) => Backend::Sqlite,
            Pools::Postgres(_) => Backend::Postgres,
        }
    }

    /// When commits return ([`Durability`]).
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// How many times commits have waited for an `fsync` of SQLite's WAL so far: with
    /// `durability = "fsync"`, one per sync however many commits it covered; 0 otherwise and
    /// on PostgreSQL (whose server flushes its WAL itself).
    #[must_use]
    pub fn wal_syncs(&self) -> u64 {
        match &self.pools {
            Pools::Sqlite(db) => db.syncs(),
            Pools::Postgres(_) => 0,
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

    /// Runs one writing statement in its own transaction (as durable as a commit).
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

    /// Wakes workers of `kind` on every other instance now (PostgreSQL `NOTIFY` outside a
    /// transaction; nothing on SQLite, which has one instance): for what a statement of its own
    /// made due. [`Tx::notify`] is the form for what a transaction commits.
    ///
    /// # Errors
    /// Database errors.
    pub async fn notify(&self, kind: &str) -> Result<()> {
        if let Pools::Postgres(_) = self.pools {
            self.execute(
                "SELECT pg_notify('switchboard_jobs', $1)",
                &[Arg::Text(kind)],
            )
            .await?;
        }
        Ok(())
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

    /// Commits numbers, two of the same last digit never together; fails a batch holding 13.
    struct Numbers(std::sync::Mutex<Vec<Vec<u32>>>);

    type Waiting = (u32, tokio::sync::oneshot::Sender<Result<u32>>);

    #[async_trait::async_trait]
    impl GroupCommit for Arc<Numbers> {
        type Item = Waiting;
        type Output = u32;
        type Then = ();

        fn max_batch(&self) -> usize {
            8
        }

        fn joins(&self, batch: &[Waiting], item: &Waiting) -> bool {
            batch.iter().all(|(n, _)| n % 10 != item.0 % 10)
        }

        async fn commit(&self, batch: &mut [Waiting]) -> Result<(Vec<u32>, ())> {
            if batch.iter().any(|(n, _)| *n == 13) {
                return Err(Error::Invalid("13".into()));
            }
            self.0
                .lock()
                .unwrap()
                .push(batch.iter().map(|(n, _)| *n).collect());
            Ok((batch.iter().map(|(n, _)| n * 2).collect(), ()))
        }

        fn answer(&self, item: Waiting, result: Result<u32>) {
            let _ = item.1.send(result);
        }
    }

    #[tokio::test]
    async fn group_commit_holds_back_what_cannot_join_and_isolates_a_bad_item() {
        let numbers = Arc::new(Numbers(std::sync::Mutex::new(Vec::new())));
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut answers = Vec::new();
        for n in [1, 11, 2, 13] {
            let (reply, answer) = tokio::sync::oneshot::channel();
            tx.send((n, reply)).await.unwrap();
            answers.push(answer);
        }
        drop(tx);
        group_commit(Arc::clone(&numbers), rx).await;
        let mut got = Vec::new();
        for a in answers {
            got.push(a.await.unwrap().map_err(|e| e.to_string()));
        }
        assert_eq!(got[0], Ok(2));
        assert_eq!(got[1], Ok(22));
        assert_eq!(got[2], Ok(4));
        assert!(got[3].as_ref().is_err_and(|e| e.contains("13")), "{got:?}");
        // 11 waited for the batch after 1's; the batch with 13 was retried item by item.
        assert_eq!(*numbers.0.lock().unwrap(), vec![vec![1], vec![2], vec![11]]);
    }

    fn config(url: &str, durability: Option<Durability>) -> DatabaseConfig {
        DatabaseConfig {
            url: crate::config::Secret::new(url),
            durability,
            ..DatabaseConfig::default()
        }
    }

    async fn insert(db: &Db, n: i64) {
        let mut tx = db.begin().await.unwrap();
        tx.execute("INSERT INTO t (n) VALUES ($1)", &[Arg::Int(n)])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    #[tokio::test]
    async fn sqlite_fsync_commits_return_after_a_wal_sync_shared_by_concurrent_commits() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("d.db").display());

        // Unset on SQLite: periodic, and a commit never waits for a sync.
        let db = Db::connect(&config(&url, None)).await.unwrap();
        assert_eq!(db.durability(), Durability::Periodic);
        db.execute("CREATE TABLE t (n INTEGER)", &[]).await.unwrap();
        insert(&db, 1).await;
        db.execute("INSERT INTO t (n) VALUES (2)", &[])
            .await
            .unwrap();
        assert_eq!(db.wal_syncs(), 0);
        db.close().await;

        let db = Db::connect(&config(&url, Some(Durability::Fsync)))
            .await
            .unwrap();
        assert_eq!(db.durability(), Durability::Fsync);
        // The sync is counted once it has returned, before the commit does.
        insert(&db, 3).await;
        assert_eq!(db.wal_syncs(), 1, "the commit returned before its sync");
        db.execute("INSERT INTO t (n) VALUES (4)", &[])
            .await
            .unwrap();
        assert_eq!(db.wal_syncs(), 2, "an autocommit write waits too");
        // Nothing written, nothing waiting on disk: no sync.
        db.begin().await.unwrap().commit().await.unwrap();
        db.execute("UPDATE t SET n = 0 WHERE n < 0", &[])
            .await
            .unwrap();
        assert_eq!(db.wal_syncs(), 2);

        // Commits made while a sync runs share the next one.
        let commits = 32;
        let tasks: Vec<_> = (0..commits)
            .map(|i| {
                let db = db.clone();
                tokio::spawn(async move { insert(&db, 100 + i).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let syncs = db.wal_syncs() - 2;
        assert!(
            (1..=commits / 2).contains(&(i64::try_from(syncs).unwrap())),
            "{syncs} syncs for {commits} concurrent commits"
        );
        let n: Vec<(i64,)> = db.fetch_all("SELECT COUNT(*) FROM t", &[]).await.unwrap();
        assert_eq!(n[0].0, 4 + commits);
        db.close().await;
    }

    #[tokio::test]
    async fn postgres_connections_run_with_the_synchronous_commit_of_the_mode() {
        let Some(base) = std::env::var("SWITCHBOARD_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
        else {
            eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: PostgreSQL leg skipped");
            return;
        };
        // A server (here: a connection option) that defaults to the other setting does not
        // change what the mode promises.
        let sep = if base.contains('?') { '&' } else { '?' };
        for (server, durability, want) in [
            ("on", Some(Durability::Periodic), "off"),
            ("off", Some(Durability::Fsync), "on"),
            ("off", None, "on"),
        ] {
            let url = format!("{base}{sep}options=-c%20synchronous_commit%3D{server}");
            let db = Db::connect(&config(&url, durability)).await.unwrap();
            let pool = db.postgres_pool().unwrap();
            // Every connection of the pool, not only the first.
            let mut conns = vec![pool.acquire().await.unwrap(), pool.acquire().await.unwrap()];
            for c in &mut conns {
                let (got,): (String,) = sqlx::query_as("SHOW synchronous_commit")
                    .fetch_one(&mut **c)
                    .await
                    .unwrap();
                assert_eq!(
                    got, want,
                    "{durability:?} on a server defaulting to {server}"
                );
            }
            drop(conns);
            assert_eq!(db.wal_syncs(), 0);
            db.close().await;
        }
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
