//! What the pipeline benchmarks share: the messages they hand to `Pipeline::ingest`, the callers
//! that hand them over, and the CPU time of the PostgreSQL server.

#![allow(dead_code)]

use std::sync::Arc;

use switchboard::app::Options;
use switchboard::config::{Durability, Secret};
use switchboard::message::NormalizedMessage;
use switchboard::transports::memory::MemoryTransport;
use switchboard::{Application, Config};

/// A switchboard for these benchmarks on the database at `url`: the default configuration
/// (`SWITCHBOARD__…` variables tune it), listeners on port 0, email off, the echo agent's
/// responses delivered to a counting no-op transport (returned), and the echo agent's address.
pub async fn app(
    url: &str,
    durability: Durability,
    caches: bool,
) -> (Application, Arc<MemoryTransport>, String) {
    let sink = Arc::new(MemoryTransport::counting("bench"));
    let mut config = Config::from_env(None).unwrap_or_else(|e| panic!("configuration: {e}"));
    config.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!());
    config.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!());
    config.email.enabled = false;
    config.database.url = Secret::new(url);
    config.database.durability = Some(durability);
    config.queue.poll_interval_ms = 100;
    let opts = Options {
        transports: vec![sink.clone()],
        caches,
        ..Options::default()
    };
    let app = Application::build_with(config, opts)
        .await
        .unwrap_or_else(|e| panic!("switchboard on {url}: {e}"));
    let to = format!("@echo@{}", app.config().domain().unwrap_or_default());
    (app, sink, to)
}

/// CPU time of every PostgreSQL server process on this machine, in microseconds.
pub fn postgres_cpu_micros() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| stat.contains("(postgres)"))
        .map(|stat| {
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r).to_owned();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
            (field(11) + field(12)) * 10_000
        })
        .sum()
}

/// How messages spread over threads.
#[derive(Clone, Copy)]
pub enum Threads {
    /// Every message opens a thread (no history to load).
    New,
    /// 500 threads: each message continues one, so history is loaded and trimmed.
    Shared,
}

/// Message `i` of a run to `recipient`: about 1.5 KB of JSON, as a verified fediverse sender's.
pub fn message(recipient: &str, i: usize, threads: Threads) -> NormalizedMessage {
    let thread = match threads {
        Threads::New => i,
        Threads::Shared => i % 500,
    };
    serde_json::from_value(serde_json::json!({
        "id": uuid::Uuid::now_v7().to_string(),
        "thread_id": format!("bench-thread-{thread}"),
        "sender": {"address": "@alice@remote.example", "auth_method": "ap-http-signature", "verified": true,
                   "identities": [{"subject": "https://remote.example/users/alice", "issuer": "https://bench.example",
                     "method": "ap-http-signature", "assurance": "domain", "audience": "https://bench.example",
                     "issued_at": "2026-01-01T00:00:00.000Z",
                     "proof": {"type": "transport", "verified_by": "https://bench.example"}}]},
        "recipient": recipient,
        "parts": [{"kind": "text", "mime": "text/plain", "content": format!("benchmark message number {i}, about a tweet long, to make the payload realistic.")}],
        "recipient_capabilities": {"mention_relay": {"kind": "addressing", "envelope_fields": ["to", "cc"], "also_inline": true},
                                   "formats": ["text/html", "text/plain"], "attachments": true, "streaming": false},
        "received_via": "activitypub",
        "received_at": "2026-01-01T00:00:00.000Z",
        "raw": {"type": "Create", "id": format!("https://remote.example/activities/{i}")}
    }))
    .unwrap_or_else(|e| panic!("bench message: {e}"))
}

/// Hands `prebuilt[from..from + count]` to `pipeline` from `BENCH_CONCURRENCY` callers (default
/// 64), as that many inbound connections would; external ids are `{ext}-{i}`.
pub async fn drive(
    pipeline: &switchboard::pipeline::Pipeline,
    prebuilt: &Arc<Vec<NormalizedMessage>>,
    ext: &str,
    from: usize,
    count: usize,
) {
    let concurrency = std::env::var("BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let (p, msgs, ext) = (pipeline.clone(), prebuilt.clone(), ext.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut i = from + w;
            while i < from + count {
                p.ingest("bench", &format!("{ext}-{i}"), msgs[i].clone())
                    .await
                    .unwrap_or_else(|e| panic!("ingest: {e}"));
                i += concurrency;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
