//! The HTTP+JSON binding: the specification's REST mapping of the same methods, below the
//! JSON-RPC endpoint's URL (`POST {endpoint}/message:send`, `GET {endpoint}/tasks/{id}`, …).
//! A request becomes the same [`Call`] the JSON-RPC envelope makes (path and query parameters
//! joined to the body's), so one method table serves both; results and stream events go out
//! bare, errors as `google.rpc.Status` with their HTTP status.

use actix_web::http::Method;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value};

use super::A2aState;
use super::call::Binding;
use super::envelope::{
    answer, call_of, camelize_params, declared_json, error_reply, read_body, requested_version,
};
use crate::transports::a2a::wire::{
    self, CONTENT_TYPE_NOT_SUPPORTED, METHOD_NOT_FOUND, PARSE_ERROR, RpcError,
    VERSION_NOT_SUPPORTED, Version,
};

/// Where a request's parameters come from besides its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// The JSON body.
    Body,
    /// The query string.
    Query,
    /// Nothing else.
    None,
}

/// A request's method, where its other parameters are, and the ones its path holds.
type Route = (&'static str, Input, Vec<(&'static str, String)>);

/// The [`Route`] of a request; `Err(true)` for a known resource asked with another HTTP method,
/// `Err(false)` for an unknown one.
fn route(method: &Method, rest: &str) -> Result<Route, bool> {
    let get = method == Method::GET;
    let post = method == Method::POST;
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let known = |ok: bool, out: Route| {
        if ok { Ok(out) } else { Err(true) }
    };
    match segments.as_slice() {
        ["message:send"] => known(post, ("SendMessage", Input::Body, vec![])),
        ["message:stream"] => known(post, ("SendStreamingMessage", Input::Body, vec![])),
        ["extendedAgentCard"] => known(get, ("GetExtendedAgentCard", Input::None, vec![])),
        ["tasks"] => known(get, ("ListTasks", Input::Query, vec![])),
        ["tasks", task] if !task.is_empty() => {
            if let Some(id) = task.strip_suffix(":cancel") {
                known(
                    post,
                    ("CancelTask", Input::Body, vec![("id", id.to_owned())]),
                )
            } else if let Some(id) = task.strip_suffix(":subscribe") {
                let input = if post { Input::Body } else { Input::None };
                known(
                    get || post,
                    ("SubscribeToTask", input, vec![("id", id.to_owned())]),
                )
            } else {
                known(
                    get,
                    ("GetTask", Input::Query, vec![("id", (*task).to_owned())]),
                )
            }
        }
        ["tasks", task, "pushNotificationConfigs"] => {
            let id = vec![("taskId", (*task).to_owned())];
            if post {
                Ok(("CreateTaskPushNotificationConfig", Input::Body, id))
            } else {
                known(get, ("ListTaskPushNotificationConfigs", Input::Query, id))
            }
        }
        ["tasks", task, "pushNotificationConfigs", config] => {
            let ids = vec![("taskId", (*task).to_owned()), ("id", (*config).to_owned())];
            if method == Method::DELETE {
                Ok(("DeleteTaskPushNotificationConfig", Input::None, ids))
            } else {
                known(get, ("GetTaskPushNotificationConfig", Input::None, ids))
            }
        }
        _ => Err(false),
    }
}

/// The query parameters the methods read as integers and as booleans.
const INTEGER_PARAMS: [&str; 2] = ["historyLength", "pageSize"];
const BOOLEAN_PARAMS: [&str; 1] = ["includeArtifacts"];

/// Query parameters as the methods read them: camelCase names, integers and booleans typed
/// (a value that is not one stays a string, which the method refuses as such).
fn query_params(query: &str) -> Map<String, Value> {
    let mut params = Map::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        if !k.eq_ignore_ascii_case("a2a-version") {
            params.insert(k.into_owned(), Value::String(v.into_owned()));
        }
    }
    camelize_params(&mut params);
    for (k, v) in &mut params {
        let Value::String(text) = v else { continue };
        if INTEGER_PARAMS.contains(&k.as_str()) {
            if let Ok(n) = text.parse::<u64>() {
                *v = Value::from(n);
            }
        } else if BOOLEAN_PARAMS.contains(&k.as_str())
            && let Ok(b) = text.parse::<bool>()
        {
            *v = Value::Bool(b);
        }
    }
    params
}

/// The JSON body as an object (an empty body is an empty object).
fn body_params(body: &[u8]) -> Result<Map<String, Value>, RpcError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut m)) => {
            camelize_params(&mut m);
            Ok(m)
        }
        Ok(_) => Err(RpcError::new(
            PARSE_ERROR,
            "Parse error: the body is not a JSON object",
        )),
        Err(_) => Err(RpcError::new(
            PARSE_ERROR,
            "Parse error: the body is not JSON",
        )),
    }
}

/// Serves one HTTP+JSON request below the endpoint of `agent` (the hub's when `None`).
pub(super) async fn serve_rest(
    state: web::Data<A2aState>,
    req: HttpRequest,
    payload: web::Payload,
    agent: Option<String>,
    rest: &str,
) -> HttpResponse {
    let fail = |e: RpcError| error_reply(Binding::HttpJson, &wire::rest_error(&e), &e);
    let (method, input, from_path) = match route(req.method(), rest) {
        Ok(r) => r,
        Err(true) => {
            let allow: Vec<&str> = [Method::GET, Method::POST, Method::DELETE]
                .iter()
                .filter(|m| route(m, rest).is_ok())
                .map(Method::as_str)
                .collect();
            let mut body = wire::rest_error(&RpcError::new(
                METHOD_NOT_FOUND,
                format!("{} is not allowed on this resource", req.method()),
            ));
            body["error"]["code"] = Value::from(405);
            return HttpResponse::MethodNotAllowed()
                .insert_header(("Allow", allow.join(", ")))
                .content_type("application/json")
                .body(body.to_string());
        }
        Err(false) => {
            return fail(RpcError::new(
                METHOD_NOT_FOUND,
                format!("No A2A resource at {rest}"),
            ));
        }
    };
    // This binding speaks 1.0 only; a request naming no version is taken as asking for it (the
    // 0.3 REST paths were others).
    let version = requested_version(&req);
    if !matches!(version.as_str(), "" | "1.0" | "1") {
        return fail(RpcError::new(
            VERSION_NOT_SUPPORTED,
            format!("A2A version '{version}' is not supported; this binding speaks 1.0"),
        ));
    }
    let mut params = match input {
        Input::Body => {
            if !declared_json(&req) {
                return fail(RpcError::new(
                    CONTENT_TYPE_NOT_SUPPORTED,
                    "HTTP+JSON request bodies must be application/json",
                ));
            }
            let body = match read_body(payload, state.max_body).await {
                Ok(b) => b,
                Err(e) => return fail(e),
            };
            match body_params(&body) {
                Ok(p) => p,
                Err(e) => return fail(e),
            }
        }
        Input::Query => query_params(req.query_string()),
        Input::None => Map::new(),
    };
    for (k, v) in from_path {
        params.insert(k.to_owned(), Value::String(v));
    }
    let call = call_of(
        &req,
        Binding::HttpJson,
        Value::Null,
        (method, Version::V1),
        params,
        agent,
    );
    answer(&state, call).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_map_to_the_methods_of_the_json_rpc_binding() {
        let table = [
            (Method::POST, "message:send", "SendMessage", vec![]),
            (
                Method::POST,
                "message:stream",
                "SendStreamingMessage",
                vec![],
            ),
            (Method::GET, "tasks/t1", "GetTask", vec![("id", "t1")]),
            (Method::GET, "tasks", "ListTasks", vec![]),
            (
                Method::POST,
                "tasks/t1:cancel",
                "CancelTask",
                vec![("id", "t1")],
            ),
            (
                Method::POST,
                "tasks/t1:subscribe",
                "SubscribeToTask",
                vec![("id", "t1")],
            ),
            (
                Method::GET,
                "tasks/t1:subscribe",
                "SubscribeToTask",
                vec![("id", "t1")],
            ),
            (
                Method::POST,
                "tasks/t1/pushNotificationConfigs",
                "CreateTaskPushNotificationConfig",
                vec![("taskId", "t1")],
            ),
            (
                Method::GET,
                "tasks/t1/pushNotificationConfigs",
                "ListTaskPushNotificationConfigs",
                vec![("taskId", "t1")],
            ),
            (
                Method::GET,
                "tasks/t1/pushNotificationConfigs/c1",
                "GetTaskPushNotificationConfig",
                vec![("taskId", "t1"), ("id", "c1")],
            ),
            (
                Method::DELETE,
                "tasks/t1/pushNotificationConfigs/c1",
                "DeleteTaskPushNotificationConfig",
                vec![("taskId", "t1"), ("id", "c1")],
            ),
            (
                Method::GET,
                "extendedAgentCard",
                "GetExtendedAgentCard",
                vec![],
            ),
        ];
        for (m, path, method, ids) in table {
            let (got, _, from_path) = route(&m, path).unwrap();
            assert_eq!(got, method, "{m} {path}");
            let from_path: Vec<(&str, &str)> =
                from_path.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(from_path, ids, "{m} {path}");
        }
        assert_eq!(route(&Method::GET, "message:send"), Err(true));
        assert_eq!(route(&Method::DELETE, "tasks/t1"), Err(true));
        assert_eq!(route(&Method::GET, "nothing/here"), Err(false));
        assert_eq!(route(&Method::GET, "tasks/t1/other"), Err(false));
    }

    #[test]
    fn query_parameters_are_typed_and_camel_cased() {
        let p = query_params(
            "history_length=3&contextId=42&includeArtifacts=true&pageSize=x&A2A-Version=1.0",
        );
        assert_eq!(p["historyLength"], 3);
        assert_eq!(p["contextId"], "42");
        assert_eq!(p["pageSize"], "x");
        assert_eq!(p["includeArtifacts"], true);
        assert!(!p.contains_key("A2A-Version"));
        assert!(body_params(b"").unwrap().is_empty());
        assert_eq!(body_params(b"[1]").unwrap_err().code, PARSE_ERROR);
        assert_eq!(body_params(b"{nope").unwrap_err().code, PARSE_ERROR);
    }
}
