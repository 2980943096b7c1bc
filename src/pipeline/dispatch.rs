//! The `dispatch`, `deliver` and `turn_end` job handlers.
//!
//! Each handles a claimed batch concurrently, then commits every outcome in one transaction:
//! the job's new state together with its effects (the stored response and its delivery job; the
//! delivery record), guarded by the lease so a job whose lease expired cannot apply its effects
//! twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// How long a dispatch waits for one of its agent's call slots before leaving the message for
/// a later attempt (well inside any job lease).
const CALL_SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The most earlier messages one turn takes in.
const MAX_ABSORBED: usize = 256;

use futures_util::future::join_all;
use tracing::Instrument as _;

use super::{AfterCommit, Delivery};
use super::{Core, DeliverJob, DispatchJob, TurnEndJob};
use crate::error::{Error, OutboundError, Result};
use crate::message::{NormalizedMessage, NormalizedResponse, ResponseEvent, Timestamp};
use crate::queue::{JobHandler, kinds};
use crate::store::jobs::{Finish, JobRow};
use crate::store::messages::{self, DeliveryRecord, NewMessage, Parsed, StoredMessage};

fn payload<T: serde::de::DeserializeOwned>(job: &JobRow) -> std::result::Result<T, OutboundError> {
    serde_json::from_str(&job.payload)
        .map_err(|e| OutboundError::permanent(format!("job payload is malformed: {e}")))
}

/// Database trouble while preparing a job is temporary; a corrupt row is permanent, and says
/// which row and what is wrong with it.
fn internal(e: Error) -> OutboundError {
    match e {
        Error::Corrupt(detail) => OutboundError::permanent(detail),
        other => OutboundError::temporary(other.to_string()),
    }
}

/// The stored rows a batch refers to, keyed by id.
pub(super) type Rows = HashMap<String, Arc<StoredMessage>>;

/// Loads the stored rows a batch refers to (those stored last are still in memory). A database
/// failure fails every job of the batch temporarily (they are retried with backoff) instead of
/// stranding their leases.
pub(super) async fn load_many(
    core: &Core,
    ids: &[&str],
) -> std::result::Result<Rows, OutboundError> {
    messages::get_many_cached(&core.db, &core.recent, ids)
        .await
        .map_err(internal)
}

/// The payloads of a batch's jobs, and the stored rows they name (`of` each payload) loaded at
/// once ([`load_many`]).
pub(super) async fn load_batch<J: serde::de::DeserializeOwned>(
    core: &Core,
    batch: &[JobRow],
    of: impl Fn(&J) -> &str,
) -> (
    Vec<std::result::Result<J, OutboundError>>,
    std::result::Result<Rows, OutboundError>,
) {
    let jobs: Vec<_> = batch.iter().map(payload::<J>).collect();
    let wanted: Vec<&str> = jobs
        .iter()
        .filter_map(|j| j.as_ref().ok().map(&of))
        .collect();
    let rows = load_many(core, &wanted).await;
    (jobs, rows)
}

pub(super) fn lookup<'a>(
    rows: &'a Rows,
    id: &str,
) -> std::result::Result<&'a StoredMessage, OutboundError> {
    rows.get(id)
        .map(AsRef::as_ref)
        .ok_or_else(|| OutboundError::permanent(format!("message {id} is not stored")))
}

/// The stored message of `row` (a corrupt one fails its job for good).
pub(super) fn message(
    row: &StoredMessage,
) -> std::result::Result<NormalizedMessage, OutboundError> {
    row.message().map_err(internal)
}

/// The stored response of `row`, like [`message`].
pub(super) fn response(
    row: &StoredMessage,
) -> std::result::Result<NormalizedResponse, OutboundError> {
    row.response().map_err(internal)
}

/// A response to store.
struct Answer {
    response: NormalizedResponse,
    /// `response` as stored, serialised on the dispatch's own task, before the batch takes the
    /// database's writer.
    body: String,
    /// The agent's local name.
    agent: String,
    /// The transport it goes out by.
    transport: String,
    /// The message answered (without history), when the transport delivers in the
    /// transaction that stores the response ([`super::Transport::deliver_in`]).
    original: Option<NormalizedMessage>,
    /// The states of its policy parts, recorded with it.
    states: Vec<crate::store::policy::NewState>,
    /// The sibling agents it wakes ([`super::chain`]), stored and dispatched with it.
    siblings: Vec<super::chain::Sibling>,
    /// The earlier messages its turn took in, which end `merged`.
    absorbed: Vec<String>,
}

/// How one dispatch job went.
enum Dispatched {
    /// A response to store.
    Answer(Box<Answer>),
    /// The agent had nothing to say (to its message and the earlier ones it took in).
    Silent {
        /// The earlier messages the turn took in.
        absorbed: Vec<String>,
    },
    /// The message joins a later turn: it ends `merged`, without a call.
    Merged,
    /// A newer message interrupted the call: it ends `interrupted`, without a response.
    Interrupted,
    /// A later turn already took the message in: nothing left to do.
    Taken,
    /// Its thread has a run in flight: the job is put back until that run ends.
    Deferred,
    /// A safety rule holds the message: the agent is not called ([`super::Hold`]).
    Held(super::Hold),
    /// The message was erased (its author deleted it) before its turn: the agent is not
    /// called, its job ends `deleted`.
    Deleted,
}

/// A dispatch job's result, and the lease a job kept to wait for its thread is renewed to.
struct Ran(std::result::Result<Dispatched, OutboundError>, i64);

impl crate::queue::Attempted for Ran {
    fn error(&self) -> Option<&OutboundError> {
        self.0.as_ref().err()
    }

    fn deferred_until(&self) -> Option<i64> {
        matches!(self.0, Ok(Dispatched::Deferred)).then_some(self.1)
    }
}

/// The class of a dispatch failure as the operator API reports it (its text stays in the
/// job's `last_error` for the logs): `agent_unavailable` when the agent could not be reached or
/// kept failing until the attempts ran out, `agent_refused` when it refused the request (HTTP
/// 4xx), `agent_error` for any other failure that retrying would not fix.
fn failure_class(e: &OutboundError) -> &'static str {
    match e {
        OutboundError::Temporary { .. } => "agent_unavailable",
        OutboundError::Permanent { status, .. } if status.is_some_and(|s| s.is_refusal()) => {
            "agent_refused"
        }
        OutboundError::Permanent { .. } => "agent_error",
    }
}

/// The outcome of a message a safety rule held ([`super::Hold`], recorded as its class).
const HELD: &str = "held";

/// The outcome of a message erased before its turn came: its agent is never called with what
/// was erased.
pub(super) const DELETED: &str = "deleted";

/// Handles `dispatch` jobs.
pub(super) struct DispatchHandler(pub(super) Arc<Core>);

impl DispatchHandler {
    /// The woken agent's own access rules and rate limits for a relayed turn, judged by
    /// `origin`, the sender of the turn that started the chain; `Some` when they hold it.
    async fn gate_relayed(
        &self,
        agent: &crate::agents::Agent,
        transport: &str,
        origin: &crate::message::Sender,
    ) -> std::result::Result<Option<super::Hold>, OutboundError> {
        let core = &self.0;
        if core.authorize(agent, transport, origin).is_err() {
            return Ok(Some(super::Hold::Refused));
        }
        let over = core
            .over_rate(agent, transport, origin)
            .await
            .map_err(internal)?;
        Ok(over.map(|_| super::Hold::RateLimited))
    }

    /// The earlier messages the turn of `row` takes in, or how its job ends without a call
    /// when the message is left to a later turn (`Err`). Only transports whose conversation
    /// settings merge at all pay for the look-ups.
    async fn conversation(
        &self,
        row: &StoredMessage,
        msg: &NormalizedMessage,
        new_thread: bool,
    ) -> std::result::Result<
        std::result::Result<Vec<super::conversation::Absorbed>, Dispatched>,
        OutboundError,
    > {
        use super::conversation::{MERGED, absorbed, any_from, debounces};
        let conv = self.0.conversation.of(&row.transport);
        if !conv.merges() {
            return Ok(Ok(Vec::new()));
        }
        let db = &self.0.db;
        if messages::outcome_of(db, &row.id)
            .await
            .map_err(internal)?
            .as_deref()
            == Some(MERGED)
        {
            return Ok(Err(Dispatched::Taken));
        }
        let debounced = conv.debounce_ms > 0 && debounces(msg);
        let collapses = conv.queue != crate::config::QueueMode::Followup;
        if debounced || collapses {
            let later = messages::unanswered_after(db, &row.thread_id, &row.agent, row.seq)
                .await
                .map_err(internal)?;
            if (collapses && !later.is_empty())
                || (debounced && any_from(&later, &msg.sender.address))
            {
                tracing::debug!("merged into a later turn");
                return Ok(Err(Dispatched::Merged));
            }
        }
        if new_thread {
            return Ok(Ok(Vec::new()));
        }
        let before = messages::since_last_response(db, &row.thread_id, row.seq, MAX_ABSORBED)
            .await
            .map_err(internal)?;
        Ok(Ok(absorbed(&before, &row.agent, &msg.sender.address)))
    }

    async fn run(
        &self,
        row: &StoredMessage,
        job: &DispatchJob,
        run: &super::runs::Run,
        windows: &std::result::Result<super::history::Windows, OutboundError>,
    ) -> std::result::Result<Dispatched, OutboundError> {
        if row.deleted_at.is_some() {
            tracing::debug!("the message was deleted before its turn");
            return Ok(Dispatched::Deleted);
        }
        let new_thread = job.new_thread;
        let id = &row.id;
        let mut msg = message(row)?;
        let agent = self.0.agents.get(&row.agent).ok_or_else(|| {
            OutboundError::permanent(format!("agent {} is no longer configured", row.agent))
        })?;
        if msg.sender.address.eq_ignore_ascii_case(&agent.address) {
            tracing::debug!(message = %id, "an agent never answers itself");
            return Ok(Dispatched::Silent {
                absorbed: Vec::new(),
            });
        }
        if let Some(held) = job.held {
            return Ok(Dispatched::Held(held));
        }
        // A turn relayed from another agent passes the woken agent's own gate, judged by the
        // evidence of the sender who started the chain.
        let origin = match job.origin.as_deref() {
            Some(origin) if super::chain::relays(&msg.sender) => {
                if let Some(held) = self.gate_relayed(&agent, &row.transport, origin).await? {
                    return Ok(Dispatched::Held(held));
                }
                Some(origin)
            }
            _ => None,
        };
        let absorbed = match self.conversation(row, &msg, new_thread).await? {
            Ok(absorbed) => absorbed,
            Err(done) => return Ok(done),
        };
        let turns = if new_thread {
            Vec::new()
        } else {
            let relayed = super::chain::relayed_from(&msg).map(|(response, _)| response);
            let windows = windows.as_ref().map_err(Clone::clone)?;
            super::history::before(&self.0, row, windows, &agent.address, relayed, &absorbed)
                .await
                .map_err(internal)?
        };
        let mut trimmed = self.0.history.apply(turns);
        // Stored references keep the digest only: mint URLs valid from now.
        self.0.blobs.refresh_urls(&mut msg.parts);
        let original = self
            .0
            .transports
            .get(&row.transport)
            .filter(|t| t.delivers_in_transaction())
            .map(|_| msg.clone());
        // The messages the turn takes in open it, oldest first.
        let absorbed_ids: Vec<String> = absorbed.iter().map(|a| a.id.clone()).collect();
        if !absorbed.is_empty() {
            let mut parts: Vec<crate::message::Part> =
                absorbed.into_iter().flat_map(|a| a.parts).collect();
            self.0.blobs.refresh_urls(&mut parts);
            parts.append(&mut msg.parts);
            msg.parts = parts;
            tracing::debug!(
                merged = absorbed_ids.len(),
                "earlier messages join the turn"
            );
        }
        for turn in &mut trimmed.turns {
            self.0.blobs.refresh_shared_urls(&mut turn.parts);
        }
        if !trimmed.turns.is_empty() {
            msg.history = Some(trimmed.turns);
            msg.history_cache_breakpoint_after = trimmed.cache_breakpoint_after;
        }
        let call = async {
            // At most the agent's max_concurrent_calls at once; a call that cannot start soon
            // is tried again later rather than held past its job's lease.
            let Ok(Ok(_permit)) =
                tokio::time::timeout(CALL_SLOT_WAIT, agent.limits.calls.acquire()).await
            else {
                return Err(OutboundError::temporary(format!(
                    "agent {} is at its max_concurrent_calls",
                    agent.name
                )));
            };
            let started = Instant::now();
            let transport = self
                .0
                .transports
                .get(&row.transport)
                .filter(|t| agent.backend.streams() && t.wants_progress());
            let answer = match transport {
                // A streaming answer: its events go to the transport in order, all of them
                // before the final response is stored.
                Some(transport) => {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ResponseEvent>();
                    let original = msg.clone();
                    let forward = tokio::spawn(async move {
                        while let Some(ev) = rx.recv().await {
                            if let Err(e) = transport.progress(&original, &ev).await {
                                tracing::debug!(message = %original.id, error = %e, "progress not passed on");
                            }
                        }
                    });
                    let report = move |ev: ResponseEvent| {
                        let _ = tx.send(ev);
                    };
                    let answer = agent.backend.respond_streaming(&msg, &report).await;
                    drop(report);
                    let _ = forward.await;
                    answer
                }
                None => agent.backend.respond(&msg).await,
            };
            Ok((answer, started))
        };
        // A newer message of the thread may interrupt the call (queue mode `interrupt`).
        let (answer, started) = tokio::select! {
            biased;
            () = run.interrupted() => {
                tracing::debug!("interrupted by a newer message");
                return Ok(Dispatched::Interrupted);
            }
            called = call => called?,
        };
        self.0
            .metrics
            .agent_call(&agent.name, started.elapsed(), answer.is_ok());
        // NO_REPLY, a model's way of answering nothing, is no response: nothing goes out (an
        // A2A task still completes).
        let answer = answer.map(|a| a.filter(|r| !r.says_nothing()));
        match &answer {
            Ok(Some(r)) => tracing::debug!(response_id = %r.id, "agent answered"),
            Ok(None) => tracing::debug!("agent had nothing to say"),
            Err(e) => tracing::debug!(error = %e, "agent call failed"),
        }
        let Some(mut response) = answer? else {
            return Ok(Dispatched::Silent {
                absorbed: absorbed_ids,
            });
        };
        response.thread_id.clone_from(&row.thread_id);
        crate::blobs::strip_urls(&mut response.parts);
        let states = crate::policy::mint(
            &mut response,
            &crate::policy::Issue {
                agent: &agent.name,
                thread_id: &row.thread_id,
                message_id: &row.id,
                sender: &msg.sender,
                expires_at: self
                    .0
                    .clock
                    .now_ms()
                    .saturating_add(self.0.policy_state_ttl_ms),
            },
        );
        crate::policy::settle_state(&mut response);
        let siblings = super::chain::siblings(
            &self.0.agents,
            &msg,
            origin.unwrap_or(&msg.sender),
            &job.chain,
            &agent,
            &response,
            Timestamp::from_unix_millis(self.0.clock.now_ms()),
        );
        let body = serde_json::to_string(&response)
            .map_err(|e| OutboundError::permanent(format!("response not serialisable: {e}")))?;
        Ok(Dispatched::Answer(Box::new(Answer {
            response,
            body,
            agent: agent.name.clone(),
            transport: row.transport.clone(),
            original,
            states,
            siblings,
            absorbed: absorbed_ids,
        })))
    }
}

/// A response delivered (or refused for good) in the transaction that stored it.
struct DeliveredIn {
    job_id: String,
    response_id: String,
    transport: String,
    received_at: Timestamp,
    /// What to do after the commit, or why the delivery failed for good.
    result: std::result::Result<AfterCommit, OutboundError>,
}

impl DeliveredIn {
    fn outcome(&self) -> &'static str {
        if self.result.is_ok() {
            "delivered"
        } else {
            "failed"
        }
    }

    fn detail(&self) -> Option<&str> {
        match &self.result {
            Err(OutboundError::Permanent { reason, .. }) => Some(reason),
            _ => None,
        }
    }
}

impl DispatchHandler {
    /// The lease a job kept to wait for its thread is renewed to: a lease from now.
    fn defer_until(&self) -> i64 {
        let lease = i64::try_from(self.defer_for().as_millis()).unwrap_or(i64::MAX);
        self.0.clock.now_ms().saturating_add(lease)
    }

    /// How long a deferred job waits at the longest: a lease.
    fn defer_for(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.0.queue.config().lease_seconds)
    }

    /// Delivers `a` in `tx` when its transport delivers by writing to this database; `None`
    /// when it does not, or failed only for now (a delivery job then takes over).
    async fn deliver_in(
        &self,
        tx: &mut crate::store::Tx,
        job_id: &str,
        a: &Answer,
    ) -> Option<DeliveredIn> {
        let original = a.original.clone()?;
        let transport = self.0.transports.get(&a.transport)?;
        let mut response = a.response.clone();
        self.0.blobs.refresh_urls(&mut response.parts);
        let received_at = original.received_at;
        let delivery = Delivery {
            job_id: job_id.to_owned(),
            attempt: 1,
            response,
            original,
            continues: !a.siblings.is_empty(),
        };
        let result = transport.deliver_in(tx, &delivery).await;
        if let Err(e @ OutboundError::Temporary { .. }) = &result {
            tracing::debug!(response = %a.response.id, error = %e, "delivery left to a job");
            return None;
        }
        if let Err(e) = &result {
            tracing::warn!(response = %a.response.id, error = %e, "delivery failed");
        }
        Some(DeliveredIn {
            job_id: job_id.to_owned(),
            response_id: a.response.id.clone(),
            transport: a.transport.clone(),
            received_at,
            result,
        })
    }
}

#[async_trait::async_trait]
impl JobHandler for DispatchHandler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let core = &self.0;
        let (jobs, rows) = load_batch(core, batch, |j: &DispatchJob| j.message_id.as_str()).await;
        let row_of = |i: usize| -> Option<&StoredMessage> {
            let job = jobs.get(i)?.as_ref().ok()?;
            rows.as_ref().ok()?.get(&job.message_id).map(AsRef::as_ref)
        };
        // One run per thread and agent at a time: the oldest message of each takes its thread,
        // unless a run of it is in flight; the others wait for that run to end.
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by_key(|&i| row_of(i).map_or(i64::MAX, |r| r.seq));
        let mut taken: Vec<Option<super::runs::Run>> = batch.iter().map(|_| None).collect();
        let longest = self.defer_for();
        for i in order {
            if let Some(row) = row_of(i) {
                let key = (row.thread_id.clone(), row.agent.clone());
                taken[i] = core.runs.take(key.clone(), row.seq);
                if taken[i].is_none() {
                    core.runs.wait(key, row.seq, longest);
                }
            }
        }
        // The windows of the turns that run, looked up for the batch at once.
        let running: Vec<&StoredMessage> = (0..batch.len())
            .filter(|&i| taken[i].is_some())
            .filter(|&i| jobs[i].as_ref().is_ok_and(|j| !j.new_thread))
            .filter_map(row_of)
            .collect();
        let windows = super::history::windows(core, &running)
            .await
            .map_err(internal);
        let windows = &windows;
        let kept_until = self.defer_until();
        let loaded = &rows;
        let results: Vec<Ran> = join_all(jobs.iter().zip(batch).zip(&taken).map(
            |((job, job_row), run)| async move {
                let result = async {
                    let job = job.as_ref().map_err(Clone::clone)?;
                    let rows = loaded.as_ref().map_err(Clone::clone)?;
                    let row = lookup(rows, &job.message_id)?;
                    let Some(run) = run else {
                        tracing::debug!(message_id = %row.id, "its thread is running: deferred");
                        return Ok(Dispatched::Deferred);
                    };
                    let span = tracing::info_span!(
                        "dispatch",
                        job_id = %job_row.id,
                        message_id = %row.id,
                        thread_id = %row.thread_id,
                        transport = %row.transport,
                        agent = %row.agent,
                    );
                    self.run(row, job, run, windows).instrument(span).await
                }
                .await;
                Ran(result, kept_until)
            },
        ))
        .await;

        let now = core.clock.now_ms();
        let mut tx = core.db.begin().await?;
        let mut finished = core
            .queue
            .finish(&mut tx, owner, batch, &results, now)
            .await?;
        // Boxed as they came: an answer is kilobytes, and a batch's worth moved into one vector
        // (grown, copied, freed each batch) was fresh memory for the allocator every time.
        let mut answers: Vec<Box<Answer>> = Vec::with_capacity(batch.len());
        // Turns that end here without a response, for transports that need to know.
        let mut ended: Vec<TurnEndJob> = Vec::new();
        let ends_turns = |id: &str| {
            rows.as_ref()
                .ok()
                .and_then(|r| r.get(id))
                .and_then(|row| core.transports.get(&row.transport))
                .is_some_and(|t| t.ends_turns())
        };
        // Turns that end without a response, recorded on their message for the operator:
        // (message, outcome, failure class, the batch's message its transport is judged by).
        let mut silent: Vec<(String, &'static str, Option<&'static str>, String)> = Vec::new();
        // How each job's message ended, for the metrics (a message another turn took in is
        // counted by its own job, once).
        let mut counted: Vec<&'static str> = Vec::new();
        // Why a job failed for good, for its turn's end.
        let mut failures: HashMap<String, String> = HashMap::new();
        // Jobs kept leased to wait for their thread, and waiters whose job this batch lost.
        let mut parked: Vec<(super::runs::Key, i64, JobRow, i64)> = Vec::new();
        let mut lost: Vec<(super::runs::Key, i64)> = Vec::new();
        for (i, (ran, payload)) in results.into_iter().zip(&jobs).enumerate() {
            let Ok(payload) = payload.as_ref() else {
                continue;
            };
            let id = payload.message_id.clone();
            // A job whose lease was lost has no end here: it applies nothing.
            let Some(end) = finished.end(i) else {
                continue;
            };
            let merged = |absorbed: Vec<String>, silent: &mut Vec<_>| {
                for a in absorbed {
                    silent.push((a, super::conversation::MERGED, None, id.clone()));
                }
            };
            match (ran.0, end) {
                (Ok(Dispatched::Answer(mut answer)), _) => {
                    merged(std::mem::take(&mut answer.absorbed), &mut silent);
                    answers.push(answer);
                }
                (Ok(Dispatched::Silent { absorbed }), _) => {
                    merged(absorbed, &mut silent);
                    silent.push((id.clone(), "no_reply", None, id.clone()));
                    counted.push("no_reply");
                }
                (Ok(Dispatched::Merged), _) => {
                    silent.push((id.clone(), super::conversation::MERGED, None, id.clone()));
                    counted.push(super::conversation::MERGED);
                }
                (Ok(Dispatched::Taken), _) => counted.push(super::conversation::MERGED),
                (Ok(Dispatched::Held(held)), _) => {
                    silent.push((id.clone(), HELD, Some(held.label()), id.clone()));
                    counted.push(HELD);
                }
                (Ok(Dispatched::Deleted), _) => {
                    silent.push((id.clone(), DELETED, None, id.clone()));
                    counted.push(DELETED);
                }
                (Ok(Dispatched::Interrupted), _) => {
                    silent.push((
                        id.clone(),
                        super::conversation::INTERRUPTED,
                        None,
                        id.clone(),
                    ));
                    counted.push(super::conversation::INTERRUPTED);
                }
                (Ok(Dispatched::Deferred), Finish::Deferred { lease_until }) => {
                    if let Some(row) = row_of(i) {
                        let key = (row.thread_id.clone(), row.agent.clone());
                        parked.push((key, row.seq, batch[i].clone(), *lease_until));
                    }
                }
                (Ok(Dispatched::Deferred), _) => {
                    if let Some(row) = row_of(i) {
                        lost.push(((row.thread_id.clone(), row.agent.clone()), row.seq));
                    }
                }
                (Err(e), Finish::Dead { error }) => {
                    silent.push((id.clone(), "failed", Some(failure_class(&e)), id.clone()));
                    failures.insert(id.clone(), error.clone());
                    counted.push("failed");
                }
                (Err(_), _) => {}
            }
        }
        for (message_id, _, _, judged_by) in &silent {
            if ends_turns(judged_by) {
                ended.push(TurnEndJob {
                    message_id: message_id.clone(),
                    failure: failures.get(message_id).cloned(),
                });
            }
        }
        let outcomes: Vec<messages::DispatchOutcome<'_>> = silent
            .iter()
            .map(
                |(message_id, outcome, error_class, _)| messages::DispatchOutcome {
                    message_id,
                    outcome,
                    error_class: *error_class,
                },
            )
            .collect();
        let rows: Vec<NewMessage<'_>> = answers
            .iter()
            .map(|a| NewMessage {
                id: &a.response.id,
                thread_id: &a.response.thread_id,
                direction: "out",
                agent: &a.agent,
                transport: &a.transport,
                answers: Some(&a.response.in_reply_to),
                body: &a.body,
            })
            .collect();
        let stored = messages::insert_many(&mut tx, &rows, now).await?;
        let states: Vec<_> = answers
            .iter()
            .filter(|a| stored.iter().any(|m| m.id == a.response.id))
            .flat_map(|a| a.states.iter().cloned())
            .collect();
        crate::store::policy::insert(&mut tx, &states, now).await?;
        // The sibling agents the stored responses wake: their turns join the thread after the
        // responses, and are dispatched like any inbound message.
        let siblings: Vec<(&Answer, &super::chain::Sibling)> = answers
            .iter()
            .map(AsRef::as_ref)
            .filter(|a| stored.iter().any(|m| m.id == a.response.id))
            .flat_map(|a| a.siblings.iter().map(move |s| (a, s)))
            .collect();
        let sibling_bodies = siblings
            .iter()
            .map(|(_, s)| serde_json::to_string(&s.msg))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(Error::corrupt)?;
        let sibling_rows: Vec<NewMessage<'_>> = siblings
            .iter()
            .zip(&sibling_bodies)
            .map(|((a, s), body)| NewMessage {
                id: &s.msg.id,
                thread_id: &s.msg.thread_id,
                direction: "in",
                agent: &s.agent,
                transport: &a.transport,
                answers: None,
                body,
            })
            .collect();
        let relayed = messages::insert_many(&mut tx, &sibling_rows, now).await?;
        let sibling_jobs = DispatchJob::rows(siblings.iter().map(|(_, s)| DispatchJob {
            message_id: s.msg.id.clone(),
            new_thread: false,
            chain: s.chain.clone(),
            held: None,
            origin: Some(Box::new(s.origin.clone())),
        }))?;
        let woken = core
            .queue
            .enqueue(&mut tx, kinds::DISPATCH, &sibling_jobs, now)
            .await?;
        for (_, s) in &siblings {
            tracing::info!(
                agent = %s.agent,
                message_id = %s.msg.id,
                hop = s.msg.recipient_capabilities.agent_chain.map_or(0, |c| c.hop),
                "a mentioned agent is woken"
            );
        }
        // Responses whose transport delivers by writing to this database are delivered here,
        // in this transaction; the others (and any that could not be) get a delivery job.
        let mut job_ids = Vec::new();
        let mut delivered = Vec::new();
        for a in answers
            .iter()
            .filter(|a| stored.iter().any(|m| m.id == a.response.id))
        {
            let job_id = format!("deliver:{}", a.response.id);
            if let Some(done) = self.deliver_in(&mut tx, &job_id, a).await {
                delivered.push(done);
                continue;
            }
            let payload = serde_json::to_string(&DeliverJob {
                response_id: a.response.id.clone(),
                continues: !a.siblings.is_empty(),
            })
            .map_err(Error::corrupt)?;
            job_ids.push((job_id, payload));
        }
        let records: Vec<DeliveryRecord<'_>> = delivered
            .iter()
            .map(|d| DeliveryRecord {
                job_id: &d.job_id,
                response_id: &d.response_id,
                transport: &d.transport,
                outcome: d.outcome(),
                attempts: 1,
                detail: d.detail(),
            })
            .collect();
        messages::record_deliveries(&mut tx, &records, now).await?;
        messages::record_outcomes(&mut tx, &outcomes).await?;
        let turn_ends = ended
            .iter()
            .map(|e| {
                Ok((
                    format!("{}:{}", kinds::TURN_END, e.message_id),
                    serde_json::to_string(e)?,
                ))
            })
            .collect::<std::result::Result<Vec<(String, String)>, serde_json::Error>>()
            .map_err(Error::corrupt)?;
        let deliver = core
            .queue
            .enqueue(&mut tx, kinds::DELIVER, &job_ids, now)
            .await?;
        let turn_end = core
            .queue
            .enqueue(&mut tx, kinds::TURN_END, &turn_ends, now)
            .await?;
        for d in &delivered {
            finished.count_delivery_outcome(&d.transport, d.outcome());
        }
        core.queue.commit(tx, finished).await?;
        // What was stored is held and noted in its thread before the runs end: the next turn of
        // a thread, which waits for this run, sees it without asking the database.
        // Each held with the value it was written from, for the stages that read it next.
        let mut written: HashMap<&str, Parsed> = answers
            .iter()
            .map(|a| {
                let r = Parsed::Response(Arc::new(a.response.clone()));
                (a.response.id.as_str(), r)
            })
            .chain(
                siblings
                    .iter()
                    .map(|(_, s)| (s.msg.id.as_str(), Parsed::Message(Arc::new(s.msg.clone())))),
            )
            .collect();
        let answered = stored.len();
        let stored: Vec<StoredMessage> = stored
            .into_iter()
            .chain(relayed)
            .map(|mut row| {
                row.parsed = written.remove(row.id.as_str());
                row
            })
            .collect();
        super::history::hold(core, stored, &[]);
        for outcome in counted {
            core.metrics.turn(outcome);
        }
        for _ in 0..answered {
            core.metrics.turn("answered");
        }
        // Jobs that wait for their thread are kept here, leased; once a run has ended, the
        // oldest message that waited for its thread goes back to the workers (the others wait
        // for the run that one starts). The runs this batch held end when `taken` is dropped.
        let mut keys: std::collections::HashSet<super::runs::Key> = taken
            .iter()
            .flatten()
            .map(|run| run.key().clone())
            .collect();
        for (key, seq, job, until) in parked {
            core.runs.park(key.clone(), seq, job, until);
            keys.insert(key);
        }
        for (key, seq) in &lost {
            core.runs.leave(key, *seq);
        }
        drop(taken);
        for key in keys {
            if let Some((job, until)) = core.runs.next_parked(&key) {
                core.queue.hand_back(kinds::DISPATCH, job, until).await;
            }
        }
        for _ in &states {
            core.metrics.policy_state("minted");
        }
        for d in delivered {
            if let Ok(after) = d.result {
                core.metrics.end_to_end(now - d.received_at.unix_millis());
                after();
            }
        }
        core.queue.hand_over(deliver);
        core.queue.hand_over(turn_end);
        core.queue.hand_over(woken);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::failure_class;
    use crate::error::{OutboundError, PeerStatus};

    #[test]
    fn failures_are_classed_without_their_text() {
        let unreachable = OutboundError::temporary("connection refused");
        let five_hundred = OutboundError::temporary("HTTP 500").with_status(PeerStatus::Http(500));
        let refused = OutboundError::permanent("HTTP 403").with_status(PeerStatus::Http(403));
        let malformed = OutboundError::permanent("answer is not a response");
        assert_eq!(failure_class(&unreachable), "agent_unavailable");
        assert_eq!(failure_class(&five_hundred), "agent_unavailable");
        assert_eq!(failure_class(&refused), "agent_refused");
        assert_eq!(failure_class(&malformed), "agent_error");
    }
}
