//! The `dispatch` and `deliver` job handlers.
//!
//! Each handles a claimed batch concurrently, then commits every outcome in one transaction:
//! the job's new state together with its effects (the stored response and its delivery job; the
//! delivery record), guarded by the lease so a job whose lease expired cannot apply its effects
//! twice.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use serde_json::Value;

use super::Core;
use crate::error::{Error, OutboundError, Result};
use crate::message::{
    AuthMethod, Extra, HistoricalMessage, NormalizedMessage, NormalizedResponse, Role, Sender,
    Timestamp,
};
use crate::queue::{JobHandler, kinds};
use crate::store::jobs::{self, Finish, JobRow, NewJob};
use crate::store::messages::{self, DeliveryRecord, NewMessage, StoredMessage};
use crate::transports::Delivery;

fn payload_id(job: &JobRow, key: &str) -> std::result::Result<String, OutboundError> {
    let v: Value = serde_json::from_str(&job.payload)
        .map_err(|e| OutboundError::permanent(format!("job payload is not JSON: {e}")))?;
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| OutboundError::permanent(format!("job payload has no {key}")))
}

/// Database trouble while preparing a job is temporary; a corrupt row is permanent.
fn internal(e: Error) -> OutboundError {
    match e {
        Error::Corrupt(_) => OutboundError::permanent(e.to_string()),
        other => OutboundError::temporary(other.to_string()),
    }
}

async fn load(core: &Core, id: &str) -> std::result::Result<StoredMessage, OutboundError> {
    messages::get(&core.db, id)
        .await
        .map_err(internal)?
        .ok_or_else(|| OutboundError::permanent(format!("message {id} is not stored")))
}

fn parse<T: serde::de::DeserializeOwned>(
    row: &StoredMessage,
) -> std::result::Result<T, OutboundError> {
    serde_json::from_str(&row.body)
        .map_err(|e| OutboundError::permanent(format!("stored message {} is corrupt: {e}", row.id)))
}

/// The agent's own sender record for its historical turns.
fn agent_sender(address: &str) -> Sender {
    Sender {
        address: address.to_owned(),
        display_name: None,
        profile: None,
        auth_method: AuthMethod::None,
        verified: true,
        key_id: None,
        identities: None,
        extra: Extra::new(),
    }
}

/// The dispatch outcome of one job: a response to store, or nothing to say.
type Dispatched = Option<(NormalizedResponse, String, String)>;

/// Handles `dispatch` jobs.
pub(super) struct DispatchHandler(pub(super) Arc<Core>);

impl DispatchHandler {
    async fn history(
        &self,
        row: &StoredMessage,
        agent_address: &str,
    ) -> std::result::Result<Vec<HistoricalMessage>, OutboundError> {
        let policy = self.0.history;
        let rows = messages::thread_turns(
            &self.0.db,
            &row.thread_id,
            row.seq,
            policy.keep_head,
            policy.tail_load_limit(),
        )
        .await
        .map_err(internal)?;
        let mut turns = Vec::with_capacity(rows.len());
        for r in &rows {
            if r.direction == "in" {
                let m: NormalizedMessage = parse(r)?;
                turns.push(HistoricalMessage {
                    id: Some(m.id),
                    role: Role::User,
                    sender: m.sender,
                    parts: m.parts,
                    timestamp: m.received_at,
                });
            } else {
                let resp: NormalizedResponse = parse(r)?;
                let own = resp.agent.eq_ignore_ascii_case(agent_address);
                turns.push(HistoricalMessage {
                    id: Some(resp.id),
                    role: if own { Role::Assistant } else { Role::User },
                    sender: agent_sender(&resp.agent),
                    parts: resp.parts,
                    timestamp: Timestamp::from_unix_millis(r.created_at),
                });
            }
        }
        Ok(turns)
    }

    async fn run(&self, job: &JobRow) -> std::result::Result<Dispatched, OutboundError> {
        let id = payload_id(job, "message_id")?;
        let row = load(&self.0, &id).await?;
        let mut msg: NormalizedMessage = parse(&row)?;
        let agent = self.0.agents.get(&row.agent).ok_or_else(|| {
            OutboundError::permanent(format!("agent {} is no longer configured", row.agent))
        })?;
        if msg.sender.address.eq_ignore_ascii_case(&agent.address) {
            tracing::debug!(message = %id, "an agent never answers itself");
            return Ok(None);
        }
        let trimmed = self
            .0
            .history
            .apply(self.history(&row, &agent.address).await?);
        if !trimmed.turns.is_empty() {
            msg.history = Some(trimmed.turns);
            msg.history_cache_breakpoint_after = trimmed.cache_breakpoint_after;
        }
        let started = Instant::now();
        let answer = agent.backend.respond(&msg).await;
        self.0
            .metrics
            .agent_call(&agent.name, started.elapsed(), answer.is_ok());
        Ok(answer?.map(|mut resp| {
            resp.thread_id.clone_from(&row.thread_id);
            (resp, agent.name.clone(), row.transport.clone())
        }))
    }
}

#[async_trait::async_trait]
impl JobHandler for DispatchHandler {
    async fn handle(&self, owner: &str, batch: Vec<JobRow>) -> Result<()> {
        let results = join_all(batch.iter().map(|job| self.run(job))).await;
        let core = &self.0;
        let now = core.clock.now_ms();
        let deliver_attempts = core.queue.max_attempts(kinds::DELIVER);
        let mut tx = core.db.begin().await?;
        let mut enqueued = false;
        let mut outcomes = Vec::with_capacity(batch.len());
        for (job, result) in batch.iter().zip(results) {
            let (finish, response) = match result {
                Ok(r) => (Finish::Done, r),
                Err(e) => {
                    tracing::warn!(job = %job.id, attempt = job.attempts, error = %e, "dispatch failed");
                    (core.queue.finish_for_error(job, &e), None)
                }
            };
            if !jobs::finish(&mut tx, &job.id, owner, &finish, now).await? {
                tracing::warn!(job = %job.id, "lease lost; another worker owns this job");
                continue;
            }
            outcomes.push(finish_label(&finish));
            let Some((resp, agent, transport)) = response else {
                continue;
            };
            let body = serde_json::to_string(&resp).map_err(Error::Corrupt)?;
            let stored = messages::insert(
                &mut tx,
                &NewMessage {
                    id: &resp.id,
                    thread_id: &resp.thread_id,
                    direction: "out",
                    agent: &agent,
                    transport: &transport,
                    answers: Some(&resp.in_reply_to),
                    body: &body,
                },
                now,
            )
            .await?;
            if stored {
                let job_id = format!("deliver:{}", resp.id);
                let payload = serde_json::json!({ "response_id": resp.id }).to_string();
                jobs::enqueue(
                    &mut tx,
                    &NewJob {
                        id: &job_id,
                        kind: kinds::DELIVER,
                        payload: &payload,
                        max_attempts: deliver_attempts,
                        run_at: now,
                    },
                    now,
                )
                .await?;
                enqueued = true;
            }
        }
        if enqueued {
            tx.notify(kinds::DELIVER).await?;
        }
        tx.commit().await?;
        for o in outcomes {
            core.metrics.job(kinds::DISPATCH, o);
        }
        if enqueued {
            core.queue.wake(kinds::DELIVER);
        }
        Ok(())
    }
}

fn finish_label(f: &Finish) -> &'static str {
    match f {
        Finish::Done => "done",
        Finish::Retry { .. } => "retry",
        Finish::Dead { .. } => "dead",
    }
}

/// Handles `deliver` jobs.
pub(super) struct DeliverHandler(pub(super) Arc<Core>);

impl DeliverHandler {
    async fn run(
        &self,
        job: &JobRow,
    ) -> (
        String,
        String,
        Option<Timestamp>,
        std::result::Result<(), OutboundError>,
    ) {
        let mut response_id = String::new();
        let mut transport_name = String::from("unknown");
        let mut received_at = None;
        let result = async {
            response_id = payload_id(job, "response_id")?;
            let row = load(&self.0, &response_id).await?;
            transport_name.clone_from(&row.transport);
            let response: NormalizedResponse = parse(&row)?;
            let original: NormalizedMessage = parse(&load(&self.0, &response.in_reply_to).await?)?;
            received_at = Some(original.received_at);
            let transport = self.0.transports.get(&row.transport).ok_or_else(|| {
                OutboundError::permanent(format!("no transport named {:?}", row.transport))
            })?;
            transport
                .deliver(&Delivery {
                    job_id: job.id.clone(),
                    attempt: job.attempts,
                    response,
                    original,
                })
                .await
        }
        .await;
        (response_id, transport_name, received_at, result)
    }
}

#[async_trait::async_trait]
impl JobHandler for DeliverHandler {
    async fn handle(&self, owner: &str, batch: Vec<JobRow>) -> Result<()> {
        let results = join_all(batch.iter().map(|job| self.run(job))).await;
        let core = &self.0;
        let now = core.clock.now_ms();
        let mut tx = core.db.begin().await?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for (job, (response_id, transport, received_at, result)) in batch.iter().zip(results) {
            let finish = match &result {
                Ok(()) => Finish::Done,
                Err(e) => {
                    tracing::warn!(job = %job.id, attempt = job.attempts, error = %e, "delivery failed");
                    core.queue.finish_for_error(job, e)
                }
            };
            if !jobs::finish(&mut tx, &job.id, owner, &finish, now).await? {
                tracing::warn!(job = %job.id, "lease lost; another worker owns this job");
                continue;
            }
            let (outcome, detail) = match &finish {
                Finish::Done => ("delivered", None),
                Finish::Dead { error } => ("failed", Some(error.as_str())),
                Finish::Retry { .. } => ("retry", None),
            };
            if outcome != "retry" {
                let record = DeliveryRecord {
                    job_id: &job.id,
                    response_id: &response_id,
                    transport: &transport,
                    outcome,
                    attempts: job.attempts,
                    detail,
                };
                messages::record_delivery(&mut tx, &record, now).await?;
            }
            outcomes.push((transport, outcome, received_at));
        }
        tx.commit().await?;
        for (transport, outcome, received_at) in outcomes {
            core.metrics.job(
                kinds::DELIVER,
                if outcome == "delivered" {
                    "done"
                } else if outcome == "failed" {
                    "dead"
                } else {
                    "retry"
                },
            );
            core.metrics.delivery(&transport, outcome);
            if let (Some(at), "delivered") = (received_at, outcome) {
                core.metrics.end_to_end(now - at.unix_millis());
            }
        }
        Ok(())
    }
}
