//! OpenTelemetry: the real `switchboard` binary exports its spans to a real OTLP/HTTP receiver
//! (tests/peers/otlp/receiver.py, decoding with the `opentelemetry-proto` package), and the
//! W3C `traceparent` joins one trace across the caller, switchboard and the agent. One message
//! sent through the operator API with the caller's `traceparent` to a chat-model agent gives one
//! tree under the caller's span — the request (`POST /api/v1/messages`) → `ingest` →
//! `dispatch` → (`agent_call`, `deliver`) — while the model's request and the API callback
//! carry the `traceparent` of the span that made them; a webhook agent's request does the same.
//! The `usage` the model reports is counted in `switchboard_llm_tokens_total` and recorded on
//! the call's span.

use std::collections::HashMap;
use std::io::BufRead as _;
use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use crate::helpers::{Binary, Engine, fresh_db, interop, wait_for};

/// The request span's exported name: the method and the route.
const REQUEST: &str = "POST /api/v1/messages";

/// The OTLP receiver, its spans collected as they are printed. Killed when dropped.
struct Receiver {
    child: std::process::Child,
    url: String,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let python = std::env::var("SWITCHBOARD_OTLP_PYTHON")
            .expect("SWITCHBOARD_OTLP_PYTHON (scripts/peers/otlp.sh) names the receiver's python");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/otlp/receiver.py");
        let mut child = std::process::Command::new(python)
            .arg(script)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let url = first["listening"].as_str().unwrap().to_owned();
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let sink = Arc::clone(&spans);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Receiver { child, url, spans }
    }

    /// The spans of `trace_id` received so far, by name.
    fn trace(&self, trace_id: &str) -> HashMap<String, Value> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s["trace_id"] == trace_id)
            .map(|s| (s["name"].as_str().unwrap().to_owned(), s.clone()))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agents' side: a chat-completions endpoint answering with a `usage`, a webhook agent with
/// nothing to say and the API's callback, each request's path and `traceparent` recorded.
#[derive(Default)]
struct Far {
    calls: Mutex<Vec<(String, Option<String>)>>,
}

async fn far_end(far: web::Data<Arc<Far>>, req: HttpRequest) -> HttpResponse {
    let traceparent = req
        .headers()
        .get("traceparent")
        .map(|v| v.to_str().unwrap().to_owned());
    let path = req.path().to_owned();
    far.calls.lock().unwrap().push((path.clone(), traceparent));
    match path.as_str() {
        "/v1/chat/completions" => HttpResponse::Ok().json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "mock-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "traced"}}],
            "usage": {"prompt_tokens": 17, "completion_tokens": 4, "total_tokens": 21}
        })),
        "/hook" => HttpResponse::NoContent().finish(),
        _ => HttpResponse::Ok().finish(),
    }
}

fn config(dir: &std::path::Path, db_url: &str, far: &str, collector: &str) -> std::path::PathBuf {
    let path = dir.join("switchboard.toml");
    std::fs::write(
        &path,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "https://sb.example"
[database]
url = "{db_url}"
[log]
format = "json"
[telemetry]
otlp_endpoint = "{collector}"
service_name = "switchboard-test"
flush_ms = 100
[net]
allow_private_addresses = true
[api]
token = "secret"
callback_url = "{far}/callback"
[email]
enabled = false
[activitypub]
enabled = false
[[agents]]
name = "llm"
backend = {{ kind = "openai", base_url = "{far}/v1", model = "mock-model", stream = false, timeout_ms = 5000 }}
[[agents]]
name = "hook"
backend = {{ kind = "webhook", url = "{far}/hook", secret = "hook-secret", timeout_ms = 5000 }}
"#
        ),
    )
    .unwrap();
    path
}

/// Sends `text` to `agent` through the operator API as a caller in trace `trace_id`, its span
/// `caller_span`; returns the stored message's id.
async fn send(
    server: &Binary,
    agent: &str,
    text: &str,
    trace_id: &str,
    caller_span: &str,
) -> String {
    let resp = reqwest::Client::new()
        .post(format!("http://{}/api/v1/messages", server.http))
        .bearer_auth("secret")
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&json!({
            "external_id": format!("otel-{agent}"),
            "message": {
                "sender": {"address": "me@example.com", "auth_method": "none", "verified": false},
                "recipient": format!("@{agent}@sb.example"),
                "parts": [{"kind": "text", "mime": "text/plain", "content": text}]
            }
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202, "the message is accepted");
    let v: Value = resp.json().await.unwrap();
    v["id"].as_str().unwrap().to_owned()
}

/// `00-{trace}-{span}-{flags}` split into its trace and span ids.
fn ids(traceparent: &str) -> (String, String) {
    let f: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(f.len(), 4, "a traceparent has four fields: {traceparent}");
    (f[1].to_owned(), f[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_is_one_trace_from_the_caller_through_the_agent() {
    if !interop("OTLP receiver (opentelemetry-proto)") {
        return;
    }
    let receiver = Receiver::start();
    let far = Arc::new(Far::default());
    let far_url = {
        let data = Arc::clone(&far);
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(web::Data::new(data.clone()))
                .default_service(web::to(far_end))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
        let url = format!("http://{}", server.addrs()[0]);
        tokio::spawn(server.run());
        url
    };
    let db = fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::start(&config(dir.path(), &db.url, &far_url, &receiver.url), None);

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    send(&server, "llm", "hello, model", trace, caller).await;

    // The whole tree arrives at the receiver: the delivery's span closes last.
    let mut spans = receiver.trace(trace);
    for _ in 0..300 {
        if [REQUEST, "ingest", "dispatch", "agent_call", "deliver"]
            .iter()
            .all(|n| spans.contains_key(*n))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        spans = receiver.trace(trace);
    }
    assert!(
        [REQUEST, "ingest", "dispatch", "agent_call", "deliver"]
            .iter()
            .all(|n| spans.contains_key(*n)),
        "the message's whole trace at the receiver: {:?}\nall spans: {:?}\nfar end: {:?}\nlog: {:?}",
        spans.keys().collect::<Vec<_>>(),
        receiver.spans.lock().unwrap(),
        far.calls.lock().unwrap(),
        server.lines.lock().unwrap().len()
    );
    let id = |name: &str| spans[name]["span_id"].as_str().unwrap().to_owned();
    let parent = |name: &str| spans[name]["parent_span_id"].as_str().unwrap().to_owned();
    assert_eq!(
        parent(REQUEST),
        caller,
        "the request continues the caller's span"
    );
    assert_eq!(parent("ingest"), id(REQUEST), "ingest runs in the request");
    assert_eq!(
        parent("dispatch"),
        id("ingest"),
        "the dispatch job carried ingest's context"
    );
    assert_eq!(
        parent("agent_call"),
        id("dispatch"),
        "the backend is called by the dispatch"
    );
    assert_eq!(
        parent("deliver"),
        id("dispatch"),
        "the deliver job carried the dispatch's context"
    );
    for s in spans.values() {
        assert_eq!(s["service"], "switchboard-test", "service.name: {s}");
        assert!(
            s["end"].as_u64() >= s["start"].as_u64(),
            "a span ends after it starts: {s}"
        );
    }
    assert_eq!(spans[REQUEST]["kind"], 2, "the request is a server span");
    assert_eq!(
        spans["agent_call"]["kind"], 3,
        "the backend call is a client span"
    );
    assert_eq!(
        spans[REQUEST]["attributes"]["http.route"], "/api/v1/messages",
        "the request's route"
    );
    let call = &spans["agent_call"]["attributes"];
    assert_eq!(call["agent"], "llm", "the call's agent");
    assert_eq!(
        call["gen_ai.request.model"], "mock-model",
        "the call's model"
    );
    assert_eq!(
        call["gen_ai.usage.input_tokens"], 17,
        "the prompt's tokens on the span"
    );
    assert_eq!(
        call["gen_ai.usage.output_tokens"], 4,
        "the answer's tokens on the span"
    );

    // The model's request and the callback carried the context of the span that made them.
    let sent = |path: &str| -> (String, String) {
        let calls = far.calls.lock().unwrap();
        let (_, tp) = calls
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("no request to {path}: {calls:?}"));
        ids(tp
            .as_deref()
            .unwrap_or_else(|| panic!("{path} got no traceparent")))
    };
    assert_eq!(
        sent("/v1/chat/completions"),
        (trace.to_owned(), id("agent_call")),
        "the model's request"
    );
    assert_eq!(
        sent("/callback"),
        (trace.to_owned(), id("deliver")),
        "the API callback"
    );

    // A webhook agent's request too, in its own caller's trace.
    let hook_trace = "0af7651916cd43dd8448eb211c80319c";
    send(
        &server,
        "hook",
        "hello, hook",
        hook_trace,
        "b7ad6b7169203331",
    )
    .await;
    let hook = wait_for(30, "the webhook call's span", || async {
        receiver.trace(hook_trace).get("agent_call").cloned()
    })
    .await;
    assert_eq!(
        sent("/hook"),
        (
            hook_trace.to_owned(),
            hook["span_id"].as_str().unwrap().to_owned()
        ),
        "the webhook's request"
    );

    // The tokens are counted, and so are the exported spans.
    let metrics = reqwest::get(format!("http://{}/metrics", server.metrics_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"switchboard_llm_tokens_total{agent="llm",model="mock-model",kind="prompt"} 17"#,
        r#"switchboard_llm_tokens_total{agent="llm",model="mock-model",kind="completion"} 4"#,
    ] {
        assert!(metrics.contains(line), "{line} in the metrics:\n{metrics}");
    }
    // The console's agents page shows them over 24 hours, from the database.
    let page = reqwest::get(format!("http://{}/console", server.metrics_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Tokens (24 h)") && page.contains("21 (17 prompt, 4 completion)"),
        "the agents page shows the tokens: {page}"
    );
    let exported = metrics
        .lines()
        .find(|l| l.starts_with(r#"switchboard_otlp_spans_total{outcome="exported"}"#))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(exported >= 5, "the exported spans are counted:\n{metrics}");
}
