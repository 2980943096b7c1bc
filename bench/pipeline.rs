//! Pipeline benchmark: messages ingested → echo agent → delivery to a no-op transport, end to
//! end, on SQLite and (when reachable) PostgreSQL. Prints messages/s and the CPU time of the
//! switchboard process per message, for each `database.durability` mode back to back (a fresh
//! database each), and the ratio of `fsync` to `periodic`.
//!
//! `cargo bench --bench pipeline [-- N]`; PostgreSQL from `SWITCHBOARD_TEST_POSTGRES_URL`;
//! `BENCH_DURABILITY=periodic` or `fsync` runs one mode only, `BENCH_SHAPE=new` or `shared` one
//! shape only; `BENCH_CACHES=off` runs the pipeline without its in-memory caches (every read
//! from the database), to weigh what they save.

#[path = "common/messages.rs"]
mod messages;

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard::config::Durability;
use switchboard::message::NormalizedMessage;

use messages::{Threads, app, drive, message, postgres_cpu_micros};

/// Process CPU time (user + system) from /proc, in microseconds.
fn cpu_micros() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the parenthesised command name: state, ppid, pgrp, session, tty, tpgid, flags,
    // minflt, cminflt, majflt, cmajflt, utime, stime (proc(5)).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let ticks = field(11) + field(12);
    ticks * 10_000 // USER_HZ = 100
}

/// Runs one shape on one database; returns (messages/s end to end, switchboard CPU µs per
/// message).
async fn run(
    label: &str,
    url: &str,
    n: usize,
    threads: Threads,
    durability: Durability,
) -> (f64, f64) {
    let caches = std::env::var("BENCH_CACHES").as_deref() != Ok("off");
    let (app, sink, to) = app(url, durability, caches).await;
    let pipeline = app.pipeline().clone();

    // Messages are built before the clock starts: the load generator's work is not the server's.
    let prebuilt: Arc<Vec<NormalizedMessage>> =
        Arc::new((0..n + n / 10).map(|i| message(&to, i, threads)).collect());
    let wait_delivered = |target: u64| {
        let sink = sink.clone();
        async move {
            while sink.count() < target {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    };

    let warm = n / 10;
    drive(&pipeline, &prebuilt, "ext", 0, warm).await;
    wait_delivered(warm as u64).await;

    let (cpu0, pg0) = (cpu_micros(), postgres_cpu_micros());
    let syncs0 = pipeline.db().wal_syncs();
    let t0 = Instant::now();
    drive(&pipeline, &prebuilt, "ext", warm, n).await;
    let ingested = t0.elapsed();
    wait_delivered((warm + n) as u64).await;
    let total = t0.elapsed();
    let cpu = cpu_micros() - cpu0;
    // A server process that exits during the run takes its time with it: never below zero.
    let pg = postgres_cpu_micros().saturating_sub(pg0);
    #[allow(clippy::cast_precision_loss)]
    let (rate, ingest_rate, cpu_per, pg_per) = (
        n as f64 / total.as_secs_f64(),
        n as f64 / ingested.as_secs_f64(),
        cpu as f64 / n as f64,
        pg as f64 / n as f64,
    );
    let shape = match threads {
        Threads::New => "new threads",
        Threads::Shared => "500 threads",
    };
    let pg_col = if pg > 0 {
        format!(" + PostgreSQL {pg_per:>5.1}")
    } else {
        String::new()
    };
    let mode = mode_name(durability);
    // SQLite's WAL syncs that commits waited for (fsync mode), per message of the run.
    let syncs = pipeline.db().wal_syncs() - syncs0;
    let syncs_col = if syncs > 0 {
        #[allow(clippy::cast_precision_loss)]
        let per = syncs as f64 / n as f64;
        format!("  WAL syncs per message {per:.3}")
    } else {
        String::new()
    };
    println!(
        "{label:<9} {mode:<8} {shape:<12} {n:>6} msgs  {rate:>6.0} msg/s end to end ({:>5.2} s; ingest {ingest_rate:>6.0} msg/s)  CPU µs/msg: switchboard {cpu_per:>5.1}{pg_col}{syncs_col}",
        total.as_secs_f64()
    );
    let _ = app.shutdown().await;
    (rate, cpu_per)
}

fn mode_name(d: Durability) -> &'static str {
    match d {
        Durability::Periodic => "periodic",
        Durability::Fsync => "fsync",
    }
}

/// The shapes to run, in order: both unless `BENCH_SHAPE` names one.
fn shapes() -> Vec<Threads> {
    match std::env::var("BENCH_SHAPE").as_deref() {
        Ok("new") => vec![Threads::New],
        Ok("shared") => vec![Threads::Shared],
        _ => vec![Threads::New, Threads::Shared],
    }
}

/// The modes to run, in order: both unless `BENCH_DURABILITY` names one.
fn modes() -> Vec<Durability> {
    match std::env::var("BENCH_DURABILITY").as_deref() {
        Ok("periodic") => vec![Durability::Periodic],
        Ok("fsync") => vec![Durability::Fsync],
        _ => vec![Durability::Periodic, Durability::Fsync],
    }
}

/// The ratio line of one shape, when both modes ran.
fn ratio(label: &str, results: &[(Durability, (f64, f64))]) {
    if let [(_, (pr, pc)), (_, (fr, fc))] = results {
        println!(
            "{label:<9} fsync ÷ periodic: rate {:.2}, CPU per message {:.2}",
            fr / pr,
            fc / pc
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    for threads in shapes() {
        let mut results = Vec::new();
        for mode in modes() {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
            let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
            results.push((mode, run("sqlite", &sqlite, n, threads, mode).await));
        }
        ratio("sqlite", &results);
    }
    match std::env::var("SWITCHBOARD_TEST_POSTGRES_URL") {
        Ok(base) if !base.is_empty() => {
            let admin = sqlx::PgPool::connect(&base)
                .await
                .unwrap_or_else(|e| panic!("postgres: {e}"));
            for threads in shapes() {
                let mut results = Vec::new();
                for mode in modes() {
                    let name = format!("sb_bench_{}", uuid::Uuid::now_v7().simple());
                    let _ = sqlx::query(&format!("CREATE DATABASE {name}"))
                        .execute(&admin)
                        .await;
                    let mut url = url::Url::parse(&base).unwrap_or_else(|e| panic!("{e}"));
                    url.set_path(&format!("/{name}"));
                    results.push((mode, run("postgres", url.as_str(), n, threads, mode).await));
                    let _ = sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
                        .execute(&admin)
                        .await;
                }
                ratio("postgres", &results);
            }
        }
        _ => println!("postgres   skipped (set SWITCHBOARD_TEST_POSTGRES_URL)"),
    }
}
