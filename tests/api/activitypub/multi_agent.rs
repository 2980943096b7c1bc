//! Multi-agent conversations over ActivityPub: an agent's reply that mentions another local
//! agent addresses and tags it, switchboard wakes it directly (no POST to its own inbox), and
//! its reply reaches the remote person threaded under the mentioning note, in the same context.

use serde_json::Value;

use super::remote::{Remote, note_create, post_signed};
use crate::helpers::{Engine, on_both_engines, spawn_app, wait_for};
use crate::multi_agent::MentionAgent;

/// The `Create`s the remote host has received, by the local actor that sent them.
fn creates(remote: &Remote) -> Vec<Value> {
    remote
        .posts()
        .into_iter()
        .map(|p| p.2)
        .filter(|b| b["type"] == "Create")
        .collect()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

on_both_engines!(a_mentioned_agent_is_addressed_woken_and_threaded);
async fn a_mentioned_agent_is_addressed_woken_and_threaded(engine: Engine) {
    let remote = Remote::start().await;
    // helper writes scout's handle in its text (ActivityPub relays inline mentions); scout
    // mentions helper back, which the chain refuses (helper already answered).
    let helper = MentionAgent::inline("helper");
    let scout = MentionAgent::inline("scout");
    let (h, s) = (helper.clone(), scout.clone());
    let t = spawn_app(engine, move |_, o| {
        o.agents.push(("helper".into(), h));
        o.agents.push(("scout".into(), s));
    })
    .await;
    helper.mention(&[&t.agent("scout")]);
    scout.mention(&[&t.agent("helper")]);
    let alice = remote.add_actor("alice");
    let helper_iri = format!("{}/agents/helper", t.base);
    let scout_iri = format!("{}/agents/scout", t.base);
    let note = note_create(
        &remote,
        "alice",
        "n1",
        vec![helper_iri.clone()],
        vec![],
        &[(helper_iri.as_str(), &t.agent("helper"))],
        "<p>plan a trip</p>",
    );
    let r = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &serde_json::to_vec(&note).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);

    let got = wait_for(20, "both replies at alice's server", || async {
        let c = creates(&remote);
        (c.len() >= 2).then_some(c)
    })
    .await;
    let by = |actor: &str| {
        got.iter()
            .find(|c| c["actor"] == actor)
            .unwrap_or_else(|| panic!("no Create by {actor}: {got:?}"))
            .clone()
    };
    let (from_helper, from_scout) = (by(&helper_iri), by(&scout_iri));
    let (nh, ns) = (&from_helper["object"], &from_scout["object"]);
    // helper's reply answers alice and addresses, tags and mentions scout.
    assert_eq!(nh["inReplyTo"], format!("{}/notes/n1", remote.base));
    let to_h = strs(&nh["to"]);
    assert!(to_h.contains(&alice) && to_h.contains(&scout_iri), "{nh}");
    let tags_h: Vec<String> = nh["tag"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["type"] == "Mention")
        .map(|t| t["href"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        tags_h.contains(&alice) && tags_h.contains(&scout_iri),
        "{nh}"
    );
    // scout's reply answers helper's note, in the same context, addressing alice and helper.
    assert_eq!(ns["inReplyTo"], nh["id"], "{ns}");
    assert!(nh["context"].is_string(), "{nh}");
    assert_eq!(ns["context"], nh["context"]);
    let to_s = strs(&ns["to"]);
    assert!(to_s.contains(&alice) && to_s.contains(&helper_iri), "{ns}");
    assert!(ns["content"].as_str().unwrap().contains("scout says hi"));
    // Nothing was posted to our own inboxes, and each agent answered once.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        remote.posts().iter().all(|p| !p.0.contains("/agents/")),
        "only the remote host is posted to"
    );
    assert_eq!(creates(&remote).len(), 2);
    assert_eq!((helper.calls(), scout.calls()), (1, 1));
    let to_scout = &scout.seen()[0];
    assert_eq!(to_scout.sender.address, t.agent("helper"));
    let chain = to_scout.recipient_capabilities.agent_chain.unwrap();
    assert_eq!((chain.hop, chain.max_hops, chain.is_final), (2, 3, false));
    // scout's history holds alice's note (helper's words are the turn itself).
    let history = to_scout.history.clone().unwrap_or_default();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        history[0].sender.address,
        format!("@alice@{}", remote.base.trim_start_matches("http://"))
    );
}
