//! The durable job queue: workers that claim due jobs in batches under a lease, hand them to a
//! handler, and sleep until woken (in-process after a local commit, by `LISTEN/NOTIFY` from other
//! instances on PostgreSQL) or until the poll interval passes.
//!
//! A job is at least once: an expired lease returns it to the queue. Handlers make the effects
//! exactly once by committing them in the same transaction that finishes the job, guarded by the
//! lease: every handler finishes its batch through [`Queue::finish`], which marks a job only
//! while this worker still holds its lease and tells the handler which jobs it may apply, and
//! commits through [`Queue::commit`], which records the job (and delivery) metrics of every kind.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::clock::SharedClock;
use crate::config::QueueConfig;
use crate::error::{OutboundError, Result};
use crate::metrics::Metrics;
use crate::store::jobs::{self, Finish, JobRow, NewJob};
use crate::store::{Db, NOTIFY_CHANNEL, Tx};

/// How long a worker waits for its batch before it leaves the batch to finish on its own and
/// claims the next one: a batch held up by slow work (an agent that takes its time, a server
/// slow to take a delivery) does not hold back the jobs behind it.
const SLOW_BATCH: Duration = Duration::from_millis(500);

/// The batches a worker leaves to finish on their own at once, at most; past it, the worker
/// waits for the batch at hand.
const MAX_SLOW_BATCHES: usize = 8;

/// Logs a batch left to finish on its own that panicked or was cut off.
fn log_abnormal_end<T>(kind: &str, ended: std::result::Result<T, tokio::task::JoinError>) {
    if let Err(e) = ended {
        tracing::error!(kind, error = %e, "a job batch ended abnormally");
    }
}

pub mod listen;

pub use listen::Listener;

/// The job kinds of the core pipeline.
pub mod kinds {
    /// Call the agent for an inbound message.
    pub const DISPATCH: &str = "dispatch";
    /// Deliver a response through its transport.
    pub const DELIVER: &str = "deliver";
    /// Tell a message's transport that its turn ended without a response.
    pub const TURN_END: &str = "turn_end";
}

/// Processes a batch of claimed jobs and finishes each (in one transaction, with its effects).
#[async_trait::async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// Handles `jobs`, leased to `owner`.
    ///
    /// # Errors
    /// When the batch could not be committed; its leases then expire and the jobs run again.
    async fn handle(&self, owner: &str, jobs: &[JobRow]) -> Result<()>;
}

/// The queue: configuration, this instance's lease owner id, the wakers of each kind, and the
/// jobs handed straight to this instance's workers.
#[derive(Debug)]
pub struct Queue {
    db: Db,
    clock: SharedClock,
    cfg: QueueConfig,
    owner: String,
    wakers: std::sync::Mutex<HashMap<String, Arc<Notify>>>,
    local: std::sync::Mutex<HashMap<&'static str, Local>>,
    metrics: Arc<Metrics>,
    /// Channels registered for this instance's one `LISTEN` connection, until it starts.
    listener: std::sync::Mutex<Option<Listener>>,
    /// The transport whose jobs each kind is, for a transport's own kinds ([`Queue::runs_for`]):
    /// the transport a failure's log line names when its handler does not say.
    transports: std::sync::Mutex<HashMap<&'static str, &'static str>>,
}

/// The result of one job's attempt, as [`Queue::finish`] needs it: whether it failed, and why.
pub trait Attempted {
    /// Why the attempt failed; `None` when it succeeded.
    fn error(&self) -> Option<&OutboundError>;

    /// When the job was not run but kept to run later, its lease renewed until then
    /// ([`Finish::Deferred`], handed back with [`Queue::hand_back`]).
    fn deferred_until(&self) -> Option<i64> {
        None
    }

    /// When the job was not run but put back in the table to wait, until then at the latest
    /// ([`Finish::Waiting`]).
    fn waiting_until(&self) -> Option<i64> {
        None
    }

    /// The agent and transport the job worked for, named in the log lines of its failure; `-`
    /// where the handler does not know them (a job whose payload could not be read).
    fn about(&self) -> About<'_> {
        About::default()
    }
}

/// Whom a job worked for, as its failure's log lines name it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct About<'a> {
    /// The agent's name.
    pub agent: Option<&'a str>,
    /// The transport's name.
    pub transport: Option<&'a str>,
}

impl<'a> About<'a> {
    /// A job that worked for `agent` through `transport`.
    #[must_use]
    pub fn new(agent: &'a str, transport: &'a str) -> Self {
        Self {
            agent: Some(agent),
            transport: Some(transport),
        }
    }

    /// The agent's name, `-` when unknown.
    #[must_use]
    pub fn agent(&self) -> &'a str {
        self.agent.unwrap_or("-")
    }

    /// The transport's name, `-` when unknown.
    #[must_use]
    pub fn transport(&self) -> &'a str {
        self.transport.unwrap_or("-")
    }
}

/// Logs how a failed job ended, once its end is recorded: one WARN line when it runs again, one
/// ERROR line when it went dead (no attempt left, or refused for good), each naming the job, its
/// kind, its agent and transport, its attempts and the last error.
fn log_failure(job: &JobRow, about: About<'_>, end: &Finish, now: i64) {
    match end {
        Finish::Retry { run_at, error } => tracing::warn!(
            job = %job.id,
            kind = %job.kind,
            agent = about.agent(),
            transport = about.transport(),
            attempt = job.attempts,
            max_attempts = job.max_attempts,
            retry_in_ms = run_at.saturating_sub(now),
            error = %error,
            "job failed; it runs again"
        ),
        Finish::Dead { error } => {
            let why = if job.attempts >= job.max_attempts {
                "no attempt left"
            } else {
                "refused for good"
            };
            tracing::error!(
                job = %job.id,
                kind = %job.kind,
                agent = about.agent(),
                transport = about.transport(),
                why,
                error = %error,
                attempts = job.attempts,
                max_attempts = job.max_attempts,
                "job dead"
            );
        }
        Finish::Done | Finish::Deferred { .. } | Finish::Waiting { .. } => {}
    }
}

impl<T> Attempted for std::result::Result<T, OutboundError> {
    fn error(&self) -> Option<&OutboundError> {
        self.as_ref().err()
    }
}

/// How the jobs of a batch ended in the transaction that finishes them ([`Queue::finish`]), with
/// the metrics to record once it has committed ([`Queue::commit`]).
#[derive(Debug)]
#[must_use = "commit the transaction through Queue::commit"]
pub struct Finished {
    kind: String,
    /// Per job of the batch, in order: how it ended, or `None` when its lease was lost.
    ends: Vec<Option<Finish>>,
    /// Delivery attempts to count: transport and outcome.
    deliveries: Vec<(String, &'static str)>,
}

impl Finished {
    /// How job `i` of the batch ended; `None` when this worker no longer held its lease (its
    /// effects must not be applied).
    #[must_use]
    pub fn end(&self, i: usize) -> Option<&Finish> {
        self.ends.get(i).and_then(Option::as_ref)
    }

    /// Whether job `i` is done (it succeeded and this worker still held its lease).
    #[must_use]
    pub fn done(&self, i: usize) -> bool {
        matches!(self.end(i), Some(Finish::Done))
    }

    /// Counts job `i` as one delivery attempt through `transport`, with the outcome its end
    /// gives ([`delivery_outcome`]); nothing when its lease was lost.
    pub fn count_delivery(&mut self, i: usize, transport: &str) {
        if let Some(outcome) = self.end(i).map(delivery_outcome) {
            self.deliveries.push((transport.to_owned(), outcome));
        }
    }

    /// Counts a delivery attempt made in the batch's transaction other than by one of its jobs
    /// (a response delivered in the transaction that stores it).
    pub fn count_delivery_outcome(&mut self, transport: &str, outcome: &'static str) {
        self.deliveries.push((transport.to_owned(), outcome));
    }
}

/// The delivery metric's outcome of a delivery attempt that ended its job this way:
/// `delivered`, `retry` (a temporary failure, tried again later) or `failed` (refused for good,
/// or out of attempts).
#[must_use]
pub fn delivery_outcome(end: &Finish) -> &'static str {
    match end {
        Finish::Done => "delivered",
        Finish::Retry { .. } | Finish::Deferred { .. } | Finish::Waiting { .. } => "retry",
        Finish::Dead { .. } => "failed",
    }
}

/// Jobs of one kind committed leased to this instance, waiting for its workers (which exist:
/// kinds without workers here get no entry).
#[derive(Debug, Default)]
struct Local {
    jobs: VecDeque<(JobRow, i64)>,
    /// At most this many wait; more are committed ready, for any worker to claim.
    room: usize,
    /// Jobs are known to wait in the table (committed ready here, returned by the reaper,
    /// announced by another instance): the next batch is claimed from there.
    in_table: bool,
}

/// Jobs enqueued in a transaction; once it has committed, [`Queue::hand_over`] starts them.
/// (Dropped without that, after a rollback, it does nothing.)
#[derive(Debug)]
#[must_use = "hand the jobs over once the transaction has committed"]
pub struct Enqueued {
    kind: &'static str,
    /// Committed leased to this instance: given to its workers directly.
    leased: Vec<(JobRow, i64)>,
    /// Committed ready: a worker is woken to claim them.
    ready: bool,
    /// Committed to run later: a worker is woken then (in milliseconds from the commit).
    wake_in: Option<u64>,
}

impl Enqueued {
    /// Whether its jobs were committed leased to this instance: no worker but this instance's
    /// can start them, and only once they are handed over.
    #[must_use]
    pub fn leased_here(&self) -> bool {
        !self.leased.is_empty()
    }
}

impl Queue {
    /// A queue over `db`, recording its jobs' outcomes in `metrics`; a fresh owner id
    /// identifies this instance's leases.
    #[must_use]
    pub fn new(db: Db, clock: SharedClock, cfg: QueueConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            db,
            clock,
            cfg,
            owner: uuid::Uuid::now_v7().to_string(),
            wakers: std::sync::Mutex::new(HashMap::new()),
            local: std::sync::Mutex::new(HashMap::new()),
            metrics,
            listener: std::sync::Mutex::new(Some(Listener::new())),
            transports: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Records that jobs of `kind` run for `transport` (a transport's own job kind): the log
    /// lines of their failures name it.
    pub fn runs_for(&self, kind: &'static str, transport: &'static str) {
        self.transports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(kind, transport);
    }

    /// Whom a failed `job` worked for: what its handler says, else the transport its kind runs
    /// for and the agent its payload names (a top-level `agent`), else `-`. Read only on a
    /// failure.
    fn about_failed<'a>(
        &self,
        job: &'a JobRow,
        said: About<'a>,
        agent: &'a mut Option<String>,
    ) -> About<'a> {
        let transport = said.transport.or_else(|| {
            self.transports
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(job.kind.as_str())
                .copied()
        });
        if said.agent.is_some() {
            return About {
                agent: said.agent,
                transport,
            };
        }
        *agent = serde_json::from_str::<serde_json::Value>(&job.payload)
            .ok()
            .and_then(|v| {
                v.get("agent")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            });
        let agent: &'a Option<String> = agent;
        About {
            agent: agent.as_deref(),
            transport,
        }
    }

    fn locals(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Local>> {
        self.local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Enqueues `(id, payload)` jobs of `kind` in `tx` (ids that exist are skipped) and tells
    /// other instances. When this instance's workers of `kind` have room, the jobs are committed
    /// already leased to this instance and go to those workers directly once the transaction
    /// commits ([`Queue::hand_over`]): no claim, no wait for a wake-up. Should the process stop
    /// first, the lease expires and any instance runs them, as it would any job.
    ///
    /// # Errors
    /// Database errors.
    pub async fn enqueue(
        &self,
        tx: &mut Tx,
        kind: &'static str,
        items: &[(String, String)],
        now: i64,
    ) -> Result<Enqueued> {
        let mut enqueued = Enqueued {
            kind,
            leased: Vec::new(),
            ready: false,
            wake_in: None,
        };
        if items.is_empty() {
            return Ok(enqueued);
        }
        let lease_until = now.saturating_add(self.lease_ms());
        let local = self
            .locals()
            .get(kind)
            .is_some_and(|l| l.jobs.len() + items.len() <= l.room);
        let max_attempts = self.max_attempts(kind);
        let new_jobs: Vec<NewJob<'_>> = items
            .iter()
            .map(|(id, payload)| NewJob {
                id,
                kind,
                payload,
                max_attempts,
                run_at: now,
                lease: local.then_some((self.owner.as_str(), lease_until)),
            })
            .collect();
        let inserted = jobs::enqueue_many(tx, &new_jobs, now).await?;
        if local {
            enqueued.leased = items
                .iter()
                .filter(|(id, _)| inserted.contains(id))
                .map(|(id, payload)| {
                    let row = JobRow {
                        id: id.clone(),
                        kind: kind.to_owned(),
                        payload: payload.clone(),
                        attempts: 1,
                        max_attempts,
                    };
                    (row, lease_until)
                })
                .collect();
        } else {
            enqueued.ready = !inserted.is_empty();
            if enqueued.ready {
                tx.notify(kind).await?;
            }
        }
        Ok(enqueued)
    }

    /// Enqueues `(id, payload)` jobs of `kind` in `tx` to run `delay_ms` after `now` (ids that
    /// exist are skipped); once the transaction has committed, [`Queue::hand_over`] wakes a
    /// worker of this instance when they are due (any instance's worker polling the table may
    /// take them too).
    ///
    /// # Errors
    /// Database errors.
    pub async fn enqueue_later(
        &self,
        tx: &mut Tx,
        kind: &'static str,
        items: &[(String, String)],
        now: i64,
        delay_ms: u64,
    ) -> Result<Enqueued> {
        let mut enqueued = Enqueued {
            kind,
            leased: Vec::new(),
            ready: false,
            wake_in: None,
        };
        if items.is_empty() {
            return Ok(enqueued);
        }
        let max_attempts = self.max_attempts(kind);
        let run_at = now.saturating_add(i64::try_from(delay_ms).unwrap_or(i64::MAX));
        let new_jobs: Vec<NewJob<'_>> = items
            .iter()
            .map(|(id, payload)| NewJob {
                id,
                kind,
                payload,
                max_attempts,
                run_at,
                lease: None,
            })
            .collect();
        if !jobs::enqueue_many(tx, &new_jobs, now).await?.is_empty() {
            enqueued.wake_in = Some(delay_ms);
        }
        Ok(enqueued)
    }

    /// Starts jobs whose transaction has committed: gives the leased ones to this instance's
    /// workers, wakes a worker for the others (now, or when those enqueued for later are due).
    pub fn hand_over(&self, enqueued: Enqueued) {
        if let Some(ms) = enqueued.wake_in {
            // An idle worker finds nothing handed over, and claims from the table. A
            // millisecond late, so that the jobs are due by the clock the claim reads.
            let waker = self.waker(enqueued.kind);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms.saturating_add(1))).await;
                waker.notify_one();
            });
        }
        if !enqueued.leased.is_empty() {
            if let Some(l) = self.locals().get_mut(enqueued.kind) {
                l.jobs.extend(enqueued.leased);
            }
            self.waker(enqueued.kind).notify_one();
        }
        if enqueued.ready {
            self.wake(enqueued.kind);
        }
    }

    /// Hands a job this instance kept leased ([`Finish::Deferred`], until `lease_until`) back to
    /// its workers of `kind`. A lease too short to cover a run (the job waited long, behind a
    /// slow run) is renewed first; a job whose lease was lost meanwhile is left to its new owner.
    pub async fn hand_back(&self, kind: &'static str, job: JobRow, lease_until: i64) {
        let now = self.clock.now_ms();
        let mut until = lease_until;
        if until - now <= self.lease_ms() / 2 {
            until = now.saturating_add(self.lease_ms());
            let renewed = async {
                let mut tx = self.db.begin().await?;
                let held = jobs::finish(
                    &mut tx,
                    &job.id,
                    &self.owner,
                    &Finish::Deferred { lease_until: until },
                    now,
                )
                .await?;
                tx.commit().await?;
                Ok::<_, crate::error::Error>(held)
            }
            .await;
            match renewed {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(job = %job.id, "lease lost while it waited; left to its owner");
                    return;
                }
                Err(e) => {
                    tracing::warn!(job = %job.id, error = %e, "lease not renewed; the job runs once it expires");
                    return;
                }
            }
        }
        self.locals()
            .entry(kind)
            .or_default()
            .jobs
            .push_back((job, until));
        self.waker(kind).notify_one();
    }

    /// Up to `max` jobs handed to this instance's workers of `kind`. Jobs whose lease is about to
    /// end are left to expire and be claimed the usual way (their lease would not cover a run).
    fn take_local(&self, kind: &str, max: usize, now: i64) -> Vec<JobRow> {
        let mut locals = self.locals();
        let Some(l) = locals.get_mut(kind) else {
            return Vec::new();
        };
        let margin = self.lease_ms() / 2;
        let mut out = Vec::new();
        while out.len() < max {
            let Some((row, until)) = l.jobs.pop_front() else {
                break;
            };
            if until - now > margin {
                out.push(row);
            }
        }
        out
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.cfg.lease_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    /// This instance's lease owner id.
    #[must_use]
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    fn waker(&self, kind: &str) -> Arc<Notify> {
        let mut map = match self.wakers.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.entry(kind.to_owned()).or_default().clone()
    }

    /// Wakes one idle worker of `kind` to claim from the table (call after committing jobs
    /// there).
    pub fn wake(&self, kind: &str) {
        if let Some(l) = self.locals().get_mut(kind) {
            l.in_table = true;
        }
        self.waker(kind).notify_one();
    }

    /// Attempts allowed for `kind`.
    #[must_use]
    pub fn max_attempts(&self, kind: &str) -> i64 {
        i64::from(self.cfg.kind(kind).max_attempts)
    }

    /// How a failed attempt ends: retried after exponential backoff with jitter (or the peer's
    /// `Retry-After`, if longer), or dead when the error is permanent or attempts are used up.
    #[must_use]
    pub fn finish_for_error(&self, job: &JobRow, err: &OutboundError) -> Finish {
        let now = self.clock.now_ms();
        match err {
            OutboundError::Permanent { .. } => Finish::Dead {
                error: err.to_string(),
            },
            OutboundError::Temporary { .. } if job.attempts >= job.max_attempts => Finish::Dead {
                error: format!("{err} (after {} attempts)", job.attempts),
            },
            OutboundError::Temporary { retry_after, .. } => {
                let delay = backoff_ms(&self.cfg, job.attempts, &mut rand::thread_rng());
                let hint =
                    retry_after.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                let max = i64::try_from(self.cfg.backoff_max_ms).unwrap_or(i64::MAX);
                Finish::Retry {
                    run_at: now.saturating_add(delay.max(hint.min(max))),
                    error: err.to_string(),
                }
            }
        }
    }

    /// Finishes a handled batch in `tx`, the transaction that also commits the batch's effects:
    /// each job whose result is `Ok` is done, each other one retried or dead per its error (see
    /// [`Queue::finish_for_error`]), all only where `owner` still holds the lease. Jobs that end
    /// alike (done, or kept to the same lease, or waiting until the same time) are recorded in
    /// one statement. The answer says, job by job, how it ended (nothing for a job
    /// whose lease was lost: its effects must not be applied), and gathers the metrics that
    /// [`Queue::commit`] records once `tx` has committed.
    ///
    /// # Errors
    /// Database errors.
    pub async fn finish<A: Attempted>(
        &self,
        tx: &mut Tx,
        owner: &str,
        batch: &[JobRow],
        results: &[A],
        now: i64,
    ) -> Result<Finished> {
        let ends: Vec<Finish> = batch
            .iter()
            .zip(results)
            .map(|(job, result)| match result.error() {
                None => match (result.deferred_until(), result.waiting_until()) {
                    (Some(lease_until), _) => Finish::Deferred { lease_until },
                    (None, Some(run_at)) => Finish::Waiting { run_at },
                    (None, None) => Finish::Done,
                },
                Some(e) => self.finish_for_error(job, e),
            })
            .collect();
        let mut alike: Vec<(&Finish, Vec<&str>)> = Vec::new();
        for (job, end) in batch.iter().zip(&ends) {
            match alike.iter_mut().find(|(f, _)| *f == end) {
                Some((_, ids)) => ids.push(&job.id),
                None => alike.push((end, vec![job.id.as_str()])),
            }
        }
        let mut held = HashSet::with_capacity(batch.len());
        for (end, ids) in &alike {
            held.extend(jobs::finish_many(tx, ids, owner, end, now).await?);
        }
        let ends: Vec<Option<Finish>> = batch
            .iter()
            .zip(results)
            .zip(ends)
            .map(|((job, result), end)| {
                let held = held.contains(&job.id);
                let failed = !matches!(
                    end,
                    Finish::Done | Finish::Deferred { .. } | Finish::Waiting { .. }
                );
                if held && failed {
                    let mut agent = None;
                    log_failure(
                        job,
                        self.about_failed(job, result.about(), &mut agent),
                        &end,
                        now,
                    );
                } else if !held {
                    let mut agent = None;
                    let about = self.about_failed(job, result.about(), &mut agent);
                    tracing::warn!(
                        job = %job.id,
                        kind = %job.kind,
                        agent = about.agent(),
                        transport = about.transport(),
                        "lease lost; another worker owns this job"
                    );
                }
                held.then_some(end)
            })
            .collect();
        Ok(Finished {
            kind: batch.first().map(|j| j.kind.clone()).unwrap_or_default(),
            ends,
            deliveries: Vec::new(),
        })
    }

    /// Commits `tx`, the transaction a batch was finished in ([`Queue::finish`]), then records
    /// the batch's job metrics (one per job this worker still held, for every kind) and its
    /// delivery attempts.
    ///
    /// # Errors
    /// Database errors; nothing was committed and nothing is recorded.
    pub async fn commit(&self, tx: Tx, finished: Finished) -> Result<()> {
        tx.commit().await?;
        for end in finished.ends.iter().flatten() {
            self.metrics.job(&finished.kind, end.label());
        }
        for (transport, outcome) in &finished.deliveries {
            self.metrics.delivery(transport, outcome);
        }
        Ok(())
    }

    /// Starts `workers` claim loops for `kind`. A loop whose batch waits on slow work for over
    /// half a second leaves it to finish on its own and claims the next (up to 8 such batches at
    /// once). They stop claiming when `shutdown` turns true and return once every batch they
    /// started is finished.
    pub fn spawn_workers(
        self: &Arc<Self>,
        kind: &'static str,
        handler: Arc<dyn JobHandler>,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<JoinHandle<()>> {
        let k = self.cfg.kind(kind);
        if k.workers > 0 {
            self.locals().entry(kind).or_default().room = k.batch_size.max(1) * k.workers;
        }
        (0..k.workers)
            .map(|_| {
                let q = Arc::clone(self);
                let handler = Arc::clone(&handler);
                let shutdown = shutdown.clone();
                tokio::spawn(
                    async move { q.worker_loop(kind, k.batch_size, handler, shutdown).await },
                )
            })
            .collect()
    }

    async fn worker_loop(
        self: Arc<Self>,
        kind: &'static str,
        batch_size: usize,
        handler: Arc<dyn JobHandler>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let waker = self.waker(kind);
        let poll = Duration::from_millis(self.cfg.poll_interval_ms);
        let mut last_claim = Instant::now();
        // Batches still waiting on slow work, left to finish on their own.
        let mut slow = tokio::task::JoinSet::new();
        loop {
            while let Some(ended) = slow.try_join_next() {
                log_abnormal_end(kind, ended);
            }
            if *shutdown.borrow() {
                break;
            }
            // Jobs committed by the tasks that run next join this batch (see
            // `store::group_commit`).
            tokio::task::yield_now().await;
            let claimed = self.next_batch(kind, batch_size, &mut last_claim).await;
            match claimed {
                Ok(batch) if !batch.is_empty() => {
                    if batch.len() == batch_size || self.has_local(kind) {
                        // More may be waiting: let another idle worker help.
                        waker.notify_one();
                    }
                    let mut run =
                        Box::pin(Arc::clone(&self).run_batch(kind, Arc::clone(&handler), batch));
                    let failed = if slow.len() >= MAX_SLOW_BATCHES {
                        run.await
                    } else {
                        tokio::select! {
                            failed = &mut run => failed,
                            () = tokio::time::sleep(SLOW_BATCH) => {
                                tracing::debug!(kind, "a batch waits on slow work: claiming the next one meanwhile");
                                slow.spawn(run);
                                false
                            }
                        }
                    };
                    if failed {
                        tokio::time::sleep(poll).await;
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(kind, error = %e, "claiming jobs failed"),
            }
            tokio::select! {
                () = waker.notified() => {}
                () = tokio::time::sleep(poll) => {}
                _ = shutdown.changed() => {}
            }
        }
        while let Some(ended) = slow.join_next().await {
            log_abnormal_end(kind, ended);
        }
    }

    /// Runs `batch` through `handler`; whether it failed. When the batch's commit failed,
    /// nothing of it took effect: its jobs are handed back, due after a poll interval, rather
    /// than left leased until expiry.
    async fn run_batch(
        self: Arc<Self>,
        kind: &'static str,
        handler: Arc<dyn JobHandler>,
        batch: Vec<JobRow>,
    ) -> bool {
        let Err(e) = handler.handle(&self.owner, &batch).await else {
            return false;
        };
        let poll = Duration::from_millis(self.cfg.poll_interval_ms);
        let retry_at = self
            .clock
            .now_ms()
            .saturating_add(i64::try_from(poll.as_millis()).unwrap_or(i64::MAX));
        let released = jobs::release_many(&self.db, &batch, &self.owner, retry_at).await;
        tracing::error!(kind, error = %e, released = ?released.ok(), "job batch failed; it will run again");
        true
    }

    /// The next batch for a worker of `kind`: jobs handed over first, else jobs claimed from the
    /// table. The table comes first when jobs are known to wait there ([`Queue::wake`]), and at
    /// least every poll interval even while jobs keep being handed over, so that jobs waiting
    /// there (retries, reaped leases, other instances' jobs) are not starved.
    async fn next_batch(
        &self,
        kind: &str,
        batch_size: usize,
        last_claim: &mut Instant,
    ) -> Result<Vec<JobRow>> {
        let now = self.clock.now_ms();
        let in_table = self
            .locals()
            .get_mut(kind)
            .is_some_and(|l| std::mem::take(&mut l.in_table));
        if !in_table && last_claim.elapsed() < Duration::from_millis(self.cfg.poll_interval_ms) {
            let handed = self.take_local(kind, batch_size, now);
            if !handed.is_empty() {
                return Ok(handed);
            }
        }
        *last_claim = Instant::now();
        let claimed = jobs::claim(
            &self.db,
            kind,
            &self.owner,
            now,
            now.saturating_add(self.lease_ms()),
            batch_size,
        )
        .await?;
        if claimed.is_empty() {
            return Ok(self.take_local(kind, batch_size, now));
        }
        Ok(claimed)
    }

    fn has_local(&self, kind: &str) -> bool {
        self.locals().get(kind).is_some_and(|l| !l.jobs.is_empty())
    }

    /// Returns this instance's leased jobs to the queue (after a shutdown that did not finish
    /// them), and ends the runs it still holds ([`crate::store::runs`]) so that another
    /// instance, or this one started again, can run their threads at once.
    ///
    /// # Errors
    /// Database errors.
    pub async fn release_owned(&self) -> Result<u64> {
        let n = jobs::release_owned(&self.db, &self.owner, self.clock.now_ms()).await?;
        crate::store::runs::release_owned(&self.db, &self.owner).await?;
        Ok(n)
    }

    /// Housekeeping: returns jobs with expired leases to the queue (every quarter lease, at
    /// most every few seconds) and deletes finished jobs past their retention (every minute).
    pub fn spawn_housekeeping(
        self: &Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> JoinHandle<()> {
        let q = Arc::clone(self);
        tokio::spawn(async move {
            let keep = i64::try_from(q.cfg.done_retention_seconds.saturating_mul(1000))
                .unwrap_or(i64::MAX);
            let tick =
                Duration::from_millis((q.cfg.lease_seconds.saturating_mul(250)).clamp(100, 5_000));
            let mut last_cleanup = q.clock.now_ms();
            loop {
                tokio::select! {
                    () = tokio::time::sleep(tick) => {}
                    _ = shutdown.changed() => return,
                }
                let now = q.clock.now_ms();
                for kind in q.known_kinds() {
                    match jobs::reap_expired(&q.db, &kind, now).await {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::warn!(
                                n,
                                kind,
                                "jobs whose worker stopped answering are back in the queue"
                            );
                            q.wake(&kind);
                        }
                        Err(e) => tracing::warn!(error = %e, "reaping expired leases failed"),
                    }
                }
                if now - last_cleanup >= 60_000 {
                    last_cleanup = now;
                    match jobs::cleanup_done(&q.db, now.saturating_sub(keep)).await {
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(n, "deleted finished jobs"),
                        Err(e) => tracing::warn!(error = %e, "deleting finished jobs failed"),
                    }
                    // Policy states past their lifetime, kept as long as finished jobs so that
                    // a late presentation is told "expired" for a while, not "unknown".
                    match crate::store::policy::purge_expired(&q.db, now.saturating_sub(keep)).await
                    {
                        Ok(0) => {}
                        Ok(n) => tracing::debug!(n, "deleted expired policy states"),
                        Err(e) => tracing::warn!(error = %e, "deleting policy states failed"),
                    }
                }
            }
        })
    }

    fn known_kinds(&self) -> Vec<String> {
        match self.wakers.lock() {
            Ok(m) => m.keys().cloned().collect(),
            Err(p) => p.into_inner().keys().cloned().collect(),
        }
    }

    /// Hands every notification on the PostgreSQL channel `channel` from any instance to
    /// `handler`, through this instance's one `LISTEN` connection ([`Queue::spawn_listener`];
    /// register before it starts). Nothing on SQLite, which has no other instance.
    pub fn on_notify(&self, channel: &str, handler: listen::Handler) {
        if self.db.postgres_pool().is_none() {
            return;
        }
        match &mut *self.listening() {
            Some(listener) => listener.on(channel, handler),
            None => tracing::error!(channel, "registered after the listener started; not heard"),
        }
    }

    /// Calls `handler` each time this instance's `LISTEN` connection is established again
    /// after it was lost: notifications sent meanwhile were missed. Nothing on SQLite.
    pub fn on_reconnect(&self, handler: listen::Reconnected) {
        if self.db.postgres_pool().is_none() {
            return;
        }
        match &mut *self.listening() {
            Some(listener) => listener.on_reconnect(handler),
            None => tracing::error!("registered after the listener started; not called"),
        }
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, Option<Listener>> {
        self.listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// On PostgreSQL, starts this instance's one `LISTEN` connection: job notifications from
    /// every instance wake local workers, and the notifications of every channel registered
    /// with [`Queue::on_notify`] go to their handlers. Reconnects after errors; stops on
    /// `shutdown`, whatever it is waiting for.
    pub fn spawn_listener(
        self: &Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> Option<JoinHandle<()>> {
        let mut listener = self.listening().take().unwrap_or_default();
        let pool = self.db.postgres_pool()?.clone();
        let q = Arc::clone(self);
        listener.on(NOTIFY_CHANNEL, Arc::new(move |kind: &str| q.wake(kind)));
        Some(listener.spawn(pool, listen::RECONNECT_PAUSE, shutdown))
    }
}

/// Exponential backoff with ±50 % jitter: `base · 2^(attempt-1)`, capped.
pub fn backoff_ms(cfg: &QueueConfig, attempt: i64, rng: &mut impl Rng) -> i64 {
    let exp = u32::try_from(attempt.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let raw = cfg
        .backoff_base_ms
        .saturating_mul(1u64 << exp)
        .min(cfg.backoff_max_ms);
    let jittered = (raw as f64) * rng.gen_range(0.5..1.5);
    (jittered as i64).clamp(1, i64::try_from(cfg.backoff_max_ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
