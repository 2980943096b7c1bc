//! Email: the Message-IDs switchboard has seen or sent (threading), and bounces that turn a
//! delivered reply into a failed one.
//!
//! A Message-ID switchboard received is known by its dedupe key in `inbound_seen` (see
//! [`inbound_key`]), which the pipeline stores with the message anyway; `email_message_ids`
//! gets the ones it sends (rows that earlier versions wrote for received mail are still read).
//! One index fewer per inbound message is one random-key B-tree page fewer to write.

use super::wire::RecipientStatus;
use crate::error::Result;
use crate::store::{self as sql, Arg, Db, Tx};

/// One known Message-ID.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct KnownMessageId {
    /// The Message-ID, without angle brackets.
    pub message_id: String,
    /// The wire thread key it belongs to.
    pub thread_key: String,
    /// Our NormalizedMessage (`in`) or NormalizedResponse (`out`) id.
    pub stored_id: String,
    /// `in` or `out`.
    pub direction: String,
}

/// The dedupe key (`inbound_seen.external_id`) of a message `agent` received under
/// `message_id`.
#[must_use]
pub fn inbound_key(agent: &str, message_id: &str) -> String {
    format!("{agent}/{message_id}")
}

/// Records a Message-ID of `agent`'s thread (a second record of the same id is ignored), in
/// `tx`.
///
/// # Errors
/// Database errors.
pub async fn remember(
    tx: &mut Tx,
    message_id: &str,
    agent: &str,
    thread_key: &str,
    stored_id: &str,
    direction: &str,
    now: i64,
) -> Result<()> {
    tx.execute(
        "INSERT INTO email_message_ids (message_id, agent, thread_key, stored_id, direction, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        &[
            Arg::Text(message_id),
            Arg::Text(agent),
            Arg::Text(thread_key),
            Arg::Text(stored_id),
            Arg::Text(direction),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// The known records among `ids` for `agent`, in no particular order: the Message-IDs it sent
/// and the ones it received (found by their dedupe key, with the thread of the stored message).
///
/// # Errors
/// Database errors.
pub async fn lookup(db: &Db, agent: &str, ids: &[&str]) -> Result<Vec<KnownMessageId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<String> = ids.iter().map(|id| inbound_key(agent, id)).collect();
    // `substr` drops the `agent/` prefix of the dedupe key (1-based, in characters, on both
    // engines).
    let sql = format!(
        "SELECT message_id, thread_key, stored_id, direction FROM email_message_ids \
         WHERE agent = $1 AND message_id IN ({}) \
         UNION ALL \
         SELECT substr(s.external_id, length($1) + 2) AS message_id, t.thread_key, \
                s.message_id AS stored_id, 'in' AS direction \
         FROM inbound_seen s JOIN messages m ON m.id = s.message_id \
              JOIN threads t ON t.id = m.thread_id \
         WHERE s.transport = 'email' AND s.external_id IN ({})",
        sql::in_list(ids.len(), 2),
        sql::in_list(ids.len(), 2 + ids.len()),
    );
    let mut args = vec![Arg::Text(agent)];
    args.extend(ids.iter().map(|s| Arg::Text(s)));
    args.extend(keys.iter().map(|k| Arg::Text(k)));
    db.fetch_all(&sql, &args).await
}

/// The Message-ID switchboard sent a response under, if it was sent.
///
/// # Errors
/// Database errors.
pub async fn sent_message_id(db: &Db, response_id: &str) -> Result<Option<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Row {
        message_id: String,
    }
    let row: Option<Row> = db
        .fetch_optional(
            "SELECT message_id FROM email_message_ids WHERE stored_id = $1 AND direction = 'out'",
            &[Arg::Text(response_id)],
        )
        .await?;
    Ok(row.map(|r| r.message_id))
}

/// Marks the delivery of `response_id` as failed after a bounce (a delivery status notification
/// to our VERP address), with what the report says of the recipient that failed
/// (`reporting_mta` stands in for a missing `Remote-MTA`). Returns whether a delivery record was
/// changed: not when there is none, nor when it failed already (a second bounce of one reply
/// changes nothing).
///
/// # Errors
/// Database errors.
pub async fn mark_bounced(
    db: &Db,
    response_id: &str,
    failed: &RecipientStatus,
    reporting_mta: &str,
    now: i64,
) -> Result<bool> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let remote = opt(&failed.remote_mta).or_else(|| opt(reporting_mta));
    let (status, diagnostic, recipient) = (
        opt(&failed.status),
        opt(&failed.diagnostic),
        opt(&failed.recipient),
    );
    let n = db
        .execute(
            "UPDATE deliveries SET outcome = 'failed', detail = $1, finished_at = $2, \
             status_code = $3, diagnostic = $4, remote_mta = $5, recipient = $6 \
             WHERE response_id = $7 AND transport = 'email' AND outcome <> 'failed'",
            &[
                Arg::Text(&format!("bounced: {}", failed.detail())),
                Arg::Int(now),
                Arg::OptText(status.as_deref()),
                Arg::OptText(diagnostic.as_deref()),
                Arg::OptText(remote.as_deref()),
                Arg::OptText(recipient.as_deref()),
                Arg::Text(response_id),
            ],
        )
        .await?;
    Ok(n > 0)
}

/// The outcome and detail of the delivery of `response_id`, if finished.
///
/// # Errors
/// Database errors.
pub async fn delivery_outcome(
    db: &Db,
    response_id: &str,
) -> Result<Option<(String, Option<String>)>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Row {
        outcome: String,
        detail: Option<String>,
    }
    let row: Option<Row> = db
        .fetch_optional(
            "SELECT outcome, detail FROM deliveries WHERE response_id = $1",
            &[Arg::Text(response_id)],
        )
        .await?;
    Ok(row.map(|r| (r.outcome, r.detail)))
}

/// What [`unsubscribe_token`] finds.
#[derive(sqlx::FromRow, serde::Deserialize)]
struct TokenRow {
    token: String,
    unsubscribed_at: Option<i64>,
}

/// The token of the List-Unsubscribe URL on `agent`'s unasked mail to `address`, made the first
/// time it writes there, and whether the address has unsubscribed from it (then nothing more
/// is sent).
///
/// # Errors
/// Database errors.
pub async fn unsubscribe_token(
    db: &Db,
    agent: &str,
    address: &str,
    now: i64,
) -> Result<(String, bool)> {
    let fresh = hex::encode(rand::random::<[u8; 16]>());
    let rows: Vec<TokenRow> = db
        .write_fetch_all(
            "INSERT INTO email_unsubscribes (agent, address, token, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent, address) DO UPDATE SET agent = excluded.agent \
             RETURNING token, unsubscribed_at",
            &[
                Arg::Text(agent),
                Arg::Text(address),
                Arg::Text(&fresh),
                Arg::Int(now),
            ],
        )
        .await?;
    Ok(rows
        .into_iter()
        .next()
        .map_or((fresh, false), |r| (r.token, r.unsubscribed_at.is_some())))
}

/// Who unsubscribed.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Deserialize)]
pub struct Unsubscribed {
    /// The agent (local name, lowercase).
    pub agent: String,
    /// The address that will get no more unasked mail from it.
    pub address: String,
}

/// Records the one-click unsubscribe of `token` (once: a repeated one keeps the first time);
/// `None` when no mail carried that token.
///
/// # Errors
/// Database errors.
pub async fn unsubscribe(db: &Db, token: &str, now: i64) -> Result<Option<Unsubscribed>> {
    let rows: Vec<Unsubscribed> = db
        .write_fetch_all(
            "UPDATE email_unsubscribes SET unsubscribed_at = COALESCE(unsubscribed_at, $1) \
             WHERE token = $2 RETURNING agent, address",
            &[Arg::Int(now), Arg::Text(token)],
        )
        .await?;
    Ok(rows.into_iter().next())
}
