//! Erasing stored messages: a message its author deleted keeps its row, reduced to what dedupe
//! and threading need ([`tombstone`], [`erase`]); retention deletes the rows stored before a
//! cutoff ([`drop_before`]). Either way the blobs only they referred to go with them
//! ([`super::blobs::release`]), and every instance is told to forget what it holds of them
//! ([`notify`]).

use serde_json::{Map, Value};

use super::{Arg, Db, Tx, in_list};
use crate::error::Result;

/// The `LISTEN` channel erased messages are announced on (PostgreSQL), as `seq:id` pairs
/// separated by commas.
pub const NOTIFY_CHANNEL: &str = "switchboard_erased";

/// A message or response erased (or deleted).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Deserialize)]
pub struct ErasedRow {
    /// Its `seq`.
    pub seq: i64,
    /// Its id.
    pub id: String,
    /// Its thread.
    pub thread_id: String,
}

/// The body of an erased message or response: what dedupe and threading need and nothing the
/// sender wrote. A message keeps its ids (`id`, `thread_id`, `in_reply_to`), its addressing
/// (`recipient`, `recipient_capabilities`, `received_via`, `received_at`) and who sent it
/// (`sender.address`, `auth_method`, `verified`, `automated`); a response its ids, agent and
/// state. Parts are empty; the raw wire form, the reply context, history, profile, identity
/// evidence and unknown fields are gone. A body that does not parse becomes `{}` with its id.
#[must_use]
pub fn tombstone(direction: &str, id: &str, body: &str) -> String {
    let old: Map<String, Value> = serde_json::from_str(body).unwrap_or_default();
    let keep: &[&str] = if direction == "in" {
        &[
            "id",
            "thread_id",
            "in_reply_to",
            "recipient",
            "recipient_capabilities",
            "received_via",
            "received_at",
        ]
    } else {
        &["id", "in_reply_to", "thread_id", "agent", "state"]
    };
    let mut new: Map<String, Value> = keep
        .iter()
        .filter_map(|k| old.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    new.entry("id").or_insert_with(|| Value::from(id));
    if direction == "in"
        && let Some(Value::Object(sender)) = old.get("sender")
    {
        let sender: Map<String, Value> = ["address", "auth_method", "verified", "automated"]
            .iter()
            .filter_map(|k| sender.get(*k).map(|v| ((*k).to_owned(), v.clone())))
            .collect();
        new.insert("sender".into(), Value::Object(sender));
    }
    new.insert("parts".into(), Value::Array(Vec::new()));
    Value::Object(new).to_string()
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct LiveRow {
    seq: i64,
    id: String,
    thread_id: String,
    direction: String,
    body: String,
}

/// Erases the messages (or responses) `ids` that are not erased yet: each body becomes its
/// [`tombstone`], `deleted_at` is set to `now`, and the blobs only they referred to are
/// erased. Returns the rows erased (an id unknown or erased before is left out).
///
/// # Errors
/// Database errors.
pub async fn erase(tx: &mut Tx, ids: &[&str], now: i64) -> Result<Vec<ErasedRow>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let args: Vec<Arg<'_>> = ids.iter().map(|id| Arg::Text(id)).collect();
    let live: Vec<LiveRow> = tx
        .fetch_all(
            &format!(
                "SELECT seq, id, thread_id, direction, body FROM messages \
                 WHERE id IN ({}) AND deleted_at IS NULL",
                in_list(ids.len(), 1)
            ),
            &args,
        )
        .await?;
    let mut erased = Vec::with_capacity(live.len());
    for row in live {
        let body = tombstone(&row.direction, &row.id, &row.body);
        let n = tx
            .execute(
                "UPDATE messages SET body = $1, deleted_at = $2 WHERE seq = $3 AND deleted_at IS NULL",
                &[Arg::Text(&body), Arg::Int(now), Arg::Int(row.seq)],
            )
            .await?;
        if n > 0 {
            erased.push(ErasedRow {
                seq: row.seq,
                id: row.id,
                thread_id: row.thread_id,
            });
        }
    }
    let gone: Vec<&str> = erased.iter().map(|r| r.id.as_str()).collect();
    super::blobs::release(tx, &gone).await?;
    Ok(erased)
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct AgedRow {
    seq: i64,
    created_at: i64,
}

/// Retention: deletes the messages and responses stored before `before` (unix ms) among the
/// `limit` oldest rows (erased ones included), with the blobs only they referred to; returns
/// the rows deleted. Rows are taken in `seq` order, which is the order they were stored in,
/// so each call reads no more than `limit` rows whatever the table holds.
///
/// # Errors
/// Database errors.
pub async fn drop_before(tx: &mut Tx, before: i64, limit: i64) -> Result<Vec<ErasedRow>> {
    let oldest: Vec<AgedRow> = tx
        .fetch_all(
            "SELECT seq, created_at FROM messages ORDER BY seq LIMIT $1",
            &[Arg::Int(limit)],
        )
        .await?;
    let aged: Vec<&AgedRow> = oldest.iter().filter(|r| r.created_at < before).collect();
    if aged.is_empty() {
        return Ok(Vec::new());
    }
    let args: Vec<Arg<'_>> = aged.iter().map(|r| Arg::Int(r.seq)).collect();
    let deleted: Vec<ErasedRow> = tx
        .fetch_all(
            &format!(
                "DELETE FROM messages WHERE seq IN ({}) RETURNING seq, id, thread_id",
                in_list(aged.len(), 1)
            ),
            &args,
        )
        .await?;
    let gone: Vec<&str> = deleted.iter().map(|r| r.id.as_str()).collect();
    super::blobs::release(tx, &gone).await?;
    Ok(deleted)
}

/// The longest payload one notification carries (PostgreSQL's limit is 8000 bytes).
const NOTIFY_BYTES: usize = 7_000;

/// Tells every instance, once `tx` commits, that `rows` were erased (PostgreSQL `NOTIFY` on
/// [`NOTIFY_CHANNEL`], in as many notifications as their payloads need; SQLite has one
/// instance, which forgets them itself).
///
/// # Errors
/// Database errors.
pub async fn notify(tx: &mut Tx, rows: &[ErasedRow]) -> Result<()> {
    if !matches!(tx, Tx::Postgres(_)) || rows.is_empty() {
        return Ok(());
    }
    for p in &payloads(rows) {
        tx.execute(
            "SELECT pg_notify('switchboard_erased', $1)",
            &[Arg::Text(p)],
        )
        .await?;
    }
    Ok(())
}

/// The payloads announcing `rows`: `seq:id` pairs separated by commas, each payload under
/// [`NOTIFY_BYTES`].
fn payloads(rows: &[ErasedRow]) -> Vec<String> {
    let mut payloads = vec![String::new()];
    for r in rows {
        let pair = format!("{}:{}", r.seq, r.id);
        let last = payloads
            .last_mut()
            .filter(|p| p.len() + pair.len() < NOTIFY_BYTES);
        match last {
            Some(p) if !p.is_empty() => {
                p.push(',');
                p.push_str(&pair);
            }
            Some(p) => p.push_str(&pair),
            None => payloads.push(pair),
        }
    }
    payloads
}

/// The `(seq, id)` pairs of a [`notify`] payload (malformed pairs are skipped).
#[must_use]
pub fn parse_notification(payload: &str) -> Vec<(i64, &str)> {
    payload
        .split(',')
        .filter_map(|pair| {
            let (seq, id) = pair.split_once(':')?;
            Some((seq.parse().ok()?, id))
        })
        .collect()
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct IdBody {
    id: String,
    body: String,
}

/// The inbound messages of `thread_id`, not erased, whose stored body contains `needle`:
/// `(id, body)`, oldest first. For finding the stored copies of one wire message (one per
/// agent it woke), which its transport then tells apart by their raw form.
///
/// # Errors
/// Database errors.
pub async fn inbound_containing(
    db: &Db,
    thread_id: &str,
    needle: &str,
) -> Result<Vec<(String, String)>> {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    let rows: Vec<IdBody> = db
        .fetch_all(
            "SELECT id, body FROM messages WHERE thread_id = $1 AND direction = 'in' \
             AND deleted_at IS NULL AND body LIKE $2 ESCAPE '\\' ORDER BY seq",
            &[Arg::Text(thread_id), Arg::Text(&pattern)],
        )
        .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.body)).collect())
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct ClaimedRow {
    message_id: String,
}

/// The messages that claimed these dedupe keys of `transport` (those claimed by none are left
/// out).
///
/// # Errors
/// Database errors.
pub async fn claimed_by(db: &Db, transport: &str, external_ids: &[&str]) -> Result<Vec<String>> {
    if external_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec![Arg::Text(transport)];
    args.extend(external_ids.iter().map(|id| Arg::Text(id)));
    let rows: Vec<ClaimedRow> = db
        .fetch_all(
            &format!(
                "SELECT message_id FROM inbound_seen WHERE transport = $1 AND external_id IN ({})",
                in_list(external_ids.len(), 2)
            ),
            &args,
        )
        .await?;
    Ok(rows.into_iter().map(|r| r.message_id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tombstone_has_no_reply_context() {
        let body = serde_json::json!({
            "id": "m1", "thread_id": "t1",
            "sender": {"address": "bob@b.example", "auth_method": "none", "verified": false},
            "recipient": "@echo@sb.example",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
            "recipient_capabilities": {"mention_relay": {"kind": "none"}, "formats": [], "attachments": false, "streaming": false},
            "received_via": "email", "received_at": "2026-01-02T03:04:05.678Z",
            crate::message::STORED_REPLY_CONTEXT: {"subject": "secret"},
        })
        .to_string();
        let t = tombstone("in", "m1", &body);
        assert!(!t.contains("secret"), "{t}");
        let m = crate::message::NormalizedMessage::from_stored_json(&t).unwrap();
        assert!(!m.reply_context.is_some());
    }

    #[test]
    fn a_tombstone_keeps_ids_and_addressing_only() {
        let body = serde_json::json!({
            "id": "m1", "thread_id": "t1", "in_reply_to": "r0",
            "sender": {"address": "@a@x.example", "display_name": "Alice", "auth_method": "ap-http-signature",
                       "verified": true, "identities": [{"subject": "s"}], "profile": {"display_name": "Alice"}},
            "recipient": "@echo@sb.example",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "secret"}],
            "history": [{"role": "user"}],
            "recipient_capabilities": {"mention_relay": {"kind": "none"}, "formats": [], "attachments": false, "streaming": false},
            "received_via": "activitypub", "received_at": "2026-01-02T03:04:05.678Z",
            "raw": {"content": "secret"}, "unknown": "secret"
        })
        .to_string();
        let t: Value = serde_json::from_str(&tombstone("in", "m1", &body)).unwrap();
        assert!(!t.to_string().contains("secret"), "{t}");
        assert!(!t.to_string().contains("Alice"), "{t}");
        assert_eq!(t["parts"], serde_json::json!([]));
        assert_eq!(t["in_reply_to"], "r0");
        assert_eq!(t["sender"]["address"], "@a@x.example");
        assert!(t.get("raw").is_none());
        // Still a NormalizedMessage.
        let m: crate::message::NormalizedMessage = serde_json::from_value(t).unwrap();
        assert!(m.parts.is_empty() && m.raw.is_null());

        let r = serde_json::json!({"id": "r1", "in_reply_to": "m1", "thread_id": "t1", "agent": "@echo@sb.example",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "secret"}], "metadata": {"k": "secret"}})
        .to_string();
        let t = tombstone("out", "r1", &r);
        assert!(!t.contains("secret"), "{t}");
        let r: crate::message::NormalizedResponse = serde_json::from_str(&t).unwrap();
        assert!(r.parts.is_empty());
        assert_eq!(
            serde_json::from_str::<Value>(&tombstone("in", "m2", "not json")).unwrap(),
            serde_json::json!({"id": "m2", "parts": []})
        );
    }

    #[test]
    fn notifications_round_trip_in_chunks() {
        let rows: Vec<ErasedRow> = (0..400)
            .map(|i| ErasedRow {
                seq: i,
                id: format!("0190f0e4-0000-7000-8000-{i:012}"),
                thread_id: "t".into(),
            })
            .collect();
        let payloads = payloads(&rows);
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() < 8_000));
        let back: Vec<(i64, &str)> = payloads
            .iter()
            .flat_map(|p| parse_notification(p))
            .collect();
        assert_eq!(back.len(), rows.len());
        assert_eq!(back[399], (399, rows[399].id.as_str()));
        assert!(parse_notification("x:y,3").is_empty());
    }
}
