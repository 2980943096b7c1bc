//! Ingest: one writer task commits every pending message in a single transaction (group
//! commit), so throughput is not one fsync per message; each caller is answered only after the
//! commit that holds its message.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Core, DispatchJob};
use crate::config::QueueMode;
use crate::error::{Error, Result};
use crate::message::NormalizedMessage;
use crate::queue::{Enqueued, kinds};
use crate::store::Tx;
use crate::store::messages::{self, ExternalKey, NewMessage, Parsed};

/// The most messages committed together.
const MAX_BATCH: usize = 256;

/// Switchboard's thread ids of the wire threads met lately, by transport and thread key: a
/// thread never changes id, so a message of a thread met before has its body written before its
/// batch takes the database's writer, and the thread is not looked up in the batch. Bounded at
/// 65,536 threads; a thread forgotten is looked up again.
#[must_use]
pub fn thread_ids() -> crate::store::recent::Recent<String> {
    crate::store::recent::Recent::new(65_536, 16 << 20, 4 << 10)
}

/// The key of a wire thread in [`thread_ids`]: the transport's name, its length first, then the
/// thread key (no two pairs share one).
fn thread_key(transport: &str, key: &str) -> String {
    format!("{}:{transport}{key}", transport.len())
}

/// What ingest did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOutcome {
    /// The stored message's id (the earlier one's for a duplicate; empty when declined).
    pub message_id: String,
    /// Switchboard's thread id (empty when declined).
    pub thread_id: String,
    /// The external id had been seen: nothing was stored or scheduled.
    pub duplicate: bool,
    /// The transport's own write ([`IngestWrite`]) declined the message: nothing was stored.
    pub declined: bool,
}

/// Rows a transport stores with a message it hands to ingest, in the same transaction, so that
/// the message and what the transport keeps about it are committed together (one commit, and
/// never one without the other). See [`super::Pipeline::ingest_with`].
#[async_trait::async_trait]
pub trait IngestWrite: Send + Sync + 'static {
    /// Writes in `tx`, for a message that is new (never for a duplicate), before the message is
    /// stored. `Ok(false)` declines it: it is not stored, and the caller learns so from
    /// [`IngestOutcome::declined`]. Runs again if the transaction has to be retried.
    ///
    /// # Errors
    /// Database errors (the batch is then retried message by message).
    async fn write(&mut self, tx: &mut Tx, now: i64) -> Result<bool>;

    /// Whether the message's sender has blocked the agent it is for (asked after
    /// [`IngestWrite::write`]): the message is stored and held (`blocked-by-sender`), its agent
    /// not called, nothing sent back.
    fn blocked_by_sender(&self) -> bool {
        false
    }

    /// Called once the transaction that [`IngestWrite::write`] wrote in has committed.
    fn committed(&mut self) {}

    /// The write as `Any`, so that the caller gets its own type back.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

/// A transport's write travelling with its message.
pub(super) type Write = Box<dyn IngestWrite>;

pub(super) struct Pending {
    pub(super) transport: String,
    pub(super) external_id: String,
    pub(super) agent: String,
    /// The wire thread key, kept apart because `msg.thread_id` is rewritten to switchboard's
    /// thread id (and a failed batch is retried message by message).
    pub(super) thread_key: String,
    /// Shared once stored: what was committed is held as it was written ([`Parsed`]).
    pub(super) msg: Arc<NormalizedMessage>,
    pub(super) write: Option<Write>,
    /// Why the policy state the message presents was refused, when it was (set by the commit
    /// that declined it; the waiter is told).
    pub(super) refused: Option<crate::policy::Refusal>,
    /// Why the agent is not to be called for it, when a safety rule said so.
    pub(super) held: Option<super::Hold>,
    pub(super) reply: oneshot::Sender<Result<(IngestOutcome, Option<Write>)>>,
}

/// Commits pending messages for the group-commit writer ([`crate::store::group_commit`]).
struct Ingest(Arc<Core>);

pub(super) async fn writer(core: Arc<Core>, rx: mpsc::Receiver<Pending>) {
    crate::store::group_commit(Ingest(core), rx).await;
}

/// What follows an ingest commit once its callers are answered: the stored rows to hold (each
/// with the message it was written from) and their dispatch jobs to start.
pub(super) struct Stored {
    messages: Vec<crate::store::messages::StoredMessage>,
    /// The threads the batch created.
    opened: Vec<String>,
    /// Dispatch jobs to start now, and those a debounce holds back.
    dispatch: Vec<Enqueued>,
}

#[async_trait::async_trait]
impl crate::store::GroupCommit for Ingest {
    type Item = Pending;
    type Output = IngestOutcome;
    type Then = Stored;

    fn max_batch(&self) -> usize {
        MAX_BATCH
    }

    async fn commit(&self, batch: &mut [Pending]) -> Result<(Vec<IngestOutcome>, Stored)> {
        let committed = commit(&self.0, batch).await?;
        // The transports' own rows are settled before their callers hear of them, and before
        // their messages' dispatch can begin.
        for w in batch.iter_mut().filter_map(|p| p.write.as_mut()) {
            w.committed();
        }
        Ok(committed)
    }

    /// Holds what was stored and starts its dispatch, the callers already answered: the next
    /// batch, which may continue the same threads, is committed only after this.
    fn then(&self, then: Stored) {
        let core = &self.0;
        // A newer message interrupts the run in flight of its thread where the transport asks.
        for m in &then.messages {
            if core.conversation.of(&m.transport).queue == QueueMode::Interrupt
                && core.runs.interrupt(&(m.thread_id.clone(), m.agent.clone()))
            {
                tracing::debug!(thread_id = %m.thread_id, agent = %m.agent, "run interrupted by a newer message");
            }
        }
        let opened: Vec<&str> = then.opened.iter().map(String::as_str).collect();
        super::history::hold(core, then.messages, &opened);
        for enqueued in then.dispatch {
            core.queue.hand_over(enqueued);
        }
    }

    fn answer(&self, p: Pending, result: Result<IngestOutcome>) {
        let reply = match result {
            Ok(_) if p.refused.is_some() => {
                let r = p.refused.unwrap_or(crate::policy::Refusal::Unknown);
                self.0.metrics.policy_state(r.label());
                tracing::info!(
                    agent = %p.agent,
                    transport = %p.transport,
                    reason = r.label(),
                    evidence = %crate::access::evidence_summary(&p.msg.sender),
                    "policy state refused"
                );
                Err(r.into())
            }
            Ok(o) => {
                if p.msg.policy_resolution.is_some() && !o.duplicate && !o.declined {
                    self.0.metrics.policy_state("resolved");
                }
                let outcome = if o.duplicate || o.declined {
                    "duplicate"
                } else {
                    "accepted"
                };
                self.0.metrics.inbound(&p.transport, outcome);
                Ok((o, p.write))
            }
            Err(e) => Err(e),
        };
        let _ = p.reply.send(reply);
    }
}

/// The body `msg` is stored as, in thread `thread_id` (switchboard's), attachments referred to by
/// digest only.
fn stored_body(msg: &mut Arc<NormalizedMessage>, thread_id: &str) -> Result<String> {
    let m = Arc::make_mut(msg);
    thread_id.clone_into(&mut m.thread_id);
    crate::blobs::strip_urls(&mut m.parts);
    serde_json::to_string(&**msg).map_err(Error::corrupt)
}

async fn commit(core: &Core, batch: &mut [Pending]) -> Result<(Vec<IngestOutcome>, Stored)> {
    // The thread of a message met before is known, and its body written, before the writer is
    // taken: the writer is held by one batch at a time. (A message presenting a policy state has
    // it checked in the transaction, and its body written there.)
    let known: Vec<Option<String>> = batch
        .iter()
        .map(|p| {
            core.thread_ids
                .get(&thread_key(&p.transport, &p.thread_key))
        })
        .collect();
    let mut written: Vec<Option<String>> = Vec::with_capacity(batch.len());
    for (p, known) in batch.iter_mut().zip(&known) {
        written.push(match known {
            Some(thread_id) if p.msg.policy_resolution.is_none() => {
                Some(stored_body(&mut p.msg, thread_id)?)
            }
            _ => None,
        });
    }
    let now = core.clock.now_ms();
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
    let mut fresh = messages::claim_external_ids(&mut tx, &keys, now).await?;

    // A policy state a new message presents is checked and consumed here, before anything
    // else of it is written; a refused one is declined like below, and its waiter told why.
    let mut declined = std::collections::HashSet::new();
    for p in batch.iter_mut() {
        p.refused = None;
        let msg = Arc::make_mut(&mut p.msg);
        let Some(claim) = msg
            .policy_resolution
            .as_mut()
            .filter(|_| fresh.contains(&msg.id))
        else {
            continue;
        };
        let turn = crate::policy::Presented {
            agent: &p.agent,
            transport: &p.transport,
            thread_key: &p.thread_key,
            sender: &msg.sender,
            message_id: &msg.id,
        };
        if let Err(r) = crate::policy::verify_in(&mut tx, claim, &turn, now).await? {
            messages::release_external_id(&mut tx, &p.transport, &p.external_id).await?;
            fresh.remove(&msg.id);
            declined.insert(msg.id.clone());
            p.refused = Some(r);
        }
    }

    // The transports' own rows, for new messages; a declined message gives its key back.
    for p in batch.iter_mut() {
        if let Some(w) = p.write.as_mut().filter(|_| fresh.contains(&p.msg.id))
            && !w.write(&mut tx, now).await?
        {
            if let Some(claim) = p.msg.policy_resolution.as_ref().filter(|c| c.verified) {
                crate::store::policy::release(&mut tx, &claim.in_reply_to_state, &p.msg.id).await?;
            }
            messages::release_external_id(&mut tx, &p.transport, &p.external_id).await?;
            fresh.remove(&p.msg.id);
            declined.insert(p.msg.id.clone());
        }
        if p.write.as_ref().is_some_and(|w| w.blocked_by_sender()) {
            p.held = Some(super::Hold::BlockedBySender);
        }
    }

    // 2. Threads: map each wire thread key not known yet to switchboard's thread id.
    let new_ids: Vec<Option<String>> = known
        .iter()
        .map(|k| k.is_none().then(|| uuid::Uuid::now_v7().to_string()))
        .collect();
    let wanted: Vec<(&str, &str, &str)> = batch
        .iter()
        .zip(&new_ids)
        .filter(|(p, _)| fresh.contains(&p.msg.id))
        .filter_map(|(p, id)| Some((p.transport.as_str(), p.thread_key.as_str(), id.as_deref()?)))
        .collect();
    let threads = messages::upsert_threads(&mut tx, &wanted, now).await?;

    // 3. Messages and their dispatch jobs.
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut bodies = Vec::new();
    for ((p, known), written) in batch.iter_mut().zip(&known).zip(&mut written) {
        if declined.contains(&p.msg.id) {
            outcomes.push(IngestOutcome {
                message_id: String::new(),
                thread_id: String::new(),
                duplicate: false,
                declined: true,
            });
            continue;
        }
        if !fresh.contains(&p.msg.id) {
            let (message_id, thread_id) =
                messages::duplicate_of(&mut tx, &p.transport, &p.external_id)
                    .await?
                    .ok_or_else(|| Error::Invalid("duplicate of an unknown message".into()))?;
            outcomes.push(IngestOutcome {
                message_id,
                thread_id,
                duplicate: true,
                declined: false,
            });
            continue;
        }
        let body = match written.take() {
            Some(body) => body,
            None => {
                let thread_id = match known {
                    Some(id) => id,
                    None => threads
                        .get(&(p.transport.clone(), p.thread_key.clone()))
                        .ok_or_else(|| Error::Invalid("thread could not be stored".into()))?,
                };
                stored_body(&mut p.msg, thread_id)?
            }
        };
        bodies.push(body);
        outcomes.push(IngestOutcome {
            message_id: p.msg.id.clone(),
            thread_id: p.msg.thread_id.clone(),
            duplicate: false,
            declined: false,
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
        .filter(|o| o.duplicate && o.thread_id.is_empty() && !o.declined)
    {
        o.thread_id = batch_threads
            .get(&o.message_id)
            .cloned()
            .unwrap_or_default();
    }
    let stored: Vec<&Pending> = batch.iter().filter(|p| fresh.contains(&p.msg.id)).collect();
    // The first message of a thread created in this batch has no history: its dispatch can skip
    // looking for it. (Later messages of the same new thread do have one.)
    let mut created: std::collections::HashSet<&str> =
        new_ids.iter().flatten().map(String::as_str).collect();
    let opened: Vec<String> = stored
        .iter()
        .map(|p| p.msg.thread_id.as_str())
        .filter(|id| created.contains(id))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(str::to_owned)
        .collect();
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
    let mut messages = messages::insert_many(&mut tx, &rows, now).await?;
    if messages.len() != rows.len() {
        return Err(Error::Invalid(
            "a message with this id is already stored".into(),
        ));
    }
    // Each held with the value it was written from, so that its dispatch need not parse it
    // (the rows come back in the order given).
    for (m, p) in messages.iter_mut().zip(&stored) {
        if m.id == p.msg.id {
            m.parsed = Some(Parsed::Message(Arc::clone(&p.msg)));
        }
    }
    // Text-only messages of a transport with a debounce wait for more from their sender; the
    // others are dispatched at once.
    let mut by_delay: std::collections::BTreeMap<u64, Vec<DispatchJob>> = Default::default();
    for p in &stored {
        let debounce = core.conversation.of(&p.transport).debounce_ms;
        let delay = if debounce > 0 && super::conversation::debounces(&p.msg) {
            debounce
        } else {
            0
        };
        // A message that waits may find others of its thread answered before it runs.
        let opens = created.remove(p.msg.thread_id.as_str());
        by_delay.entry(delay).or_default().push(DispatchJob {
            message_id: p.msg.id.clone(),
            new_thread: opens && delay == 0,
            chain: Vec::new(),
            held: p.held,
            origin: None,
        });
    }
    let mut dispatch = Vec::with_capacity(by_delay.len());
    for (delay, jobs) in by_delay {
        let rows = DispatchJob::rows(jobs.into_iter())?;
        dispatch.push(if delay == 0 {
            core.queue
                .enqueue(&mut tx, kinds::DISPATCH, &rows, now)
                .await?
        } else {
            core.queue
                .enqueue_later(&mut tx, kinds::DISPATCH, &rows, now, delay)
                .await?
        });
    }
    tx.commit().await?;
    for ((transport, key), id) in &threads {
        core.thread_ids.put(&thread_key(transport, key), id.clone());
    }
    let stored = Stored {
        messages,
        opened,
        dispatch,
    };
    Ok((outcomes, stored))
}
