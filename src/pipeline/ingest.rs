//! Ingest: one writer task commits every pending message in a single transaction (group
//! commit), so throughput is not one fsync per message; each caller is answered only after the
//! commit that holds its message.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Core, DispatchJob};
use crate::error::{Error, Result};
use crate::message::NormalizedMessage;
use crate::queue::kinds;
use crate::store::jobs::{self, NewJob};
use crate::store::messages::{self, ExternalKey, NewMessage};

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
    /// The wire thread key, kept apart because `msg.thread_id` is rewritten to switchboard's
    /// thread id (and a failed batch is retried message by message).
    pub(super) thread_key: String,
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
        // The caller learns what it did wrong, never internal detail.
        let err = match &e {
            Error::Invalid(why) => Error::Invalid(why.clone()),
            _ => Error::Unavailable,
        };
        let _ = p.reply.send(Err(err));
    }
}

async fn commit(core: &Core, batch: &mut [Pending]) -> Result<Vec<IngestOutcome>> {
    let now = core.clock.now_ms();
    let max_attempts = core.queue.max_attempts(kinds::DISPATCH);
    let mut tx = core.db.begin().await?;

    // 1. Dedupe: claim every (transport, external id) at once.
    let keys: Vec<ExternalKey<'_>> = batch
        .iter()
        .map(|p| ExternalKey {
            transport: &p.transport,
            external_id: &p.external_id,
            message_id: &p.msg.id,
        })
        .collect();
    let fresh = messages::claim_external_ids(&mut tx, &keys, now).await?;

    // 2. Threads: map each wire thread key to switchboard's thread id.
    let new_ids: Vec<String> = batch
        .iter()
        .map(|_| uuid::Uuid::now_v7().to_string())
        .collect();
    let wanted: Vec<(&str, &str, &str)> = batch
        .iter()
        .zip(&new_ids)
        .filter(|(p, _)| fresh.contains(&p.msg.id))
        .map(|(p, id)| (p.transport.as_str(), p.thread_key.as_str(), id.as_str()))
        .collect();
    let threads = messages::upsert_threads(&mut tx, &wanted, now).await?;

    // 3. Messages and their dispatch jobs.
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut bodies = Vec::new();
    for p in batch.iter_mut() {
        if !fresh.contains(&p.msg.id) {
            let (message_id, thread_id) =
                messages::duplicate_of(&mut tx, &p.transport, &p.external_id)
                    .await?
                    .ok_or_else(|| Error::Invalid("duplicate of an unknown message".into()))?;
            outcomes.push(IngestOutcome {
                message_id,
                thread_id,
                duplicate: true,
            });
            continue;
        }
        let thread_id = threads
            .get(&(p.transport.clone(), p.thread_key.clone()))
            .cloned()
            .ok_or_else(|| Error::Invalid("thread could not be stored".into()))?;
        p.msg.thread_id = thread_id;
        crate::blobs::strip_urls(&mut p.msg.parts);
        bodies.push(serde_json::to_string(&p.msg).map_err(Error::Corrupt)?);
        outcomes.push(IngestOutcome {
            message_id: p.msg.id.clone(),
            thread_id: p.msg.thread_id.clone(),
            duplicate: false,
        });
    }
    // A duplicate of a message earlier in this same batch: its thread is known only here.
    let batch_threads: std::collections::HashMap<String, String> = outcomes
        .iter()
        .filter(|o| !o.duplicate)
        .map(|o| (o.message_id.clone(), o.thread_id.clone()))
        .collect();
    for o in outcomes
        .iter_mut()
        .filter(|o| o.duplicate && o.thread_id.is_empty())
    {
        o.thread_id = batch_threads
            .get(&o.message_id)
            .cloned()
            .unwrap_or_default();
    }
    let stored: Vec<&Pending> = batch.iter().filter(|p| fresh.contains(&p.msg.id)).collect();
    // The first message of a thread created in this batch has no history: its dispatch can skip
    // looking for it. (Later messages of the same new thread do have one.)
    let mut created: std::collections::HashSet<&str> = new_ids.iter().map(String::as_str).collect();
    let rows: Vec<NewMessage<'_>> = stored
        .iter()
        .zip(&bodies)
        .map(|(p, body)| NewMessage {
            id: &p.msg.id,
            thread_id: &p.msg.thread_id,
            direction: "in",
            agent: &p.agent,
            transport: &p.transport,
            answers: None,
            body,
        })
        .collect();
    let inserted = messages::insert_many(&mut tx, &rows, now).await?;
    if inserted.len() != rows.len() {
        return Err(Error::Invalid(
            "a message with this id is already stored".into(),
        ));
    }
    let job_ids: Vec<String> = stored
        .iter()
        .map(|p| format!("dispatch:{}", p.msg.id))
        .collect();
    let payloads = stored
        .iter()
        .map(|p| {
            serde_json::to_string(&DispatchJob {
                message_id: p.msg.id.clone(),
                new_thread: created.remove(p.msg.thread_id.as_str()),
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(Error::Corrupt)?;
    let new_jobs: Vec<NewJob<'_>> = job_ids
        .iter()
        .zip(&payloads)
        .map(|(id, payload)| NewJob {
            id,
            kind: kinds::DISPATCH,
            payload,
            max_attempts,
            run_at: now,
        })
        .collect();
    jobs::enqueue_many(&mut tx, &new_jobs, now).await?;
    if !new_jobs.is_empty() {
        tx.notify(kinds::DISPATCH).await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}
