//! Long replies as threads of notes: a server whose NodeInfo says Mastodon gets a 1,300-character
//! reply as three notes, each answering the one before, with the code block whole and every
//! note fetchable; a server that does not say what it runs gets one note; a retried delivery
//! sends nothing twice; a note never reaches a server before the one it answers, retries
//! included; first contacts from one server at once ask its NodeInfo once.

use serde_json::{Value, json};
use switchboard::transports::activitypub::mapping;

use super::remote::{Remote, note_create, post_signed};
use super::{count, setup};
use crate::helpers::{Engine, TestApp, on_both_engines, wait_for};

/// Three paragraphs, the middle one a fenced code block, about 1,300 characters as text, and
/// the same as note HTML.
fn long_text() -> (String, String) {
    let intro = "Here is the answer you asked for, with the code first. ".repeat(4);
    let code = [
        "```rust",
        "fn main() {",
        "    let xs: Vec<u32> = (1..=10).collect();",
        "    let total: u32 = xs.iter().sum();",
        "    println!(\"total = {total}\");",
        "    assert_eq!(total, 55);",
        "    for x in &xs { println!(\"{x}\"); }",
        "}",
        "```",
    ];
    let outro: String = (1..=16)
        .map(|i| format!("Sentence number {i} explains one more detail plainly. "))
        .chain(["That is all for now, thank you kindly.".to_owned()])
        .collect();
    let (intro, outro) = (intro.trim(), outro.trim());
    let text = format!("{intro}\n\n{}\n\n{outro}", code.join("\n"));
    let html = format!("<p>{intro}</p><p>{}</p><p>{outro}</p>", code.join("<br>"));
    (text, html)
}

/// Publishes NodeInfo saying the remote runs `software`.
fn serve_nodeinfo(remote: &Remote, software: &str) {
    remote.set(
        "/.well-known/nodeinfo",
        200,
        &json!({"links": [
            {"rel": "http://nodeinfo.diaspora.software/ns/schema/2.0", "href": format!("{}/nodeinfo/2.0", remote.base)},
            {"rel": "http://nodeinfo.diaspora.software/ns/schema/2.1", "href": format!("{}/nodeinfo/2.1", remote.base)},
        ]}),
    );
    remote.set(
        "/nodeinfo/2.1",
        200,
        &json!({"version": "2.1", "software": {"name": software, "version": "4.3.0"}, "protocols": ["activitypub"]}),
    );
}

/// The notes of the `Create`s `remote` received.
fn created_notes(remote: &Remote) -> Vec<Value> {
    remote
        .posts()
        .into_iter()
        .filter(|p| p.2["type"] == "Create")
        .map(|p| p.2["object"].clone())
        .collect()
}

/// `actor` of `remote` mentions the echo agent in a public note `note` of `html` (the actor
/// published first), delivered signed to the agent's inbox; the note's id.
async fn mention_echo(t: &TestApp, remote: &Remote, actor: &str, note: &str, html: &str) -> String {
    let echo = format!("{}/agents/echo", t.base);
    let create = note_create(
        remote,
        actor,
        note,
        vec![mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        html,
    );
    let r = post_signed(
        &t.http,
        &format!("{echo}/inbox"),
        &serde_json::to_vec(&create).unwrap(),
        &remote.key_id(actor),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    create["object"]["id"].as_str().unwrap().to_owned()
}

on_both_engines!(long_replies_are_threads_of_notes_within_the_server_limit);

async fn long_replies_are_threads_of_notes_within_the_server_limit(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    serve_nodeinfo(remote, "Mastodon");
    remote.add_actor("alice");
    let (text, html) = long_text();
    let chars = text.chars().count();
    assert!((1250..=1400).contains(&chars), "{chars}");
    let original = mention_echo(t, remote, "alice", "long1", &html).await;
    let notes = wait_for(20, "three notes", || async {
        let n = created_notes(remote);
        (n.len() >= 3).then_some(n)
    })
    .await;
    // The agent was told the limit of the sender's server.
    let seen = s.echo.seen.lock().unwrap().clone();
    assert_eq!(seen[0].recipient_capabilities.max_text_chars, Some(500));
    assert_eq!(seen[0].parts.len(), 1);

    // In thread order: the first answers the original, each next one the note before.
    let mut ordered: Vec<&Value> = Vec::new();
    let mut parent = original.clone();
    while let Some(n) = notes.iter().find(|n| n["inReplyTo"] == parent.as_str()) {
        ordered.push(n);
        parent = n["id"].as_str().unwrap().to_owned();
    }
    assert_eq!(ordered.len(), 3, "{notes:#?}");
    let first_id = ordered[0]["id"].as_str().unwrap();
    assert_eq!(ordered[1]["id"], format!("{first_id}-2"));
    assert_eq!(ordered[2]["id"], format!("{first_id}-3"));
    let alice = remote.actor_url("alice");
    let mut all_text = String::new();
    for (i, n) in ordered.iter().enumerate() {
        let shown = mapping::note_text(n);
        assert!(
            shown.chars().count() <= 500,
            "note {i} has {} characters: {shown}",
            shown.chars().count()
        );
        assert!(shown.ends_with(&format!("({}/3)", i + 1)), "{shown}");
        // Same addressing, mention, thread for every note.
        for key in ["to", "cc", "tag", "context", "conversation"] {
            assert_eq!(n[key], ordered[0][key], "{key} of note {i}");
        }
        assert!(n["cc"].as_array().unwrap().iter().any(|c| c == &alice));
        assert!(shown.starts_with("@alice@"), "{shown}");
        all_text.push_str(&shown);
    }
    // The code block is whole in one note.
    let with_code: Vec<_> = ordered
        .iter()
        .map(|n| mapping::note_text(n))
        .filter(|t| t.contains("```"))
        .collect();
    assert_eq!(with_code.len(), 1, "{with_code:#?}");
    assert!(
        with_code[0].contains("```rust\nfn main() {"),
        "{}",
        with_code[0]
    );
    assert!(with_code[0].contains("assert_eq!(total, 55);"));
    assert_eq!(with_code[0].matches("```").count(), 2);
    // Nothing lost: every sentence is there.
    for i in 1..=16 {
        assert!(
            all_text.contains(&format!("Sentence number {i} explains")),
            "{i}"
        );
    }
    // Each note dereferences like any of ours.
    for n in &ordered {
        let id = n["id"].as_str().unwrap();
        let got: Value = t
            .http
            .get(id)
            .header("accept", "application/activity+json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["id"], n["id"]);
        assert_eq!(got["inReplyTo"], n["inReplyTo"]);
        assert_eq!(got["content"], n["content"]);
    }

    // A retried delivery of the same response sends nothing again.
    let db = t.open_db().await;
    let jobs = "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver'";
    assert_eq!(
        count(&db, jobs, &[]).await,
        1,
        "one job takes the three notes to the inbox, in order"
    );
    let again = db
        .execute(
            "UPDATE jobs SET state = 'ready', run_at = 0, lease_owner = NULL, lease_until = NULL \
             WHERE kind = 'deliver' AND state = 'done'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(again, 1);
    wait_for(20, "the delivery done again", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'deliver' AND state = 'done' AND attempts = 2",
            &[],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(count(&db, jobs, &[]).await, 1);
    assert_eq!(created_notes(remote).len(), 3);

    // A server that does not say what it runs gets the reply whole (`default` is 0).
    let other = Remote::start().await;
    other.add_actor("bob");
    mention_echo(t, &other, "bob", "long2", &html).await;
    let notes = wait_for(20, "one note", || async {
        let n = created_notes(&other);
        (!n.is_empty()).then_some(n)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(created_notes(&other).len(), 1);
    let shown = mapping::note_text(&notes[0]);
    assert!(shown.chars().count() > 1250, "{shown}");
    assert!(!shown.contains("(1/"), "{shown}");
    // NodeInfo is asked once per host: the answer (and the failure) is cached, for the inbox,
    // the delivery and its retry alike.
    assert_eq!(remote.gets_of("/.well-known/nodeinfo"), 1);
    assert_eq!(remote.gets_of("/nodeinfo/2.1"), 1);
    assert_eq!(other.gets_of("/.well-known/nodeinfo"), 1);
    let seen = s.echo.seen.lock().unwrap().clone();
    assert_eq!(seen[1].recipient_capabilities.max_text_chars, None);
}

on_both_engines!(first_contacts_from_one_server_at_once_ask_its_nodeinfo_once);

async fn first_contacts_from_one_server_at_once_ask_its_nodeinfo_once(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    serve_nodeinfo(remote, "Mastodon");
    // Slow enough that every inbox request asks before the first answer is back.
    remote.delays.lock().unwrap().insert(
        "/.well-known/nodeinfo".into(),
        std::time::Duration::from_millis(400),
    );
    let echo = format!("{}/agents/echo", t.base);
    let d = t.domain();
    let posts = (0..8).map(|i| {
        let name = format!("user{i}");
        remote.add_actor(&name);
        let create = note_create(
            remote,
            &name,
            &format!("first{i}"),
            vec![mapping::PUBLIC.into()],
            vec![echo.clone()],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hello</p>",
        );
        let (http, inbox, key) = (
            t.http.clone(),
            format!("{echo}/inbox"),
            remote.key_id(&name),
        );
        async move {
            post_signed(
                &http,
                &inbox,
                &serde_json::to_vec(&create).unwrap(),
                &key,
                0,
            )
            .await
            .status()
        }
    });
    let statuses = futures_util::future::join_all(posts).await;
    assert!(statuses.iter().all(|s| *s == 202), "{statuses:?}");
    wait_for(20, "eight turns", || async {
        (s.echo.seen.lock().unwrap().len() == 8).then_some(())
    })
    .await;
    assert_eq!(remote.gets_of("/.well-known/nodeinfo"), 1);
    assert_eq!(remote.gets_of("/nodeinfo/2.1"), 1);
    let seen = s.echo.seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|m| m.recipient_capabilities.max_text_chars == Some(500)),
        "every turn knows the server's limit"
    );
}

on_both_engines!(a_note_never_arrives_before_the_one_it_answers);

async fn a_note_never_arrives_before_the_one_it_answers(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    serve_nodeinfo(remote, "Mastodon");
    remote.add_actor("alice");
    let (_, html) = long_text();
    // The second note's first POST fails for now (a 503): the third must wait for its retry.
    remote.refuse_once.lock().unwrap().push("-2".into());
    let original = mention_echo(t, remote, "alice", "ordered", &html).await;
    wait_for(20, "three notes accepted", || async {
        (created_notes(remote).len() >= 4).then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // What the inbox received, in order: note 1, note 2 (refused), note 2 again, note 3.
    let received: Vec<String> = created_notes(remote)
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(received.len(), 4, "{received:#?}");
    let first = received[0].clone();
    assert_eq!(
        received,
        vec![
            first.clone(),
            format!("{first}-2"),
            format!("{first}-2"),
            format!("{first}-3"),
        ],
        "each note after the one it answers; the accepted one not sent again"
    );
    let notes = created_notes(remote);
    assert_eq!(notes[0]["inReplyTo"], original.as_str());
    assert_eq!(notes[3]["inReplyTo"], format!("{first}-2"));
}
