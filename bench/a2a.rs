//! A2A benchmark, side by side in one run: blocking `SendMessage` and `SendStreamingMessage` to
//! an echo agent on switchboard (SQLite; once plain and once with ten access rules and a trusted
//! connector issuer configured, each in a process of its own), on the a2a-sdk 1.3.0 Python server
//! (`tests/peers/a2a/server.py`, uvicorn, in-memory store) and on the @a2a-js/sdk 1.3.0 server
//! (`tests/peers/a2a/server.mjs`, Express, in-memory store), alternating A B C x3. Prints
//! requests/s, p50/p99 latency and, for switchboard, the memory held per open stream.
//!
//! `cargo bench --bench a2a` with `SWITCHBOARD_A2A_PYTHON` and `SWITCHBOARD_A2A_NODE_MODULES`
//! set (`source scripts/peers/a2a.sh`);
//! `BENCH_SECONDS` (default 10) per step, `BENCH_CONCURRENCY` (default 16).
//!
//! The load generator is a process of its own (`bench/common/loadgen.rs`, pinned to core 0 by
//! default), and so is each switchboard: this executable started again with
//! `BENCH_A2A_SERVE=plain` or `policy` (see [`serve`]) runs one instance, prints its address and
//! serves until its standard input closes. The CPU time printed for each server, and the memory
//! per stream, are therefore that server's process's alone: neither instance is charged with the
//! other's idle work, nor do they share a runtime.

#[path = "common/loadgen.rs"]
mod loadgen;

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::Application;
use switchboard::config::Secret;
use switchboard::moderation::Who;

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
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

/// The benchmarked instance's configuration (`policy`: with [`with_policy`]), but for its
/// database.
fn config(policy: bool) -> switchboard::Config {
    let mut config = switchboard::Config::from_env(None).unwrap_or_else(|e| panic!("config: {e}"));
    config.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.email.enabled = false;
    loadgen::unlimited(&mut config.limits);
    loadgen::blocks(&mut config.moderation);
    // The memory step holds 1000 streams open from one address.
    config.server.max_connections_per_peer = 4096;
    // A second agent whose tasks wait for input, to hold streams open.
    config.agents.push(switchboard::config::AgentConfig {
        activitypub: None,
        access: None,
        name: "tck".into(),
        display_name: None,
        summary: None,
        backend: switchboard::config::BackendConfig::Conformance,
        email: None,
        a2a: None,
        notify: Vec::new(),
    });
    if policy {
        with_policy(&mut config);
    }
    config
}

/// What a switchboard process prints before its address.
const LISTENING: &str = "listening on ";

/// The body of a switchboard process (`BENCH_A2A_SERVE=plain` or `policy`): starts one instance
/// on a database of its own, prints `listening on ADDR` on its standard output, and serves
/// until its standard input closes (the benchmark ended, or died).
async fn serve(kind: String) {
    let policy = match kind.as_str() {
        "plain" => false,
        "policy" => true,
        other => panic!("{SERVE}={other}: plain or policy"),
    };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = config(policy);
    config.database.url = Secret::new(format!(
        "sqlite://{}",
        dir.path().join("bench.db").display()
    ));
    let app = Application::build(config)
        .await
        .unwrap_or_else(|e| panic!("switchboard: {e}"));
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{LISTENING}{}", app.http_addr()).unwrap_or_else(|e| panic!("{e}"));
        out.flush().unwrap_or_else(|e| panic!("{e}"));
    }
    let mut sink = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
    let _ = app.shutdown().await;
}

/// The variable that makes this executable a switchboard process.
const SERVE: &str = "BENCH_A2A_SERVE";

/// A switchboard in a process of its own (this executable, with [`SERVE`] set), which pins
/// itself as the process under test; ended by [`Switchboard::stop`], killed when dropped
/// without it.
struct Switchboard {
    child: std::process::Child,
    /// `http://ADDR`.
    base: String,
}

impl Switchboard {
    fn start(kind: &str) -> Self {
        use std::io::BufRead as _;
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
        let mut child = std::process::Command::new(exe)
            .env(SERVE, kind)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("switchboard process: {e}"));
        let out = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("switchboard process: no stdout"));
        let mut lines = std::io::BufReader::new(out).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => match line.strip_prefix(LISTENING) {
                    Some(addr) => break addr.to_owned(),
                    None => eprintln!("switchboard ({kind}): {line}"),
                },
                _ => panic!("the {kind} switchboard process did not start"),
            }
        };
        // Whatever it prints later goes to stderr, and its pipe never fills.
        let kind = kind.to_owned();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("switchboard ({kind}): {line}");
            }
        });
        Self {
            child,
            base: format!("http://{addr}"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks the process to shut down (its standard input closes) and waits 15 s at most for it
    /// to end; one still running then is killed.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        for _ in 0..300 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Switchboard {
    fn drop(&mut self) {
        // A process not stopped (the benchmark panicked on the way) is killed.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
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

/// Memory per open stream on switchboard (process `pid`): subscriptions to tasks that wait for
/// input.
async fn stream_memory(url: &str, pid: u32, n: usize) -> f64 {
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
    let before = rss_kib(pid);
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
    let after = rss_kib(pid);
    drop(open);
    (after.saturating_sub(before) as f64 * 1024.0) / n as f64
}

fn main() {
    match std::env::var(SERVE) {
        Ok(kind) => loadgen::main(|| serve(kind)),
        Err(_) => loadgen::main(bench),
    }
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
    let plain = Switchboard::start("plain");
    let sb = format!("{}/a2a", plain.base);
    let policy = Switchboard::start("policy");
    let sb_policy = format!("{}/a2a", policy.base);
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
    let pid = |c: &tokio::process::Child| c.id().unwrap_or(0);
    let mut contenders: Vec<(&str, String, u32)> = vec![
        ("switchboard", sb.clone(), plain.pid()),
        (
            "switchboard, 10 access rules + 1 trusted issuer",
            sb_policy.clone(),
            policy.pid(),
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
        // then ingest's of the message's sender. The blocks are the plain instance's, from its
        // configuration made again here.
        if let Some((_, steps)) = rows.first().filter(|(_, s)| !s.is_empty()) {
            let anonymous = || Who::default().with_sender("@anonymous@a2a.invalid");
            let cpu = median(steps.iter().map(|s| s.cpu_us).collect());
            let moderation = config(false).moderation;
            loadgen::print_blocks_cost(&moderation, "request", cpu, || {
                vec![(Some("echo"), anonymous()), (None, anonymous())]
            });
        }
        let rate = |i: usize| median(rows[i].1.iter().map(|s| s.rps).collect());
        println!(
            "\nwith the policy ÷ without (req/s, median of 3): {:.3}",
            rate(1) / rate(0)
        );
    }
    let tck = format!("{}/agents/tck/a2a", plain.base);
    let per_stream = stream_memory(&tck, plain.pid(), 1000).await;
    println!(
        "\nswitchboard memory per open stream: {:.1} KiB (1000 streams)",
        per_stream / 1024.0
    );
    drop(py);
    drop(js);
    plain.stop().await;
    policy.stop().await;
}
