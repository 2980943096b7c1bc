//! OpenAI-compatible backend benchmark: what switchboard adds to a chat-completions call,
//! side by side in one run against calling the same server directly.
//!
//! The server is a local stub in this process (HTTP/1.1 keep-alive, a fixed completion; a
//! streamed answer sends its first chunk at once and the next ones [`GAP`] apart), so what is
//! measured is the overhead around the model, not the model. Calls alternate one by one between
//! the direct client and switchboard, so the machine's noise falls on both. Three comparisons,
//! each p50 / p90 of `BENCH_CALLS` (default 400) calls:
//!
//! - **backend**: the `openai` backend's own call (assembling the prompt, the request, parsing the
//!   answer) against a direct `POST /chat/completions` with the same messages;
//! - **A2A end to end**: a blocking A2A `SendMessage` to an agent on that backend (HTTP, ingest
//!   and its commit, the queue, the call, the response's commit, the answer) against the direct
//!   call;
//! - **A2A first chunk**: the time from sending `SendStreamingMessage` to the first artifact
//!   update carrying the model's text, against the time to the first streamed chunk of a direct
//!   streaming call.
//!
//! `cargo bench --bench llm`. SQLite in a temporary directory, `database.durability` as
//! configured (`SWITCHBOARD__…` variables apply).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard::config::{AgentConfig, BackendConfig, Secret};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Gap between streamed chunks after the first.
const GAP: Duration = Duration::from_millis(5);
/// Chunks of a streamed answer.
const CHUNKS: usize = 6;
const SYSTEM: &str = "You are a helpful agent. Answer briefly.";
const MODEL: &str = "bench-model";

fn completion() -> String {
    json!({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the stub model."},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}})
    .to_string()
}

fn chunk(i: usize) -> String {
    let finish = if i + 1 == CHUNKS {
        json!("stop")
    } else {
        Value::Null
    };
    json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": finish}]})
    .to_string()
}

/// Serves chat completions on a free port; returns it.
async fn stub() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("stub: {e}"));
    let port = listener.local_addr().map_or(0, |a| a.port());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let _ = socket.set_nodelay(true);
            tokio::spawn(serve(socket));
        }
    });
    port
}

async fn serve(socket: tokio::net::TcpStream) {
    let mut conn = BufReader::new(socket);
    let mut line = String::new();
    loop {
        let mut length = 0usize;
        loop {
            line.clear();
            match conn.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        if conn.read_exact(&mut body).await.is_err() {
            return;
        }
        let streamed = serde_json::from_slice::<Value>(&body)
            .is_ok_and(|v| v["stream"].as_bool() == Some(true));
        let socket = conn.get_mut();
        let sent = if streamed {
            stream_answer(socket).await
        } else {
            let body = completion();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            socket.write_all(format!("{head}{body}").as_bytes()).await
        };
        if sent.is_err() {
            return;
        }
    }
}

async fn stream_answer(socket: &mut tokio::net::TcpStream) -> std::io::Result<()> {
    let frame = |data: &str| {
        let event = format!("data: {data}\n\n");
        format!("{:x}\r\n{event}\r\n", event.len())
    };
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .await?;
    for i in 0..CHUNKS {
        if i > 0 {
            tokio::time::sleep(GAP).await;
        }
        socket.write_all(frame(&chunk(i)).as_bytes()).await?;
    }
    socket
        .write_all(format!("{}0\r\n\r\n", frame("[DONE]")).as_bytes())
        .await
}

/// The request the backend sends for a one-turn conversation, as a direct caller would send it.
fn direct_request(stream: bool, text: &str) -> Value {
    json!({"model": MODEL, "stream": stream, "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": format!("[Alice (alice@client.example)]: {text}")}]})
}

/// A direct call; returns the time to the whole answer, or to its first chunk when streamed.
async fn direct(client: &reqwest::Client, url: &str, stream: bool) -> Duration {
    let started = Instant::now();
    let mut resp = client
        .post(url)
        .json(&direct_request(stream, "hello benchmark"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("direct call: {e}"));
    if stream {
        let first = resp.chunk().await.unwrap_or_else(|e| panic!("{e}"));
        let took = started.elapsed();
        assert!(first.is_some_and(|c| c.starts_with(b"data:")), "no chunk");
        while resp.chunk().await.ok().flatten().is_some() {}
        took
    } else {
        let body = resp.bytes().await.unwrap_or_else(|e| panic!("{e}"));
        let took = started.elapsed();
        assert!(body.starts_with(b"{"), "no completion");
        took
    }
}

fn message(text: &str) -> switchboard::message::NormalizedMessage {
    serde_json::from_value(json!({
        "id": uuid::Uuid::now_v7().to_string(),
        "thread_id": uuid::Uuid::now_v7().to_string(),
        "sender": {"address": "alice@client.example", "display_name": "Alice",
            "auth_method": "none", "verified": false},
        "recipient": "@helper@localhost",
        "parts": [{"kind": "text", "mime": "text/plain", "content": text}],
        "recipient_capabilities": {"mention_relay": {"kind": "none"}, "formats": ["text/plain"],
            "attachments": false, "streaming": false},
        "received_via": "a2a",
        "received_at": "2026-01-02T03:04:05.678Z",
        "raw": {}
    }))
    .unwrap_or_else(|e| panic!("message: {e}"))
}

fn a2a_body(method: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
        "messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
        "parts": [{"text": "hello benchmark"}]}}})
    .to_string()
}

/// A blocking A2A `SendMessage`; the time to its completed answer.
async fn a2a_send(client: &reqwest::Client, url: &str) -> Duration {
    let started = Instant::now();
    let body = client
        .post(url)
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(a2a_body("SendMessage"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {e}"))
        .text()
        .await
        .unwrap_or_default();
    let took = started.elapsed();
    assert!(body.contains("TASK_STATE_COMPLETED"), "{body}");
    took
}

/// An A2A `SendStreamingMessage`; the time to the first artifact update with the model's text.
async fn a2a_first_chunk(client: &reqwest::Client, url: &str) -> Duration {
    let started = Instant::now();
    let mut resp = client
        .post(url)
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(a2a_body("SendStreamingMessage"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendStreamingMessage: {e}"));
    let mut seen = String::new();
    let mut first = None;
    while let Some(c) = resp.chunk().await.unwrap_or_else(|e| panic!("{e}")) {
        seen.push_str(&String::from_utf8_lossy(&c));
        if first.is_none() && seen.contains("artifactUpdate") && seen.contains("word0") {
            first = Some(started.elapsed());
        }
    }
    assert!(seen.contains("TASK_STATE_COMPLETED"), "{seen}");
    first.unwrap_or_else(|| panic!("no artifact update: {seen}"))
}

fn quantile(v: &mut [Duration], q: f64) -> f64 {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

fn report(what: &str, mut switchboard: Vec<Duration>, mut direct: Vec<Duration>) {
    let (s50, s90) = (
        quantile(&mut switchboard, 0.5),
        quantile(&mut switchboard, 0.9),
    );
    let (d50, d90) = (quantile(&mut direct, 0.5), quantile(&mut direct, 0.9));
    println!(
        "| {what} | {s50:.3} / {s90:.3} | {d50:.3} / {d90:.3} | **{:+.3}** | {:.2} |",
        s50 - d50,
        s50 / d50
    );
}

async fn start(dir: &std::path::Path, port: u16, stream: bool) -> switchboard::Application {
    let mut config = switchboard::Config::from_env(None).unwrap_or_else(|e| panic!("config: {e}"));
    config.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.email.enabled = false;
    // One caller at full speed: the built-in per-sender limit (docs/safety.md) would refuse it.
    config.limits.per_sender = Some(switchboard::config::Rate::OFF);
    config.net.allow_private_addresses = true;
    config.database.url = Secret::new(format!(
        "sqlite://{}",
        dir.join(format!("bench-{stream}.db")).display()
    ));
    config.agents = vec![AgentConfig {
        activitypub: None,
        access: None,
        name: "helper".into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::Openai {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            model: MODEL.into(),
            api_key_env: None,
            system_prompt: Some(SYSTEM.into()),
            stream,
            max_tokens: None,
            temperature: None,
            timeout_ms: 10_000,
            api_key: None,
        },
        email: None,
        a2a: None,
        notify: Vec::new(),
    }];
    switchboard::Application::build(config)
        .await
        .unwrap_or_else(|e| panic!("switchboard: {e}"))
}

fn main() {
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
        .block_on(bench(calls));
}

async fn bench(calls: usize) {
    let port = stub().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let whole = start(dir.path(), port, false).await;
    let streamed = start(dir.path(), port, true).await;
    let direct_url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let client = reqwest::Client::new();
    let agent = whole
        .pipeline()
        .agents()
        .get("helper")
        .unwrap_or_else(|| panic!("no agent"));
    let whole_url = format!("http://{}/agents/helper/a2a", whole.http_addr());
    let streamed_url = format!("http://{}/agents/helper/a2a", streamed.http_addr());
    // Warm up every path (connections, statement caches).
    for _ in 0..20 {
        direct(&client, &direct_url, false).await;
        direct(&client, &direct_url, true).await;
        let _ = agent.backend.respond(&message("warm up")).await;
        a2a_send(&client, &whole_url).await;
        a2a_first_chunk(&client, &streamed_url).await;
    }
    let (mut backend, mut a2a, mut first) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain, mut plain2, mut chunked) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..calls {
        let msg = message("hello benchmark");
        let started = Instant::now();
        let answer = agent.backend.respond(&msg).await;
        backend.push(started.elapsed());
        assert!(
            answer.is_ok_and(|a| a.is_some()),
            "the backend answered nothing"
        );
        plain.push(direct(&client, &direct_url, false).await);
        a2a.push(a2a_send(&client, &whole_url).await);
        plain2.push(direct(&client, &direct_url, false).await);
        first.push(a2a_first_chunk(&client, &streamed_url).await);
        chunked.push(direct(&client, &direct_url, true).await);
    }
    println!(
        "{calls} calls each, alternating; streamed answers: {CHUNKS} chunks {} ms apart",
        GAP.as_millis()
    );
    println!();
    println!(
        "| path | switchboard p50 / p90 (ms) | direct p50 / p90 (ms) | added p50 (ms) | ratio |"
    );
    println!("|---|---|---|---|---|");
    report("backend call (`openai`, whole answer)", backend, plain);
    report("A2A SendMessage, end to end", a2a, plain2);
    report("A2A SendStreamingMessage, first chunk", first, chunked);
    whole.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
    streamed.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
}
