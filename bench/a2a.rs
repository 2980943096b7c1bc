//! A2A benchmark, side by side in one run: blocking `SendMessage` and `SendStreamingMessage` to
//! an echo agent on switchboard (in this process, SQLite; once plain and once with ten access
//! rules and a trusted connector issuer configured), on the a2a-sdk 1.3.0 Python server
//! (`tests/peers/a2a/server.py`, uvicorn, in-memory store) and on the @a2a-js/sdk 1.3.0 server
//! (`tests/peers/a2a/server.mjs`, Express, in-memory store), alternating A B C x3. Prints
//! requests/s, p50/p99 latency and, for switchboard, the memory held per open stream.
//!
//! `cargo bench --bench a2a` with `SWITCHBOARD_A2A_PYTHON` and `SWITCHBOARD_A2A_NODE_MODULES`
//! set (`source scripts/peers/a2a.sh`);
//! `BENCH_SECONDS` (default 10) per step, `BENCH_CONCURRENCY` (default 16).
//!
//! The load generator is a process of its own (`bench/common/loadgen.rs`, pinned to core 0 by
//! default), so the CPU time printed for each server is its own process's alone.

#[path = "common/loadgen.rs"]
mod loadgen;

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::Application;
use switchboard::config::Secret;
use switchboard::moderation::Who;

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Step {
    rps: f64,
    p50: f64,
    p99: f64,
    cpu_us: f64,
    errors: usize,
}

/// Closed loop from the generator process: `concurrency` clients send for `secs` seconds;
/// `pid` is the server process whose CPU time is read.
fn run(url: &str, method: &'static str, secs: u64, concurrency: usize, pid: u32) -> Step {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
        "messageId": "{uuid}", "role": "ROLE_USER", "parts": [{"text": "hello benchmark"}]}}})
    .to_string();
    let (r, cpu) = loadgen::run(
        &loadgen::Job {
            concurrency,
            expect_status: 200,
            expect_body: Some("TASK_STATE_COMPLETED".into()),
            load: loadgen::Load::HttpFor {
                template: loadgen::HttpRequest {
                    url: url.to_owned(),
                    headers: vec![
                        ("A2A-Version".into(), "1.0".into()),
                        ("content-type".into(), "application/json".into()),
                    ],
                    body,
                },
                seconds: secs,
            },
        },
        pid,
    );
    Step {
        rps: r.rate(),
        p50: r.p50_ms,
        p99: r.p99_ms,
        cpu_us: cpu as f64 / r.accepted.max(1) as f64,
        errors: r.errors,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Ten access rules on the echo agent (a default and nine deny rules that match nobody, so each
/// message is checked against all of them) and one trusted connector issuer: the policy a
/// careful operator would configure, for the A/B against none.
fn with_policy(config: &mut switchboard::Config) {
    use switchboard::config::{AccessConfig, AccessDefault, AccessRule, TrustedIssuerConfig};
    let deny = (0..9)
        .map(|i| AccessRule {
            subject: Some(format!("https://blocked-{i}.example/users/*")),
            ..AccessRule::default()
        })
        .collect();
    let allow = vec![AccessRule {
        method: Some("a2a-jwt".into()),
        issuer: Some("https://idp.example".into()),
        ..AccessRule::default()
    }];
    for a in config.agents.iter_mut().filter(|a| a.name == "echo") {
        a.access = Some(AccessConfig {
            default: AccessDefault::Allow,
            allow: allow.clone(),
            deny: Vec::clone(&deny),
            ..AccessConfig::default()
        });
    }
    config.trust.issuers.push(TrustedIssuerConfig {
        issuer: "did:web:connector.example".into(),
        jwks_url: None,
        keys: Vec::new(),
        methods: vec!["urn:mentionable:auth:slack-workspace-member:v0.1".into()],
        assurance: vec!["verified".into()],
        subject_prefixes: Vec::new(),
    });
}

async fn start_switchboard(dir: &std::path::Path, policy: bool) -> Application {
    let mut config = switchboard::Config::from_env(None).unwrap_or_else(|e| panic!("config: {e}"));
    config.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.email.enabled = false;
    loadgen::unlimited(&mut config.limits);
    loadgen::blocks(&mut config.moderation);
    // The memory step holds 1000 streams open from one address.
    config.server.max_connections_per_peer = 4096;
    config.database.url = Secret::new(format!("sqlite://{}", dir.join("bench.db").display()));
    // A second agent whose tasks wait for input, to hold streams open.
    config.agents.push(switchboard::config::AgentConfig {
        access: None,
        name: "tck".into(),
        display_name: None,
        summary: None,
        backend: switchboard::config::BackendConfig::Conformance,
        email: None,
        a2a: None,
    });
    if policy {
        with_policy(&mut config);
    }
    Application::build(config)
        .await
        .unwrap_or_else(|e| panic!("switchboard: {e}"))
}

/// Waits until the peer on `port` serves its agent card; returns its endpoint URL.
async fn serving(port: u16, what: &str) -> String {
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..100 {
        if client
            .get(format!("{base}/.well-known/agent-card.json"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return format!("{base}/");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what} did not start");
}

async fn start_python(python: &str) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("port: {e}"));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a/server.py");
    let child = tokio::process::Command::new(python)
        .arg(script)
        .arg(port.to_string())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("python server: {e}"));
    (child, serving(port, "the a2a-sdk server").await)
}

async fn start_node(node_modules: &str) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("port: {e}"));
    let dir = std::path::Path::new(node_modules)
        .parent()
        .unwrap_or_else(|| panic!("node_modules has no parent"))
        .to_owned();
    let script = dir.join("server.mjs");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a/server.mjs"),
        &script,
    )
    .unwrap_or_else(|e| panic!("copy server.mjs: {e}"));
    let child = tokio::process::Command::new("node")
        .arg(script)
        .arg(port.to_string())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("node server: {e}"));
    (child, serving(port, "the @a2a-js/sdk server").await)
}

/// Memory per open stream on switchboard: subscriptions to tasks that wait for input.
async fn stream_memory(url: &str, n: usize) -> f64 {
    let client = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..n {
        let r: Value = client
            .post(url)
            .header("A2A-Version", "1.0")
            .header("content-type", "application/json")
            .body(json!({"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{
                "messageId": format!("tck-input-required-{}", uuid::Uuid::now_v7()), "role":"ROLE_USER",
                "parts":[{"text":"hello"}]}}}).to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .json()
            .await
            .unwrap_or_default();
        ids.push(
            r["result"]["task"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    // Each task waits for input, so its subscription stays open.
    let before = rss_kib();
    let mut open = Vec::new();
    for id in &ids {
        let resp = client
            .post(url)
            .header("A2A-Version", "1.0")
            .header("content-type", "application/json")
            .body(
                json!({"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id": id}})
                    .to_string(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        open.push(resp);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib();
    drop(open);
    (after.saturating_sub(before) as f64 * 1024.0) / n as f64
}

fn main() {
    loadgen::main(bench);
}

async fn bench() {
    let secs: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let conc: usize = std::env::var("BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let app = start_switchboard(dir.path(), false).await;
    let sb = format!("http://{}/a2a", app.http_addr());
    let policy_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let policy_app = start_switchboard(policy_dir.path(), true).await;
    let sb_policy = format!("http://{}/a2a", policy_app.http_addr());
    let python = std::env::var("SWITCHBOARD_A2A_PYTHON").ok();
    let py = match &python {
        Some(p) => Some(start_python(p).await),
        None => {
            eprintln!("SWITCHBOARD_A2A_PYTHON is not set: a2a-sdk side skipped");
            None
        }
    };
    let js = match std::env::var("SWITCHBOARD_A2A_NODE_MODULES") {
        Ok(nm) => Some(start_node(&nm).await),
        Err(_) => {
            eprintln!("SWITCHBOARD_A2A_NODE_MODULES is not set: @a2a-js/sdk side skipped");
            None
        }
    };
    println!("A2A benchmark: {secs} s per step, {conc} concurrent clients, A B C alternating x3");
    println!("{}", loadgen::describe());
    let me = std::process::id();
    let pid = |c: &tokio::process::Child| c.id().unwrap_or(0);
    let mut contenders: Vec<(&str, String, u32)> = vec![
        ("switchboard", sb.clone(), me),
        (
            "switchboard, 10 access rules + 1 trusted issuer",
            sb_policy.clone(),
            me,
        ),
    ];
    if let Some((c, url)) = &py {
        contenders.push(("a2a-sdk 1.3.0 (Python)", url.clone(), pid(c)));
    }
    if let Some((c, url)) = &js {
        contenders.push(("@a2a-js/sdk 1.3.0 (Node)", url.clone(), pid(c)));
    }
    for method in ["SendMessage", "SendStreamingMessage"] {
        // Warm-up.
        for (_, url, p) in &contenders {
            run(url, method, 2, conc, *p);
        }
        let mut rows: Vec<(&str, Vec<Step>)> = contenders
            .iter()
            .map(|(n, _, _)| (*n, Vec::new()))
            .collect();
        for _ in 0..3 {
            for (i, (_, url, p)) in contenders.iter().enumerate() {
                rows[i].1.push(run(url, method, secs, conc, *p));
            }
        }
        println!("\n{method}");
        println!(
            "| server | req/s (median of 3) | spread | p50 ms | p99 ms | CPU µs/req | errors |"
        );
        println!("|---|---|---|---|---|---|---|");
        for (name, steps) in &rows {
            if steps.is_empty() {
                continue;
            }
            let rps: Vec<f64> = steps.iter().map(|s| s.rps).collect();
            let (lo, hi) = (
                rps.iter().copied().fold(f64::MAX, f64::min),
                rps.iter().copied().fold(0.0, f64::max),
            );
            let p50 = median(steps.iter().map(|s| s.p50).collect());
            let p99 = median(steps.iter().map(|s| s.p99).collect());
            let cpu = median(steps.iter().map(|s| s.cpu_us).collect());
            let errors: usize = steps.iter().map(|s| s.errors).sum();
            println!(
                "| {name} | {:.0} | {lo:.0}–{hi:.0} | {p50:.2} | {p99:.2} | {cpu:.0} | {errors} |",
                median(rps)
            );
        }
        // The checks of an (anonymous) caller no block matches: the agent's at admission,
        // then ingest's of the message's sender.
        if let Some((_, steps)) = rows.first().filter(|(_, s)| !s.is_empty()) {
            let anonymous = || Who::default().with_sender("@anonymous@a2a.invalid");
            let cpu = median(steps.iter().map(|s| s.cpu_us).collect());
            loadgen::print_blocks_cost(&app.config().moderation, "request", cpu, || {
                vec![(Some("echo"), anonymous()), (None, anonymous())]
            });
        }
        let rate = |i: usize| median(rows[i].1.iter().map(|s| s.rps).collect());
        println!(
            "\nwith the policy ÷ without (req/s, median of 3): {:.3}",
            rate(1) / rate(0)
        );
    }
    let tck = format!("http://{}/agents/tck/a2a", app.http_addr());
    let per_stream = stream_memory(&tck, 1000).await;
    println!(
        "\nswitchboard memory per open stream: {:.1} KiB (1000 streams)",
        per_stream / 1024.0
    );
    drop(py);
    drop(js);
    let _ = app.shutdown().await;
    let _ = policy_app.shutdown().await;
}
