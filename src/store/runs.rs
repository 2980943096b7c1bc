//! SQL of the runs leased across instances (PostgreSQL only; SQLite serves one instance, whose
//! runs are held in memory): a thread's run taken for one agent by one instance at a time, in
//! the order its messages were stored, with the agent's runs in flight on every instance counted
//! against the `max_concurrent_calls` its operator set; the messages that wait recorded, and the
//! oldest one woken when the run ends (`migrations/*/20261128000100_run_leases.sql`).

use std::collections::HashSet;

use super::{Arg, Db, Tx, rows};
use crate::error::Result;

/// A message of a dispatch batch asking for its thread's run.
#[derive(Debug, Clone)]
pub struct Ask<'a> {
    /// The thread.
    pub thread_id: &'a str,
    /// The agent (local name).
    pub agent: &'a str,
    /// The message's place in the thread.
    pub seq: i64,
    /// Its dispatch job, woken when its turn comes.
    pub job_id: &'a str,
    /// Whether it tries to take the run (`false`: this instance already runs the thread, the
    /// message waits here, and is recorded so that no newer message elsewhere goes first).
    pub tries: bool,
    /// The agent's runs in flight on every instance at most (`None`: no bound here).
    pub cap: Option<i64>,
}

/// What became of an [`Ask`] that tried.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Deserialize)]
pub struct Answer {
    /// The thread.
    pub thread_id: String,
    /// The agent.
    pub agent: String,
    /// The run is this instance's.
    pub taken: bool,
    /// The thread was free but the agent has `max_concurrent_calls` runs in flight.
    pub full: bool,
    /// When the live lease another instance holds on the thread ends (unix ms), if one does.
    pub held_until: Option<i64>,
}

/// Takes, for `owner` until `until`, the runs the asks that try can have: a thread no other
/// instance holds a live lease on, where no older message waits, while the agent has fewer live
/// runs than its cap, if it has one (the oldest asks first). Every ask that does not get its run
/// is recorded as waiting, until `until`. One statement; where an agent has a cap, in a
/// transaction that first takes that agent's advisory lock, so that two instances never count
/// the same free place.
///
/// # Errors
/// Database errors (nothing was taken).
pub async fn take(
    db: &Db,
    owner: &str,
    asks: &[Ask<'_>],
    now: i64,
    until: i64,
) -> Result<Vec<Answer>> {
    if asks.is_empty() {
        return Ok(Vec::new());
    }
    let mut capped: Vec<&str> = asks
        .iter()
        .filter(|a| a.tries && a.cap.is_some())
        .map(|a| a.agent)
        .collect();
    capped.sort_unstable();
    capped.dedup();
    let mut tx = if capped.is_empty() {
        None
    } else {
        Some(db.begin().await?)
    };
    if let Some(tx) = tx.as_mut() {
        for agent in capped {
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('switchboard-runs'), hashtext($1))",
                &[Arg::Text(agent)],
            )
            .await?;
        }
    }
    let (values, mut args) = rows(asks, |a| {
        [
            Arg::Text(a.thread_id),
            Arg::Text(a.agent),
            Arg::Int(a.seq),
            Arg::Text(a.job_id),
            Arg::Int(i64::from(a.tries)),
            Arg::OptInt(a.cap),
        ]
    });
    let n = args.len();
    args.extend([Arg::Text(owner), Arg::Int(now), Arg::Int(until)]);
    let (o, t, u) = (n + 1, n + 2, n + 3);
    let sql = format!(
        "WITH v(thread_id, agent, seq, job_id, tries, cap) AS (VALUES {values}), \
         k AS (SELECT thread_id, agent, seq::bigint AS seq, job_id, tries::bigint = 1 AS tries, cap::bigint AS cap FROM v), \
         c AS (SELECT k.thread_id, k.agent, k.seq, k.cap, \
               NOT EXISTS (SELECT 1 FROM run_leases l WHERE l.thread_id = k.thread_id AND l.agent = k.agent \
                           AND l.until_ms >= ${t} AND l.owner <> ${o}) \
               AND NOT EXISTS (SELECT 1 FROM run_waiters w WHERE w.thread_id = k.thread_id AND w.agent = k.agent \
                               AND w.seq < k.seq AND w.until_ms >= ${t}) AS open, \
               CASE WHEN k.cap IS NULL THEN 0 ELSE \
               (SELECT count(*) FROM run_leases l WHERE l.agent = k.agent AND l.until_ms >= ${t}) END AS running, \
               (SELECT max(l.until_ms) FROM run_leases l WHERE l.thread_id = k.thread_id AND l.agent = k.agent \
                AND l.until_ms >= ${t} AND l.owner <> ${o}) AS held_until \
               FROM k WHERE k.tries), \
         free AS (SELECT thread_id, agent, seq FROM \
                  (SELECT c.*, row_number() OVER (PARTITION BY agent ORDER BY seq) AS place FROM c WHERE open) r \
                  WHERE cap IS NULL OR running + place <= cap), \
         taken AS (INSERT INTO run_leases (thread_id, agent, owner, until_ms) \
                   SELECT thread_id, agent, ${o}, ${u} FROM free \
                   ON CONFLICT (thread_id, agent) DO UPDATE SET owner = EXCLUDED.owner, until_ms = EXCLUDED.until_ms \
                   WHERE run_leases.until_ms < ${t} OR run_leases.owner = EXCLUDED.owner \
                   RETURNING thread_id, agent), \
         waits AS (INSERT INTO run_waiters (thread_id, agent, seq, job_id, until_ms) \
                   SELECT k.thread_id, k.agent, k.seq, k.job_id, ${u} FROM k \
                   WHERE NOT (k.tries AND EXISTS (SELECT 1 FROM taken x WHERE x.thread_id = k.thread_id AND x.agent = k.agent)) \
                   ON CONFLICT (thread_id, agent, seq) DO UPDATE SET job_id = EXCLUDED.job_id, until_ms = EXCLUDED.until_ms), \
         ended AS (DELETE FROM run_waiters w USING taken x, k \
                   WHERE k.tries AND x.thread_id = k.thread_id AND x.agent = k.agent \
                   AND w.thread_id = k.thread_id AND w.agent = k.agent \
                   AND (w.seq = k.seq OR (w.seq < k.seq AND w.until_ms < ${t}))) \
         SELECT c.thread_id, c.agent, \
                EXISTS (SELECT 1 FROM taken x WHERE x.thread_id = c.thread_id AND x.agent = c.agent) AS taken, \
                c.open AND NOT EXISTS (SELECT 1 FROM free f WHERE f.thread_id = c.thread_id AND f.agent = c.agent) AS full, \
                c.held_until \
         FROM c"
    );
    let answers: Vec<Answer> = match tx {
        Some(mut tx) => {
            let answers = tx.fetch_all(&sql, &args).await?;
            tx.commit().await?;
            answers
        }
        None => db.write_fetch_all(&sql, &args).await?,
    };
    Ok(answers)
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct IdRow {
    id: String,
}

/// A job [`release`] made due, and its state (one still `running` is on its way back, or
/// kept waiting by its instance).
#[derive(sqlx::FromRow, serde::Deserialize)]
struct Woken {
    state: String,
}

/// Ends `owner`'s runs of `keys` (thread, agent) in `tx`, the transaction that commits their
/// outcome, and makes the dispatch job of the oldest message waiting for each due now; returns
/// whether any was in the table (notify the workers). A job still running (on its way back to
/// the table to wait, on this instance or another) is changed too: should it be put back after
/// this commits, its batch finds the run over and wakes it itself ([`wake_free`]); should it be
/// being put back now, this waits for that and wakes it.
///
/// # Errors
/// Database errors.
pub async fn release(tx: &mut Tx, owner: &str, keys: &[(&str, &str)], now: i64) -> Result<bool> {
    if keys.is_empty() {
        return Ok(false);
    }
    let (values, mut args) = rows(keys, |(t, a)| [Arg::Text(t), Arg::Text(a)]);
    let n = args.len();
    args.extend([Arg::Text(owner), Arg::Int(now)]);
    let (o, t) = (n + 1, n + 2);
    let sql = format!(
        "WITH k(thread_id, agent) AS (VALUES {values}), \
         gone AS (DELETE FROM run_leases l USING k WHERE l.thread_id = k.thread_id AND l.agent = k.agent \
                  AND l.owner = ${o} RETURNING l.thread_id, l.agent), \
         next AS (SELECT DISTINCT ON (w.thread_id, w.agent) w.job_id FROM run_waiters w \
                  JOIN gone g ON w.thread_id = g.thread_id AND w.agent = g.agent \
                  WHERE w.until_ms >= ${t} ORDER BY w.thread_id, w.agent, w.seq) \
         UPDATE jobs SET run_at = ${t} WHERE id IN (SELECT job_id FROM next) \
         AND state IN ('ready', 'running') \
         RETURNING id, state"
    );
    let woken: Vec<Woken> = tx.fetch_all(&sql, &args).await?;
    Ok(woken.iter().any(|w| w.state == "ready"))
}

/// Of the waiting dispatch jobs `ids`, put back in the table in `tx`, makes due now those whose
/// turn came while they ran (their thread is free and no older message waits): the run they
/// waited for ended before they were back, so its end could not wake them. Returns the ids.
///
/// # Errors
/// Database errors.
pub async fn wake_free(tx: &mut Tx, ids: &[&str], now: i64) -> Result<HashSet<String>> {
    if ids.is_empty() {
        return Ok(HashSet::new());
    }
    let list = super::in_list(ids.len(), 2);
    let sql = format!(
        "UPDATE jobs j SET run_at = $1 FROM run_waiters w \
         WHERE j.id IN ({list}) AND j.state = 'ready' AND w.job_id = j.id AND w.until_ms >= $1 \
         AND NOT EXISTS (SELECT 1 FROM run_leases l WHERE l.thread_id = w.thread_id AND l.agent = w.agent \
                         AND l.until_ms >= $1) \
         AND NOT EXISTS (SELECT 1 FROM run_waiters o WHERE o.thread_id = w.thread_id AND o.agent = w.agent \
                         AND o.seq < w.seq AND o.until_ms >= $1) \
         RETURNING j.id"
    );
    let mut args = vec![Arg::Int(now)];
    args.extend(ids.iter().map(|id| Arg::Text(id)));
    let rows: Vec<IdRow> = tx.fetch_all(&sql, &args).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Ends `owner`'s runs of `keys` outside any transaction: after a batch whose transaction
/// failed, so that the next attempt need not wait for the leases to expire.
///
/// # Errors
/// Database errors (the leases then expire on their own).
pub async fn drop_leases(db: &Db, owner: &str, keys: &[(&str, &str)]) -> Result<u64> {
    if keys.is_empty() {
        return Ok(0);
    }
    let (values, mut args) = rows(keys, |(t, a)| [Arg::Text(t), Arg::Text(a)]);
    let o = args.len() + 1;
    args.push(Arg::Text(owner));
    db.execute(
        &format!(
            "DELETE FROM run_leases l USING (VALUES {values}) AS k(thread_id, agent) \
             WHERE l.thread_id = k.thread_id AND l.agent = k.agent AND l.owner = ${o}"
        ),
        &args,
    )
    .await
}

/// Ends every run `owner` still holds (an instance shutting down).
///
/// # Errors
/// Database errors (the leases then expire on their own).
pub async fn release_owned(db: &Db, owner: &str) -> Result<u64> {
    db.execute(
        "DELETE FROM run_leases WHERE owner = $1",
        &[Arg::Text(owner)],
    )
    .await
}
