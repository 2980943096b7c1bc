//! The JSON-RPC server: envelope and version checks, method dispatch, the A2A operations over
//! the durable task store, SSE streams, and the agent card routes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt as _;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::NAME;
use super::auth::{Caller, Verifier};
use super::card::RenderedCard;
use super::mapping::{self, InPart, Limits};
use super::tasks::{Change, Created, NewTask, TaskEngine, ends_stream, internal};
use super::wire::{
    self, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RpcError, TASK_NOT_CANCELABLE, TaskState,
    UNSUPPORTED_OPERATION, VERSION_NOT_SUPPORTED, Version, WireMessage,
};
use crate::config::{A2aAuthConfig, A2aConfig};
use crate::error::Error;
use crate::message::{
    BytesRef, Extra, FilePart, MentionRelay, NoRelay, NormalizedMessage, Part, ReceivedVia,
    RecipientCapabilities,
};
use crate::pipeline::Pipeline;
use crate::store::a2a::{self as sql, TaskFilter, TaskRow};

/// State of the A2A routes.
#[derive(Debug)]
pub struct A2aState {
    /// Where messages go.
    pub pipeline: Pipeline,
    /// The task store.
    pub engine: TaskEngine,
    /// Settings.
    pub cfg: A2aConfig,
    /// The agent the hub answers for by default.
    pub default_agent: String,
    /// Largest request body.
    pub max_body: usize,
    /// The hub card.
    pub hub_card: RenderedCard,
    /// Per-agent cards, by lower-case name.
    pub cards: HashMap<String, RenderedCard>,
    /// `Last-Modified` of the cards (the start of this process).
    pub cards_modified: String,
    /// Checks bearer tokens.
    pub verifier: Verifier,
    /// Who may call each agent, by lower-case name (public when absent).
    pub policies: HashMap<String, A2aAuthConfig>,
}

impl A2aState {
    fn policy(&self, agent: &str) -> &A2aAuthConfig {
        static PUBLIC: A2aAuthConfig = A2aAuthConfig::Public;
        self.policies.get(&agent.to_lowercase()).unwrap_or(&PUBLIC)
    }

    /// Refuses a caller the agent's policy does not admit.
    fn admit(&self, caller: &Caller, agent: &str) -> Result<(), RpcError> {
        if caller.admitted_by(self.policy(agent)) {
            Ok(())
        } else {
            Err(RpcError::new(
                wire::UNAUTHENTICATED,
                format!("{agent} requires a bearer token from a trusted issuer"),
            ))
        }
    }

    /// The caller behind `authorization`: anonymous without one, else a verified principal.
    async fn authenticate(
        &self,
        authorization: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Caller, RpcError> {
        let Some(value) = authorization else {
            return Ok(Caller::anonymous());
        };
        let policies: Vec<&A2aAuthConfig> = match agent {
            Some(a) => vec![self.policy(a)],
            None => self.policies.values().collect(),
        };
        if policies.iter().all(|p| matches!(p, A2aAuthConfig::Public)) {
            // Nobody here checks tokens: a credential meant for something else is ignored.
            return Ok(Caller::anonymous());
        }
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| RpcError::new(wire::UNAUTHENTICATED, "use Authorization: Bearer"))?;
        self.verifier.verify(token, &policies).await.map_err(|e| {
            tracing::info!(reason = %e, "A2A bearer token refused");
            RpcError::new(wire::UNAUTHENTICATED, "invalid token")
        })
    }
}

/// Registers the A2A routes.
pub fn configure(cfg: &mut web::ServiceConfig, state: Arc<A2aState>) {
    cfg.app_data(web::Data::from(state))
        .route("/.well-known/agent-card.json", web::get().to(hub_card))
        .route("/.well-known/agent-card/{name}", web::get().to(agent_card))
        .route("/agents/{name}/agent-card.json", web::get().to(agent_card))
        .route("/.well-known/jwks.json", web::get().to(jwks))
        .route("/a2a", web::post().to(hub_rpc))
        .route("/a2a/", web::post().to(hub_rpc))
        .route("/agents/{name}/a2a", web::post().to(agent_rpc))
        .route("/agents/{name}/a2a/", web::post().to(agent_rpc));
}

fn card_response(state: &A2aState, req: &HttpRequest, card: &RenderedCard) -> HttpResponse {
    let cache = format!("public, max-age={}", state.cfg.card_max_age_seconds);
    let matches = req
        .headers()
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim() == card.etag || t.trim() == "*")
        });
    let mut resp = if matches {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    resp.insert_header(("Cache-Control", cache))
        .insert_header(("ETag", card.etag.clone()))
        .insert_header(("Last-Modified", state.cards_modified.clone()));
    if matches {
        resp.finish()
    } else {
        resp.content_type("application/json")
            .body(card.body.clone())
    }
}

async fn hub_card(state: web::Data<A2aState>, req: HttpRequest) -> HttpResponse {
    card_response(&state, &req, &state.hub_card)
}

async fn agent_card(
    state: web::Data<A2aState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    match state.cards.get(&path.into_inner().to_lowercase()) {
        Some(card) => card_response(&state, &req, card),
        None => HttpResponse::NotFound().json(json!({"error": "no such agent"})),
    }
}

async fn jwks(state: web::Data<A2aState>) -> HttpResponse {
    let keys = state.pipeline.keys().clone();
    match state
        .pipeline
        .on_main(async move { super::push::jwks(&keys).await })
        .await
    {
        Ok(doc) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "public, max-age=300"))
            .content_type("application/jwk-set+json")
            .body(doc.to_string()),
        Err(e) => crate::http::error_response(&e),
    }
}

async fn hub_rpc(state: web::Data<A2aState>, req: HttpRequest, body: web::Payload) -> HttpResponse {
    serve(state, req, body, None).await
}

async fn agent_rpc(
    state: web::Data<A2aState>,
    req: HttpRequest,
    body: web::Payload,
    path: web::Path<String>,
) -> HttpResponse {
    let name = path.into_inner();
    match state.pipeline.agents().get(&name) {
        Some(a) => serve(state, req, body, Some(a.name.clone())).await,
        None => HttpResponse::NotFound().json(json!({"error": "no such agent"})),
    }
}

/// One parsed call.
#[derive(Debug)]
struct Call {
    id: Value,
    method: &'static str,
    version: Version,
    params: Map<String, Value>,
    caller: Caller,
    /// The per-agent endpoint's agent; `None` at the hub.
    agent: Option<String>,
    idempotency_key: Option<String>,
    last_event_id: Option<i64>,
    authorization: Option<String>,
}

/// What a call produced.
enum Reply {
    Json(Value),
    Stream(mpsc::Receiver<Bytes>),
}

fn header(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_owned())
}

fn json_reply(v: &Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(v.to_string())
}

async fn read_body(mut payload: web::Payload, max: usize) -> Result<Vec<u8>, RpcError> {
    let mut body = Vec::new();
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|_| RpcError::new(INVALID_REQUEST, "the request body is unreadable"))?;
        if body.len() + chunk.len() > max {
            return Err(RpcError::invalid_field(
                "body",
                format!("the request body exceeds {max} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The version a request asks for: header, else query parameter; `""` when absent.
fn requested_version(req: &HttpRequest) -> String {
    if let Some(v) = header(req, "a2a-version") {
        return v;
    }
    url::form_urlencoded::parse(req.query_string().as_bytes())
        .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

async fn serve(
    state: web::Data<A2aState>,
    req: HttpRequest,
    payload: web::Payload,
    agent: Option<String>,
) -> HttpResponse {
    // JSON-RPC travels as JSON: a body declared as something else is refused outright.
    if let Some(ct) = header(&req, "content-type") {
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !(mime == "application/json" || mime.ends_with("+json") || mime.is_empty()) {
            return HttpResponse::UnsupportedMediaType()
                .content_type("text/plain")
                .body("JSON-RPC requests must be application/json");
        }
    }
    let body = match read_body(payload, state.max_body).await {
        Ok(b) => b,
        Err(e) => return json_reply(&wire::error_envelope(&Value::Null, &e, Version::V1)),
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => {
            let e = RpcError::new(PARSE_ERROR, "Parse error: the body is not JSON");
            return json_reply(&wire::error_envelope(&Value::Null, &e, Version::V1));
        }
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let id = if matches!(id, Value::String(_) | Value::Number(_) | Value::Null) {
        id
    } else {
        Value::Null
    };
    let bad_envelope = |why: &str| {
        let e = RpcError::new(INVALID_REQUEST, format!("Invalid request: {why}"));
        json_reply(&wire::error_envelope(&id, &e, Version::V1))
    };
    let Some(obj) = value.as_object() else {
        return bad_envelope("the body is not a JSON-RPC request object");
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return bad_envelope("jsonrpc must be \"2.0\"");
    }
    if !matches!(
        obj.get("id"),
        None | Some(Value::String(_) | Value::Number(_) | Value::Null)
    ) {
        return bad_envelope("id must be a string, a number or null");
    }
    let Some(method_name) = obj.get("method").and_then(Value::as_str) else {
        return bad_envelope("method must be a string");
    };
    let mut params = match obj.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return bad_envelope("params must be an object"),
    };
    camelize_params(&mut params);
    let Some((method, generation)) = wire::canonical_method(method_name) else {
        let e = RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method_name}"));
        return json_reply(&wire::error_envelope(&id, &e, Version::V1));
    };
    let version = requested_version(&req);
    let supported = match version.as_str() {
        "" => generation == Version::V03,
        "1.0" | "1" | "0.3" => true,
        _ => false,
    };
    if !supported {
        let shown = if version.is_empty() {
            "0.3"
        } else {
            version.as_str()
        };
        let e = RpcError::new(
            VERSION_NOT_SUPPORTED,
            format!(
                "A2A version '{shown}' is not supported for {method_name}; this server speaks 1.0 (A2A-Version: 1.0) and 0.3"
            ),
        );
        return json_reply(&wire::error_envelope(&id, &e, generation));
    }
    let call = Call {
        id: id.clone(),
        method,
        version: generation,
        params,
        caller: Caller::anonymous(),
        agent,
        authorization: header(&req, "authorization"),
        idempotency_key: header(&req, "idempotency-key").filter(|k| !k.is_empty()),
        last_event_id: header(&req, "last-event-id").and_then(|v| v.parse().ok()),
    };
    let st = state.clone().into_inner();
    let outcome = state
        .pipeline
        .on_main(async move { Ok(dispatch(st, call).await) })
        .await;
    match outcome {
        Ok(Ok(Reply::Json(result))) => json_reply(&wire::result_envelope(&id, result)),
        Ok(Ok(Reply::Stream(rx))) => {
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|b| (Ok::<_, actix_web::Error>(b), rx))
            });
            HttpResponse::build(StatusCode::OK)
                .content_type("text/event-stream")
                .insert_header(("Cache-Control", "no-cache"))
                .insert_header(("X-Accel-Buffering", "no"))
                .streaming(stream)
        }
        Ok(Err(e)) if e.code == wire::UNAUTHENTICATED => {
            let challenge = format!(
                "Bearer realm=\"switchboard\", error=\"invalid_token\", error_description=\"{}\"",
                e.message.replace('"', "'")
            );
            HttpResponse::Unauthorized()
                .insert_header(("WWW-Authenticate", challenge))
                .content_type("application/json")
                .body(
                    wire::error_envelope(
                        &id,
                        &RpcError::new(INVALID_REQUEST, "Unauthenticated"),
                        generation,
                    )
                    .to_string(),
                )
        }
        Ok(Err(e)) => json_reply(&wire::error_envelope(&id, &e, generation)),
        Err(e) => {
            let e = internal(&e);
            json_reply(&wire::error_envelope(&id, &e, generation))
        }
    }
}

async fn dispatch(state: Arc<A2aState>, mut call: Call) -> Result<Reply, RpcError> {
    call.caller = state
        .authenticate(call.authorization.as_deref(), call.agent.as_deref())
        .await?;
    if let Some(agent) = &call.agent {
        state.admit(&call.caller, agent)?;
    }
    match call.method {
        "SendMessage" => send(&state, call, false).await,
        "SendStreamingMessage" => send(&state, call, true).await,
        "GetTask" => get_task(&state, &call).await.map(Reply::Json),
        "ListTasks" => list_tasks(&state, &call).await.map(Reply::Json),
        "CancelTask" => cancel_task(&state, &call).await.map(Reply::Json),
        "SubscribeToTask" => subscribe(&state, &call).await,
        "GetExtendedAgentCard" => Err(RpcError::new(
            UNSUPPORTED_OPERATION,
            "This agent declares no extended agent card",
        )),
        "CreateTaskPushNotificationConfig" => create_push(&state, &call).await.map(Reply::Json),
        "GetTaskPushNotificationConfig" => get_push(&state, &call).await.map(Reply::Json),
        "ListTaskPushNotificationConfigs" => list_push(&state, &call).await.map(Reply::Json),
        "DeleteTaskPushNotificationConfig" => delete_push(&state, &call).await.map(Reply::Json),
        other => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

/// A push config from its 1.0 (flat) or 0.3 (nested) shape, checked, in the 1.0 shape.
fn parse_push_config(v: &Value, version: Version, task_id: &str) -> Result<Value, RpcError> {
    let src = match version {
        Version::V03 => v.get("pushNotificationConfig").unwrap_or(v),
        Version::V1 => v,
    };
    let url = src
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_field("url", "is required"))?;
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => {
            return Err(RpcError::invalid_field(
                "url",
                "must be an absolute http(s) URL",
            ));
        }
    }
    let id = src
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned);
    let mut out = json!({ "taskId": task_id, "id": id, "url": url });
    if let Some(t) = src.get("token").and_then(Value::as_str) {
        out["token"] = json!(t);
    }
    if let Some(auth) = src.get("authentication").filter(|a| a.is_object()) {
        let scheme = auth
            .get("scheme")
            .and_then(Value::as_str)
            .or_else(|| auth.pointer("/schemes/0").and_then(Value::as_str))
            .ok_or_else(|| RpcError::invalid_field("authentication.scheme", "is required"))?;
        let mut a = json!({ "scheme": scheme });
        if let Some(c) = auth.get("credentials").and_then(Value::as_str) {
            a["credentials"] = json!(c);
        }
        out["authentication"] = a;
    }
    Ok(out)
}

/// A stored (1.0) push config in the caller's generation.
fn render_push_config(cfg: &Value, version: Version) -> Value {
    match version {
        Version::V1 => cfg.clone(),
        Version::V03 => {
            let mut inner = json!({ "id": cfg["id"], "url": cfg["url"] });
            if let Some(t) = cfg.get("token") {
                inner["token"] = t.clone();
            }
            if let Some(a) = cfg.get("authentication") {
                let mut auth = json!({ "schemes": [a["scheme"].clone()] });
                if let Some(c) = a.get("credentials") {
                    auth["credentials"] = c.clone();
                }
                inner["authentication"] = auth;
            }
            json!({ "taskId": cfg["taskId"], "pushNotificationConfig": inner })
        }
    }
}

/// Stores `cfg` for `row`'s task; its first notification is the event after `delivered_seq`.
async fn store_push_config(
    state: &A2aState,
    row: &TaskRow,
    cfg: &Value,
    delivered_seq: i64,
) -> Result<(), RpcError> {
    let id = cfg["id"].as_str().unwrap_or_default();
    let stored: crate::Result<()> = async {
        let mut tx = state.engine.db().begin().await?;
        sql::put_push_config(
            &mut tx,
            &row.id,
            id,
            &row.owner,
            &cfg.to_string(),
            delivered_seq,
            state.engine.now(),
        )
        .await?;
        tx.commit().await
    }
    .await;
    stored.map_err(|e| internal(&e))
}

fn push_task_id(call: &Call) -> Result<String, RpcError> {
    param_str(&call.params, "taskId")?
        .map(str::to_owned)
        .ok_or_else(|| RpcError::invalid_field("taskId", "is required"))
}

/// The task a get/list/delete push-config call names: `taskId` in 1.0; in 0.3 `id` (the task),
/// or `taskId`.
fn addressed_push_task(call: &Call) -> Result<String, RpcError> {
    match call.version {
        Version::V1 => push_task_id(call),
        Version::V03 => param_str(&call.params, "id")?
            .or(param_str(&call.params, "taskId")?)
            .map(str::to_owned)
            .ok_or_else(|| RpcError::invalid_field("id", "is required")),
    }
}

async fn create_push(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let task_id = push_task_id(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let cfg = parse_push_config(&Value::Object(call.params.clone()), call.version, &row.id)?;
    // Notified of the events from now on.
    store_push_config(state, &row, &cfg, row.last_seq).await?;
    Ok(render_push_config(&cfg, call.version))
}

fn push_config_id(call: &Call) -> Result<String, RpcError> {
    let key = match call.version {
        Version::V1 => "id",
        Version::V03 => "pushNotificationConfigId",
    };
    param_str(&call.params, key)?
        .or(param_str(&call.params, "id")?)
        .map(str::to_owned)
        .ok_or_else(|| RpcError::invalid_field(key, "is required"))
}

async fn get_push(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let task_id = addressed_push_task(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let id = match call.version {
        Version::V1 => push_config_id(call)?,
        Version::V03 => match param_str(&call.params, "pushNotificationConfigId")? {
            Some(id) => id.to_owned(),
            None => sql::push_configs(state.engine.db(), &row.id)
                .await
                .map_err(|e| internal(&e))?
                .first()
                .map(|c| c.id.clone())
                .ok_or_else(RpcError::task_not_found)?,
        },
    };
    let found = sql::push_config(state.engine.db(), &row.id, &id)
        .await
        .map_err(|e| internal(&e))?
        .ok_or_else(|| RpcError::new(wire::TASK_NOT_FOUND, "Push notification config not found"))?;
    let cfg: Value = serde_json::from_str(&found.body).map_err(|e| internal(&Error::Corrupt(e)))?;
    Ok(render_push_config(&cfg, call.version))
}

async fn list_push(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let task_id = addressed_push_task(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let configs: Vec<Value> = sql::push_configs(state.engine.db(), &row.id)
        .await
        .map_err(|e| internal(&e))?
        .iter()
        .filter_map(|c| serde_json::from_str::<Value>(&c.body).ok())
        .map(|c| render_push_config(&c, call.version))
        .collect();
    Ok(match call.version {
        Version::V1 => json!({ "configs": configs, "nextPageToken": "" }),
        Version::V03 => Value::Array(configs),
    })
}

async fn delete_push(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let task_id = addressed_push_task(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let id = push_config_id(call)?;
    sql::delete_push_config(state.engine.db(), &row.id, &id)
        .await
        .map_err(|e| internal(&e))?;
    Ok(Value::Null)
}

fn param_str<'a>(params: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_field(key, "must be a string")),
    }
}

fn param_usize(params: &Map<String, Value>, key: &str) -> Result<Option<usize>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| RpcError::invalid_field(key, "must be a non-negative integer")),
    }
}

/// The Task document of `row` as the caller sees it.
fn render_task(row: &TaskRow, history_length: Option<usize>, artifacts: bool) -> Value {
    let mut task: Value = serde_json::from_str(&row.body).unwrap_or_else(|_| json!({}));
    if let Some(obj) = task.as_object_mut() {
        // Keys starting with `_` are switchboard's own bookkeeping.
        obj.retain(|k, _| !k.starts_with('_'));
        match history_length {
            Some(0) => {
                obj.remove("history");
            }
            Some(n) => {
                if let Some(Value::Array(h)) = obj.get_mut("history")
                    && h.len() > n
                {
                    let cut = h.len() - n;
                    h.drain(..cut);
                }
            }
            None => {}
        }
        if !artifacts
            || obj
                .get("artifacts")
                .is_some_and(|a| a.as_array().is_some_and(Vec::is_empty))
        {
            obj.remove("artifacts");
        }
    }
    task
}

fn task_result(version: Version, task: &Value) -> Value {
    match version {
        Version::V1 => json!({ "task": task }),
        Version::V03 => wire::task_to_v03(task),
    }
}

/// The task `id` if the caller may see it (others' tasks look not found).
async fn visible_task(state: &A2aState, call: &Call, id: &str) -> Result<TaskRow, RpcError> {
    let row = state
        .engine
        .get(id)
        .await?
        .ok_or_else(RpcError::task_not_found)?;
    let agent_ok = call
        .agent
        .as_deref()
        .is_none_or(|a| a.eq_ignore_ascii_case(&row.agent));
    if row.owner == call.caller.owner && agent_ok {
        Ok(row)
    } else {
        Err(RpcError::task_not_found())
    }
}

/// The leading `@name` (or `@name@domain`) of the first text part, if it names a local agent.
fn addressed_agent(state: &A2aState, parts: &[Value]) -> Option<String> {
    let text = parts
        .iter()
        .find_map(|p| p.get("text").and_then(Value::as_str))?;
    let first = text.split_whitespace().next()?;
    let handle = first.strip_prefix('@')?;
    let (name, domain) = match handle.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (handle, None),
    };
    let name = name.trim_end_matches([',', ':']);
    let agents = state.pipeline.agents();
    if domain.is_some_and(|d| {
        !d.trim_end_matches([',', ':'])
            .eq_ignore_ascii_case(agents.domain())
    }) {
        return None;
    }
    agents.get(name).map(|a| a.name.clone())
}

struct SendConfig {
    push: Option<Value>,
    return_immediately: bool,
    history_length: Option<usize>,
}

fn send_config(call: &Call) -> Result<SendConfig, RpcError> {
    let cfg = match call.params.get("configuration") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(RpcError::invalid_field(
                "configuration",
                "must be an object",
            ));
        }
    };
    let return_immediately = match call.version {
        Version::V1 => cfg
            .get("returnImmediately")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Version::V03 => !cfg.get("blocking").and_then(Value::as_bool).unwrap_or(true),
    };
    let push = cfg
        .get("taskPushNotificationConfig")
        .or_else(|| cfg.get("pushNotificationConfig"))
        .filter(|v| v.is_object())
        .map(|v| {
            // Checked now; the task id is filled in once the task exists.
            let flat = match call.version {
                Version::V1 => v.clone(),
                Version::V03 => json!({ "pushNotificationConfig": v }),
            };
            parse_push_config(&flat, call.version, "").map(|_| flat)
        })
        .transpose()
        .map_err(|e| RpcError {
            message: format!("configuration: {}", e.message),
            ..e
        })?;
    Ok(SendConfig {
        push,
        return_immediately,
        history_length: param_usize(&cfg, "historyLength").map_err(|_| {
            RpcError::invalid_field(
                "configuration.historyLength",
                "must be a non-negative integer",
            )
        })?,
    })
}

fn parse_message(call: &Call) -> Result<(WireMessage, Value), RpcError> {
    let Some(raw) = call.params.get("message").filter(|m| m.is_object()) else {
        return Err(RpcError::invalid_field("message", "is required"));
    };
    let mut raw = raw.clone();
    if call.version == Version::V03 {
        wire::message_from_v03(&mut raw);
    }
    for (field, what) in [("messageId", "a non-empty string"), ("role", "ROLE_USER")] {
        if raw
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(RpcError::invalid_field(
                &format!("message.{field}"),
                format!("is required: {what}"),
            ));
        }
    }
    let msg: WireMessage = serde_json::from_value(raw.clone())
        .map_err(|e| RpcError::invalid_field("message", format!("malformed: {e}")))?;
    if msg.role != "ROLE_USER" {
        return Err(RpcError::invalid_field(
            "message.role",
            "clients send ROLE_USER",
        ));
    }
    Ok((msg, raw))
}

/// Stores attachments and builds the contract parts.
async fn store_parts(state: &A2aState, parts: Vec<InPart>) -> Result<Vec<Part>, RpcError> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            InPart::Ready(p) => out.push(*p),
            InPart::Bytes { data, mime, name } => {
                let stored =
                    state
                        .pipeline
                        .blobs()
                        .put(&data, &mime)
                        .await
                        .map_err(|e| match e {
                            Error::TooLarge(why) => RpcError::invalid_field("message.parts", why),
                            other => internal(&other),
                        })?;
                out.push(Part::File(FilePart {
                    name,
                    mime,
                    size: u64::try_from(data.len()).ok(),
                    bytes_ref: BytesRef::ContentAddressed(stored),
                    extra: Extra::new(),
                }));
            }
        }
    }
    Ok(out)
}

/// The wire message as it goes into the task's history.
fn history_message(raw: &Value, task_id: &str, context_id: &str) -> Value {
    let mut m = raw.clone();
    if let Some(obj) = m.as_object_mut() {
        obj.insert("taskId".into(), json!(task_id));
        obj.insert("contextId".into(), json!(context_id));
    }
    m
}

async fn send(state: &Arc<A2aState>, call: Call, streaming: bool) -> Result<Reply, RpcError> {
    let config = send_config(&call)?;
    let (msg, raw) = parse_message(&call)?;
    let owner = call.caller.owner.clone();
    let limits = Limits {
        max_parts: state.cfg.max_parts,
        max_bytes: state.cfg.max_message_bytes,
    };
    let in_parts = mapping::parse_parts(&msg.parts, limits)?;

    // Retries: an Idempotency-Key names the task it started; a resend of a messageId attaches
    // to its task while that task is still running.
    if let Some(key) = &call.idempotency_key
        && let Some(task_id) = sql::idempotent_task(state.engine.db(), &owner, key)
            .await
            .map_err(|e| internal(&e))?
    {
        let row = visible_task(state, &call, &task_id).await?;
        return finish_send(state, &call, &config, row, streaming).await;
    }
    let parts = store_parts(state, in_parts).await?;
    let now = state.engine.now();
    let nm_id = uuid::Uuid::now_v7().to_string();

    if let Some(task_id) = &msg.task_id {
        let current = visible_task(state, &call, task_id).await?;
        if msg
            .context_id
            .as_deref()
            .is_some_and(|c| c != current.context_id)
        {
            return Err(RpcError::invalid_field(
                "message.contextId",
                "does not match the task's contextId",
            ));
        }
        let st = TaskState::parse(&current.state);
        if st.is_some_and(TaskState::is_terminal) {
            return Err(RpcError::new(
                UNSUPPORTED_OPERATION,
                "The task is in a terminal state and cannot accept messages",
            ));
        }
        if !st.is_some_and(TaskState::is_interrupted) {
            if current.wire_message_id == msg.message_id {
                return finish_send(state, &call, &config, current, streaming).await;
            }
            return Err(RpcError::new(
                UNSUPPORTED_OPERATION,
                "The task is still working; wait for it to ask for input",
            ));
        }
        let in_reply_to = current.last_response_id.clone();
        let (mid, wid) = (nm_id.clone(), msg.message_id.clone());
        let mut turn = 0usize;
        let row = state
            .engine
            .update(task_id, |row, task, now| {
                if !TaskState::parse(&row.state).is_some_and(TaskState::is_interrupted) {
                    return Err(RpcError::new(
                        UNSUPPORTED_OPERATION,
                        "The task is no longer waiting for input",
                    ));
                }
                let entry = history_message(&raw, &row.id, &row.context_id);
                if let Some(Value::Array(h)) = task.get_mut("history") {
                    h.push(entry);
                    turn = h.len();
                } else {
                    task["history"] = json!([entry]);
                    turn = 1;
                }
                row.turn_message_id.clone_from(&mid);
                row.wire_message_id.clone_from(&wid);
                let ev = TaskEngine::set_status(row, task, TaskState::Working, None, now);
                Ok(Change::Write(vec![ev]))
            })
            .await?
            .ok_or_else(RpcError::task_not_found)?;
        let nm = turn_message(
            state,
            &call,
            &msg,
            &raw,
            &row,
            nm_id,
            parts,
            in_reply_to,
            now,
            streaming,
        )?;
        if let Some(p) = &config.push {
            let cfg = parse_push_config(p, call.version, &row.id)?;
            // The turn's `working` status was stored before the config: push it too. (Nothing
            // later exists yet: the message reaches the agent only below.)
            let working_seq = row.last_seq.max(1);
            store_push_config(state, &row, &cfg, working_seq - 1).await?;
            state
                .engine
                .push_stored(
                    &row.id,
                    cfg["id"].as_str().unwrap_or_default(),
                    &[working_seq],
                )
                .await?;
        }
        let external_id = format!("{}:{turn}", row.id);
        // The first stream event is the task as it was resumed.
        let snapshot = row.clone();
        if let Err(e) = state.pipeline.ingest(NAME, &external_id, nm).await {
            let failed_msg = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_AGENT",
                "taskId": row.id, "contextId": row.context_id,
                "parts": [{"text": refusal(&e).unwrap_or_else(|| "The message could not be accepted".into())}]});
            state
                .engine
                .update(&row.id, |r, t, now| {
                    Ok(Change::Write(vec![TaskEngine::set_status(
                        r,
                        t,
                        TaskState::Failed,
                        Some(failed_msg.clone()),
                        now,
                    )]))
                })
                .await?;
            return Err(not_ingested(&e));
        }
        return finish_send(state, &call, &config, snapshot, streaming).await;
    }

    // A new task: the agent is the endpoint's, else the one the text addresses, else the one
    // the context belongs to, else the default.
    let agent = match &call.agent {
        Some(a) => a.clone(),
        None => match addressed_agent(state, &msg.parts) {
            Some(a) => a,
            None => match &msg.context_id {
                Some(ctx) => sql::agent_of_context(state.engine.db(), &owner, ctx)
                    .await
                    .map_err(|e| internal(&e))?
                    .unwrap_or_else(|| state.default_agent.clone()),
                None => state.default_agent.clone(),
            },
        },
    };
    if call.agent.is_some() {
        state.admit(&call.caller, &agent)?;
    } else {
        // At the hub the token was checked against whichever agent's issuer matched first;
        // the agent this message goes to must accept it under its own policy (audiences,
        // keys, algorithms), not merely trust the same issuer.
        let caller = state
            .authenticate(call.authorization.as_deref(), Some(&agent))
            .await?;
        state.admit(&caller, &agent)?;
    }
    let task_id = uuid::Uuid::now_v7().to_string();
    let context_id = msg
        .context_id
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let status = json!({ "state": TaskState::Submitted.v1(), "timestamp": wire::timestamp(now) });
    let mut task = json!({
        "id": task_id,
        "contextId": context_id,
        "status": status,
        "history": [history_message(&raw, &task_id, &context_id)],
    });
    if let Some(m) = &msg.metadata {
        task["metadata"] = Value::Object(m.clone());
    }
    let row = TaskRow {
        id: task_id,
        agent,
        owner: owner.clone(),
        context_id,
        state: TaskState::Submitted.v1().to_owned(),
        turn_message_id: nm_id.clone(),
        wire_message_id: msg.message_id.clone(),
        last_response_id: None,
        body: task.to_string(),
        last_seq: 0,
        status_at: now,
        created_at: now,
    };
    // The task is stored already working (event 1); a stream starts from the task as
    // submitted, so it shows the whole life of the task in order.
    let mut working = row.clone();
    let mut doc = task;
    let ev = TaskEngine::set_status(&mut working, &mut doc, TaskState::Working, None, now);
    working.body = doc.to_string();
    working.last_seq = 1;
    let push = match &config.push {
        Some(p) => {
            let cfg = parse_push_config(p, call.version, &row.id)?;
            Some((
                cfg["id"].as_str().unwrap_or_default().to_owned(),
                cfg.to_string(),
            ))
        }
        None => None,
    };
    let nm = turn_message(
        state, &call, &msg, &raw, &row, nm_id, parts, None, now, streaming,
    )?;
    // The task, its first event and its message are committed together; a resend of a running
    // task's message attaches to that task instead.
    let new_task = NewTask::new(
        &state.engine,
        working,
        vec![(1, ev.to_string())],
        call.idempotency_key.clone(),
        call.agent.is_none(),
        push,
    );
    let external_id = format!("{}:1", row.id);
    let (_, new_task) = state
        .pipeline
        .ingest_with(NAME, &external_id, nm, new_task)
        .await
        .map_err(|e| not_ingested(&e))?;
    match new_task.created {
        Some(Created::New) => finish_send(state, &call, &config, row, streaming).await,
        Some(Created::Resent(row)) => finish_send(state, &call, &config, *row, streaming).await,
        Some(Created::KeyTaken) => {
            // Another request with the same key got there first: answer with its task.
            let key = call.idempotency_key.as_deref().unwrap_or_default();
            let task_id = sql::idempotent_task(state.engine.db(), &owner, key)
                .await
                .map_err(|e| internal(&e))?
                .ok_or_else(RpcError::task_not_found)?;
            let row = visible_task(state, &call, &task_id).await?;
            finish_send(state, &call, &config, row, streaming).await
        }
        None => Err(internal(&Error::Unavailable)),
    }
}

/// Why a message was refused, when the caller may be told (its own fault).
fn refusal(e: &Error) -> Option<String> {
    match e {
        Error::Invalid(why) | Error::TooLarge(why) => Some(why.clone()),
        _ => None,
    }
}

/// The JSON-RPC error for a message ingest refused or could not take.
fn not_ingested(e: &Error) -> RpcError {
    match refusal(e) {
        Some(why) => RpcError::invalid_field("message", why),
        None => internal(e),
    }
}

/// The NormalizedMessage of a turn of task `row`.
#[allow(clippy::too_many_arguments)]
fn turn_message(
    state: &A2aState,
    call: &Call,
    msg: &WireMessage,
    raw: &Value,
    row: &TaskRow,
    id: String,
    parts: Vec<Part>,
    in_reply_to: Option<String>,
    now: i64,
    streaming: bool,
) -> Result<NormalizedMessage, RpcError> {
    let agent = state
        .pipeline
        .agents()
        .get(&row.agent)
        .ok_or_else(|| RpcError::new(wire::INTERNAL_ERROR, "the task's agent is gone"))?;
    Ok(NormalizedMessage {
        id,
        thread_id: format!("{}\n{}", row.owner, row.context_id),
        in_reply_to,
        sender: call.caller.sender.clone(),
        recipient: agent.address.clone(),
        parts,
        history: None,
        history_cache_breakpoint_after: None,
        recipient_capabilities: RecipientCapabilities {
            mention_relay: MentionRelay::None(NoRelay {}),
            agent_chain: mapping::agent_chain(msg.metadata.as_ref()),
            formats: vec![
                "text/plain".into(),
                "text/markdown".into(),
                "application/json".into(),
            ],
            attachments: true,
            streaming,
            max_text_chars: None,
        },
        received_via: ReceivedVia::A2a,
        received_at: crate::message::Timestamp::from_unix_millis(now),
        raw: json!({
            "taskId": row.id,
            "contextId": row.context_id,
            "method": call.method,
            "message": raw,
            "metadata": call.params.get("metadata"),
        }),
        policy_resolution: None,
        received_trace: None,
        extra: Extra::new(),
    })
}

/// Answers a send with the task: a stream from `row` on, the task right away, or the task
/// once its turn ends.
async fn finish_send(
    state: &Arc<A2aState>,
    call: &Call,
    config: &SendConfig,
    row: TaskRow,
    streaming: bool,
) -> Result<Reply, RpcError> {
    if streaming {
        let first = render_task(&row, config.history_length, true);
        return Ok(open_stream(state, call, &row.id, row.last_seq, Some(first)));
    }
    let row = if config.return_immediately {
        state.engine.get(&row.id).await?.unwrap_or(row)
    } else {
        let timeout = Duration::from_millis(state.cfg.blocking_timeout_ms);
        state
            .engine
            .wait_turn_end(&row.id, timeout)
            .await?
            .unwrap_or(row)
    };
    // The agent answered with a message instead of a task.
    if row.body.contains("\"_directMessage\"")
        && let Ok(doc) = serde_json::from_str::<Value>(&row.body)
        && let Some(m) = doc.get("_directMessage")
    {
        return Ok(Reply::Json(match call.version {
            Version::V1 => json!({ "message": m }),
            Version::V03 => wire::message_to_v03(m),
        }));
    }
    Ok(Reply::Json(task_result(
        call.version,
        &render_task(&row, config.history_length, true),
    )))
}

/// ProtoJSON parsers accept the proto field names too: turns the snake_case keys of the
/// request's own objects (params, configuration, message, parts, push config) into camelCase.
/// Free-form members (`metadata`, `data`) are left alone.
fn camelize_params(params: &mut Map<String, Value>) {
    fn camel(k: &str) -> String {
        let mut out = String::with_capacity(k.len());
        let mut upper = false;
        for c in k.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.extend(c.to_uppercase());
                upper = false;
            } else {
                out.push(c);
            }
        }
        out
    }
    fn keys(m: &mut Map<String, Value>) {
        if !m.keys().any(|k| k.contains('_')) {
            return;
        }
        let old = std::mem::take(m);
        for (k, v) in old {
            if k.contains('_') {
                m.insert(camel(&k), v);
            } else {
                m.insert(k, v);
            }
        }
    }
    keys(params);
    for nested in [
        "configuration",
        "message",
        "authentication",
        "pushNotificationConfig",
    ] {
        if let Some(Value::Object(m)) = params.get_mut(nested) {
            keys(m);
        }
    }
    if let Some(Value::Object(cfg)) = params.get_mut("configuration") {
        for nested in ["taskPushNotificationConfig", "pushNotificationConfig"] {
            if let Some(Value::Object(m)) = cfg.get_mut(nested) {
                keys(m);
            }
        }
    }
    if let Some(Value::Array(parts)) = params.get_mut("message").and_then(|m| m.get_mut("parts")) {
        for p in parts {
            if let Value::Object(m) = p {
                keys(m);
            }
        }
    }
}

fn sse_frame(seq: i64, envelope: &Value) -> Bytes {
    Bytes::from(format!("id: {seq}\ndata: {envelope}\n\n"))
}

/// Streams the task's events after `from_seq` (after `first`, the task itself, when given)
/// until the task ends its turn or the client goes away.
fn open_stream(
    state: &Arc<A2aState>,
    call: &Call,
    task_id: &str,
    from_seq: i64,
    first: Option<Value>,
) -> Reply {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let engine = state.engine.clone();
    let (id, version, task_id) = (call.id.clone(), call.version, task_id.to_owned());
    let render = move |ev: &Value| -> Value {
        let result = match version {
            Version::V1 => ev.clone(),
            Version::V03 => wire::stream_response_to_v03(ev),
        };
        wire::result_envelope(&id, result)
    };
    let replay_only = first.is_none();
    tokio::spawn(async move {
        let mut watch = engine.watch(&task_id);
        if let Some(task) = first {
            let ev = json!({ "task": &task });
            let terminal = task
                .pointer("/status/state")
                .and_then(Value::as_str)
                .and_then(TaskState::parse)
                .is_some_and(TaskState::is_terminal);
            if tx.send(sse_frame(from_seq, &render(&ev))).await.is_err() || terminal {
                return;
            }
        }
        let mut seq = from_seq;
        loop {
            let events = match engine.events_after(&task_id, seq).await {
                Ok(evs) => evs,
                Err(_) => return,
            };
            for e in events {
                seq = e.seq;
                let ev: Value = serde_json::from_str(&e.body).unwrap_or(Value::Null);
                if tx.send(sse_frame(e.seq, &render(&ev))).await.is_err() || ends_stream(&ev) {
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
            // A replay of a task that has ended: nothing more will come.
            if replay_only
                && engine
                    .get(&task_id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| TaskState::parse(&r.state))
                    .is_some_and(TaskState::is_terminal)
            {
                return;
            }
            if !watch.changed(Duration::from_secs(15)).await
                && tx
                    .send(Bytes::from_static(b": keep-alive\n\n"))
                    .await
                    .is_err()
            {
                return;
            }
        }
    });
    Reply::Stream(rx)
}

async fn get_task(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let id = param_str(&call.params, "id")?
        .ok_or_else(|| RpcError::invalid_field("id", "is required"))?;
    let history_length = param_usize(&call.params, "historyLength")?;
    let row = visible_task(state, call, id).await?;
    let task = render_task(&row, history_length, true);
    Ok(match call.version {
        Version::V1 => task,
        Version::V03 => wire::task_to_v03(&task),
    })
}

fn encode_cursor(row: &TaskRow) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}:{}", row.status_at, row.id))
}

fn decode_cursor(s: &str) -> Option<(i64, String)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (at, id) = raw.split_once(':')?;
    Some((at.parse().ok()?, id.to_owned()))
}

async fn list_tasks(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let p = &call.params;
    let page_size = match param_usize(p, "pageSize")? {
        None => 50,
        Some(n) if (1..=state.cfg.max_page_size as usize).contains(&n) => n,
        Some(_) => {
            return Err(RpcError::invalid_field(
                "pageSize",
                format!("must be between 1 and {}", state.cfg.max_page_size),
            ));
        }
    };
    let status = match param_str(p, "status")? {
        None | Some("" | "TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(
            TaskState::parse(s)
                .ok_or_else(|| RpcError::invalid_field("status", "not a task state"))?
                .v1(),
        ),
    };
    let cursor = match param_str(p, "pageToken")? {
        None | Some("") => None,
        Some(t) => Some(decode_cursor(t).ok_or_else(|| {
            RpcError::invalid_field("pageToken", "not a token this server issued")
        })?),
    };
    let status_after = match param_str(p, "statusTimestampAfter")? {
        None => None,
        Some(t) => Some(
            crate::message::Timestamp::parse(t)
                .map_err(|_| {
                    RpcError::invalid_field("statusTimestampAfter", "not an RFC 3339 timestamp")
                })?
                .unix_millis(),
        ),
    };
    let history_length = param_usize(p, "historyLength")?;
    let include_artifacts = p
        .get("includeArtifacts")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let filter = TaskFilter {
        owner: &call.caller.owner,
        agent: call.agent.as_deref(),
        context_id: param_str(p, "contextId")?.filter(|c| !c.is_empty()),
        state: status,
        status_after,
    };
    let limit = i64::try_from(page_size + 1).unwrap_or(101);
    let db = state.engine.db();
    let mut rows = sql::list_tasks(
        db,
        &filter,
        cursor.as_ref().map(|(a, i)| (*a, i.as_str())),
        limit,
    )
    .await
    .map_err(|e| internal(&e))?;
    let total = sql::count_tasks(db, &filter)
        .await
        .map_err(|e| internal(&e))?;
    let next = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(encode_cursor).unwrap_or_default()
    } else {
        String::new()
    };
    let tasks: Vec<Value> = rows
        .iter()
        .map(|r| {
            let t = render_task(r, history_length, include_artifacts);
            match call.version {
                Version::V1 => t,
                Version::V03 => wire::task_to_v03(&t),
            }
        })
        .collect();
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": next,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

async fn cancel_task(state: &A2aState, call: &Call) -> Result<Value, RpcError> {
    let id = param_str(&call.params, "id")?
        .ok_or_else(|| RpcError::invalid_field("id", "is required"))?;
    visible_task(state, call, id).await?;
    let row = state
        .engine
        .update(id, |row, task, now| {
            if TaskState::parse(&row.state).is_some_and(TaskState::is_terminal) {
                return Err(RpcError::new(
                    TASK_NOT_CANCELABLE,
                    "Task cannot be canceled",
                ));
            }
            Ok(Change::Write(vec![TaskEngine::set_status(
                row,
                task,
                TaskState::Canceled,
                None,
                now,
            )]))
        })
        .await?
        .ok_or_else(RpcError::task_not_found)?;
    let task = render_task(&row, None, true);
    Ok(match call.version {
        Version::V1 => task,
        Version::V03 => wire::task_to_v03(&task),
    })
}

async fn subscribe(state: &Arc<A2aState>, call: &Call) -> Result<Reply, RpcError> {
    let id = param_str(&call.params, "id")?
        .ok_or_else(|| RpcError::invalid_field("id", "is required"))?;
    let row = visible_task(state, call, id).await?;
    if let Some(seq) = call.last_event_id {
        // A reconnect: replay what the client missed, then follow.
        return Ok(open_stream(state, call, &row.id, seq.max(0), None));
    }
    if TaskState::parse(&row.state).is_some_and(TaskState::is_terminal) {
        return Err(RpcError::new(
            UNSUPPORTED_OPERATION,
            "The task is in a terminal state; there is nothing to subscribe to",
        ));
    }
    let first = render_task(&row, None, true);
    Ok(open_stream(state, call, &row.id, row.last_seq, Some(first)))
}
