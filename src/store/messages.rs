//! Threads, inbound messages with their dedupe keys, agents' responses, and delivery outcomes.

use super::{Arg, Db, Tx};
use crate::error::{Error, Result};

/// A stored message or response.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredMessage {
    /// Insertion order.
    pub seq: i64,
    /// Id.
    pub id: String,
    /// Switchboard thread id.
    pub thread_id: String,
    /// `in` (NormalizedMessage) or `out` (NormalizedResponse).
    pub direction: String,
    /// The agent's local name.
    pub agent: String,
    /// The transport it came in on (or goes out by).
    pub transport: String,
    /// The JSON body.
    pub body: String,
    /// Stored at (unix ms).
    pub created_at: i64,
}

#[derive(sqlx::FromRow)]
struct IdRow {
    id: String,
}

#[derive(sqlx::FromRow)]
struct ThreadRow {
    thread_id: String,
}

/// The thread of a stored message.
///
/// # Errors
/// Database errors.
pub async fn thread_of(tx: &mut Tx, message_id: &str) -> Result<Option<String>> {
    let row: Option<ThreadRow> = tx
        .fetch_optional(
            "SELECT thread_id FROM messages WHERE id = $1",
            &[Arg::Text(message_id)],
        )
        .await?;
    Ok(row.map(|r| r.thread_id))
}

#[derive(sqlx::FromRow)]
struct SeenRow {
    message_id: String,
}

/// Claims the dedupe key `(transport, external_id)` for `message_id`. Returns the id of the
/// message that already holds it when this is a duplicate.
///
/// # Errors
/// Database errors.
pub async fn claim_external_id(
    tx: &mut Tx,
    transport: &str,
    external_id: &str,
    message_id: &str,
    now: i64,
) -> Result<Option<String>> {
    let n = tx
        .execute(
            "INSERT INTO inbound_seen (transport, external_id, message_id, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
            &[Arg::Text(transport), Arg::Text(external_id), Arg::Text(message_id), Arg::Int(now)],
        )
        .await?;
    if n > 0 {
        return Ok(None);
    }
    let row: Option<SeenRow> = tx
        .fetch_optional(
            "SELECT message_id FROM inbound_seen WHERE transport = $1 AND external_id = $2",
            &[Arg::Text(transport), Arg::Text(external_id)],
        )
        .await?;
    Ok(Some(row.map_or_else(String::new, |r| r.message_id)))
}

/// The thread id for `(transport, thread_key)`, creating the thread with `new_id` if needed.
///
/// # Errors
/// Database errors.
pub async fn upsert_thread(
    tx: &mut Tx,
    transport: &str,
    thread_key: &str,
    new_id: &str,
    now: i64,
) -> Result<String> {
    let row: Option<IdRow> = tx
        .fetch_optional(
            "INSERT INTO threads (id, transport, thread_key, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (transport, thread_key) DO UPDATE SET thread_key = excluded.thread_key RETURNING id",
            &[Arg::Text(new_id), Arg::Text(transport), Arg::Text(thread_key), Arg::Int(now)],
        )
        .await?;
    row.map(|r| r.id)
        .ok_or_else(|| Error::Invalid("thread could not be stored".into()))
}

/// A message or response to store.
#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    /// Id.
    pub id: &'a str,
    /// Switchboard thread id.
    pub thread_id: &'a str,
    /// `in` or `out`.
    pub direction: &'a str,
    /// The agent's local name.
    pub agent: &'a str,
    /// Transport.
    pub transport: &'a str,
    /// For a response: the message it answers (unique: one response per message).
    pub answers: Option<&'a str>,
    /// JSON body.
    pub body: &'a str,
}

/// Stores a message; returns `false` when its id, or for a response the message it answers,
/// is already stored.
///
/// # Errors
/// Database errors.
pub async fn insert(tx: &mut Tx, m: &NewMessage<'_>, now: i64) -> Result<bool> {
    let n = tx
        .execute(
            "INSERT INTO messages (id, thread_id, direction, agent, transport, answers, body, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
            &[
                Arg::Text(m.id),
                Arg::Text(m.thread_id),
                Arg::Text(m.direction),
                Arg::Text(m.agent),
                Arg::Text(m.transport),
                Arg::OptText(m.answers),
                Arg::Text(m.body),
                Arg::Int(now),
            ],
        )
        .await?;
    Ok(n > 0)
}

const COLUMNS: &str = "seq, id, thread_id, direction, agent, transport, body, created_at";

/// One stored message or response by id.
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, id: &str) -> Result<Option<StoredMessage>> {
    db.fetch_optional(
        &format!("SELECT {COLUMNS} FROM messages WHERE id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// The response that answers `message_id`, if any.
///
/// # Errors
/// Database errors.
pub async fn response_to(db: &Db, message_id: &str) -> Result<Option<StoredMessage>> {
    db.fetch_optional(
        &format!("SELECT {COLUMNS} FROM messages WHERE answers = $1"),
        &[Arg::Text(message_id)],
    )
    .await
}

/// The turns of a thread before `before_seq`: the first `head` and the last `tail`, oldest first,
/// without repeats.
///
/// # Errors
/// Database errors.
pub async fn thread_turns(
    db: &Db,
    thread_id: &str,
    before_seq: i64,
    head: usize,
    tail: usize,
) -> Result<Vec<StoredMessage>> {
    let lim = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut first: Vec<StoredMessage> = if head > 0 {
        db.fetch_all(
            &format!("SELECT {COLUMNS} FROM messages WHERE thread_id = $1 AND seq < $2 ORDER BY seq LIMIT $3"),
            &[Arg::Text(thread_id), Arg::Int(before_seq), Arg::Int(lim(head))],
        )
        .await?
    } else {
        Vec::new()
    };
    if first.len() < head {
        // The whole thread fits in the head query.
        return Ok(first);
    }
    let mut last: Vec<StoredMessage> = db
        .fetch_all(
            &format!("SELECT {COLUMNS} FROM messages WHERE thread_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"),
            &[Arg::Text(thread_id), Arg::Int(before_seq), Arg::Int(lim(tail))],
        )
        .await?;
    last.reverse();
    let head_end = first.last().map_or(i64::MIN, |m| m.seq);
    first.extend(last.into_iter().filter(|m| m.seq > head_end));
    Ok(first)
}

/// The final outcome of a delivery job.
#[derive(Debug, Clone)]
pub struct DeliveryRecord<'a> {
    /// The delivery job.
    pub job_id: &'a str,
    /// The response delivered.
    pub response_id: &'a str,
    /// Transport.
    pub transport: &'a str,
    /// `delivered` or `failed`.
    pub outcome: &'a str,
    /// Attempts made.
    pub attempts: i64,
    /// Failure detail (operators only).
    pub detail: Option<&'a str>,
}

/// Records the final outcome of a delivery job.
///
/// # Errors
/// Database errors.
pub async fn record_delivery(tx: &mut Tx, r: &DeliveryRecord<'_>, now: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO deliveries (job_id, response_id, transport, outcome, attempts, detail, finished_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) \
         ON CONFLICT (job_id) DO UPDATE SET outcome = excluded.outcome, attempts = excluded.attempts, \
         detail = excluded.detail, finished_at = excluded.finished_at",
        &[
            Arg::Text(r.job_id),
            Arg::Text(r.response_id),
            Arg::Text(r.transport),
            Arg::Text(r.outcome),
            Arg::Int(r.attempts),
            Arg::OptText(r.detail),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// Counts used by tests and operators: messages per direction.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DirectionCount {
    /// `in` or `out`.
    pub direction: String,
    /// Count.
    pub n: i64,
}

/// Message counts per direction.
///
/// # Errors
/// Database errors.
pub async fn counts(db: &Db) -> Result<Vec<DirectionCount>> {
    db.fetch_all(
        "SELECT direction, COUNT(*) AS n FROM messages GROUP BY direction",
        &[],
    )
    .await
}
