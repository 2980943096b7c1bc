//! Real client addresses behind a proxy: `X-Forwarded-For` counts only from a peer in
//! `server.trusted_proxies` (per-client admission on the proxy's shared connections, the
//! header of anyone else ignored), and the PROXY protocol (v1 and v2, written by a real TCP
//! client) names the client on the HTTP and SMTP listeners, where a connection without a
//! valid header is closed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use switchboard::config::DnsMode;
use switchboard::net::proxy_protocol::{v1_header, v2_header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{Engine, RecordingAgent, TestApp, on_both_engines, smtp, spawn_app, wait_for};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

async fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip(source), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// The headers of a 100 kB upload with one byte of its body: the request is held (and its
/// client counted) until the socket closes or the body timeout passes.
fn stalled_upload(extra: &str) -> String {
    format!(
        "POST /api/v1/messages HTTP/1.1\r\nHost: proxy.test\r\nAuthorization: Bearer test-token\r\n\
         Content-Type: application/json\r\nContent-Length: 100000\r\n{extra}\r\n{{"
    )
}

fn health(extra: &str) -> String {
    format!("GET /healthz HTTP/1.1\r\nHost: proxy.test\r\nConnection: close\r\n{extra}\r\n")
}

/// Writes `bytes` on `s` and reads until the server closes (at most 10 s): what it answered.
async fn exchange(mut s: TcpStream, bytes: &[u8]) -> String {
    let _ = s.write_all(bytes).await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

fn status(answer: &str) -> &str {
    answer.split(' ').nth(1).unwrap_or("none")
}

fn refused_count(metrics: &str, listener: &str, reason: &str) -> u64 {
    let key = format!(
        "switchboard_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} "
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Opens a stalled upload after `prefix` (a PROXY protocol header, or nothing) and gives the
/// server a moment to take it in, so that it is counted before anything that follows.
async fn hold(app: &TestApp, source: &str, prefix: &[u8], client_header: &str) -> TcpStream {
    let to = app.app().http_addr();
    let mut held = connect_from(source, to).await;
    held.write_all(prefix).await.unwrap();
    held.write_all(stalled_upload(client_header).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_counts_only_from_a_trusted_proxy() {
    let mut app = spawn_app(Engine::Sqlite, |c, _| {
        c.server.trusted_proxies = vec!["127.0.0.1/32".into()];
        c.server.max_connections_per_peer = 1;
    })
    .await;
    let to = app.app().http_addr();

    // Through the trusted proxy (127.0.0.1): the proxy's connections are not capped per peer,
    // its clients are. One client holds its one place with a slow upload...
    let held = hold(&app, "127.0.0.1", b"", "X-Forwarded-For: 203.0.113.1\r\n").await;
    let refused = wait_for(10, "the held request to count for its client", || async {
        let s = connect_from("127.0.0.1", to).await;
        let answer = exchange(s, health("X-Forwarded-For: 203.0.113.1\r\n").as_bytes()).await;
        (status(&answer) == "503").then_some(answer)
    })
    .await;
    // ...so its next request is refused, with a Retry-After, and the connection stays usable.
    assert!(
        refused.contains("Retry-After: 5") || refused.contains("retry-after: 5"),
        "{refused}"
    );
    assert!(
        refused.contains("too many requests from your address"),
        "{refused}"
    );
    // Another client behind the same proxy gets through, and so does the first client when a
    // client of its own wrote a made-up hop to the left of the proxy's.
    for header in [
        "X-Forwarded-For: 203.0.113.2\r\n",
        "X-Forwarded-For: 203.0.113.1, 203.0.113.12\r\n",
        "Forwarded: for=203.0.113.22;proto=https\r\n",
        "Forwarded: for=\"[2001:db8::2]:4711\"\r\n",
    ] {
        let answer = exchange(
            connect_from("127.0.0.1", to).await,
            health(header).as_bytes(),
        )
        .await;
        assert_eq!(status(&answer), "200", "{header}: {answer}");
    }
    // Both headers naming different clients: neither is believed (the client is the proxy).
    let answer = exchange(
        connect_from("127.0.0.1", to).await,
        health("X-Forwarded-For: 203.0.113.2\r\nForwarded: for=203.0.113.1\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&answer), "200", "{answer}");
    // The same client named in Forwarded is the same client.
    let answer = exchange(
        connect_from("127.0.0.1", to).await,
        health("Forwarded: for=203.0.113.1\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&answer), "503", "{answer}");

    // From a peer that is not trusted (127.0.0.2) the header is ignored: the peer is the client,
    // capped per connection as before.
    let untrusted = hold(&app, "127.0.0.2", b"", "X-Forwarded-For: 203.0.113.3\r\n").await;
    let answer = wait_for(
        10,
        "the untrusted peer's second connection to be refused",
        || async {
            let s = connect_from("127.0.0.2", to).await;
            let answer = exchange(s, health("X-Forwarded-For: 203.0.113.4\r\n").as_bytes()).await;
            answer.contains("too many connections").then_some(answer)
        },
    )
    .await;
    assert_eq!(status(&answer), "503", "{answer}");
    // ...and the address it claimed was never counted.
    let answer = exchange(
        connect_from("127.0.0.1", to).await,
        health("X-Forwarded-For: 203.0.113.3\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&answer), "200", "{answer}");

    // The client's place comes back when its request ends.
    drop(held);
    wait_for(10, "the client's place to come back", || async {
        let s = connect_from("127.0.0.1", to).await;
        let answer = exchange(s, health("X-Forwarded-For: 203.0.113.1\r\n").as_bytes()).await;
        (status(&answer) == "200").then_some(())
    })
    .await;
    let metrics = app.metrics().await;
    assert!(
        refused_count(&metrics, "http", "peer_full") >= 3,
        "{metrics}"
    );
    drop(untrusted);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_protocol_names_the_http_client() {
    let mut app = spawn_app(Engine::Sqlite, |c, _| {
        c.server.proxy_protocol = true;
        c.server.trusted_proxies = vec!["127.0.0.1/32".into()];
        c.server.max_connections_per_peer = 1;
    })
    .await;
    let to = app.app().http_addr();
    let me = |client: &str| (sa(client), to);

    // v1 and v2 headers name the client; a client holding its one place (a slow upload) is
    // refused a second connection, another client is not, though all come from 127.0.0.1.
    let held = hold(
        &app,
        "127.0.0.1",
        &v1_header(sa("203.0.113.7:5000"), to),
        "",
    )
    .await;
    let answer = wait_for(
        10,
        "the held connection to count for its client",
        || async {
            let s = connect_from("127.0.0.1", to).await;
            let mut bytes = v2_header(Some(me("203.0.113.7:5001")));
            bytes.extend_from_slice(health("").as_bytes());
            let answer = exchange(s, &bytes).await;
            answer.contains("too many connections").then_some(answer)
        },
    )
    .await;
    assert_eq!(status(&answer), "503", "{answer}");
    // (A client each: a closed connection gives its place back just after its last byte.)
    for header in [
        v1_header(sa("203.0.113.8:5000"), to),
        v2_header(Some(me("203.0.113.12:5002"))),
        v2_header(Some(me("[2001:db8::8]:5003"))),
    ] {
        let mut bytes = header.clone();
        bytes.extend_from_slice(health("").as_bytes());
        let answer = exchange(connect_from("127.0.0.1", to).await, &bytes).await;
        assert_eq!(status(&answer), "200", "{answer}");
    }

    // No header, a malformed one, or a header naming a client from a peer that is not trusted:
    // closed without a word.
    let mut untrusted = v1_header(sa("203.0.113.9:5000"), to);
    untrusted.extend_from_slice(health("").as_bytes());
    for (source, bytes) in [
        ("127.0.0.1", health("").into_bytes()),
        (
            "127.0.0.1",
            b"PROXY TCP4 203.0.113.9 nowhere 1 2\r\nGET /healthz HTTP/1.1\r\n\r\n".to_vec(),
        ),
        ("127.0.0.2", untrusted),
    ] {
        let answer = exchange(connect_from(source, to).await, &bytes).await;
        assert_eq!(answer, "", "{:?}", String::from_utf8_lossy(&bytes));
    }
    // A LOCAL header names nobody (a balancer's health check): served as the socket's peer, from
    // anyone; `switchboard healthcheck` sends one when the listener wants the PROXY protocol.
    let mut local = v2_header(None);
    local.extend_from_slice(health("").as_bytes());
    let answer = exchange(connect_from("127.0.0.2", to).await, &local).await;
    assert_eq!(status(&answer), "200", "{answer}");
    switchboard::net::probe::probe(to, "/healthz", Duration::from_secs(5), true)
        .await
        .unwrap();

    let metrics = app.metrics().await;
    assert_eq!(
        refused_count(&metrics, "http", "proxy_protocol"),
        3,
        "{metrics}"
    );
    assert!(
        refused_count(&metrics, "http", "peer_full") >= 1,
        "{metrics}"
    );
    drop(held);
    app.stop().await;
}

/// Sends one message from `alice@example.com` to `helper@agents.test` on `s`, after `header`.
async fn mail_through(addr: SocketAddr, header: &[u8], n: u32) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(header).await.unwrap();
    assert!(smtp(&mut s, "").await.starts_with("220 "));
    assert!(smtp(&mut s, "EHLO client.test").await.starts_with("250"));
    assert!(
        smtp(&mut s, "MAIL FROM:<alice@example.com>")
            .await
            .starts_with("250")
    );
    assert!(
        smtp(&mut s, "RCPT TO:<helper@agents.test>")
            .await
            .starts_with("250")
    );
    assert!(smtp(&mut s, "DATA").await.starts_with("354"));
    let body = format!(
        "From: Alice <alice@example.com>\r\nTo: helper@agents.test\r\nSubject: hello {n}\r\n\
         Message-ID: <proxy-{n}@example.com>\r\nDate: Mon, 1 Jan 2024 00:00:00 +0000\r\n\r\n\
         Hello {n}.\r\n."
    );
    let reply = smtp(&mut s, &body).await;
    assert!(reply.starts_with("250"), "{reply}");
    let _ = smtp(&mut s, "QUIT").await;
}

on_both_engines!(the_proxy_protocol_names_the_smtp_client);
async fn the_proxy_protocol_names_the_smtp_client(engine: Engine) {
    let helper = Arc::new(RecordingAgent::default());
    let agent = helper.clone();
    let mut app = spawn_app(engine, move |c, o| {
        c.email.domain = Some("agents.test".into());
        c.email.dns = DnsMode::Offline;
        c.email.proxy_protocol = true;
        c.email.max_sessions_per_peer = 1;
        c.server.trusted_proxies = vec!["127.0.0.1/32".into()];
        o.agents.push(("helper".into(), agent));
    })
    .await;
    let addr = app.app().smtp_addr().unwrap();

    // The client the header names is the session's peer: the envelope's client address (and
    // so SPF) is it, not the balancer's.
    mail_through(addr, &v1_header(sa("203.0.113.9:40000"), addr), 1).await;
    mail_through(addr, &v2_header(Some((sa("[2001:db8::9]:40001"), addr))), 2).await;
    let seen = wait_for(30, "both messages at the agent", || async {
        let seen = helper.seen.lock().unwrap().clone();
        (seen.len() >= 2).then_some(seen)
    })
    .await;
    let mut clients: Vec<String> = seen
        .iter()
        .map(|m| m.raw["envelope"]["client_ip"].as_str().unwrap().to_owned())
        .collect();
    clients.sort();
    assert_eq!(clients, ["2001:db8::9", "203.0.113.9"]);

    // Per-peer caps count the named client: one session each.
    let mut first = TcpStream::connect(addr).await.unwrap();
    first
        .write_all(&v1_header(sa("203.0.113.10:1"), addr))
        .await
        .unwrap();
    assert!(smtp(&mut first, "").await.starts_with("220 "));
    let mut second = TcpStream::connect(addr).await.unwrap();
    second
        .write_all(&v2_header(Some((sa("203.0.113.10:2"), addr))))
        .await
        .unwrap();
    let got = smtp(&mut second, "").await;
    assert!(
        got.starts_with("421 4.7.0 Too many connections from your address"),
        "{got:?}"
    );
    let mut other = TcpStream::connect(addr).await.unwrap();
    other
        .write_all(&v2_header(Some((sa("203.0.113.11:2"), addr))))
        .await
        .unwrap();
    assert!(smtp(&mut other, "").await.starts_with("220 "));

    // Without a valid header: closed before the greeting.
    for bytes in [
        b"EHLO client.test\r\n".to_vec(),
        b"PROXY TCP4 203.0.113.9\r\n".to_vec(),
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
        assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    }
    let metrics = app.metrics().await;
    assert_eq!(
        refused_count(&metrics, "smtp", "proxy_protocol"),
        2,
        "{metrics}"
    );
    assert_eq!(refused_count(&metrics, "smtp", "peer_full"), 1, "{metrics}");
    drop((first, other));
    app.stop().await;
}
