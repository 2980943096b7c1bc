//! Blocks at the inbox: a blocked instance is refused 403 before anything of it is fetched, a
//! blocked actor's activities are acknowledged 202 and dropped, an agent's own block skips only
//! that agent (its mentions, and a Follow of it); none of what a block refuses is stored, and
//! each refusal is counted.

use serde_json::json;
use switchboard::transports::activitypub::mapping;

use super::remote::{Remote, note_create, post_signed};
use super::{count, setup};
use crate::helpers::{Engine, TestApp, on_both_engines, wait_for};

/// Messages stored for `agent`.
async fn stored(t: &TestApp, agent: &str) -> i64 {
    count(
        t.app().pipeline().db(),
        "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in' AND agent = $1",
        &[switchboard::store::Arg::Text(agent)],
    )
    .await
}

/// `author` on `remote` mentions both `echo` and `helper` of `t` in note `n`; the inbox's status.
async fn mention_both(t: &TestApp, remote: &Remote, author: &str, n: &str) -> u16 {
    let echo = format!("{}/agents/echo", t.base);
    let helper = format!("{}/agents/helper", t.base);
    let (e, h) = (
        format!("@echo@{}", t.domain()),
        format!("@helper@{}", t.domain()),
    );
    let create = note_create(
        remote,
        author,
        n,
        vec![echo.clone(), helper.clone()],
        vec![],
        &[(echo.as_str(), e.as_str()), (helper.as_str(), h.as_str())],
        "<p>hello both</p>",
    );
    let body = serde_json::to_vec(&create).unwrap();
    post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &body,
        &remote.key_id(author),
        0,
    )
    .await
    .status()
    .as_u16()
}

on_both_engines!(blocked_actors_and_instances_are_refused_at_the_inbox);
async fn blocked_actors_and_instances_are_refused_at_the_inbox(engine: Engine) {
    let s = setup(engine, |c| {
        c.moderation.blocks.push(switchboard::config::BlockConfig {
            sender: Some("http://127.0.0.1:*/users/mallory".into()),
            ..Default::default()
        });
    })
    .await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    remote.add_actor("mallory");
    let host = remote.base.trim_start_matches("http://").to_owned();

    // The blocked actor: 202, dropped, nothing stored.
    assert_eq!(mention_both(t, remote, "mallory", "m1").await, 202);
    // The agent's own block, added at run time on alice's handle: only `echo` skips her.
    let r = t
        .http
        .post(format!("{}/api/v1/blocks", t.base))
        .bearer_auth("test-token")
        .json(&json!({"kind": "sender", "pattern": format!("@alice@{host}"), "agent": "echo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(mention_both(t, remote, "alice", "a1").await, 202);
    wait_for(10, "helper's copy", || async {
        (stored(t, "helper").await == 1).then_some(())
    })
    .await;
    assert_eq!(stored(t, "echo").await, 0);
    assert!(
        s.helper
            .seen
            .lock()
            .unwrap()
            .iter()
            .all(|m| !m.sender.address.contains("mallory")),
        "the blocked actor reached an agent"
    );

    // Nor does she become echo's follower: her Follow of echo is dropped unanswered, while
    // helper accepts hers.
    for (n, agent) in [(1, "echo"), (2, "helper")] {
        let follow = json!({
            "@context": "https://www.w3.org/ns/activitystreams",
            "id": format!("{}/follows/{n}", remote.base),
            "type": "Follow",
            "actor": remote.actor_url("alice"),
            "object": format!("{}/agents/{agent}", t.base),
        });
        let status = post_signed(
            &t.http,
            &format!("{}/inbox", t.base),
            &serde_json::to_vec(&follow).unwrap(),
            &remote.key_id("alice"),
            0,
        )
        .await
        .status();
        assert_eq!(status, 202);
    }
    let accepted = wait_for(10, "helper's Accept", || async {
        remote
            .posts()
            .into_iter()
            .map(|p| p.2)
            .find(|b| b["type"] == "Accept")
    })
    .await;
    assert_eq!(accepted["actor"], format!("{}/agents/helper", t.base));
    let followers = |agent: &str| {
        let url = format!("{}/agents/{agent}/followers", t.base);
        async move {
            t.http
                .get(url)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()["totalItems"]
                .clone()
        }
    };
    assert_eq!(followers("helper").await, 1);
    assert_eq!(followers("echo").await, 0);
    assert!(
        remote.posts().iter().all(
            |p| !(p.2["type"] == "Accept" && p.2["actor"] == format!("{}/agents/echo", t.base))
        ),
        "echo accepted a blocked actor's Follow"
    );

    // The instance, blocked at run time: 403 before its actors are fetched again.
    let gets = remote.gets_of("/users/alice");
    let r = t
        .http
        .post(format!("{}/api/v1/blocks", t.base))
        .bearer_auth("test-token")
        .json(&json!({"kind": "domain", "pattern": "127.0.0.1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(mention_both(t, remote, "alice", "a2").await, 403);
    assert_eq!(remote.gets_of("/users/alice"), gets);
    assert_eq!(stored(t, "helper").await, 1);
    assert_eq!(stored(t, "echo").await, 0);
    let metrics = t.metrics().await;
    for (agent, n) in [("*", 2), ("echo", 2)] {
        let line = format!(
            "switchboard_refused_total{{agent=\"{agent}\",transport=\"activitypub\",reason=\"blocked\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}

on_both_engines!(a_follower_the_operator_blocks_is_delivered_nothing_more);
async fn a_follower_the_operator_blocks_is_delivered_nothing_more(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("bob");
    // alice follows echo from a server of her own, so what reaches her is told apart.
    let home = Remote::start().await;
    home.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let follow = json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{}/follows/1", home.base),
        "type": "Follow",
        "actor": home.actor_url("alice"),
        "object": echo,
    });
    let status = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &serde_json::to_vec(&follow).unwrap(),
        &home.key_id("alice"),
        0,
    )
    .await
    .status();
    assert_eq!(status, 202);
    let creates = |r: &Remote| r.posts().iter().filter(|p| p.2["type"] == "Create").count();
    // bob mentions echo in public: the reply goes to bob and to echo's followers.
    let mention = |n: &'static str| {
        let create = note_create(
            remote,
            "bob",
            n,
            vec![mapping::PUBLIC.into()],
            vec![echo.clone()],
            &[(echo.as_str(), format!("@echo@{}", t.domain()).as_str())],
            "<p>hello echo</p>",
        );
        let body = serde_json::to_vec(&create).unwrap();
        async move {
            post_signed(
                &t.http,
                &format!("{}/inbox", t.base),
                &body,
                &remote.key_id("bob"),
                0,
            )
            .await
            .status()
        }
    };
    assert_eq!(mention("n1").await, 202);
    wait_for(20, "the reply at alice's server", || async {
        (creates(&home) == 1).then_some(())
    })
    .await;

    // The operator blocks her for echo: the next reply reaches bob, not her.
    let r = t
        .http
        .post(format!("{}/api/v1/blocks", t.base))
        .bearer_auth("test-token")
        .json(&json!({"kind": "sender", "pattern": home.actor_url("alice"), "agent": "echo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(mention("n2").await, 202);
    wait_for(20, "the second reply at bob's server", || async {
        (creates(remote) == 2).then_some(())
    })
    .await;
    // Deliveries are fanned out together: had hers been planned, it was posted by now.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(creates(&home), 1, "a blocked follower was delivered to");
}
