//! Ingest: one writer task commits every pending message in a single transaction (group
//! commit), so throughput is not one fsync per message; each caller is answered only after the
//! commit that holds its message.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::Core;
use crate::error::{Error, Result};
use crate::message::NormalizedMessage;
use crate::queue::kinds;
use crate::store::jobs::{self, NewJob};
use crate::store::messages::{self, NewMessage};

/// The most messages committed together.
const MAX_BATCH: usize = 256;

/// What ingest did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOutcome {
    /// The stored message's id (the earlier one's for a duplicate).
    pub message_id: String,
    /// Switchboard's thread id.
    pub thread_id: String,
    /// The external id had been seen: nothing was stored or scheduled.
    pub duplicate: bool,
}

pub(super) struct Pending {
    pub(super) transport: String,
    pub(super) external_id: String,
    pub(super) agent: String,
    pub(super) msg: NormalizedMessage,
    pub(super) reply: oneshot::Sender<Result<IngestOutcome>>,
}

pub(super) async fn writer(core: Arc<Core>, mut rx: mpsc::Receiver<Pending>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        match commit(&core, &mut batch).await {
            Ok(outcomes) => answer(&core, batch, outcomes),
            Err(e) if batch.len() > 1 => {
                // One bad message must not fail the others: retry each on its own.
                tracing::warn!(error = %e, n = batch.len(), "batched ingest failed; committing one by one");
                for p in batch {
                    let mut one = vec![p];
                    match commit(&core, &mut one).await {
                        Ok(outcomes) => answer(&core, one, outcomes),
                        Err(e) => fail(one, e),
                    }
                }
            }
            Err(e) => fail(batch, e),
        }
    }
}

fn answer(core: &Core, batch: Vec<Pending>, outcomes: Vec<IngestOutcome>) {
    let mut fresh = false;
    for (p, o) in batch.into_iter().zip(outcomes) {
        let outcome = if o.duplicate { "duplicate" } else { "accepted" };
        fresh |= !o.duplicate;
        core.metrics.inbound(&p.transport, outcome);
        let _ = p.reply.send(Ok(o));
    }
    if fresh {
        core.queue.wake(kinds::DISPATCH);
    }
}

fn fail(batch: Vec<Pending>, e: Error) {
    tracing::error!(error = %e, "ingest failed");
    for p in batch {
        let _ = p.reply.send(Err(Error::Unavailable));
    }
}

async fn commit(core: &Core, batch: &mut [Pending]) -> Result<Vec<IngestOutcome>> {
    let now = core.clock.now_ms();
    let max_attempts = core.queue.max_attempts(kinds::DISPATCH);
    let mut tx = core.db.begin().await?;
    let mut out = Vec::with_capacity(batch.len());
    for p in batch.iter_mut() {
        let msg = &mut p.msg;
        if let Some(original) =
            messages::claim_external_id(&mut tx, &p.transport, &p.external_id, &msg.id, now).await?
        {
            let thread_id = messages::thread_of(&mut tx, &original).await?;
            out.push(IngestOutcome {
                message_id: original,
                thread_id: thread_id.unwrap_or_default(),
                duplicate: true,
            });
            continue;
        }
        let new_thread = uuid::Uuid::now_v7().to_string();
        let thread_id =
            messages::upsert_thread(&mut tx, &p.transport, &msg.thread_id, &new_thread, now)
                .await?;
        msg.thread_id = thread_id;
        let body = serde_json::to_string(&msg).map_err(Error::Corrupt)?;
        messages::insert(
            &mut tx,
            &NewMessage {
                id: &msg.id,
                thread_id: &msg.thread_id,
                direction: "in",
                agent: &p.agent,
                transport: &p.transport,
                answers: None,
                body: &body,
            },
            now,
        )
        .await?;
        let job_id = format!("dispatch:{}", msg.id);
        let payload = serde_json::json!({ "message_id": msg.id }).to_string();
        jobs::enqueue(
            &mut tx,
            &NewJob {
                id: &job_id,
                kind: kinds::DISPATCH,
                payload: &payload,
                max_attempts,
                run_at: now,
            },
            now,
        )
        .await?;
        out.push(IngestOutcome {
            message_id: msg.id.clone(),
            thread_id: msg.thread_id.clone(),
            duplicate: false,
        });
    }
    if out.iter().any(|o| !o.duplicate) {
        tx.notify(kinds::DISPATCH).await?;
    }
    tx.commit().await?;
    Ok(out)
}
