//! One message can be followed through the JSON log: the real binary logs its ingest, its
//! dispatch and its delivery inside spans that carry its id, and selecting the log lines by that
//! id finds all three.

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
