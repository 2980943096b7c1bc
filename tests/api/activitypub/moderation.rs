//! Moderation activities from remote servers: a `Block` of an agent (its notes held, nothing
//! addressed or delivered to the blocker) until its `Undo`; a `Flag` (report of abuse) stored,
//! listed by the read API and mailed to `moderation.reports_to` through a real SMTP listener;
//! replays, unsigned and wrongly signed ones refused or harmless.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use switchboard::message::{NormalizedMessage, NormalizedResponse, Part};
use switchboard::store::Arg;
use switchboard::transports::activitypub::mapping;

use super::count;
use super::remote::{Remote, note_create, post_signed};
use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app, wait_for};

/// Records what it is given and answers "noted", mentioning `mention` (an actor IRI).
#[derive(Debug, Default)]
struct Mentioner {
    seen: Mutex<Vec<NormalizedMessage>>,
    mention: Mutex<String>,
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for Mentioner {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, switchboard::error::OutboundError> {
        self.seen.lock().unwrap().push(msg.clone());
        let mut r = NormalizedResponse::reply_to(msg, vec![Part::text("noted")]);
        r.mentions = Some(vec![self.mention.lock().unwrap().clone()]);
        Ok(Some(r))
    }
}

/// POSTs `activity` to echo's inbox, signed by `who` on `remote`; the status.
async fn send(t: &TestApp, remote: &Remote, who: &str, activity: &Value) -> u16 {
    let inbox = format!("{}/agents/echo/inbox", t.base);
    post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(activity).unwrap(),
        &remote.key_id(who),
        0,
    )
    .await
    .status()
    .as_u16()
}

/// `who` mentions echo in public note `n`; the inbox's status.
async fn mention(t: &TestApp, remote: &Remote, who: &str, n: &str) -> u16 {
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
    send(t, remote, who, &create).await
}

/// The notes (`Create` objects) POSTed to `path` on the remote server.
fn notes_to(remote: &Remote, path: &str) -> Vec<Value> {
    remote
        .posts()
        .into_iter()
        .filter(|(p, _, b)| p == path && b["type"] == "Create")
        .map(|(_, _, b)| b["object"].clone())
        .collect()
}

/// The reply to note `n` of the remote server among the notes POSTed to `path`.
fn reply_to(remote: &Remote, path: &str, n: &str) -> Option<Value> {
    let id = format!("{}/notes/{n}", remote.base);
    notes_to(remote, path)
        .into_iter()
        .find(|note| note["inReplyTo"] == id)
}

/// Every IRI a note addresses or tags.
fn addressed(note: &Value) -> Vec<String> {
    let mut all = mapping::iris(note.get("to"));
    all.extend(mapping::iris(note.get("cc")));
    all.extend(
        note["tag"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["href"].as_str().map(str::to_owned)),
    );
    all
}

on_both_engines!(a_block_holds_the_blockers_notes_and_stops_deliveries_until_undone);

/// alice (personal inbox only) blocks echo, whose answers always mention alice: her notes to
/// echo are stored and held, answers to carol neither address nor reach her, until her Undo.
async fn a_block_holds_the_blockers_notes_and_stops_deliveries_until_undone(engine: Engine) {
    let remote = Remote::start().await;
    let agent = Arc::new(Mentioner::default());
    let a = agent.clone();
    let t = spawn_app(engine, move |_, o| o.agents.push(("echo".into(), a))).await;
    let alice = remote.add_actor("alice");
    remote.add_actor("carol");
    // alice has no shared inbox: what reaches her comes to her own inbox.
    let mut doc: Value =
        serde_json::from_str(&remote.docs.lock().unwrap()["/users/alice"].1).unwrap();
    doc.as_object_mut().unwrap().remove("endpoints");
    remote.set("/users/alice", 200, &doc);
    *agent.mention.lock().unwrap() = alice.clone();
    let alice_inbox = "/users/alice/inbox";
    let echo = format!("{}/agents/echo", t.base);
    let db = t.open_db().await;

    // Before any block, an answer to carol mentions alice and is delivered to her.
    assert_eq!(mention(&t, &remote, "carol", "c1").await, 202);
    let note = wait_for(20, "the answer at alice's inbox", || async {
        reply_to(&remote, alice_inbox, "c1")
    })
    .await;
    assert!(addressed(&note).contains(&alice), "{note}");

    // alice follows echo, then blocks it: twice the same activity (a replay), once more.
    let follow = json!({"id": format!("{}/follows/1", remote.base), "type": "Follow", "actor": alice, "object": echo});
    assert_eq!(send(&t, &remote, "alice", &follow).await, 202);
    let block = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{}/blocks/1", remote.base), "type": "Block", "actor": alice, "object": echo});
    // Unsigned, or signed by someone else: refused, nothing recorded.
    let r = t
        .http
        .post(format!("{echo}/inbox"))
        .header("content-type", "application/activity+json")
        .body(serde_json::to_vec(&block).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(send(&t, &remote, "carol", &block).await, 401);
    assert_eq!(blocks(&db, &alice).await, 0);
    for _ in 0..2 {
        assert_eq!(send(&t, &remote, "alice", &block).await, 202);
    }
    assert_eq!(blocks(&db, &alice).await, 1);
    // Blocking the agent ends the follow.
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_followers WHERE actor = $1",
            &[Arg::Text(&alice)]
        )
        .await,
        0
    );
    // A Block of something not ours: accepted, ignored.
    let other = json!({"id": format!("{}/blocks/x", remote.base), "type": "Block", "actor": alice,
        "object": remote.actor_url("carol")});
    assert_eq!(send(&t, &remote, "alice", &other).await, 202);
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_blocked_by", &[]).await,
        1
    );

    // alice's note to echo is stored and held; echo is not called.
    assert_eq!(mention(&t, &remote, "alice", "a1").await, 202);
    let status = wait_for(20, "alice's note held", || async {
        let id = stored_from(&db, "a1").await?;
        let v: Value = t
            .http
            .get(format!("{}/api/v1/messages/{id}", t.base))
            .bearer_auth("test-token")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (v["status"] == "held").then_some(v)
    })
    .await;
    assert_eq!(status["reason"], "blocked-by-sender");

    // An answer to carol neither addresses nor reaches alice.
    assert_eq!(mention(&t, &remote, "carol", "c2").await, 202);
    let note = wait_for(20, "the answer to carol", || async {
        reply_to(&remote, "/inbox", "c2")
    })
    .await;
    assert!(!addressed(&note).contains(&alice), "{note}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(reply_to(&remote, alice_inbox, "c2").is_none());
    assert_eq!(
        notes_to(&remote, alice_inbox).len(),
        1,
        "only the first answer"
    );
    assert_eq!(
        agent.seen.lock().unwrap().len(),
        2,
        "echo answered carol twice, never alice"
    );

    // Only the blocker may undo the Block; alice does.
    let undo = |by: &str, n: u32| json!({"id": format!("{}/undos/{n}", remote.base), "type": "Undo", "actor": remote.actor_url(by), "object": block});
    assert_eq!(send(&t, &remote, "carol", &undo("carol", 1)).await, 403);
    assert_eq!(blocks(&db, &alice).await, 1);
    assert_eq!(send(&t, &remote, "alice", &undo("alice", 2)).await, 202);
    assert_eq!(blocks(&db, &alice).await, 0);
    // The Block again (a replay) does not block again.
    assert_eq!(send(&t, &remote, "alice", &block).await, 202);
    assert_eq!(blocks(&db, &alice).await, 0);

    // Delivered to alice again, and her notes answered.
    assert_eq!(mention(&t, &remote, "carol", "c3").await, 202);
    let note = wait_for(20, "the answer at alice's inbox again", || async {
        reply_to(&remote, alice_inbox, "c3")
    })
    .await;
    assert!(addressed(&note).contains(&alice), "{note}");
    assert_eq!(mention(&t, &remote, "alice", "a2").await, 202);
    wait_for(20, "alice's note answered", || async {
        reply_to(&remote, alice_inbox, "a2")
    })
    .await;

    // A Block undone by its id alone.
    let again = json!({"id": format!("{}/blocks/2", remote.base), "type": "Block", "actor": alice, "object": echo});
    assert_eq!(send(&t, &remote, "alice", &again).await, 202);
    assert_eq!(blocks(&db, &alice).await, 1);
    let by_id = json!({"id": format!("{}/undos/3", remote.base), "type": "Undo", "actor": alice, "object": again["id"]});
    assert_eq!(send(&t, &remote, "alice", &by_id).await, 202);
    assert_eq!(blocks(&db, &alice).await, 0);
    let metrics = t.metrics().await;
    for line in [
        "switchboard_moderation_activities_total{kind=\"block\"} 2",
        "switchboard_moderation_activities_total{kind=\"unblock\"} 2",
        "switchboard_refused_total{agent=\"echo\",transport=\"activitypub\",reason=\"blocked-by-sender\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

/// How many of echo's blocks `actor` has made (0 or 1).
async fn blocks(db: &switchboard::store::Db, actor: &str) -> i64 {
    count(
        db,
        "SELECT COUNT(*) AS n FROM ap_blocked_by WHERE agent = 'echo' AND actor = $1",
        &[Arg::Text(actor)],
    )
    .await
}

/// The id of the stored message made from remote note `n`, once there is one.
async fn stored_from(db: &switchboard::store::Db, n: &str) -> Option<String> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Id {
        id: String,
    }
    let pattern = format!("%/notes/{n}\"%");
    let row: Option<Id> = db
        .fetch_optional(
            "SELECT id FROM messages WHERE direction = 'in' AND body LIKE $1",
            &[Arg::Text(&pattern)],
        )
        .await
        .unwrap();
    row.map(|r| r.id)
}

/// One message an [`SmtpSink`] took: envelope sender, recipients, data.
type Mail = (String, Vec<String>, String);

/// A minimal SMTP server on a loopback port that takes every message (the relay reports are
/// mailed through) and keeps it.
#[derive(Clone, Default)]
struct SmtpSink {
    mails: Arc<Mutex<Vec<Mail>>>,
}

impl SmtpSink {
    /// Binds port 0 and serves until the test ends; returns the port.
    async fn start(&self) -> u16 {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mails = self.mails.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let mails = mails.clone();
                tokio::spawn(async move {
                    let (r, mut w) = stream.into_split();
                    let mut r = BufReader::new(r);
                    let _ = w.write_all(b"220 sink.test ESMTP\r\n").await;
                    let (mut from, mut rcpts) = (String::new(), Vec::new());
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let cmd = line.trim_end().to_owned();
                        let upper = cmd.to_ascii_uppercase();
                        let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO")
                        {
                            b"250 sink.test\r\n"
                        } else if let Some(rest) = upper.strip_prefix("MAIL FROM:") {
                            from = cmd[cmd.len() - rest.len()..]
                                .trim_matches(['<', '>', ' '])
                                .to_owned();
                            b"250 OK\r\n"
                        } else if let Some(rest) = upper.strip_prefix("RCPT TO:") {
                            rcpts.push(
                                cmd[cmd.len() - rest.len()..]
                                    .trim_matches(['<', '>', ' '])
                                    .to_owned(),
                            );
                            b"250 OK\r\n"
                        } else if upper == "DATA" {
                            let _ = w.write_all(b"354 go on\r\n").await;
                            let mut data = String::new();
                            loop {
                                line.clear();
                                if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                                    return;
                                }
                                if line == ".\r\n" {
                                    break;
                                }
                                data.push_str(&line);
                            }
                            mails.lock().unwrap().push((
                                from.clone(),
                                std::mem::take(&mut rcpts),
                                data,
                            ));
                            b"250 queued\r\n"
                        } else if upper == "QUIT" {
                            let _ = w.write_all(b"221 bye\r\n").await;
                            return;
                        } else {
                            b"250 OK\r\n"
                        };
                        if w.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }
}

/// Publishes the remote server's instance actor at `/actor` (as Mastodon does, the one that
/// sends its reports), with the fixture key; returns its IRI.
fn add_instance_actor(remote: &Remote) -> String {
    let id = format!("{}/actor", remote.base);
    let doc = json!({
        "@context": ["https://www.w3.org/ns/activitystreams", "https://w3id.org/security/v1"],
        "id": id,
        "type": "Application",
        "preferredUsername": remote.base.split("://").nth(1).unwrap(),
        "inbox": format!("{id}/inbox"),
        "endpoints": {"sharedInbox": format!("{}/inbox", remote.base)},
        "publicKey": {"id": format!("{id}#main-key"), "owner": id, "publicKeyPem": super::remote::PUB_PEM},
    });
    remote.set("/actor", 200, &doc);
    id
}

on_both_engines!(a_flag_is_stored_listed_and_mailed_to_reports_to);

/// A report sent by a server's instance actor (as Mastodon sends them) is stored once, listed
/// by `GET /api/v1/reports` and mailed, signed, to `moderation.reports_to` through the relay;
/// unsigned, wrongly signed, replayed and foreign reports change nothing.
async fn a_flag_is_stored_listed_and_mailed_to_reports_to(engine: Engine) {
    let remote = Remote::start().await;
    let sink = SmtpSink::default();
    let port = sink.start().await;
    let t = spawn_app(engine, move |c, _| {
        c.email.domain = Some("agents.test".into());
        c.email.dns = switchboard::config::DnsMode::Offline;
        c.email.relay_host = Some("127.0.0.1".into());
        c.email.relay_port = port;
        c.email.relay_tls = switchboard::config::RelayTls::None;
        c.moderation.reports_to = Some("moderators@example.org".into());
    })
    .await;
    let instance = add_instance_actor(&remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let flag = json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{}/0f2b6c1e-flag", remote.base),
        "type": "Flag",
        "actor": instance,
        "content": "Spam from this bot, twice today.",
        "object": [echo, format!("{echo}/notes/0190-x"), "https://elsewhere.example/notes/1"],
    });
    let body = serde_json::to_vec(&flag).unwrap();
    let reports = || async {
        let r = t
            .http
            .get(format!("{}/api/v1/reports", t.base))
            .bearer_auth("test-token")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["reports"]
            .as_array()
            .unwrap()
            .clone()
    };

    // Unsigned, and signed by someone who is not its actor: refused, nothing stored.
    let unsigned = t
        .http
        .post(&inbox)
        .header("content-type", "application/activity+json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let wrong = post_signed(&t.http, &inbox, &body, &remote.key_id("alice"), 0).await;
    assert_eq!(wrong.status(), 401);
    assert!(reports().await.is_empty());

    // Signed by the instance actor: stored once, however often it comes.
    for _ in 0..2 {
        let r = post_signed(&t.http, &inbox, &body, &format!("{instance}#main-key"), 0).await;
        assert_eq!(r.status(), 202, "{:?}", r.text().await);
    }
    // A report naming nothing of ours: accepted, ignored.
    let foreign = json!({"id": format!("{}/flags/2", remote.base), "type": "Flag", "actor": instance,
        "content": "not yours", "object": ["https://elsewhere.example/users/x"]});
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&foreign).unwrap(),
        &format!("{instance}#main-key"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    let listed = reports().await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let report = &listed[0];
    assert_eq!(report["reporter"], instance);
    assert_eq!(report["host"], mapping::host_of(&instance).unwrap());
    assert_eq!(report["agent"], "echo");
    assert_eq!(report["transport"], "activitypub");
    assert_eq!(report["activity_id"], flag["id"]);
    assert_eq!(
        report["objects"],
        json!([echo, format!("{echo}/notes/0190-x")]),
        "only our objects"
    );
    assert_eq!(report["content"], "Spam from this bot, twice today.");
    let r = t
        .http
        .get(format!("{}/api/v1/reports", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the operator token is needed");

    // Mailed once, from us, signed, to moderation.reports_to.
    let (from, rcpts, data) = wait_for(20, "the report at the relay", || async {
        sink.mails().first().cloned()
    })
    .await;
    assert_eq!(rcpts, vec!["moderators@example.org".to_owned()]);
    assert!(
        from.starts_with("bounces+report-") && from.ends_with("@agents.test"),
        "{from}"
    );
    for want in [
        "DKIM-Signature:",
        "From: postmaster@agents.test",
        "Auto-Submitted: auto-generated",
        &format!("Reporter: {instance}"),
        "Agent: echo",
        "Spam from this bot, twice today.",
        report["id"].as_str().unwrap(),
    ] {
        assert!(data.contains(want), "{want} in {data}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.mails().len(), 1, "one mail per report");
    let metrics = t.metrics().await;
    let line = "switchboard_moderation_activities_total{kind=\"report\"} 1";
    assert!(metrics.contains(line), "{line} in {metrics}");
}

/// Reports are mailed through the email transport: `reports_to` without it is refused.
#[test]
fn reports_to_needs_the_email_transport() {
    let mut c = crate::helpers::test_config("sqlite::memory:");
    c.moderation.reports_to = Some("moderators@example.org".into());
    c.check().unwrap();
    c.email.enabled = false;
    let e = c.check().unwrap_err().to_string();
    assert!(e.contains("moderation.reports_to"), "{e}");
}
