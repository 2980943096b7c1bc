//! How an agent's turn shows on an A2A task. It always reaches a terminal state: when the agent
//! has nothing to say (a webhook answering 204) the task completes without artifacts, and when
//! its dispatch fails for good (a webhook answering 400) the task fails with a status message that
//! tells nothing internal. An agent that streams its answer (a webhook answering with an event
//! stream of deltas) shows it as artifact chunks while it writes, ended by its final answer or,
//! when the turn ends otherwise, by an empty last chunk; also through another switchboard agent
//! whose backend is that agent over A2A.

use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use switchboard::config::{AgentConfig, BackendConfig, Secret};

use crate::helpers::{Engine, TestApp, on_both_engines, serve_route, spawn_app};

/// The agent behind the webhook: 204 to `silent`, 400 to `broken`, an event stream of three
/// deltas and `done` to `streamer`, the same ending in a question to `asker`.
async fn hook(req: HttpRequest, _body: web::Bytes) -> HttpResponse {
    let done = match req.match_info().get("mode") {
        Some("silent") => return HttpResponse::NoContent().finish(),
        Some("streamer") => r#"{"type":"done","response":{"parts":[]}}"#,
        Some("asker") => r#"{"type":"done","response":{"parts":[],"state":"input_required"}}"#,
        _ => return HttpResponse::BadRequest().body("no such thing"),
    };
    let events = [
        r#"{"type":"delta","text":"Hel"}"#,
        r#"{"type":"delta","text":"lo, "}"#,
        r#"{"type":"delta","text":"world"}"#,
        done,
    ];
    // One event per chunk, a little apart, as a model writes.
    let stream = futures_util::stream::iter(events).then(|e| async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        Ok::<_, actix_web::Error>(web::Bytes::from(format!("data: {e}\n\n")))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .streaming(stream)
}

/// A switchboard whose agents `names` are each the webhook `{hooks}/{name}`.
async fn with_hooks(engine: Engine, hooks: &str, names: &'static [&'static str]) -> TestApp {
    let hooks = hooks.to_owned();
    spawn_app(engine, move |c, _| {
        for name in names {
            c.agents.push(AgentConfig {
                activitypub: None,
                access: None,
                name: (*name).into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Webhook {
                    url: format!("{hooks}/{name}"),
                    secret: Secret::new("s"),
                    timeout_ms: 5_000,
                    assembled: false,
                },
                a2a: None,
                email: None,
                notify: Vec::new(),
            });
        }
    })
    .await
}

async fn send(t: &TestApp, agent: &str, method: &str) -> reqwest::Response {
    t.http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
            "messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
            "parts": [{"text": "hello?"}]}}}),
        )
        .send()
        .await
        .unwrap()
}

/// A streaming send to `agent`: the body, and the `result` of each event in order.
async fn stream(t: &TestApp, agent: &str) -> (String, Vec<Value>) {
    let body = send(t, agent, "SendStreamingMessage")
        .await
        .text()
        .await
        .unwrap();
    let events = body
        .split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["result"].clone())
        .collect();
    (body, events)
}

async fn unanswered_tasks_still_end(engine: Engine) {
    let url = serve_route!((), post, "/{mode}", hook);
    let base = url.trim_end_matches("/{mode}").to_owned();
    let t = with_hooks(engine, &base, &["silent", "broken", "streamer"]).await;

    // Nothing to say: the blocking send returns the task completed, with no artifact.
    let r: Value = send(&t, "silent", "SendMessage")
        .await
        .json()
        .await
        .unwrap();
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert!(
        task.get("artifacts")
            .is_none_or(|a| a.as_array().unwrap().is_empty()),
        "{r}"
    );

    // A permanent failure: the task fails and says only that the agent could not answer.
    let r: Value = send(&t, "broken", "SendMessage")
        .await
        .json()
        .await
        .unwrap();
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let said = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(said.contains("could not answer"), "{said}");
    assert!(
        !r.to_string().contains("no such thing"),
        "nothing internal leaks: {r}"
    );
    let id = task["id"].as_str().unwrap().to_owned();
    let got: Value = t
        .http
        .post(format!("{}/agents/broken/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_FAILED",
        "{got}"
    );

    // A stream ends with the final status.
    let (body, events) = stream(&t, "silent").await;
    assert_eq!(
        events.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{body}"
    );
}

on_both_engines!(unanswered_tasks_still_end);

async fn streamed_answers_arrive_as_artifact_chunks(engine: Engine) {
    let url = serve_route!((), post, "/{mode}", hook);
    let base = url.trim_end_matches("/{mode}").to_owned();
    let t = with_hooks(engine, &base, &["streamer", "asker"]).await;

    let (body, events) = stream(&t, "streamer").await;
    let chunks: Vec<&Value> = events
        .iter()
        .filter_map(|e| e.get("artifactUpdate"))
        .collect();
    assert_eq!(
        chunks.len(),
        4,
        "three deltas and the final artifact: {body}"
    );
    let id = &chunks[0]["artifact"]["artifactId"];
    let text = |c: &Value| {
        c["artifact"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let shape = |c: &Value| {
        (
            c["append"].as_bool().unwrap(),
            c["lastChunk"].as_bool().unwrap(),
        )
    };
    assert_eq!(
        chunks.iter().map(|c| text(c)).collect::<Vec<_>>(),
        ["Hel", "lo, ", "world", "Hello, world"]
    );
    assert_eq!(
        chunks.iter().map(|c| shape(c)).collect::<Vec<_>>(),
        [(false, false), (true, false), (true, false), (false, true)],
        "chunks append; the final artifact replaces them and is the last"
    );
    assert!(
        chunks.iter().all(|c| &c["artifact"]["artifactId"] == id),
        "{body}"
    );
    assert_eq!(
        events.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{body}"
    );

    // A blocking send gets the finished task: one artifact with the whole text.
    let r: Value = send(&t, "streamer", "SendMessage")
        .await
        .json()
        .await
        .unwrap();
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let artifacts = task["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1, "{r}");
    assert_eq!(artifacts[0]["parts"][0]["text"], "Hello, world", "{r}");
    assert!(
        task.get("_streaming").is_none(),
        "bookkeeping is not shown: {r}"
    );

    // A turn that ends in a question still ends its artifact: an empty last chunk, appended,
    // and the whole text is the status message.
    let (body, events) = stream(&t, "asker").await;
    let chunks: Vec<&Value> = events
        .iter()
        .filter_map(|e| e.get("artifactUpdate"))
        .collect();
    assert_eq!(
        chunks.iter().map(|c| text(c)).collect::<Vec<_>>(),
        ["Hel", "lo, ", "world", ""],
        "{body}"
    );
    assert_eq!(
        chunks.iter().map(|c| shape(c)).collect::<Vec<_>>(),
        [(false, false), (true, false), (true, false), (true, true)],
        "{body}"
    );
    assert_eq!(
        chunks[3]["artifact"]["artifactId"], chunks[0]["artifact"]["artifactId"],
        "{body}"
    );
    let status = &events.last().unwrap()["statusUpdate"]["status"];
    assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED", "{body}");
    assert_eq!(
        status["message"]["parts"][0]["text"], "Hello, world",
        "{body}"
    );
}

on_both_engines!(streamed_answers_arrive_as_artifact_chunks);

/// A switchboard agent whose backend is another A2A agent (here: the streaming agent on a
/// second switchboard) passes the remote's chunks on as they come, each once.
async fn remote_chunks_are_passed_on(engine: Engine) {
    let url = serve_route!((), post, "/{mode}", hook);
    let base = url.trim_end_matches("/{mode}").to_owned();
    let remote = with_hooks(engine, &base, &["streamer"]).await;
    let card = format!("{}/agents/streamer/agent-card.json", remote.base);
    let t = spawn_app(engine, move |c, _| {
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "proxy".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::A2a {
                card,
                token: None,
                timeout_ms: 5_000,
                streaming: true,
                require_signed_card: false,
                card_keys: vec![],
            },
            a2a: None,
            email: None,
            notify: Vec::new(),
        });
    })
    .await;
    let (body, events) = stream(&t, "proxy").await;
    let updates: Vec<&Value> = events
        .iter()
        .filter_map(|e| e.get("artifactUpdate"))
        .collect();
    let chunks: Vec<(String, bool, bool)> = updates
        .iter()
        .map(|u| {
            (
                u["artifact"]["parts"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                u["append"].as_bool().unwrap(),
                u["lastChunk"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        chunks,
        [
            ("Hel".to_owned(), false, false),
            ("lo, ".to_owned(), true, false),
            ("world".to_owned(), true, false),
            ("Hello, world".to_owned(), false, true),
        ],
        "the remote's chunks once each, in order, then the whole: {body}"
    );
}

on_both_engines!(remote_chunks_are_passed_on);
