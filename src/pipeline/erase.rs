//! Erasing stored messages, and what every instance holds of them.
//!
//! A message its author deleted (ActivityPub `Delete`, or `Undo` of its `Create`) is erased in
//! one transaction with the transport's own rows about it ([`Pipeline::erase`]): its body is
//! reduced to what dedupe and threading need ([`crate::store::erasure::tombstone`]), the blobs
//! only it referred to are erased, and history windows leave it out from then on. Responses the
//! agent gave to it are the agent's own and stay. A dispatch still to come ends `deleted`
//! without calling the agent; a delivery still to come fails (`the message it answers was
//! deleted`).
//!
//! Retention (`database.retention_days`, [`Pipeline::spawn_retention`]) deletes the messages and
//! responses stored before the cutoff outright, the blobs nothing refers to any more, and each
//! transport's own rows about them ([`super::Transport::erase_before`]), and the audit records
//! of operator actions as old ([`crate::store::audit::prune_before`]).
//!
//! This instance forgets what it holds of erased rows at once ([`super::Caches::forget`]);
//! on PostgreSQL the other instances are told by `NOTIFY`, and forget everything they hold when
//! their `LISTEN` connection comes back after a loss, since what was announced meanwhile was
//! missed.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Core, Pipeline};
use crate::error::Result;
use crate::store::Tx;
use crate::store::erasure::{self, ErasedRow};

/// Rows of a transport's own erased with messages, in the same transaction
/// ([`Pipeline::erase`]).
#[async_trait::async_trait]
pub trait EraseWrite: Send + Sync {
    /// Writes in `tx`, the transaction that erases the messages.
    ///
    /// # Errors
    /// Database errors (nothing is erased).
    async fn write(&mut self, tx: &mut Tx, now: i64) -> Result<()>;
}

/// How many rows retention deletes in one transaction.
const RETENTION_BATCH: i64 = 500;

/// The most transactions one retention run commits; what is left waits for the next minute.
const RETENTION_ROUNDS: usize = 100;

impl Pipeline {
    /// Erases the stored messages `ids` (their author deleted them) together with `write`, the
    /// transport's own rows, in one transaction; returns how many messages were erased (an id
    /// unknown or erased before counts none, and erasing again changes nothing).
    ///
    /// # Errors
    /// Database errors: nothing was erased.
    pub async fn erase(&self, ids: &[String], write: Option<&mut dyn EraseWrite>) -> Result<usize> {
        let core = &self.core;
        let now = core.clock.now_ms();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let mut tx = core.db.begin().await?;
        let erased = erasure::erase(&mut tx, &ids, now).await?;
        if let Some(w) = write {
            w.write(&mut tx, now).await?;
        }
        erasure::notify(&mut tx, &erased).await?;
        tx.commit().await?;
        core.caches.forget(&erased);
        for row in &erased {
            tracing::info!(message_id = %row.id, thread_id = %row.thread_id, "message erased: its author deleted it");
        }
        Ok(erased.len())
    }

    /// Retention: a task that, every minute of the clock, erases the messages and responses
    /// stored more than `days` days ago, the blobs stored as long ago that nothing refers to
    /// any more, and the transports' own rows about them, one run at a time, until shutdown.
    /// Nothing when `days` is 0.
    #[must_use]
    pub fn spawn_retention(
        &self,
        days: u32,
        mut shutdown: watch::Receiver<bool>,
    ) -> Option<JoinHandle<()>> {
        if days == 0 {
            return None;
        }
        let keep_ms = i64::from(days).saturating_mul(86_400_000);
        let core = Arc::clone(&self.core);
        Some(tokio::spawn(async move {
            let mut last = core.clock.now_ms();
            loop {
                tokio::select! {
                    () = tokio::time::sleep(RETENTION_TICK) => {}
                    _ = shutdown.changed() => return,
                }
                let now = core.clock.now_ms();
                if now - last >= 60_000 {
                    last = now;
                    retain(&core, now.saturating_sub(keep_ms)).await;
                }
            }
        }))
    }
}

/// How often the retention task looks at the clock.
const RETENTION_TICK: std::time::Duration = std::time::Duration::from_secs(2);

/// One retention run: what was stored before `before` (unix ms), a batch per transaction.
async fn retain(core: &Core, before: i64) {
    let mut messages = 0;
    for _ in 0..RETENTION_ROUNDS {
        match drop_batch(core, before).await {
            Ok((n, more)) => {
                messages += n;
                if !more {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention: deleting old messages failed");
                break;
            }
        }
    }
    let blobs = batches("blobs", || {
        crate::store::blobs::erase_unreferenced_before(&core.db, before, RETENTION_BATCH)
    })
    .await;
    let mut own = 0;
    for t in core.transports.all() {
        for _ in 0..RETENTION_ROUNDS {
            match t.erase_before(before).await {
                Ok(n) => {
                    own += n;
                    if n < u64::try_from(RETENTION_BATCH).unwrap_or(u64::MAX) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(transport = t.name(), error = %e, "retention: erasing failed");
                    break;
                }
            }
        }
    }
    let audited = batches("audit records", || {
        crate::store::audit::prune_before(&core.db, before, RETENTION_BATCH)
    })
    .await;
    if messages + blobs + own + audited > 0 {
        tracing::info!(
            messages,
            blobs,
            transport_rows = own,
            audit_records = audited,
            before_ms = before,
            "retention: erased what was stored before the cutoff"
        );
    }
}

/// Runs `batch` (which deletes at most [`RETENTION_BATCH`] old `what`) until it deletes fewer,
/// at most [`RETENTION_ROUNDS`] times; returns how many it deleted.
async fn batches<F, Fut>(what: &str, mut batch: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64>>,
{
    let mut deleted = 0;
    for _ in 0..RETENTION_ROUNDS {
        match batch().await {
            Ok(n) => {
                deleted += n;
                if n < u64::try_from(RETENTION_BATCH).unwrap_or(u64::MAX) {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention: deleting old {what} failed");
                break;
            }
        }
    }
    deleted
}

/// Deletes one batch of old rows; returns how many, and whether more may be waiting.
async fn drop_batch(core: &Core, before: i64) -> Result<(u64, bool)> {
    let mut tx = core.db.begin().await?;
    let dropped: Vec<ErasedRow> = erasure::drop_before(&mut tx, before, RETENTION_BATCH).await?;
    erasure::notify(&mut tx, &dropped).await?;
    tx.commit().await?;
    core.caches.forget(&dropped);
    let n = u64::try_from(dropped.len()).unwrap_or(u64::MAX);
    Ok((n, n >= u64::try_from(RETENTION_BATCH).unwrap_or(u64::MAX)))
}

/// Forgets what other instances erase (PostgreSQL `NOTIFY` on
/// [`erasure::NOTIFY_CHANNEL`]), and everything held when the `LISTEN` connection comes back
/// after a loss. Registered before the listener starts.
pub(super) fn listen(core: &Arc<Core>) {
    let c = Arc::clone(core);
    core.queue.on_notify(
        erasure::NOTIFY_CHANNEL,
        Arc::new(move |payload: &str| {
            for (seq, id) in erasure::parse_notification(payload) {
                c.caches.forget_notified(seq, id);
            }
        }),
    );
    let c = Arc::clone(core);
    core.queue.on_reconnect(Arc::new(move || {
        c.caches.clear();
        tracing::info!("forgot the rows held in memory: erasures may have been missed");
    }));
}
