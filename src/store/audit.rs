//! The audit trail of the operator's actions, the `audit_log` table
//! (`migrations/*/20261202000200_audit_log.sql`): one row per action taken through the operator
//! API or the console (blocks added and removed, dead jobs retried and purged, messages handed
//! in, agent tokens created and revoked, outbound messages approved), saying when, what (an
//! action name from [`action`], its target and a small JSON detail), with which credential
//! ([`Actor::credential`], never a secret) and from which client address.
//!
//! A row is written with [`record`] in the transaction of the action it records, so neither is
//! committed without the other; [`record_alone`] is for an action that changes nothing in the
//! database. Rows older than `database.retention_days` are pruned ([`prune_before`]) with the
//! messages.

use serde_json::Value;

use super::{Arg, Db, Tx};
use crate::error::Result;

/// The action names recorded.
pub mod action {
    /// A block added (target: the block's id).
    pub const BLOCK_ADD: &str = "block.add";
    /// A block removed (target: the block's id).
    pub const BLOCK_REMOVE: &str = "block.remove";
    /// Dead jobs made ready again (target: the job's id, `*` for every dead job).
    pub const QUEUE_RETRY: &str = "queue.retry";
    /// Jobs of a terminal state deleted (target: the state).
    pub const QUEUE_PURGE: &str = "queue.purge";
    /// A message handed to an agent (target: the stored message's id).
    pub const MESSAGE_SEND: &str = "message.send";
    /// An agent token created (target: the token's non-secret id).
    pub const AGENT_TOKEN_CREATE: &str = "agent_token.create";
    /// An agent token revoked (target: the token's non-secret id).
    pub const AGENT_TOKEN_REVOKE: &str = "agent_token.revoke";
    /// An outbound message approved (target: its id).
    pub const OUTBOUND_APPROVE: &str = "outbound.approve";
    /// An outbound message refused (target: its id).
    pub const OUTBOUND_REJECT: &str = "outbound.reject";
}

/// Who acted: the credential and the client address, as the transport that authenticated the
/// request read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// `api:` and a non-secret id of the API token, or `console` (with `:` and a non-secret
    /// session id when there is a session).
    pub credential: String,
    /// The client's address (behind trusted proxies, the one they name), when known.
    pub client: Option<String>,
}

impl Actor {
    /// The API credential of `token`: `api:` and the first 8 hex digits of its SHA-256, stable
    /// and telling tokens apart without revealing them.
    #[must_use]
    pub fn api_token(token: &str, client: Option<std::net::IpAddr>) -> Self {
        Self {
            credential: format!("api:{}", short_id(token)),
            client: client.map(|ip| ip.to_canonical().to_string()),
        }
    }
}

/// The first 8 hex digits of the SHA-256 of `secret`: an id to log and record in its place.
#[must_use]
pub fn short_id(secret: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(secret.as_bytes());
    hex::encode(digest.get(..4).unwrap_or_default())
}

/// One action to record.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// Who acted.
    pub actor: &'a Actor,
    /// What was done (one of [`action`]).
    pub action: &'a str,
    /// A small JSON object with what else tells the action apart.
    pub detail: Value,
    /// What it was done to.
    pub target: &'a str,
}

/// A recorded action.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct AuditRow {
    /// Its id (time-ordered).
    pub id: String,
    /// When (unix ms).
    pub at: i64,
    /// What was done.
    pub action: String,
    /// What it was done to.
    pub target: String,
    /// The detail, a JSON object.
    pub detail: String,
    /// Which credential.
    pub credential: String,
    /// From which client address.
    pub client: Option<String>,
}

/// Records `entry`, done at `at` (unix ms), in `tx`: the transaction of the action itself.
///
/// # Errors
/// Database errors.
pub async fn record(tx: &mut Tx, entry: &Entry<'_>, at: i64) -> Result<()> {
    let id = uuid::Uuid::now_v7().to_string();
    let detail = entry.detail.to_string();
    tx.execute(
        "INSERT INTO audit_log (id, at, action, target, detail, credential, client) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            Arg::Text(&id),
            Arg::Int(at),
            Arg::Text(entry.action),
            Arg::Text(entry.target),
            Arg::Text(&detail),
            Arg::Text(&entry.actor.credential),
            Arg::OptText(entry.actor.client.as_deref()),
        ],
    )
    .await
    .map(drop)
}

/// Records `entry` in a transaction of its own, for an action that writes nothing else to the
/// database.
///
/// # Errors
/// Database errors.
pub async fn record_alone(db: &Db, entry: &Entry<'_>, at: i64) -> Result<()> {
    let mut tx = db.begin().await?;
    record(&mut tx, entry, at).await?;
    tx.commit().await
}

/// Which recorded actions [`list`] answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct AuditFilter<'a> {
    /// Only those done at or after this time (unix ms).
    pub since: Option<i64>,
    /// Only this action.
    pub action: Option<&'a str>,
    /// Only those before this one (its time and id): the page after it.
    pub before: Option<(i64, &'a str)>,
}

/// Recorded actions matching `filter`, newest first, at most `limit`.
///
/// # Errors
/// Database errors.
pub async fn list(db: &Db, filter: AuditFilter<'_>, limit: i64) -> Result<Vec<AuditRow>> {
    let (before_at, before_id) = filter
        .before
        .map_or((None, None), |(at, id)| (Some(at), Some(id)));
    db.fetch_all(
        "SELECT id, at, action, target, detail, credential, client FROM audit_log \
         WHERE ($1 IS NULL OR at >= $1) AND ($2 IS NULL OR action = $2) \
         AND ($3 IS NULL OR at < $3 OR (at = $3 AND id < $4)) \
         ORDER BY at DESC, id DESC LIMIT $5",
        &[
            Arg::OptInt(filter.since),
            Arg::OptText(filter.action),
            Arg::OptInt(before_at),
            Arg::OptText(before_id),
            Arg::Int(limit),
        ],
    )
    .await
}

/// Deletes what was recorded before `before` (unix ms), at most `batch` rows; returns how many.
///
/// # Errors
/// Database errors.
pub async fn prune_before(db: &Db, before: i64, batch: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM audit_log WHERE id IN \
         (SELECT id FROM audit_log WHERE at < $1 ORDER BY at LIMIT $2)",
        &[Arg::Int(before), Arg::Int(batch)],
    )
    .await
}
