//! Kill -9 the real binary while dispatch and delivery are in flight, restart it (or, of two
//! instances on PostgreSQL, let the other carry on), and prove that every message got exactly
//! one response, delivered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;
use serde_json::{Value, json};
use switchboard::store::messages;

use crate::helpers::{
    Binary, Engine, TestDb, fresh_db, header, job_states, on_both_engines, serve_route, smtp,
    wait_for,
};

const N: usize = 1000;

#[derive(Default)]
struct Sink {
    /// message id → response ids delivered for it
    by_message: Mutex<HashMap<String, HashSet<String>>>,
    total: Mutex<usize>,
    gate: tokio::sync::Mutex<()>,
}

async fn receive(sink: web::Data<Arc<Sink>>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    // One at a time and not too fast, so deliveries are still in flight when the server dies.
    let _g = sink.gate.lock().await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let resp: Value = serde_json::from_slice(&body).unwrap();
    let key = header(&req, "idempotency-key");
    assert_eq!(key, resp["id"].as_str().unwrap());
    sink.by_message
        .lock()
        .unwrap()
        .entry(resp["in_reply_to"].as_str().unwrap().to_owned())
        .or_default()
        .insert(key);
    *sink.total.lock().unwrap() += 1;
    HttpResponse::Ok().finish()
}

async fn post_all(http: &reqwest::Client, base: &str, ids: &[usize]) -> Vec<(usize, Option<bool>)> {
    futures_util::stream::iter(ids.iter().copied())
        .map(|i| {
            let http = http.clone();
            let url = format!("{base}/api/v1/messages");
            async move {
                let body = json!({
                    "external_id": format!("crash-{i}"),
                    "message": {
                        "thread_id": format!("crash-thread-{}", i % 50),
                        "sender": {"address": "load@example.com", "auth_method": "none", "verified": false},
                        "recipient": "@echo@crash.test",
                        "parts": [{"kind": "text", "mime": "text/plain", "content": format!("message {i}")}]
                    }
                });
                let r = http.post(&url).bearer_auth("crash-token").json(&body).send().await;
                let dup = match r {
                    Ok(r) if r.status() == 202 => r.json::<Value>().await.ok().and_then(|v| v["duplicate"].as_bool()),
                    _ => None,
                };
                (i, dup)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await
}

/// The configuration of a crash test's server on `db_url`: short leases and backoff, the API
/// on, responses posted to `cb`.
fn crash_config(dir: &std::path::Path, db_url: &str, cb: &str) -> std::path::PathBuf {
    let config = dir.join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "http://crash.test"
shutdown_grace_seconds = 10
[database]
url = "{db_url}"
[log]
format = "json"
filter = "info"
[queue]
lease_seconds = 2
poll_interval_ms = 100
backoff_base_ms = 100
backoff_max_ms = 1000
[net]
allow_private_addresses = true
[email]
bind = "127.0.0.1:0"
[api]
token = "crash-token"
callback_url = "{cb}"
"#
        ),
    )
    .unwrap();
    config
}

/// Waits until each of the `n` messages has a response, then until the queue of the database at
/// `db_url` holds only finished jobs (work cut off comes back once its leases expire); that
/// database, for the checks that follow.
async fn answered_and_drained(sink: &Sink, db_url: &str, n: usize) -> switchboard::store::Db {
    wait_for(120, "a response for every message", || async {
        (sink.by_message.lock().unwrap().len() == n).then_some(())
    })
    .await;
    let store = switchboard::store::Db::connect(&switchboard::config::DatabaseConfig {
        url: switchboard::config::Secret::new(db_url),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_for(60, "the queue to drain", || async {
        let states = job_states(&store).await;
        (states.keys().all(|s| s == "done")).then_some(())
    })
    .await;
    store
}

/// Every one of the `n` messages has exactly one response, stored once and delivered (perhaps
/// more than once, with its one id), and every job is done.
async fn exactly_once(sink: &Sink, store: &switchboard::store::Db, n: usize) {
    let by_message = sink.by_message.lock().unwrap().clone();
    assert_eq!(by_message.len(), n, "a response for every message");
    let multi: Vec<_> = by_message.iter().filter(|(_, r)| r.len() != 1).collect();
    assert!(
        multi.is_empty(),
        "messages with more than one distinct response: {multi:?}"
    );
    let total = *sink.total.lock().unwrap();
    eprintln!(
        "{total} callbacks for {n} responses ({} redelivered with the same id after the crash)",
        total - n
    );
    let counts: HashMap<String, i64> = messages::counts(store)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.direction, c.n))
        .collect();
    assert_eq!(counts.get("in"), Some(&(n as i64)));
    assert_eq!(counts.get("out"), Some(&(n as i64)));
    let states = job_states(store).await;
    assert_eq!(states.get("done"), Some(&(2 * n as i64)), "{states:?}");
    assert_eq!(
        states.len(),
        1,
        "nothing ready, running or dead: {states:?}"
    );
}

async fn sigkill_mid_flight_loses_and_duplicates_nothing(engine: Engine) {
    let db: TestDb = fresh_db(engine).await;
    let sink = Arc::new(Sink::default());
    let cb = serve_route!(sink.clone(), post, "/cb", receive);

    let dir = tempfile::tempdir().unwrap();
    let config = crash_config(dir.path(), &db.url, &cb);

    let http = reqwest::Client::new();
    let mut server = Binary::start(&config, None);
    let all: Vec<usize> = (0..N).collect();
    let posting = {
        let (http, base, all) = (http.clone(), format!("http://{}", server.http), all.clone());
        tokio::spawn(async move { post_all(&http, &base, &all).await })
    };
    wait_for(60, "deliveries under way", || async {
        (*sink.total.lock().unwrap() >= 150).then_some(())
    })
    .await;
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    let delivered_at_kill = sink.by_message.lock().unwrap().len();
    let first = posting.await.unwrap();
    let acked: HashSet<usize> = first
        .iter()
        .filter(|(_, d)| d.is_some())
        .map(|(i, _)| *i)
        .collect();
    eprintln!(
        "killed with {delivered_at_kill} of {N} answered, {} acknowledged",
        acked.len()
    );
    assert!(
        delivered_at_kill < N,
        "the kill must land while work is in flight"
    );

    // Restart and let the client retry everything: acknowledged messages come back as
    // duplicates, and so may some whose acknowledgement was lost in the crash.
    let mut server = Binary::start(&config, None);
    let second = post_all(&http, &format!("http://{}", server.http), &all).await;
    assert!(
        second.iter().all(|(_, d)| d.is_some()),
        "every retry is accepted"
    );
    for (i, dup) in &second {
        if acked.contains(i) {
            assert_eq!(
                *dup,
                Some(true),
                "message {i} was acknowledged before the crash"
            );
        }
    }
    // Deliveries interrupted by the kill come back when their leases expire and go out again
    // (with their ids): let them finish, then stop gracefully.
    let store = answered_and_drained(&sink, &db.url, N).await;
    server.terminate();
    let status = server.child.wait().unwrap();
    assert!(
        status.success(),
        "graceful shutdown exits cleanly: {status}"
    );

    exactly_once(&sink, &store, N).await;
}
on_both_engines!(sigkill_mid_flight_loses_and_duplicates_nothing);

/// Two instances on one PostgreSQL database share the load; one is SIGKILLed mid-flight and
/// never comes back. The other finishes its work: the jobs the dead one held are taken once
/// their leases expire, the client's retries of what the dead one had not acknowledged are
/// accepted (or recognised), and every message gets exactly one response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_instances_killed_the_other_finishes_its_work() {
    if crate::helpers::postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: skipped");
        return;
    }
    let db: TestDb = fresh_db(Engine::Postgres).await;
    let sink = Arc::new(Sink::default());
    let cb = serve_route!(sink.clone(), post, "/cb", receive);
    let dir = tempfile::tempdir().unwrap();
    let config = crash_config(dir.path(), &db.url, &cb);
    let http = reqwest::Client::new();
    let mut doomed = Binary::start(&config, None);
    let mut survivor = Binary::start(&config, None);
    let (first_half, second_half): (Vec<usize>, Vec<usize>) = (0..N).partition(|i| i % 2 == 0);
    let to_doomed = {
        let (http, base, ids) = (
            http.clone(),
            format!("http://{}", doomed.http),
            first_half.clone(),
        );
        tokio::spawn(async move { post_all(&http, &base, &ids).await })
    };
    let to_survivor = {
        let (http, base, ids) = (
            http.clone(),
            format!("http://{}", survivor.http),
            second_half,
        );
        tokio::spawn(async move { post_all(&http, &base, &ids).await })
    };
    wait_for(60, "deliveries under way", || async {
        (*sink.total.lock().unwrap() >= 150).then_some(())
    })
    .await;
    doomed.child.kill().unwrap(); // SIGKILL
    doomed.child.wait().unwrap();
    let answered_at_kill = sink.by_message.lock().unwrap().len();
    assert!(
        answered_at_kill < N,
        "the kill must land while work is in flight"
    );
    let acked: HashSet<usize> = to_doomed
        .await
        .unwrap()
        .iter()
        .filter(|(_, d)| d.is_some())
        .map(|(i, _)| *i)
        .collect();
    let survived = to_survivor.await.unwrap();
    assert!(
        survived.iter().all(|(_, d)| *d == Some(false)),
        "the survivor took its half"
    );
    eprintln!(
        "killed one of two with {answered_at_kill} of {N} answered, {} of its {} acknowledged",
        acked.len(),
        first_half.len()
    );
    // The client retries the dead instance's half on the survivor, as a load balancer would.
    let retried = post_all(&http, &format!("http://{}", survivor.http), &first_half).await;
    for (i, dup) in &retried {
        assert!(dup.is_some(), "message {i}: the retry is accepted");
        if acked.contains(i) {
            assert_eq!(
                *dup,
                Some(true),
                "message {i} was acknowledged before the kill"
            );
        }
    }
    let store = answered_and_drained(&sink, &db.url, N).await;
    survivor.terminate();
    assert!(survivor.child.wait().unwrap().success());
    exactly_once(&sink, &store, N).await;
}

/// Fills the file system `dir` is on, to the last byte it takes; returns the filler's path.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    let mut size = chunk.len();
    while size > 0 {
        if f.write_all(&chunk[..size]).is_err() || f.flush().is_err() {
            size /= 2;
        }
    }
    let _ = f.sync_all();
    path
}

/// A small file system of its own for SQLite: a tmpfs mounted on `dir` (root only); `None`
/// where mounting is not allowed.
fn small_disk(dir: &std::path::Path, size: &str) -> Option<()> {
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(())
}

/// SQLite on a full disk: inbound is refused retryably (`503` with `Retry-After`, never lost
/// once acknowledged), the process stays up, and once space returns it accepts again and
/// answers everything it acknowledged exactly once; the database is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_refuses_inbound_and_resumes_when_space_returns() {
    let disk = tempfile::tempdir().unwrap();
    if small_disk(disk.path(), "24m").is_none() {
        eprintln!("cannot mount a small file system here (needs root): full-disk test skipped");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(disk.path().to_owned());
    let db_url = format!("sqlite://{}", disk.path().join("switchboard.db").display());
    let sink = Arc::new(Sink::default());
    let cb = serve_route!(sink.clone(), post, "/cb", receive);
    let dir = tempfile::tempdir().unwrap();
    let config = crash_config(dir.path(), &db_url, &cb);
    let server = Binary::start(&config, None);
    let base = format!("http://{}", server.http);
    let http = reqwest::Client::new();
    // About 4 KB a message, so the database grows fast.
    let post = |i: usize| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let body = json!({
                "external_id": format!("disk-{i}"),
                "message": {
                    "thread_id": format!("disk-thread-{i}"),
                    "sender": {"address": "load@example.com", "auth_method": "none", "verified": false},
                    "recipient": "@echo@crash.test",
                    "parts": [{"kind": "text", "mime": "text/plain", "content": format!("message {i} {}", "x".repeat(4000))}]
                }
            });
            let r = http
                .post(format!("{base}/api/v1/messages"))
                .bearer_auth("crash-token")
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.headers().contains_key("retry-after"))
        }
    };
    for i in 0..20 {
        assert_eq!(post(i).await.0, 202);
    }
    wait_for(30, "the first answers", || async {
        (sink.by_message.lock().unwrap().len() == 20).then_some(())
    })
    .await;

    let filler = fill(disk.path());
    let mut accepted: Vec<usize> = (0..20).collect();
    let mut refused = 0;
    for i in 20..400 {
        match post(i).await {
            (202, _) => accepted.push(i),
            (503, true) => {
                refused += 1;
                if refused >= 5 {
                    break;
                }
            }
            other => panic!("message {i}: {other:?}, not 202 or a retryable 503"),
        }
    }
    eprintln!(
        "disk full: {} accepted, then {refused} refused",
        accepted.len()
    );
    assert!(
        refused >= 5,
        "a full disk refuses inbound: {refused} refused"
    );
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the process stays up");

    std::fs::remove_file(&filler).unwrap();
    let mut resumed = false;
    for attempt in 0..50 {
        let i = 1_000 + attempt;
        if post(i).await.0 == 202 {
            accepted.push(i);
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(resumed, "inbound is accepted again once space returns");
    for i in 2_000..2_020 {
        assert_eq!(post(i).await.0, 202);
        accepted.push(i);
    }
    wait_for(60, "an answer for every message acknowledged", || async {
        let by = sink.by_message.lock().unwrap();
        (by.len() >= accepted.len()).then_some(())
    })
    .await;
    let by_message = sink.by_message.lock().unwrap().clone();
    assert_eq!(
        by_message.len(),
        accepted.len(),
        "nothing refused was answered, nothing accepted lost"
    );
    assert!(
        by_message.values().all(|r| r.len() == 1),
        "one response each"
    );
    server.terminate();
    let mut server = server;
    assert!(server.child.wait().unwrap().success());

    let check = rusqlite::Connection::open(disk.path().join("switchboard.db")).unwrap();
    let verdict: String = check
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verdict, "ok");
}

/// A PostgreSQL server of the test's own: a cluster made with `initdb` in a temporary directory
/// and run as the `postgres` user on a port of its own, so the test can stop and start it
/// without touching the server the other tests use.
struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
}

impl OwnPostgres {
    /// `None` where there is no PostgreSQL to run (no binaries, no `postgres` user, not root).
    fn start() -> Option<OwnPostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("initdb").exists())?;
        let dir = tempfile::tempdir().ok()?;
        let owned = std::process::Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let pg = OwnPostgres { dir, bin, port };
        let made = owned
            && pg.run(
                "initdb",
                &[
                    "-D",
                    &pg.data(),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                ],
            );
        (made && pg.up()).then_some(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) -> bool {
        std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(tool))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts the server and waits until it accepts connections.
    fn up(&self) -> bool {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").display().to_string();
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-l", &log, "-w", "-o", &opts, "start"],
        )
    }

    /// Stops the server at once, as a crash or a lost network would.
    fn down(&self) -> bool {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        )
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self.down();
    }
}

/// An SMTP delivery to `rcpt` at `addr`: the first reply that is not a success, or `250` for a
/// message accepted.
async fn mail_to(addr: std::net::SocketAddr, rcpt: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let greeting = smtp(&mut s, "").await;
    if !greeting.starts_with("220") {
        return greeting;
    }
    for line in [
        "EHLO client.test".to_owned(),
        "MAIL FROM:<alice@example.com>".to_owned(),
        format!("RCPT TO:<{rcpt}>"),
        "DATA".to_owned(),
    ] {
        let reply = smtp(&mut s, &line).await;
        if !(reply.starts_with('2') || reply.starts_with("354")) {
            return reply;
        }
    }
    let reply = smtp(
        &mut s,
        "From: alice@example.com\r\nTo: echo@crash.test\r\nSubject: outage\r\nMessage-ID: <outage@example.com>\r\n\r\nhello\r\n.",
    )
    .await;
    let _ = smtp(&mut s, "QUIT").await;
    reply
}

/// PostgreSQL unreachable for a minute under a running instance: inbound is refused natively
/// and retryably all along (HTTP `503` with `Retry-After`, SMTP `451 4.3.0`), readiness is
/// false and says why, and within seconds of the database's return the instance is ready and
/// accepts again, without a restart of its own; nothing acknowledged is lost or answered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_unreachable_for_a_minute_is_refused_retryably_and_recovered_from() {
    let Some(pg) = OwnPostgres::start() else {
        eprintln!(
            "no PostgreSQL of its own can run here (needs root and PostgreSQL's binaries): skipped"
        );
        return;
    };
    let sink = Arc::new(Sink::default());
    let cb = serve_route!(sink.clone(), post, "/cb", receive);
    let dir = tempfile::tempdir().unwrap();
    let config = crash_config(dir.path(), &pg.url(), &cb);
    let server = Binary::start(&config, None);
    let private = server.metrics_addr();
    let smtp_addr = server.smtp.unwrap();
    let base = format!("http://{}", server.http);
    let http = reqwest::Client::new();
    let ids: Vec<usize> = (0..10).collect();
    assert!(
        post_all(&http, &base, &ids)
            .await
            .iter()
            .all(|(_, d)| *d == Some(false))
    );
    wait_for(30, "the first answers", || async {
        (sink.by_message.lock().unwrap().len() == 10).then_some(())
    })
    .await;

    assert!(pg.down());
    let outage = std::time::Instant::now();
    let refused_now = |i: usize| {
        let (http, base, private) = (http.clone(), base.clone(), private.clone());
        async move {
            let r = http
                .post(format!("{base}/api/v1/messages"))
                .bearer_auth("crash-token")
                .json(&json!({
                    "external_id": format!("outage-{i}"),
                    "message": {
                        "sender": {"address": "load@example.com", "auth_method": "none", "verified": false},
                        "recipient": "@echo@crash.test",
                        "parts": [{"kind": "text", "mime": "text/plain", "content": "while it is down"}]
                    }
                }))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 503, "refused while the database is down");
            assert!(r.headers().contains_key("retry-after"));
            let ready = http
                .get(format!("http://{private}/readyz"))
                .send()
                .await
                .unwrap();
            assert_eq!(ready.status(), 503);
            let why = ready.text().await.unwrap();
            assert!(why.contains("PostgreSQL at 127.0.0.1"), "{why}");
            let mail = mail_to(smtp_addr, "echo@crash.test").await;
            assert!(
                mail.starts_with("451 4.3.0"),
                "mail refused for now: {mail}"
            );
        }
    };
    refused_now(1).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    refused_now(2).await;
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(outage.elapsed())).await;
    refused_now(3).await;
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the process stays up");

    assert!(pg.up());
    let back = std::time::Instant::now();
    wait_for(30, "ready again", || async {
        let r = http
            .get(format!("http://{private}/readyz"))
            .send()
            .await
            .ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    let recovered = back.elapsed();
    eprintln!("ready {recovered:?} after the database came back");
    assert!(
        recovered < Duration::from_secs(15),
        "recovered within seconds: {recovered:?}"
    );
    let later: Vec<usize> = (100..110).collect();
    assert!(
        post_all(&http, &base, &later)
            .await
            .iter()
            .all(|(_, d)| *d == Some(false))
    );
    let store = answered_and_drained(&sink, &pg.url(), 20).await;
    server.terminate();
    let mut server = server;
    assert!(server.child.wait().unwrap().success());
    exactly_once(&sink, &store, 20).await;
    store.close().await;
}

/// PostgreSQL restarted while 2,000 messages flow through two instances: the clients' requests
/// refused during the restart are retried, both instances carry on without a restart of their
/// own, and every message acknowledged is answered exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_restarted_under_two_instances_loses_and_duplicates_nothing() {
    const MANY: usize = 2_000;
    let Some(pg) = OwnPostgres::start() else {
        eprintln!(
            "no PostgreSQL of its own can run here (needs root and PostgreSQL's binaries): skipped"
        );
        return;
    };
    let sink = Arc::new(Sink::default());
    let cb = serve_route!(sink.clone(), post, "/cb", receive);
    let dir = tempfile::tempdir().unwrap();
    let config = crash_config(dir.path(), &pg.url(), &cb);
    let first = Binary::start(&config, None);
    let second = Binary::start(&config, None);
    let bases = [
        format!("http://{}", first.http),
        format!("http://{}", second.http),
    ];
    let http = reqwest::Client::new();
    // Each instance gets half; what is refused is retried, on the other instance, until every
    // message is acknowledged (for at most three minutes: a bound on waiting, however many
    // rounds a slow recovery takes).
    let sending = {
        let (http, bases) = (http.clone(), bases.clone());
        tokio::spawn(async move {
            let mut pending: Vec<usize> = (0..MANY).collect();
            let mut round = 0;
            let give_up = tokio::time::Instant::now() + Duration::from_secs(180);
            while !pending.is_empty() && tokio::time::Instant::now() < give_up {
                let (a, b): (Vec<usize>, Vec<usize>) =
                    pending.iter().partition(|i| (*i + round) % 2 == 0);
                let (ra, rb) = tokio::join!(
                    post_all(&http, &bases[0], &a),
                    post_all(&http, &bases[1], &b)
                );
                pending = ra
                    .into_iter()
                    .chain(rb)
                    .filter(|(_, d)| d.is_none())
                    .map(|(i, _)| i)
                    .collect();
                round += 1;
                if !pending.is_empty() {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            (pending, round)
        })
    };
    wait_for(60, "deliveries under way", || async {
        (*sink.total.lock().unwrap() >= 300).then_some(())
    })
    .await;
    // The callback is held while PostgreSQL goes down, so the restart lands while work is in
    // flight however long stopping it takes: only the few deliveries already queued at the
    // gate get through.
    let held = sink.gate.lock().await;
    assert!(pg.down());
    let answered_at_restart = sink.by_message.lock().unwrap().len();
    drop(held);
    // The outage lasts until both instances have seen it: each one's readiness fails.
    for server in [&first, &second] {
        let ready = format!("http://{}/readyz", server.metrics_addr());
        wait_for(60, "an instance to see PostgreSQL gone", || async {
            let status = http.get(&ready).send().await.ok()?.status();
            (status == 503).then_some(())
        })
        .await;
    }
    assert!(pg.up());
    let (unsent, rounds) = sending.await.unwrap();
    assert!(unsent.is_empty(), "{} never acknowledged", unsent.len());
    eprintln!(
        "restarted with {answered_at_restart} of {MANY} answered; every message acknowledged after {rounds} rounds"
    );
    assert!(
        answered_at_restart < MANY,
        "the restart must land while work is in flight"
    );
    let store = answered_and_drained(&sink, &pg.url(), MANY).await;
    for (server, base) in [(&first, &bases[0]), (&second, &bases[1])] {
        let ready = format!("http://{}/readyz", server.metrics_addr());
        wait_for(
            30,
            &format!("{base} to be ready again on its own"),
            || async {
                let status = http.get(&ready).send().await.ok()?.status();
                (status == 200).then_some(())
            },
        )
        .await;
    }
    for mut server in [first, second] {
        server.terminate();
        assert!(server.child.wait().unwrap().success());
    }
    exactly_once(&sink, &store, MANY).await;
    store.close().await;
}
