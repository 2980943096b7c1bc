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
use crate::store::messages::{self, ExternalKey, NewMessage, Parsed};
use crate::store::{Backend, Tx};

/// The most messages committed together.
const MAX_BATCH: usize = 256;

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
}

/// A transport's write travelling with its message, and the caller it goes back to with the
/// outcome ([`Carry`]).
pub(super) trait Carried: IngestWrite {
    /// Answers the caller: the outcome, and the write with whatever it recorded.
    fn answer(self: Box<Self>, result: Result<IngestOutcome>);
}

/// A write of type `W` and its caller's typed reply channel.
pub(super) struct Carry<W> {
    pub(super) write: W,
    pub(super) reply: oneshot::Sender<Result<(IngestOutcome, W)>>,
}

#[async_trait::async_trait]
impl<W: IngestWrite> IngestWrite for Carry<W> {
    async fn write(&mut self, tx: &mut Tx, now: i64) -> Result<bool> {
        self.write.write(tx, now).await
    }

    fn blocked_by_sender(&self) -> bool {
        self.write.blocked_by_sender()
    }

    fn committed(&mut self) {
        self.write.committed();
    }
}

impl<W: IngestWrite> Carried for Carry<W> {
    fn answer(self: Box<Self>, result: Result<IngestOutcome>) {
        let Self { write, reply } = *self;
        let _ = reply.send(result.map(|o| (o, write)));
    }
}

/// Whom ingest answers once a message's batch has committed.
pub(super) enum Reply {
    /// A caller of [`super::Pipeline::ingest`]: the outcome.
    Outcome(oneshot::Sender<Result<IngestOutcome>>),
    /// A caller of [`super::Pipeline::ingest_with`]: the outcome and its write, which ingest
    /// runs in the message's transaction.
    With(Box<dyn Carried>),
}

impl Reply {
    /// The transport's write, if the message has one.
    fn write(&mut self) -> Option<&mut dyn Carried> {
        match self {
            Self::Outcome(_) => None,
            Self::With(w) => Some(w.as_mut()),
        }
    }

    fn send(self, result: Result<IngestOutcome>) {
        match self {
            Self::Outcome(reply) => {
                let _ = reply.send(result);
            }
            Self::With(w) => w.answer(result),
        }
    }
}

pub(super) struct Pending {
    pub(super) transport: String,
    pub(super) external_id: String,
    pub(super) agent: String,
    /// The wire thread key, kept apart because `msg.thread_id` is rewritten to switchboard's
    /// thread id (and a failed batch is retried message by message).
    pub(super) thread_key: String,
    /// Shared once stored: what was committed is held as it was written ([`Parsed`]).
    pub(super) msg: Arc<NormalizedMessage>,
    /// Why the policy state the message presents was refused, when it was (set by the commit
    /// that declined it; the waiter is told).
    pub(super) refused: Option<crate::policy::Refusal>,
    /// Why the agent is not to be called for it, when a safety rule said so.
    pub(super) held: Option<super::Hold>,
    /// The `ingest` span's trace context, when traces are exported (its dispatch job carries
    /// it).
    pub(super) trace: Option<crate::telemetry::TraceParent>,
    /// Whom to answer, and the transport's write, if any.
    pub(super) reply: Reply,
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
    /// The runs the messages dispatched now are on their way to ([`super::runs::Runs::expect`]).
    expected: Vec<super::runs::Place>,
    /// The threads the batch created.
    opened: Vec<String>,
    /// Dispatch jobs to start now, and those a debounce holds back.
    dispatch: Vec<Enqueued>,
    /// The threads written, read from the database until their rows are held.
    writing: super::caches::Writing,
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
        for w in batch.iter_mut().filter_map(|p| p.reply.write()) {
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
                && core
                    .runs
                    .interrupt(&super::runs::Key::new(&m.thread_id, &m.agent), m.seq)
            {
                tracing::debug!(thread_id = %m.thread_id, agent = %m.agent, "run interrupted by a newer message");
            }
        }
        let opened: Vec<&str> = then.opened.iter().map(String::as_str).collect();
        core.caches.hold(then.messages, &opened);
        drop(then.writing);
        core.runs.expect(then.expected);
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
                Ok(o)
            }
            Err(e) => Err(e),
        };
        p.reply.send(reply);
    }
}

/// The body `msg` is stored as, in thread `thread_id` (switchboard's), attachments referred to by
/// digest only, with its reply context.
fn stored_body(msg: &mut Arc<NormalizedMessage>, thread_id: &str) -> Result<String> {
    let m = Arc::make_mut(msg);
    thread_id.clone_into(&mut m.thread_id);
    crate::blobs::strip_urls(&mut m.parts);
    // A field of the reply context's stored name among the unknown ones is not kept (it is
    // not stored), so what is held in memory is what a read gives back.
    m.extra.remove(crate::message::STORED_REPLY_CONTEXT);
    msg.to_stored_json().map_err(Error::corrupt)
}

/// What becomes of one message of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fate {
    /// New: stored and dispatched.
    Fresh,
    /// Its external id was claimed before: which message holds it is looked up once the
    /// batch's own declines have given theirs back.
    Seen,
    /// Its external id was seen: the message stored then (its thread's id still unknown when
    /// that message is earlier in this same batch).
    Duplicate {
        message_id: String,
        thread_id: Option<String>,
    },
    /// Its policy state was refused, or the transport's own write declined it.
    Declined,
}

/// One message of a batch as its commit goes, in the batch's order.
#[derive(Debug)]
struct Row {
    /// The id its thread gets, should the thread be new.
    new_thread: String,
    /// What becomes of it.
    fate: Fate,
}

/// What an ingest batch writes once its messages' fates and threads are known.
#[derive(Debug, Default)]
struct Plan {
    /// Each message's outcome, in the batch's order.
    outcomes: Vec<IngestOutcome>,
    /// The messages to store (their index in the batch) and their bodies.
    inserts: Vec<(usize, String)>,
    /// Their dispatch jobs, by how long they wait (ms; a debounce holds text back).
    jobs: std::collections::BTreeMap<u64, Vec<DispatchJob>>,
    /// The threads the batch creates.
    opened: Vec<String>,
}

/// Decides what `batch` writes: each message's outcome, body and dispatch job. `threads` maps
/// the wire threads the batch met first to their new ids.
fn plan(
    conversation: &crate::config::ConversationConfig,
    batch: &mut [Pending],
    rows: &mut [Row],
    threads: &std::collections::HashMap<(String, String), String>,
) -> Result<Plan> {
    let mut plan = Plan::default();
    // The first message of a thread created in this batch has no history: its dispatch can
    // skip looking for it. (Later messages of the same new thread do have one.)
    let mut created: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (i, (p, row)) in batch.iter_mut().zip(rows.iter_mut()).enumerate() {
        let outcome = match &row.fate {
            Fate::Declined => IngestOutcome {
                message_id: String::new(),
                thread_id: String::new(),
                duplicate: false,
                declined: true,
            },
            Fate::Seen => {
                return Err(Error::Invalid("duplicate of an unknown message".into()));
            }
            Fate::Duplicate {
                message_id,
                thread_id,
            } => IngestOutcome {
                message_id: message_id.clone(),
                thread_id: thread_id.clone().unwrap_or_default(),
                duplicate: true,
                declined: false,
            },
            Fate::Fresh => {
                let thread_id = threads
                    .get(&(p.transport.clone(), p.thread_key.clone()))
                    .ok_or_else(|| Error::Invalid("thread could not be stored".into()))?;
                let body = stored_body(&mut p.msg, thread_id)?;
                let thread_id = &p.msg.thread_id;
                let opens = row.new_thread == *thread_id && created.insert(thread_id.clone());
                if opens {
                    plan.opened.push(thread_id.clone());
                }
                // Text-only messages of a transport with a debounce wait for more from their
                // sender; the others are dispatched at once. A message that waits may find
                // others of its thread answered before it runs.
                let debounce = conversation.of(&p.transport).debounce_ms;
                let delay = if debounce > 0 && super::conversation::debounces(&p.msg) {
                    debounce
                } else {
                    0
                };
                plan.jobs.entry(delay).or_default().push(DispatchJob {
                    message_id: p.msg.id.clone(),
                    new_thread: opens && delay == 0,
                    chain: Vec::new(),
                    held: p.held,
                    origin: None,
                    trace: p.trace,
                });
                plan.inserts.push((i, body));
                IngestOutcome {
                    message_id: p.msg.id.clone(),
                    thread_id: thread_id.clone(),
                    duplicate: false,
                    declined: false,
                }
            }
        };
        plan.outcomes.push(outcome);
    }
    // A duplicate of a message of this same batch: its thread is known only now.
    let batch_threads: std::collections::HashMap<String, String> = plan
        .outcomes
        .iter()
        .filter(|o| !o.duplicate && !o.declined)
        .map(|o| (o.message_id.clone(), o.thread_id.clone()))
        .collect();
    for o in plan
        .outcomes
        .iter_mut()
        .filter(|o| o.duplicate && o.thread_id.is_empty())
    {
        o.thread_id = batch_threads
            .get(&o.message_id)
            .cloned()
            .unwrap_or_default();
    }
    plan.opened.sort_unstable();
    Ok(plan)
}

async fn commit(core: &Core, batch: &mut [Pending]) -> Result<(Vec<IngestOutcome>, Stored)> {
    let mut rows: Vec<Row> = batch
        .iter()
        .map(|_| Row {
            new_thread: uuid::Uuid::now_v7().to_string(),
            fate: Fate::Fresh,
        })
        .collect();
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
    let fresh = messages::claim_external_ids(&mut tx, &keys, now).await?;
    for (p, row) in batch.iter().zip(&mut rows) {
        if !fresh.contains(&p.msg.id) {
            row.fate = Fate::Seen;
        }
    }

    // A policy state a new message presents is checked and consumed here, before anything
    // else of it is written; a refused one is declined like below, and its waiter told why.
    for (p, row) in batch.iter_mut().zip(&mut rows) {
        p.refused = None;
        let msg = Arc::make_mut(&mut p.msg);
        let Some(claim) = msg
            .policy_resolution
            .as_mut()
            .filter(|_| row.fate == Fate::Fresh)
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
            row.fate = Fate::Declined;
            p.refused = Some(r);
        }
    }

    // The transports' own rows, for new messages; a declined message gives its key back.
    for (p, row) in batch.iter_mut().zip(&mut rows) {
        if let Some(w) = p.reply.write().filter(|_| row.fate == Fate::Fresh)
            && !w.write(&mut tx, now).await?
        {
            if let Some(claim) = p.msg.policy_resolution.as_ref().filter(|c| c.verified) {
                crate::store::policy::release(&mut tx, &claim.in_reply_to_state, &p.msg.id).await?;
            }
            messages::release_external_id(&mut tx, &p.transport, &p.external_id).await?;
            row.fate = Fate::Declined;
        }
        if p.reply.write().is_some_and(|w| w.blocked_by_sender()) {
            p.held = Some(super::Hold::BlockedBySender);
        }
    }

    // Which message holds the external id of each duplicate (one declined above gave it
    // back: the batch then fails, and is retried message by message).
    for (p, row) in batch.iter().zip(&mut rows) {
        if row.fate == Fate::Seen {
            let (message_id, thread_id) =
                messages::duplicate_of(&mut tx, &p.transport, &p.external_id)
                    .await?
                    .ok_or_else(|| Error::Invalid("duplicate of an unknown message".into()))?;
            row.fate = Fate::Duplicate {
                message_id,
                thread_id: (!thread_id.is_empty()).then_some(thread_id),
            };
        }
    }

    // 2. Threads: map each wire thread key to switchboard's thread id (a new one when the
    // thread is new).
    let wanted: Vec<(&str, &str, &str)> = batch
        .iter()
        .zip(&rows)
        .filter(|(_, row)| row.fate == Fate::Fresh)
        .map(|(p, row)| {
            (
                p.transport.as_str(),
                p.thread_key.as_str(),
                row.new_thread.as_str(),
            )
        })
        .collect();
    let threads = messages::upsert_threads(&mut tx, &wanted, now).await?;

    // 3. Messages and their dispatch jobs.
    let plan = plan(&core.conversation, batch, &mut rows, &threads)?;
    let inserts: Vec<NewMessage<'_>> = plan
        .inserts
        .iter()
        .map(|(i, body)| NewMessage {
            id: &batch[*i].msg.id,
            thread_id: &batch[*i].msg.thread_id,
            direction: "in",
            agent: &batch[*i].agent,
            transport: &batch[*i].transport,
            answers: None,
            body,
        })
        .collect();
    let mut messages = messages::insert_many(&mut tx, &inserts, now).await?;
    if messages.len() != inserts.len() {
        return Err(Error::Invalid(
            "a message with this id is already stored".into(),
        ));
    }
    // Each held with the value it was written from, so that its dispatch need not parse it
    // (the rows come back in the order given).
    for (m, (i, _)) in messages.iter_mut().zip(&plan.inserts) {
        let p = &batch[*i];
        if m.id == p.msg.id {
            m.parsed = Some(Parsed::Message(Arc::clone(&p.msg)));
        }
    }
    let mut dispatch = Vec::with_capacity(plan.jobs.len());
    let mut expected = Vec::new();
    for (delay, jobs) in plan.jobs {
        let rows = DispatchJob::rows(jobs.iter())?;
        let enqueued = if delay == 0 {
            core.queue
                .enqueue(&mut tx, kinds::DISPATCH, &rows, now)
                .await?
        } else {
            core.queue
                .enqueue_later(&mut tx, kinds::DISPATCH, &rows, now, delay)
                .await?
        };
        // The messages dispatched now keep their places in their threads until their
        // dispatch takes them ([`super::runs::Runs::expect`]): on SQLite, whose runs are this
        // process's alone, and when no other worker can claim the jobs first. Jobs and
        // messages are both in the batch's order.
        if delay == 0 && enqueued.leased_here() && core.db.backend() == Backend::Sqlite {
            let mut started = jobs.iter().map(|j| j.message_id.as_str()).peekable();
            expected = messages
                .iter()
                .filter(|m| started.next_if_eq(&m.id.as_str()).is_some())
                .map(|m| super::runs::Place {
                    key: super::runs::Key::new(&m.thread_id, &m.agent),
                    seq: m.seq,
                })
                .collect();
        }
        dispatch.push(enqueued);
    }
    // A newer message interrupts its thread's run wherever it is in flight: here once the
    // batch is answered ([`Ingest::then`]), on the other instances by notification.
    let interrupts: Vec<String> = messages
        .iter()
        .filter(|m| core.conversation.of(&m.transport).queue == QueueMode::Interrupt)
        .map(|m| super::runs::notification(&super::runs::Key::new(&m.thread_id, &m.agent), m.seq))
        .collect();
    tx.notify_lines(super::runs::NOTIFY_CHANNEL, &interrupts)
        .await?;
    // Until they are held, the threads' windows come from the database.
    let writing = core
        .caches
        .writing(messages.iter().map(|m| m.thread_id.as_str()));
    tx.commit().await?;
    let stored = Stored {
        messages,
        expected,
        opened: plan.opened,
        dispatch,
        writing,
    };
    Ok((plan.outcomes, stored))
}
