//! Thread contexts (FEP-7888): a reply in a thread whose notes carried no `context` gets one
//! switchboard mints, which dereferences to the collection of the thread's public notes (never a
//! direct or followers-only one), is reused by every later reply in the thread, and is mapped
//! back to the thread when a server sends it back; a context that came in is echoed unchanged.

use serde_json::{Value, json};
use switchboard::store::Arg;
use switchboard::transports::activitypub::mapping;

use super::remote::{Remote, note_create, post_signed};
use super::{count, get_ap, setup};
use crate::helpers::{Engine, TestApp, on_both_engines, wait_for};

/// POSTs alice's note `n` to echo's inbox, public unless `to`/`cc` say otherwise, answering
/// `in_reply_to` and carrying `extra` fields on the note; returns the note's id.
async fn send(
    t: &TestApp,
    remote: &Remote,
    n: &str,
    audience: (Vec<String>, Vec<String>),
    in_reply_to: Option<&str>,
    extra: &[(&str, Value)],
) -> String {
    let echo = format!("{}/agents/echo", t.base);
    let mut c = note_create(
        remote,
        "alice",
        n,
        audience.0,
        audience.1,
        &[(&echo, &format!("@echo@{}", t.domain()))],
        &format!("<p>note {n}</p>"),
    );
    if let Some(r) = in_reply_to {
        c["object"]["inReplyTo"] = json!(r);
    }
    for (k, v) in extra {
        c["object"][*k] = v.clone();
    }
    let r = post_signed(
        &t.http,
        &format!("{echo}/inbox"),
        &serde_json::to_vec(&c).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202, "{n}: {:?}", r.text().await);
    c["object"]["id"].as_str().unwrap().to_owned()
}

/// The note of the reply delivered to the remote for `note`.
async fn reply_to(remote: &Remote, note: &str) -> Value {
    wait_for(15, &format!("the reply to {note}"), || async {
        remote
            .posts()
            .into_iter()
            .map(|p| p.2)
            .find(|b| b["type"] == "Create" && b["object"]["inReplyTo"] == note)
            .map(|b| b["object"].clone())
    })
    .await
}

on_both_engines!(replies_carry_a_minted_context_that_lists_the_public_thread);

async fn replies_carry_a_minted_context_that_lists_the_public_thread(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let public = || {
        (
            vec![mapping::PUBLIC.to_owned()],
            vec![format!("{alice}/followers")],
        )
    };
    let with_echo = |(to, mut cc): (Vec<String>, Vec<String>)| {
        cc.push(echo.clone());
        (to, cc)
    };

    // A note without context or conversation (as Fedify, Misskey and GoToSocial send them):
    // the reply carries a context minted under the agent, and the same conversation.
    let root = send(t, remote, "root", with_echo(public()), None, &[]).await;
    let r1 = reply_to(remote, &root).await;
    let context = r1["context"].as_str().expect("a context").to_owned();
    assert!(
        context.starts_with(&format!("{echo}/contexts/")),
        "{context}"
    );
    assert_eq!(r1["conversation"], context.as_str());
    // It is served at its id with the note it is threaded to (inReplyTo).
    let (status, _, served) = get_ap(t, r1["id"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(served["context"], context.as_str());

    // It dereferences to the thread: an OrderedCollection attributed to the agent.
    let (status, ct, c) = get_ap(t, &context).await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(ct, "application/activity+json");
    assert_eq!(c["id"], context.as_str());
    assert_eq!(c["type"], "OrderedCollection");
    assert_eq!(c["attributedTo"], echo);
    assert_eq!(c["orderedItems"], json!([root, r1["id"]]));
    assert_eq!(c["totalItems"], 2);

    // A follow-up answering our reply, itself without a context: same context.
    let f1 = send(t, remote, "f1", with_echo(public()), r1["id"].as_str(), &[]).await;
    let r2 = reply_to(remote, &f1).await;
    assert_eq!(r2["context"], context.as_str());
    assert_eq!(r2["conversation"], context.as_str());
    // A direct follow-up and a followers-only one answering the root: the same context on the
    // replies, but neither they nor the notes they answer are listed in it.
    let f2 = send(
        t,
        remote,
        "f2",
        (vec![echo.clone()], vec![]),
        Some(&root),
        &[],
    )
    .await;
    let r3 = reply_to(remote, &f2).await;
    assert_eq!(r3["to"], json!([alice]), "a direct reply stays direct");
    assert_eq!(r3["context"], context.as_str());
    let f3 = send(
        t,
        remote,
        "f3",
        (vec![format!("{alice}/followers")], vec![echo.clone()]),
        Some(&root),
        &[],
    )
    .await;
    let r4 = reply_to(remote, &f3).await;
    assert_eq!(r4["context"], context.as_str());
    let (_, _, c) = get_ap(t, &context).await;
    assert_eq!(
        c["orderedItems"],
        json!([root, r1["id"], f1, r2["id"]]),
        "{c}"
    );
    assert_eq!(c["totalItems"], 4);
    let listed = c.to_string();
    for hidden in [
        &f2,
        r3["id"].as_str().unwrap(),
        &f3,
        r4["id"].as_str().unwrap(),
    ] {
        assert!(!listed.contains(hidden), "{hidden} leaked into {listed}");
    }
    // A deleted note leaves the collection.
    let db = t.open_db().await;
    db.execute(
        "UPDATE ap_objects SET deleted = 1 WHERE id = $1",
        &[Arg::Text(&f1)],
    )
    .await
    .unwrap();
    let (_, _, c) = get_ap(t, &context).await;
    assert_eq!(c["orderedItems"], json!([root, r1["id"], r2["id"]]));

    // A server that adopts the context of the note it answers sends ours back: the note stays
    // in the thread (same switchboard thread, listed in the collection), and so does the reply.
    let f4 = send(
        t,
        remote,
        "f4",
        with_echo(public()),
        r2["id"].as_str(),
        &[("context", json!(context))],
    )
    .await;
    let r5 = reply_to(remote, &f4).await;
    assert_eq!(r5["context"], context.as_str());
    let seen = s.echo.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5);
    assert!(
        seen.iter().all(|m| m.thread_id == seen[0].thread_id),
        "one thread"
    );
    let (_, _, c) = get_ap(t, &context).await;
    let items = c["orderedItems"].as_array().unwrap();
    assert!(
        items.contains(&json!(f4)) && items.contains(&r5["id"]),
        "{c}"
    );
    // One context was minted for the whole thread.
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_contexts", &[]).await,
        1
    );
}

on_both_engines!(an_inbound_context_is_echoed_and_unknown_contexts_are_404);

async fn an_inbound_context_is_echoed_and_unknown_contexts_are_404(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let audience = || (vec![mapping::PUBLIC.to_owned()], vec![echo.clone()]);

    // Mastodon's pair: each echoed as received, nothing minted.
    let theirs = format!("{}/contexts/99", remote.base);
    let tag = "tag:remote.example,2026-11-25:objectId=99:objectType=Conversation";
    let m1 = send(
        t,
        remote,
        "m1",
        audience(),
        None,
        &[("context", json!(theirs)), ("conversation", json!(tag))],
    )
    .await;
    let r = reply_to(remote, &m1).await;
    assert_eq!(r["context"], theirs.as_str());
    assert_eq!(r["conversation"], tag);
    // A context alone is echoed, and the conversation is that context.
    let m2 = send(
        t,
        remote,
        "m2",
        audience(),
        None,
        &[("context", json!(format!("{}/contexts/100", remote.base)))],
    )
    .await;
    let r = reply_to(remote, &m2).await;
    assert_eq!(r["context"], format!("{}/contexts/100", remote.base));
    assert_eq!(r["conversation"], format!("{}/contexts/100", remote.base));
    let db = t.open_db().await;
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_contexts", &[]).await,
        0
    );
    // A `tag:` conversation alone is echoed as the conversation; the context is minted (a tag
    // URI does not dereference).
    let m3 = send(
        t,
        remote,
        "m3",
        audience(),
        None,
        &[("conversation", json!("tag:remote.example,2026:c3"))],
    )
    .await;
    let r = reply_to(remote, &m3).await;
    assert_eq!(r["conversation"], "tag:remote.example,2026:c3");
    let minted = r["context"].as_str().unwrap().to_owned();
    assert!(minted.starts_with(&format!("{echo}/contexts/")), "{minted}");
    let (status, _, c) = get_ap(t, &minted).await;
    assert_eq!(status, 200);
    assert_eq!(c["orderedItems"], json!([m3, r["id"]]));

    // Unknown contexts, and a known one under another agent or an unknown agent, are 404.
    let id = minted.rsplit('/').next().unwrap();
    for url in [
        format!("{echo}/contexts/0000000000000000"),
        format!("{}/agents/helper/contexts/{id}", t.base),
        format!("{}/agents/nobody/contexts/{id}", t.base),
    ] {
        assert_eq!(get_ap(t, &url).await.0, 404, "{url}");
    }
}
