//! `server.handle_domain`: agents are `@name@{handle domain}` while the server, its actors and
//! inboxes stay on the public URL's host. WebFinger answers both domains with the handle as
//! subject; a mention of the agent reads as its handle; NodeInfo still names the server host.

use serde_json::Value;
use switchboard::transports::activitypub::mapping;

use super::remote::{note_create, post_signed};
use super::setup;
use crate::helpers::{Engine, on_both_engines, wait_for};

const HANDLE_DOMAIN: &str = "example.com";

async fn get_json(http: &reqwest::Client, url: &str, accept: &str) -> (u16, Value) {
    let r = http.get(url).header("accept", accept).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

on_both_engines!(agents_answer_under_the_handle_domain);

async fn agents_answer_under_the_handle_domain(engine: Engine) {
    let s = setup(engine, |c| {
        c.server.handle_domain = Some("Example.COM".into());
    })
    .await;
    let (t, http, remote) = (&s.t, &s.t.http, &s.remote);
    let host = t.domain();
    assert_ne!(host, HANDLE_DOMAIN);
    let actor = format!("{}/agents/echo", t.base);

    // WebFinger: the handle domain and the server's own host both lead to the same actor, and
    // the subject is the handle either way (what Mastodon checks after looking up
    // `preferredUsername@{actor host}`).
    for resource in [
        format!("acct:echo@{HANDLE_DOMAIN}"),
        format!("acct:echo@{host}"),
        actor.clone(),
    ] {
        let url = format!("{}/.well-known/webfinger?resource={resource}", t.base);
        let (status, wf) = get_json(http, &url, "application/jrd+json").await;
        assert_eq!(status, 200, "{resource}");
        assert_eq!(wf["subject"], format!("acct:echo@{HANDLE_DOMAIN}"), "{wf}");
        assert_eq!(wf["links"][0]["rel"], "self");
        assert_eq!(
            wf["links"][0]["href"], actor,
            "the actor stays on the server"
        );
    }
    let url = format!(
        "{}/.well-known/webfinger?resource=acct:echo@elsewhere.example",
        t.base
    );
    assert_eq!(get_json(http, &url, "application/jrd+json").await.0, 404);

    // The actor: same id, name and inbox on the server host; its handle names the domain.
    let (status, doc) = get_json(http, &actor, "application/activity+json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["id"], actor);
    assert_eq!(doc["preferredUsername"], "echo");
    assert_eq!(doc["inbox"], format!("{actor}/inbox"));
    assert_eq!(doc["endpoints"]["sharedInbox"], format!("{}/inbox", t.base));
    assert_eq!(doc["webfinger"], format!("echo@{HANDLE_DOMAIN}"));
    let page = http
        .get(&actor)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(&format!("@echo@{HANDLE_DOMAIN}")), "{page}");

    // NodeInfo describes the server, not the handle domain.
    let (_, links) = get_json(
        http,
        &format!("{}/.well-known/nodeinfo", t.base),
        "application/json",
    )
    .await;
    assert_eq!(
        links["links"][0]["href"],
        format!("{}/nodeinfo/2.1", t.base)
    );
    let (_, ni) = get_json(
        http,
        &format!("{}/nodeinfo/2.1", t.base),
        "application/json",
    )
    .await;
    assert_eq!(ni["metadata"]["nodeName"], host);

    // A mention whose tag gives only the bare name reads as the agent's handle, and the message
    // is addressed to the handle.
    let alice = remote.add_actor("alice");
    let create = note_create(
        remote,
        "alice",
        "hd1",
        vec![mapping::PUBLIC.into()],
        vec![actor.clone()],
        &[(&actor, "@echo")],
        &format!(
            "<p><span class=\"h-card\"><a href=\"{actor}\" class=\"u-url mention\">@<span>echo</span></a></span> hello</p>"
        ),
    );
    let body = serde_json::to_vec(&create).unwrap();
    let r = post_signed(
        http,
        &format!("{}/inbox", t.base),
        &body,
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202, "{:?}", r.text().await);
    let msg = wait_for(10, "the agent call", || async {
        s.echo.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(msg.recipient, format!("@echo@{HANDLE_DOMAIN}"));
    let text = match &msg.parts[0] {
        switchboard::message::Part::Text(t) => t.content.clone(),
        p => panic!("{p:?}"),
    };
    assert_eq!(text, format!("@echo@{HANDLE_DOMAIN} hello"));

    // The reply is the server-host actor's.
    let (_, _, reply) = wait_for(15, "the reply delivery", || async {
        remote
            .posts()
            .into_iter()
            .find(|(_, _, b)| b["type"] == "Create")
    })
    .await;
    assert_eq!(reply["actor"], actor);
    assert_eq!(reply["object"]["attributedTo"], actor);
    assert!(
        mapping::iris(reply["object"].get("cc")).contains(&alice),
        "{reply}"
    );
}
