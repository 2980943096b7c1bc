//! The JSON-RPC envelope: reads a call off HTTP (media type, body size, the JSON-RPC 2.0
//! request object, proto field names, the method's generation and the requested A2A version),
//! reads its parameters, and writes its result, error or stream back, with the 401 challenge
//! for a refused token.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt as _;
use serde_json::{Map, Value};

use super::A2aState;
use super::call::{Binding, Call, Reply};
use super::dispatch::dispatch;
use crate::transports::a2a::auth::Caller;
use crate::transports::a2a::tasks::internal;
use crate::transports::a2a::wire::{
    self, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, RpcError, VERSION_NOT_SUPPORTED, Version,
};

pub(super) fn header(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_owned())
}

/// Whether the request's body is JSON as far as its `Content-Type` says (`application/json`,
/// any `+json` type, or none declared).
pub(super) fn declared_json(req: &HttpRequest) -> bool {
    header(req, "content-type").is_none_or(|ct| {
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        mime.is_empty() || mime == "application/json" || mime.ends_with("+json")
    })
}

pub(super) fn json_reply(v: &Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(v.to_string())
}

pub(super) async fn read_body(mut payload: web::Payload, max: usize) -> Result<Vec<u8>, RpcError> {
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

/// The one negotiation rule: a request asks for the version in its `A2A-Version` (header or
/// query parameter), 0.3 when it names none (0.3 clients send none). A 1.0 method is served
/// only to a request asking for 1.0 — 0.3 has no such method; a 0.3 method (the legacy
/// names a 1.0 server keeps for old clients) is served to a request asking for 0.3 or 1.0 and
/// answered in 0.3's shapes. Any other version is not spoken here.
fn version_serves(requested: &str, method: Version) -> bool {
    let requested = match requested {
        "" | "0.3" => Version::V03,
        "1.0" | "1" => Version::V1,
        _ => return false,
    };
    match method {
        Version::V1 => requested == Version::V1,
        Version::V03 => true,
    }
}

/// The version a request asks for: header, else query parameter; `""` when absent.
pub(super) fn requested_version(req: &HttpRequest) -> String {
    if let Some(v) = header(req, "a2a-version") {
        return v;
    }
    url::form_urlencoded::parse(req.query_string().as_bytes())
        .find(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

pub(super) async fn serve(
    state: web::Data<A2aState>,
    req: HttpRequest,
    payload: web::Payload,
    agent: Option<String>,
) -> HttpResponse {
    // JSON-RPC travels as JSON: a body declared as something else is refused outright.
    if !declared_json(&req) {
        return HttpResponse::UnsupportedMediaType()
            .content_type("text/plain")
            .body("JSON-RPC requests must be application/json");
    }
    let body = match read_body(payload, state.max_body).await {
        Ok(b) => b,
        Err(e) => return json_reply(&wire::error_envelope(&Value::Null, &e, Version::V1)),
    };
    let Request {
        id,
        method,
        version: generation,
        params,
    } = match read_request(&body, &requested_version(&req)) {
        Ok(r) => r,
        Err((id, e, version)) => return json_reply(&wire::error_envelope(&id, &e, version)),
    };
    let call = call_of(
        &req,
        Binding::JsonRpc,
        id,
        (method, generation),
        params,
        agent,
    );
    answer(&state, call).await
}

/// The call `req` makes of `method` (its 1.0 name and generation) with `params`, before its
/// caller is authenticated: what both bindings hand the method table.
pub(super) fn call_of(
    req: &HttpRequest,
    binding: Binding,
    id: Value,
    (method, version): (&'static str, Version),
    params: Map<String, Value>,
    agent: Option<String>,
) -> Call {
    Call {
        binding,
        id,
        method,
        version,
        params,
        caller: Caller::anonymous(),
        agent,
        authorization: header(req, "authorization"),
        client: crate::http::client_addr(req),
        idempotency_key: header(req, "idempotency-key").filter(|k| !k.is_empty()),
        last_event_id: header(req, "last-event-id").and_then(|v| v.parse().ok()),
    }
}

/// Runs `call` on the main runtime and writes its answer in the call's binding: a result,
/// a stream of events, or an error (401 with its challenge, 429 with `Retry-After`, 403; in
/// HTTP+JSON every error has its HTTP status).
pub(super) async fn answer(state: &web::Data<A2aState>, call: Call) -> HttpResponse {
    let (id, generation, binding) = (call.id.clone(), call.version, call.binding);
    let outcome = state
        .clone()
        .into_inner()
        .on_main(|served| async move { Ok(dispatch(served, call).await) })
        .await;
    let error_body = |e: &RpcError| match binding {
        Binding::JsonRpc => wire::error_envelope(&id, e, generation),
        Binding::HttpJson => wire::rest_error(e),
    };
    match outcome {
        Ok(Ok(Reply::Json(result))) => match binding {
            Binding::JsonRpc => json_reply(&wire::result_envelope(&id, result)),
            // An empty answer (a deleted config) is `google.protobuf.Empty`.
            Binding::HttpJson if result.is_null() => json_reply(&serde_json::json!({})),
            Binding::HttpJson => json_reply(&result),
        },
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
            let shown = match binding {
                Binding::JsonRpc => RpcError::new(INVALID_REQUEST, "Unauthenticated"),
                Binding::HttpJson => e,
            };
            HttpResponse::Unauthorized()
                .insert_header(("WWW-Authenticate", challenge))
                .content_type("application/json")
                .body(error_body(&shown).to_string())
        }
        Ok(Err(e)) if e.code == wire::RATE_LIMITED => {
            let shown = RpcError::new(
                INVALID_REQUEST,
                format!("rate limited; retry after {} s", e.message),
            );
            let shown = match binding {
                Binding::JsonRpc => shown,
                Binding::HttpJson => RpcError {
                    code: e.code,
                    ..shown
                },
            };
            HttpResponse::TooManyRequests()
                .insert_header(("Retry-After", e.message.clone()))
                .content_type("application/json")
                .body(error_body(&shown).to_string())
        }
        Ok(Err(e)) if e.code == wire::FORBIDDEN => {
            let shown = match binding {
                Binding::JsonRpc => RpcError::new(INVALID_REQUEST, e.message),
                Binding::HttpJson => e,
            };
            HttpResponse::Forbidden()
                .content_type("application/json")
                .body(error_body(&shown).to_string())
        }
        Ok(Err(e)) => error_reply(binding, &error_body(&e), &e),
        Err(e) => {
            let e = internal(&e);
            error_reply(binding, &error_body(&e), &e)
        }
    }
}

/// An error answer: JSON-RPC errors travel in a 200, HTTP+JSON ones with their status.
pub(super) fn error_reply(binding: Binding, body: &Value, e: &RpcError) -> HttpResponse {
    let status = match binding {
        Binding::JsonRpc => StatusCode::OK,
        Binding::HttpJson => {
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        }
    };
    HttpResponse::build(status)
        .content_type("application/json")
        .body(body.to_string())
}

/// A JSON-RPC request read off its body, before anything of its caller is known.
#[derive(Debug)]
pub(super) struct Request {
    /// The id to answer with (a string, a number or null).
    pub(super) id: Value,
    /// The method's 1.0 name.
    pub(super) method: &'static str,
    /// The generation the method's name belongs to.
    pub(super) version: Version,
    /// The parameters, proto field names made camelCase.
    pub(super) params: Map<String, Value>,
}

/// Reads the JSON-RPC 2.0 request object in `body`, for a request asking for A2A version
/// `requested` (`""` when it names none).
///
/// # Errors
/// What the request is answered with instead: the id, the error, and the generation whose
/// shape the error takes.
pub(super) fn read_request(
    body: &[u8],
    requested: &str,
) -> Result<Request, (Value, RpcError, Version)> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        let e = RpcError::new(PARSE_ERROR, "Parse error: the body is not JSON");
        return Err((Value::Null, e, Version::V1));
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let id = if matches!(id, Value::String(_) | Value::Number(_) | Value::Null) {
        id
    } else {
        Value::Null
    };
    let bad_envelope = |why: &str| {
        let e = RpcError::new(INVALID_REQUEST, format!("Invalid request: {why}"));
        Err((id.clone(), e, Version::V1))
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
        return Err((id, e, Version::V1));
    };
    if !version_serves(requested, generation) {
        let shown = if requested.is_empty() {
            "0.3"
        } else {
            requested
        };
        let e = RpcError::new(
            VERSION_NOT_SUPPORTED,
            format!(
                "A2A version '{shown}' is not supported for {method_name}; this server speaks 1.0 (A2A-Version: 1.0) and 0.3"
            ),
        );
        return Err((id, e, generation));
    }
    Ok(Request {
        id,
        method,
        version: generation,
        params,
    })
}

/// ProtoJSON parsers accept the proto field names too: turns the snake_case keys of the
/// request's own objects (params, configuration, message, parts, push config) into camelCase.
/// Free-form members (`metadata`, `data`) are left alone.
pub(super) fn camelize_params(params: &mut Map<String, Value>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_decides_which_version_serves_which_method() {
        // (requested A2A-Version, the method's generation, served)
        let table = [
            ("", Version::V03, true),
            ("0.3", Version::V03, true),
            ("1.0", Version::V03, true),
            ("1", Version::V03, true),
            ("", Version::V1, false),
            ("0.3", Version::V1, false),
            ("1.0", Version::V1, true),
            ("1", Version::V1, true),
            ("99.0", Version::V1, false),
            ("99.0", Version::V03, false),
            ("0.2", Version::V03, false),
        ];
        for (requested, method, served) in table {
            assert_eq!(
                version_serves(requested, method),
                served,
                "{requested:?} asking for a {method:?} method"
            );
        }
    }
}
