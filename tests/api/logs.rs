//! One message can be followed through the JSON log: the real binary logs its ingest, its
//! dispatch and its delivery inside spans that carry its id, and selecting the log lines by that
//! id finds all three. Failures are visible: the first line names the version, a job that goes
//! dead is one line naming its agent, transport and why, a refused operator token is a WARN with
//! the client address, and `log.access` turns on one line per request (and only then).

use serde_json::{Value, json};

use crate::helpers::{Binary, Engine, wait_for};

/// Every string value of the line's spans (the current one and its parents), by field.
fn span_fields(line: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let spans = line
        .get("spans")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for span in spans.iter().chain(line.get("span")) {
        let name = span.get("name").and_then(Value::as_str).unwrap_or("");
        if let Some(fields) = span.as_object() {
            for (k, v) in fields {
                if let Some(v) = v.as_str() {
                    out.push((name.to_owned(), k.clone(), v.to_owned()));
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_is_followed_from_ingest_to_delivery_by_its_id() {
    let db = crate::helpers::fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "http://logs.test"
[database]
url = "{}"
[log]
format = "json"
filter = "info,switchboard=debug"
[email]
enabled = false
[api]
token = "logs-token"
"#,
            db.url
        ),
    )
    .unwrap();
    let server = Binary::start(&config, None);
    let base = format!("http://{}", server.http);
    let http = reqwest::Client::new();
    let sent: Value = http
        .post(format!("{base}/api/v1/messages"))
        .bearer_auth("logs-token")
        .json(&json!({
            "external_id": "logs-1",
            "message": {
                "sender": {"address": "me@example.com", "auth_method": "none", "verified": false},
                "recipient": "@echo@logs.test",
                "parts": [{"kind": "text", "mime": "text/plain", "content": "follow me"}],
            }
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = sent["id"].as_str().unwrap().to_owned();
    let thread = sent["thread_id"].as_str().unwrap().to_owned();

    // The span each of the message's lines was logged in, once the delivery is logged.
    let selected = wait_for(30, "the delivery in the log", || async {
        let lines = server.lines.lock().unwrap();
        let mine: Vec<(String, Value)> = lines
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l)
                    .unwrap_or_else(|_| panic!("a log line that is not JSON: {l}"))
            })
            .filter_map(|l| {
                let fields = span_fields(&l);
                fields
                    .iter()
                    .any(|(_, k, v)| k == "message_id" && v == &id)
                    .then(|| {
                        let span = l["span"]["name"].as_str().unwrap_or("").to_owned();
                        (span, l.clone())
                    })
            })
            .collect();
        mine.iter().any(|(s, _)| s == "deliver").then_some(mine)
    })
    .await;
    drop(server);

    let spans: Vec<&str> = selected.iter().map(|(s, _)| s.as_str()).collect();
    for (span, message) in [
        ("ingest", "message stored"),
        ("dispatch", "agent answered"),
        ("deliver", "response delivered"),
    ] {
        let line = selected
            .iter()
            .find(|(s, l)| s == span && l["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in the {span} span: {spans:?}"));
        let fields = span_fields(&line.1);
        let has = |k: &str, v: &str| fields.iter().any(|(_, fk, fv)| fk == k && fv == v);
        assert!(
            has("thread_id", &thread),
            "{span} carries the thread: {line:?}"
        );
        assert!(
            has("transport", "api"),
            "{span} carries the transport: {line:?}"
        );
        assert!(has("agent", "echo"), "{span} carries the agent: {line:?}");
        if span != "ingest" {
            assert!(
                fields.iter().any(|(_, k, _)| k == "job_id"),
                "{span} carries its job: {line:?}"
            );
        }
    }
    // Another message's lines are not selected: the id picks this one's alone.
    assert!(
        selected
            .iter()
            .all(|(_, l)| !l.to_string().contains("logs-2")),
        "only this message's lines"
    );
}

/// The JSON log lines so far.
fn parsed(server: &Binary) -> Vec<Value> {
    server
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A server logging JSON with `log.access` as `access`, the operator API on, and a webhook agent
/// `helper` nothing answers for, whose dispatch jobs have one attempt.
fn failing_config(dir: &std::path::Path, db: &str, access: bool) -> std::path::PathBuf {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hook = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let config = dir.join(format!("switchboard-{access}.toml"));
    std::fs::write(
        &config,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "http://logs.test"
[database]
url = "{db}"
[log]
format = "json"
filter = "info"
access = {access}
[net]
allow_private_addresses = true
[email]
enabled = false
[api]
token = "logs-token-0123456789"
[queue.kinds.dispatch]
max_attempts = 1
[[agents]]
name = "helper"
backend = {{ kind = "webhook", url = "{hook}", secret = "hook-secret-0123456789" }}
"#
        ),
    )
    .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_a_dead_job_refused_tokens_and_requests_are_logged() {
    let db = crate::helpers::fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::start(&failing_config(dir.path(), &db.url, true), None);
    let base = format!("http://{}", server.http);
    let http = reqwest::Client::new();

    // The first line of `serve` names the version.
    let first = parsed(&server).into_iter().next().expect("a first line");
    assert_eq!(
        first["version"],
        env!("CARGO_PKG_VERSION"),
        "the first line names the version: {first}"
    );

    // A wrong and a missing operator token: a WARN each, with the client address.
    for (auth, token) in [(Some("not-the-token"), "wrong"), (None, "missing")] {
        let mut req = http
            .get(format!("{base}/api/v1/agents?secret=in-the-query"))
            .header("user-agent", "logs-test/1");
        if let Some(a) = auth {
            req = req.bearer_auth(a);
        }
        assert_eq!(req.send().await.unwrap().status(), 401);
        wait_for(30, "the refused token in the log", || async {
            parsed(&server)
                .into_iter()
                .find(|l| {
                    l["message"] == "operator API: authentication refused" && l["token"] == token
                })
                .map(|l| {
                    assert_eq!(l["level"], "WARN", "{l}");
                    assert_eq!(l["client"], "127.0.0.1", "{l}");
                    assert_eq!(l["path"], "/api/v1/agents", "{l}");
                })
        })
        .await;
    }

    // A message to an agent nothing answers for: its one dispatch attempt fails, and the job
    // goes dead in one line naming the job, its agent, its transport and why.
    let sent = http
        .post(format!("{base}/api/v1/messages"))
        .bearer_auth("logs-token-0123456789")
        .json(&json!({
            "external_id": "dead-1",
            "message": {
                "sender": {"address": "me@example.com", "auth_method": "none", "verified": false},
                "recipient": "@helper@logs.test",
                "parts": [{"kind": "text", "mime": "text/plain", "content": "anyone there?"}],
            }
        }))
        .send()
        .await
        .unwrap();
    assert!(sent.status().is_success(), "{}", sent.text().await.unwrap());
    let dead = wait_for(60, "the dead job in the log", || async {
        parsed(&server)
            .into_iter()
            .find(|l| l["message"] == "job dead")
    })
    .await;
    assert_eq!(dead["level"], "ERROR", "{dead}");
    assert_eq!(dead["kind"], "dispatch", "{dead}");
    assert_eq!(dead["agent"], "helper", "{dead}");
    assert_eq!(dead["transport"], "api", "{dead}");
    assert_eq!(dead["attempts"], 1, "{dead}");
    assert_eq!(dead["why"], "no attempt left", "{dead}");
    assert!(
        dead["job"].as_str().is_some_and(|j| !j.is_empty()),
        "{dead}"
    );
    assert!(
        dead["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{dead}"
    );

    // The access log: a line per request with the common fields, the query left out.
    let lines = parsed(&server);
    let access: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "switchboard::access")
        .collect();
    let refused = access
        .iter()
        .find(|l| l["path"] == "/api/v1/agents" && l["status"] == 401)
        .unwrap_or_else(|| panic!("no access line for the refused request: {access:?}"));
    assert_eq!(refused["level"], "INFO", "{refused}");
    assert_eq!(refused["method"], "GET", "{refused}");
    assert_eq!(refused["client"], "127.0.0.1", "{refused}");
    assert_eq!(refused["user_agent"], "logs-test/1", "{refused}");
    assert!(refused["duration_ms"].is_number(), "{refused}");
    assert!(refused["bytes"].is_number(), "{refused}");
    assert!(
        access
            .iter()
            .any(|l| l["path"] == "/api/v1/messages" && l["method"] == "POST"),
        "{access:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.to_string().contains("in-the-query")),
        "no line carries the query"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_log_access_no_request_is_logged() {
    let db = crate::helpers::fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::start(&failing_config(dir.path(), &db.url, false), None);
    let base = format!("http://{}", server.http);
    let http = reqwest::Client::new();
    for i in 0..2 {
        let status = http
            .get(format!("{base}/api/v1/agents"))
            .bearer_auth(format!("wrong-{i}"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401);
    }
    // The log is written in order: once the second request's refusal is in it, the access line
    // of the first would be too.
    wait_for(30, "the second refusal in the log", || async {
        let lines = parsed(&server);
        (lines
            .iter()
            .filter(|l| l["message"] == "operator API: authentication refused")
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let lines = parsed(&server);
    assert!(
        lines.iter().all(|l| l["target"] != "switchboard::access"),
        "no access line with log.access off: {lines:?}"
    );
}
