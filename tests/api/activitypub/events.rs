//! Interactions told to agents that asked (`notify`): a follow, a like and a boost of the
//! agent's reply, a quote request — each one event message from the verified actor, in the
//! reply's thread where there is one, answered with nothing by an agent that says nothing; a
//! replay tells nothing twice, a like of someone else's note tells nobody, and an agent that
//! did not ask is told nothing.

use serde_json::{Value, json};
use switchboard::config::Notify;
use switchboard::message::{NormalizedMessage, Part};
use switchboard::transports::activitypub::mapping;

use super::remote::{note_create, post_signed};
use super::{Setup, setup};
use crate::helpers::{Engine, on_both_engines, wait_for};

async fn send(s: &Setup, who: &str, doc: &Value) {
    let r = post_signed(
        &s.t.http,
        &format!("{}/inbox", s.t.base),
        &serde_json::to_vec(doc).unwrap(),
        &s.remote.key_id(who),
        0,
    )
    .await;
    assert_eq!(r.status(), 202, "{:?}", r.text().await);
}

/// The events echo was told of, in order: (event, object, outcome, sender address).
fn events(s: &Setup) -> Vec<(String, Option<String>, Option<String>, String)> {
    s.echo
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|m: &NormalizedMessage| match m.parts.first() {
            Some(Part::Event(e)) => Some((
                e.event.clone(),
                e.object.clone(),
                e.outcome.clone(),
                m.sender.address.clone(),
            )),
            _ => None,
        })
        .collect()
}

async fn told(s: &Setup, n: usize) -> Vec<(String, Option<String>, Option<String>, String)> {
    wait_for(15, "the events", || async {
        let e = events(s);
        (e.len() >= n).then_some(e)
    })
    .await
}

on_both_engines!(interactions_are_told_to_an_agent_that_asked);

async fn interactions_are_told_to_an_agent_that_asked(engine: Engine) {
    let s = setup(engine, |c| {
        let echo = c.agents.iter_mut().find(|a| a.name == "echo").unwrap();
        echo.notify = vec![
            Notify::Follow,
            Notify::Like,
            Notify::Announce,
            Notify::QuoteRequest,
        ];
    })
    .await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let bob = remote.add_actor("bob");
    let host = mapping::host_of(&alice).unwrap();
    let echo = format!("{}/agents/echo", t.base);

    // A follow: told, and answered only with the Accept.
    let follow = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{alice}#follows/1"), "type": "Follow", "actor": alice, "object": echo});
    send(&s, "alice", &follow).await;
    let e = told(&s, 1).await;
    assert_eq!(
        e[0],
        ("follow".into(), None, None, format!("@alice@{host}"))
    );
    let msg = s.echo.seen.lock().unwrap()[0].clone();
    assert!(msg.sender.verified);
    assert_eq!(msg.raw["type"], "Follow");

    // alice mentions echo; echo's reply is the note the next interactions concern.
    let create = note_create(
        remote,
        "alice",
        "n1",
        vec![mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        "<p>@echo hello</p>",
    );
    send(&s, "alice", &create).await;
    let reply = wait_for(15, "echo's reply", || async {
        remote
            .posts()
            .into_iter()
            .find(|p| p.2["type"] == "Create")
            .map(|p| p.2["object"].clone())
    })
    .await;
    let note = reply["id"].as_str().unwrap().to_owned();
    let thread = s.echo.seen.lock().unwrap()[1].thread_id.clone();

    let like = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{bob}#likes/1"), "type": "Like", "actor": bob, "object": note});
    send(&s, "bob", &like).await;
    let boost = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{bob}/statuses/9/activity"), "type": "Announce", "actor": bob,
        "to": [mapping::PUBLIC], "cc": [echo, format!("{bob}/followers")], "object": note});
    send(&s, "bob", &boost).await;
    // Replayed, and a like of a note that is not ours: nothing more.
    send(&s, "bob", &like).await;
    let foreign = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{bob}#likes/2"), "type": "Like", "actor": bob,
        "object": format!("{}/notes/n1", remote.base)});
    send(&s, "bob", &foreign).await;
    let quote = json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{bob}/quote_requests/1"), "type": "QuoteRequest", "actor": bob,
        "object": note,
        "instrument": {"id": format!("{}/notes/q1", remote.base), "type": "Note",
                       "attributedTo": bob, "content": "look", "quote": note},
    });
    send(&s, "bob", &quote).await;
    let e = told(&s, 4).await;
    let bob_at = format!("@bob@{host}");
    assert_eq!(
        e[1..],
        [
            ("like".into(), Some(note.clone()), None, bob_at.clone()),
            ("announce".into(), Some(note.clone()), None, bob_at.clone()),
            (
                "quote_request".into(),
                Some(note.clone()),
                Some("accepted".into()),
                bob_at.clone()
            ),
        ]
    );
    // In the reply's thread; the agent said nothing, so nothing went out but the answers.
    for m in s.echo.seen.lock().unwrap().iter().skip(2) {
        assert_eq!(m.thread_id, thread);
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(events(&s).len(), 4, "told once each");
    let creates = remote
        .posts()
        .iter()
        .filter(|p| p.2["type"] == "Create")
        .count();
    assert_eq!(creates, 1, "no reply to an event");

    // helper did not ask: a follow of helper tells it nothing.
    let helper = format!("{}/agents/helper", t.base);
    let follow = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{alice}#follows/2"), "type": "Follow", "actor": alice, "object": helper});
    send(&s, "alice", &follow).await;
    wait_for(10, "helper's Accept", || async {
        remote
            .posts()
            .into_iter()
            .find(|p| p.2["type"] == "Accept" && p.2["actor"] == helper)
    })
    .await;
    assert!(s.helper.seen.lock().unwrap().is_empty());
}
