//! The `dispatch` job handler, and the loading of a batch's stored rows that the `deliver` and
//! `turn_end` handlers share.
//!
//! A batch goes in three steps. Its turns run concurrently, one run per thread and agent at a
//! time ([`turn`]); [`plan`] decides, without the database, what their results do; [`apply`]
//! writes that in one transaction with the jobs' new states, guarded by the lease so a job whose
//! lease expired cannot apply its effects twice; after the commit, [`after_commit`] holds what
//! was stored for the next turns, ends the runs and hands the new jobs over.

mod apply;
mod plan;
mod turn;

use std::collections::HashMap;
use std::sync::Arc;

/// How long a dispatch waits for one of its agent's call slots before leaving the message for
/// a later attempt (well inside any job lease).
const CALL_SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The most earlier messages one turn takes in.
const MAX_ABSORBED: usize = 256;

/// On PostgreSQL, how long a message waiting for its thread's run stays in the table at the
/// longest before it asks again (the run's end wakes it sooner; this covers a wake missed).
const WAIT_AT_MOST_MS: u64 = 5_000;

/// On PostgreSQL, when a message whose agent has `max_concurrent_calls` runs in flight asks
/// again.
const FULL_RETRY_MS: u64 = 250;

use futures_util::future::join_all;
use tracing::Instrument as _;

use self::apply::{after_commit, apply};
use self::plan::{Dispatched, JobResult, plan};
use super::{Core, DispatchJob, runs};
use crate::error::{OutboundError, Result};
use crate::message::{NormalizedMessage, NormalizedResponse};
use crate::queue::JobHandler;
use crate::store::Backend;
use crate::store::jobs::JobRow;
use crate::store::messages::{self, StoredMessage};

fn payload<T: serde::de::DeserializeOwned>(job: &JobRow) -> std::result::Result<T, OutboundError> {
    serde_json::from_str(&job.payload)
        .map_err(|e| OutboundError::permanent(format!("job payload is malformed: {e}")))
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
    messages::get_many_cached(&core.db, &core.caches.recent, ids)
        .await
        .map_err(OutboundError::from)
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

/// The stored message of `row`, shared with what holds it (a corrupt one fails its job for
/// good).
pub(super) fn message(
    row: &StoredMessage,
) -> std::result::Result<Arc<NormalizedMessage>, OutboundError> {
    row.message().map_err(OutboundError::from)
}

/// The stored response of `row`, like [`message`].
pub(super) fn response(
    row: &StoredMessage,
) -> std::result::Result<NormalizedResponse, OutboundError> {
    row.response().map_err(OutboundError::from)
}

/// Whom a job for the message `row` worked for: its agent and transport (nothing when the
/// message was not found).
pub(super) fn about(row: Option<&StoredMessage>) -> crate::queue::About<'_> {
    row.map_or_else(crate::queue::About::default, |row| {
        crate::queue::About::new(&row.agent, &row.transport)
    })
}

/// A dispatch job's result, the lease a job kept to wait for its thread is renewed to, and the
/// message it was for (its agent and transport name the job in the log).
struct Ran<'a>(
    std::result::Result<Dispatched, OutboundError>,
    i64,
    Option<&'a StoredMessage>,
);

impl crate::queue::Attempted for Ran<'_> {
    fn error(&self) -> Option<&OutboundError> {
        self.0.as_ref().err()
    }

    fn about(&self) -> crate::queue::About<'_> {
        about(self.2)
    }

    fn deferred_until(&self) -> Option<i64> {
        matches!(self.0, Ok(Dispatched::Deferred)).then_some(self.1)
    }

    fn waiting_until(&self) -> Option<i64> {
        match self.0 {
            Ok(Dispatched::Waiting(run_at)) => Some(run_at),
            _ => None,
        }
    }
}

/// The outcome of a message erased before its turn came: its agent is never called with what
/// was erased.
pub(super) const DELETED: &str = "deleted";

/// Handles `dispatch` jobs.
pub(super) struct DispatchHandler(pub(super) Arc<Core>);

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
}

#[async_trait::async_trait]
impl JobHandler for DispatchHandler {
    /// Runs the batch's turns (one run per thread and agent at a time), then [`plan`]s their
    /// effects, [`apply`]s them in the transaction that ends the jobs, and follows up after its
    /// commit.
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
        let mut taken: Vec<Option<runs::Run>> = batch.iter().map(|_| None).collect();
        let longest = self.defer_for();
        let leased = core.db.backend() == Backend::Postgres;
        for i in order {
            if let Some(row) = row_of(i) {
                let key = runs::Key::new(&row.thread_id, &row.agent);
                taken[i] = core.runs.take(key.clone(), row.seq);
                // On PostgreSQL the order of a thread's messages is kept in the database, which
                // every instance asks; a waiter kept here would outlive its job once another
                // instance has claimed it, and hold the thread here for nothing.
                if taken[i].is_none() && !leased {
                    core.runs.wait(key, row.seq, longest);
                }
            }
        }
        // On PostgreSQL the runs taken here are leased across instances; a message whose run
        // is in flight, here or elsewhere, or that the database refuses, waits in the table.
        let rows_of: Vec<Option<&StoredMessage>> = (0..batch.len()).map(row_of).collect();
        let waiting = if leased {
            self.lease(owner, batch, &rows_of, &mut taken).await
        } else {
            batch.iter().map(|_| None).collect()
        };
        // The windows of the turns that run, looked up for the batch at once.
        let running: Vec<&StoredMessage> = (0..batch.len())
            .filter(|&i| taken[i].is_some())
            .filter(|&i| jobs[i].as_ref().is_ok_and(|j| !j.new_thread))
            .filter_map(row_of)
            .collect();
        let windows = super::history::windows(core, &running)
            .await
            .map_err(OutboundError::from);
        let windows = &windows;
        let kept_until = self.defer_until();
        let loaded = &rows;
        // Each with the message it is for, which names its agent and transport in the log.
        let each = jobs
            .iter()
            .zip(batch)
            .zip(&taken)
            .zip(&waiting)
            .zip(&rows_of);
        let results: Vec<Ran> = join_all(each.map(
            |((((job, job_row), run), waits), &message)| async move {
                let result = async {
                    let job = job.as_ref().map_err(Clone::clone)?;
                    let rows = loaded.as_ref().map_err(Clone::clone)?;
                    let row = lookup(rows, &job.message_id)?;
                    let Some(run) = run else {
                        if let Some(waits) = waits {
                            tracing::debug!(message_id = %row.id, "its thread is running: waiting");
                            return waits.clone().map(Dispatched::Waiting);
                        }
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
                        otel.kind = "consumer",
                    );
                    crate::telemetry::set_parent(&span, job.trace);
                    self.run(row, job, run, windows).instrument(span).await
                }
                .await;
                Ran(result, kept_until, message)
            },
        ))
        .await;

        let now = core.clock.now_ms();
        let leases: Vec<(&str, &str)> = taken
            .iter()
            .flatten()
            .map(|run| (run.key().thread_id.as_str(), run.key().agent.as_str()))
            .filter(|_| leased)
            .collect();
        let committed = async {
            let mut tx = core.db.begin().await?;
            let mut finished = core
                .queue
                .finish(&mut tx, owner, batch, &results, now)
                .await?;
            let fx = plan(
                results
                    .into_iter()
                    .enumerate()
                    .map(|(i, Ran(ran, _, _))| JobResult {
                        message_id: jobs[i].as_ref().ok().map(|j| j.message_id.clone()),
                        run: row_of(i).map(|r| runs::Place {
                            key: runs::Key::new(&r.thread_id, &r.agent),
                            seq: r.seq,
                        }),
                        ends_turns: row_of(i)
                            .and_then(|r| core.transports.get(&r.transport))
                            .is_some_and(|t| t.ends_turns().is_some()),
                        ran,
                        end: finished.end(i).cloned(),
                    })
                    .collect(),
            );
            let applied = apply(core, &mut tx, &fx, &mut finished, now).await?;
            // The runs end with the transaction; the messages that wait are woken after it.
            crate::store::runs::release(&mut tx, owner, &leases).await?;
            let waited: Vec<&str> = if leased {
                fx.waiting.iter().map(|&i| batch[i].id.as_str()).collect()
            } else {
                Vec::new()
            };
            // Until they are held, the threads written read their windows from the database.
            let writing = core.caches.writing(fx.answers.iter().flat_map(|a| {
                std::iter::once(a.response.thread_id.as_str())
                    .chain(a.siblings.iter().map(|s| s.msg.thread_id.as_str()))
            }));
            core.queue.commit(tx, finished).await?;
            Ok((fx, applied, writing, waited))
        }
        .await;
        let (fx, applied, writing, waited) = match committed {
            Ok(done) => done,
            Err(e) => {
                // The next attempt need not wait for the leases to expire.
                match crate::store::runs::drop_leases(&core.db, owner, &leases).await {
                    Ok(_) => wake_waiters(core, &leases, &[]).await,
                    Err(e) => tracing::warn!(error = %e, "run leases not ended; they expire"),
                }
                return Err(e);
            }
        };
        let ended: Vec<(String, String)> = leases
            .iter()
            .map(|&(t, a)| (t.to_owned(), a.to_owned()))
            .collect();
        drop(leases);
        // The runs held here are given up first, so that a woken message can take its run.
        after_commit(core, fx, applied, batch, taken, now, writing).await;
        let ended: Vec<(&str, &str)> = ended
            .iter()
            .map(|(t, a)| (t.as_str(), a.as_str()))
            .collect();
        wake_waiters(core, &ended, &waited).await;
        Ok(())
    }
}

/// On PostgreSQL, after the commit that ended the runs `ended` and put the messages `waited`
/// back to wait: wakes the oldest message waiting for each ended run, and those of `waited`
/// whose thread is free by now, here and on every instance. Each side looks only after its own
/// commit, so that of a run's end and a waiter put back at the same time, the one that looks
/// second sees the other ([`crate::store::runs::wake_next`]). A failure is logged: the waiters
/// are then tried when their wait runs out.
async fn wake_waiters(core: &Core, ended: &[(&str, &str)], waited: &[&str]) {
    if ended.is_empty() && waited.is_empty() {
        return;
    }
    let now = core.clock.now_ms();
    let next = crate::store::runs::wake_next(&core.db, ended, now).await;
    let free = crate::store::runs::wake_free(&core.db, waited, now).await;
    let mut woken = 0;
    for r in [next, free] {
        match r {
            Ok(ids) => woken += ids.len(),
            Err(e) => {
                tracing::warn!(error = %e, "waiting messages not woken; they wait their turn out")
            }
        }
    }
    if woken > 0 {
        core.queue.wake(crate::queue::kinds::DISPATCH);
        if let Err(e) = core.db.notify(crate::queue::kinds::DISPATCH).await {
            tracing::warn!(error = %e, "other instances not told of woken messages; they poll");
        }
    }
}

impl DispatchHandler {
    /// Leases the runs of a batch's threads taken here in the database, so that no other
    /// instance runs them at once ([`crate::store::runs::take`]); a run another instance holds,
    /// that an older message waits for, or that would take its agent past the
    /// `max_concurrent_calls` its operator set is given up. Returns, per job, until when one that has no run
    /// waits in the table (an error when the database could not be asked: every job is then
    /// retried).
    async fn lease(
        &self,
        owner: &str,
        batch: &[JobRow],
        rows: &[Option<&StoredMessage>],
        taken: &mut [Option<runs::Run>],
    ) -> Vec<Option<std::result::Result<i64, OutboundError>>> {
        let core = &self.0;
        let now = core.clock.now_ms();
        let lease_ms = i64::try_from(self.defer_for().as_millis()).unwrap_or(i64::MAX);
        let asks: Vec<crate::store::runs::Ask<'_>> = rows
            .iter()
            .zip(batch)
            .zip(taken.iter())
            .filter_map(|((row, job), run)| {
                let row = (*row)?;
                let cap = core
                    .agents
                    .get(&row.agent)
                    .map_or(Some(1), |a| a.limits.cluster_calls);
                Some(crate::store::runs::Ask {
                    thread_id: &row.thread_id,
                    agent: &row.agent,
                    seq: row.seq,
                    job_id: &job.id,
                    tries: run.is_some(),
                    cap: cap.and_then(|c| i64::try_from(c).ok()),
                })
            })
            .collect();
        let answers =
            crate::store::runs::take(&core.db, owner, &asks, now, now.saturating_add(lease_ms))
                .await;
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) => {
                tracing::warn!(error = %e, "runs not leased: the batch is tried again");
                let failed = OutboundError::from(e);
                return taken
                    .iter_mut()
                    .map(|run| {
                        *run = None;
                        Some(Err(failed.clone()))
                    })
                    .collect();
            }
        };
        let answers: HashMap<(&str, &str), &crate::store::runs::Answer> = answers
            .iter()
            .map(|a| ((a.thread_id.as_str(), a.agent.as_str()), a))
            .collect();
        let wait_ms = |ms: u64| now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
        rows.iter()
            .zip(taken.iter_mut())
            .map(|(row, run)| {
                let row = (*row)?;
                // Its thread runs here: the run's end wakes it.
                if run.is_none() {
                    return Some(Ok(wait_ms(WAIT_AT_MOST_MS)));
                }
                let answer = answers.get(&(row.thread_id.as_str(), row.agent.as_str()));
                match answer {
                    Some(a) if a.taken => None,
                    Some(a) if a.full => {
                        *run = None;
                        Some(Ok(wait_ms(FULL_RETRY_MS)))
                    }
                    // Asked again when the run ends, at the latest when its lease does.
                    _ => {
                        *run = None;
                        let at_most = wait_ms(WAIT_AT_MOST_MS);
                        let lease_ends = answer
                            .and_then(|a| a.held_until)
                            .map_or(at_most, |u| u.saturating_add(1));
                        Some(Ok(at_most.min(lease_ends)))
                    }
                }
            })
            .collect()
    }
}
