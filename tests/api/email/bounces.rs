//! Bounces: a real Postfix relays an agent's reply to a server that refuses it and mails its
//! delivery status notification back to the reply's bounce address; switchboard reads the
//! report into the delivery's record (read API and console) and tells the agent that asked.

use serde_json::Value;
use switchboard::config::Notify;
use switchboard::message::Part;

use super::{Catcher, Postfix, dkimpy_sign, free_port, peers, seen, spawn_email, swaks, wait_seen};
use crate::helpers::wait_for;

const TOKEN: &str = "bounce-token";

/// The read API's view of a message (`GET /api/v1/messages/{id}` at `url`).
async fn message_view(http: &reqwest::Client, url: &str) -> Option<Value> {
    let r = http.get(url).bearer_auth("test-token").send().await.ok()?;
    r.json().await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postfix_bounce_is_recorded_with_its_status_and_told_to_the_agent() {
    let Some(p) = peers() else { return };
    // example.com's server refuses every message; Postfix is switchboard's relay.
    let refusing = Catcher::start(&p, 550);
    let relay_port = free_port();
    let (mut app, helper, addr) = spawn_email(Some(relay_port), |c| {
        c.console.token = Some(switchboard::config::Secret::new(TOKEN));
        // helper's backend is the recording agent; its configuration asks for bounces.
        c.agents.push(switchboard::config::AgentConfig {
            activitypub: None,
            access: None,
            name: "helper".into(),
            display_name: None,
            summary: None,
            backend: switchboard::config::BackendConfig::Echo,
            a2a: None,
            email: None,
            notify: vec![Notify::DeliveryFailed],
        });
    })
    .await;
    let postfix = Postfix::start_routing(relay_port, addr, &[("example.com", refusing.port)]);

    let msg = "From: Alice Example <alice@example.com>\nTo: helper@agents.test\nSubject: Are you there?\nDate: Sun, 29 Nov 2026 06:00:00 +0000\nMessage-ID: <ask-1@example.com>\n\nPlease answer.\n";
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
        addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok, "{out}");
    let first = wait_seen(&helper, 1).await.remove(0);

    // The reply goes through Postfix, is refused, and Postfix's bounce comes back to us.
    let line = postfix
        .logged(&["alice@example.com", "status=bounced"])
        .await;
    assert!(line.contains("550 5.7.1"), "{line}");
    let told = wait_seen(&helper, 2).await.remove(1);

    // The read API shows the report's fields.
    let url = format!("{}/api/v1/messages/{}", app.base, first.id);
    let view: Value = wait_for(30, "the bounce in the read API", || {
        let (http, url) = (app.http.clone(), url.clone());
        async move {
            let v = message_view(&http, &url).await?;
            (v["status"] == "delivery_failed").then_some(v)
        }
    })
    .await;
    let failure = &view["delivery_failure"];
    assert_eq!(failure["status_code"], "5.7.1", "{view}");
    assert!(
        failure["diagnostic"]
            .as_str()
            .is_some_and(|d| d.starts_with("550 5.7.1")),
        "{failure}"
    );
    assert_eq!(failure["recipient"], "alice@example.com");
    assert!(
        failure["remote_mta"]
            .as_str()
            .is_some_and(|m| m.contains("127.0.0.1")),
        "{failure}"
    );
    let response_id = view["response_id"].as_str().unwrap().to_owned();

    // The agent was told, in the reply's thread, by an event naming the reply.
    assert_eq!(told.thread_id, first.thread_id, "the reply's thread");
    assert_eq!(told.in_reply_to.as_deref(), Some(response_id.as_str()));
    let [Part::Event(event)] = told.parts.as_slice() else {
        panic!("an event part: {:?}", told.parts)
    };
    assert_eq!(event.event, "delivery_failed");
    assert_eq!(event.object.as_deref(), Some(response_id.as_str()));
    assert!(
        event
            .outcome
            .as_deref()
            .is_some_and(|o| o.starts_with("5.7.1 550 5.7.1")),
        "{event:?}"
    );
    assert!(
        told.sender
            .address
            .to_ascii_lowercase()
            .starts_with("mailer-daemon@"),
        "{}",
        told.sender.address
    );

    // The console's page of the message shows them too.
    let page = app
        .http
        .get(format!(
            "http://{}/console/messages/{}",
            app.app().metrics_addr(),
            first.id
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("id=\"failure-status\">5.7.1<"),
        "the console shows the status code"
    );
    assert!(page.contains("id=\"failure-recipient\">alice@example.com<"));

    // The same bounce again (a sender retrying) tells the agent nothing new, and whatever the
    // agent answered an event, no mail went anywhere but the refusing server's one attempt.
    let bounce_to = format!("bounces+{response_id}@agents.test");
    let again = format!(
        "From: MAILER-DAEMON@mx.relay.test\nTo: {bounce_to}\nSubject: Undelivered Mail Returned to Sender\nMessage-ID: <again@mx.relay.test>\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\nNot delivered.\n--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.relay.test\n\nFinal-Recipient: rfc822; alice@example.com\nAction: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 gone\n--b--\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("again.eml");
    std::fs::write(&path, super::crlf(&again)).unwrap();
    let (ok, out) = swaks(&p, addr, "<>", &[&bounce_to], &path);
    assert!(ok, "{out}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(seen(&helper).len(), 2, "told once");
    let view = message_view(&app.http, &url).await.unwrap();
    assert_eq!(
        view["delivery_failure"]["status_code"], "5.7.1",
        "the first report stands"
    );
    app.stop().await;
}
