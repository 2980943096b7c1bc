//! What a verified activity does: the addressing rule deciding who wakes, mentions answered with
//! signed threaded replies, follows, undos, edits and deletes, threads rooted in fetched parents,
//! notes named by IRI, and attachments stored and sent back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard::store::Arg;
use switchboard::transports::activitypub::{mapping, proof, sig};

use super::remote::{Remote, note_create, now_s, post_signed, published_key, rsa_sign};
use super::{count, setup};
use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app, wait_for};

/// One addressing case: name, to, cc, mentions, wakes echo, wakes helper.
type Case<'a> = (
    &'a str,
    Vec<String>,
    Vec<String>,
    Vec<(&'a str, String)>,
    bool,
    bool,
);

on_both_engines!(mention_gets_a_signed_threaded_reply);

async fn mention_gets_a_signed_threaded_reply(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let domain = t.domain();
    let create = note_create(
        remote,
        "alice",
        "n1",
        vec![mapping::PUBLIC.into()],
        vec![echo.clone(), format!("{alice}/followers")],
        &[(&echo, &format!("@echo@{domain}"))],
        &format!(
            "<p><span class=\"h-card\"><a href=\"{echo}\" class=\"u-url mention\">@<span>echo</span></a></span> what&#39;s the <b>weather</b>?</p>"
        ),
    );
    let body = serde_json::to_vec(&create).unwrap();
    let r = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &body,
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202, "{:?}", r.text().await);

    // The agent saw a verified, mapped message.
    let msg = wait_for(10, "the agent call", || async {
        s.echo.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(
        msg.sender.address,
        format!("@alice@{}", mapping::host_of(&alice).unwrap())
    );
    assert!(msg.sender.verified);
    assert_eq!(msg.sender.auth_method.as_str(), "ap-http-signature");
    assert_eq!(
        msg.sender.key_id.as_deref(),
        Some(remote.key_id("alice").as_str())
    );
    let ev = &msg.sender.identities.as_ref().unwrap()[0];
    assert_eq!(ev.subject, alice);
    assert_eq!(ev.method.as_str(), "ap-http-signature");
    assert_eq!(ev.assurance.as_str(), "domain");
    let profile = msg.sender.profile.as_ref().unwrap();
    assert_eq!(profile.display_name.as_deref(), Some("alice remote"));
    assert!(
        profile
            .avatar
            .as_ref()
            .unwrap()
            .url
            .ends_with("/avatars/alice.png")
    );
    let text = match &msg.parts[0] {
        switchboard::message::Part::Text(t) => t.content.clone(),
        p => panic!("{p:?}"),
    };
    assert_eq!(text, format!("@echo@{domain} what's the weather?"));
    assert_eq!(msg.raw["id"], create["id"]);
    assert_eq!(msg.recipient, format!("@echo@{domain}"));
    assert_eq!(
        serde_json::to_value(&msg.recipient_capabilities.mention_relay).unwrap()["kind"],
        "addressing"
    );
    assert!(
        s.helper.seen.lock().unwrap().is_empty(),
        "helper was not mentioned"
    );

    // The reply is delivered to alice's shared inbox, signed by echo's key.
    let (path, headers, reply) = wait_for(15, "the reply delivery", || async {
        remote
            .posts()
            .into_iter()
            .find(|(_, _, b)| b["type"] == "Create")
    })
    .await;
    assert_eq!(path, "/inbox");
    assert_eq!(reply["actor"], echo);
    let note = &reply["object"];
    assert_eq!(note["inReplyTo"], create["object"]["id"]);
    assert_eq!(note["attributedTo"], echo);
    assert_eq!(note["to"], json!([mapping::PUBLIC]));
    assert!(note["cc"].as_array().unwrap().contains(&json!(alice)));
    assert_eq!(note["tag"][0]["type"], "Mention");
    assert_eq!(note["tag"][0]["href"], alice);
    let content = note["content"].as_str().unwrap();
    assert!(content.contains("class=\"u-url mention\""), "{content}");
    assert!(content.contains("weather"), "{content}");
    // Signature: digest of the bytes sent, and the signature under the key echo publishes.
    let raw = remote.raw_body_of(&reply["id"]);
    let lookup = |n: &str| headers.get(n).cloned();
    let target = format!("{}{path}", remote.base);
    let view = sig::RequestView {
        method: "POST",
        path_and_query: &path,
        target_uri: &target,
        header: &lookup,
    };
    let parsed = sig::parse_any(&view, Some(&raw), now_s()).unwrap();
    assert_eq!(parsed.key_id, format!("{echo}#main-key"));
    assert!(parsed.verify(&published_key(&t.http, &parsed.key_id).await));
    // FEP-8b32: the Create carries an eddsa-jcs-2022 proof under the Ed25519 key echo
    // publishes as its assertionMethod, so whoever is forwarded the reply can verify it.
    let info = proof::prepare(&reply)
        .unwrap()
        .expect("a proof on the Create");
    assert_eq!(info.verification_method, format!("{echo}#ed25519-key"));
    let actor: Value = t
        .http
        .get(&echo)
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let multikey = actor["assertionMethod"][0]["publicKeyMultibase"]
        .as_str()
        .unwrap();
    let key = proof::parse_ed25519_multikey(multikey).unwrap();
    assert!(info.verify(&key), "the proof verifies");
    let mut tampered = reply.clone();
    tampered["object"]["content"] = json!("something else");
    let forged = proof::prepare(&tampered).unwrap().expect("a proof");
    assert!(!forged.verify(&key), "a changed reply does not verify");

    // The note is served at its id and listed in the outbox.
    let id = note["id"].as_str().unwrap();
    let served: Value = t
        .http
        .get(id)
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served["id"], id);
    assert_eq!(served["inReplyTo"], create["object"]["id"]);
    let outbox: Value = t
        .http
        .get(format!("{echo}/outbox"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(outbox["totalItems"], 1);
    assert_eq!(outbox["orderedItems"][0]["object"]["id"], id);

    // A reply to our reply continues the same thread, with in_reply_to set.
    let mut follow_up = note_create(
        remote,
        "alice",
        "n2",
        vec![mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{domain}"))],
        "<p>thanks</p>",
    );
    follow_up["object"]["inReplyTo"] = json!(id);
    let r = post_signed(
        &t.http,
        &format!("{echo}/inbox"),
        &serde_json::to_vec(&follow_up).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    let second = wait_for(10, "the second call", || async {
        s.echo.seen.lock().unwrap().get(1).cloned()
    })
    .await;
    assert_eq!(second.thread_id, msg.thread_id);
    assert!(second.in_reply_to.is_some());
    assert_eq!(second.history.as_ref().map(Vec::len), Some(2));
}

on_both_engines!(addressing_rule_decides_who_wakes);

async fn addressing_rule_decides_who_wakes(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let helper = format!("{}/agents/helper", t.base);
    let d = t.domain();
    let m_echo = (echo.as_str(), format!("@echo@{d}"));
    let m_helper = (helper.as_str(), format!("@helper@{d}"));
    let public = mapping::PUBLIC.to_owned();
    let followers = format!("{alice}/followers");
    // (name, to, cc, mentions, wakes echo, wakes helper)
    let cases: Vec<Case<'_>> = vec![
        (
            "public",
            vec![public.clone()],
            vec![followers.clone(), echo.clone()],
            vec![m_echo.clone()],
            true,
            false,
        ),
        (
            "unlisted",
            vec![followers.clone()],
            vec![public.clone(), echo.clone()],
            vec![m_echo.clone()],
            true,
            false,
        ),
        (
            "followers",
            vec![followers.clone()],
            vec![echo.clone()],
            vec![m_echo.clone()],
            true,
            false,
        ),
        (
            "direct",
            vec![echo.clone()],
            vec![],
            vec![m_echo.clone()],
            true,
            false,
        ),
        (
            "mention-not-addressed",
            vec![public.clone()],
            vec![followers.clone()],
            vec![m_echo.clone()],
            false,
            false,
        ),
        (
            "addressed-not-mentioned",
            vec![echo.clone()],
            vec![],
            vec![],
            false,
            false,
        ),
        (
            "both-agents",
            vec![public.clone()],
            vec![echo.clone(), helper.clone()],
            vec![m_echo.clone(), m_helper.clone()],
            true,
            true,
        ),
    ];
    let mut want_echo = 0;
    let mut want_helper = 0;
    for (i, (name, to, cc, mentions, e, h)) in cases.into_iter().enumerate() {
        let mentions: Vec<(&str, &str)> = mentions.iter().map(|(a, b)| (*a, b.as_str())).collect();
        let c = note_create(
            remote,
            "alice",
            &format!("a{i}"),
            to,
            cc,
            &mentions,
            "<p>hi</p>",
        );
        let r = post_signed(
            &t.http,
            &format!("{}/inbox", t.base),
            &serde_json::to_vec(&c).unwrap(),
            &remote.key_id("alice"),
            0,
        )
        .await;
        assert_eq!(r.status(), 202, "{name}");
        want_echo += i32::from(e);
        want_helper += i32::from(h);
        let db = t.open_db().await;
        let (we, wh) = (want_echo, want_helper);
        wait_for(10, name, || async {
            let e = count(
                &db,
                "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in' AND agent = 'echo'",
                &[],
            )
            .await;
            let h = count(
                &db,
                "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in' AND agent = 'helper'",
                &[],
            )
            .await;
            (e == i64::from(we) && h == i64::from(wh)).then_some(())
        })
        .await;
    }
    // The direct note is answered directly: only alice addressed, no Public, no followers.
    let direct = wait_for(15, "the direct reply", || async {
        remote.posts().into_iter().map(|p| p.2).find(|b| {
            b["type"] == "Create"
                && b["object"]["inReplyTo"]
                    .as_str()
                    .is_some_and(|r| r.ends_with("/notes/a3"))
        })
    })
    .await;
    assert_eq!(direct["object"]["to"], json!([alice]));
    assert_eq!(direct["object"]["cc"], json!([]));
    // The direct note is served only to a GET signed by someone it addresses.
    let id = direct["object"]["id"].as_str().unwrap();
    let get = |key: Option<String>| {
        let http = t.http.clone();
        let id = id.to_owned();
        async move {
            let mut r = http.get(&id).header("accept", "application/activity+json");
            if let Some(key) = key {
                let u = url::Url::parse(&id).unwrap();
                for (k, v) in
                    sig::sign_cavage::<()>("GET", &u, None, &key, now_s(), |m| Ok(rsa_sign(m)))
                        .unwrap()
                {
                    r = r.header(k, v);
                }
            }
            r.send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(get(None).await, 404, "unsigned");
    remote.add_actor("mallory");
    assert_eq!(
        get(Some(remote.key_id("mallory"))).await,
        404,
        "not addressed"
    );
    assert_eq!(
        get(Some(remote.key_id("alice"))).await,
        200,
        "the addressee"
    );
}

on_both_engines!(follow_undo_delete_update);

async fn follow_undo_delete_update(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let key = remote.key_id("alice");
    let follow = json!({"@context": "https://www.w3.org/ns/activitystreams", "id": format!("{}/follows/1", remote.base), "type": "Follow", "actor": alice, "object": echo});
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&follow).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    let accept = wait_for(10, "the Accept", || async {
        remote
            .posts()
            .into_iter()
            .map(|p| p.2)
            .find(|b| b["type"] == "Accept")
    })
    .await;
    assert_eq!(accept["actor"], echo);
    assert_eq!(accept["object"]["id"], follow["id"]);
    let followers = |t: &TestApp| {
        let url = format!("{echo}/followers");
        let http = t.http.clone();
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let f = followers(t).await;
    assert_eq!(f["totalItems"], 1);
    assert_eq!(f["orderedItems"][0], alice);

    let undo = json!({"id": format!("{}/undo/1", remote.base), "type": "Undo", "actor": alice, "object": follow});
    assert_eq!(
        post_signed(
            &t.http,
            &inbox,
            &serde_json::to_vec(&undo).unwrap(),
            &key,
            0
        )
        .await
        .status(),
        202
    );
    assert_eq!(followers(t).await["totalItems"], 0);

    // A note that woke the agent, then its edit and its deletion.
    let d = t.domain();
    let c = note_create(
        remote,
        "alice",
        "u1",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>v1</p>",
    );
    assert_eq!(
        post_signed(&t.http, &inbox, &serde_json::to_vec(&c).unwrap(), &key, 0)
            .await
            .status(),
        202
    );
    wait_for(10, "the first call", || async {
        (!s.echo.seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let mut edited = c["object"].clone();
    edited["content"] = json!("<p>v2</p>");
    let update = json!({"id": format!("{}/updates/1", remote.base), "type": "Update", "actor": alice, "object": edited});
    assert_eq!(
        post_signed(
            &t.http,
            &inbox,
            &serde_json::to_vec(&update).unwrap(),
            &key,
            0
        )
        .await
        .status(),
        202
    );
    let db = t.open_db().await;
    let note_id = c["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_objects WHERE id = $1 AND body LIKE '%v2%'",
            &[Arg::Text(&note_id)]
        )
        .await,
        1
    );
    let delete = json!({"id": format!("{}/deletes/1", remote.base), "type": "Delete", "actor": alice, "object": {"id": note_id, "type": "Tombstone"}});
    assert_eq!(
        post_signed(
            &t.http,
            &inbox,
            &serde_json::to_vec(&delete).unwrap(),
            &key,
            0
        )
        .await
        .status(),
        202
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_objects WHERE id = $1 AND deleted = 1",
            &[Arg::Text(&note_id)]
        )
        .await,
        1
    );
    // Like and Announce are accepted and ignored; the edit was never dispatched again.
    for (i, kind) in ["Like", "Announce", "Move"].iter().enumerate() {
        let a = json!({"id": format!("{}/x/{i}", remote.base), "type": kind, "actor": alice, "object": note_id});
        assert_eq!(
            post_signed(&t.http, &inbox, &serde_json::to_vec(&a).unwrap(), &key, 0)
                .await
                .status(),
            202
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.echo.seen.lock().unwrap().len(), 1);
}

/// Answers with its text and every file it was given.
#[derive(Debug, Default)]
struct FileEcho;

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for FileEcho {
    async fn respond(
        &self,
        msg: &switchboard::message::NormalizedMessage,
    ) -> Result<Option<switchboard::message::NormalizedResponse>, switchboard::error::OutboundError>
    {
        let mut r =
            switchboard::agents::AgentBackend::respond(&switchboard::agents::EchoAgent, msg)
                .await?
                .unwrap();
        r.parts.extend(
            msg.parts
                .iter()
                .filter(|p| matches!(p, switchboard::message::Part::File(_)))
                .cloned(),
        );
        Ok(Some(r))
    }
}

on_both_engines!(attachments_are_stored_and_sent_back);

async fn attachments_are_stored_and_sent_back(engine: Engine) {
    let remote = Remote::start().await;
    let t = spawn_app(engine, |_, o| {
        o.agents.push(("echo".into(), Arc::new(FileEcho)));
    })
    .await;
    remote.add_actor("alice");
    let png = b"\x89PNG\r\n\x1a\nnot really a picture".to_vec();
    remote
        .media
        .lock()
        .unwrap()
        .insert("/media/pic.png".into(), ("image/png".into(), png.clone()));
    let echo = format!("{}/agents/echo", t.base);
    let d = t.domain();
    let mut c = note_create(
        &remote,
        "alice",
        "att1",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>look</p>",
    );
    c["object"]["attachment"] = json!([
        {"type": "Document", "mediaType": "image/png", "url": format!("{}/media/pic.png", remote.base), "name": "a picture"},
        {"type": "Document", "mediaType": "image/png", "url": format!("{}/media/missing.png", remote.base)},
        {"type": "Link", "href": "https://example.com/article", "name": "an article"},
    ]);
    let r = post_signed(
        &t.http,
        &format!("{echo}/inbox"),
        &serde_json::to_vec(&c).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    let reply = wait_for(15, "the reply", || async {
        remote
            .posts()
            .into_iter()
            .map(|p| p.2)
            .find(|b| b["type"] == "Create")
    })
    .await;
    let att = &reply["object"]["attachment"];
    assert_eq!(att.as_array().unwrap().len(), 1, "{att}");
    assert_eq!(att[0]["type"], "Document");
    assert_eq!(att[0]["mediaType"], "image/png");
    assert_eq!(att[0]["name"], "a picture");
    let url = att[0]["url"].as_str().unwrap();
    assert!(url.contains("/media/") && url.contains("sig="), "{url}");
    let fetched = t.http.get(url).send().await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.bytes().await.unwrap().to_vec(), png);
    // What the agent was given: the text, the stored file, and links for the rest.
    let db = t.open_db().await;
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct B {
        body: String,
    }
    let row: B = db
        .fetch_optional("SELECT body FROM messages WHERE direction = 'in'", &[])
        .await
        .unwrap()
        .unwrap();
    let msg: Value = serde_json::from_str(&row.body).unwrap();
    let parts = msg["parts"].as_array().unwrap();
    assert_eq!(parts[0]["kind"], "text");
    assert_eq!(parts[1]["kind"], "file");
    assert_eq!(parts[1]["bytes_ref"]["kind"], "content_addressed");
    assert_eq!(parts[1]["size"], png.len());
    assert_eq!(parts[2]["kind"], "link");
    assert!(
        parts[2]["url"]
            .as_str()
            .unwrap()
            .ends_with("/media/missing.png")
    );
    assert_eq!(parts[3]["kind"], "link");
    assert_eq!(parts[3]["url"], "https://example.com/article");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_root_comes_from_a_fetched_parent() {
    let s = setup(Engine::Sqlite, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let d = t.domain();
    // The parent is unknown here; it names its conversation.
    remote.set(
        "/notes/parent",
        200,
        &json!({"id": format!("{}/notes/parent", remote.base), "type": "Note", "attributedTo": alice,
                "context": format!("{}/contexts/42", remote.base), "content": "<p>root</p>"}),
    );
    let mut c = note_create(
        remote,
        "alice",
        "child",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi</p>",
    );
    c["object"]["inReplyTo"] = json!(format!("{}/notes/parent", remote.base));
    let r = post_signed(
        &t.http,
        &format!("{echo}/inbox"),
        &serde_json::to_vec(&c).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(10, "the call", || async {
        (!s.echo.seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let db = t.open_db().await;
    let key = format!("{}/contexts/42", remote.base);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM threads WHERE transport = 'activitypub' AND thread_key = $1",
            &[Arg::Text(&key)]
        )
        .await,
        1
    );
    assert_eq!(remote.gets_of("/notes/parent"), 1);
}

/// A `Create` that names its note only by IRI: the note is fetched from the actor's host and
/// must be the actor's; a gone note is acknowledged and dropped, a foreign host refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_naming_its_note_by_iri_fetches_it() {
    let s = setup(Engine::Sqlite, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    remote.add_actor("mallory");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let d = t.domain();
    // A Create of note `n` by `author` that names the note by `iri`; the remote serves
    // `served` (status, note as it would be embedded → served document) at the note's path.
    let send = |n: &'static str,
                author: &'static str,
                iri: Option<&'static str>,
                served: (u16, &dyn Fn(Value) -> Value)| {
        let mut c = note_create(
            remote,
            author,
            n,
            vec![echo.clone()],
            vec![],
            &[(echo.as_str(), &format!("@echo@{d}"))],
            "<p>fetched text</p>",
        );
        let path = format!("/notes/{n}");
        remote.set(&path, served.0, &served.1(c["object"].take()));
        c["object"] = json!(iri.map_or_else(|| format!("{}{path}", remote.base), str::to_owned));
        let body = serde_json::to_vec(&c).unwrap();
        let (http, inbox, key) = (&t.http, &inbox, remote.key_id(author));
        async move {
            post_signed(http, inbox, &body, &key, 0)
                .await
                .status()
                .as_u16()
        }
    };
    let as_is = |note: Value| note;

    assert_eq!(send("by-iri", "alice", None, (200, &as_is)).await, 202);
    let seen = wait_for(10, "the fetched note at the agent", || async {
        let v = s.echo.seen.lock().unwrap().clone();
        (!v.is_empty()).then_some(v)
    })
    .await;
    assert_eq!(seen.len(), 1);
    let host = url::Url::parse(&alice).unwrap();
    let host = format!("{}:{}", host.host_str().unwrap(), host.port().unwrap());
    assert_eq!(seen[0].sender.address, format!("@alice@{host}"));
    let text = serde_json::to_value(&seen[0].parts).unwrap()[0]["content"].clone();
    assert!(text.as_str().unwrap().contains("fetched text"), "{text}");
    assert_eq!(remote.gets_of("/notes/by-iri"), 1);
    // `raw` holds the fetched note in place of its IRI: replies read it from there.
    assert_eq!(
        seen[0].raw["object"]["id"],
        format!("{}/notes/by-iri", remote.base)
    );
    assert_eq!(seen[0].raw["object"]["type"], "Note");

    // A note that is gone: acknowledged, nothing dispatched.
    let gone = |_| json!({});
    assert_eq!(send("gone", "alice", None, (410, &gone)).await, 202);
    // A note attributed to someone else than the actor: refused.
    let alices = |mut note: Value| {
        note["attributedTo"] = json!(alice);
        note
    };
    assert_eq!(
        send("not-mallorys", "mallory", None, (200, &alices)).await,
        403
    );
    // An IRI on another host is never fetched.
    let elsewhere = Some("https://elsewhere.example/notes/1");
    assert_eq!(
        send("elsewhere", "alice", elsewhere, (200, &as_is)).await,
        403
    );
    assert_eq!(remote.gets_of("/notes/elsewhere"), 0);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        s.echo.seen.lock().unwrap().len(),
        1,
        "only the first was dispatched"
    );
}

/// `who` on the remote server mentions `echo` in a public note `n`, signed; the inbox's answer.
async fn mention_echo(s: &super::Setup, who: &str, n: &str) -> reqwest::Response {
    let (t, remote) = (&s.t, &s.remote);
    let echo = format!("{}/agents/echo", t.base);
    let create = note_create(
        remote,
        who,
        n,
        vec![mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        "<p>@echo hello</p>",
    );
    let body = serde_json::to_vec(&create).unwrap();
    post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &body,
        &remote.key_id(who),
        0,
    )
    .await
}

on_both_engines!(access_rules_drop_notes_from_actors_no_rule_allows);

/// `[agents.access]` over ActivityPub: a mention from an actor the rules allow is answered; one
/// from an actor they do not is accepted (202, so the refusal tells the sender nothing),
/// never reaches the agent and is counted.
async fn access_rules_drop_notes_from_actors_no_rule_allows(engine: Engine) {
    use switchboard::config::{AccessConfig, AccessDefault, AccessRule};
    let s = setup(engine, |c| {
        let echo = c.agents.iter_mut().find(|a| a.name == "echo").unwrap();
        echo.access = Some(AccessConfig {
            refusal_reply: Default::default(),
            limits: Default::default(),
            default: AccessDefault::Deny,
            allow: vec![AccessRule {
                method: Some("ap-http-signature".into()),
                subject: Some("http*/users/alice".into()),
                ..AccessRule::default()
            }],
            deny: vec![],
        });
    })
    .await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    remote.add_actor("bob");
    for (who, n) in [("bob", "b1"), ("alice", "a1")] {
        let r = mention_echo(&s, who, n).await;
        assert_eq!(r.status(), 202, "{who}: {:?}", r.text().await);
    }
    let msg = wait_for(10, "alice's note at the agent", || async {
        s.echo.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(
        msg.sender.identities.unwrap()[0].subject,
        remote.actor_url("alice")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.echo.seen.lock().unwrap().len(),
        1,
        "bob's note never reached the agent"
    );
    let metrics = t.metrics().await;
    let line = "switchboard_refused_total{agent=\"echo\",transport=\"activitypub\",reason=\"not_allowed\"} 1";
    assert!(metrics.contains(line), "{line} in {metrics}");
}

on_both_engines!(a_refused_actor_gets_a_direct_reply_when_the_agent_says_so);

/// `refusal_reply = "direct"`: the refused actor gets one short direct message (and the agent
/// nothing); the same activity delivered again sends nothing more.
async fn a_refused_actor_gets_a_direct_reply_when_the_agent_says_so(engine: Engine) {
    use switchboard::config::{AccessConfig, AccessDefault, RefusalReply};
    let s = setup(engine, |c| {
        let echo = c.agents.iter_mut().find(|a| a.name == "echo").unwrap();
        echo.access = Some(AccessConfig {
            default: AccessDefault::Deny,
            refusal_reply: RefusalReply::Direct,
            ..AccessConfig::default()
        });
    })
    .await;
    let remote = &s.remote;
    remote.add_actor("bob");
    for _ in 0..2 {
        let r = mention_echo(&s, "bob", "b1").await;
        assert_eq!(r.status(), 202);
    }
    let replies = |posts: Vec<super::remote::Post>| -> Vec<Value> {
        posts
            .into_iter()
            .filter(|(_, _, b)| b["type"] == "Create")
            .map(|(_, _, b)| b["object"].clone())
            .collect()
    };
    let note = wait_for(30, "the refusal at bob's inbox", || async {
        replies(remote.posts()).first().cloned()
    })
    .await;
    assert!(
        note["content"]
            .as_str()
            .unwrap()
            .contains("does not accept messages from you"),
        "{note}"
    );
    assert_eq!(
        mapping::iris(note.get("to")),
        vec![remote.actor_url("bob")],
        "{note}"
    );
    assert!(mapping::iris(note.get("cc")).is_empty(), "{note}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(replies(remote.posts()).len(), 1, "one refusal per activity");
    assert!(s.echo.seen.lock().unwrap().is_empty());
}

on_both_engines!(a_host_over_its_rate_gets_429_with_retry_after);

/// ActivityPub peers retry on 429 and honour `Retry-After`: a remote host over its rate gets
/// both.
async fn a_host_over_its_rate_gets_429_with_retry_after(engine: Engine) {
    let s = setup(engine, |c| {
        c.limits.per_host = Some(switchboard::config::Rate {
            requests: 1,
            per_seconds: 600,
        });
    })
    .await;
    let remote = &s.remote;
    remote.add_actor("alice");
    let mut answers = Vec::new();
    for n in ["r1", "r2"] {
        let r = mention_echo(&s, "alice", n).await;
        let retry = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        answers.push((r.status().as_u16(), retry));
    }
    assert_eq!(answers[0].0, 202);
    assert_eq!(answers[1].0, 429, "{answers:?}");
    let secs: u64 = answers[1].1.as_deref().unwrap().parse().unwrap();
    assert!((1..=600).contains(&secs), "{secs}");
}

/// A note behind a content warning: the agent gets the warning apart from the text (and the
/// text as written), and its reply carries the same warning, marked sensitive, as Mastodon's
/// clients do.
#[tokio::test]
async fn a_content_warning_stays_apart_and_carries_into_the_reply() {
    let mut s = setup(Engine::Sqlite, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let mut create = note_create(
        remote,
        "alice",
        "cw1",
        vec![mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        "<p>@echo who did it?</p>",
    );
    create["object"]["summary"] = json!("spoilers: the finale");
    create["object"]["sensitive"] = json!(true);
    let body = serde_json::to_vec(&create).unwrap();
    let r = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &body,
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    let msg = wait_for(10, "the agent call", || async {
        s.echo.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(msg.content_warning.as_deref(), Some("spoilers: the finale"));
    assert!(msg.sensitive);
    let text = match &msg.parts[0] {
        switchboard::message::Part::Text(t) => t.content.clone(),
        p => panic!("{p:?}"),
    };
    assert_eq!(text, "@echo who did it?", "the warning is not in the text");
    let (_, _, reply) = wait_for(15, "the reply delivery", || async {
        remote
            .posts()
            .into_iter()
            .find(|(_, _, b)| b["type"] == "Create")
    })
    .await;
    assert_eq!(reply["object"]["summary"], "spoilers: the finale");
    assert_eq!(reply["object"]["sensitive"], true);
    s.t.stop().await;
}
