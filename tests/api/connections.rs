//! Connection exhaustion and shutdown, against the real binary: a flood of stalled uploads under
//! a service's usual open-file limit (1024) leaves health answering and is cut within the body
//! timeout (the private listener's health answering throughout, even while the public one is
//! full); SIGTERM stops every listener and worker at once and exits within one grace period,
//! losing nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpResponse, web};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use crate::helpers::{Binary, Engine, fresh_db, serve_route, wait_for};

const TOKEN: &str = "flood-token";
/// The body deadline the stalled uploads are cut at. A flood is wholly open before any of them
/// sends its headers (see [`stall`]), so no place comes free while it opens, whatever this is.
const BODY_TIMEOUT_MS: u64 = 5_000;
/// Longer than a flood is given to open (60 s): until its headers, an admitted connection is
/// held by nothing else.
const HEADER_TIMEOUT_MS: u64 = 120_000;
const PER_PEER: usize = 200;
const FLOOD: usize = 1_100;
/// Health's status line when it answers.
const OK: &str = "HTTP/1.1 200 OK";

/// Whether a probe was answered, if only with the refusal a full listener gives.
fn answered(status: &str) -> bool {
    status == OK || status == "HTTP/1.1 503 Service Unavailable"
}

async fn connect_from(source: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(to).await
}

/// A stalled upload: the headers of a 100 kB POST, one byte of body, then silence. In two
/// parts: the headers but their closing blank line, then the rest.
fn stalled_upload() -> (String, &'static str) {
    (
        format!(
            "POST /api/v1/messages HTTP/1.1\r\nHost: flood.test\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100000\r\n"
        ),
        "\r\n{",
    )
}

/// How a stalled connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// 503 written at accept: the caps refused it.
    Refused,
    /// 408 after the body timeout, with the time it took.
    Cut(Duration),
    /// Anything else (the text read, or the error).
    Other(String),
}

/// Whether what a connection read is the refusal written at accept.
fn is_refusal(text: &str) -> bool {
    text.starts_with("HTTP/1.1 503") && text.contains("too many connections")
}

/// A stalled upload from `source`, in two steps. First it connects and sends its headers but
/// their closing blank line: a connection over a cap reads its refusal at once (counted in
/// `refused`), an admitted one holds its place, its request unfinished. (Bytes are sent, not
/// silence, so a connection the listener's queue had no room for is retried by the client
/// until it is taken.) Once `go` turns true it ends its headers and sends one byte of body,
/// then waits (at most 20 s) for the server to end it. Only the body deadline, which starts at
/// the end of the headers, cuts an admitted connection, so a whole flood is in before any place
/// comes free, however slowly a busy machine opens it.
async fn stall(
    source: IpAddr,
    to: SocketAddr,
    refused: Arc<AtomicUsize>,
    mut go: tokio::sync::watch::Receiver<bool>,
) -> End {
    let mut s = match connect_from(source, to).await {
        Ok(s) => s,
        Err(e) => return End::Other(format!("connect: {e}")),
    };
    let (head, rest) = stalled_upload();
    // (A refused connection may be shut before this is written; its refusal is read below.)
    let headed = s.write_all(head.as_bytes()).await;
    let mut got = Vec::new();
    tokio::select! {
        read = s.read_to_end(&mut got) => {
            let text = String::from_utf8_lossy(&got).into_owned();
            if is_refusal(&text) {
                refused.fetch_add(1, Ordering::SeqCst);
                return End::Refused;
            }
            return End::Other(format!("before the body: {headed:?}: {read:?}: {text:?}"));
        }
        _ = go.wait_for(|go| *go) => {}
    }
    let sent = Instant::now();
    let wrote = s.write_all(rest.as_bytes()).await;
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    // (A connection the server had not taken from its backlog yet may be refused after `go`.)
    if is_refusal(&text) {
        End::Refused
    } else if text.starts_with("HTTP/1.1 408") {
        End::Cut(sent.elapsed())
    } else {
        End::Other(format!("{wrote:?}: {read:?}: {text:?}"))
    }
}

/// A flood of [`FLOOD`] stalled uploads, the `i`th from `source(i)`: every connection is opened,
/// then, once at least `refused` have been refused, all that hold a place send their stalled
/// upload; how each ended.
async fn flood(source: impl Fn(usize) -> IpAddr, to: SocketAddr, refused: usize) -> Vec<End> {
    let count = Arc::new(AtomicUsize::new(0));
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let stalls: Vec<_> = (0..FLOOD)
        .map(|i| tokio::spawn(stall(source(i), to, count.clone(), go_rx.clone())))
        .collect();
    wait_for(
        60,
        "every connection over the caps to be refused",
        || async { (count.load(Ordering::SeqCst) >= refused).then_some(()) },
    )
    .await;
    go_tx.send(true).unwrap();
    let mut ends = Vec::new();
    for s in stalls {
        ends.push(s.await.unwrap());
    }
    ends
}

/// One health probe from `source` on a fresh connection: the status line, or what went wrong.
/// It names the address it connects to as its `Host`, as a probe of an orchestrator does (the
/// private listener answers only the host names it serves).
async fn probe(source: IpAddr, to: SocketAddr) -> String {
    let attempt = async {
        let mut s = connect_from(source, to).await?;
        let request = format!("GET /healthz HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).await?;
        let text = String::from_utf8_lossy(&got).into_owned();
        Ok::<_, std::io::Error>(text.lines().next().unwrap_or("").to_owned())
    };
    match tokio::time::timeout(Duration::from_secs(2), attempt).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => format!("error: {e}"),
        Err(_) => "no answer within 2 s".into(),
    }
}

/// How many probes each prober makes at least, however slowly a loaded machine runs them.
const PROBES: usize = 10;

/// Probes health every 100 ms until `stop` turns true and [`PROBES`] have been made; returns
/// every answer. (Counted rather than timed: on a busy machine fewer probes fit in a flood.)
fn keep_probing(
    source: IpAddr,
    to: SocketAddr,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut answers = Vec::new();
        while !*stop.borrow() || answers.len() < PROBES {
            answers.push(probe(source, to).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answers
    })
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_uploads_under_a_1024_descriptor_limit_leave_health_answering() {
    let db = fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "http://flood.test"
max_connections_per_peer = {PER_PEER}
header_timeout_ms = {HEADER_TIMEOUT_MS}
body_timeout_ms = {BODY_TIMEOUT_MS}
request_timeout_ms = 40000
[database]
url = "{}"
[log]
format = "json"
filter = "info"
[email]
enabled = false
[api]
token = "{TOKEN}"
"#,
            db.url
        ),
    )
    .unwrap();
    let server = Binary::start(&config, Some(1024));
    let to = server.http;
    let up = server.logged("switchboard is up").join("");
    assert!(
        up.contains("\"open_file_limit\":\"Some(1024)\"") && up.contains("\"max_connections\":768"),
        "the cap is derived from the open-file limit: {up}"
    );

    // 1. From one address: past the per-peer cap every connection is refused as it is
    // accepted; the ones admitted are cut when their body is late. Health, from another
    // address, answers all along.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let probes = keep_probing(ip("127.0.0.2"), to, stop_rx);
    let ends = flood(|_| ip("127.0.0.1"), to, FLOOD - PER_PEER).await;
    stop_tx.send(true).unwrap();
    let answers = probes.await.unwrap();
    let cut: Vec<Duration> = ends
        .iter()
        .filter_map(|e| match e {
            End::Cut(d) => Some(*d),
            _ => None,
        })
        .collect();
    let refused = ends.iter().filter(|e| **e == End::Refused).count();
    let other: Vec<_> = ends.iter().filter(|e| matches!(e, End::Other(_))).collect();
    assert!(
        other.is_empty(),
        "{} connections ended otherwise, e.g. {:?}",
        other.len(),
        other.first()
    );
    assert_eq!(cut.len(), PER_PEER, "one peer holds at most its cap");
    assert_eq!(refused, FLOOD - PER_PEER);
    let body_timeout = Duration::from_millis(BODY_TIMEOUT_MS);
    for d in &cut {
        assert!(
            *d >= body_timeout - Duration::from_millis(50) && *d < body_timeout * 3,
            "a stalled body is cut at the body timeout, not {d:?}"
        );
    }
    assert!(answers.len() >= PROBES, "probed throughout: {answers:?}");
    assert!(
        answers.iter().all(|a| a == OK),
        "health answered throughout: {answers:?}"
    );

    // 2. From eleven addresses, each under the per-peer cap: the cap in all (the limit less
    // 256 descriptors) refuses the rest, so the process never runs out of descriptors; health
    // is refused at once while the listener is full (never left hanging) and answers again
    // once the stalled bodies are cut.
    // The private listener's probe, which a Kubernetes kubelet or `switchboard healthcheck`
    // asks, answers 200 throughout: it has its own admission.
    let private: SocketAddr = server.metrics_addr().parse().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let probes = keep_probing(ip("127.0.0.2"), to, stop_rx.clone());
    let private_probes = keep_probing(ip("127.0.0.2"), private, stop_rx);
    let ends = flood(|i| ip(&format!("127.0.0.{}", 10 + i % 11)), to, FLOOD - 768).await;
    // A cut connection gives its place back when the server drops it, a moment after its
    // client has read the end (longer for a server thread preempted between the two on a busy
    // machine): health is asked until it answers 200 again, each answer on the way a 200 or
    // the full listener's refusal, never silence.
    let after = std::sync::Mutex::new(Vec::new());
    wait_for(
        30,
        "health to answer 200 once the stalled bodies are cut",
        || async {
            let status = probe(ip("127.0.0.2"), to).await;
            let ok = status == OK;
            after.lock().unwrap().push(status);
            ok.then_some(())
        },
    )
    .await;
    let after = after.into_inner().unwrap();
    stop_tx.send(true).unwrap();
    let answers = probes.await.unwrap();
    let cut = ends.iter().filter(|e| matches!(e, End::Cut(_))).count();
    let refused = ends.iter().filter(|e| **e == End::Refused).count();
    let other: Vec<_> = ends.iter().filter(|e| matches!(e, End::Other(_))).collect();
    assert_eq!(
        cut + refused,
        FLOOD,
        "every stalled connection ended; {} otherwise, e.g. {:?}",
        other.len(),
        other.first()
    );
    assert!(
        refused >= FLOOD - 768 && cut <= 768,
        "the cap in all holds: {cut} cut, {refused} refused"
    );
    assert!(
        answers.iter().all(|a| answered(a)),
        "health answered, if only to refuse: {answers:?}"
    );
    assert!(
        after.last().is_some_and(|a| a == OK) && after.iter().all(|a| answered(a)),
        "health answers 200 again once the stalled bodies are cut: {after:?}"
    );
    let private_answers = private_probes.await.unwrap();
    assert!(
        private_answers.len() >= PROBES && private_answers.iter().all(|a| a == OK),
        "the private listener's health answered 200 throughout: {private_answers:?}"
    );

    assert!(
        server.logged("Too many open files").is_empty(),
        "the process never ran out of descriptors"
    );
    let metrics = reqwest::get(format!("http://{}/metrics", server.metrics_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for reason in ["peer_full", "full"] {
        assert!(
            metrics.contains(&format!(
                "switchboard_connections_refused_total{{listener=\"http\",reason=\"{reason}\"}}"
            )),
            "refusals are counted by reason: {metrics}"
        );
    }
}

/// The agent's webhook: the first call hangs (a long agent call in flight at shutdown), later
/// ones answer at once.
#[derive(Default)]
struct SlowAgent {
    calls: Mutex<usize>,
}

async fn slow_agent(agent: web::Data<Arc<SlowAgent>>) -> HttpResponse {
    let first = {
        let mut calls = agent.calls.lock().unwrap();
        *calls += 1;
        *calls == 1
    };
    if first {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    HttpResponse::Ok().json(serde_json::json!({
        "parts": [{"kind": "text", "mime": "text/plain", "content": "answered"}]
    }))
}

/// Responses the API delivers to its callback.
#[derive(Default)]
struct Callback {
    received: Mutex<Vec<serde_json::Value>>,
}

async fn callback(cb: web::Data<Arc<Callback>>, body: web::Bytes) -> HttpResponse {
    cb.received
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap());
    HttpResponse::Ok().finish()
}

async fn shutdown_is_one_stage_within_one_grace_period(engine: Engine) {
    let db = fresh_db(engine).await;
    let agent = Arc::new(SlowAgent::default());
    let hook = serve_route!(agent.clone(), post, "/agent", slow_agent);
    let cb = Arc::new(Callback::default());
    let cb_url = serve_route!(cb.clone(), post, "/cb", callback);
    let grace = 3;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "http://stop.test"
shutdown_grace_seconds = {grace}
body_timeout_ms = 60000
request_timeout_ms = 120000
[database]
url = "{}"
[log]
format = "json"
filter = "info"
[queue]
lease_seconds = 120
poll_interval_ms = 100
[net]
allow_private_addresses = true
[email]
bind = "127.0.0.1:0"
[api]
token = "{TOKEN}"
callback_url = "{cb_url}"
[[agents]]
name = "slow"
backend = {{ kind = "webhook", url = "{hook}", secret = "s3cret", timeout_ms = 90000 }}
"#,
            db.url
        ),
    )
    .unwrap();
    let server = Binary::start(&config, None);
    let (http, smtp) = (server.http, server.smtp.unwrap());
    let api = reqwest::Client::new();
    let posted = api
        .post(format!("http://{http}/api/v1/messages"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({
            "external_id": "stop-1",
            "message": {
                "thread_id": "stop-thread",
                "sender": {"address": "ops@example.com", "auth_method": "none", "verified": false},
                "recipient": "@slow@stop.test",
                "parts": [{"kind": "text", "mime": "text/plain", "content": "take your time"}]
            }
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 202);
    // The agent call is in flight, and so is a stalled upload.
    wait_for(20, "the agent call", || async {
        (*agent.calls.lock().unwrap() == 1).then_some(())
    })
    .await;
    let mut upload = TcpStream::connect(http).await.unwrap();
    let (head, rest) = stalled_upload();
    upload
        .write_all(format!("{head}{rest}").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let asked = Instant::now();
    server.terminate();
    // Both listeners stop accepting at once, not after the HTTP side has drained.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let smtp_refused = TcpStream::connect(smtp).await.is_err();
    let http_refused = TcpStream::connect(http).await.is_err();
    let mut server = server;
    let status = wait_for(3 * grace, "exit", || {
        let exited = server.child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    let took = asked.elapsed();
    assert!(status.success(), "a clean exit: {status:?}");
    assert!(smtp_refused, "the SMTP listener stopped accepting at once");
    assert!(http_refused, "the HTTP listener stopped accepting at once");
    assert!(
        took < Duration::from_secs(grace) + Duration::from_millis(1500),
        "the whole shutdown fits in one grace period of {grace} s, took {took:?}"
    );
    assert_eq!(
        *agent.calls.lock().unwrap(),
        1,
        "no job was claimed after shutdown began"
    );
    let lines = server.lines.lock().unwrap().clone();
    let from = lines
        .iter()
        .position(|l| l.contains("shutting down"))
        .unwrap();
    assert!(
        lines[from..]
            .iter()
            .any(|l| l.contains("returned leased jobs to the queue")),
        "the cut agent call went back to the queue: {:?}",
        &lines[from..]
    );
    drop(upload);
    drop(server);

    // Nothing is lost: started again, the message is answered once.
    let again = Binary::start(&config, None);
    let got = wait_for(30, "the answer after restart", || async {
        let r = cb.received.lock().unwrap().clone();
        (!r.is_empty()).then_some(r)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cb.received.lock().unwrap().len(), 1, "{got:?}");
    assert_eq!(got[0]["parts"][0]["content"], "answered");
    assert_eq!(*agent.calls.lock().unwrap(), 2);
    drop(again);
}
crate::helpers::on_both_engines!(shutdown_is_one_stage_within_one_grace_period);
