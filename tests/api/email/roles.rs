//! Role addresses over a real SMTP socket: `postmaster@`, `abuse@` and `dmarc@` of every served
//! domain and the bare `<Postmaster>` are taken, stored with the job that routes them, and held,
//! forwarded intact (to the relay catcher, signed by us, the sender's signature still valid) or
//! handed to an agent that is never answered, as `email.postmaster` says.

use std::process::Command;
use std::sync::Arc;

use switchboard::store::Db;
use switchboard::store::jobs::JobInfo;

use super::{
    Catcher, DOMAIN, Raw, crlf, dkimpy_sign, dns_records, header, peers, run, seen, swaks,
    transaction, wait_seen,
};
use crate::helpers::{Engine, RecordingAgent, TestApp, spawn_app, wait_for};

/// The other served domain: the host agents' handles are on (`server.public_url`).
const HUB: &str = "hub.test";

/// A server with email on a loopback port (mail domain `agents.test`, handles on `hub.test`),
/// the recording agents `helper` and `abuse` (an agent named like a role), and `tweak` applied.
async fn spawn_roles(
    tweak: impl FnOnce(&mut switchboard::Config),
) -> (TestApp, Arc<RecordingAgent>, Arc<RecordingAgent>) {
    let helper = Arc::new(RecordingAgent::default());
    let abuse = Arc::new(RecordingAgent::default());
    let (h, a) = (helper.clone(), abuse.clone());
    let app = spawn_app(Engine::Sqlite, move |c, o| {
        c.server.public_url = Some(format!("http://{HUB}"));
        c.email.domain = Some(DOMAIN.into());
        c.email.dns = switchboard::config::DnsMode::Offline;
        dns_records(c);
        o.agents.push(("helper".into(), h));
        o.agents.push(("abuse".into(), a));
        tweak(c);
    })
    .await;
    (app, helper, abuse)
}

fn smtp(app: &TestApp) -> std::net::SocketAddr {
    app.app().smtp_addr().unwrap()
}

/// The `email_role` jobs once `done` says they have all ended.
async fn role_jobs(db: &Db, done: impl Fn(&[JobInfo]) -> bool) -> Vec<JobInfo> {
    wait_for(20, "the role jobs to end", || async {
        let jobs = switchboard::store::jobs::list(db, None, Some("email_role"), 50)
            .await
            .unwrap();
        done(&jobs).then_some(jobs)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_addresses_of_every_served_domain_are_taken_and_held_without_a_destination() {
    let (mut app, helper, abuse) = spawn_roles(|_| {}).await;
    let mut r = Raw::connect(smtp(&app)).await;
    assert!(r.cmd("EHLO client.test").await.starts_with("250"));
    // A bounce: the null sender, automatic, unauthenticated — taken all the same.
    assert!(r.cmd("MAIL FROM:<>").await.starts_with("250"));
    for to in [
        "postmaster@agents.test",
        "PostMaster@Agents.Test",
        "dmarc@agents.test",
        "postmaster@hub.test",
        "Abuse@hub.test",
        "DMARC@HUB.TEST",
        // RFC 5321 §4.1.1.3: Postmaster without a domain, in any case.
        "Postmaster",
        "postmaster",
    ] {
        let got = r.cmd(&format!("RCPT TO:<{to}>")).await;
        assert!(got.starts_with("250 2.1.5"), "{to}: {got}");
    }
    for (to, want) in [
        ("postmaster@elsewhere.test", "550 5.7.1"),
        ("hostmaster@agents.test", "550 5.1.1"),
        ("helper@hub.test", "550 5.1.1"),
        // Only Postmaster goes without a domain; the parser refuses anything else so.
        ("abuse", "501 5.1.3"),
    ] {
        let got = r.cmd(&format!("RCPT TO:<{to}>")).await;
        assert!(got.starts_with(want), "{to}: {got}");
    }
    assert!(r.cmd("DATA").await.starts_with("354"));
    let report = "From: MAILER-DAEMON@elsewhere.test\r\nTo: postmaster@agents.test\r\nSubject: Undelivered Mail Returned to Sender\r\nAuto-Submitted: auto-replied\r\nMessage-ID: <dsn-1@elsewhere.test>\r\n\r\nThe mail system could not deliver a message.\r\n";
    r.send(format!("{report}.\r\n").as_bytes()).await;
    let got = r.reply().await;
    assert!(
        got.starts_with("250 2.0.0 Message queued as email_role:"),
        "{got}"
    );

    // The agent named `abuse` keeps the mail of its own mailbox (in the mail domain); abuse@ of
    // the other served domain is role mail.
    transaction(&mut r, "bob@elsewhere.test", &["abuse@agents.test"]).await;
    r.send(b"From: bob@elsewhere.test\r\nTo: abuse@agents.test\r\nMessage-ID: <a1@elsewhere.test>\r\n\r\nfor the agent\r\n.\r\n").await;
    let got = r.reply().await;
    assert!(
        got.starts_with("250") && !got.contains("email_role"),
        "{got}"
    );
    assert_eq!(
        wait_seen(&abuse, 1).await[0].raw["message_id"],
        "a1@elsewhere.test"
    );

    // Nothing is configured: the message is held — its job dead at once with the reason, the
    // message kept whole in the blob store — and nobody is woken.
    let db = app.open_db().await;
    let jobs = role_jobs(&db, |j| j.len() == 1 && j[0].state == "dead").await;
    let err = jobs[0].last_error.clone().unwrap_or_default();
    assert!(err.contains("held: email.postmaster is not set"), "{err}");
    assert!(
        err.contains("postmaster@agents.test, dmarc@agents.test, postmaster@hub.test, abuse@hub.test, dmarc@hub.test, postmaster")
            && err.contains("Undelivered Mail Returned to Sender")
            && err.contains(&format!("switchboard queue retry {}", jobs[0].id)),
        "{err}"
    );
    let digest = jobs[0].id.strip_prefix("email_role:").unwrap();
    let blob = switchboard::store::blobs::get(&db, digest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(blob.mime, "message/rfc822");
    assert_eq!(blob.data, report.as_bytes(), "kept as received");
    assert!(seen(&helper).is_empty());
    assert_eq!(seen(&abuse).len(), 1);

    // The bare form alone, pipelined: one more held message.
    r.send(b"MAIL FROM:<bob@elsewhere.test>\r\nRCPT TO:<Postmaster>\r\nDATA\r\n")
        .await;
    for want in ["250", "250", "354"] {
        let got = r.reply().await;
        assert!(got.starts_with(want), "{want}: {got}");
    }
    r.send(
        b"From: bob@elsewhere.test\r\nTo: Postmaster\r\nSubject: your server\r\n\r\nhello\r\n.\r\n",
    )
    .await;
    assert!(
        r.reply()
            .await
            .starts_with("250 2.0.0 Message queued as email_role:")
    );
    let jobs = role_jobs(&db, |j| j.len() == 2 && j.iter().all(|j| j.state == "dead")).await;
    assert!(
        jobs.iter().any(|j| j
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("(mail to postmaster from <bob@elsewhere.test>"))),
        "{jobs:?}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_mail_goes_to_the_configured_agent_and_is_never_answered() {
    // A relay that refuses every connection: a reply that was sent would fail and be retried.
    let closed = super::free_port();
    let (mut app, helper, _abuse) = spawn_roles(move |c| {
        c.email.postmaster = Some("helper".into());
        c.email.relay_host = Some("127.0.0.1".into());
        c.email.relay_port = closed;
        c.email.relay_tls = switchboard::config::RelayTls::None;
    })
    .await;
    let mut r = Raw::connect(smtp(&app)).await;
    // A DMARC aggregate report from a domain that authenticates (SPF, DMARC): an agent would
    // answer it, if it were not role mail.
    transaction(&mut r, "alice@example.com", &["dmarc@agents.test"]).await;
    r.send(b"From: alice@example.com\r\nTo: dmarc@agents.test\r\nSubject: Report Domain: agents.test\r\nMessage-ID: <rua-1@example.com>\r\n\r\naggregate report\r\n.\r\n").await;
    assert!(
        r.reply()
            .await
            .starts_with("250 2.0.0 Message queued as email_role:")
    );
    let m = wait_seen(&helper, 1).await.remove(0);
    assert_eq!(m.recipient, app.agent("helper"));
    assert_eq!(m.raw["roles"], serde_json::json!(["dmarc@agents.test"]));
    assert_eq!(
        m.raw["envelope"]["rcpt_to"],
        serde_json::json!(["dmarc@agents.test"])
    );
    assert_eq!(m.raw["message_id"], "rua-1@example.com");
    assert!(
        m.sender.verified,
        "authenticated as at receipt: {:?}",
        m.sender
    );

    // The echo answer is kept, not mailed: its delivery ends at once, no relay attempt.
    let db = app.open_db().await;
    let deliver = wait_for(20, "the answer's delivery to end", || {
        let db = db.clone();
        async move {
            let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 10)
                .await
                .unwrap();
            jobs.into_iter()
                .find(|j| j.state != "ready" && j.state != "running")
        }
    })
    .await;
    assert_eq!(
        (deliver.state.as_str(), deliver.attempts),
        ("done", 1),
        "{deliver:?}"
    );
    let jobs = role_jobs(&db, |j| j.len() == 1 && j[0].state == "done").await;
    assert_eq!(jobs[0].attempts, 1);

    // An unauthenticated bounce to the bare Postmaster reaches the agent too (automatic mail
    // from an unknown sender wakes no agent otherwise), and is not answered either.
    transaction(&mut r, "", &["Postmaster"]).await;
    r.send(b"From: MAILER-DAEMON@elsewhere.test\r\nTo: Postmaster\r\nAuto-Submitted: auto-replied\r\nMessage-ID: <dsn-2@elsewhere.test>\r\n\r\nbounced\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let m = wait_seen(&helper, 2).await.remove(1);
    assert_eq!(m.raw["roles"], serde_json::json!(["postmaster"]));
    assert!(!m.sender.verified);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_mail_is_forwarded_intact_and_signed_through_the_relay() {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let port = catcher.port;
    let (mut app, helper, _abuse) = spawn_roles(move |c| {
        c.email.postmaster = Some("ops@example.net".into());
        c.email.relay_host = Some("127.0.0.1".into());
        c.email.relay_port = port;
        c.email.relay_tls = switchboard::config::RelayTls::None;
    })
    .await;
    let addr = smtp(&app);

    // A complaint signed by its sender (dkimpy), sent by swaks to abuse@ of the other served
    // domain; its body ends in whitespace-only lines, which relaxed canonicalisation would trip
    // over.
    let msg = "From: Alice Example <alice@example.com>\nTo: abuse@hub.test\nSubject: Spam from your server\nDate: Sun, 22 Nov 2026 06:00:00 +0000\nMessage-ID: <abuse-1@example.com>\n\nYour server sent me this.\n  \n\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        msg,
        "rsa-sha256",
    );
    let (ok, out) = swaks(&p, addr, "alice@example.com", &["abuse@hub.test"], &signed);
    assert!(
        ok && out.contains("250 2.0.0 Message queued as email_role:"),
        "{out}"
    );

    let (fwd, envelope) = catcher.message(1).await;
    assert!(
        envelope[0].starts_with("bounces+role-") && envelope[0].ends_with("@agents.test"),
        "our envelope sender: {envelope:?}"
    );
    assert_eq!(envelope[1..], ["ops@example.net"]);
    // The message as received, under our trace lines and signature.
    let db = app.open_db().await;
    let jobs = role_jobs(&db, |j| j.len() == 1 && j[0].state == "done").await;
    let digest = jobs[0].id.strip_prefix("email_role:").unwrap();
    let received = switchboard::store::blobs::get(&db, digest)
        .await
        .unwrap()
        .unwrap()
        .data;
    assert!(
        fwd.ends_with(&received),
        "the original is intact: {:?}\n---\n{:?}",
        String::from_utf8_lossy(&fwd),
        String::from_utf8_lossy(&received)
    );
    // (swaks ends the data with a line break more than the file has.)
    assert!(
        received.starts_with(&std::fs::read(&signed).unwrap()),
        "and is what swaks sent"
    );
    let trace = header(&fwd, "Received").unwrap();
    assert!(
        trace.contains("by agents.test with ESMTP") && trace.contains("for <abuse@hub.test>"),
        "{trace}"
    );
    assert_eq!(header(&fwd, "X-Original-To").unwrap(), "abuse@hub.test");
    assert!(seen(&helper).is_empty());

    // dkimpy verifies our signature (the topmost) with the record `switchboard dkim` prints,
    // and the sender's own (the next) with theirs.
    let file = catcher.dir.path().join("1.eml");
    let keys = app.app().pipeline().keys().clone();
    let (name, txt) = switchboard::transports::email::dkim_record(&keys, "switchboard", DOMAIN)
        .await
        .unwrap();
    let (ok, out) = run(Command::new(&p.python)
        .arg(p.scripts.join("verify.py"))
        .arg(&file)
        .arg(&name)
        .arg(&txt)
        .arg("0"));
    assert!(
        ok && out.starts_with("pass agents.test switchboard"),
        "ours: {out}"
    );
    let sender_key = super::fixture_text("sender-dkim.pub.b64");
    let (ok, out) = run(Command::new(&p.python)
        .arg(p.scripts.join("verify.py"))
        .arg(&file)
        .arg("sel1._domainkey.example.com")
        .arg(format!("v=DKIM1; k=rsa; p={sender_key}"))
        .arg("1"));
    assert!(
        ok && out.starts_with("pass example.com sel1"),
        "the sender's: {out}"
    );

    // The bare Postmaster, from swaks, is forwarded too.
    let msg2 = crlf(
        "From: alice@example.com\nTo: postmaster\nSubject: Hello postmaster\nMessage-ID: <pm-1@example.com>\n\nIs anyone there?\n",
    );
    let file2 = catcher.dir.path().join("in2.eml");
    std::fs::write(&file2, msg2).unwrap();
    let (ok, out) = swaks(&p, addr, "alice@example.com", &["Postmaster"], &file2);
    assert!(ok && out.contains("RCPT TO:<Postmaster>"), "{out}");
    let (fwd2, envelope2) = catcher.message(2).await;
    assert_eq!(envelope2[1..], ["ops@example.net"]);
    let sent = std::fs::read(&file2).unwrap();
    assert!(fwd2.windows(sent.len()).any(|w| w == sent), "intact");
    assert!(
        header(&fwd2, "Received")
            .unwrap()
            .contains("for <postmaster>")
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postmaster_naming_no_agent_or_an_address_of_ours_stops_the_start() {
    for (postmaster, want) in [
        ("nobody", "no agent named \"nobody\""),
        ("ops@hub.test", "name the agent instead"),
        ("Helper@AGENTS.test", "name the agent instead"),
    ] {
        let db = crate::helpers::fresh_db(Engine::Sqlite).await;
        let mut c = crate::helpers::test_config(&db.url);
        c.server.public_url = Some(format!("http://{HUB}"));
        c.email.domain = Some(DOMAIN.into());
        c.email.postmaster = Some(postmaster.into());
        let e = switchboard::Application::build_with(c, switchboard::app::Options::default())
            .await
            .err()
            .unwrap_or_else(|| panic!("{postmaster:?} was taken"));
        assert!(e.to_string().contains(want), "{postmaster:?}: {e}");
    }
}
