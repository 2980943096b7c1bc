//! ActivityPub benchmark, side by side in one run:
//!
//! 1. **Inbox**: pre-signed (draft-cavage, RSA-2048) `Create(Note)` deliveries, each mentioning
//!    and addressing the `echo` agent, POSTed by 64 concurrent connections to switchboard's
//!    shared inbox: signature verified (key cached after the first fetch), digest checked,
//!    activity deduped, message stored and its dispatch job enqueued, 202. Queue workers are off,
//!    so only the inbox path is measured.
//! 2. The same load against a **Fedify 2.3.6** inbox (`tests/peers/activitypub/peer.mjs`, Node 22,
//!    verification on, in-memory KV; its listener records the activity in memory) when the peer
//!    is installed (`source scripts/peers/activitypub.sh`).
//! 3. **Outbound**: `ap_deliver` jobs drained by the queue workers, each one RSA-signed POST to a
//!    loopback sink answering 202.
//!
//! `cargo bench --bench activitypub [-- N]` (default N = 4000). Prints rates, p50/p99 latency and
//! CPU per message of this process (which also runs the load generator and the sink).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use switchboard::app::Options;
use switchboard::config::{DatabaseConfig, Secret};
use switchboard::store::{Arg, Db};
use switchboard::transports::activitypub::sig;
use switchboard::{Application, Config};

const KEY_PEM: &str = include_str!("../tests/fixtures/activitypub/test-key.pem");
const PUB_PEM: &str = include_str!("../tests/fixtures/activitypub/test-key.pub.pem");
const CONCURRENCY: usize = 64;

fn cpu_micros() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (field(11) + field(12)) * 10_000
}

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

/// The "remote server": serves the sender's actor document and accepts every POST.
async fn start_remote() -> (String, Arc<Mutex<u64>>) {
    let posts = Arc::new(Mutex::new(0u64));
    let docs: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let (p, d) = (posts.clone(), docs.clone());
    let server = actix_web::HttpServer::new(move || {
        let (p, d) = (p.clone(), d.clone());
        actix_web::App::new().default_service(web::route().to(move |req: HttpRequest| {
            let (p, d) = (p.clone(), d.clone());
            async move {
                if req.method() == actix_web::http::Method::POST {
                    *p.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    return HttpResponse::Accepted().finish();
                }
                match d.lock().unwrap_or_else(|e| e.into_inner()).get(req.path()) {
                    Some(b) => HttpResponse::Ok()
                        .content_type("application/activity+json")
                        .body(b.clone()),
                    None => HttpResponse::NotFound().finish(),
                }
            }
        }))
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap_or_else(|e| panic!("bind: {e}"));
    let base = format!("http://{}", server.addrs()[0]);
    tokio::spawn(server.run());
    let id = format!("{base}/users/alice");
    d_insert(
        &docs,
        "/users/alice",
        &json!({
            "@context": ["https://www.w3.org/ns/activitystreams", "https://w3id.org/security/v1"],
            "id": id, "type": "Person", "preferredUsername": "alice",
            "inbox": format!("{id}/inbox"), "endpoints": {"sharedInbox": format!("{base}/inbox")},
            "publicKey": {"id": format!("{id}#main-key"), "owner": id, "publicKeyPem": PUB_PEM},
        }),
    );
    (base, posts)
}

fn d_insert(d: &Mutex<HashMap<String, String>>, path: &str, v: &serde_json::Value) {
    d.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_owned(), v.to_string());
}

/// A pre-signed request: headers and body.
type Presigned = (sig::SignedHeaders, Vec<u8>);

/// Pre-signed requests.
fn presign(
    kp: &ring::signature::RsaKeyPair,
    remote: &str,
    inbox: &str,
    agent_actor: &str,
    agent_addr: &str,
    n: usize,
    tag: &str,
) -> Vec<Presigned> {
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
            (headers, body)
        })
        .collect()
}

struct Result {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_us: f64,
    accepted: usize,
}

async fn fire(url: &str, reqs: Vec<Presigned>) -> Result {
    let n = reqs.len();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let queue = Arc::new(Mutex::new(
        reqs.into_iter().collect::<std::collections::VecDeque<_>>(),
    ));
    let cpu0 = cpu_micros();
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (q, c, url) = (queue.clone(), client.clone(), url.to_owned());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut ok = 0usize;
                loop {
                    let next = q.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((headers, body)) = next else { break };
                    let mut r = c
                        .post(&url)
                        .header("content-type", "application/activity+json")
                        .body(body);
                    for (k, v) in headers {
                        r = r.header(k, v);
                    }
                    let t = Instant::now();
                    if let Ok(resp) = r.send().await {
                        if resp.status().as_u16() == 202 {
                            ok += 1;
                        }
                        let _ = resp.bytes().await;
                    }
                    lat.push(t.elapsed());
                }
                (lat, ok)
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut accepted = 0;
    for t in tasks {
        if let Ok((l, ok)) = t.await {
            lat.extend(l);
            accepted += ok;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = (cpu_micros() - cpu0) as f64;
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Result {
        rate: accepted as f64 / wall,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        cpu_us: cpu / n as f64,
        accepted,
    }
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

/// CPU time of a child process (user + system), in microseconds.
fn child_cpu_micros(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (field(11) + field(12)) * 10_000
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(4000);
    let kp = signer();
    let (remote, posts) = start_remote().await;
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
    let warm = presign(
        &kp,
        &remote,
        &inbox,
        &actor,
        &format!("@echo@{domain}"),
        200,
        "warm",
    );
    let _ = fire(&inbox, warm).await;
    println!("pre-signing {n} requests per contender…");
    let reqs = presign(
        &kp,
        &remote,
        &inbox,
        &actor,
        &format!("@echo@{domain}"),
        n,
        "sb",
    );
    let sb = fire(&inbox, reqs).await;
    println!(
        "switchboard inbox (SQLite): {:.0} activities/s, p50 {:.1} ms, p99 {:.1} ms, {:.0} µs CPU/activity (incl. load generator), {}/{n} accepted",
        sb.rate, sb.p50_ms, sb.p99_ms, sb.cpu_us, sb.accepted
    );

    // 2. Fedify inbox, same load.
    if let Some((peer, fbase)) = start_fedify() {
        let finbox = format!("{fbase}/inbox");
        let factor = format!("{fbase}/users/alice");
        let warm = presign(
            &kp,
            &remote,
            &finbox,
            &factor,
            "@alice@fedify",
            200,
            "fwarm",
        );
        let _ = fire(&finbox, warm).await;
        let reqs = presign(&kp, &remote, &finbox, &factor, "@alice@fedify", n, "fed");
        let cpu0 = child_cpu_micros(peer.0.id());
        let fd = fire(&finbox, reqs).await;
        let fcpu = (child_cpu_micros(peer.0.id()) - cpu0) as f64 / n as f64;
        println!(
            "Fedify 2.3.6 inbox (memory KV): {:.0} activities/s, p50 {:.1} ms, p99 {:.1} ms, {:.0} µs CPU/activity (Node process), {}/{n} accepted",
            fd.rate, fd.p50_ms, fd.p99_ms, fcpu, fd.accepted
        );
        if fd.rate > 0.0 {
            println!("ratio switchboard / Fedify: {:.1}×", sb.rate / fd.rate);
        }
        drop(peer);
    } else {
        println!(
            "Fedify peer not installed (source scripts/peers/activitypub.sh): its column is skipped"
        );
    }
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
                json!({"agent": "echo", "inbox": format!("{remote}/inbox"), "body": body})
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
            })
            .collect();
        switchboard::store::jobs::enqueue_many(&mut tx, &jobs, now)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
    let before = *posts.lock().unwrap_or_else(|e| e.into_inner());
    let cpu0 = cpu_micros();
    let start = Instant::now();
    let app = Application::build_with(config(&db_url), Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    loop {
        #[derive(sqlx::FromRow)]
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
    let cpu = (cpu_micros() - cpu0) as f64;
    let sent = *posts.lock().unwrap_or_else(|e| e.into_inner()) - before;
    println!(
        "switchboard outbound: {:.0} signed deliveries/s ({sent} POSTs), {:.0} µs CPU/delivery (incl. sink) → {:.0} deliveries per CPU-second",
        sent as f64 / wall,
        cpu / sent.max(1) as f64,
        sent as f64 / (cpu / 1e6)
    );
    app.shutdown().await.unwrap_or_else(|e| panic!("{e}"));
}
