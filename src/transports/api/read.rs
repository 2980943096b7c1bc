//! The operator API's reads: agents, threads newest first, one thread, one message with its
//! status, a message's response (or why there will be none), and reports of abuse.

use std::collections::HashMap;

use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use super::status::{Facts, derive};
use super::wire::{
    AgentList, DeliveryFailure, Direction, MessageView, ReportList, ReportView, Status, StatusView,
    ThreadDetail, ThreadEntry, ThreadPage, ThreadSummary,
};
use super::{ApiState, authorize};
use crate::error::{Error, Result};
use crate::http::error_response;
use crate::message::Timestamp;
use crate::store::threads::{self, MessageEntry, ThreadFilter, ThreadRow};
use crate::store::{Db, jobs, messages};

/// Threads per page unless `limit` says otherwise, and the most `limit` may ask for.
const PAGE: i64 = 50;
const MAX_PAGE: i64 = 200;
/// Entries of one thread answered at most.
const MAX_ENTRIES: i64 = 1_000;

/// Runs `f` on the main runtime after checking the token, answering its value as JSON.
pub(super) async fn answer<T, F, Fut>(state: &ApiState, req: &HttpRequest, f: F) -> HttpResponse
where
    T: serde::Serialize + Send + 'static,
    F: FnOnce(Db) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
{
    if let Err(e) = authorize(state, req) {
        return error_response(&e);
    }
    match state.pipeline.run(move |p| f(p.db().clone())).await {
        Ok(v) => HttpResponse::Ok().json(v),
        Err(e) => error_response(&e),
    }
}

/// `GET /api/v1/agents`.
pub(super) async fn list_agents(state: web::Data<ApiState>, req: HttpRequest) -> HttpResponse {
    let agents = AgentList {
        agents: state.agents.as_ref().clone(),
    };
    answer(&state, &req, move |_| async move { Ok(agents) }).await
}

/// The query of `GET /api/v1/threads`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ThreadQuery {
    agent: Option<String>,
    transport: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

/// The opaque cursor after `t`: its creation time and id.
fn cursor_after(t: &ThreadRow) -> String {
    cursor(t.created_at, &t.id)
}

/// The opaque cursor after the row of time `at` and id `id` ([`parse_cursor`] reads it).
pub(super) fn cursor(at: i64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{at}.{id}"))
}

pub(super) fn parse_cursor(cursor: &str) -> Result<(i64, String)> {
    let bad = || Error::Invalid("cursor: not one this API returned".into());
    let raw = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    let text = String::from_utf8(raw).map_err(|_| bad())?;
    let (at, id) = text.split_once('.').ok_or_else(bad)?;
    Ok((at.parse().map_err(|_| bad())?, id.to_owned()))
}

/// One page of `rows` read `limit + 1` at most: the first `limit`, and the cursor after the
/// last of them when more follow.
pub(super) fn page_of<T>(
    mut rows: Vec<T>,
    limit: i64,
    after: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    let n = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = rows.len() > n;
    rows.truncate(n);
    let next = more.then(|| rows.last().map(after)).flatten();
    (rows, next)
}

/// A page's `limit`: [`PAGE`] when absent, else 1 to [`MAX_PAGE`].
pub(super) fn page_limit(limit: Option<i64>) -> Result<i64> {
    let limit = limit.unwrap_or(PAGE);
    if (1..=MAX_PAGE).contains(&limit) {
        Ok(limit)
    } else {
        Err(Error::Invalid(format!("limit: between 1 and {MAX_PAGE}")))
    }
}

/// `GET /api/v1/threads?agent=&transport=&cursor=&limit=`.
pub(super) async fn list_threads(
    state: web::Data<ApiState>,
    req: HttpRequest,
    query: web::Query<ThreadQuery>,
) -> HttpResponse {
    let q = query.into_inner();
    answer(&state, &req, move |db| async move {
        let limit = page_limit(q.limit)?;
        let before = q.cursor.as_deref().map(parse_cursor).transpose()?;
        let filter = ThreadFilter {
            agent: q.agent.as_deref(),
            transport: q.transport.as_deref(),
            before: before.as_ref().map(|(at, id)| (*at, id.as_str())),
        };
        let rows = threads::list(&db, filter, limit + 1).await?;
        let (rows, next_cursor) = page_of(rows, limit, cursor_after);
        Ok(ThreadPage {
            threads: summaries(&db, &rows).await?,
            next_cursor,
        })
    })
    .await
}

/// The listing of each thread: its agents and activity.
pub(super) async fn summaries(db: &Db, rows: &[ThreadRow]) -> Result<Vec<ThreadSummary>> {
    let ids: Vec<&str> = rows.iter().map(|t| t.id.as_str()).collect();
    let activity: HashMap<String, threads::ThreadActivity> = threads::activity(db, &ids)
        .await?
        .into_iter()
        .map(|a| (a.thread_id.clone(), a))
        .collect();
    let mut agents: HashMap<String, Vec<String>> = HashMap::new();
    for a in threads::agents(db, &ids).await? {
        agents.entry(a.thread_id).or_default().push(a.agent);
    }
    Ok(rows
        .iter()
        .map(|t| {
            let act = activity.get(&t.id);
            ThreadSummary {
                id: t.id.clone(),
                transport: t.transport.clone(),
                agents: agents.remove(&t.id).unwrap_or_default(),
                created_at: Timestamp::from_unix_millis(t.created_at),
                last_activity: Timestamp::from_unix_millis(
                    act.map_or(t.created_at, |a| a.last_activity),
                ),
                message_count: act.map_or(0, |a| a.messages),
            }
        })
        .collect())
}

/// What is known of a message's way through the pipeline.
pub(super) struct Progress {
    /// Where it is.
    pub(super) status: StatusView,
    dispatch_attempts: Option<i64>,
    response_id: Option<String>,
    delivery_attempts: Option<i64>,
    /// What the remote side said of its failed delivery.
    pub(super) delivery_failure: Option<DeliveryFailure>,
}

/// Looks up jobs by id.
async fn jobs_by_id(
    db: &Db,
    ids: impl Iterator<Item = String>,
) -> Result<HashMap<String, jobs::JobInfo>> {
    let ids: Vec<String> = ids.collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    Ok(jobs::get_many(db, &refs)
        .await?
        .into_iter()
        .map(|j| (j.id.clone(), j))
        .collect())
}

/// The progress of each of these inbound messages, by id.
///
/// The reads are separate statements, so they run in the order the pipeline moves: a job before
/// what its finishing transaction writes (the dispatch job before the response and the outcome
/// on the message, the delivery job before the delivery record). A job read as finished then
/// always comes with its effects, and a status never runs ahead of the facts.
pub(super) async fn progress(db: &Db, msgs: &[&MessageEntry]) -> Result<HashMap<String, Progress>> {
    let ids: Vec<&str> = msgs.iter().map(|m| m.id.as_str()).collect();
    let dispatch = jobs_by_id(db, ids.iter().map(|id| format!("dispatch:{id}"))).await?;
    let outcomes: HashMap<String, threads::Outcome> = threads::outcomes(db, &ids)
        .await?
        .into_iter()
        .map(|o| (o.id.clone(), o))
        .collect();
    let responses: HashMap<String, String> = threads::responses_to(db, &ids)
        .await?
        .into_iter()
        .filter_map(|r| Some((r.answers?, r.id)))
        .collect();
    let response_ids: Vec<&str> = responses.values().map(String::as_str).collect();
    let deliver = jobs_by_id(db, response_ids.iter().map(|id| format!("deliver:{id}"))).await?;
    let deliveries: HashMap<String, threads::DeliveryRow> = threads::deliveries(db, &response_ids)
        .await?
        .into_iter()
        .map(|d| (d.response_id.clone(), d))
        .collect();
    Ok(msgs
        .iter()
        .map(|m| {
            let response = responses.get(&m.id);
            let dispatch = dispatch.get(&format!("dispatch:{}", m.id));
            let deliver = response.and_then(|r| deliver.get(&format!("deliver:{r}")));
            let delivery = response.and_then(|r| deliveries.get(r));
            let outcome = outcomes.get(&m.id);
            let status = derive(&Facts {
                outcome: outcome.and_then(|o| o.outcome.as_deref()),
                error_class: outcome.and_then(|o| o.error_class.as_deref()),
                dispatch,
                answered: response.is_some(),
                deliver,
                delivery,
                deleted: m.deleted_at.is_some(),
            });
            let p = Progress {
                status,
                dispatch_attempts: dispatch.map(|j| j.attempts),
                response_id: response.cloned(),
                delivery_attempts: delivery
                    .map(|d| d.attempts)
                    .or_else(|| deliver.map(|j| j.attempts)),
                delivery_failure: delivery.and_then(failure_of),
            };
            (m.id.clone(), p)
        })
        .collect())
}

/// What a failed delivery's record says the remote side said, if anything.
fn failure_of(d: &threads::DeliveryRow) -> Option<DeliveryFailure> {
    let f = DeliveryFailure {
        status_code: d.status_code.clone(),
        diagnostic: d.diagnostic.clone(),
        remote_mta: d.remote_mta.clone(),
        recipient: d.recipient.clone(),
    };
    (d.outcome != "delivered" && f != DeliveryFailure::default()).then_some(f)
}

/// A stored message or response as the API shows it: a message without its reply context,
/// which is its transport's alone.
fn body(m: &MessageEntry) -> Result<Value> {
    let mut v = serde_json::from_str(&m.body).map_err(Error::corrupt)?;
    crate::message::NormalizedMessage::strip_stored(&mut v);
    Ok(v)
}

/// `GET /api/v1/threads/{id}`.
pub(super) async fn get_thread(
    state: web::Data<ApiState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let id = path.into_inner();
    answer(&state, &req, move |db| async move {
        let thread = threads::get(&db, &id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no thread {id}")))?;
        let rows = threads::entries(&db, &id, MAX_ENTRIES).await?;
        let inbound: Vec<&MessageEntry> = rows.iter().filter(|m| m.direction == "in").collect();
        let mut progress = progress(&db, &inbound).await?;
        let mut entries = Vec::with_capacity(rows.len());
        for m in &rows {
            let inbound = m.direction == "in";
            entries.push(ThreadEntry {
                id: m.id.clone(),
                direction: if inbound {
                    Direction::In
                } else {
                    Direction::Out
                },
                agent: m.agent.clone(),
                created_at: Timestamp::from_unix_millis(m.created_at),
                status: progress.remove(&m.id).map(|p| p.status),
                in_reply_to: m.answers.clone(),
                deleted: m.deleted_at.is_some(),
                deleted_at: m.deleted_at.map(Timestamp::from_unix_millis),
                message: inbound.then(|| body(m)).transpose()?,
                response: (!inbound).then(|| body(m)).transpose()?,
            });
        }
        let thread = summaries(&db, std::slice::from_ref(&thread))
            .await?
            .pop()
            .ok_or_else(|| Error::NotFound(format!("no thread {id}")))?;
        Ok(ThreadDetail { thread, entries })
    })
    .await
}

/// The inbound message `id` with its progress.
async fn message_view(db: &Db, id: &str) -> Result<MessageView> {
    let m = threads::entry(db, id)
        .await?
        .filter(|m| m.direction == "in")
        .ok_or_else(|| Error::NotFound(format!("no message {id}")))?;
    let p = progress(db, &[&m])
        .await?
        .remove(&m.id)
        .ok_or_else(|| Error::NotFound(format!("no message {id}")))?;
    Ok(MessageView {
        message: body(&m)?,
        id: m.id,
        thread_id: m.thread_id,
        agent: m.agent,
        transport: m.transport,
        created_at: Timestamp::from_unix_millis(m.created_at),
        status: p.status,
        dispatch_attempts: p.dispatch_attempts,
        response_id: p.response_id,
        delivery_attempts: p.delivery_attempts,
        delivery_failure: p.delivery_failure,
        deleted: m.deleted_at.is_some(),
        deleted_at: m.deleted_at.map(Timestamp::from_unix_millis),
    })
}

/// `GET /api/v1/messages/{id}`.
pub(super) async fn get_message(
    state: web::Data<ApiState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let id = path.into_inner();
    answer(
        &state,
        &req,
        |db| async move { message_view(&db, &id).await },
    )
    .await
}

/// The query of `GET /api/v1/reports`.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ReportQuery {
    agent: Option<String>,
    limit: Option<i64>,
}

/// A stored report as the API shows it.
pub(super) fn report_view(r: crate::store::reports::ReportRow) -> ReportView {
    ReportView {
        objects: serde_json::from_str(&r.objects).unwrap_or_default(),
        id: r.id,
        activity_id: r.activity_id,
        transport: r.transport,
        reporter: r.reporter,
        host: r.host,
        agent: r.agent,
        content: r.content,
        received_at: Timestamp::from_unix_millis(r.received_at),
    }
}

/// `GET /api/v1/reports?agent=&limit=`: reports of abuse, newest first.
pub(super) async fn list_reports(
    state: web::Data<ApiState>,
    req: HttpRequest,
    query: web::Query<ReportQuery>,
) -> HttpResponse {
    let q = query.into_inner();
    answer(&state, &req, move |db| async move {
        let limit = page_limit(q.limit)?;
        let rows = crate::store::reports::list(&db, q.agent.as_deref(), limit).await?;
        Ok(ReportList {
            reports: rows.into_iter().map(report_view).collect(),
        })
    })
    .await
}

/// What `GET …/response` found.
enum Found {
    /// The stored response.
    Response(String),
    /// No response, and there never will be one.
    Never(StatusView),
    /// No response yet.
    NotYet,
}

/// `GET /api/v1/messages/{id}/response`: 200 with the response; 409 with the status when the
/// message ended without one (`no_reply`, `failed`, `deleted`, …); 404 for an unknown message
/// and, as before, while the response is still to come.
pub(super) async fn get_response(
    state: web::Data<ApiState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    if let Err(e) = authorize(&state, &req) {
        return error_response(&e);
    }
    let id = path.into_inner();
    let found = state
        .pipeline
        .run(move |p| async move {
            let db = p.db();
            if let Some(row) = messages::response_to(db, &id).await? {
                return Ok(Found::Response(row.body));
            }
            let view = message_view(db, &id).await?;
            if matches!(
                view.status.status,
                Status::NoReply
                    | Status::Failed
                    | Status::Merged
                    | Status::Interrupted
                    | Status::Held
                    | Status::Deleted
            ) {
                return Ok(Found::Never(view.status));
            }
            // The response may have been stored since the first look.
            Ok(match view.response_id {
                Some(_) => messages::response_to(db, &id)
                    .await?
                    .map_or(Found::NotYet, |row| Found::Response(row.body)),
                None => Found::NotYet,
            })
        })
        .await;
    match found {
        Ok(Found::Response(body)) => HttpResponse::Ok()
            .content_type("application/json")
            .body(body),
        Ok(Found::Never(status)) => HttpResponse::Conflict().json(status),
        Ok(Found::NotYet) => error_response(&Error::NotFound("no response yet".into())),
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_what_was_not_issued() {
        let t = ThreadRow {
            id: "0190-abc".into(),
            transport: "api".into(),
            thread_key: "k".into(),
            created_at: 1_700_000_000_123,
        };
        let c = cursor_after(&t);
        assert_eq!(
            parse_cursor(&c).unwrap(),
            (1_700_000_000_123, "0190-abc".into())
        );
        for bad in [
            "",
            "!!",
            &URL_SAFE_NO_PAD.encode("x.y"),
            &URL_SAFE_NO_PAD.encode("12"),
        ] {
            assert!(
                matches!(parse_cursor(bad), Err(Error::Invalid(_))),
                "{bad:?} is refused"
            );
        }
    }
}
