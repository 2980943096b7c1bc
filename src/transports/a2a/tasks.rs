//! Durable tasks: every change of a task is committed together with the stream events it
//! produced (a per-task sequence), then announced in-process and, on PostgreSQL, to every
//! instance through `LISTEN/NOTIFY`. Streams, blocking sends and resubscriptions read the stored
//! events, so a restart or a reconnect loses nothing.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

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
}

/// What a change function decided.
pub(super) enum Change {
    /// Nothing to write.
    Keep,
    /// Write the task with these new events (1.0 StreamResponses).
    Write(Vec<Value>),
}

impl TaskEngine {
    /// An engine over `db`.
    #[must_use]
    pub fn new(db: Db, clock: SharedClock, queue: Arc<Queue>) -> Self {
        let (hub, _) = broadcast::channel(4096);
        Self {
            db,
            clock,
            hub,
            queue,
        }
    }

    /// The database.
    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    /// The current time (unix ms).
    pub(super) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Tells local waiters that `task_id` changed (called for changes made here and for
    /// notifications from other instances).
    pub fn announce(&self, task_id: &str) {
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

    /// Stores a new task with its first events; false when the idempotency key was taken.
    pub(super) async fn create(
        &self,
        row: &TaskRow,
        events: &[(i64, String)],
        idempotency_key: Option<&str>,
    ) -> Result<bool, RpcError> {
        let result: crate::error::Result<bool> = async {
            let mut tx = self.db.begin().await?;
            if let Some(key) = idempotency_key
                && !sql::claim_idempotency_key(&mut tx, &row.owner, key, &row.id, row.created_at)
                    .await?
            {
                return Ok(false);
            }
            sql::insert_task(&mut tx, row).await?;
            sql::insert_events(&mut tx, &row.id, events, row.created_at).await?;
            tx.commit().await?;
            Ok(true)
        }
        .await;
        result.map_err(|e| internal(&e))
    }

    /// Applies `f` to the task and commits the task with the events it returns, retrying
    /// when another writer got there first. Returns the task as written (or as found, for
    /// [`Change::Keep`]); `None` when the task does not exist.
    pub(super) async fn update<F>(&self, id: &str, mut f: F) -> Result<Option<TaskRow>, RpcError>
    where
        F: FnMut(&mut TaskRow, &mut Value, i64) -> Result<Change, RpcError> + Send,
    {
        for _ in 0..MAX_CONFLICTS {
            let Some(mut row) = self.get(id).await? else {
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
            let written: crate::error::Result<bool> = async {
                let mut tx = self.db.begin().await?;
                if !sql::update_task(&mut tx, &row, expected).await? {
                    return Ok(false);
                }
                sql::insert_events(&mut tx, id, &numbered, now).await?;
                let pushed = self.enqueue_pushes(&mut tx, id, &numbered, now).await?;
                sql::notify_task(&mut tx, id).await?;
                tx.commit().await?;
                if pushed {
                    self.queue.wake(push::KIND);
                }
                Ok(true)
            }
            .await;
            if written.map_err(|e| internal(&e))? {
                self.announce(id);
                return Ok(Some(row));
            }
        }
        Err(RpcError::new(
            super::wire::INTERNAL_ERROR,
            "the task is changing too fast; retry",
        ))
    }

    /// Enqueues one push job per push config of the task and event, in the transaction that
    /// stores the events. Returns whether any was enqueued.
    async fn enqueue_pushes(
        &self,
        tx: &mut crate::store::Tx,
        task_id: &str,
        events: &[(i64, String)],
        now: i64,
    ) -> crate::error::Result<bool> {
        if events.is_empty() {
            return Ok(false);
        }
        let configs = sql::push_config_ids_tx(tx, task_id).await?;
        if configs.is_empty() {
            return Ok(false);
        }
        let seqs: Vec<i64> = events.iter().map(|(seq, _)| *seq).collect();
        self.enqueue_push_jobs(tx, task_id, &configs, &seqs, now)
            .await?;
        Ok(true)
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
            self.enqueue_push_jobs(&mut tx, task_id, &[config_id.to_owned()], seqs, self.now())
                .await?;
            tx.commit().await
        }
        .await;
        result.map_err(|e| internal(&e))?;
        self.queue.wake(push::KIND);
        Ok(())
    }

    /// One push job per config and event sequence number.
    async fn enqueue_push_jobs(
        &self,
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
                ids.push(format!("{}:{task_id}:{c}:{seq}", push::KIND));
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
        let max_attempts = self.queue.max_attempts(push::KIND);
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
            let Some(row) = self.get(id).await? else {
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
