//! The operator API's side of the audit trail ([`crate::store::audit`]): who acted, read from
//! a request the API token let in; the record of a message handed in, written in the
//! message's own transaction; and `GET /api/v1/audit`, the records newest first, filtered by
//! `since` and `action`, in pages.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::ApiState;
use super::read::{answer, cursor, page_limit, page_of, parse_cursor};
use super::wire::{AuditEntry, AuditPage};
use crate::error::{Error, Result};
use crate::message::{NormalizedMessage, Timestamp};
use crate::pipeline::IngestWrite;
use crate::store::audit::{self, Actor, AuditFilter, AuditRow};
use crate::store::{Db, Tx};

/// Who acted on a request the API token let in: the token's non-secret id and the client
/// address (behind trusted proxies, the one they name).
pub(super) fn api_actor(token: &str, req: &HttpRequest) -> Actor {
    Actor::api_token(token, crate::http::client_addr(req))
}

/// The audit record of a message an operator hands in (the API's `POST /api/v1/messages`, the
/// console's send form), written in the transaction that stores the message: a message is
/// never stored without its record, nor recorded without being stored. A duplicate stores
/// nothing and records nothing.
pub(super) struct SendRecord {
    actor: Actor,
    message_id: String,
    detail: Value,
}

impl SendRecord {
    /// The record of handing in `msg` under `external_id`, by `actor`.
    pub(super) fn new(actor: Actor, external_id: &str, msg: &NormalizedMessage) -> Self {
        Self {
            actor,
            message_id: msg.id.clone(),
            detail: json!({
                "recipient": msg.recipient,
                "sender": msg.sender.address,
                "external_id": external_id,
            }),
        }
    }
}

#[async_trait::async_trait]
impl IngestWrite for SendRecord {
    async fn write(&mut self, tx: &mut Tx, now: i64) -> Result<bool> {
        let entry = audit::Entry {
            actor: &self.actor,
            action: audit::action::MESSAGE_SEND,
            target: &self.message_id,
            detail: self.detail.clone(),
        };
        audit::record(tx, &entry, now).await?;
        Ok(true)
    }
}

/// A stored record as the API and the console show it.
fn entry_view(row: AuditRow) -> AuditEntry {
    AuditEntry {
        detail: serde_json::from_str(&row.detail).unwrap_or(Value::String(row.detail)),
        at: Timestamp::from_unix_millis(row.at),
        id: row.id,
        action: row.action,
        target: row.target,
        credential: row.credential,
        client: row.client,
    }
}

/// `since`: an RFC 3339 time, as unix ms.
fn parse_since(since: &str) -> Result<i64> {
    Timestamp::parse(since)
        .map(|t| t.unix_millis())
        .map_err(|_| Error::Invalid("since: an RFC 3339 time such as 2026-12-01T00:00:00Z".into()))
}

/// What a page of records is asked for with (`GET /api/v1/audit`, the console's audit page);
/// empty values count as absent.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct AuditQuery {
    /// Only records at or after this RFC 3339 time.
    pub(super) since: Option<String>,
    /// Only this action.
    pub(super) action: Option<String>,
    /// The previous page's `next_cursor`.
    pub(super) cursor: Option<String>,
    /// Records per page.
    pub(super) limit: Option<i64>,
}

/// A query value, unless absent or blank.
fn given(v: Option<&String>) -> Option<&str> {
    v.map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// One page of records, newest first.
///
/// # Errors
/// [`Error::Invalid`] for a `since` that is not RFC 3339, a cursor not given out here, a limit
/// out of range; database errors.
pub(super) async fn page(db: &Db, q: &AuditQuery) -> Result<AuditPage> {
    let limit = page_limit(q.limit)?;
    let before = given(q.cursor.as_ref()).map(parse_cursor).transpose()?;
    let filter = AuditFilter {
        since: given(q.since.as_ref()).map(parse_since).transpose()?,
        action: given(q.action.as_ref()),
        before: before.as_ref().map(|(at, id)| (*at, id.as_str())),
    };
    let rows = audit::list(db, filter, limit + 1).await?;
    let (rows, next_cursor) = page_of(rows, limit, |r| cursor(r.at, &r.id));
    Ok(AuditPage {
        entries: rows.into_iter().map(entry_view).collect(),
        next_cursor,
    })
}

/// `GET /api/v1/audit?since=&action=&cursor=&limit=`: recorded operator actions, newest first.
pub(super) async fn list_audit(
    state: web::Data<ApiState>,
    req: HttpRequest,
    query: web::Query<AuditQuery>,
) -> HttpResponse {
    let q = query.into_inner();
    answer(&state, &req, move |db| async move { page(&db, &q).await }).await
}
