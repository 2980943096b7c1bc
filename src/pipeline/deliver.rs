//! Delivery: `deliver` jobs send a stored response through its transport and record how it
//! went; `turn_end` jobs tell a transport that a message's turn ended without a response.

use std::sync::Arc;

use futures_util::future::join_all;
use tracing::Instrument as _;

use super::dispatch::{Rows, load_batch, load_many, lookup, message, response};
use super::{Core, DeliverJob, Delivery, TurnEndJob};
use crate::error::{OutboundError, Result};
use crate::message::{NormalizedResponse, Timestamp};
use crate::queue::JobHandler;
use crate::store::jobs::{Finish, JobRow};
use crate::store::messages::{self, DeliveryRecord, StoredMessage};

/// Handles `deliver` jobs.
pub(super) struct DeliverHandler(pub(super) Arc<Core>);

/// What one delivery attempt was about and how it went.
struct Attempt {
    response_id: String,
    agent: String,
    transport: String,
    received_at: Option<Timestamp>,
    result: std::result::Result<(), OutboundError>,
}

impl DeliverHandler {
    async fn run(
        &self,
        job: &JobRow,
        response: std::result::Result<(&StoredMessage, NormalizedResponse, bool), OutboundError>,
        originals: &std::result::Result<Rows, OutboundError>,
        trace: Option<crate::telemetry::TraceParent>,
    ) -> Attempt {
        let mut attempt = Attempt {
            response_id: String::new(),
            agent: String::new(),
            transport: "unknown".into(),
            received_at: None,
            result: Ok(()),
        };
        let span = tracing::info_span!(
            "deliver",
            job_id = %job.id,
            response_id = tracing::field::Empty,
            message_id = tracing::field::Empty,
            thread_id = tracing::field::Empty,
            transport = tracing::field::Empty,
            agent = tracing::field::Empty,
            otel.kind = "consumer",
        );
        crate::telemetry::set_parent(&span, trace);
        if let Ok((row, response, _)) = &response {
            span.record("response_id", row.id.as_str());
            span.record("message_id", response.in_reply_to.as_str());
            span.record("thread_id", row.thread_id.as_str());
            span.record("transport", row.transport.as_str());
            span.record("agent", row.agent.as_str());
        }
        attempt.result = async {
            let (row, response, job_continues) = response?;
            attempt.response_id.clone_from(&row.id);
            attempt.transport.clone_from(&row.transport);
            attempt.agent.clone_from(&row.agent);
            let originals = originals.as_ref().map_err(Clone::clone)?;
            let original_row = lookup(originals, &response.in_reply_to)?;
            if original_row.deleted_at.is_some() {
                // Its author deleted it: the reply is kept, not sent.
                return Err(OutboundError::permanent(
                    "the message it answers was deleted",
                ));
            }
            let mut original = message(original_row)?;
            attempt.received_at = Some(original.received_at);
            let mut response = response;
            self.0.blobs.refresh_urls(&mut response.parts);
            self.0.blobs.refresh_shared_urls(&mut original);
            let transport = self.0.transports.get(&row.transport).ok_or_else(|| {
                OutboundError::permanent(format!("no transport named {:?}", row.transport))
            })?;
            if !transport.carries_policy_parts() {
                response.parts = crate::policy::as_text(&response.parts, &self.0.public_url);
            }
            let delivered = transport
                .deliver(&Delivery {
                    job_id: job.id.clone(),
                    attempt: job.attempts,
                    response,
                    original,
                    continues: job_continues,
                })
                .await;
            match &delivered {
                Ok(()) => tracing::debug!(attempt = job.attempts, "response delivered"),
                Err(e) => tracing::debug!(attempt = job.attempts, error = %e, "delivery failed"),
            }
            delivered
        }
        .instrument(span)
        .await;
        attempt
    }
}

#[async_trait::async_trait]
impl JobHandler for DeliverHandler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let core = &self.0;
        let (jobs, rows) = load_batch(core, batch, |j: &DeliverJob| j.response_id.as_str()).await;
        let responses: Vec<_> = jobs
            .iter()
            .map(|job| {
                let job = job.as_ref().map_err(Clone::clone)?;
                let row = lookup(rows.as_ref().map_err(Clone::clone)?, &job.response_id)?;
                Ok((row, response(row)?, job.continues))
            })
            .collect();
        let original_ids: Vec<String> = responses
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|(_, resp, _)| resp.in_reply_to.clone()))
            .collect();
        let wanted: Vec<&str> = original_ids.iter().map(String::as_str).collect();
        let originals = load_many(core, &wanted).await;
        let attempts = join_all(batch.iter().zip(responses).zip(&jobs).map(
            |((job, response), payload)| {
                let trace = payload.as_ref().ok().and_then(|p| p.trace);
                self.run(job, response, &originals, trace)
            },
        ))
        .await;

        let now = core.clock.now_ms();
        let mut tx = core.db.begin().await?;
        let mut finished = core
            .queue
            .finish(&mut tx, owner, batch, &attempts, now)
            .await?;
        // A transport that only schedules its sending counts each of its own attempts.
        for (i, a) in attempts.iter().enumerate() {
            let counts_own = core
                .transports
                .get(&a.transport)
                .is_some_and(|t| t.sends_in_jobs());
            if !counts_own {
                finished.count_delivery(i, &a.transport);
            }
        }
        let mut records = Vec::new();
        let mut latencies = Vec::new();
        for (i, (job, a)) in batch.iter().zip(&attempts).enumerate() {
            let Some(end) = finished.end(i) else {
                continue;
            };
            let outcome = crate::queue::delivery_outcome(end);
            if outcome != "retry" {
                let detail = match end {
                    Finish::Dead { error } => Some(error.as_str()),
                    _ => None,
                };
                records.push(DeliveryRecord {
                    job_id: &job.id,
                    response_id: &a.response_id,
                    transport: &a.transport,
                    outcome,
                    attempts: job.attempts,
                    detail,
                });
            }
            if let (Some(at), "delivered") = (a.received_at, outcome) {
                latencies.push(now - at.unix_millis());
            }
        }
        messages::record_deliveries(&mut tx, &records, now).await?;
        core.queue.commit(tx, finished).await?;
        for ms in latencies {
            core.metrics.end_to_end(ms);
        }
        Ok(())
    }
}

impl crate::queue::Attempted for Attempt {
    fn error(&self) -> Option<&OutboundError> {
        self.result.as_ref().err()
    }

    fn about(&self) -> crate::queue::About<'_> {
        if self.agent.is_empty() {
            return crate::queue::About::default();
        }
        crate::queue::About::new(&self.agent, &self.transport)
    }
}

/// A `turn_end` job's result, and the message it was for (its agent and transport name the job
/// in the log).
struct Ended<'a>(
    std::result::Result<(), OutboundError>,
    Option<&'a StoredMessage>,
);

impl crate::queue::Attempted for Ended<'_> {
    fn error(&self) -> Option<&OutboundError> {
        self.0.as_ref().err()
    }

    fn about(&self) -> crate::queue::About<'_> {
        super::dispatch::about(self.1)
    }
}

/// Handles `turn_end` jobs: tells the message's transport that its turn ended without a
/// response.
pub(super) struct TurnEndHandler(pub(super) Arc<Core>);

impl TurnEndHandler {
    async fn run(
        &self,
        job: &std::result::Result<TurnEndJob, OutboundError>,
        rows: &std::result::Result<Rows, OutboundError>,
    ) -> std::result::Result<(), OutboundError> {
        let job = job.as_ref().map_err(Clone::clone)?;
        let row = lookup(rows.as_ref().map_err(Clone::clone)?, &job.message_id)?;
        let original = message(row)?;
        let transport = self.0.transports.get(&row.transport).ok_or_else(|| {
            OutboundError::permanent(format!("no transport named {:?}", row.transport))
        })?;
        match transport.ends_turns() {
            Some(t) => t.unanswered(&original, job.failure.as_deref()).await,
            None => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl JobHandler for TurnEndHandler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let core = &self.0;
        let (jobs, rows) = load_batch(core, batch, |j: &TurnEndJob| j.message_id.as_str()).await;
        let results: Vec<Ended> = join_all(jobs.iter().map(|job| async {
            let row = job.as_ref().ok().and_then(|j| {
                rows.as_ref()
                    .ok()
                    .and_then(|r| lookup(r, &j.message_id).ok())
            });
            Ended(self.run(job, &rows).await, row)
        }))
        .await;
        let now = core.clock.now_ms();
        let mut tx = core.db.begin().await?;
        let finished = core
            .queue
            .finish(&mut tx, owner, batch, &results, now)
            .await?;
        core.queue.commit(tx, finished).await
    }
}
