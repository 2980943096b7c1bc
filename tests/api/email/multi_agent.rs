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
