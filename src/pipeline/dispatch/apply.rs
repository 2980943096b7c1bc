//! A dispatch batch's [`Effects`] written ([`apply`], in the transaction that ends its jobs)
//! and followed up once that transaction has committed ([`after_commit`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::plan::{Answer, Effects};
use crate::error::{Error, OutboundError, Result};
use crate::pipeline::chain::Sibling;
use crate::pipeline::runs::{Place, Run};
use crate::pipeline::{AfterCommit, Core, DeliverJob, Delivery, DispatchJob};
use crate::queue::{Enqueued, Finished, kinds};
use crate::store::Tx;
use crate::store::jobs::JobRow;
use crate::store::messages::{self, DeliveryRecord, DispatchOutcome, NewMessage, StoredMessage};

/// A response delivered (or refused for good) in the transaction that stored it.
pub(super) struct DeliveredIn {
    job_id: String,
    response_id: String,
    transport: String,
    received_at: crate::message::Timestamp,
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

/// What [`apply`] wrote, for [`after_commit`].
pub(super) struct Applied {
    /// The responses stored (an answer whose id was stored before is not stored again).
    stored: Vec<StoredMessage>,
    /// The sibling turns stored.
    relayed: Vec<StoredMessage>,
    /// The responses delivered in the transaction.
    delivered: Vec<DeliveredIn>,
    /// The jobs enqueued: deliveries, turn ends, sibling dispatches.
    enqueued: [Enqueued; 3],
    /// Policy states recorded.
    states: usize,
}

/// Writes `fx` in `tx`, the transaction that ends the batch's jobs (`finished`, which counts
/// the deliveries made here).
pub(super) async fn apply(
    core: &Core,
    tx: &mut Tx,
    fx: &Effects,
    finished: &mut Finished,
    now: i64,
) -> Result<Applied> {
    let rows: Vec<NewMessage<'_>> = fx
        .answers
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
    let stored = messages::insert_many(tx, &rows, now).await?;
    let ids: HashSet<&str> = stored.iter().map(|m| m.id.as_str()).collect();
    let answers: Vec<&Answer> = fx
        .answers
        .iter()
        .map(AsRef::as_ref)
        .filter(|a| ids.contains(a.response.id.as_str()))
        .collect();
    let states: Vec<_> = answers
        .iter()
        .flat_map(|a| a.states.iter().cloned())
        .collect();
    crate::store::policy::insert(tx, &states, now).await?;
    let (relayed, woken) = wake_siblings(core, tx, &answers, now).await?;
    // Responses whose transport delivers by writing to this database are delivered here, in
    // this transaction; the others (and any that could not be) get a delivery job.
    let mut deliveries = Vec::new();
    let mut delivered = Vec::new();
    for a in &answers {
        let job_id = format!("{}:{}", kinds::DELIVER, a.response.id);
        if let Some(done) = deliver_in(core, tx, &job_id, a).await {
            delivered.push(done);
            continue;
        }
        let payload = serde_json::to_string(&DeliverJob {
            response_id: a.response.id.clone(),
            continues: !a.siblings.is_empty(),
            trace: a.trace,
        })
        .map_err(Error::corrupt)?;
        deliveries.push((job_id, payload));
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
    messages::record_deliveries(tx, &records, now).await?;
    let outcomes: Vec<DispatchOutcome<'_>> = fx
        .ended
        .iter()
        .map(|e| DispatchOutcome {
            message_id: &e.message_id,
            outcome: e.outcome.as_str(),
            error_class: e.outcome.class(),
        })
        .collect();
    messages::record_outcomes(tx, &outcomes).await?;
    let turn_ends = fx
        .turn_ends
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
        .enqueue(tx, kinds::DELIVER, &deliveries, now)
        .await?;
    let turn_end = core
        .queue
        .enqueue(tx, kinds::TURN_END, &turn_ends, now)
        .await?;
    for d in &delivered {
        finished.count_delivery_outcome(&d.transport, d.outcome());
    }
    Ok(Applied {
        stored,
        relayed,
        delivered,
        enqueued: [deliver, turn_end, woken],
        states: states.len(),
    })
}

/// Stores the sibling turns the stored `answers` wake: they join the thread after the
/// responses, and are dispatched like any inbound message.
async fn wake_siblings(
    core: &Core,
    tx: &mut Tx,
    answers: &[&Answer],
    now: i64,
) -> Result<(Vec<StoredMessage>, Enqueued)> {
    let siblings: Vec<(&Answer, &Sibling)> = answers
        .iter()
        .flat_map(|a| a.siblings.iter().map(move |s| (*a, s)))
        .collect();
    let bodies = siblings
        .iter()
        .map(|(_, s)| s.msg.to_stored_json())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(Error::corrupt)?;
    let rows: Vec<NewMessage<'_>> = siblings
        .iter()
        .zip(&bodies)
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
    let relayed = messages::insert_many(tx, &rows, now).await?;
    let jobs = DispatchJob::rows(siblings.iter().map(|(a, s)| DispatchJob {
        message_id: s.msg.id.clone(),
        new_thread: false,
        chain: s.chain.clone(),
        held: None,
        origin: Some(Box::new(s.origin.clone())),
        trace: a.trace,
    }))?;
    let woken = core.queue.enqueue(tx, kinds::DISPATCH, &jobs, now).await?;
    for (_, s) in &siblings {
        tracing::info!(
            agent = %s.agent,
            message_id = %s.msg.id,
            hop = s.msg.recipient_capabilities.agent_chain.map_or(0, |c| c.hop),
            "a mentioned agent is woken"
        );
    }
    Ok((relayed, woken))
}

/// Delivers `a` in `tx` when its transport delivers by writing to this database; `None` when
/// it does not, or failed only for now (a delivery job then takes over).
async fn deliver_in(core: &Core, tx: &mut Tx, job_id: &str, a: &Answer) -> Option<DeliveredIn> {
    let original = a.original.clone()?;
    let transport = core.transports.get(&a.transport)?;
    let mut response = a.response.clone();
    core.blobs.refresh_urls(&mut response.parts);
    let received_at = original.received_at;
    let delivery = Delivery {
        job_id: job_id.to_owned(),
        attempt: 1,
        response,
        original,
        continues: !a.siblings.is_empty(),
    };
    let result = transport
        .delivers_in_transaction()?
        .deliver_in(tx, &delivery)
        .await;
    if let Err(e @ OutboundError::Temporary { .. }) = &result {
        tracing::debug!(response = %a.response.id, error = %e, "delivery left to a job");
        return None;
    }
    if let Err(e) = &result {
        tracing::warn!(
            job = %job_id,
            response = %a.response.id,
            agent = %a.agent,
            transport = %a.transport,
            error = %e,
            "delivery failed"
        );
    }
    Some(DeliveredIn {
        job_id: job_id.to_owned(),
        response_id: a.response.id.clone(),
        transport: a.transport.clone(),
        received_at,
        result,
    })
}

/// Follows up a committed batch: what was stored is held for the next turns, the runs end and
/// the jobs that waited for them go back to the workers, the metrics count, the deliveries made
/// in the transaction finish, and the jobs enqueued are handed over.
pub(super) async fn after_commit(
    core: &Core,
    fx: Effects,
    applied: Applied,
    batch: &[JobRow],
    taken: Vec<Option<Run>>,
    now: i64,
    writing: crate::pipeline::caches::Writing,
) {
    // What was stored is held and noted in its thread before the runs end: the next turn of a
    // thread, which waits for this run, sees it without asking the database. Each is held with
    // the value it was written from, for the stages that read it next.
    let mut written: HashMap<&str, messages::Parsed> = fx
        .answers
        .iter()
        .map(|a| {
            let r = messages::Parsed::Response(Arc::new(a.response.clone()));
            (a.response.id.as_str(), r)
        })
        .chain(fx.answers.iter().flat_map(|a| &a.siblings).map(|s| {
            let m = messages::Parsed::Message(Arc::new(s.msg.clone()));
            (s.msg.id.as_str(), m)
        }))
        .collect();
    let answered = applied.stored.len();
    let stored: Vec<StoredMessage> = applied
        .stored
        .into_iter()
        .chain(applied.relayed)
        .map(|mut row| {
            row.parsed = written.remove(row.id.as_str());
            row
        })
        .collect();
    core.caches.hold(stored, &[]);
    drop(writing);
    for outcome in &fx.counted {
        core.metrics.turn(outcome.as_str());
    }
    for _ in 0..answered {
        core.metrics.turn("answered");
    }
    // Jobs that wait for their thread are kept here, leased; once a run has ended, the oldest
    // message that waited for its thread goes back to the workers (the others wait for the run
    // that one starts). The runs this batch held end when `taken` is dropped.
    let mut keys: HashSet<crate::pipeline::runs::Key> = taken
        .iter()
        .flatten()
        .map(|run| run.key().clone())
        .collect();
    for p in fx.parked {
        if let Some(job) = batch.get(p.job) {
            core.runs
                .park(p.key.clone(), p.seq, job.clone(), p.lease_until);
            keys.insert(p.key);
        }
    }
    for Place { key, seq } in &fx.lost {
        core.runs.leave(key, *seq);
    }
    drop(taken);
    for key in keys {
        if let Some((job, until)) = core.runs.next_parked(&key) {
            core.queue.hand_back(kinds::DISPATCH, job, until).await;
        }
    }
    for _ in 0..applied.states {
        core.metrics.policy_state("minted");
    }
    for d in applied.delivered {
        if let Ok(after) = d.result {
            core.metrics.end_to_end(now - d.received_at.unix_millis());
            after();
        }
    }
    for enqueued in applied.enqueued {
        core.queue.hand_over(enqueued);
    }
}
