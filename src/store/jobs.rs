//! SQL of the durable queue: enqueue, claim with lease, finish, release, and the operator's
//! list / retry / purge.

use std::collections::HashSet;

use super::{Arg, Backend, Db, Tx, in_list, rows};
use crate::error::{Error, Result};

/// A job as claimed by a worker.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct JobRow {
    /// Stable id (e.g. `dispatch:{message id}`), so enqueueing twice is harmless.
    pub id: String,
    /// Job kind.
    pub kind: String,
    /// JSON payload.
    pub payload: String,
    /// Attempts so far, this one included.
    pub attempts: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
}

/// A job as the operator sees it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize, serde::Serialize)]
pub struct JobInfo {
    /// Id.
    pub id: String,
    /// Kind.
    pub kind: String,
    /// `ready`, `running`, `done` or `dead`.
    pub state: String,
    /// Attempts so far.
    pub attempts: i64,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// Next run (unix ms).
    pub run_at: i64,
    /// The last failure.
    pub last_error: Option<String>,
    /// Last change (unix ms).
    pub updated_at: i64,
}

/// Count of jobs per kind and state.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct JobCount {
    /// Kind.
    pub kind: String,
    /// State.
    pub state: String,
    /// Count.
    pub n: i64,
}

/// A new job.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    /// Stable id.
    pub id: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// JSON payload.
    pub payload: &'a str,
    /// Attempts allowed.
    pub max_attempts: i64,
    /// First run (unix ms).
    pub run_at: i64,
    /// Inserted already claimed: leased to this owner until then (its first attempt counted),
    /// for a worker of the owner's that is handed the job directly.
    pub lease: Option<(&'a str, i64)>,
}

/// How a claimed job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Succeeded.
    Done,
    /// Failed; run again at `run_at`.
    Retry {
        /// Next run (unix ms).
        run_at: i64,
        /// Why.
        error: String,
    },
    /// Failed for good; kept for the operator.
    Dead {
        /// Why.
        error: String,
    },
    /// Not run yet: kept by its worker's instance, its lease renewed until `run_at`, to be
    /// handed back to that instance's workers once what it waits for is over (the attempt its
    /// claim counted is the one its run uses). Should the instance go away, the lease expires
    /// and the job is claimed again.
    Deferred {
        /// The renewed lease's end (unix ms).
        lease_until: i64,
    },
    /// Not run yet: its message waits for its thread's run on another instance, or for a place
    /// among its agent's calls ([`crate::store::runs`]). Back in the table, the attempt its
    /// claim counted given back, due at `run_at` unless the end of the run it waits for makes
    /// it due sooner.
    Waiting {
        /// When it is tried again at the latest (unix ms).
        run_at: i64,
    },
}

impl Finish {
    /// The outcome's name in metrics: `done`, `retry`, `dead`, `deferred` or `waiting`.
    #[must_use]
    pub fn label(&self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::Retry { .. } => "retry",
            Self::Dead { .. } => "dead",
            Self::Deferred { .. } => "deferred",
            Self::Waiting { .. } => "waiting",
        }
    }
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct IdRow {
    id: String,
}

/// Inserts jobs in one statement, skipping ids that exist; returns the ids inserted. Call
/// [`Tx::notify`] once per transaction so other instances wake.
///
/// # Errors
/// Database errors.
pub async fn enqueue_many(tx: &mut Tx, jobs: &[NewJob<'_>], now: i64) -> Result<HashSet<String>> {
    if jobs.is_empty() {
        return Ok(HashSet::new());
    }
    let (values, args) = rows(jobs, |j| {
        let (state, attempts, owner, until) = match j.lease {
            Some((owner, until)) => ("running", 1, Some(owner), Some(until)),
            None => ("ready", 0, None, None),
        };
        [
            Arg::Text(j.id),
            Arg::Text(j.kind),
            Arg::Text(j.payload),
            Arg::Text(state),
            Arg::Int(attempts),
            Arg::Int(j.max_attempts),
            Arg::Int(j.run_at),
            Arg::OptText(owner),
            Arg::OptInt(until),
            Arg::Int(now),
            Arg::Int(now),
        ]
    });
    let sql = format!(
        "INSERT INTO jobs (id, kind, payload, state, attempts, max_attempts, run_at, lease_owner, lease_until, created_at, updated_at) \
         VALUES {values} ON CONFLICT DO NOTHING RETURNING id"
    );
    let rows: Vec<IdRow> = tx.fetch_all(&sql, &args).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Records that the jobs `ids` ended as `finish`, the same for all of them, in one statement
/// (on SQLite, one per job unless done) where `owner` still holds their lease; returns the ids
/// it did record (a job missing from the answer lost its lease and must not apply its effects).
///
/// A job has a lease owner only while it runs (every other state clears it), so the owner alone
/// says that the job still runs. Naming the state as well would let PostgreSQL's planner pick the
/// `jobs_running` partial index, which keeps an entry for every job run since the table was last
/// vacuumed, and scan all of them on every call; by id only the primary key is used.
///
/// # Errors
/// Database errors.
pub async fn finish_many(
    tx: &mut Tx,
    ids: &[&str],
    owner: &str,
    finish: &Finish,
    now: i64,
) -> Result<HashSet<String>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    // SQLite runs in this process: a job's own statement costs no round trip, where a list of
    // ids is matched through a temporary index (measured slower for the few jobs a batch keeps
    // or puts back); a batch's done jobs, its bulk, keep the one statement.
    if matches!(tx, Tx::Sqlite(_)) && *finish != Finish::Done {
        let mut held = HashSet::with_capacity(ids.len());
        for id in ids {
            if self::finish(tx, id, owner, finish, now).await? {
                held.insert((*id).to_owned());
            }
        }
        return Ok(held);
    }
    let (set, values) = set_clause(finish);
    let sql = format!(
        "UPDATE jobs SET {set}, updated_at = $1 WHERE id IN ({}) AND lease_owner = $2 RETURNING id",
        in_list(ids.len(), 3 + values.len())
    );
    let mut args = vec![Arg::Int(now), Arg::Text(owner)];
    args.extend(values);
    args.extend(ids.iter().map(|id| Arg::Text(id)));
    let rows: Vec<IdRow> = tx.fetch_all(&sql, &args).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// What a job ending as `finish` becomes: the assignments of an `UPDATE jobs` (its values from
/// `$3` on; `$1` is the time, `$2` the lease owner) and those values.
fn set_clause(finish: &Finish) -> (&'static str, Vec<Arg<'_>>) {
    match finish {
        Finish::Done => (
            "state = 'done', lease_owner = NULL, lease_until = NULL, last_error = NULL",
            Vec::new(),
        ),
        Finish::Retry { run_at, error } => (
            "state = 'ready', lease_owner = NULL, lease_until = NULL, last_error = $3, run_at = $4",
            vec![Arg::Text(error), Arg::Int(*run_at)],
        ),
        Finish::Dead { error } => (
            "state = 'dead', lease_owner = NULL, lease_until = NULL, last_error = $3",
            vec![Arg::Text(error)],
        ),
        Finish::Deferred { lease_until } => ("lease_until = $3", vec![Arg::Int(*lease_until)]),
        Finish::Waiting { run_at } => (
            "state = 'ready', lease_owner = NULL, lease_until = NULL, \
             attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, run_at = $3",
            vec![Arg::Int(*run_at)],
        ),
    }
}

/// Claims up to `limit` ready jobs of `kind` that are due, leasing them to `owner` until
/// `lease_until`. (Jobs whose lease expired come back through [`reap_expired`].)
///
/// # Errors
/// Database errors.
pub async fn claim(
    db: &Db,
    kind: &str,
    owner: &str,
    now: i64,
    lease_until: i64,
    limit: usize,
) -> Result<Vec<JobRow>> {
    let pick = match db.backend() {
        Backend::Sqlite => {
            "SELECT id FROM jobs WHERE kind = $1 AND state = 'ready' AND run_at <= $3 ORDER BY run_at LIMIT $5"
        }
        Backend::Postgres => {
            "SELECT id FROM jobs WHERE kind = $1 AND state = 'ready' AND run_at <= $3 \
             ORDER BY run_at LIMIT $5 FOR UPDATE SKIP LOCKED"
        }
    };
    let sql = format!(
        "UPDATE jobs SET state = 'running', lease_owner = $2, lease_until = $4, attempts = attempts + 1, updated_at = $3 \
         WHERE id IN ({pick}) RETURNING id, kind, payload, attempts, max_attempts"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.write_fetch_all(
        &sql,
        &[
            Arg::Text(kind),
            Arg::Text(owner),
            Arg::Int(now),
            Arg::Int(lease_until),
            Arg::Int(limit),
        ],
    )
    .await
}

/// Records how a job ended, if `owner` still holds its lease. Returns `false` when the lease
/// was lost (the job expired and someone else took it): the caller must then not apply the
/// job's effects.
///
/// # Errors
/// Database errors.
pub async fn finish(
    tx: &mut Tx,
    job_id: &str,
    owner: &str,
    finish: &Finish,
    now: i64,
) -> Result<bool> {
    let (set, values) = set_clause(finish);
    let sql = format!(
        "UPDATE jobs SET {set}, updated_at = $1 WHERE id = ${} AND lease_owner = $2 AND state = 'running'",
        3 + values.len()
    );
    let mut args = vec![Arg::Int(now), Arg::Text(owner)];
    args.extend(values);
    args.push(Arg::Text(job_id));
    Ok(tx.execute(&sql, &args).await? > 0)
}

/// Replaces the payload of job `id` while it waits to run again (`ready`): a job that did part
/// of its work keeps only the rest, in the transaction that puts it back.
///
/// # Errors
/// Database errors.
pub async fn set_payload(tx: &mut Tx, id: &str, payload: &str) -> Result<bool> {
    let n = tx
        .execute(
            "UPDATE jobs SET payload = $2 WHERE id = $1 AND state = 'ready'",
            &[Arg::Text(id), Arg::Text(payload)],
        )
        .await?;
    Ok(n > 0)
}

/// Returns jobs of `kind` whose lease expired (their worker died) to the queue; the attempt they used
/// still counts. Returns how many.
///
/// # Errors
/// Database errors.
pub async fn reap_expired(db: &Db, kind: &str, now: i64) -> Result<u64> {
    db.execute(
        "UPDATE jobs SET state = 'ready', lease_owner = NULL, lease_until = NULL, run_at = $1, updated_at = $1, \
         last_error = 'lease expired' WHERE kind = $2 AND state = 'running' AND lease_until < $1",
        &[Arg::Int(now), Arg::Text(kind)],
    )
    .await
}

/// Returns these jobs, if `owner` still leases them, to the queue, to run at `run_at` (the attempt
/// counts). Used when a batch could not be committed. (By id and owner, as
/// [`finish_many`].)
///
/// # Errors
/// Database errors (the leases then expire on their own).
pub async fn release_many(db: &Db, jobs: &[JobRow], owner: &str, run_at: i64) -> Result<u64> {
    if jobs.is_empty() {
        return Ok(0);
    }
    let sql = format!(
        "UPDATE jobs SET state = 'ready', lease_owner = NULL, lease_until = NULL, run_at = $1, updated_at = $1 \
         WHERE id IN ({}) AND lease_owner = $2",
        in_list(jobs.len(), 3)
    );
    let mut args = vec![Arg::Int(run_at), Arg::Text(owner)];
    args.extend(jobs.iter().map(|j| Arg::Text(&j.id)));
    db.execute(&sql, &args).await
}

/// Returns every job `owner` still leases to the queue, undoing the attempt it counted.
///
/// # Errors
/// Database errors.
pub async fn release_owned(db: &Db, owner: &str, now: i64) -> Result<u64> {
    db.execute(
        "UPDATE jobs SET state = 'ready', lease_owner = NULL, lease_until = NULL, \
         attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, run_at = $2, updated_at = $2 \
         WHERE lease_owner = $1 AND state = 'running'",
        &[Arg::Text(owner), Arg::Int(now)],
    )
    .await
}

/// Deletes finished jobs older than `before` (unix ms).
///
/// # Errors
/// Database errors.
pub async fn cleanup_done(db: &Db, before: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM jobs WHERE state = 'done' AND updated_at < $1",
        &[Arg::Int(before)],
    )
    .await
}

/// Jobs in `state` (all states when `None`), newest change first.
///
/// # Errors
/// Database errors.
pub async fn list(
    db: &Db,
    state: Option<&str>,
    kind: Option<&str>,
    limit: i64,
) -> Result<Vec<JobInfo>> {
    db.fetch_all(
        "SELECT id, kind, state, attempts, max_attempts, run_at, last_error, updated_at FROM jobs \
         WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR kind = $2) ORDER BY updated_at DESC, id LIMIT $3",
        &[Arg::OptText(state), Arg::OptText(kind), Arg::Int(limit)],
    )
    .await
}

/// The jobs with these ids that still exist (finished ones are purged after a while).
///
/// # Errors
/// Database errors.
pub async fn get_many(db: &Db, ids: &[&str]) -> Result<Vec<JobInfo>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id, kind, state, attempts, max_attempts, run_at, last_error, updated_at FROM jobs \
         WHERE id IN ({})",
        in_list(ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// The job with `id`, if there is one.
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, id: &str) -> Result<Option<JobInfo>> {
    db.fetch_optional(
        "SELECT id, kind, state, attempts, max_attempts, run_at, last_error, updated_at FROM jobs \
         WHERE id = $1",
        &[Arg::Text(id)],
    )
    .await
}

/// Makes dead jobs ready again: the one with `id`, or every dead job when `None`.
const RETRY_DEAD: &str = "UPDATE jobs SET state = 'ready', attempts = 0, run_at = $2, last_error = NULL, \
     updated_at = $2 WHERE state = 'dead' AND ($1 IS NULL OR id = $1)";

/// Puts dead jobs back: the one with `id`, or every dead job when `None`. Attempts restart.
///
/// # Errors
/// Database errors.
pub async fn retry_dead(db: &Db, id: Option<&str>, now: i64) -> Result<u64> {
    db.execute(RETRY_DEAD, &[Arg::OptText(id), Arg::Int(now)])
        .await
}

/// As [`retry_dead`], in `tx` (with the audit record of the operator who asked).
///
/// # Errors
/// Database errors.
pub async fn retry_dead_in(tx: &mut Tx, id: Option<&str>, now: i64) -> Result<u64> {
    tx.execute(RETRY_DEAD, &[Arg::OptText(id), Arg::Int(now)])
        .await
}

/// The statement that purges jobs in `state`, a terminal one.
fn purge_statement(state: &str) -> Result<&'static str> {
    if matches!(state, "dead" | "done") {
        Ok("DELETE FROM jobs WHERE state = $1")
    } else {
        Err(Error::Invalid(format!(
            "only dead or done jobs can be purged, not {state:?}"
        )))
    }
}

/// Deletes jobs in a terminal state (`dead` or `done`).
///
/// # Errors
/// [`Error::Invalid`] for a non-terminal state; database errors.
pub async fn purge(db: &Db, state: &str) -> Result<u64> {
    db.execute(purge_statement(state)?, &[Arg::Text(state)])
        .await
}

/// As [`purge`], in `tx` (with the audit record of the operator who asked).
///
/// # Errors
/// [`Error::Invalid`] for a non-terminal state; database errors.
pub async fn purge_in(tx: &mut Tx, state: &str) -> Result<u64> {
    tx.execute(purge_statement(state)?, &[Arg::Text(state)])
        .await
}

/// Jobs waiting, running and dead, per kind (finished jobs are not counted: there are many, and
/// the indexes that make these counts cheap leave them out).
///
/// # Errors
/// Database errors.
pub async fn depth(db: &Db) -> Result<Vec<JobCount>> {
    db.fetch_all(
        "SELECT kind, 'ready' AS state, COUNT(*) AS n FROM jobs WHERE state = 'ready' GROUP BY kind \
         UNION ALL SELECT kind, 'running' AS state, COUNT(*) AS n FROM jobs WHERE state = 'running' GROUP BY kind \
         UNION ALL SELECT kind, 'dead' AS state, COUNT(*) AS n FROM jobs WHERE state = 'dead' GROUP BY kind",
        &[],
    )
    .await
}

/// Job counts per kind and state (every job: a scan of the table).
///
/// # Errors
/// Database errors.
pub async fn counts(db: &Db) -> Result<Vec<JobCount>> {
    db.fetch_all(
        "SELECT kind, state, COUNT(*) AS n FROM jobs GROUP BY kind, state",
        &[],
    )
    .await
}
