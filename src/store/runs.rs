//! SQL of the runs leased across instances (PostgreSQL only; SQLite serves one instance, whose
//! runs are held in memory): a thread's run taken for one agent by one instance at a time, in
//! the order its messages were stored, with the agent's runs in flight on every instance counted
//! against the `max_concurrent_calls` its operator set; the messages that wait recorded, and the
//! oldest one woken when the run ends (`migrations/*/20261128000100_run_leases.sql`).

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

/// Ends `owner`'s runs of `keys` (thread, agent) in `tx`, the transaction that commits their
/// outcome. It only deletes the leases: the messages waiting for those runs are woken by
/// [`wake_next`] once `tx` has committed. Waking them here could lose a wake-up: this statement
/// sees the waiters committed before it began, and a batch that records one meanwhile and looks
/// for a free thread before this commits finds the run still held, so neither side would wake
/// it (it then waited out its whole wait, seconds a turn: the 500-thread stall). It would also
/// wait on the row locks of other batches' jobs inside the commit.
///
/// # Errors
/// Database errors.
pub async fn release(tx: &mut Tx, owner: &str, keys: &[(&str, &str)]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let (sql, args) = end_leases(owner, keys);
    tx.execute(&sql, &args).await?;
    Ok(())
}

/// After the commit that ended the runs of `keys` ([`release`], [`drop_leases`]): makes the
/// dispatch job of the oldest message waiting for each of them due now, where the thread is still
/// free and that job is back in the table; returns the ids woken. A job still running is left to
/// its own batch, which looks for a free thread after its commit ([`wake_free`]): whichever of
/// the two looks second sees the other's commit, so one of them wakes it. Jobs another
/// transaction holds are skipped, never waited for.
///
/// # Errors
/// Database errors (the waiters are then tried when their wait runs out).
pub async fn wake_next(db: &Db, keys: &[(&str, &str)], now: i64) -> Result<Vec<String>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let (values, mut args) = rows(keys, |(t, a)| [Arg::Text(t), Arg::Text(a)]);
    let t = args.len() + 1;
    args.push(Arg::Int(now));
    let sql = format!(
        "WITH k(thread_id, agent) AS (VALUES {values}), \
         next AS (SELECT DISTINCT ON (w.thread_id, w.agent) w.job_id FROM run_waiters w \
                  JOIN k ON w.thread_id = k.thread_id AND w.agent = k.agent \
                  WHERE w.until_ms >= ${t} \
                  AND NOT EXISTS (SELECT 1 FROM run_leases l WHERE l.thread_id = w.thread_id \
                                  AND l.agent = w.agent AND l.until_ms >= ${t}) \
                  ORDER BY w.thread_id, w.agent, w.seq), \
         due AS (SELECT j.id FROM jobs j WHERE j.id IN (SELECT job_id FROM next) \
                 AND j.state = 'ready' AND j.run_at > ${t} FOR UPDATE SKIP LOCKED) \
         UPDATE jobs SET run_at = ${t} WHERE id IN (SELECT id FROM due) RETURNING id"
    );
    let rows: Vec<IdRow> = db.write_fetch_all(&sql, &args).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// After the commit that put the waiting dispatch jobs `ids` back in the table: makes due now
/// those whose turn came while they ran (their thread is free and no older message waits). The
/// run they waited for may have ended before they were back, and its [`wake_next`] then left
/// them to this. Returns the ids woken; jobs another transaction holds are skipped.
///
/// # Errors
/// Database errors (the waiters are then tried when their wait runs out).
pub async fn wake_free(db: &Db, ids: &[&str], now: i64) -> Result<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let list = super::in_list(ids.len(), 2);
    let sql = format!(
        "WITH due AS (SELECT j.id FROM jobs j JOIN run_waiters w ON w.job_id = j.id \
                      WHERE j.id IN ({list}) AND j.state = 'ready' AND w.until_ms >= $1 \
                      AND NOT EXISTS (SELECT 1 FROM run_leases l WHERE l.thread_id = w.thread_id \
                                      AND l.agent = w.agent AND l.until_ms >= $1) \
                      AND NOT EXISTS (SELECT 1 FROM run_waiters o WHERE o.thread_id = w.thread_id \
                                      AND o.agent = w.agent AND o.seq < w.seq AND o.until_ms >= $1) \
                      FOR UPDATE OF j SKIP LOCKED) \
         UPDATE jobs SET run_at = $1 WHERE id IN (SELECT id FROM due) RETURNING id"
    );
    let mut args = vec![Arg::Int(now)];
    args.extend(ids.iter().map(|id| Arg::Text(id)));
    let rows: Vec<IdRow> = db.write_fetch_all(&sql, &args).await?;
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
    let (sql, args) = end_leases(owner, keys);
    db.execute(&sql, &args).await
}

/// The statement that deletes `owner`'s leases of `keys` (thread, agent), and its arguments.
fn end_leases<'a>(owner: &'a str, keys: &'a [(&'a str, &'a str)]) -> (String, Vec<Arg<'a>>) {
    let (values, mut args) = rows(keys, |(t, a)| [Arg::Text(t), Arg::Text(a)]);
    let o = args.len() + 1;
    args.push(Arg::Text(owner));
    let sql = format!(
        "DELETE FROM run_leases l USING (VALUES {values}) AS k(thread_id, agent) \
         WHERE l.thread_id = k.thread_id AND l.agent = k.agent AND l.owner = ${o}"
    );
    (sql, args)
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
