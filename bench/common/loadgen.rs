//! The load generator the benchmarks share, run as a **separate process** so that its CPU time
//! is never counted against the server under test, and optionally pinned to its own core.
//!
//! A benchmark writes a [`Job`] to a file and calls [`run`]; that starts this same benchmark
//! executable with `--loadgen <file>` (see [`child_main`]), which drives the load and prints a
//! [`Report`] as JSON on its standard output. Meanwhile the parent reads the CPU time of the
//! process under test (itself, or a peer's process) from `/proc`.
//!
//! Pinning (`BENCH_PIN=1`, the default on machines with two or more cores): the generator runs
//! on core 0 and the process under test on the other cores, so both contenders get the same
//! cores.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Removes the built-in per-sender and per-host rate limits (docs/safety.md) from a benchmarked
/// server's `limits`: a benchmark is one sender at full speed, which they would refuse, and the
/// peers it is compared with limit nothing.
pub fn unlimited(limits: &mut switchboard::config::LimitsConfig) {
    limits.per_sender = Some(switchboard::config::Rate::OFF);
    limits.per_host = Some(switchboard::config::Rate::OFF);
}

/// Adds `BENCH_BLOCKS` server-wide blocks (none unless set) that no benchmarked sender
/// matches, shaped as operators' lists are: instance and mail domains, actor IRIs under a host,
/// whole mail domains, A2A issuers, and one in a hundred a pattern with `*` inside, which is
/// tried one by one. Run with 0 and with 1000 in turn to see what checking them costs.
pub fn blocks(moderation: &mut switchboard::config::ModerationConfig) {
    use switchboard::config::BlockConfig;
    let n: usize = std::env::var("BENCH_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    moderation.blocks.extend((0..n).map(|i| match i % 100 {
        0 => BlockConfig {
            sender: Some(format!("https://*.b{i}.example/users/*")),
            ..BlockConfig::default()
        },
        r if r % 4 == 0 => BlockConfig {
            domain: Some(format!("d{i}.example")),
            ..BlockConfig::default()
        },
        r if r % 4 == 1 => BlockConfig {
            sender: Some(format!("https://social.b{i}.example/users/*")),
            ..BlockConfig::default()
        },
        r if r % 4 == 2 => BlockConfig {
            sender: Some(format!("*@m{i}.example")),
            ..BlockConfig::default()
        },
        _ => BlockConfig {
            issuer: Some(format!("https://idp{i}.example")),
            ..BlockConfig::default()
        },
    }));
}

/// Prints what the configured blocks cost one message, timed apart from a whole round's noise
/// (nothing without blocks): `checks` builds, as the server does for each message, the looks
/// it takes at a sender no block matches (for an agent, or server-wide); `cpu_us` is a
/// message's CPU in the rounds, to give the share.
pub fn print_blocks_cost(
    moderation: &switchboard::config::ModerationConfig,
    what: &str,
    cpu_us: f64,
    checks: impl Fn() -> Vec<(Option<&'static str>, switchboard::moderation::Who)>,
) {
    let blocks = switchboard::moderation::Blocks::new(&moderation.blocks);
    if !blocks.any() {
        return;
    }
    const N: u32 = 200_000;
    let n_checks = checks().len();
    let start = Instant::now();
    for _ in 0..N {
        for (agent, who) in checks() {
            assert!(
                std::hint::black_box(blocks.find(agent, &who)).is_none(),
                "a benchmark block matched the benchmarked sender"
            );
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(N);
    println!(
        "blocks: {} patterns, the {n_checks} checks of one {what} take {us:.2} µs = {:.2} % of its CPU ({cpu_us:.0} µs)",
        moderation.blocks.len(),
        100.0 * us / cpu_us.max(1e-9)
    );
}

/// One HTTP request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HttpRequest {
    /// Full URL.
    pub url: String,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
}

/// What the generator does.
#[derive(Debug, Serialize, Deserialize)]
pub enum Load {
    /// POST each request once.
    Http(Vec<HttpRequest>),
    /// POST `template` again and again for `seconds`; every `{uuid}` in its body is replaced by
    /// a fresh UUID per request.
    HttpFor {
        /// The request.
        template: HttpRequest,
        /// How long.
        seconds: u64,
    },
    /// Send each message over SMTP: EHLO once per connection, then MAIL, RCPT, DATA and the
    /// message. When `pipelining` is set and the server's EHLO advertises PIPELINING (RFC
    /// 2920), MAIL, RCPT and DATA go out in one write and their replies are read together, as
    /// Postfix and other MTAs do, and from the second message of a session on they ride in the
    /// write that ends the message before, as Exim sends; otherwise each command waits for its
    /// reply. A session sends at most 100 messages, then QUIT, and the connection is made again.
    Smtp {
        /// Use PIPELINING when the server offers it.
        pipelining: bool,
        /// `host:port`.
        addr: String,
        /// Envelope sender.
        from: String,
        /// Envelope recipient.
        to: String,
        /// The messages (CRLF line ends, dot-stuffed).
        messages: Vec<String>,
    },
}

/// A generator run.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    /// Connections in flight.
    pub concurrency: usize,
    /// HTTP status that counts as accepted.
    pub expect_status: u16,
    /// When set, an HTTP answer counts only if its body contains this.
    pub expect_body: Option<String>,
    /// The load.
    pub load: Load,
}

/// What the generator measured.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Requests (or messages) accepted.
    pub accepted: usize,
    /// Requests that failed or were refused.
    pub errors: usize,
    /// Wall time from the first request to the last answer, seconds.
    pub seconds: f64,
    /// Median latency of accepted requests, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The generator's own CPU time over the run, µs.
    #[serde(default)]
    pub client_cpu_us: u64,
}

impl Report {
    /// Accepted per second.
    #[must_use]
    pub fn rate(&self) -> f64 {
        self.accepted as f64 / self.seconds.max(1e-9)
    }
}

/// CPU time (user + system) of process `pid`, in microseconds, from `/proc`.
#[must_use]
pub fn cpu_micros(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime, in clock ticks of 10 ms.
    (field(11) + field(12)) * 10_000
}

/// Cores of the machine, read once: after pinning, the process itself sees fewer.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

/// Whether the generator and the process under test get cores of their own.
#[must_use]
pub fn pinning() -> bool {
    match std::env::var("BENCH_PIN") {
        Ok(v) => v == "1",
        Err(_) => cores() >= 2,
    }
}

/// Pins every thread of `pid` to the cores the generator does not use (no-op unless
/// [`pinning`]). Call it for the process under test (and again for threads started later).
pub fn pin_server(pid: u32) {
    if !pinning() {
        return;
    }
    let list = format!("1-{}", cores() - 1);
    let _ = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", &list, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status();
}

/// Describes the core split, for the benchmark's header.
#[must_use]
pub fn describe() -> String {
    if pinning() {
        format!(
            "load generator in its own process on core 0, process under test on cores 1-{}",
            cores() - 1
        )
    } else {
        "load generator in its own process, cores shared (BENCH_PIN=0)".into()
    }
}

/// Runs `job` in a generator process and waits for its report. `server` is the process under
/// test: it is (re)pinned first and its CPU time over the run is returned beside the report.
///
/// # Panics
/// When the generator cannot be started or answers nonsense (a benchmark has nobody to report
/// to but its operator).
#[must_use]
pub fn run(job: &Job, server: u32) -> (Report, u64) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().join("job.json");
    std::fs::write(
        &path,
        serde_json::to_vec(job).unwrap_or_else(|e| panic!("job: {e}")),
    )
    .unwrap_or_else(|e| panic!("job file: {e}"));
    pin_server(server);
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let mut cmd = if pinning() {
        let mut c = std::process::Command::new("taskset");
        c.arg("-c").arg("0").arg(exe);
        c
    } else {
        std::process::Command::new(exe)
    };
    cmd.arg("--loadgen").arg(&path);
    let cpu0 = cpu_micros(server);
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("load generator: {e}"));
    let cpu = cpu_micros(server).saturating_sub(cpu0);
    let report: Report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "load generator report: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (report, cpu)
}

/// A stand-in remote server in a process of its own (on the generator's core): it serves the
/// documents it was given at their paths, answers every POST with 202 and counts them
/// (`GET /count`).
pub struct Remote {
    child: std::process::Child,
    /// `http://127.0.0.1:port`.
    pub base: String,
}

impl Remote {
    /// Starts the remote; `docs(base)` gives the documents (path → JSON body) once the base URL
    /// is known.
    ///
    /// # Panics
    /// When the process cannot be started.
    #[must_use]
    pub fn start(docs: impl Fn(&str) -> Vec<(String, String)>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("port: {e}"));
        let base = format!("http://127.0.0.1:{port}");
        let file = std::env::temp_dir().join(format!("sb-bench-remote-{port}.json"));
        std::fs::write(
            &file,
            serde_json::to_vec(&(port, docs(&base))).unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("remote file: {e}"));
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
        let mut cmd = if pinning() {
            let mut c = std::process::Command::new("taskset");
            c.arg("-c").arg("0").arg(exe);
            c
        } else {
            std::process::Command::new(exe)
        };
        let mut child = cmd
            .arg("--remote")
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("remote: {e}"));
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
        }
        assert_eq!(line.trim(), "ready", "the remote did not start");
        let _ = std::fs::remove_file(&file);
        Self { child, base }
    }

    /// POSTs received so far.
    pub async fn posts(&self) -> u64 {
        let r = reqwest::get(format!("{}/count", self.base)).await;
        match r {
            Ok(r) => r.text().await.unwrap_or_default().parse().unwrap_or(0),
            Err(_) => 0,
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn remote_main(path: &str) -> ! {
    use actix_web::{HttpRequest, HttpResponse, web};
    use std::sync::atomic::{AtomicU64, Ordering};
    let (port, docs): (u16, Vec<(String, String)>) = serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("remote file {path}: {e}")),
    )
    .unwrap_or_else(|e| panic!("remote file {path}: {e}"));
    let docs: Arc<std::collections::HashMap<String, String>> = Arc::new(docs.into_iter().collect());
    let posts = Arc::new(AtomicU64::new(0));
    let result = actix_web::rt::System::new().block_on(async move {
        let server = actix_web::HttpServer::new(move || {
            let (docs, posts) = (docs.clone(), posts.clone());
            actix_web::App::new().default_service(web::route().to(move |req: HttpRequest| {
                let (docs, posts) = (docs.clone(), posts.clone());
                async move {
                    if req.method() == actix_web::http::Method::POST {
                        posts.fetch_add(1, Ordering::Relaxed);
                        return HttpResponse::Accepted().finish();
                    }
                    if req.path() == "/count" {
                        return HttpResponse::Ok().body(posts.load(Ordering::Relaxed).to_string());
                    }
                    match docs.get(req.path()) {
                        Some(b) => HttpResponse::Ok()
                            .content_type("application/activity+json")
                            .body(b.clone()),
                        None => HttpResponse::NotFound().finish(),
                    }
                }
            }))
        })
        .workers(1)
        .bind(("127.0.0.1", port))?;
        println!("ready");
        server.run().await
    });
    if let Err(e) = result {
        eprintln!("remote: {e}");
    }
    std::process::exit(0);
}

/// A benchmark's `main`: does a generator's (or a remote's) job when started as one, else runs
/// `bench` on a multi-threaded runtime.
pub fn main<F: std::future::Future<Output = ()>>(bench: impl FnOnce() -> F) {
    child_main();
    // The process under test starts on its own cores, so that its runtimes size themselves
    // for the cores it has, as they would on a machine of that size.
    pin_server(std::process::id());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
        .block_on(bench());
}

/// When started as a generator (or a remote), does that job and exits.
fn child_main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--remote") {
        remote_main(args.get(i + 1).map_or("", String::as_str));
    }
    let Some(i) = args.iter().position(|a| a == "--loadgen") else {
        return;
    };
    let path = args
        .get(i + 1)
        .unwrap_or_else(|| panic!("--loadgen needs a job file"));
    let job: Job = serde_json::from_slice(
        &std::fs::read(path).unwrap_or_else(|e| panic!("job file {path}: {e}")),
    )
    .unwrap_or_else(|e| panic!("job file {path}: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let mut report = rt.block_on(drive(job));
    report.client_cpu_us = cpu_micros(std::process::id());
    println!(
        "{}",
        serde_json::to_string(&report).unwrap_or_else(|e| panic!("report: {e}"))
    );
    std::process::exit(0);
}

type Outcome = (Vec<Duration>, usize);

async fn drive(job: Job) -> Report {
    let started = Instant::now();
    let parts: Vec<Outcome> = match job.load {
        Load::Http(reqs) => {
            let queue = Arc::new(Mutex::new(reqs.into_iter().collect::<VecDeque<_>>()));
            let next = move || queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
            http(
                job.concurrency,
                job.expect_status,
                job.expect_body,
                Arc::new(next),
            )
            .await
        }
        Load::HttpFor { template, seconds } => {
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let next = move || {
                (Instant::now() < deadline).then(|| {
                    let mut r = template.clone();
                    r.body = r.body.replace("{uuid}", &uuid::Uuid::now_v7().to_string());
                    r
                })
            };
            http(
                job.concurrency,
                job.expect_status,
                job.expect_body,
                Arc::new(next),
            )
            .await
        }
        Load::Smtp {
            pipelining,
            addr,
            from,
            to,
            messages,
        } => smtp(job.concurrency, pipelining, &addr, &from, &to, messages).await,
    };
    let seconds = started.elapsed().as_secs_f64();
    let mut lat: Vec<Duration> = Vec::new();
    let mut errors = 0;
    for (l, e) in parts {
        lat.extend(l);
        errors += e;
    }
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Report {
        accepted: lat.len(),
        errors,
        seconds,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        client_cpu_us: 0,
    }
}

type Next = Arc<dyn Fn() -> Option<HttpRequest> + Send + Sync>;

async fn http(concurrency: usize, status: u16, body: Option<String>, next: Next) -> Vec<Outcome> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .tcp_nodelay(true)
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, next, want) = (client.clone(), next.clone(), body.clone());
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::new(), 0);
                while let Some(req) = next() {
                    let mut r = client.post(&req.url).body(req.body);
                    for (k, v) in req.headers {
                        r = r.header(k, v);
                    }
                    let t = Instant::now();
                    let ok = match r.send().await {
                        Ok(resp) => {
                            let code = resp.status().as_u16();
                            let text = resp.text().await.unwrap_or_default();
                            code == status && want.as_ref().is_none_or(|w| text.contains(w))
                        }
                        Err(_) => false,
                    };
                    if ok {
                        lat.push(t.elapsed());
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    join(tasks).await
}

/// The outcomes of every connection's task (a panicked one counts as nothing done).
async fn join(tasks: Vec<tokio::task::JoinHandle<Outcome>>) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap_or_default());
    }
    out
}

async fn reply(r: &mut BufReader<TcpStream>) -> String {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return all;
        }
        all.push_str(&line);
        if line.len() < 4 || line.as_bytes().get(3) == Some(&b' ') {
            return all;
        }
    }
}

/// Messages per SMTP session before the client says QUIT and connects again (servers cap the
/// commands of one session).
const PER_SESSION: usize = 100;

async fn smtp(
    concurrency: usize,
    pipelining: bool,
    addr: &str,
    from: &str,
    to: &str,
    messages: Vec<String>,
) -> Vec<Outcome> {
    let queue = Arc::new(Mutex::new(messages.into_iter().collect::<VecDeque<_>>()));
    let commands = Arc::new([
        format!("MAIL FROM:<{from}>\r\n"),
        format!("RCPT TO:<{to}>\r\n"),
        "DATA\r\n".to_owned(),
    ]);
    let group: Arc<str> = commands.concat().into();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (queue, commands, group) = (queue.clone(), commands.clone(), group.clone());
            let addr = addr.to_owned();
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::new(), 0);
                'session: loop {
                    let s = TcpStream::connect(&addr)
                        .await
                        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
                    let _ = s.set_nodelay(true);
                    let mut r = BufReader::new(s);
                    reply(&mut r).await;
                    r.get_mut()
                        .write_all(b"EHLO bench.example.com\r\n")
                        .await
                        .ok();
                    let ehlo = reply(&mut r).await;
                    let pipelined = pipelining
                        && ehlo
                            .lines()
                            .any(|l| l.get(4..).is_some_and(|k| k.starts_with("PIPELINING")));
                    let pop = || queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some(mut m) = pop() else {
                        r.get_mut().write_all(b"QUIT\r\n").await.ok();
                        break 'session;
                    };
                    let mut t = Instant::now();
                    if pipelined {
                        r.get_mut().write_all(group.as_bytes()).await.ok();
                    }
                    for sent in 1..=PER_SESSION {
                        if pipelined {
                            for _ in commands.iter() {
                                reply(&mut r).await;
                            }
                        } else {
                            for cmd in commands.iter() {
                                r.get_mut().write_all(cmd.as_bytes()).await.ok();
                                reply(&mut r).await;
                            }
                        }
                        // Pipelined, the next message's MAIL, RCPT and DATA go out in the
                        // write that ends this one (message content may open a group, RFC
                        // 2920 §3.1; Exim sends this way).
                        let following = if sent < PER_SESSION { pop() } else { None };
                        let mut data = m.into_bytes();
                        data.extend_from_slice(b"\r\n.\r\n");
                        if pipelined && following.is_some() {
                            data.extend_from_slice(group.as_bytes());
                        }
                        let written = Instant::now();
                        r.get_mut().write_all(&data).await.ok();
                        if reply(&mut r).await.starts_with("250") {
                            lat.push(t.elapsed());
                        } else {
                            errors += 1;
                        }
                        let Some(f) = following else {
                            break;
                        };
                        m = f;
                        t = if pipelined { written } else { Instant::now() };
                    }
                    r.get_mut().write_all(b"QUIT\r\n").await.ok();
                    reply(&mut r).await;
                    // The queue only drains: empty now, it stays empty.
                    if queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                        break;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    join(tasks).await
}
