//! ActivityPub benchmark, side by side in one run:
//!
//! 1. **Inbox**: pre-signed (draft-cavage, RSA-2048) `Create(Note)` deliveries, each mentioning
//!    and addressing the `echo` agent, POSTed by 64 concurrent connections to switchboard's
//!    shared inbox: signature verified (key cached after the first fetch), digest checked,
//!    activity deduped, message stored and its dispatch job enqueued, 202. Queue workers are off,
//!    so only the inbox path is measured.
//! 2. The same load against a **Fedify 2.3.6** inbox (`tests/peers/activitypub/peer.mjs`, Node 22,
//!    verification on, in-memory KV; its listener records the activity in memory) when the peer
//!    is installed (`source scripts/peers/activitypub.sh`). Rounds alternate switchboard /
//!    Fedify, three of each; medians are printed.
//! 3. **Outbound**: `ap_deliver` jobs drained by the queue workers, each one RSA-signed POST to a
//!    stand-in remote answering 202.
//!
//! The load generator and the stand-in remote (actor document, POST sink) run in processes of
//! their own (`bench/common/loadgen.rs`), pinned to core 0 by default, so the CPU time printed
//! is the server's alone. `cargo bench --bench activitypub [-- N]` (default N = 4000).

#[path = "common/loadgen.rs"]
mod loadgen;

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard::app::Options;
use switchboard::config::{DatabaseConfig, Secret};
use switchboard::moderation::Who;
use switchboard::store::{Arg, Db};
use switchboard::transports::activitypub::sig;
use switchboard::{Application, Config};

const KEY_PEM: &str = include_str!("../tests/fixtures/activitypub/test-key.pem");
const PUB_PEM: &str = include_str!("../tests/fixtures/activitypub/test-key.pub.pem");
const CONCURRENCY: usize = 64;
const ROUNDS: usize = 3;

fn now_s() -> i64 {
    use switchboard::clock::Clock as _;
    switchboard::clock::SystemClock.now_ms() / 1000
}

fn signer() -> ring::signature::RsaKeyPair {
    let der = switchboard::keys::spki_der_from_pem(KEY_PEM).unwrap_or_default();
    ring::signature::RsaKeyPair::from_pkcs8(&der).unwrap_or_else(|e| panic!("test key: {e}"))
}

fn rsa_sign(kp: &ring::signature::RsaKeyPair, msg: &[u8]) -> Vec<u8> {
    let mut sig = vec![0; kp.public().modulus_len()];
    kp.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        msg,
        &mut sig,
    )
    .unwrap_or_else(|e| panic!("sign: {e}"));
    sig
}

/// The stand-in remote server: the sender's actor document, and a sink for every POST.
fn start_remote() -> loadgen::Remote {
    loadgen::Remote::start(|base| {
        let id = format!("{base}/users/alice");
        let doc = json!({
            "@context": ["https://www.w3.org/ns/activitystreams", "https://w3id.org/security/v1"],
            "id": id, "type": "Person", "preferredUsername": "alice",
            "inbox": format!("{id}/inbox"), "endpoints": {"sharedInbox": format!("{base}/inbox")},
            "publicKey": {"id": format!("{id}#main-key"), "owner": id, "publicKeyPem": PUB_PEM},
        });
        vec![("/users/alice".to_owned(), doc.to_string())]
    })
}

/// Pre-signed requests.
fn presign(
    kp: &ring::signature::RsaKeyPair,
    remote: &str,
    inbox: &str,
    agent_actor: &str,
    agent_addr: &str,
    n: usize,
    tag: &str,
) -> Vec<loadgen::HttpRequest> {
    let url = url::Url::parse(inbox).unwrap_or_else(|e| panic!("{e}"));
    let actor = format!("{remote}/users/alice");
    (0..n)
        .map(|i| {
            let id = format!("{remote}/notes/{tag}-{i}");
            let body = serde_json::to_vec(&json!({
                "@context": "https://www.w3.org/ns/activitystreams",
                "id": format!("{id}/activity"), "type": "Create", "actor": actor,
                "to": [agent_actor], "cc": ["https://www.w3.org/ns/activitystreams#Public"],
                "object": {
                    "id": id, "type": "Note", "attributedTo": actor,
                    "to": [agent_actor], "cc": ["https://www.w3.org/ns/activitystreams#Public"],
                    "content": format!("<p><span class=\"h-card\"><a href=\"{agent_actor}\" class=\"u-url mention\">@<span>echo</span></a></span> benchmark note {i}, about as long as a typical toot so the payload is realistic. <a href=\"https://example.com/x\">a link</a></p>"),
                    "tag": [{"type": "Mention", "href": agent_actor, "name": agent_addr}],
                    "published": "2026-11-22T06:00:00Z",
                }
            }))
            .unwrap_or_default();
            let headers = sig::sign_cavage::<()>("POST", &url, Some(&body), &format!("{actor}#main-key"), now_s(), |m| Ok(rsa_sign(kp, m)))
                .unwrap_or_default();
            let mut headers: Vec<(String, String)> =
                headers.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            headers.push(("content-type".into(), "application/activity+json".into()));
            loadgen::HttpRequest {
                url: inbox.to_owned(),
                headers,
                body: String::from_utf8(body).unwrap_or_default(),
            }
        })
        .collect()
}

/// POSTs `reqs` from the generator process; the CPU time is that of process `server`.
fn fire(reqs: Vec<loadgen::HttpRequest>, server: u32) -> (loadgen::Report, f64) {
    let n = reqs.len();
    let (report, cpu) = loadgen::run(
        &loadgen::Job {
            concurrency: CONCURRENCY,
            expect_status: 202,
            expect_body: None,
            load: loadgen::Load::Http(reqs),
        },
        server,
    );
    (report, cpu as f64 / n.max(1) as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Medians of a contender's rounds: (rate, p50, p99, CPU µs per activity).
fn medians(rounds: &[(loadgen::Report, f64)]) -> (f64, f64, f64, f64) {
    (
        median(rounds.iter().map(|(r, _)| r.rate()).collect()),
        median(rounds.iter().map(|(r, _)| r.p50_ms).collect()),
        median(rounds.iter().map(|(r, _)| r.p99_ms).collect()),
        median(rounds.iter().map(|(_, c)| *c).collect()),
    )
}

fn config(db: &str) -> Config {
    let mut c = Config::default();
    c.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    c.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    c.database = DatabaseConfig {
        url: Secret::new(db),
        ..DatabaseConfig::default()
    };
    c.net.allow_private_addresses = true;
    c.queue.poll_interval_ms = 50;
    c.email.enabled = false;
    loadgen::unlimited(&mut c.limits);
    loadgen::blocks(&mut c.moderation);
    c
}

struct Peer(std::process::Child);
impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_fedify() -> Option<(Peer, String)> {
    let dir = std::env::var("SWITCHBOARD_AP_PEER_DIR").ok()?;
    let node = std::env::var("SWITCHBOARD_AP_NODE").ok()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/activitypub/peer.mjs");
    let copy = std::path::Path::new(&dir).join("peer.mjs");
    std::fs::copy(script, &copy).ok()?;
    let mut child = std::process::Command::new(node)
        .arg(&copy)
        .current_dir(&dir)
        .env("PEER_PORT", port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(std::result::Result::ok)
        {
            if line.starts_with("READY") {
                let _ = tx.send(());
            }
        }
    });
    let peer = Peer(child);
    rx.recv_timeout(Duration::from_secs(60)).ok()?;
    Some((peer, format!("http://127.0.0.1:{port}")))
}

fn main() {
    loadgen::main(bench);
}

async fn bench() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(4000);
    let kp = signer();
    let remote = start_remote();
    let me = std::process::id();
    println!("ActivityPub: {}", loadgen::describe());
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db_url = format!("sqlite://{}", dir.path().join("bench.db").display());

    // 1. switchboard inbox (workers off: verify + store + enqueue only).
    let app = Application::build_with(
        config(&db_url),
        Options {
            workers: false,
            ..Options::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let base = format!("http://{}", app.http_addr());
    let domain = app.config().domain().unwrap_or_default();
    let actor = format!("{base}/agents/echo");
    let inbox = format!("{base}/inbox");
    let addr = format!("@echo@{domain}");
    // The actor's key is generated on first use; make that happen outside every measurement.
    let _ = reqwest::Client::new()
        .get(&actor)
        .header("accept", "application/activity+json")
        .send()
        .await;
    let _ = fire(
        presign(&kp, &remote.base, &inbox, &actor, &addr, 200, "warm"),
        me,
    );

    // 2. Fedify, warmed up the same way.
    let fedify = start_fedify();
    let f = fedify.as_ref().map(|(peer, fbase)| {
        let finbox = format!("{fbase}/inbox");
        let factor = format!("{fbase}/users/alice");
        let _ = fire(
            presign(
                &kp,
                &remote.base,
                &finbox,
                &factor,
                "@alice@fedify",
                200,
                "fwarm",
            ),
            peer.0.id(),
        );
        (peer.0.id(), finbox, factor)
    });
    if f.is_none() {
        println!(
            "Fedify peer not installed (source scripts/peers/activitypub.sh): its column is skipped"
        );
    }
    println!(
        "{n} pre-signed activities per round, {CONCURRENCY} connections, {ROUNDS} rounds each"
    );
    println!("| round | contender | activities/s | p50 ms | p99 ms | CPU µs/activity |");
    println!("|---|---|---|---|---|---|");
    let (mut sb, mut fd) = (Vec::new(), Vec::new());
    // `BENCH_OUTBOUND_ONLY=1` skips the inbox rounds (for profiling the outbound path).
    let rounds = if std::env::var_os("BENCH_OUTBOUND_ONLY").is_some() {
        0
    } else {
        ROUNDS
    };
    // Every round's requests are signed before the first is sent.
    let mut sb_reqs: Vec<_> = (0..rounds)
        .map(|round| {
            presign(
                &kp,
                &remote.base,
                &inbox,
                &actor,
                &addr,
                n,
                &format!("sb{round}"),
            )
        })
        .collect();
    let mut fd_reqs: Vec<_> = f
        .iter()
        .flat_map(|(_, finbox, factor)| {
            (0..rounds).map(|round| {
                presign(
                    &kp,
                    &remote.base,
                    finbox,
                    factor,
                    "@alice@fedify",
                    n,
                    &format!("fed{round}"),
                )
            })
        })
        .collect();
    println!("signed; measuring");
    for round in 0..rounds {
        let (r, cpu) = fire(std::mem::take(&mut sb_reqs[round]), me);
        assert_eq!(r.accepted, n, "switchboard refused {} activities", r.errors);
        println!(
            "| {} | switchboard | {:.0} | {:.1} | {:.1} | {cpu:.0} |",
            round + 1,
            r.rate(),
            r.p50_ms,
            r.p99_ms
        );
        sb.push((r, cpu));
        if let Some((pid, _, _)) = &f {
            let (r, cpu) = fire(std::mem::take(&mut fd_reqs[round]), *pid);
            println!(
                "| {} | Fedify 2.3.6 | {:.0} | {:.1} | {:.1} | {cpu:.0} |",
                round + 1,
                r.rate(),
                r.p50_ms,
                r.p99_ms
            );
            fd.push((r, cpu));
        }
    }
    let (rate, p50, p99, cpu) = medians(&sb);
    if !sb.is_empty() {
        println!(
            "switchboard inbox (SQLite), median: {rate:.0} activities/s, p50 {p50:.1} ms, p99 {p99:.1} ms, {cpu:.0} µs CPU/activity (server process only) = {:.0} activities per CPU-second",
            1e6 / cpu.max(1.0)
        );
        // The inbox's checks of a sender no block matches: its host and actor IRI before the
        // signature is verified, its handle after, then the woken agent's and ingest's of the
        // message's sender.
        let actor = format!("{}/users/alice", remote.base);
        let host = remote.base.trim_start_matches("http://");
        let handle = format!("@alice@{host}");
        loadgen::print_blocks_cost(&app.config().moderation, "activity", cpu, || {
            vec![
                (None, Who::domain(host).with_sender(&actor)),
                (None, Who::default().with_sender(&handle)),
                (
                    Some("echo"),
                    Who::default().with_sender(&handle).with_sender(&actor),
                ),
                (
                    None,
                    Who::default().with_sender(&handle).with_sender(&actor),
                ),
            ]
        });
        if !fd.is_empty() {
            let (frate, fp50, fp99, fcpu) = medians(&fd);
            println!(
                "Fedify 2.3.6 inbox (memory KV), median: {frate:.0} activities/s, p50 {fp50:.1} ms, p99 {fp99:.1} ms, {fcpu:.0} µs CPU/activity (Node process) = {:.0} activities per CPU-second",
                1e6 / fcpu.max(1.0)
            );
            println!(
                "ratio switchboard / Fedify: rate {:.1}×, CPU per activity {:.1}× less",
                rate / frate.max(1e-9),
                fcpu / cpu.max(1e-9)
            );
        }
    }
    drop(fedify);
    let db = Db::connect(&DatabaseConfig {
        url: Secret::new(&db_url),
        ..DatabaseConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    app.shutdown().await.unwrap_or_else(|e| panic!("{e}"));

    // 3. Outbound: N signed deliveries to the sink, drained by the ap_deliver workers.
    let now = {
        use switchboard::clock::Clock as _;
        switchboard::clock::SystemClock.now_ms()
    };
    let body = json!({"@context": "https://www.w3.org/ns/activitystreams", "id": "x", "type": "Create", "actor": actor, "object": {"type": "Note", "content": "benchmark reply of ordinary length, a sentence or two."}}).to_string();
    let payloads: Vec<(String, String)> = (0..n)
        .map(|i| {
            (
                format!("bench-deliver-{i}"),
                json!({"agent": "echo", "inbox": format!("{}/inbox", remote.base), "body": body})
                    .to_string(),
            )
        })
        .collect();
    let mut tx = db.begin().await.unwrap_or_else(|e| panic!("{e}"));
    for chunk in payloads.chunks(500) {
        let jobs: Vec<switchboard::store::jobs::NewJob<'_>> = chunk
            .iter()
            .map(|(id, p)| switchboard::store::jobs::NewJob {
                id,
                kind: "ap_deliver",
                payload: p,
                max_attempts: 3,
                run_at: now,
                lease: None,
            })
            .collect();
        switchboard::store::jobs::enqueue_many(&mut tx, &jobs, now)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
    // The inbox rounds left their dispatch jobs behind (workers were off): drop them, so that
    // only the deliveries below are measured, not the echo agent's replies to those notes.
    db.execute(
        "DELETE FROM jobs WHERE kind = 'dispatch'",
        &[] as &[Arg<'_>],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let before = remote.posts().await;
    loadgen::pin_server(me);
    let cpu0 = loadgen::cpu_micros(me);
    let start = Instant::now();
    let app = Application::build_with(config(&db_url), Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    loadgen::pin_server(me);
    loop {
        #[derive(sqlx::FromRow, serde::Deserialize)]
        struct C {
            n: i64,
        }
        let c: Option<C> = db
            .fetch_optional("SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state IN ('done', 'dead')", &[] as &[Arg<'_>])
            .await
            .unwrap_or(None);
        if c.is_some_and(|c| c.n as usize >= n) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = (loadgen::cpu_micros(me) - cpu0) as f64;
    let sent = remote.posts().await - before;
    println!(
        "switchboard outbound: {:.0} signed deliveries/s ({sent} POSTs), {:.0} µs CPU/delivery (server process only) → {:.0} deliveries per CPU-second",
        sent as f64 / wall,
        cpu / sent.max(1) as f64,
        sent as f64 / (cpu / 1e6)
    );
    app.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
}
