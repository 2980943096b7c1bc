//! Multi-agent conversations over email: an agent's reply that mentions another local agent
//! carries it in `Cc`, and switchboard wakes it directly; its own reply goes to the same person,
//! threaded under the mentioning agent's mail, with that agent in `Cc`.

use super::{Catcher, header, peers, send_from_alice, spawn_email_agents};
use crate::helpers::{Engine, on_both_engines};
use crate::multi_agent::MentionAgent;

on_both_engines!(a_mentioned_agent_is_copied_and_answers_in_the_thread);
async fn a_mentioned_agent_is_copied_and_answers_in_the_thread(engine: Engine) {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let helper = MentionAgent::new("helper");
    let scout = MentionAgent::new("scout");
    let (app, addr) = spawn_email_agents(
        engine,
        Some(catcher.port),
        vec![
            ("helper".into(), helper.clone()),
            ("scout".into(), scout.clone()),
        ],
        |_| {},
    )
    .await;
    helper.mention(&[&app.agent("scout")]);
    scout.mention(&[&app.agent("helper")]);

    let m1 = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Trip\nDate: Wed, 25 Nov 2026 06:00:00 +0000\nMessage-ID: <trip-1@example.com>\n\nWhere should we go?\n";
    send_from_alice(&p, addr, m1, &["helper@agents.test"]);

    let first = catcher.message(1).await;
    let second = catcher.message(2).await;
    let by = |m: &(Vec<u8>, Vec<String>), from: &str| {
        header(&m.0, "From").is_some_and(|f| f.contains(from))
    };
    let (mail_h, mail_s) = if by(&first, "helper@agents.test") {
        (first, second)
    } else {
        (second, first)
    };
    assert!(by(&mail_h, "helper@agents.test"));
    assert!(by(&mail_s, "scout@agents.test"));
    // Both go to the person only (the envelope); the agents are shown in Cc.
    assert_eq!(mail_h.1[1..], ["alice@example.com".to_owned()]);
    assert_eq!(mail_s.1[1..], ["alice@example.com".to_owned()]);
    assert_eq!(header(&mail_h.0, "Cc").unwrap(), "scout@agents.test");
    assert_eq!(header(&mail_s.0, "Cc").unwrap(), "helper@agents.test");
    assert_eq!(
        header(&mail_h.0, "In-Reply-To").unwrap(),
        "<trip-1@example.com>"
    );
    // scout answers helper's mail, below the person's.
    let helper_id = header(&mail_h.0, "Message-ID").unwrap();
    assert_eq!(header(&mail_s.0, "In-Reply-To").unwrap(), helper_id);
    let refs = header(&mail_s.0, "References").unwrap();
    assert!(
        refs.starts_with("<trip-1@example.com>") && refs.ends_with(&helper_id),
        "{refs}"
    );
    assert_eq!(header(&mail_s.0, "Subject").unwrap(), "Re: Trip");
    // Each agent was called once: scout's mention of helper does not wake it again.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!((helper.calls(), scout.calls()), (1, 1));
    let to_scout = &scout.seen()[0];
    assert_eq!(to_scout.sender.address, app.agent("helper"));
    assert_eq!(to_scout.recipient_capabilities.agent_chain.unwrap().hop, 2);
    assert!(!catcher.dir.path().join("3.eml").exists(), "no third mail");
}

/// Mail an agent writes to someone who did not write to it (it was mentioned into their thread)
/// carries a one-click unsubscribe under our DKIM signature; once used, that agent's unasked
/// mail to the address stops, while its answers to the person's own mail still go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unasked_mail_carries_a_one_click_unsubscribe_that_stops_it() {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let helper = MentionAgent::new("helper");
    let scout = MentionAgent::new("scout");
    let (mut app, addr) = spawn_email_agents(
        Engine::Sqlite,
        Some(catcher.port),
        vec![
            ("helper".into(), helper.clone()),
            ("scout".into(), scout.clone()),
        ],
        |_| {},
    )
    .await;
    helper.mention(&[&app.agent("scout")]);

    let m1 = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Trip\nDate: Wed, 25 Nov 2026 06:00:00 +0000\nMessage-ID: <unsub-1@example.com>\n\nWhere should we go?\n";
    send_from_alice(&p, addr, m1, &["helper@agents.test"]);
    let (a, b) = (catcher.message(1).await, catcher.message(2).await);
    let from_scout = |m: &(Vec<u8>, Vec<String>)| {
        header(&m.0, "From").is_some_and(|f| f.contains("scout@agents.test"))
    };
    let (asked, unasked) = if from_scout(&a) { (b, a) } else { (a, b) };
    assert_eq!(
        header(&asked.0, "List-Unsubscribe"),
        None,
        "alice wrote to helper"
    );
    let link = header(&unasked.0, "List-Unsubscribe").expect("scout's mail is unasked");
    assert_eq!(
        header(&unasked.0, "List-Unsubscribe-Post").as_deref(),
        Some("List-Unsubscribe=One-Click")
    );
    let signed = header(&unasked.0, "DKIM-Signature")
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        signed.contains("list-unsubscribe:list-unsubscribe-post")
            || (signed.contains("list-unsubscribe") && signed.contains("list-unsubscribe-post")),
        "the signature covers both: {signed}"
    );
    let path = link
        .trim_matches(['<', '>'])
        .split_once("/email/unsubscribe/")
        .map(|(_, token)| format!("/email/unsubscribe/{token}"))
        .expect("an https link under the public URL");
    let url = format!("{}{path}", app.base);

    // Following the link shows a button and changes nothing; a POST without the one-click
    // body and one to an unknown token are refused.
    let page = app.http.get(&url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("List-Unsubscribe"));
    let post = |url: String, body: &'static str| {
        let http = app.http.clone();
        async move {
            http.post(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(post(url.clone(), "unsubscribe=yes").await, 400);
    assert_eq!(
        post(
            format!("{}/email/unsubscribe/nope", app.base),
            "List-Unsubscribe=One-Click"
        )
        .await,
        404
    );
    assert_eq!(post(url.clone(), "List-Unsubscribe=One-Click").await, 200);
    assert_eq!(
        post(url, "List-Unsubscribe=One-Click").await,
        200,
        "again: the same"
    );

    // Another thread: helper's answer goes, scout's does not.
    let m2 = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Dinner\nDate: Wed, 25 Nov 2026 07:00:00 +0000\nMessage-ID: <unsub-2@example.com>\n\nAnd dinner?\n";
    send_from_alice(&p, addr, m2, &["helper@agents.test"]);
    let third = catcher.message(3).await;
    assert!(!from_scout(&third), "helper answers what alice asked it");
    crate::helpers::wait_for(30, "scout's second answer", || async {
        (scout.calls() == 2).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(
        !catcher.dir.path().join("4.eml").exists(),
        "scout writes to alice unasked no more"
    );

    // Alice writes to scout herself: its answer goes, without an unsubscribe.
    let m3 = "From: Alice Example <alice@example.com>\nTo: Scout <scout@agents.test>\nSubject: Hello scout\nDate: Wed, 25 Nov 2026 08:00:00 +0000\nMessage-ID: <unsub-3@example.com>\n\nA question for you.\n";
    send_from_alice(&p, addr, m3, &["scout@agents.test"]);
    let fourth = catcher.message(4).await;
    assert!(from_scout(&fourth));
    assert_eq!(header(&fourth.0, "List-Unsubscribe"), None);
    app.stop().await;
}
