//! The SMTP session on a raw socket: commands, limits and pipelining, smuggling and bad line
//! endings, empty, oversized and malformed input, the shared memory budget of bodies in flight,
//! shutdown, a failed commit, floods and slow clients, STARTTLS injection, sessions per peer.

use super::*;

on_both_engines!(session_commands_limits_and_pipelining);
async fn session_commands_limits_and_pipelining(engine: Engine) {
    let (mut app, _helper, addr) = spawn_email_on(engine, None, |c| {
        c.email.max_recipients = 2;
        c.email.max_message_bytes = 50_000;
    })
    .await;
    let mut r = Raw::connect(addr).await;
    assert!(r.cmd("MAIL FROM:<a@b.test>").await.starts_with("503 5.5.1"));
    let ehlo = r.cmd("EHLO client.test").await;
    for ext in [
        "PIPELINING",
        "SIZE 50000",
        "8BITMIME",
        "SMTPUTF8",
        "ENHANCEDSTATUSCODES",
    ] {
        assert!(ehlo.contains(ext), "{ext} missing: {ehlo}");
    }
    assert!(
        !ehlo.contains("STARTTLS"),
        "no certificate, no STARTTLS: {ehlo}"
    );
    assert!(r.cmd("VRFY echo").await.starts_with("502"));
    assert!(r.cmd("STARTTLS").await.starts_with("502 5.7.0"));
    assert!(r.cmd("NOOP").await.starts_with("250"));
    assert!(r.cmd("BOGUS").await.starts_with("500 5.5.1"));
    assert!(r.cmd("RCPT TO:<echo@agents.test>").await.starts_with("503"));
    assert!(
        r.cmd("MAIL FROM:<a@b.test> SIZE=60000")
            .await
            .starts_with("552")
    );
    assert!(
        r.cmd("MAIL FROM:<a@b.test> SIZE=1000")
            .await
            .starts_with("250")
    );
    assert!(
        r.cmd("RCPT TO:<nobody@agents.test>")
            .await
            .starts_with("550 5.1.1")
    );
    assert!(
        r.cmd("RCPT TO:<echo@elsewhere.test>")
            .await
            .starts_with("550 5.7.1 Relaying denied")
    );
    assert!(r.cmd("RCPT TO:<echo@agents.test>").await.starts_with("250"));
    assert!(
        r.cmd("RCPT TO:<helper+tag@agents.test>")
            .await
            .starts_with("250")
    );
    assert!(
        r.cmd("RCPT TO:<helper@agents.test>")
            .await
            .starts_with("250"),
        "a repeat is fine"
    );
    assert!(
        r.cmd("RCPT TO:<bounces+x@agents.test>")
            .await
            .starts_with("452 4.5.3")
    );
    assert!(r.cmd("RSET").await.starts_with("250"));
    assert!(r.cmd("DATA").await.starts_with("503"));

    // Everything pipelined in one write; one message to two agents, each woken once, plus
    // an agent in the envelope only (Bcc) that is not woken.
    let msg = crlf(
        "From: Bob <bob@elsewhere.test>\nTo: echo@agents.test, helper@agents.test\nSubject: pipelined\nMessage-ID: <p1@elsewhere.test>\n\nhello both\n.\n",
    );
    let batch = format!(
        "MAIL FROM:<bob@elsewhere.test>\r\nRCPT TO:<echo@agents.test>\r\nRCPT TO:<helper@agents.test>\r\nDATA\r\n{msg}"
    );
    r.send(batch.as_bytes()).await;
    for want in ["250", "250", "250", "354"] {
        let got = r.reply().await;
        assert!(got.starts_with(want), "{want}: {got}");
    }
    let done = r.reply().await;
    assert!(done.starts_with("250 2.0.0 Message queued"), "{done}");
    // 250 means committed: both copies are in the database now.
    assert_eq!(stored_messages(&app).await, 2);
    // The same message again is a duplicate, not a third copy.
    r.send(batch.as_bytes()).await;
    for _ in 0..4 {
        r.reply().await;
    }
    assert!(r.reply().await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 2);
    // Bcc-only agent: accepted, nobody woken.
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(crlf("From: bob@elsewhere.test\nTo: someone@elsewhere.test\nMessage-ID: <p2@elsewhere.test>\n\nbcc\n.\n").as_bytes()).await;
    assert!(r.reply().await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 2);
    assert!(r.cmd("QUIT").await.starts_with("221"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_smuggling_and_bad_line_endings_are_refused() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    // "\n.\n" must not end DATA: the smuggled transaction is part of the (refused) message.
    let smuggle = "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <sm1@elsewhere.test>\r\n\r\nhi\n.\nMAIL FROM:<admin@agents.test>\r\nRCPT TO:<echo@agents.test>\r\nDATA\r\nFrom: admin@agents.test\r\nTo: echo@agents.test\r\n\r\nsmuggled\r\n.\r\n";
    r.send(smuggle.as_bytes()).await;
    let got = r.reply().await;
    assert!(got.starts_with("550 5.6.0"), "{got}");
    // Nothing else was answered: the smuggled commands were never commands.
    assert!(r.cmd("NOOP").await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 0);
    // Other shapes: "\r\n.\n" and "\n.\r\n" do not end DATA either.
    for tail in ["\r\n.\nQUIT\r\n", "\n.\r\nQUIT\r\n"] {
        transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
        r.send(
            format!("From: bob@elsewhere.test\r\nMessage-ID: <sm2@e.test>\r\n\r\nx{tail}")
                .as_bytes(),
        )
        .await;
        r.send(b"\r\n.\r\n").await;
        let got = r.reply().await;
        assert!(got.starts_with("550 5.6.0"), "{tail:?}: {got}");
    }
    // Dot-stuffing is undone: a line "..x" arrives as ".x".
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <ds@e.test>\r\n\r\n..x\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 1);
    let db = app.open_db().await;
    let rows: Vec<(String,)> = db
        .fetch_all("SELECT body FROM messages WHERE direction = 'in'", &[])
        .await
        .unwrap();
    drop(db);
    assert!(rows[0].0.contains("\".x\""), "{}", rows[0].0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_data_body_is_answered_at_once() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    // The dot right after 354 ends DATA (it follows the CRLF that ended "DATA").
    r.send(b".\r\n").await;
    let got = r.reply().await;
    assert!(got.starts_with("250") || got.starts_with('5'), "{got}");
    assert!(r.cmd("NOOP").await.starts_with("250"));
    // A stuffed first line is unstuffed like any other line.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"..x\r\n.\r\n").await;
    let got = r.reply().await;
    assert!(got.starts_with("250") || got.starts_with('5'), "{got}");
    assert!(r.cmd("QUIT").await.starts_with("221"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_long_lines_deep_nesting_and_garbage_are_handled() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_message_bytes = 20_000;
    })
    .await;
    let mut r = Raw::connect(addr).await;

    // An enormous base64 part: read to the end, refused 552, the session goes on.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let mut big = String::from(
        "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <big@e.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n",
    );
    for _ in 0..2_000 {
        big.push_str("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5\r\n");
    }
    big.push_str("--b--\r\n.\r\n");
    r.send(big.as_bytes()).await;
    assert!(r.reply().await.starts_with("552 5.3.4"));
    assert!(r.cmd("NOOP").await.starts_with("250"));

    // A line over the RFC 5322 limit.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(
        format!(
            "From: bob@elsewhere.test\r\nMessage-ID: <long@e.test>\r\n\r\n{}\r\n.\r\n",
            "y".repeat(1_500)
        )
        .as_bytes(),
    )
    .await;
    assert!(r.reply().await.starts_with("550 5.6.0"));

    // Multiparts nested past the cap.
    let mut body = String::from("Content-Type: text/plain\r\n\r\ndeep\r\n");
    for i in 0..15 {
        body = format!(
            "Content-Type: multipart/mixed; boundary=n{i}\r\n\r\n--n{i}\r\n{body}\r\n--n{i}--\r\n"
        );
    }
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(format!("From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <deep@e.test>\r\nMIME-Version: 1.0\r\n{body}.\r\n").as_bytes()).await;
    let got = r.reply().await;
    assert!(
        got.starts_with("550 5.6.0") && got.contains("nested"),
        "{got}"
    );

    // A header name with a space, which parsers read differently.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"Fr om: admin@agents.test\r\nFrom: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <sp@e.test>\r\n\r\nx\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("550 5.6.0"));

    // Too many hops.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let hops: String = (0..51)
        .map(|i| format!("Received: from h{i}.test by h{}.test\r\n", i + 1))
        .collect();
    r.send(format!("{hops}From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <loop@e.test>\r\n\r\nx\r\n.\r\n").as_bytes()).await;
    assert!(r.reply().await.starts_with("554 5.4.6"));
    assert_eq!(stored_messages(&app).await, 0);

    // 8-bit garbage in headers and malformed MIME: accepted without harm, text recovered.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let mut garbage = b"From: \xff\xfe Bob \xc3\x28 <bob@elsewhere.test>\r\nTo: echo@agents.test\r\nSubject: \xe9t\xe9 \xff\r\nMessage-ID: <g@e.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"never-closed\"\r\n\r\n--never-closed\r\nContent-Type: text/plain; charset=x-unknown-charset\r\n\r\nstill readable\r\n".to_vec();
    garbage.extend_from_slice(b".\r\n");
    r.send(&garbage).await;
    let got = r.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(stored_messages(&app).await, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_share_one_memory_budget() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_message_bytes = 48 * 1024;
        c.email.max_data_memory_bytes = 64 * 1024;
    })
    .await;
    let held = app.app().pipeline().metrics().smtp_data_bytes().clone();
    let message = |id: &str| {
        let mut m = format!(
            "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <{id}@e.test>\r\n\r\n"
        );
        while m.len() < 30 * 1024 {
            m.push_str("an ordinary line of text that fills the body of this message\r\n");
        }
        m
    };

    // A is halfway through a body and holds the whole budget.
    let mut a = Raw::connect(addr).await;
    transaction(&mut a, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let first = message("a");
    let (head, tail) = first.split_at(first.len() / 2);
    a.send(head.as_bytes()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while held.get() < 64 * 1024 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's body is never held"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // B is deferred (temporary, so its MTA retries), read to its end, and the session goes on.
    let mut b = Raw::connect(addr).await;
    transaction(&mut b, "bob@elsewhere.test", &["echo@agents.test"]).await;
    b.send(format!("{}.\r\n", message("b")).as_bytes()).await;
    let got = b.reply().await;
    assert!(got.starts_with("452 4.3.1"), "{got}");
    assert!(b.cmd("NOOP").await.starts_with("250"));

    // A finishes and gives its share back; B's retry lands.
    a.send(format!("{tail}.\r\n").as_bytes()).await;
    let got = a.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(held.get(), 0, "the budget is whole again");
    transaction(&mut b, "bob@elsewhere.test", &["echo@agents.test"]).await;
    b.send(format!("{}.\r\n", message("b")).as_bytes()).await;
    let got = b.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(stored_messages(&app).await, 2);

    // A session that drops mid-body gives its share back too.
    transaction(&mut a, "bob@elsewhere.test", &["echo@agents.test"]).await;
    a.send(head.as_bytes()).await;
    while held.get() == 0 {
        assert!(tokio::time::Instant::now() < deadline + Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while held.get() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a dropped session keeps its share"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_message_finish_and_closes_idle_sessions() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut idle = Raw::connect(addr).await;
    assert!(idle.cmd("EHLO client.test").await.starts_with("250"));
    let mut a = Raw::connect(addr).await;
    transaction(&mut a, "bob@elsewhere.test", &["echo@agents.test"]).await;
    a.send(b"From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <drain@e.test>\r\n\r\nfirst half")
        .await;
    let stopping = tokio::spawn(async move {
        app.stop().await;
        app
    });
    // A session between messages is told at once and closed.
    let got = idle.reply().await;
    assert!(got.starts_with("421 4.3.2"), "{got}");
    assert_eq!(idle.reply().await, "", "closed");
    // The message being received is finished and committed, then the session is closed.
    a.send(b", second half\r\n.\r\n").await;
    let got = a.reply().await;
    assert!(got.starts_with("250"), "{got}");
    let got = a.reply().await;
    assert!(got.starts_with("421 4.3.2"), "{got}");
    let app = stopping.await.unwrap();
    assert_eq!(stored_messages(&app).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_is_answered_451_and_the_retry_lands() {
    let (mut app, helper, addr) = spawn_email(None, |_| {}).await;
    let db = app.open_db().await;
    // Break the store under the running server: ingest cannot commit.
    db.execute("ALTER TABLE inbound_seen RENAME TO inbound_seen_away", &[])
        .await
        .unwrap();
    let msg = b"From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <tf@e.test>\r\n\r\nplease retry\r\n.\r\n";
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(msg).await;
    let got = r.reply().await;
    assert!(got.starts_with("451 4.3.0"), "{got}");
    db.execute("ALTER TABLE inbound_seen_away RENAME TO inbound_seen", &[])
        .await
        .unwrap();
    // The sender retries the same message: now it is stored, once.
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(msg).await;
    let got = r.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(wait_seen(&helper, 1).await.len(), 1);
    assert_eq!(stored_messages(&app).await, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_and_slow_clients_are_cut_off() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_commands = 20;
        c.email.idle_timeout_seconds = 1;
        c.email.max_sessions = 2;
    })
    .await;
    // Past the session cap a client is told 421 at once.
    let held = (Raw::connect(addr).await, Raw::connect(addr).await);
    let mut third = TcpStream::connect(addr).await.unwrap();
    let mut b = vec![0u8; 256];
    let n = third.read(&mut b).await.unwrap();
    assert!(String::from_utf8_lossy(&b[..n]).starts_with("421 4.7.0"));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut r = Raw::connect(addr).await;
    r.send("NOOP\r\n".repeat(100).as_bytes()).await;
    let mut all = String::new();
    loop {
        let got = r.reply().await;
        if got.is_empty() {
            break;
        }
        all.push_str(&got);
    }
    assert_eq!(all.matches("250 2.0.0").count(), 20, "{all}");
    assert!(all.contains("421 4.7.0"), "{all}");

    // A client that goes quiet is told and disconnected.
    let mut slow = Raw::connect(addr).await;
    assert!(slow.cmd("EHLO slow.test").await.starts_with("250"));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let got = slow.reply().await;
    assert!(got.starts_with("421 4.4.2"), "{got}");
    assert_eq!(slow.reply().await, "", "then the connection closes");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_discards_injected_plaintext() {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.tls_cert_file = Some(fixture("tls.crt").display().to_string());
        c.email.tls_key_file = Some(fixture("tls.key").display().to_string());
    })
    .await;
    let mut r = Raw::connect(addr).await;
    let ehlo = r.cmd("EHLO client.test").await;
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");
    // The classic injection: commands pipelined behind STARTTLS in the same packet.
    r.send(b"STARTTLS\r\nMAIL FROM:<evil@elsewhere.test>\r\nRCPT TO:<echo@agents.test>\r\n")
        .await;
    let got = r.reply().await;
    assert!(got.starts_with("220 2.0.0"), "{got}");
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(fixture("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut tls = connector
        .connect("localhost".try_into().unwrap(), r.s)
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut say = async |tls: &mut tokio_rustls::client::TlsStream<TcpStream>, line: &str| {
        tls.write_all(format!("{line}\r\n").as_bytes())
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // The session starts anew: the injected MAIL and RCPT were never run.
    let got = say(&mut tls, "RCPT TO:<echo@agents.test>").await;
    assert!(got.starts_with("503"), "{got}");
    let ehlo = say(&mut tls, "EHLO client.test").await;
    assert!(
        ehlo.starts_with("250") && !ehlo.contains("STARTTLS"),
        "{ehlo}"
    );
    let got = say(&mut tls, "STARTTLS").await;
    assert!(got.starts_with("504 5.7.4"), "{got}");
    let got = say(&mut tls, "RCPT TO:<echo@agents.test>").await;
    assert!(got.starts_with("503"), "MAIL was not carried over: {got}");
    assert!(
        say(&mut tls, "MAIL FROM:<bob@elsewhere.test>")
            .await
            .starts_with("250")
    );
    assert!(
        say(&mut tls, "RCPT TO:<echo@agents.test>")
            .await
            .starts_with("250")
    );
    assert!(say(&mut tls, "DATA").await.starts_with("354"));
    let got = say(&mut tls, "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <tls@e.test>\r\n\r\nover TLS\r\n.").await;
    assert!(got.starts_with("250"), "{got}");
    let db = app.open_db().await;
    let rows: Vec<(String,)> = db
        .fetch_all("SELECT body FROM messages WHERE direction = 'in'", &[])
        .await
        .unwrap();
    drop(db);
    let v: Value = serde_json::from_str(&rows[0].0).unwrap();
    assert_eq!(v["raw"]["envelope"]["tls"], true);
    assert_eq!(v["raw"]["envelope"]["mail_from"], "bob@elsewhere.test");
    app.stop().await;
}

/// One peer holds at most `email.max_sessions_per_peer` sessions: the next is told 421 at once,
/// while another address is still greeted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_holds_at_most_its_sessions() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_sessions_per_peer = 2;
    })
    .await;
    let _a = Raw::connect(addr).await;
    let _b = Raw::connect(addr).await;
    let mut third = TcpStream::connect(addr).await.unwrap();
    let mut got = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), third.read_to_string(&mut got)).await;
    assert!(
        got.starts_with("421 4.7.0 Too many connections from your address"),
        "{got:?}"
    );
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    let mut greeting = [0u8; 4];
    other.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"220 ");
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "switchboard_connections_refused_total{listener=\"smtp\",reason=\"peer_full\"} 1"
        ),
        "{metrics}"
    );
    app.stop().await;
}
