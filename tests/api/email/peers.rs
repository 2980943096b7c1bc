//! Email against real peers: Postfix relaying into switchboard, swaks mail signed by dkimpy
//! answered with a DKIM-signed, threaded reply, relay refusals and deferrals, delivery to the
//! recipient's MX without a relay, and the `dkim` command's record.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postfix_relays_into_switchboard_through_a_transport_map() {
    let Some(p) = peers() else { return };
    let (mut app, helper, addr) = spawn_email(None, |_| {}).await;
    let postfix = Postfix::start(addr);

    // Mail signed by dkimpy goes to Postfix, which relays it to switchboard.
    let msg = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Through the relay\nDate: Sun, 22 Nov 2026 06:00:00 +0000\nMessage-ID: <relay-1@example.com>\n\nDoes this reach you through Postfix?\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        msg,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        postfix.addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok && out.contains("250 2.0.0 Ok: queued"), "{out}");
    let line = postfix
        .logged(&[
            &format!("relay=127.0.0.1[127.0.0.1]:{}", addr.port()),
            "status=sent",
        ])
        .await;
    assert!(line.contains("250 2.0.0 Message queued"), "{line}");
    let seen = wait_seen(&helper, 1).await;
    let m = &seen[0];
    // Postfix's Received header does not break DKIM: DMARC passes aligned.
    assert_eq!(m.sender.address, "alice@example.com");
    assert!(m.sender.verified, "{:?}", m.sender);
    assert_eq!(m.sender.auth_method.as_str(), "email-dmarc");
    assert_eq!(m.raw["envelope"]["helo"], "mx.relay.test");
    assert!(text_of(m).contains("through Postfix"), "{}", text_of(m));

    // An address that is not an agent: Postfix accepts it for the relay domain, switchboard
    // refuses it at RCPT, and the bounce is Postfix's to send, not ours.
    let (ok, out) = swaks(
        &p,
        postfix.addr,
        "alice@example.com",
        &["nobody@agents.test"],
        &signed,
    );
    assert!(ok, "{out}");
    let line = postfix
        .logged(&["nobody@agents.test", "status=bounced"])
        .await;
    assert!(line.contains("550 5.1.1"), "{line}");
    assert_eq!(seen.len(), 1);
    app.stop().await;
}

on_both_engines!(swaks_mail_signed_by_dkimpy_gets_a_dkim_signed_threaded_reply);
async fn swaks_mail_signed_by_dkimpy_gets_a_dkim_signed_threaded_reply(engine: Engine) {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let (mut app, helper, addr) = spawn_email_on(engine, Some(catcher.port), |_| {}).await;

    // 1. A first message, signed by dkimpy, sent by swaks.
    let m1 = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Plans for Tuesday\nDate: Sun, 22 Nov 2026 06:00:00 +0000\nMessage-ID: <m1@example.com>\n\nCan we meet on Tuesday?\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        m1,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok && out.contains("250 2.0.0 Message queued"), "{out}");

    let first = wait_seen(&helper, 1).await;
    let m = &first[0];
    assert_eq!(m.sender.address, "alice@example.com");
    assert!(m.sender.verified);
    let sender = serde_json::to_value(&m.sender).unwrap();
    assert_eq!(sender["auth_method"], "email-dmarc");
    assert_eq!(sender["key_id"], "sel1._domainkey.example.com");
    assert_eq!(
        sender["identities"][0]["subject"],
        "mailto:alice@example.com"
    );
    assert_eq!(sender["identities"][0]["assurance"], "address");
    assert_eq!(m.recipient, app.agent("helper"));
    assert!(text_of(m).contains("Can we meet on Tuesday?"));
    assert!(
        text_of(m).starts_with("Subject: Plans for Tuesday"),
        "{}",
        text_of(m)
    );
    let caps = serde_json::to_value(&m.recipient_capabilities).unwrap();
    assert_eq!(caps["mention_relay"]["kind"], "recipient-field");
    assert_eq!(m.raw["subject"], "Plans for Tuesday");
    let ar = m.raw["authentication_results"].as_str().unwrap();
    assert!(
        ar.contains("dkim=pass") && ar.contains("spf=pass") && ar.contains("dmarc=pass"),
        "{ar}"
    );
    assert!(
        ar.contains("smtp.helo=client.example.com"),
        "HELO checked too: {ar}"
    );
    assert_eq!(m.raw["envelope"]["mail_from"], "alice@example.com");

    // 2. The reply reaches the catcher, threaded and signed.
    let (reply, envelope) = catcher.message(1).await;
    assert!(
        envelope[0].starts_with("bounces+") && envelope[0].ends_with("@agents.test"),
        "{envelope:?}"
    );
    assert_eq!(envelope[1], "alice@example.com");
    assert_eq!(header(&reply, "Subject").unwrap(), "Re: Plans for Tuesday");
    assert_eq!(header(&reply, "In-Reply-To").unwrap(), "<m1@example.com>");
    assert_eq!(header(&reply, "References").unwrap(), "<m1@example.com>");
    assert_eq!(header(&reply, "Auto-Submitted").unwrap(), "auto-replied");
    assert!(
        header(&reply, "From")
            .unwrap()
            .contains("helper@agents.test")
    );
    assert!(header(&reply, "To").unwrap().contains("alice@example.com"));
    assert!(
        header(&reply, "Content-Type")
            .unwrap()
            .starts_with("multipart/alternative")
    );
    let reply_id = header(&reply, "Message-ID").unwrap();
    assert!(reply_id.ends_with("@agents.test>"), "{reply_id}");

    // dkimpy verifies the reply against the record `switchboard dkim` would print.
    let keys = app.app().pipeline().keys().clone();
    let (name, txt) = switchboard::transports::email::dkim_record(&keys, "switchboard", DOMAIN)
        .await
        .unwrap();
    let file = catcher.dir.path().join("1.eml");
    let (ok, out) = run(Command::new(&p.python)
        .arg(p.scripts.join("verify.py"))
        .arg(&file)
        .arg(&name)
        .arg(&txt));
    assert!(ok, "dkimpy refused our signature: {out}");
    assert!(out.starts_with("pass agents.test switchboard"), "{out}");
    // And a wrong key fails, so the check above means something.
    let other = format!("v=DKIM1; k=rsa; p={}", fixture_text("sender-dkim.pub.b64"));
    let (ok, _) = run(Command::new(&p.python)
        .arg(p.scripts.join("verify.py"))
        .arg(&file)
        .arg(&name)
        .arg(&other));
    assert!(!ok, "dkimpy accepted a signature under the wrong key");

    // 3. Alice answers the reply, quoting it: same thread, with history.
    let m2 = format!(
        "From: Alice Example <alice@example.com>\nTo: helper@agents.test\nSubject: Re: Plans for Tuesday\nDate: Sun, 22 Nov 2026 06:05:00 +0000\nMessage-ID: <m2@example.com>\nIn-Reply-To: {reply_id}\nReferences: <m1@example.com> {reply_id}\n\nGreat, 10:00 then.\n\nOn Sun, 22 Nov 2026, Helper wrote:\n> Can we meet on Tuesday?\n"
    );
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        &m2,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok, "{out}");
    let both = wait_seen(&helper, 2).await;
    let second = &both[1];
    assert_eq!(
        second.thread_id, both[0].thread_id,
        "the answer stays in the thread"
    );
    assert_eq!(text_of(second), "Great, 10:00 then.", "quote stripped");
    let history = second.history.as_ref().expect("history");
    let hist = serde_json::to_string(history).unwrap();
    assert!(hist.contains("Can we meet on Tuesday?"), "{hist}");
    assert!(hist.contains("assistant"), "{hist}");
    // in_reply_to names our stored response (the reply the message answers).
    let response_id = reply_id
        .trim_matches(['<', '>'])
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(second.in_reply_to.as_deref(), Some(response_id.as_str()));

    let (reply2, _) = catcher.message(2).await;
    assert_eq!(header(&reply2, "In-Reply-To").unwrap(), "<m2@example.com>");
    assert_eq!(
        header(&reply2, "References").unwrap(),
        format!("<m1@example.com> {reply_id} <m2@example.com>")
    );
    assert_eq!(header(&reply2, "Subject").unwrap(), "Re: Plans for Tuesday");

    // 4. A bounce of the first reply to our VERP address marks its delivery failed.
    let db = app.open_db().await;
    let outcome = wait_for(10, "delivery recorded", || {
        let (db, id) = (db.clone(), response_id.clone());
        async move {
            switchboard::transports::email::store::delivery_outcome(&db, &id)
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(outcome.0, "delivered");
    let dsn = format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.com>\nTo: {bounce}\nSubject: Undelivered Mail Returned to Sender\nMessage-ID: <dsn1@mx.example.com>\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\nYour message could not be delivered.\n--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.com\n\nFinal-Recipient: rfc822; alice@example.com\nAction: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 user unknown\n--b--\n",
        bounce = envelope[0]
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dsn.eml");
    std::fs::write(&path, crlf(&dsn)).unwrap();
    let (ok, out) = swaks(&p, addr, "<>", &[&envelope[0]], &path);
    assert!(ok, "{out}");
    let outcome = switchboard::transports::email::store::delivery_outcome(&db, &response_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.0, "failed");
    assert!(outcome.1.unwrap().contains("5.1.1"));
    // The bounce woke nobody.
    assert_eq!(seen(&helper).len(), 2);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_refusals_end_the_delivery_and_deferrals_are_retried() {
    let Some(p) = peers() else { return };
    for code in [550u16, 451] {
        let catcher = Catcher::start(&p, code);
        let (mut app, _helper, addr) = spawn_email(Some(catcher.port), |_| {}).await;
        let mut r = Raw::connect(addr).await;
        // From alice@example.com, authenticated by SPF and DMARC, so a reply is mailed.
        transaction(&mut r, "alice@example.com", &["echo@agents.test"]).await;
        r.send(b"From: alice@example.com\r\nTo: echo@agents.test\r\nMessage-ID: <relay@example.com>\r\n\r\nhello\r\n.\r\n").await;
        assert!(r.reply().await.starts_with("250"));
        let db = app.open_db().await;
        let job = wait_for(20, "the delivery to be refused or retried", || {
            let db = db.clone();
            async move {
                let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 10)
                    .await
                    .unwrap();
                jobs.into_iter()
                    .find(|j| j.state == "dead" || j.attempts >= 2)
            }
        })
        .await;
        let err = job.last_error.clone().unwrap_or_default();
        if code == 550 {
            assert_eq!(job.state, "dead", "a 5xx is permanent: {job:?}");
            assert_eq!(job.attempts, 1, "and never retried: {job:?}");
            assert!(err.contains("permanent"), "{err}");
        } else {
            assert_ne!(job.state, "dead", "a 4xx is retried: {job:?}");
            assert!(job.attempts >= 2, "{job:?}");
            assert!(err.contains("temporary"), "{err}");
        }
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_relay_replies_go_to_the_recipients_mx() {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let port = catcher.port;
    let (mut app, _helper, addr) = spawn_email(None, move |c| {
        c.email.direct_port = port;
        c.email
            .dns_mx
            .insert("example.com".into(), vec!["127.0.0.1".into()]);
    })
    .await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "alice@example.com", &["echo@agents.test"]).await;
    r.send(b"From: Alice <alice@example.com>\r\nTo: echo@agents.test\r\nSubject: direct\r\nMessage-ID: <mx1@example.com>\r\n\r\nstraight to the MX\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let (reply, envelope) = catcher.message(1).await;
    assert_eq!(envelope[1], "alice@example.com");
    assert_eq!(header(&reply, "In-Reply-To").unwrap(), "<mx1@example.com>");
    assert!(header(&reply, "DKIM-Signature").is_some());
    // A domain with no MX and no address: retried, not dropped.
    transaction(&mut r, "bob@nowhere.test", &["echo@agents.test"]).await;
    r.send(b"From: bob@nowhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <mx2@nowhere.test>\r\n\r\nhello\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let db = app.open_db().await;
    let job = wait_for(20, "a retried delivery", || {
        let db = db.clone();
        async move {
            let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 10)
                .await
                .unwrap();
            jobs.into_iter().find(|j| j.attempts >= 2)
        }
    })
    .await;
    assert_ne!(job.state, "dead");
    assert!(job.last_error.unwrap_or_default().contains("nowhere.test"));
    app.stop().await;
}

#[test]
fn dkim_command_prints_the_record_to_publish() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"sqlite://{}\"\n[email]\ndomain = \"agents.test\"\ndkim_selector = \"s2026\"\n",
            dir.path().join("sb.db").display()
        ),
    )
    .unwrap();
    // The server made the database; `dkim`, like every command but `serve`, never creates one.
    let url = format!("sqlite://{}", dir.path().join("sb.db").display());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(crate::helpers::create_db(&url));
    let run_dkim = || {
        let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["--config", config.to_str().unwrap(), "dkim"])
            .env_remove("SWITCHBOARD_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run_dkim();
    assert!(
        first.starts_with("s2026._domainkey.agents.test. IN TXT \"v=DKIM1; k=rsa; p=MIIB"),
        "{first}"
    );
    // Strings of at most 255 bytes.
    for s in first.split('"').skip(1).step_by(2) {
        assert!(s.len() <= 255, "{s}");
    }
    assert_eq!(run_dkim(), first, "the key is made once and kept");
}
