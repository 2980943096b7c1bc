//! Reads for the operator API: threads newest first with their activity, a thread's messages,
//! and the facts a message's status is derived from (its dispatch outcome, its response, their
//! jobs and delivery records).

use super::{Arg, Db, in_list};
use crate::error::Result;

/// A thread.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ThreadRow {
    /// Switchboard's thread id.
    pub id: String,
    /// The transport it lives on.
    pub transport: String,
    /// The wire thread key it was opened with.
    pub thread_key: String,
    /// Opened at (unix ms).
    pub created_at: i64,
}

/// What threads to list.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadFilter<'a> {
    /// Only threads in which this agent (local name) took part.
    pub agent: Option<&'a str>,
    /// Only threads on this transport.
    pub transport: Option<&'a str>,
    /// Only threads opened before this one: `(created_at, id)` of the last thread of the
    /// previous page.
    pub before: Option<(i64, &'a str)>,
}

const THREAD_COLUMNS: &str = "t.id, t.transport, t.thread_key, t.created_at";

/// The thread with `id`.
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, id: &str) -> Result<Option<ThreadRow>> {
    db.fetch_optional(
        &format!("SELECT {THREAD_COLUMNS} FROM threads t WHERE t.id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// Up to `limit` threads holding at least one message, newest first (by when they were
/// opened, then id), as `filter` selects.
///
/// # Errors
/// Database errors.
pub async fn list(db: &Db, filter: ThreadFilter<'_>, limit: i64) -> Result<Vec<ThreadRow>> {
    let (at, id) = filter.before.unzip();
    db.fetch_all(
        &format!(
            "SELECT {THREAD_COLUMNS} FROM threads t \
             WHERE ($1 IS NULL OR t.transport = $1) \
             AND ($3 IS NULL OR t.created_at < $3 OR (t.created_at = $3 AND t.id < $4)) \
             AND EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = t.id AND ($2 IS NULL OR m.agent = $2)) \
             ORDER BY t.created_at DESC, t.id DESC LIMIT $5"
        ),
        &[
            Arg::OptText(filter.transport),
            Arg::OptText(filter.agent),
            Arg::OptInt(at),
            Arg::OptText(id),
            Arg::Int(limit),
        ],
    )
    .await
}

/// A thread's activity.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ThreadActivity {
    /// The thread.
    pub thread_id: String,
    /// Messages and responses stored in it.
    pub messages: i64,
    /// When the last of them was stored (unix ms).
    pub last_activity: i64,
}

/// The activity of each of these threads (threads without messages are left out).
///
/// # Errors
/// Database errors.
pub async fn activity(db: &Db, thread_ids: &[&str]) -> Result<Vec<ThreadActivity>> {
    if thread_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT thread_id, COUNT(*) AS messages, MAX(created_at) AS last_activity FROM messages \
         WHERE thread_id IN ({}) GROUP BY thread_id",
        in_list(thread_ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = thread_ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// An agent that took part in a thread.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ThreadAgent {
    /// The thread.
    pub thread_id: String,
    /// The agent's local name.
    pub agent: String,
}

/// The agents of each of these threads, by thread then name.
///
/// # Errors
/// Database errors.
pub async fn agents(db: &Db, thread_ids: &[&str]) -> Result<Vec<ThreadAgent>> {
    if thread_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT DISTINCT thread_id, agent FROM messages WHERE thread_id IN ({}) \
         ORDER BY thread_id, agent",
        in_list(thread_ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = thread_ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// A stored message or response with what its status is derived from.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct MessageEntry {
    /// Insertion order.
    pub seq: i64,
    /// Id.
    pub id: String,
    /// Switchboard's thread id.
    pub thread_id: String,
    /// `in` or `out`.
    pub direction: String,
    /// The agent's local name.
    pub agent: String,
    /// Transport.
    pub transport: String,
    /// For a response: the message it answers.
    pub answers: Option<String>,
    /// The JSON body.
    pub body: String,
    /// Stored at (unix ms).
    pub created_at: i64,
    /// How its dispatch ended without a response (`no_reply`, `failed`), if it did.
    pub outcome: Option<String>,
    /// The class of a `failed` dispatch.
    pub error_class: Option<String>,
    /// When it was erased (its author deleted it), if it was.
    #[sqlx(default)]
    #[serde(default)]
    pub deleted_at: Option<i64>,
}

const ENTRY_COLUMNS: &str = "seq, id, thread_id, direction, agent, transport, answers, body, created_at, outcome, error_class, deleted_at";

/// The message or response with `id`.
///
/// # Errors
/// Database errors.
pub async fn entry(db: &Db, id: &str) -> Result<Option<MessageEntry>> {
    db.fetch_optional(
        &format!("SELECT {ENTRY_COLUMNS} FROM messages WHERE id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// How a message's dispatch ended without a response, as recorded on it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct Outcome {
    /// The message.
    pub id: String,
    /// `no_reply` or `failed`, if it ended so.
    pub outcome: Option<String>,
    /// The class of a failure.
    pub error_class: Option<String>,
}

/// The recorded outcomes of these messages.
///
/// # Errors
/// Database errors.
pub async fn outcomes(db: &Db, ids: &[&str]) -> Result<Vec<Outcome>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT id, outcome, error_class FROM messages WHERE id IN ({})",
        in_list(ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// The first `limit` messages and responses of a thread, in the order they were stored.
///
/// # Errors
/// Database errors.
pub async fn entries(db: &Db, thread_id: &str, limit: i64) -> Result<Vec<MessageEntry>> {
    db.fetch_all(
        &format!("SELECT {ENTRY_COLUMNS} FROM messages WHERE thread_id = $1 ORDER BY seq LIMIT $2"),
        &[Arg::Text(thread_id), Arg::Int(limit)],
    )
    .await
}

/// The responses to these messages.
///
/// # Errors
/// Database errors.
pub async fn responses_to(db: &Db, message_ids: &[&str]) -> Result<Vec<MessageEntry>> {
    if message_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM messages WHERE answers IN ({})",
        in_list(message_ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = message_ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// The final outcome of a delivery.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct DeliveryRow {
    /// The delivery job.
    pub job_id: String,
    /// The response delivered.
    pub response_id: String,
    /// `delivered` or `failed`.
    pub outcome: String,
    /// Attempts made.
    pub attempts: i64,
    /// When it ended (unix ms).
    pub finished_at: i64,
    /// Of a failed delivery, the enhanced status code the remote side gave (`5.1.1`).
    pub status_code: Option<String>,
    /// Of a failed delivery, the remote server's diagnostic.
    pub diagnostic: Option<String>,
    /// Of a failed delivery, the server that gave the diagnostic.
    pub remote_mta: Option<String>,
    /// Of a failed delivery, the recipient it failed for.
    pub recipient: Option<String>,
}

/// The recorded delivery outcomes of these responses.
///
/// # Errors
/// Database errors.
pub async fn deliveries(db: &Db, response_ids: &[&str]) -> Result<Vec<DeliveryRow>> {
    if response_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT job_id, response_id, outcome, attempts, finished_at, status_code, diagnostic, \
         remote_mta, recipient FROM deliveries \
         WHERE response_id IN ({})",
        in_list(response_ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = response_ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// What an agent did lately.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct AgentActivity {
    /// The agent's local name.
    pub agent: String,
    /// When it last answered (unix ms).
    pub last_success: Option<i64>,
    /// When a message to it last failed (unix ms).
    pub last_failure: Option<i64>,
}

/// When each agent last answered and last failed (a scan of the messages).
///
/// # Errors
/// Database errors.
pub async fn agent_activity(db: &Db) -> Result<Vec<AgentActivity>> {
    db.fetch_all(
        "SELECT agent, MAX(CASE WHEN direction = 'out' THEN created_at END) AS last_success, \
         MAX(CASE WHEN outcome = 'failed' THEN created_at END) AS last_failure \
         FROM messages GROUP BY agent ORDER BY agent",
        &[],
    )
    .await
}

/// An agent's mean time from message to stored response.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct AgentLatency {
    /// The agent's local name.
    pub agent: String,
    /// Mean milliseconds.
    pub latency_ms: i64,
}

/// Each agent's mean time from message to stored response, over responses stored since
/// `since` (unix ms).
///
/// # Errors
/// Database errors.
pub async fn agent_latency(db: &Db, since: i64) -> Result<Vec<AgentLatency>> {
    db.fetch_all(
        "SELECT i.agent, CAST(AVG(o.created_at - i.created_at) AS BIGINT) AS latency_ms \
         FROM messages o JOIN messages i ON i.id = o.answers \
         WHERE o.direction = 'out' AND o.created_at >= $1 GROUP BY i.agent",
        &[Arg::Int(since)],
    )
    .await
}
