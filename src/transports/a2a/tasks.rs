//! Durable tasks: every change of a task is committed together with the stream events it
//! produced (a per-task sequence), then announced in-process and, on PostgreSQL, to every
//! instance through `LISTEN/NOTIFY`. Streams, blocking sends and resubscriptions read the stored
//! events, so a restart or a reconnect loses nothing.
//!
//! Writes go through one writer task that commits every pending change in a single transaction
//! (group commit through [`crate::store::group_commit`], as ingest does): a change is read and
//! decided by its caller, then written only if the task is still as it was read; a caller whose
//! task moved on meanwhile decides again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use super::push;
use super::store::{self as sql, EventRow, TaskRow};
use super::wire::{RpcError, TaskState, timestamp};
use crate::clock::SharedClock;
use crate::error::Error;
use crate::queue::Queue;
use crate::store::{Db, Tx};

/// How many times a change is retried when another writer changed the task first.
const MAX_CONFLICTS: usize = 8;

/// The most task writes committed together.
const MAX_BATCH: usize = 64;

/// How many rows [`Recent`] holds; past that the oldest go first.
const RECENT_MAX: usize = 4096;

/// How many bytes of task documents [`Recent`] holds; past that the oldest go first.
const RECENT_BYTES: usize = 16 << 20;

/// Task documents larger than this are not remembered (read back instead).
const RECENT_ROW_MAX: usize = 64 << 10;

/// The tasks this instance wrote last, as written, so that the next change of a task and the
/// wait for its turn's end need not read it back. A row another instance changed since is
/// caught by the guarded write (and forgotten when that instance's notification arrives).
type Recent = crate::store::recent::Recent<TaskRow>;

impl crate::store::recent::Weight for TaskRow {
    fn weight(&self) -> usize {
        self.body.len()
    }
}

/// Remembers `row` as this instance wrote it, unless a newer version is remembered already
/// (writers remember after their commits, not necessarily in commit order).
fn remember(recent: &Recent, row: TaskRow) {
    let id = row.id.clone();
    recent.put_unless(&id, row, |held, new| held.last_seq > new.last_seq);
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
    watchers: Arc<Watchers>,
    queue: Arc<Queue>,
    writes: mpsc::Sender<PendingWrite>,
    recent: Arc<Recent>,
}

/// A changed task with its new events, written if its last event is still `expected`.
#[derive(Debug)]
struct Update {
    row: TaskRow,
    expected: i64,
    events: Vec<(i64, String)>,
}

/// What a change function decided about a task.
enum Decided {
    /// There is no such task.
    Missing,
    /// Nothing to write; the task as read.
    Keep(TaskRow),
    /// This update, decided at this time (unix ms).
    Write(Update, i64),
}

/// An update waiting for the writer's commit; answered whether it was written.
#[derive(Debug)]
struct PendingWrite {
    update: Update,
    reply: oneshot::Sender<crate::error::Result<bool>>,
}

/// What became of a new task ([`NewTask`]).
#[derive(Debug)]
pub(super) enum Created {
    /// The task is stored.
    New,
    /// Another request with the same idempotency key got there first.
    KeyTaken,
    /// The message is a resend of the current turn of this running task.
    Resent(Box<TaskRow>),
}

/// Task writes made inside someone else's transaction, to finish once it has committed
/// ([`TaskEngine::committed`]): the rows to remember and announce, the pushes to start.
#[derive(Debug, Default)]
#[must_use = "finish the writes once the transaction has committed"]
pub(super) struct TaskWrites {
    rows: Vec<TaskRow>,
    pushes: Vec<crate::queue::Enqueued>,
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
        let watchers = Arc::new(Watchers::default());
        let (writes, rx) = mpsc::channel(4096);
        let recent = Arc::new(Recent::new(RECENT_MAX, RECENT_BYTES, RECENT_ROW_MAX));
        let writer = Writer {
            db: db.clone(),
            clock: clock.clone(),
            watchers: Arc::clone(&watchers),
            queue: Arc::clone(&queue),
            recent: Arc::clone(&recent),
        };
        tokio::spawn(crate::store::group_commit(writer, rx));
        Self {
            db,
            clock,
            watchers,
            queue,
            writes,
            recent,
        }
    }

    /// Hands `update` to the writer and waits for its commit; whether it was written (not if
    /// the task changed since it was read).
    async fn write(&self, update: Update) -> crate::error::Result<bool> {
        let (reply, rx) = oneshot::channel();
        self.writes
            .send(PendingWrite { update, reply })
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

    /// Retention: deletes up to `limit` tasks whose status last changed before `before` (unix
    /// ms) with everything stored about them ([`sql::erase_tasks_before`]); returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub async fn erase_before(&self, before: i64, limit: i64) -> crate::error::Result<u64> {
        let mut tx = self.db.begin().await?;
        let ids = sql::erase_tasks_before(&mut tx, before, limit).await?;
        tx.commit().await?;
        for id in &ids {
            self.announce(id);
        }
        Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX))
    }

    /// Tells local waiters that `task_id` changed on another instance (PostgreSQL
    /// notifications; this instance's own writes are announced by its writer).
    pub fn announce(&self, task_id: &str) {
        self.recent.forget(task_id);
        self.watchers.changed(task_id);
    }

    /// Starts watching `task_id` for changes: take it before reading the task, and every
    /// change after the read wakes [`TaskWatch::changed`].
    pub(super) fn watch(&self, task_id: &str) -> TaskWatch {
        self.watchers.watch(task_id)
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
            let update = match self.decide(read, &mut f)? {
                Decided::Missing => return Ok(None),
                Decided::Keep(row) => return Ok(Some(row)),
                Decided::Write(update, _) => update,
            };
            let row = update.row.clone();
            if self.write(update).await.map_err(|e| internal(&e))? {
                return Ok(Some(row));
            }
        }
        Err(too_fast())
    }

    /// As [`TaskEngine::update`], inside `tx` (the caller commits, then hands `writes` to
    /// [`TaskEngine::committed`]). Returns the task as written or found; `None` when it does not
    /// exist.
    pub(super) async fn update_in<F>(
        &self,
        tx: &mut Tx,
        writes: &mut TaskWrites,
        id: &str,
        mut f: F,
    ) -> Result<Option<TaskRow>, RpcError>
    where
        F: FnMut(&mut TaskRow, &mut Value, i64) -> Result<Change, RpcError> + Send,
    {
        for attempt in 0..MAX_CONFLICTS {
            let read = if attempt == 0 {
                self.current(id).await?
            } else {
                self.recent.forget(id);
                sql::get_task_in(tx, id).await.map_err(|e| internal(&e))?
            };
            let (update, now) = match self.decide(read, &mut f)? {
                Decided::Missing => return Ok(None),
                Decided::Keep(row) => return Ok(Some(row)),
                Decided::Write(update, now) => (update, now),
            };
            let (written, pushes) = write_updates(&self.queue, tx, &[&update], now)
                .await
                .map_err(|e| internal(&e))?;
            if written.contains(&update.row.id) {
                writes.pushes.push(pushes);
                writes.rows.push(update.row.clone());
                return Ok(Some(update.row));
            }
        }
        Err(too_fast())
    }

    /// Applies `f` to the task `read` (parsed from its stored body) and says what to write.
    fn decide<F>(&self, read: Option<TaskRow>, f: &mut F) -> Result<Decided, RpcError>
    where
        F: FnMut(&mut TaskRow, &mut Value, i64) -> Result<Change, RpcError>,
    {
        let Some(mut row) = read else {
            return Ok(Decided::Missing);
        };
        let mut task: Value =
            serde_json::from_str(&row.body).map_err(|e| internal(&Error::corrupt(e)))?;
        let now = self.now();
        Ok(match f(&mut row, &mut task, now)? {
            Change::Keep => Decided::Keep(row),
            Change::Write(events) => Decided::Write(numbered(row, &task, &events), now),
        })
    }

    /// Finishes task writes whose transaction has committed: remembers and announces the rows,
    /// starts their pushes.
    pub(super) fn committed(&self, writes: TaskWrites) {
        for row in writes.rows {
            // Remembered before its watchers wake, so that they read it.
            let id = row.id.clone();
            remember(&self.recent, row);
            self.watchers.changed(&id);
        }
        for p in writes.pushes {
            self.queue.hand_over(p);
        }
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
            let items = push_jobs(task_id, &[config_id.to_owned()], seqs)?;
            let mut tx = self.db.begin().await?;
            let enqueued = self
                .queue
                .enqueue(&mut tx, push::KIND, &items, self.now())
                .await?;
            tx.commit().await?;
            self.queue.hand_over(enqueued);
            Ok(())
        }
        .await;
        result.map_err(|e| internal(&e))?;
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
        let mut watch = self.watch(id);
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
            watch
                .changed((deadline - now).min(Duration::from_secs(1)))
                .await;
        }
    }
}

fn too_fast() -> RpcError {
    RpcError::new(
        super::wire::INTERNAL_ERROR,
        "the task is changing too fast; retry",
    )
}

/// `row` changed to `task`, with `events` numbered after its last one.
fn numbered(mut row: TaskRow, task: &Value, events: &[Value]) -> Update {
    let expected = row.last_seq;
    let events: Vec<(i64, String)> = events
        .iter()
        .enumerate()
        .map(|(i, e)| (expected + 1 + i64::try_from(i).unwrap_or(0), e.to_string()))
        .collect();
    row.last_seq = expected + i64::try_from(events.len()).unwrap_or(0);
    row.body = task.to_string();
    Update {
        row,
        expected,
        events,
    }
}

/// Writes changed tasks in `tx`, each only where it is still as read, with their events, a
/// push job per config and new event, and (PostgreSQL) a notification per task. Returns the
/// tasks written and the pushes to hand over once `tx` commits.
async fn write_updates(
    queue: &Queue,
    tx: &mut Tx,
    updates: &[&Update],
    now: i64,
) -> crate::error::Result<(std::collections::HashSet<String>, crate::queue::Enqueued)> {
    let changes: Vec<(&TaskRow, i64)> = updates.iter().map(|u| (&u.row, u.expected)).collect();
    let written = sql::update_tasks(tx, &changes).await?;
    let done: Vec<&&Update> = updates
        .iter()
        .filter(|u| written.contains(&u.row.id))
        .collect();
    let events: Vec<(&str, i64, &str)> = done
        .iter()
        .flat_map(|u| {
            u.events
                .iter()
                .map(|(seq, body)| (u.row.id.as_str(), *seq, body.as_str()))
        })
        .collect();
    sql::insert_events(tx, &events, now).await?;
    let with_events: Vec<&str> = done
        .iter()
        .filter(|u| !u.events.is_empty())
        .map(|u| u.row.id.as_str())
        .collect();
    let configs = sql::push_config_ids(tx, &with_events).await?;
    let mut pushes = Vec::new();
    for u in &done {
        let ids: Vec<String> = configs
            .iter()
            .filter(|(task, _)| *task == u.row.id)
            .map(|(_, c)| c.clone())
            .collect();
        if ids.is_empty() || u.events.is_empty() {
            continue;
        }
        let seqs: Vec<i64> = u.events.iter().map(|(seq, _)| *seq).collect();
        pushes.extend(push_jobs(&u.row.id, &ids, &seqs)?);
    }
    let pushes = queue.enqueue(tx, push::KIND, &pushes, now).await?;
    for u in &done {
        sql::notify_task(tx, &u.row.id).await?;
    }
    Ok((written, pushes))
}

/// A new task, stored with its first message in the ingest transaction
/// ([`crate::pipeline::IngestWrite`]): unless its idempotency key is taken, or its message
/// (`wire_message_id`) is the current turn of a running task of the same owner — and of the
/// same agent, unless `any_agent` (the hub, where the agent was inferred). A push config sent
/// with the message is stored with it, and told of the task's first events.
#[derive(Debug)]
pub(super) struct NewTask {
    engine: TaskEngine,
    row: TaskRow,
    events: Vec<(i64, String)>,
    /// Its idempotency key: scope, key and the request's fingerprint.
    idempotency_key: Option<(String, String, String)>,
    any_agent: bool,
    /// The push config's id and (1.0) body.
    push: Option<(String, String)>,
    /// An anonymous caller's: the message's parts and the context it named, which a running
    /// task must also have for the message to be its resend.
    anonymous_resend: Option<(serde_json::Value, Option<String>)>,
    /// What became of it (set by the write).
    pub(super) created: Option<Created>,
    pushes: Option<crate::queue::Enqueued>,
}

impl NewTask {
    /// The task `row` with its first `events`.
    pub(super) fn new(
        engine: &TaskEngine,
        row: TaskRow,
        events: Vec<(i64, String)>,
        idempotency_key: Option<(String, String, String)>,
        any_agent: bool,
        push: Option<(String, String)>,
    ) -> Self {
        Self {
            engine: engine.clone(),
            row,
            events,
            idempotency_key,
            any_agent,
            push,
            anonymous_resend: None,
            created: None,
            pushes: None,
        }
    }

    /// An anonymous caller's task: a running task (of the same client address) is taken for
    /// its resend only when its current turn has these `parts` too, and is in `context` when
    /// the message named one, so that nobody learns another caller's task by reusing the
    /// `messageId` of its message.
    pub(super) fn resent_only_as(
        mut self,
        parts: serde_json::Value,
        context: Option<String>,
    ) -> Self {
        self.anonymous_resend = Some((parts, context));
        self
    }

    /// Whether the running task `known` (of the same owner and message id) takes this message
    /// as its resend.
    fn resend_of(&self, known: &TaskRow) -> bool {
        if !(self.any_agent || known.agent.eq_ignore_ascii_case(&self.row.agent)) {
            return false;
        }
        let Some((parts, context)) = &self.anonymous_resend else {
            return true;
        };
        if context.as_ref().is_some_and(|c| *c != known.context_id) {
            return false;
        }
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&known.body) else {
            return false;
        };
        doc.get("history")
            .and_then(serde_json::Value::as_array)
            .and_then(|h| {
                h.iter().rev().find(|m| {
                    m.get("messageId").and_then(serde_json::Value::as_str)
                        == Some(known.wire_message_id.as_str())
                })
            })
            .is_some_and(|m| m.get("parts") == Some(parts))
    }
}

#[async_trait::async_trait]
impl crate::pipeline::IngestWrite for NewTask {
    async fn write(&mut self, tx: &mut Tx, now: i64) -> crate::error::Result<bool> {
        self.created = None;
        self.pushes = None;
        let running = [TaskState::Submitted.v1(), TaskState::Working.v1()];
        let known =
            sql::tasks_by_wire_message(tx, &self.row.owner, &self.row.wire_message_id, &running)
                .await?;
        if let Some(k) = known.into_iter().find(|k| self.resend_of(k)) {
            self.created = Some(Created::Resent(Box::new(k)));
            return Ok(false);
        }
        if let Some((scope, key, fingerprint)) = &self.idempotency_key
            && !sql::claim_idempotency_key(
                tx,
                &sql::IdempotencyKey {
                    owner: &self.row.owner,
                    scope,
                    key,
                    fingerprint,
                },
                &self.row.id,
                now,
            )
            .await?
        {
            self.created = Some(Created::KeyTaken);
            return Ok(false);
        }
        sql::insert_tasks(tx, &[&self.row]).await?;
        let events: Vec<(&str, i64, &str)> = self
            .events
            .iter()
            .map(|(seq, body)| (self.row.id.as_str(), *seq, body.as_str()))
            .collect();
        sql::insert_events(tx, &events, now).await?;
        if let Some((id, body)) = &self.push {
            // Told of every event of the task, the first ones included.
            sql::put_push_config(tx, &self.row.id, id, &self.row.owner, body, 0, now).await?;
            let seqs: Vec<i64> = self.events.iter().map(|(seq, _)| *seq).collect();
            let jobs = push_jobs(&self.row.id, std::slice::from_ref(id), &seqs)?;
            self.pushes = Some(
                self.engine
                    .queue
                    .enqueue(tx, push::KIND, &jobs, now)
                    .await?,
            );
        }
        self.created = Some(Created::New);
        Ok(true)
    }

    fn committed(&mut self) {
        if matches!(self.created, Some(Created::New)) {
            remember(&self.engine.recent, self.row.clone());
        }
        if let Some(p) = self.pushes.take() {
            self.engine.queue.hand_over(p);
        }
    }
}

/// One push job (id, payload) per config and event sequence number.
fn push_jobs(
    task_id: &str,
    configs: &[String],
    seqs: &[i64],
) -> crate::error::Result<Vec<(String, String)>> {
    let mut jobs = Vec::with_capacity(configs.len() * seqs.len());
    for c in configs {
        for seq in seqs {
            let payload = serde_json::to_string(&push::PushJob {
                task_id: task_id.to_owned(),
                config_id: c.clone(),
                seq: *seq,
            })
            .map_err(Error::corrupt)?;
            jobs.push((push::job_id(task_id, c, *seq), payload));
        }
    }
    Ok(jobs)
}

/// The task writer: commits pending updates together ([`crate::store::group_commit`]).
struct Writer {
    db: Db,
    clock: SharedClock,
    watchers: Arc<Watchers>,
    queue: Arc<Queue>,
    recent: Arc<Recent>,
}

#[async_trait::async_trait]
impl crate::store::GroupCommit for Writer {
    type Item = PendingWrite;
    /// Whether the update was written (not if the task changed since it was read).
    type Output = bool;
    /// Its waiters read what it remembered: nothing is left for later.
    type Then = ();

    fn max_batch(&self) -> usize {
        MAX_BATCH
    }

    /// A task is written once per statement: a second write of a task waits for the next
    /// batch, and its writes keep their order.
    fn joins(&self, batch: &[PendingWrite], item: &PendingWrite) -> bool {
        !batch.iter().any(|p| p.update.row.id == item.update.row.id)
    }

    /// Commits a batch in one transaction; remembers and announces the tasks written.
    async fn commit(&self, batch: &mut [PendingWrite]) -> crate::error::Result<(Vec<bool>, ())> {
        let now = self.clock.now_ms();
        let mut tx = self.db.begin().await?;
        let updates: Vec<&Update> = batch.iter().map(|p| &p.update).collect();
        let (written, pushes) = write_updates(&self.queue, &mut tx, &updates, now).await?;
        tx.commit().await?;
        self.queue.hand_over(pushes);
        let outputs = batch
            .iter()
            .map(|p| {
                let row = &p.update.row;
                let ok = written.contains(&row.id);
                if ok {
                    remember(&self.recent, row.clone());
                    self.watchers.changed(&row.id);
                }
                ok
            })
            .collect();
        Ok((outputs, ()))
    }

    fn answer(&self, p: PendingWrite, result: crate::error::Result<bool>) {
        let _ = p.reply.send(result);
    }
}

/// Who waits on which task, so a change wakes only the waiters of that task (one channel for
/// every task woke every waiter on every change: with many tasks in flight most wake-ups were
/// for nothing).
#[derive(Debug, Default)]
struct Watchers(std::sync::Mutex<std::collections::HashMap<String, watch::Sender<()>>>);

impl Watchers {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, watch::Sender<()>>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn watch(self: &Arc<Self>, id: &str) -> TaskWatch {
        let rx = self
            .map()
            .entry(id.to_owned())
            .or_insert_with(|| watch::channel(()).0)
            .subscribe();
        TaskWatch {
            rx,
            id: id.to_owned(),
            watchers: Arc::clone(self),
        }
    }

    /// Wakes the waiters of `id`, if there are any.
    fn changed(&self, id: &str) {
        if let Some(tx) = self.map().get(id) {
            tx.send_replace(());
        }
    }
}

/// One waiter's view of the changes to one task.
#[derive(Debug)]
pub(super) struct TaskWatch {
    rx: watch::Receiver<()>,
    id: String,
    watchers: Arc<Watchers>,
}

impl TaskWatch {
    /// Waits until the task has changed since the watch began or since the last call returned,
    /// at most `limit`; whether it changed. A change can also come from another instance
    /// (PostgreSQL), so callers read the database after every wake-up.
    pub(super) async fn changed(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            if self.rx.changed().await.is_err() {
                // Not reached: the sender lives as long as its last receiver.
                std::future::pending::<()>().await;
            }
        })
        .await
        .is_ok()
    }
}

impl Drop for TaskWatch {
    fn drop(&mut self) {
        let mut map = self.watchers.map();
        // The last waiter of this task leaves: forget the task.
        if map.get(&self.id).is_some_and(|tx| tx.receiver_count() <= 1) {
            map.remove(&self.id);
        }
    }
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

/// Forwards `NOTIFY switchboard_a2a` from other instances to local waiters (PostgreSQL only),
/// through the instance's one `LISTEN` connection (register before
/// [`Queue::spawn_listener`] starts it).
pub fn listen(engine: &TaskEngine, queue: &Queue) {
    let engine = engine.clone();
    queue.on_notify(
        sql::NOTIFY_CHANNEL,
        Arc::new(move |task_id: &str| engine.announce(task_id)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(last_seq: i64, state: TaskState) -> TaskRow {
        TaskRow {
            id: "t".into(),
            agent: "echo".into(),
            owner: "o".into(),
            context_id: "c".into(),
            state: state.v1().into(),
            turn_message_id: "m".into(),
            wire_message_id: "w".into(),
            last_response_id: None,
            body: "{}".into(),
            last_seq,
            status_at: 0,
            created_at: 0,
        }
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let recent = Recent::new(RECENT_MAX, RECENT_BYTES, RECENT_ROW_MAX);
        // The turn's answer is remembered first (its commit came later, on another thread)...
        remember(&recent, row(3, TaskState::Completed));
        // ...then the task as created: it must not hide the answer.
        remember(&recent, row(1, TaskState::Working));
        assert_eq!(recent.get("t").map(|r| r.last_seq), Some(3));
        remember(&recent, row(4, TaskState::Completed));
        assert_eq!(recent.get("t").map(|r| r.last_seq), Some(4));
    }
}
