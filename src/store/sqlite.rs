//! The embedded SQLite engine, driven through `rusqlite` on the calling task.
//!
//! A statement on a local file in WAL mode with `synchronous=NORMAL` takes microseconds and
//! never waits for the disk (commits append to the WAL without `fsync`), so it runs right where
//! it is called, never handed to a connection thread and back. What can take long is moved out
//! of the way: checkpoints (which copy the WAL into the database and `fsync`) run on a thread of their
//! own, and the writer never checkpoints.
//!
//! Durability ([`Durability`]): with `periodic` a commit returns once it is in the WAL and a
//! background thread flushes the WAL every [`SYNC_EVERY`]. With `fsync` a commit that wrote
//! something returns only once the WAL is flushed ([`WalSync`]): after the writer is released,
//! on a blocking thread, one `fsync` covering every commit made up to its start, so commits that
//! arrive while a sync runs share the next one (a group commit of many messages is one sync, and
//! concurrent group commits share theirs). `synchronous=FULL` would do the same sync inside each
//! `COMMIT`, on the runtime's thread, holding the writer.
//!
//! One writer connection, taken in turn by transactions (an async mutex, so a task waiting for
//! it yields instead of blocking its thread), and a small pool of reader connections that see
//! the last commit (WAL readers never wait for the writer). An in-memory database has only the
//! writer.
//!
//! Placeholders are PostgreSQL's `$n`; they become SQLite's `?n`, which binds by number too.
//! Rows are decoded with serde: a row is a map from column name to value.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde::de::{self, DeserializeOwned, IntoDeserializer};

use super::Arg;
use crate::config::Durability;
use crate::error::{Error, Result};

/// Statements slower than this are logged.
const SLOW: Duration = Duration::from_secs(1);

/// Prepared statements kept per connection (multi-row statements differ by their row count).
const STATEMENT_CACHE: usize = 256;

/// How often the WAL is flushed to the disk (`durability = "periodic"`). With
/// `synchronous=NORMAL` a commit is in the operating system's hands at once (a crash of the
/// process loses nothing) and on the disk by the next flush (what a power cut can lose).
const SYNC_EVERY: Duration = Duration::from_millis(100);

/// How often the checkpointer copies the WAL into the database, in ticks of [`SYNC_EVERY`].
/// Each checkpoint lets the next write start the WAL over, which flushes the WAL's header
/// inside that commit; one a second keeps that out of most commits, and copies a page written
/// many times once.
const CHECKPOINT_EVERY: u32 = 10;

/// WAL pages (4 KiB) past which the checkpointer, at its next checkpoint, makes sure the WAL
/// starts over (between checkpoints the WAL grows with whatever is written). A checkpoint
/// that runs beside the writer never catches up with it, so the WAL would grow without end;
/// past this size the checkpointer holds the writer back for one more checkpoint, which then
/// copies everything, and the next write starts the WAL from its beginning.
const WAL_RESTART_PAGES: i64 = 16_384;

/// Where the database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    File(String),
    Memory,
}

/// Parses `sqlite://path`, `sqlite:path`, `sqlite:///abs/path` and `sqlite::memory:` (a query
/// string such as `?mode=memory` is honoured for memory, otherwise ignored).
fn location(url: &str) -> Result<Location> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(|| Error::Config("database.url: not an sqlite: URL".into()))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let memory =
        path.is_empty() || path == ":memory:" || query.split('&').any(|kv| kv == "mode=memory");
    Ok(if memory {
        Location::Memory
    } else {
        Location::File(path.to_owned())
    })
}

/// The file an `sqlite:` URL names, when it names one (not an in-memory database).
pub(super) fn file_of(url: &str) -> Option<PathBuf> {
    match location(url) {
        Ok(Location::File(path)) => Some(PathBuf::from(path)),
        _ => None,
    }
}

fn open(loc: &Location, busy: Duration, writer: bool) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match loc {
        Location::File(path) => Connection::open_with_flags(path, flags)?,
        Location::Memory => Connection::open_in_memory()?,
    };
    conn.busy_timeout(busy)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Statement journals and temporary b-trees stay in memory: a multi-row statement of a
    // large batch would otherwise spill its journal to a file opened, written and deleted in
    // every transaction.
    conn.execute_batch(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY;",
    )?;
    if writer {
        // WAL is a property of the file: set once by the writer, before any reader opens.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if mode != "wal" && *loc != Location::Memory {
            tracing::warn!(mode, "SQLite did not switch to WAL");
        }
        // Checkpoints run on the checkpointer's thread, never inside a commit.
        if matches!(loc, Location::File(_)) {
            conn.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
        }
    }
    Ok(conn)
}

/// The SQLite side of [`super::Db`].
#[derive(Debug)]
pub(super) struct Sqlite {
    writer: Arc<tokio::sync::Mutex<Option<Connection>>>,
    readers: Option<Readers>,
    /// Dropped on close (or with the handle): tells the checkpointer to stop.
    checkpointer: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    /// With `durability = "fsync"` on a file: what makes commits wait for the disk.
    wal_sync: Option<Arc<WalSync>>,
}

/// Commits waiting for the WAL to reach the disk (`durability = "fsync"`).
///
/// Commits that wrote are numbered by the writer, under its lock, once `COMMIT` has written
/// them to the WAL file. A commit waits until the commits on disk reach its number: the first
/// waiter starts one `fsync` of the WAL, covering every commit numbered before the sync began;
/// waiters that sync does not cover queue for the next one, which covers them all.
#[derive(Debug)]
pub(super) struct WalSync {
    wal: PathBuf,
    dir: PathBuf,
    /// Commits written to the WAL file.
    written: AtomicU64,
    /// Commits known to be on disk.
    durable: AtomicU64,
    /// `fsync` calls made for waiting commits.
    syncs: AtomicU64,
    /// The directory was synced once (a WAL file created since the start must be found too).
    dir_synced: AtomicBool,
    /// One sync at a time.
    running: tokio::sync::Mutex<()>,
}

/// A commit's place in the WAL: it returns once the commits on disk reach it.
#[derive(Debug)]
pub(super) struct Durable {
    sync: Arc<WalSync>,
    upto: u64,
}

impl WalSync {
    fn new(path: &str) -> Self {
        let dir = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Self {
            wal: PathBuf::from(format!("{path}-wal")),
            dir,
            written: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            dir_synced: AtomicBool::new(false),
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Called by the writer, holding it, right after a `COMMIT`: when the commit changed rows
    /// (`changed`) it is numbered; either way it must wait for every commit written so far (a
    /// commit that wrote nothing may still have read, and acted on, one that is not yet on
    /// disk: a duplicate answered as such).
    fn committed(self: &Arc<Self>, changed: bool) -> Durable {
        let upto = if changed {
            self.written.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            self.written.load(Ordering::Acquire)
        };
        Durable {
            sync: Arc::clone(self),
            upto,
        }
    }

    async fn wait(&self, upto: u64) -> Result<()> {
        if self.durable.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let _one = self.running.lock().await;
        if self.durable.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        // Every commit numbered by now has been written to the WAL file: this sync covers it.
        let covers = self.written.load(Ordering::Acquire);
        let wal = self.wal.clone();
        let dir = (!self.dir_synced.load(Ordering::Acquire)).then(|| self.dir.clone());
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            match std::fs::File::open(&wal) {
                Ok(f) => f.sync_data()?,
                // No WAL (SQLite did not switch to WAL mode, which was warned about at start):
                // with synchronous=NORMAL a rollback-journal commit syncs itself.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            if let Some(dir) = dir {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = synced {
            // Whether the commits reached the disk is unknown: their callers are told so.
            tracing::error!(error = %e, wal = %self.wal.display(), "SQLite WAL sync failed");
            return Err(Error::Unavailable);
        }
        self.dir_synced.store(true, Ordering::Release);
        self.durable.fetch_max(covers, Ordering::AcqRel);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Durable {
    /// Returns once the commit is on disk.
    pub(super) async fn wait(self) -> Result<()> {
        self.sync.wait(self.upto).await
    }
}

/// Reader connections, opened as needed up to `max`.
#[derive(Debug)]
struct Readers {
    loc: Location,
    busy: Duration,
    idle: Mutex<Vec<Connection>>,
    permits: tokio::sync::Semaphore,
}

impl Sqlite {
    /// Opens the database, creating the file if missing.
    pub(super) fn open(
        url: &str,
        max_readers: u32,
        busy_timeout: Duration,
        durability: Durability,
    ) -> Result<Self> {
        let loc = location(url)?;
        let conn = open(&loc, busy_timeout, true)?;
        let file = match &loc {
            Location::File(_) => true,
            Location::Memory => false,
        };
        let readers = file.then(|| Readers {
            loc: loc.clone(),
            busy: busy_timeout,
            idle: Mutex::new(Vec::new()),
            permits: tokio::sync::Semaphore::new(usize::try_from(max_readers.max(1)).unwrap_or(1)),
        });
        let writer = Arc::new(tokio::sync::Mutex::new(Some(conn)));
        let wal_sync = match (&loc, durability) {
            (Location::File(path), Durability::Fsync) => Some(Arc::new(WalSync::new(path))),
            _ => None,
        };
        let checkpointer = match &loc {
            Location::File(path) => Some(spawn_checkpointer(
                path,
                busy_timeout,
                &writer,
                wal_sync.is_none(),
            )?),
            Location::Memory => None,
        };
        Ok(Self {
            writer,
            readers,
            checkpointer: Mutex::new(checkpointer),
            wal_sync,
        })
    }

    /// The WAL syncs commits have waited for so far (`durability = "fsync"`; none otherwise).
    pub(super) fn syncs(&self) -> u64 {
        self.wal_sync
            .as_ref()
            .map_or(0, |s| s.syncs.load(Ordering::Relaxed))
    }

    /// Applies the migrations not yet applied.
    pub(super) async fn migrate(&self, migrations: &sqlx::migrate::Migrator) -> Result<()> {
        let mut guard = self.writer.lock().await;
        migrate(guard.as_mut().ok_or(Error::Unavailable)?, migrations)
    }

    /// Begins a write transaction (`BEGIN IMMEDIATE`: the write lock is taken up front, so a
    /// transaction never fails half-way for want of it).
    pub(super) async fn begin(&self) -> Result<Tx> {
        let guard = Arc::clone(&self.writer).lock_owned().await;
        let mut tx = Tx {
            guard,
            open: false,
            changes: 0,
            wal_sync: self.wal_sync.clone(),
        };
        let conn = tx.conn()?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        tx.changes = conn.total_changes();
        tx.open = true;
        Ok(tx)
    }

    /// Runs one writing statement on its own (autocommit); returns once it is as durable as
    /// a commit.
    pub(super) async fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        self.autocommit(|conn| execute(conn, sql, args)).await
    }

    /// Runs one writing statement that returns rows, on its own; returns once it is as
    /// durable as a commit.
    pub(super) async fn write_fetch_all<T: DeserializeOwned>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<T>> {
        self.autocommit(|conn| fetch(conn, sql, args, usize::MAX))
            .await
    }

    /// Runs `statement` on the writer, outside a transaction, then (`durability = "fsync"`)
    /// waits, the writer released, until what it wrote is on disk.
    async fn autocommit<T>(&self, statement: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let (out, durable) = {
            let guard = self.writer.lock().await;
            let conn = live(guard.as_ref())?;
            let before = conn.total_changes();
            let out = statement(conn)?;
            let durable = self
                .wal_sync
                .as_ref()
                .map(|s| s.committed(conn.total_changes() != before));
            (out, durable)
        };
        if let Some(d) = durable {
            d.wait().await?;
        }
        Ok(out)
    }

    /// Runs a read-only query on a reader (the writer for an in-memory database).
    pub(super) async fn fetch<T: DeserializeOwned>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        limit: usize,
    ) -> Result<Vec<T>> {
        let Some(readers) = &self.readers else {
            let guard = self.writer.lock().await;
            return fetch(live(guard.as_ref())?, sql, args, limit);
        };
        let _permit = readers
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Unavailable)?;
        let idle = readers
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match idle {
            Some(c) => c,
            None => open(&readers.loc, readers.busy, false)?,
        };
        let rows = fetch(&conn, sql, args, limit);
        readers
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
        rows
    }

    /// Closes every connection; later calls fail with [`Error::Unavailable`].
    pub(super) async fn close(&self) {
        if let Some(r) = &self.readers {
            r.permits.close();
            r.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        }
        self.writer.lock().await.take();
        self.checkpointer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

fn live(conn: Option<&Connection>) -> Result<&Connection> {
    conn.ok_or(Error::Unavailable)
}

/// An open write transaction: it holds the writer until committed or dropped (rolled back).
#[derive(Debug)]
pub struct Tx {
    guard: tokio::sync::OwnedMutexGuard<Option<Connection>>,
    open: bool,
    /// The connection's change count when the transaction began.
    changes: u64,
    wal_sync: Option<Arc<WalSync>>,
}

impl Tx {
    fn conn(&self) -> Result<&Connection> {
        live(self.guard.as_ref())
    }

    pub(super) fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
        execute(self.conn()?, sql, args)
    }

    pub(super) fn fetch<T: DeserializeOwned>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        limit: usize,
    ) -> Result<Vec<T>> {
        fetch(self.conn()?, sql, args, limit)
    }

    /// Commits and releases the writer; what is returned, if anything, must be waited for
    /// before the commit counts as done (`durability = "fsync"`).
    pub(super) fn commit(mut self) -> Result<Option<Durable>> {
        let conn = self.conn()?;
        conn.execute_batch("COMMIT")?;
        let changed = conn.total_changes() != self.changes;
        self.open = false;
        Ok(self.wal_sync.as_ref().map(|s| s.committed(changed)))
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if self.open
            && let Some(conn) = self.guard.as_ref()
            && let Err(e) = conn.execute_batch("ROLLBACK")
        {
            tracing::error!(error = %e, "rolling back an SQLite transaction failed");
        }
    }
}

/// Rewrites `$n` placeholders to `?n` (same number, so a placeholder used twice binds once).
fn sqlite_sql(sql: &str) -> Cow<'_, str> {
    if !sql.contains('$') {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        if c == '$' && chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Arg::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Arg::OptText(Some(s)) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Arg::OptText(None) | Arg::OptInt(None) => ToSqlOutput::Borrowed(ValueRef::Null),
            Arg::Int(i) | Arg::OptInt(Some(i)) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Arg::Bytes(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

fn prepare<'c>(
    conn: &'c Connection,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<rusqlite::CachedStatement<'c>> {
    let mut stmt = conn.prepare_cached(&sqlite_sql(sql))?;
    for (i, a) in args.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, a)?;
    }
    Ok(stmt)
}

fn slow(started: Instant, sql: &str) {
    let took = started.elapsed();
    if took >= SLOW {
        let head: String = sql.chars().take(120).collect();
        tracing::warn!(?took, sql = %head, "slow SQLite statement");
    }
}

fn execute(conn: &Connection, sql: &str, args: &[Arg<'_>]) -> Result<u64> {
    let started = Instant::now();
    let mut stmt = prepare(conn, sql, args)?;
    let n = stmt.raw_execute()?;
    slow(started, sql);
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}

fn fetch<T: DeserializeOwned>(
    conn: &Connection,
    sql: &str,
    args: &[Arg<'_>],
    limit: usize,
) -> Result<Vec<T>> {
    let started = Instant::now();
    let mut stmt = prepare(conn, sql, args)?;
    let names: Vec<String> = stmt
        .column_names()
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(row) = rows.next()? else { break };
        out.push(T::deserialize(RowDe { row, names: &names }).map_err(Error::corrupt)?);
    }
    drop(rows);
    slow(started, sql);
    Ok(out)
}

/// Applies the migrations not yet applied, each in its own transaction, recording them as sqlx
/// does (`_sqlx_migrations`), so databases made by earlier versions carry on.
fn migrate(conn: &mut Connection, migrator: &sqlx::migrate::Migrator) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            success BOOLEAN NOT NULL,
            checksum BLOB NOT NULL,
            execution_time BIGINT NOT NULL
        );",
    )?;
    let applied: Vec<(i64, bool, Vec<u8>)> = conn
        .prepare("SELECT version, success, checksum FROM _sqlx_migrations")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if let Some((v, _, _)) = applied.iter().find(|(_, ok, _)| !ok) {
        return Err(sqlx::migrate::MigrateError::Dirty(*v).into());
    }
    // A migration this binary does not know: the database belongs to a newer version, which
    // this one must not run on (as sqlx refuses on PostgreSQL).
    if let Some((v, _, _)) = applied
        .iter()
        .find(|(v, _, _)| !migrator.iter().any(|m| m.version == *v))
    {
        return Err(sqlx::migrate::MigrateError::VersionMissing(*v).into());
    }
    for m in migrator.iter() {
        if m.migration_type.is_down_migration() {
            continue;
        }
        if let Some((_, _, sum)) = applied.iter().find(|(v, _, _)| *v == m.version) {
            if sum.as_slice() != &*m.checksum {
                return Err(sqlx::migrate::MigrateError::VersionMismatch(m.version).into());
            }
            continue;
        }
        let started = Instant::now();
        let tx = conn.transaction()?;
        tx.execute_batch(&m.sql)?;
        let took = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (?1, ?2, TRUE, ?3, ?4)",
            rusqlite::params![m.version, &*m.description, &*m.checksum, took],
        )?;
        tx.commit()?;
        tracing::info!(version = m.version, description = %m.description, "migration applied");
    }
    Ok(())
}

/// Flushes the WAL every [`SYNC_EVERY`] (when `flush`: commits do not flush it themselves) and
/// copies it into the database every [`CHECKPOINT_EVERY`] ticks, on a thread of its own (with
/// its own connection), so no commit waits for a checkpoint; past [`WAL_RESTART_PAGES`] it
/// holds the writer back for a checkpoint that catches up, so the WAL starts over instead of
/// growing. Only `PASSIVE` checkpoints: they never
/// wait for readers or take the write lock (a checkpoint that did would make the writer wait in
/// SQLite's busy handler, on its runtime's thread, for as long as readers keep coming). Stops
/// when the returned sender is dropped.
fn spawn_checkpointer(
    path: &str,
    busy: Duration,
    writer: &Arc<tokio::sync::Mutex<Option<Connection>>>,
    flush: bool,
) -> Result<std::sync::mpsc::Sender<()>> {
    let conn = open(&Location::File(path.to_owned()), busy, false)?;
    let wal = format!("{path}-wal");
    let writer = Arc::clone(writer);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let checkpoint = move |mode: &str| -> rusqlite::Result<i64> {
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))
    };
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            let mut ticks = 0u32;
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(SYNC_EVERY)
            {
                ticks = ticks.wrapping_add(1);
                if !ticks.is_multiple_of(CHECKPOINT_EVERY) {
                    // A checkpoint flushes the WAL itself; between them, this does, unless
                    // every commit already waits for its own flush. (No WAL yet means nothing
                    // to flush.)
                    if flush
                        && let Ok(f) = std::fs::File::open(&wal)
                        && let Err(e) = f.sync_data()
                    {
                        tracing::warn!(error = %e, "SQLite WAL flush failed");
                    }
                    continue;
                }
                match checkpoint("PASSIVE") {
                    Ok(pages) if pages >= WAL_RESTART_PAGES => {
                        let guard = writer.blocking_lock();
                        if guard.is_none() {
                            break;
                        }
                        // Nothing is written meanwhile, so this one copies the rest.
                        if let Err(e) = checkpoint("PASSIVE") {
                            tracing::warn!(error = %e, pages, "SQLite checkpoint failed");
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "SQLite checkpoint failed"),
                }
            }
        })
        .map_err(|e| Error::Startup(format!("SQLite checkpointer: {e}")))?;
    Ok(tx)
}

/// A row, decoded as a map from column name to value (a struct), or as a sequence (a tuple).
struct RowDe<'a, 'stmt> {
    row: &'a rusqlite::Row<'stmt>,
    names: &'a [String],
}

/// A failed decode.
#[derive(Debug)]
struct DecodeError(String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

impl From<rusqlite::Error> for DecodeError {
    fn from(e: rusqlite::Error) -> Self {
        Self(e.to_string())
    }
}

impl<'de> de::Deserializer<'de> for RowDe<'_, '_> {
    type Error = DecodeError;

    fn deserialize_any<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_map(Columns {
            row: self.row,
            names: self.names,
            at: 0,
        })
    }

    fn deserialize_seq<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        v.visit_seq(Columns {
            row: self.row,
            names: self.names,
            at: 0,
        })
    }

    fn deserialize_tuple<V: de::Visitor<'de>>(
        self,
        _len: usize,
        v: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(v)
    }

    fn deserialize_tuple_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        v: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(v)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct map struct enum identifier ignored_any
    }
}

struct Columns<'a, 'stmt> {
    row: &'a rusqlite::Row<'stmt>,
    names: &'a [String],
    at: usize,
}

impl<'de> de::MapAccess<'de> for Columns<'_, '_> {
    type Error = DecodeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        match self.names.get(self.at) {
            Some(name) => seed
                .deserialize(name.as_str().into_deserializer())
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let value = self.row.get_ref(self.at)?;
        self.at += 1;
        seed.deserialize(ValueDe(value))
    }
}

impl<'de> de::SeqAccess<'de> for Columns<'_, '_> {
    type Error = DecodeError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        if self.at >= self.names.len() {
            return Ok(None);
        }
        let value = self.row.get_ref(self.at)?;
        self.at += 1;
        seed.deserialize(ValueDe(value)).map(Some)
    }
}

/// One column's value.
struct ValueDe<'a>(ValueRef<'a>);

impl<'de> de::Deserializer<'de> for ValueDe<'_> {
    type Error = DecodeError;

    fn deserialize_any<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            ValueRef::Null => v.visit_unit(),
            ValueRef::Integer(i) => v.visit_i64(i),
            ValueRef::Real(f) => v.visit_f64(f),
            ValueRef::Text(t) => {
                v.visit_str(std::str::from_utf8(t).map_err(<DecodeError as de::Error>::custom)?)
            }
            ValueRef::Blob(b) => v.visit_bytes(b),
        }
    }

    fn deserialize_option<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            ValueRef::Null => v.visit_none(),
            _ => v.visit_some(self),
        }
    }

    fn deserialize_bool<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            ValueRef::Integer(i) => v.visit_bool(i != 0),
            _ => self.deserialize_any(v),
        }
    }

    /// `Vec<u8>` asks for a sequence: a BLOB is one, of bytes.
    fn deserialize_seq<V: de::Visitor<'de>>(self, v: V) -> Result<V::Value, DecodeError> {
        match self.0 {
            ValueRef::Blob(b) => v.visit_seq(de::value::SeqDeserializer::new(b.iter().copied())),
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_newtype_struct<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, DecodeError> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct tuple tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_numbered() {
        assert_eq!(
            sqlite_sql("VALUES ($1, $2), ($3, $4)"),
            "VALUES (?1, ?2), (?3, ?4)"
        );
        assert_eq!(
            sqlite_sql("UPDATE t SET a = $2 WHERE b = $1 AND c = $1"),
            "UPDATE t SET a = ?2 WHERE b = ?1 AND c = ?1"
        );
        assert_eq!(sqlite_sql("SELECT '$x'"), "SELECT '$x'");
        assert!(matches!(sqlite_sql("SELECT 1"), Cow::Borrowed(_)));
    }

    #[test]
    fn urls() {
        assert_eq!(
            location("sqlite://switchboard.db").unwrap(),
            Location::File("switchboard.db".into())
        );
        assert_eq!(
            location("sqlite:///tmp/x.db?mode=rwc").unwrap(),
            Location::File("/tmp/x.db".into())
        );
        assert_eq!(location("sqlite::memory:").unwrap(), Location::Memory);
        assert_eq!(
            location("sqlite://x.db?mode=memory").unwrap(),
            Location::Memory
        );
        assert!(location("postgres://x").is_err());
    }

    #[test]
    fn a_database_of_a_newer_version_is_refused() {
        let migrator = &super::super::SQLITE_MIGRATOR;
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, migrator).unwrap();
        migrate(&mut conn, migrator).unwrap();
        conn.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
             execution_time) VALUES (99991231000000, 'from a newer release', TRUE, x'00', 0)",
            [],
        )
        .unwrap();
        let e = migrate(&mut conn, migrator).unwrap_err();
        assert!(
            matches!(
                e,
                crate::error::Error::Migrate(sqlx::migrate::MigrateError::VersionMissing(
                    99_991_231_000_000
                ))
            ),
            "{e:?}"
        );
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Row {
        id: String,
        n: i64,
        maybe: Option<String>,
        none: Option<i64>,
        data: Vec<u8>,
        flag: bool,
    }

    #[test]
    fn rows_decode_into_structs_and_tuples() {
        let conn = Connection::open_in_memory().unwrap();
        let rows: Vec<Row> = fetch(
            &conn,
            "SELECT $1 AS id, $2 AS n, $3 AS maybe, NULL AS none, $4 AS data, 1 AS flag",
            &[
                Arg::Text("a"),
                Arg::Int(7),
                Arg::OptText(Some("m")),
                Arg::Bytes(&[1, 2, 3]),
            ],
            usize::MAX,
        )
        .unwrap();
        assert_eq!(
            rows,
            vec![Row {
                id: "a".into(),
                n: 7,
                maybe: Some("m".into()),
                none: None,
                data: vec![1, 2, 3],
                flag: true,
            }]
        );
        let t: Vec<(String, i64)> =
            fetch(&conn, "SELECT 'x', 2 UNION ALL SELECT 'y', 3", &[], 1).unwrap();
        assert_eq!(t, vec![("x".to_owned(), 2)]);
        let bad: Result<Vec<Row>> = fetch(&conn, "SELECT 1 AS id", &[], usize::MAX);
        assert!(matches!(bad, Err(Error::Corrupt(_))));
    }
}
