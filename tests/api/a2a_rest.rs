//! The A2A HTTP+JSON binding over real HTTP: the REST resources serve the same methods as
//! JSON-RPC, errors come as `google.rpc.Status` with their HTTP status, and bad input, replays
//! and duplicates are answered as the specification says.

use serde_json::{Value, json};

use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app, wait_for};

/// One HTTP+JSON request: the status, the `WWW-Authenticate` header and the JSON body (null
/// when there is none).
async fn rest(
    t: &TestApp,
    method: reqwest::Method,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Value) {
    let mut r = t.http.request(method, format!("{}{path}", t.base));
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("a2a-version"))
    {
        r = r.header("A2A-Version", "1.0");
    }
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = body {
        r = r
            .header("Content-Type", "application/json")
            .body(b.to_owned());
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let www = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, www, resp.json().await.unwrap_or(Value::Null))
}

fn send_body(text: &str, message_id: &str) -> String {
    json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}})
        .to_string()
}

fn reason(body: &Value) -> &str {
    body["error"]["details"][0]["reason"]
        .as_str()
        .unwrap_or_default()
}

async fn post(t: &TestApp, path: &str, body: &str) -> (u16, Value) {
    let (s, _, b) = rest(t, reqwest::Method::POST, path, Some(body), &[]).await;
    (s, b)
}

async fn get(t: &TestApp, path: &str) -> (u16, Value) {
    let (s, _, b) = rest(t, reqwest::Method::GET, path, None, &[]).await;
    (s, b)
}

/// Send, get (with `historyLength` from the query), list, cancel and the stream over REST, on
/// an agent's endpoint and at the hub; the result is the bare Task, as over JSON-RPC.
async fn the_rest_resources_serve_the_same_methods(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    let (status, sent) = post(
        &t,
        "/agents/echo/a2a/message:send",
        &send_body("hi rest", "m-1"),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let task = &sent["task"];
    let id = task["id"].as_str().unwrap().to_owned();
    assert!(sent.get("jsonrpc").is_none(), "a bare result: {sent}");
    let done = wait_for(10, "the task to complete", || async {
        let (s, b) = get(&t, &format!("/agents/echo/a2a/tasks/{id}?historyLength=1")).await;
        (s == 200 && b["status"]["state"] == "TASK_STATE_COMPLETED").then_some(b)
    })
    .await;
    assert_eq!(done["artifacts"][0]["parts"][0]["text"], "hi rest");
    assert_eq!(done["history"].as_array().map(Vec::len), Some(1), "{done}");

    let ctx = task["contextId"].as_str().unwrap().to_owned();
    let (status, listed) = get(
        &t,
        &format!("/agents/echo/a2a/tasks?pageSize=5&contextId={ctx}"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == id.as_str()),
        "{listed}"
    );
    // A finished task cannot be canceled: 400 FAILED_PRECONDITION, TASK_NOT_CANCELABLE.
    let (status, refused) = post(&t, &format!("/agents/echo/a2a/tasks/{id}:cancel"), "{}").await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["status"], "FAILED_PRECONDITION");
    assert_eq!(reason(&refused), "TASK_NOT_CANCELABLE");

    // The stream: bare StreamResponse events, the last a final completed status.
    let resp = t
        .http
        .post(format!("{}/agents/echo/a2a/message:stream", t.base))
        .header("A2A-Version", "1.0")
        .header("Content-Type", "application/json")
        .body(send_body("streamed", "m-2"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = resp.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(events[0].get("task").is_some(), "{text}");
    assert_eq!(
        events.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{text}"
    );
    assert!(events.iter().all(|e| e.get("jsonrpc").is_none()), "{text}");

    // The hub: a leading @name picks the agent.
    let (status, hub) = post(
        &t,
        "/a2a/message:send",
        &send_body("@echo at the hub", "m-3"),
    )
    .await;
    assert_eq!(status, 200, "{hub}");
    assert!(hub["task"]["id"].is_string(), "{hub}");
}
on_both_engines!(the_rest_resources_serve_the_same_methods);

/// Push configs as resources: create, get, list, delete (an empty object), then 404.
#[tokio::test]
async fn push_configs_are_rest_resources() {
    let t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let (_, sent) = post(
        &t,
        "/agents/echo/a2a/message:send",
        &send_body("push me", "p-1"),
    )
    .await;
    let id = sent["task"]["id"].as_str().unwrap().to_owned();
    let base = format!("/agents/echo/a2a/tasks/{id}/pushNotificationConfigs");
    let (status, created) = post(
        &t,
        &base,
        &json!({"id": "cfg-1", "url": "https://hooks.example/a2a", "token": "tok"}).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["taskId"], id.as_str());
    assert_eq!(created["id"], "cfg-1");
    let (status, got) = get(&t, &format!("{base}/cfg-1")).await;
    assert_eq!(
        (status, &got["url"]),
        (200, &json!("https://hooks.example/a2a"))
    );
    let (status, listed) = get(&t, &base).await;
    assert_eq!(status, 200);
    assert_eq!(listed["configs"][0]["id"], "cfg-1", "{listed}");
    let (status, _, deleted) = rest(
        &t,
        reqwest::Method::DELETE,
        &format!("{base}/cfg-1"),
        None,
        &[],
    )
    .await;
    assert_eq!((status, deleted), (200, json!({})));
    let (status, gone) = get(&t, &format!("{base}/cfg-1")).await;
    assert_eq!(status, 404, "{gone}");
    // A config without a URL is refused with the field named.
    let (status, bad) = post(&t, &base, r#"{"id": "cfg-2"}"#).await;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(
        bad["error"]["details"][1]["fieldViolations"][0]["field"],
        "url"
    );
}

/// Malformed, mistyped, oversized, misaddressed, unversioned, replayed and duplicate requests.
#[tokio::test]
async fn bad_input_gets_a_status_and_a_reason() {
    let t = spawn_app(Engine::Sqlite, |c, _| c.server.max_body_bytes = 4096).await;
    let send = "/agents/echo/a2a/message:send";

    let (status, b) = post(&t, send, "{not json").await;
    assert_eq!((status, reason(&b)), (400, "PARSE_ERROR"), "{b}");
    assert_eq!(b["error"]["code"], 400);
    assert_eq!(b["error"]["status"], "INVALID_ARGUMENT");
    let (status, b) = post(&t, send, "[1, 2]").await;
    assert_eq!((status, reason(&b)), (400, "PARSE_ERROR"), "{b}");
    let (status, b) = post(&t, send, "{}").await;
    assert_eq!((status, reason(&b)), (400, "INVALID_PARAMS"), "{b}");
    let huge = send_body(&"x".repeat(8192), "big");
    let (status, b) = post(&t, send, &huge).await;
    assert_eq!(status, 400, "{b}");

    let (status, _, b) = rest(
        &t,
        reqwest::Method::POST,
        send,
        None,
        &[("Content-Type", "text/plain")],
    )
    .await;
    assert_eq!(
        (status, reason(&b)),
        (415, "CONTENT_TYPE_NOT_SUPPORTED"),
        "{b}"
    );

    let (status, b) = get(&t, "/agents/echo/a2a/tasks/no-such-task").await;
    assert_eq!((status, reason(&b)), (404, "TASK_NOT_FOUND"), "{b}");
    let (status, b) = get(&t, "/agents/echo/a2a/nothing/here").await;
    assert_eq!((status, reason(&b)), (404, "METHOD_NOT_FOUND"), "{b}");
    let (status, b) = get(&t, "/agents/nobody/a2a/tasks").await;
    assert_eq!(status, 404, "{b}");
    let resp = t
        .http
        .get(format!("{}{send}", t.base))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    let b: Value = resp.json().await.unwrap();
    assert_eq!(
        (b["error"]["code"].as_u64(), reason(&b)),
        (Some(405), "METHOD_NOT_FOUND")
    );
    let (status, b) = get(&t, "/agents/echo/a2a/tasks?pageSize=lots").await;
    assert_eq!((status, reason(&b)), (400, "INVALID_PARAMS"), "{b}");

    let (status, _, b) = rest(
        &t,
        reqwest::Method::POST,
        send,
        Some(&send_body("old", "v-1")),
        &[("A2A-Version", "0.3")],
    )
    .await;
    assert_eq!((status, reason(&b)), (400, "VERSION_NOT_SUPPORTED"), "{b}");

    // A replay (the same request with the same Idempotency-Key) gets the same task; the key
    // used again for another request is refused.
    let key = [("Idempotency-Key", "same-key-1")];
    let once = send_body("once", "i-1");
    let (s1, _, first) = rest(&t, reqwest::Method::POST, send, Some(&once), &key).await;
    let (s2, _, again) = rest(&t, reqwest::Method::POST, send, Some(&once), &key).await;
    assert_eq!((s1, s2), (200, 200), "{first} {again}");
    assert_eq!(first["task"]["id"], again["task"]["id"]);
    let other = send_body("another", "i-2");
    let (s3, _, reused) = rest(&t, reqwest::Method::POST, send, Some(&other), &key).await;
    assert_eq!((s3, reason(&reused)), (400, "INVALID_PARAMS"), "{reused}");
}

/// One JSON-RPC 1.0 call at `path`: the parsed body (always HTTP 200).
async fn json_rpc(t: &TestApp, path: &str, method: &str, params: Value) -> Value {
    let resp = t
        .http
        .post(format!("{}{path}", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// A task of the echo agent, made over JSON-RPC: its id.
async fn echo_task(t: &TestApp) -> String {
    let message = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                         "parts": [{"text": "push me"}]});
    let sent = json_rpc(
        t,
        "/agents/echo/a2a",
        "SendMessage",
        json!({"message": message}),
    )
    .await;
    sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {sent}"))
        .to_owned()
}

/// Push configs pointing where the SSRF guard would refuse to send (loopback, private,
/// link-local and metadata addresses, `localhost`, plain http) are refused when they are
/// created, on both bindings and inline in a send's `configuration`, and nothing is stored:
/// no caller can make jobs that can only die. With the development switch on, as the guard
/// follows it, loopback is accepted.
#[tokio::test]
async fn push_configs_the_guard_would_refuse_are_refused_at_creation() {
    let t = spawn_app(Engine::Sqlite, |c, _| {
        c.net.allow_private_addresses = false;
    })
    .await;
    let id = echo_task(&t).await;
    let base = format!("/agents/echo/a2a/tasks/{id}/pushNotificationConfigs");
    let refused = [
        "https://127.0.0.1:8443/hook",
        "https://[::1]/hook",
        "https://10.0.0.7/hook",
        "https://192.168.1.2/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://localhost/hook",
        "http://hooks.example/a2a",
    ];
    for url in refused {
        // HTTP+JSON: 400 with the field named.
        let (status, bad) = post(&t, &base, &json!({"id": "cfg", "url": url}).to_string()).await;
        assert_eq!(status, 400, "{url}: {bad}");
        assert_eq!(
            bad["error"]["details"][1]["fieldViolations"][0]["field"], "url",
            "{url}: {bad}"
        );
        // JSON-RPC: -32602.
        let r = json_rpc(
            &t,
            "/agents/echo/a2a",
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "id": "cfg", "url": url}),
        )
        .await;
        assert_eq!(r["error"]["code"], -32602, "{url}: {r}");
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("url") && message.contains("https://"),
            "{url}: the message says what is wrong and what works: {r}"
        );
        // Inline in a send's configuration, on both bindings: refused before any task exists.
        let inline = json!({
            "message": {"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                        "parts": [{"text": "inline"}]},
            "configuration": {"taskPushNotificationConfig": {"url": url}},
        });
        let r = json_rpc(&t, "/agents/echo/a2a", "SendMessage", inline.clone()).await;
        assert_eq!(r["error"]["code"], -32602, "{url}: {r}");
        let (status, bad) = post(&t, "/agents/echo/a2a/message:send", &inline.to_string()).await;
        assert_eq!(status, 400, "{url}: {bad}");
    }
    let (status, listed) = get(&t, &base).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["configs"], json!([]), "nothing was stored: {listed}");
    // A public https URL is still accepted.
    let (status, ok) = post(
        &t,
        &base,
        &json!({"id": "ok", "url": "https://93.184.215.14/a2a"}).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{ok}");

    // The development switch on: loopback over plain http is accepted, as the guard sends there.
    let dev = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let id = echo_task(&dev).await;
    let r = json_rpc(
        &dev,
        "/agents/echo/a2a",
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "local", "url": "http://127.0.0.1:9/hook"}),
    )
    .await;
    assert!(r.get("error").is_none(), "{r}");
}
