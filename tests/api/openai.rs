//! The OpenAI-compatible agent against a chat-completions endpoint on a real socket, which
//! records each request as it arrived: the exact body (model, the assembled messages, stream,
//! max_tokens, temperature) and the Authorization header; streamed deltas reaching an A2A
//! caller as they are written; tool calls as `tool_call` parts; the SSRF guard on `base_url`;
//! 429 with `Retry-After` retried after the wait it asked for; a 400 dead with the provider's
//! error class only; and the API key in no log line, no `check-config` output and no error. The
//! same agent against a real OpenAI-compatible server (the LiteLLM proxy) is in `llm_interop`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use switchboard::config::{AgentConfig, BackendConfig, Secret};
use switchboard::message::Part;
use switchboard::store::jobs;

use crate::helpers::{
    Binary, Engine, TestApp, a2a_stream_artifacts, message, on_both_engines, serve_route,
    spawn_app, wait_for,
};

const KEY: &str = "sk-test-9f8e7d6c5b4a39281706";

/// What the endpoint answers to one call.
#[derive(Clone)]
enum Reply {
    /// An event stream: each string one `data:` event, a little apart, then `[DONE]`.
    Stream(Vec<Value>),
    /// A whole answer.
    Json(Value),
    /// A refusal with this status and body, and a `Retry-After` when given.
    Refuse(u16, Value, Option<u64>),
}

/// One recorded call: the path, the Authorization header and the body.
type Call = (String, Option<String>, Value);

#[derive(Default)]
struct Llm {
    script: Mutex<VecDeque<Reply>>,
    calls: Mutex<Vec<Call>>,
}

async fn completions(llm: web::Data<Arc<Llm>>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let auth = req
        .headers()
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned());
    let parsed: Value = serde_json::from_slice(&body).unwrap();
    llm.calls
        .lock()
        .unwrap()
        .push((req.path().to_owned(), auth, parsed));
    let reply = llm.script.lock().unwrap().pop_front();
    match reply.unwrap_or_else(|| Reply::Json(answer("(unscripted)"))) {
        Reply::Json(v) => HttpResponse::Ok().json(v),
        Reply::Refuse(status, body, retry_after) => {
            let mut r = HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap());
            if let Some(s) = retry_after {
                r.insert_header(("Retry-After", s.to_string()));
            }
            r.json(body)
        }
        Reply::Stream(chunks) => {
            let events = chunks
                .into_iter()
                .map(|c| c.to_string())
                .chain(["[DONE]".to_owned()]);
            let stream = futures_util::stream::iter(events).then(|e| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, actix_web::Error>(web::Bytes::from(format!("data: {e}\n\n")))
            });
            HttpResponse::Ok()
                .content_type("text/event-stream")
                .streaming(stream)
        }
    }
}

/// A whole chat completion saying `text`.
fn answer(text: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
           "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text}}]})
}

/// A streamed chunk with this delta.
fn chunk(delta: Value) -> Value {
    json!({"id": "chatcmpl-2", "object": "chat.completion.chunk", "model": "m",
           "choices": [{"index": 0, "delta": delta}]})
}

/// The text `Hel` `lo` `, world` then a tool call `search {"q":"rust"}` in two pieces.
fn streamed_answer() -> Vec<Value> {
    vec![
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"content": "Hel"})),
        chunk(json!({"content": "lo"})),
        chunk(json!({"content": ", world"})),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                                     "function": {"name": "search", "arguments": "{\"q\":"}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"rust\"}"}}]})),
        json!({"id": "chatcmpl-2", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ]
}

async fn start_llm(script: Vec<Reply>) -> (Arc<Llm>, String) {
    let llm = Arc::new(Llm {
        script: Mutex::new(script.into()),
        ..Llm::default()
    });
    let url = serve_route!(llm.clone(), post, "/v1/chat/completions", completions);
    (llm, url.trim_end_matches("/chat/completions").to_owned())
}

fn openai(base_url: &str, stream: bool) -> BackendConfig {
    BackendConfig::Openai {
        base_url: base_url.to_owned(),
        model: "mock-model".into(),
        api_key_env: Some("SB_TEST_LLM_KEY".into()),
        system_prompt: Some("You are terse.".into()),
        stream,
        max_tokens: Some(64),
        temperature: Some(0.25),
        timeout_ms: 5_000,
        api_key: Some(Secret::new(KEY)),
    }
}

async fn with_llm(engine: Engine, backend: BackendConfig) -> TestApp {
    with_llm_and(engine, backend, |_| {}).await
}

async fn with_llm_and(
    engine: Engine,
    backend: BackendConfig,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> TestApp {
    spawn_app(engine, move |c, _| {
        // Backoff alone would retry within 500 ms; a server's Retry-After may ask for longer.
        c.queue.backoff_max_ms = 60_000;
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "llm".into(),
            display_name: None,
            summary: None,
            backend,
            a2a: None,
            email: None,
            notify: Vec::new(),
        });
        tweak(c);
    })
    .await
}

/// The request is exactly what the configuration and the assembly say; a streamed answer
/// reaches an A2A caller as it is written, its tool call as a part of the final answer.
async fn openai_request_and_streamed_answer(engine: Engine) {
    let (llm, base) = start_llm(vec![
        Reply::Stream(streamed_answer()),
        Reply::Stream(streamed_answer()),
    ])
    .await;
    let mut t = with_llm(engine, openai(&base, true)).await;

    // An A2A caller holding a stream sees the deltas as artifact chunks, then the tool call,
    // before the final answer (the last chunk).
    let (body, updates) = a2a_stream_artifacts(&t, "llm", "hello?").await;
    let chunks: Vec<Value> = updates
        .iter()
        .filter(|u| u["lastChunk"] == false)
        .map(|u| u["artifact"]["parts"][0].clone())
        .collect();
    assert_eq!(chunks.len(), 4, "{body}");
    let texts: Vec<&str> = chunks[..3]
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hel", "lo", ", world"], "{body}");
    assert!(
        chunks[3]["text"].is_null() && chunks[3].to_string().contains("search"),
        "the tool call, once complete: {}",
        chunks[3]
    );

    let (path, auth, req) = llm.calls.lock().unwrap()[0].clone();
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(auth.as_deref(), Some(&*format!("Bearer {KEY}")));
    let keys: Vec<&String> = req.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["max_tokens", "messages", "model", "stream", "temperature"]
    );
    assert_eq!(req["model"], "mock-model");
    assert_eq!(req["stream"], true);
    assert_eq!(req["max_tokens"], 64);
    assert_eq!(req["temperature"], 0.25);
    let messages = req["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{req}");
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(messages[1]["role"], "user");
    let user = messages[1]["content"].as_str().unwrap();
    assert!(
        user.starts_with('[') && user.ends_with("]: hello?"),
        "the caller's text, attributed: {user}"
    );

    // Through a transport that takes no progress, the whole answer: text and the tool call.
    t.ingest("o-1", message(&t.agent("llm"), "k", "again"))
        .await;
    wait_for(20, "the delivery", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    let parts = t.transport.delivered()[0].response.parts.clone();
    assert_eq!(
        serde_json::to_value(&parts).unwrap(),
        json!([{"kind": "text", "mime": "text/markdown", "content": "Hello, world"},
               {"kind": "tool_call", "id": "call_7", "name": "search", "args": {"q": "rust"}}]),
        "the tool call is passed on, not executed"
    );
    t.stop().await;
}
on_both_engines!(openai_request_and_streamed_answer);

/// `stream = false`: a whole answer, with its tool calls.
async fn openai_whole_answer(engine: Engine) {
    let (llm, base) = start_llm(vec![Reply::Json(json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Looking it up.",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "lookup", "arguments": "{\"id\":7}"}}]}}]}))])
    .await;
    let mut t = with_llm(engine, openai(&base, false)).await;
    t.ingest("w-1", message(&t.agent("llm"), "k", "look up 7"))
        .await;
    wait_for(20, "the delivery", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    assert_eq!(llm.calls.lock().unwrap()[0].2["stream"], false);
    let parts = t.transport.delivered()[0].response.parts.clone();
    assert!(matches!(&parts[0], Part::Text(x) if x.content == "Looking it up."));
    assert!(
        matches!(&parts[1], Part::ToolCall(c) if c.name == "lookup" && c.args["id"] == 7 && c.result.is_none())
    );
    t.stop().await;
}
on_both_engines!(openai_whole_answer);

/// A 429 is retried after the `Retry-After` it carries; a 400 ends the job with the status and
/// the error class, never the provider's message.
async fn openai_failures(engine: Engine) {
    let (llm, base) = start_llm(vec![
        Reply::Refuse(
            429,
            json!({"error": {"message": "Rate limit reached for org-secret", "type": "rate_limit_exceeded"}}),
            Some(2),
        ),
        Reply::Json(answer("after the wait")),
        Reply::Refuse(
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
            None,
        ),
    ])
    .await;
    let mut t = with_llm(engine, openai(&base, true)).await;
    t.ingest("f-1", message(&t.agent("llm"), "k1", "one")).await;
    let db = t.open_db().await;
    let waiting = wait_for(20, "the job back in the queue", || async {
        jobs::list(&db, Some("ready"), Some("dispatch"), 1)
            .await
            .unwrap()
            .pop()
            .filter(|j| j.attempts == 1)
    })
    .await;
    let err = waiting.last_error.unwrap();
    assert!(err.contains("HTTP 429 rate_limit_exceeded"), "{err}");
    assert!(!err.contains("org-secret"), "{err}");
    assert!(
        waiting.run_at - waiting.updated_at >= 2_000,
        "the wait the server asked for"
    );
    wait_for(20, "the answer after the wait", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    assert_eq!(llm.calls.lock().unwrap().len(), 2);

    t.ingest("f-2", message(&t.agent("llm"), "k2", "two")).await;
    let dead = wait_for(20, "the dead job", || async {
        jobs::list(&db, Some("dead"), Some("dispatch"), 1)
            .await
            .unwrap()
            .pop()
    })
    .await;
    assert_eq!(dead.attempts, 1, "a 400 is not retried");
    let err = dead.last_error.unwrap();
    assert!(err.ends_with("HTTP 400 invalid_request_error"), "{err}");
    assert!(
        !err.contains("context length") && !err.contains(KEY),
        "{err}"
    );
    t.stop().await;
}
on_both_engines!(openai_failures);

/// `base_url` goes through the SSRF guard like every outbound call: with the development
/// switch off, a server on loopback is refused before any connection, for good.
async fn openai_base_url_is_guarded(engine: Engine) {
    let (llm, base) = start_llm(vec![Reply::Json(answer("never"))]).await;
    let mut t = with_llm_and(engine, openai(&base, true), |c| {
        c.net.allow_private_addresses = false;
    })
    .await;
    t.ingest("g-1", message(&t.agent("llm"), "k", "hi")).await;
    let db = t.open_db().await;
    let dead = wait_for(20, "the dead job", || async {
        jobs::list(&db, Some("dead"), Some("dispatch"), 1)
            .await
            .unwrap()
            .pop()
    })
    .await;
    let err = dead.last_error.unwrap();
    assert!(err.contains("SSRF"), "{err}");
    assert_eq!(dead.attempts, 1, "a refusal is permanent");
    assert!(llm.calls.lock().unwrap().is_empty(), "nothing reached it");
    t.stop().await;
}
on_both_engines!(openai_base_url_is_guarded);

/// The real binary, its key from the variable `api_key_env` names: a failed and a successful
/// call at debug level leave the key in no log line, and `check-config` never shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_never_shows() {
    let (llm, base) = start_llm(vec![
        Reply::Refuse(
            401,
            json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "invalid_request_error", "code": "invalid_api_key"}}),
            None,
        ),
        Reply::Stream(streamed_answer()),
    ])
    .await;
    let db = crate::helpers::fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "http://llm.test"
[database]
url = "{}"
[log]
format = "json"
filter = "trace"
[email]
enabled = false
[net]
allow_private_addresses = true
[api]
token = "api-token-of-the-key-test"
[[agents]]
name = "llm"
backend = {{ kind = "openai", base_url = "{base}", model = "mock-model", api_key_env = "SB_TEST_LLM_KEY", stream = true, timeout_ms = 5000 }}
"#,
            db.url
        ),
    )
    .unwrap();

    let check = |with_key: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
        c.args(["--config", config.to_str().unwrap(), "check-config"]);
        c.env_remove("SB_TEST_LLM_KEY");
        if with_key {
            c.env("SB_TEST_LLM_KEY", KEY);
        }
        let out = c.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = check(true);
    assert!(ok, "{text}");
    assert!(!text.contains(KEY), "{text}");
    let (ok, text) = check(false);
    assert!(
        !ok && text.contains("SB_TEST_LLM_KEY") && text.contains("not set"),
        "{text}"
    );

    let server = Binary::start_with_env(&config, &[("SB_TEST_LLM_KEY", KEY)]);
    let http = reqwest::Client::new();
    for n in 1..=2 {
        let status = http
            .post(format!("http://{}/api/v1/messages", server.http))
            .bearer_auth("api-token-of-the-key-test")
            .json(&json!({"external_id": format!("key-{n}"), "message": {
                "sender": {"address": "me@example.com", "auth_method": "none", "verified": false},
                "recipient": "@llm@llm.test",
                "parts": [{"kind": "text", "mime": "text/plain", "content": format!("turn {n}")}]}}))
            .send()
            .await
            .unwrap()
            .status();
        assert!(status.is_success(), "{status}");
        wait_for(20, "the call's outcome in the log", || async {
            let seen = if n == 1 {
                server.logged("HTTP 401 invalid_request_error")
            } else {
                server.logged("agent answered")
            };
            (!seen.is_empty()).then_some(())
        })
        .await;
    }
    assert_eq!(
        llm.calls.lock().unwrap()[1].1.as_deref(),
        Some(&*format!("Bearer {KEY}")),
        "the key was sent"
    );
    let lines = server.lines.lock().unwrap().clone();
    assert!(lines.len() > 10, "a trace-level log: {lines:?}");
    for line in &lines {
        assert!(!line.contains(KEY), "the key in the log: {line}");
        assert!(
            !line.contains("Incorrect API key"),
            "provider text in the log: {line}"
        );
    }
}
