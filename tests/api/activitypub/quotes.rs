//! Quote requests (FEP-044f): an agent's reply publishes its `quote_policy` as the note's
//! `interactionPolicy`; a signed `QuoteRequest` for it is answered by that policy — an `Accept`
//! whose authorization is served at its IRI, or a `Reject` — and malformed, mismatched,
//! replayed and foreign requests change nothing.

use serde_json::{Value, json};
use switchboard::config::{AgentActivityPubConfig, QuotePolicy};
use switchboard::transports::activitypub::mapping;

use super::profile::{follow, with_profile};
use super::remote::{Remote, note_create, post_signed};
use super::{Setup, get_ap, setup};
use crate::helpers::{Engine, on_both_engines, wait_for};

/// Has `alice` mention echo publicly and returns echo's reply note.
async fn reply_of_echo(s: &Setup) -> Value {
    let (t, remote) = (&s.t, &s.remote);
    let echo = format!("{}/agents/echo", t.base);
    let create = note_create(
        remote,
        "alice",
        "q0",
        vec![mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        "<p>@echo quote me</p>",
    );
    let r = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &serde_json::to_vec(&create).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(15, "echo's reply", || async {
        remote
            .posts()
            .into_iter()
            .find(|p| p.2["type"] == "Create")
            .map(|p| p.2["object"].clone())
    })
    .await
}

/// A `QuoteRequest` from `who` (on `remote`) for `quoted`, its quoting note `n` embedded and
/// quoting `quotes`.
fn request(remote: &Remote, who: &str, n: &str, quoted: &str, quotes: &str) -> Value {
    let actor = remote.actor_url(who);
    let note = format!("{}/notes/{n}", remote.base);
    json!({
        "@context": ["https://www.w3.org/ns/activitystreams", {"QuoteRequest": "https://w3id.org/fep/044f#QuoteRequest"}],
        "id": format!("{actor}/quote_requests/{n}"),
        "type": "QuoteRequest",
        "actor": actor,
        "object": quoted,
        "instrument": {"id": note, "type": "Note", "attributedTo": actor, "content": "look", "quote": quotes},
    })
}

async fn send(s: &Setup, who: &str, doc: &Value) -> u16 {
    let t = &s.t;
    post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &serde_json::to_vec(doc).unwrap(),
        &s.remote.key_id(who),
        0,
    )
    .await
    .status()
    .as_u16()
}

/// The answers (`Accept`/`Reject` of a QuoteRequest) delivered to the remote, in order.
fn answers(remote: &Remote) -> Vec<Value> {
    remote
        .posts()
        .into_iter()
        .map(|p| p.2)
        .filter(|a| {
            matches!(a["type"].as_str(), Some("Accept" | "Reject"))
                && a["object"]["type"] == "QuoteRequest"
        })
        .collect()
}

async fn answered(remote: &Remote, n: usize) -> Vec<Value> {
    wait_for(15, "the answers", || async {
        let a = answers(remote);
        (a.len() >= n).then_some(a)
    })
    .await
}

on_both_engines!(quote_requests_are_answered_by_the_agents_policy);

async fn quote_requests_are_answered_by_the_agents_policy(engine: Engine) {
    let s = setup(engine, |c| {
        with_profile(
            c,
            AgentActivityPubConfig {
                quote_policy: QuotePolicy::Followers,
                ..AgentActivityPubConfig::default()
            },
        );
    })
    .await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    remote.add_actor("bob");
    let echo = format!("{}/agents/echo", t.base);
    let note = reply_of_echo(&s).await;
    let quoted = note["id"].as_str().unwrap().to_owned();
    // The reply says who may quote it; the context defines the terms.
    assert_eq!(
        note["interactionPolicy"],
        json!({"canQuote": {"automaticApproval": [format!("{echo}/followers")]}})
    );
    let (_, _, stored) = get_ap(t, &quoted).await;
    assert_eq!(stored["interactionPolicy"], note["interactionPolicy"]);

    // Malformed or mismatched: 400, and no answer.
    let mut no_instrument = request(remote, "alice", "q1", &quoted, &quoted);
    no_instrument.as_object_mut().unwrap().remove("instrument");
    assert_eq!(send(&s, "alice", &no_instrument).await, 400);
    let elsewhere = request(remote, "alice", "q2", &quoted, "https://other.example/n/1");
    assert_eq!(send(&s, "alice", &elsewhere).await, 400);
    let mut not_hers = request(remote, "alice", "q3", &quoted, &quoted);
    not_hers["instrument"]["attributedTo"] = json!(remote.actor_url("bob"));
    assert_eq!(send(&s, "alice", &not_hers).await, 400);
    // A note that is not ours: nothing to answer.
    let foreign = request(
        remote,
        "alice",
        "q4",
        "https://other.example/n/2",
        "https://other.example/n/2",
    );
    assert_eq!(send(&s, "alice", &foreign).await, 202);

    // alice does not follow echo: refused.
    let first = request(remote, "alice", "q5", &quoted, &quoted);
    assert_eq!(send(&s, "alice", &first).await, 202);
    let a = answered(remote, 1).await;
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0]["type"], "Reject");
    assert_eq!(a[0]["actor"], echo);
    assert_eq!(a[0]["object"]["id"], first["id"]);
    assert!(a[0].get("result").is_none());

    // bob follows, and is let through: the Accept names an authorization echo serves.
    follow(t, remote, "bob").await;
    let second = request(remote, "bob", "q6", &quoted, &quoted);
    assert_eq!(send(&s, "bob", &second).await, 202);
    let a = answered(remote, 2).await;
    assert_eq!(a[1]["type"], "Accept", "{}", a[1]);
    assert_eq!(a[1]["object"]["id"], second["id"]);
    let result = a[1]["result"].as_str().unwrap().to_owned();
    assert!(
        result.starts_with(&format!("{echo}/quote_authorizations/")),
        "{result}"
    );
    let (status, ct, doc) = get_ap(t, &result).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/activity+json"), "{ct}");
    assert_eq!(doc["id"], result);
    assert_eq!(doc["type"], "QuoteAuthorization");
    assert_eq!(doc["attributedTo"], echo);
    assert_eq!(doc["interactingObject"], second["instrument"]["id"]);
    assert_eq!(doc["interactionTarget"], quoted);
    // Replayed: acknowledged, not answered again.
    assert_eq!(send(&s, "bob", &second).await, 202);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(answers(remote).len(), 2);
    // Unknown authorizations, and those under another agent's name, are not there.
    let (status, _, _) = get_ap(t, &format!("{echo}/quote_authorizations/00")).await;
    assert_eq!(status, 404);
    let helper = result.replace("/agents/echo/", "/agents/helper/");
    assert_eq!(get_ap(t, &helper).await.0, 404);
}

/// `anyone` lets any requester quote; `nobody` refuses even a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anyone_and_nobody_policies() {
    for (policy, who, expected) in [
        (QuotePolicy::Anyone, mapping::PUBLIC.to_owned(), "Accept"),
        (QuotePolicy::Nobody, String::new(), "Reject"),
    ] {
        let s = setup(Engine::Sqlite, |c| {
            with_profile(
                c,
                AgentActivityPubConfig {
                    quote_policy: policy,
                    ..AgentActivityPubConfig::default()
                },
            );
        })
        .await;
        let (t, remote) = (&s.t, &s.remote);
        remote.add_actor("alice");
        let echo = format!("{}/agents/echo", t.base);
        follow(t, remote, "alice").await;
        let note = reply_of_echo(&s).await;
        let who = if who.is_empty() { echo.clone() } else { who };
        assert_eq!(
            note["interactionPolicy"]["canQuote"]["automaticApproval"],
            json!([who])
        );
        let quoted = note["id"].as_str().unwrap();
        let req = request(remote, "alice", "q1", quoted, quoted);
        assert_eq!(send(&s, "alice", &req).await, 202);
        let a = answered(remote, 1).await;
        assert_eq!(a[0]["type"], expected, "{policy:?}: {}", a[0]);
    }
}
