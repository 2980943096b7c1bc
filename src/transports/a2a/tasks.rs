//! Durable tasks: every change of a task is committed together with the stream events it
//! produced (a per-task sequence), then announced in-process and, on PostgreSQL, to every
//! instance through `LISTEN/NOTIFY`. Streams, blocking sends and resubscriptions read the stored
//! events, so a restart or a reconnect loses nothing.
//!
//! Writes go through one writer task that commits every pending change in a single transaction
//! (group commit, as ingest does): a change is read and decided by its caller, then written
//! only if the task is still as it was read; a caller whose task moved on meanwhile decides
//! again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::push;
use super::wire::{RpcError, TaskState, timestamp};
use crate::clock::SharedClock;
use crate::error::Error;
use crate::queue::Queue;
use crate::store::Db;
use crate::store::a2a::{self as sql, EventRow, TaskRow};
use crate::store::jobs::{self, NewJob};

/// How many times a change is retried when another writer changed the task first.
const MAX_CONFLICTS: usize = 8;

/// The most task writes committed together.
const MAX_BATCH: usize = 64;

/// How many rows [`Recent`] holds before it starts over.
const RECENT_MAX: usize = 4096;

/// How many bytes of task documents [`Recent`] holds before it starts over.
const RECENT_BYTES: usize = 16 << 20;

/// Task documents larger than this are not remembered (read back instead).
const RECENT_ROW_MAX: usize = 64 << 10;

/// The tasks this instance wrote last, as written, so that the next change of a task and the
/// wait for its turn's end need not read it back. A row another instance changed since is
/// caught by the guarded write (and forgotten when that instance's notification arrives).
#[derive(Debug, Default)]
struct Recent(std::sync::Mutex<RecentRows>);

#[derive(Debug, Default)]
struct RecentRows {
    rows: std::collections::HashMap<String, TaskRow>,
    bytes: usize,
}

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, RecentRows> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<TaskRow> {
        self.lock().rows.get(id).cloned()
    }

    fn put(&self, row: &TaskRow) {
        let mut r = self.lock();
        if let Some(old) = r.rows.remove(&row.id) {
            r.bytes -= old.body.len();
        }
        if row.body.len() > RECENT_ROW_MAX {
            return;
        }
        if r.rows.len() >= RECENT_MAX || r.bytes + row.body.len() > RECENT_BYTES {
            r.rows.clear();
            r.bytes = 0;
        }
        r.bytes += row.body.len();
        r.rows.insert(row.id.clone(), row.clone());
    }

    fn forget(&self, id: &str) {
        let mut r = self.lock();
        if let Some(old) = r.rows.remove(id) {
            r.bytes -= old.body.len();
        }
    }
}

/// Logs an internal error and hides it from the caller.
pub(super) fn internal(e: &Error) -> RpcError {
    tracing::error!(error = %e, "A2A request failed");
    RpcError::new(super::wire::INTERNAL_ERROR, "Internal error")
}

/// The task store with its change notifications.
#[derive(Debug, Clone)]
pub struct TaskEngine {
    db: Db,
    clock: SharedClock,
    hub: broadcast::Sender<Arc<str>>,
    queue: Arc<Queue>,
    writes: mpsc::Sender<PendingWrite>,
    recent: Arc<Recent>,
}

/// One write of the task writer.
#[derive(Debug)]
enum Write {
    /// A new task with its first events, unless its idempotency key is taken or its message
    /// is a resend of a running task's (of its owner, and of its agent unless `any_agent`).
    Create {
        row: TaskRow,
        events: Vec<(i64, String)>,
        idempotency_key: Option<String>,
        any_agent: bool,
    },
    /// A changed task with its new events, if its last event is still `expected`.
    Update {
        row: TaskRow,
        expected: i64,
        events: Vec<(i64, String)>,
    },
}

impl Write {
    fn task_id(&self) -> &str {
        match self {
            Self::Create { row, .. } | Self::Update { row, .. } => &row.id,
        }
    }

    fn events(&self) -> &[(i64, String)] {
        match self {
            Self::Create { events, .. } | Self::Update { events, .. } => events,
        }
    }
}

/// What became of a write.
#[derive(Debug)]
enum Written {
    /// Committed.
    Yes,
    /// Not written: the idempotency key was taken, or the task changed since it was read.
    No,
    /// Not written: the message is the current turn of this running task.
    Resent(Box<TaskRow>),
}

/// A write waiting for its commit.
#[derive(Debug)]
struct PendingWrite {
    write: Write,
    reply: oneshot::Sender<crate::error::Result<Written>>,
}

/// What [`TaskEngine::create`] did.
#[derive(Debug)]
pub(super) enum Created {
    /// The task is stored.
    New,
    /// Another request with the same idempotency key got there first.
    KeyTaken,
    /// The message is a resend of the current turn of this running task.
    Resent(Box<TaskRow>),
}

/// What a change function decided.
pub(super) enum Change {
    /// Nothing to write.
    Keep,
    /// Write the task with these new events (1.0 StreamResponses).
    Write(Vec<Value>),
}

impl TaskEngine {
    /// An engine over `db`; starts its writer (on the current runtime).
    #[must_use]
    pub fn new(db: Db, clock: SharedClock, queue: Arc<Queue>) -> Self {
        let (hub, _) = broadcast::channel(4096);
        let (writes, rx) = mpsc::channel(4096);
        let recent = Arc::new(Recent::default());
        let writer = Writer {
            db: db.clone(),
            clock: clock.clone(),
            hub: hub.clone(),
            queue: Arc::clone(&queue),
            recent: Arc::clone(&recent),
        };
        tokio::spawn(writer.run(rx));
        Self {
            db,
            clock,
            hub,
            queue,
            writes,
            recent,
        }
    }

    /// Hands `write` to the writer and waits for its commit.
    async fn write(&self, write: Write) -> crate::error::Result<Written> {
        let (reply, rx) = oneshot::channel();
        self.writes
            .send(PendingWrite { write, reply })
            .await
            .map_err(|_| Error::Unavailable)?;
        rx.await.map_err(|_| Error::Unavailable)?
    }

    /// The database.
    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    /// The current time (unix ms).
    pub(super) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Tells local waiters that `task_id` changed on another instance (PostgreSQL
    /// notifications; this instance's own writes are announced by its writer).
    pub fn announce(&self, task_id: &str) {
        self.recent.forget(task_id);
        let _ = self.hub.send(Arc::from(task_id));
    }

    /// A receiver of change announcements.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.hub.subscribe()
    }

    /// Reads a task.
    pub(super) async fn get(&self, id: &str) -> Result<Option<TaskRow>, RpcError> {
        sql::get_task(&self.db, id).await.map_err(|e| internal(&e))
    }

    /// The task as this instance last wrote it, else as stored.
    async fn current(&self, id: &str) -> Result<Option<TaskRow>, RpcError> {
        match self.recent.get(id) {
            Some(row) => Ok(Some(row)),
            None => self.get(id).await,
        }
    }

    /// Stores a new task with its first events, unless its idempotency key is taken or its
    /// message (`wire_message_id`) is the current turn of a running task of the same owner —
    /// and of the same agent, unless `any_agent` (the hub, where the agent was inferred).
    pub(super) async fn create(
        &self,
        row: &TaskRow,
        events: &[(i64, String)],
        idempotency_key: Option<&str>,
        any_agent: bool,
    ) -> Result<Created, RpcError> {
        let written = self
            .write(Write::Create {
                row: row.clone(),
                events: events.to_vec(),
                idempotency_key: idempotency_key.map(str::to_owned),
                any_agent,
            })
            .await
            .map_err(|e| internal(&e))?;
        Ok(match written {
            Written::Yes => Created::New,
            Written::No => Created::KeyTaken,
            Written::Resent(row) => Created::Resent(row),
        })
    }

    /// Applies `f` to the task and commits the task with the events it returns, retrying
    /// when another writer got there first. Returns the task as written (or as found, for
    /// [`Change::Keep`]); `None` when the task does not exist.
    pub(super) async fn update<F>(&self, id: &str, mut f: F) -> Result<Option<TaskRow>, RpcError>
    where
        F: FnMut(&mut TaskRow, &mut Value, i64) -> Result<Change, RpcError> + Send,
    {
        for attempt in 0..MAX_CONFLICTS {
            let read = if attempt == 0 {
                self.current(id).await?
            } else {
                // The row remembered (or read) was out of date: read what is stored.
                self.recent.forget(id);
                self.get(id).await?
            };
            let Some(mut row) = read else {
                return Ok(None);
            };
            let mut task: Value =
                serde_json::from_str(&row.body).map_err(|e| internal(&Error::Corrupt(e)))?;
            let now = self.now();
            let events = match f(&mut row, &mut task, now)? {
                Change::Keep => return Ok(Some(row)),
                Change::Write(events) => events,
            };
            let expected = row.last_seq;
            let numbered: Vec<(i64, String)> = events
                .iter()
                .enumerate()
                .map(|(i, e)| (expected + 1 + i64::try_from(i).unwrap_or(0), e.to_string()))
                .collect();
            row.last_seq = expected + i64::try_from(numbered.len()).unwrap_or(0);
            row.body = task.to_string();
            let written = self
                .write(Write::Update {
                    row: row.clone(),
                    expected,
                    events: numbered,
                })
                .await;
            if matches!(written.map_err(|e| internal(&e))?, Written::Yes) {
                return Ok(Some(row));
            }
        }
        Err(RpcError::new(
            super::wire::INTERNAL_ERROR,
            "the task is changing too fast; retry",
        ))
    }

    /// Pushes events already stored to one config: those of the turn a message carrying that
    /// config (inline in SendMessage) started before the config itself was stored.
    pub(super) async fn push_stored(
        &self,
        task_id: &str,
        config_id: &str,
        seqs: &[i64],
    ) -> Result<(), RpcError> {
        let result: crate::error::Result<()> = async {
            let mut tx = self.db.begin().await?;
            enqueue_push_jobs(
                &self.queue,
                &mut tx,
                task_id,
                &[config_id.to_owned()],
                seqs,
                self.now(),
            )
            .await?;
            tx.commit().await
        }
        .await;
        result.map_err(|e| internal(&e))?;
        self.queue.wake(push::KIND);
        Ok(())
    }

    /// Sets the task's status, returning the `statusUpdate` event to store.
    pub(super) fn set_status(
        row: &mut TaskRow,
        task: &mut Value,
        state: TaskState,
        message: Option<Value>,
        now: i64,
    ) -> Value {
        let mut status = json!({ "state": state.v1(), "timestamp": timestamp(now) });
        if let Some(m) = message {
            status["message"] = m;
        }
        task["status"] = status.clone();
        row.state = state.v1().to_owned();
        row.status_at = now;
        json!({ "statusUpdate": {
            "taskId": row.id, "contextId": row.context_id, "status": status,
        }})
    }

    /// Events of a task after `seq`.
    pub(super) async fn events_after(&self, id: &str, seq: i64) -> Result<Vec<EventRow>, RpcError> {
        sql::events_after(&self.db, id, seq)
            .await
            .map_err(|e| internal(&e))
    }

    /// Waits until the task ends its turn (terminal or interrupted) or `timeout` passes;
    /// returns the task as it then is.
    pub(super) async fn wait_turn_end(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<TaskRow>, RpcError> {
        let mut rx = self.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Some(row) = self.current(id).await? else {
                return Ok(None);
            };
            let ended = TaskState::parse(&row.state).is_none_or(TaskState::ends_turn);
            let now = tokio::time::Instant::now();
            if ended || now >= deadline {
                return Ok(Some(row));
            }
            wait_for(&mut rx, id, (deadline - now).min(Duration::from_secs(1))).await;
        }
    }
}

/// One push job per config and event sequence number.
async fn enqueue_push_jobs(
    queue: &Queue,
    tx: &mut crate::store::Tx,
    task_id: &str,
    configs: &[String],
    seqs: &[i64],
    now: i64,
) -> crate::error::Result<()> {
    let mut ids = Vec::new();
    let mut payloads = Vec::new();
    for c in configs {
        for seq in seqs {
            ids.push(push::job_id(task_id, c, *seq));
            payloads.push(
                serde_json::to_string(&push::PushJob {
                    task_id: task_id.to_owned(),
                    config_id: c.clone(),
                    seq: *seq,
                })
                .map_err(Error::Corrupt)?,
            );
        }
    }
    let max_attempts = queue.max_attempts(push::KIND);
    let jobs: Vec<NewJob<'_>> = ids
        .iter()
        .zip(&payloads)
        .map(|(id, payload)| NewJob {
            id,
            kind: push::KIND,
            payload,
            max_attempts,
            run_at: now,
        })
        .collect();
    jobs::enqueue_many(tx, &jobs, now).await?;
    tx.notify(push::KIND).await?;
    Ok(())
}

/// The task writer: commits pending writes together.
struct Writer {
    db: Db,
    clock: SharedClock,
    hub: broadcast::Sender<Arc<str>>,
    queue: Arc<Queue>,
    recent: Arc<Recent>,
}

impl Writer {
    async fn run(self, mut rx: mpsc::Receiver<PendingWrite>) {
        // Writes held back because their task already has one in the batch: a task is written
        // once per statement, and its writes keep their order.
        let mut held: std::collections::VecDeque<PendingWrite> = std::collections::VecDeque::new();
        loop {
            let first = match held.pop_front() {
                Some(p) => p,
                None => match rx.recv().await {
                    Some(p) => p,
                    None => return,
                },
            };
            let mut tasks = std::collections::HashSet::from([first.write.task_id().to_owned()]);
            let mut batch = vec![first];
            let mut later = std::collections::VecDeque::new();
            while batch.len() < MAX_BATCH {
                let next = match held.pop_front() {
                    Some(p) => p,
                    None => match rx.try_recv() {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                };
                if tasks.insert(next.write.task_id().to_owned()) {
                    batch.push(next);
                } else {
                    later.push_back(next);
                }
            }
            later.append(&mut held);
            held = later;
            match self.commit(&batch).await {
                Ok(written) => self.answer(batch, written),
                Err(e) if batch.len() > 1 => {
                    // One bad write must not fail the others: retry each on its own.
                    tracing::warn!(error = %e, n = batch.len(), "batched task write failed; writing one by one");
                    for p in batch {
                        let one = [p];
                        match self.commit(&one).await {
                            Ok(written) => self.answer(one.into(), written),
                            Err(e) => {
                                let [p] = one;
                                let _ = p.reply.send(Err(e));
                            }
                        }
                    }
                }
                Err(e) => {
                    for p in batch {
                        let _ = p.reply.send(Err(clone_error(&e)));
                    }
                }
            }
        }
    }

    /// Tells each writer what became of its write; announces changed tasks.
    fn answer(&self, batch: Vec<PendingWrite>, written: Vec<Written>) {
        for (p, w) in batch.into_iter().zip(written) {
            let ok = matches!(w, Written::Yes);
            match &p.write {
                Write::Create { row, .. } if ok => self.recent.put(row),
                Write::Update { row, .. } if ok => {
                    self.recent.put(row);
                    let _ = self.hub.send(Arc::from(row.id.as_str()));
                }
                _ => {}
            }
            let _ = p.reply.send(Ok(w));
        }
    }

    /// Commits a batch in one transaction; returns, per write, what became of it.
    async fn commit(&self, batch: &[PendingWrite]) -> crate::error::Result<Vec<Written>> {
        let now = self.clock.now_ms();
        let mut tx = self.db.begin().await?;
        let mut outcome: Vec<Written> = batch.iter().map(|_| Written::Yes).collect();
        // Resends: a new task's message that is the current turn of a running task (stored, or
        // created earlier in this batch) attaches to that task instead.
        let turns: Vec<(&str, &str)> = batch
            .iter()
            .filter_map(|p| match &p.write {
                Write::Create { row, .. } => {
                    Some((row.owner.as_str(), row.wire_message_id.as_str()))
                }
                Write::Update { .. } => None,
            })
            .collect();
        let running = [TaskState::Submitted.v1(), TaskState::Working.v1()];
        let mut known = sql::tasks_by_wire_message(&mut tx, &turns, &running).await?;
        for (o, p) in outcome.iter_mut().zip(batch) {
            let Write::Create {
                row,
                idempotency_key,
                any_agent,
                ..
            } = &p.write
            else {
                continue;
            };
            let resent = known.iter().find(|k| {
                k.owner == row.owner
                    && k.wire_message_id == row.wire_message_id
                    && (*any_agent || k.agent.eq_ignore_ascii_case(&row.agent))
            });
            if let Some(k) = resent {
                *o = Written::Resent(Box::new(k.clone()));
                continue;
            }
            if let Some(key) = idempotency_key
                && !sql::claim_idempotency_key(&mut tx, &row.owner, key, &row.id, row.created_at)
                    .await?
            {
                *o = Written::No;
                continue;
            }
            known.insert(0, row.clone());
        }
        let mut written: Vec<bool> = outcome.iter().map(|o| matches!(o, Written::Yes)).collect();
        let creates: Vec<&TaskRow> = batch
            .iter()
            .zip(&written)
            .filter_map(|(p, ok)| match &p.write {
                Write::Create { row, .. } if *ok => Some(row),
                _ => None,
            })
            .collect();
        sql::insert_tasks(&mut tx, &creates).await?;
        let changes: Vec<(&TaskRow, i64)> = batch
            .iter()
            .filter_map(|p| match &p.write {
                Write::Update { row, expected, .. } => Some((row, *expected)),
                Write::Create { .. } => None,
            })
            .collect();
        let updated = sql::update_tasks(&mut tx, &changes).await?;
        for (ok, p) in written.iter_mut().zip(batch) {
            if let Write::Update { row, .. } = &p.write {
                *ok = updated.contains(&row.id);
            }
        }
        let events: Vec<(&str, i64, &str)> = batch
            .iter()
            .zip(&written)
            .filter(|(_, ok)| **ok)
            .flat_map(|(p, _)| {
                let id = p.write.task_id();
                p.write
                    .events()
                    .iter()
                    .map(move |(seq, body)| (id, *seq, body.as_str()))
            })
            .collect();
        sql::insert_events(&mut tx, &events, now).await?;
        // Pushes: one job per config of a changed task and new event (a new task has none).
        let changed: Vec<&PendingWrite> = batch
            .iter()
            .zip(&written)
            .filter(|(p, ok)| **ok && matches!(p.write, Write::Update { .. }))
            .map(|(p, _)| p)
            .collect();
        let with_events: Vec<&str> = changed
            .iter()
            .filter(|p| !p.write.events().is_empty())
            .map(|p| p.write.task_id())
            .collect();
        let configs = sql::push_config_ids(&mut tx, &with_events).await?;
        let mut pushed = false;
        for p in &changed {
            let id = p.write.task_id();
            let ids: Vec<String> = configs
                .iter()
                .filter(|(task, _)| task == id)
                .map(|(_, c)| c.clone())
                .collect();
            if ids.is_empty() || p.write.events().is_empty() {
                continue;
            }
            let seqs: Vec<i64> = p.write.events().iter().map(|(seq, _)| *seq).collect();
            enqueue_push_jobs(&self.queue, &mut tx, id, &ids, &seqs, now).await?;
            pushed = true;
        }
        for p in &changed {
            sql::notify_task(&mut tx, p.write.task_id()).await?;
        }
        tx.commit().await?;
        if pushed {
            self.queue.wake(push::KIND);
        }
        Ok(outcome
            .into_iter()
            .zip(written)
            .map(|(o, ok)| match o {
                Written::Yes if !ok => Written::No,
                o => o,
            })
            .collect())
    }
}

/// The same error for another waiter of a failed batch (the caller learns only that the
/// database failed).
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Invalid(why) => Error::Invalid(why.clone()),
        _ => Error::Unavailable,
    }
}

/// Waits for an announcement about `id`, at most `limit` (announcements can be missed when the
/// channel lags: callers re-read the database after every wake-up anyway).
pub(super) async fn wait_for(rx: &mut broadcast::Receiver<Arc<str>>, id: &str, limit: Duration) {
    let _ = tokio::time::timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(t) if &*t == id => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    std::future::pending::<()>().await;
                }
            }
        }
    })
    .await;
}

/// Whether a stored StreamResponse ends a stream (a status update to a terminal or
/// interrupted state, or a direct message).
#[must_use]
pub fn ends_stream(event: &Value) -> bool {
    if event.get("message").is_some() {
        return true;
    }
    let state = event
        .pointer("/statusUpdate/status/state")
        .or_else(|| event.pointer("/task/status/state"))
        .and_then(Value::as_str);
    state
        .and_then(TaskState::parse)
        .is_some_and(TaskState::ends_turn)
}

/// Forwards `NOTIFY switchboard_a2a` from other instances to local waiters (PostgreSQL only).
pub fn spawn_listener(
    engine: TaskEngine,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let pool = engine.db.postgres_pool()?.clone();
    Some(tokio::spawn(async move {
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "A2A listener cannot connect; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(e) = listener.listen(sql::NOTIFY_CHANNEL).await {
                tracing::warn!(error = %e, "A2A LISTEN failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            loop {
                tokio::select! {
                    _ = shutdown.changed() => return,
                    n = listener.recv() => match n {
                        Ok(n) => engine.announce(n.payload()),
                        Err(e) => {
                            tracing::warn!(error = %e, "A2A listener lost its connection");
                            break;
                        }
                    }
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, body_len: usize) -> TaskRow {
        TaskRow {
            id: id.into(),
            agent: "echo".into(),
            owner: "o".into(),
            context_id: "c".into(),
            state: TaskState::Working.v1().into(),
            turn_message_id: "m".into(),
            wire_message_id: "w".into(),
            last_response_id: None,
            body: "x".repeat(body_len),
            last_seq: 1,
            status_at: 0,
            created_at: 0,
        }
    }

    #[test]
    fn recent_rows_stay_within_their_byte_budget() {
        let recent = Recent::default();
        recent.put(&row("a", 10));
        recent.put(&row("a", 20));
        assert_eq!(recent.lock().bytes, 20);
        assert_eq!(recent.get("a").map(|r| r.body.len()), Some(20));
        // Too large to remember: forgotten, so a stale smaller version is not served.
        recent.put(&row("a", RECENT_ROW_MAX + 1));
        assert!(recent.get("a").is_none());
        assert_eq!(recent.lock().bytes, 0);
        // Filling past the budget starts over.
        let n = RECENT_BYTES / RECENT_ROW_MAX;
        for i in 0..=n {
            recent.put(&row(&i.to_string(), RECENT_ROW_MAX));
        }
        let r = recent.lock();
        assert!(r.bytes <= RECENT_BYTES);
        assert_eq!(
            r.bytes,
            r.rows.values().map(|t| t.body.len()).sum::<usize>()
        );
        drop(r);
        recent.forget(&n.to_string());
        assert_eq!(recent.lock().bytes, 0);
    }
}
