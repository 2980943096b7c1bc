//! Scale-out benchmark: the same load through one and through two switchboard instances on one
//! PostgreSQL database, each instance a process of its own receiving an equal share of the
//! messages (as instances behind a load balancer would), alternating one and two instances
//! round by round. Prints the end-to-end rate and the CPU time per message of each instance and
//! of PostgreSQL (every `postgres` process on the machine), which on a machine of two cores is
//! the figure that matters: docs/scaling.md turns it into the throughput of N instances.
//!
//! `cargo bench --bench scale_out [-- N]` with `SWITCHBOARD_TEST_POSTGRES_URL` (a database is
//! created and dropped per run); `BENCH_ROUNDS` (default 3), `BENCH_SHAPE=new` (every message
//! opens a thread, the default) or `shared` (500 threads per instance, history loaded),
//! `BENCH_CONCURRENCY` callers per instance (default 64); `SWITCHBOARD__…` variables tune every
//! instance (e.g. `SWITCHBOARD__DATABASE__MAX_CONNECTIONS=20`).

#[path = "common/loadgen.rs"]
mod loadgen;
#[path = "common/messages.rs"]
mod messages;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchboard::config::Durability;

use messages::{Threads, message, postgres_cpu_micros};

/// The variable that makes this executable one instance: the database URL.
const CHILD: &str = "BENCH_SCALE_CHILD";

fn main() {
    if let Ok(url) = std::env::var(CHILD) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        rt.block_on(instance(url));
        return;
    }
    let Some(base) = std::env::var("SWITCHBOARD_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        println!("scale_out skipped: set SWITCHBOARD_TEST_POSTGRES_URL");
        return;
    };
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    println!(
        "{n} messages per run, {} shape, one then two instances, {rounds} rounds",
        shape().1
    );
    for round in 1..=rounds {
        for k in [1, 2] {
            run(&base, n, k, round);
        }
    }
}

/// The shape of the load: `BENCH_SHAPE=shared` for 500 threads per instance.
fn shape() -> (Threads, &'static str) {
    match std::env::var("BENCH_SHAPE").as_deref() {
        Ok("shared") => (Threads::Shared, "500 threads"),
        _ => (Threads::New, "new threads"),
    }
}

/// One instance's process, and what it has reported delivered.
struct Instance {
    child: Child,
    stdin: ChildStdin,
    delivered: Arc<AtomicU64>,
}

/// `n` messages through `k` instances on a fresh database.
fn run(base: &str, n: usize, k: usize, round: usize) {
    let name = format!("sb_scale_{}", uuid::Uuid::now_v7().simple());
    psql(base, &format!("CREATE DATABASE {name}"));
    let mut url = url::Url::parse(base).unwrap_or_else(|e| panic!("{e}"));
    url.set_path(&format!("/{name}"));
    let share = n / k;
    let warm = share / 10;
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut instances: Vec<Instance> = Vec::new();
    for i in 0..k {
        let mut child = Command::new(&exe)
            .env(CHILD, url.as_str())
            .env("BENCH_SCALE_INDEX", i.to_string())
            .env("BENCH_SCALE_SHARE", share.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("instance: {e}"));
        let stdin = child.stdin.take().unwrap_or_else(|| unreachable!());
        let stdout = child.stdout.take().unwrap_or_else(|| unreachable!());
        let delivered = Arc::new(AtomicU64::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let d = Arc::clone(&delivered);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "ready" {
                    let _ = ready_tx.send(());
                } else if let Some(v) = line.strip_prefix("delivered ") {
                    d.store(v.parse().unwrap_or(0), Ordering::Relaxed);
                }
            }
        });
        ready_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("instance {i} did not start: {e}"));
        instances.push(Instance {
            child,
            stdin,
            delivered,
        });
    }
    let tell = |instances: &mut [Instance], what: &str| {
        for inst in instances.iter_mut() {
            writeln!(inst.stdin, "{what}").unwrap_or_else(|e| panic!("{e}"));
            inst.stdin.flush().unwrap_or_else(|e| panic!("{e}"));
        }
    };
    // The parent runs no async runtime: it polls what the instances report, on its own thread.
    #[allow(clippy::disallowed_methods)]
    let wait = |instances: &[Instance], target: u64| {
        while instances
            .iter()
            .map(|i| i.delivered.load(Ordering::Relaxed))
            .sum::<u64>()
            < target
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    tell(&mut instances, "warm");
    wait(&instances, (warm * k) as u64);
    let cpu0: Vec<u64> = instances
        .iter()
        .map(|i| loadgen::cpu_micros(i.child.id()))
        .collect();
    let pg0 = postgres_cpu_micros();
    let t0 = Instant::now();
    tell(&mut instances, "go");
    wait(&instances, ((warm + share) * k) as u64);
    let took = t0.elapsed();
    let pg = postgres_cpu_micros().saturating_sub(pg0);
    let cpu: Vec<u64> = instances
        .iter()
        .zip(&cpu0)
        .map(|(i, c0)| loadgen::cpu_micros(i.child.id()).saturating_sub(*c0))
        .collect();
    for mut inst in instances {
        drop(inst.stdin);
        let _ = inst.child.wait();
    }
    psql(base, &format!("DROP DATABASE {name} WITH (FORCE)"));
    let total = share * k;
    #[allow(clippy::cast_precision_loss)]
    let per = |us: u64| us as f64 / total as f64;
    #[allow(clippy::cast_precision_loss)]
    let rate = total as f64 / took.as_secs_f64();
    let each: Vec<String> = cpu.iter().map(|c| format!("{:.1}", per(*c))).collect();
    println!(
        "round {round}  {k} instance{}  {total:>6} msgs  {rate:>6.0} msg/s end to end ({:>5.2} s)  CPU µs/msg: instances {} (sum {:.1}) + PostgreSQL {:.1}",
        if k == 1 { " " } else { "s" },
        took.as_secs_f64(),
        each.join(" + "),
        per(cpu.iter().sum()),
        per(pg),
    );
}

/// Runs one statement on the server at `base`.
fn psql(base: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let admin = sqlx::PgPool::connect(base)
            .await
            .unwrap_or_else(|e| panic!("postgres: {e}"));
        sqlx::query(sql)
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admin.close().await;
    });
}

/// One instance: builds switchboard on the database at `url`, says `ready`, then on `warm` and
/// on `go` ingests its share (a tenth, then the whole) from 64 callers, printing how many
/// responses its transport has delivered every few milliseconds, until its standard input
/// closes.
async fn instance(url: String) {
    let index: usize = std::env::var("BENCH_SCALE_INDEX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let share: usize = std::env::var("BENCH_SCALE_SHARE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let (app, sink, to) = messages::app(&url, Durability::Periodic, true).await;
    let pipeline = app.pipeline().clone();
    let (threads, _) = shape();
    let warm = share / 10;
    // Built before the clock starts; ids, external ids and threads are this instance's own.
    let prebuilt: Arc<Vec<_>> = Arc::new(
        (0..warm + share)
            .map(|i| {
                let mut m = message(&to, i, threads);
                m.thread_id = format!("i{index}-{}", m.thread_id);
                m
            })
            .collect(),
    );
    let reporter = {
        let sink = sink.clone();
        tokio::spawn(async move {
            loop {
                println!("delivered {}", sink.count());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    println!("ready");
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()));
    while let Ok(Some(line)) = lines.next_line().await {
        let (from, count) = match line.as_str() {
            "warm" => (0, warm),
            "go" => (warm, share),
            _ => continue,
        };
        messages::drive(&pipeline, &prebuilt, &format!("i{index}-ext"), from, count).await;
    }
    reporter.abort();
    let _ = app.shutdown().await;
}
