//! Interop with the Rust fediverse stack: a peer built on `activitypub_federation` 0.6.6 (the
//! crate Lemmy federates with; draft-cavage signatures by `http-signature-normalization`),
//! `tests/peers/activitypub-rs/`, run when `SWITCHBOARD_INTEROP=1` (scripts/test builds it and
//! exports `SWITCHBOARD_AP_RS_PEER`).
//!
//! The crate accepts plain http, ports and loopback hosts only in its debug mode, and only
//! under a domain name (an IP host has no `Url::domain`), so both sides are named `localhost`:
//! the peer at `http://localhost:{port}`, switchboard with `server.public_url =
//! http://localhost:{port}` (and `net.allow_private_addresses`, as every test has).

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::transports::activitypub::mapping;

use super::setup;
use crate::helpers::{Engine, wait_for};

struct Peer {
    child: std::process::Child,
    base: String,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the peer; `compat` makes the crate sign as towards Mastodon.
fn start_peer(compat: bool) -> Peer {
    let bin = std::env::var("SWITCHBOARD_AP_RS_PEER")
        .expect("SWITCHBOARD_AP_RS_PEER (source scripts/peers/activitypub.sh)");
    let port = free_port();
    let mut child = std::process::Command::new(bin)
        .arg(port.to_string())
        .args(compat.then_some("--mastodon-compat"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the activitypub_federation peer starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("READY") {
                let _ = tx.send(());
            }
        }
    });
    let peer = Peer {
        child,
        base: format!("http://localhost:{port}"),
    };
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the activitypub_federation peer is ready");
    peer
}

async fn admin(http: &reqwest::Client, peer: &Peer, path: &str, body: &Value) -> Value {
    let r = http
        .post(format!("{}/admin/{path}", peer.base))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "peer /admin/{path}: {status} {text}");
    serde_json::from_str(&text).unwrap()
}

async fn peer_get(http: &reqwest::Client, peer: &Peer, path: &str) -> Value {
    http.get(format!("{}/admin/{path}", peer.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The reply the peer received, verified, for its note `note`; on time-out, what the peer's
/// inbox refused and why.
async fn verified_reply(http: &reqwest::Client, peer: &Peer, note: &Value) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let received = peer_get(http, peer, "received").await;
        if let Some(a) = received
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["type"] == "Create" && a["object"]["inReplyTo"] == *note)
        {
            return a.clone();
        }
        if tokio::time::Instant::now() > deadline {
            let rejected = peer_get(http, peer, "rejected").await;
            panic!("no verified reply to {note}; the peer refused: {rejected}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The crate with its default signatures (`hs2019`, `(created)`/`(expires)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activitypub_federation_follows_mentions_and_verifies_replies() {
    if crate::helpers::interop("activitypub_federation") {
        follow_mention_reply(false).await;
    }
}

/// The crate signing as Lemmy does towards Mastodon (`Date`, `Host`, no `(created)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activitypub_federation_in_mastodon_compat_mode() {
    if crate::helpers::interop("activitypub_federation") {
        follow_mention_reply(true).await;
    }
}

async fn follow_mention_reply(compat: bool) {
    let peer = start_peer(compat);
    let port = free_port();
    let base = format!("http://localhost:{port}");
    let b = base.clone();
    let s = setup(Engine::Sqlite, move |c| {
        c.server.bind = ([127, 0, 0, 1], port).into();
        c.server.public_url = Some(b);
    })
    .await;
    let t = &s.t;
    let http = &t.http;
    let handle = format!("echo@localhost:{port}");
    let echo = format!("{base}/agents/echo");
    let alice = format!("{}/users/alice", peer.base);

    // WebFinger, the actor fetched by the crate (content type and id checked), Follow → our
    // Accept, whose signature and Follow the crate verified.
    let follow = admin(http, &peer, "follow", &json!({"target": handle})).await;
    assert_eq!(follow["actor"], echo);
    wait_for(30, "the peer to verify our Accept", || async {
        let following = peer_get(http, &peer, "following").await;
        (following == json!([echo])).then_some(())
    })
    .await;
    let followers: Value = http
        .get(format!("{echo}/followers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(followers["orderedItems"], json!([alice]));

    // A public mention: verified here (the crate's draft-cavage signature), answered with a
    // threaded reply the crate verifies (signature, digest, the note is the actor's, inReplyTo
    // is the peer's own note).
    let sent = admin(
        http,
        &peer,
        "note",
        &json!({"target": handle, "text": "ping from activitypub_federation"}),
    )
    .await;
    let msg = wait_for(30, "the agent call", || async {
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
        Some(format!("{alice}#main-key").as_str())
    );
    let reply = verified_reply(http, &peer, &sent["note"]).await;
    let note = &reply["object"];
    assert_eq!(reply["actor"], echo);
    assert_eq!(note["attributedTo"], echo);
    assert!(
        mapping::iris(note.get("to")).contains(&mapping::PUBLIC.to_owned()),
        "{note}"
    );
    assert!(mapping::iris(note.get("cc")).contains(&alice), "{note}");
    assert!(
        mapping::many(note.get("tag"))
            .iter()
            .any(|t| t["type"] == "Mention" && t["href"] == alice),
        "{note}"
    );
    // The peer sent no context: ours is minted, and the crate dereferences it (and the reply)
    // with its own fetch, which insists on the content type and on `id` being the URL.
    let context = note["context"]
        .as_str()
        .expect("a minted context")
        .to_owned();
    assert!(
        context.starts_with(&format!("{echo}/contexts/")),
        "{context}"
    );
    let collection = admin(http, &peer, "fetch", &json!({"url": context})).await;
    assert_eq!(collection["type"], "OrderedCollection");
    assert_eq!(
        collection["orderedItems"],
        json!([sent["note"], note["id"]])
    );
    let fetched = admin(http, &peer, "fetch", &json!({"url": note["id"]})).await;
    assert_eq!(fetched["inReplyTo"], sent["note"]);

    // A follow-up answering our reply: the reply to it stays in the thread's context.
    let again = admin(
        http,
        &peer,
        "note",
        &json!({"target": handle, "text": "and again", "in_reply_to": note["id"]}),
    )
    .await;
    let reply2 = verified_reply(http, &peer, &again["note"]).await;
    assert_eq!(reply2["object"]["context"], context.as_str());
    let seen = s.echo.seen.lock().unwrap().clone();
    assert_eq!(seen[1].thread_id, seen[0].thread_id);

    // A direct message is answered directly, and verified all the same.
    let direct = admin(
        http,
        &peer,
        "note",
        &json!({"target": handle, "text": "psst", "visibility": "direct"}),
    )
    .await;
    let reply3 = verified_reply(http, &peer, &direct["note"]).await;
    assert_eq!(
        mapping::iris(reply3["object"].get("to")),
        vec![alice.clone()]
    );
    assert!(mapping::iris(reply3["object"].get("cc")).is_empty());
    // The direct reply is served only to a GET signed by an addressee. Like Mastodon, we
    // require a signed GET to cover `Host` (else it could be replayed to another server);
    // the crate covers it only in its Mastodon-compatible mode, and is refused (404) without.
    let r = http
        .post(format!("{}/admin/fetch", peer.base))
        .json(&json!({"url": reply3["object"]["id"]}))
        .send()
        .await
        .unwrap();
    let (status, text) = (r.status(), r.text().await.unwrap());
    if compat {
        assert!(status.is_success(), "{status} {text}");
        let fetched: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(fetched["inReplyTo"], direct["note"]);
    } else {
        assert!(!status.is_success(), "{text}");
    }
    assert_eq!(peer_get(http, &peer, "rejected").await, json!([]));
    drop(peer);
}

/// The crate reads an agent's profile into typed documents: the actor's type, `icon`, `image`,
/// `PropertyValue` fields, `discoverable`/`indexable`, the `featured` collection of notes (its
/// `id` checked against its URL) and a pinned note dereferenced at its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activitypub_federation_reads_an_agents_profile() {
    if !crate::helpers::interop("activitypub_federation") {
        return;
    }
    let peer = start_peer(false);
    let port = free_port();
    let base = format!("http://localhost:{port}");
    let b = base.clone();
    let avatar = super::profile::png_file();
    let s = setup(Engine::Sqlite, move |c| {
        c.server.bind = ([127, 0, 0, 1], port).into();
        c.server.public_url = Some(b);
        super::profile::with_profile(c, super::profile::full_profile(&avatar));
    })
    .await;
    let http = &s.t.http;
    let echo = format!("{base}/agents/echo");
    let p = admin(
        http,
        &peer,
        "profile",
        &json!({"target": format!("echo@localhost:{port}")}),
    )
    .await;
    assert_eq!(p["type"], "Person", "{p}");
    assert_eq!(p["icon"]["type"], "Image");
    assert_eq!(p["icon"]["mediaType"], "image/png");
    let icon = p["icon"]["url"].as_str().unwrap();
    assert!(icon.starts_with(&format!("{echo}/images/")), "{icon}");
    let r = http.get(icon).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(r.bytes().await.unwrap().to_vec(), super::profile::png());
    assert_eq!(p["image"]["url"], "https://cdn.example/banner.jpg");
    assert_eq!(p["image"]["mediaType"], "image/jpeg");
    let fields = p["fields"].as_array().unwrap();
    assert_eq!(fields.len(), 2);
    assert_eq!(fields[0]["type"], "PropertyValue");
    assert_eq!(fields[0]["name"], "Website");
    let website = fields[0]["value"].as_str().unwrap();
    assert!(
        website.contains("rel=\"me nofollow noopener noreferrer\""),
        "{website}"
    );
    assert!(
        website.contains("<span class=\"\">example.com</span>"),
        "{website}"
    );
    assert_eq!(p["featured"]["totalItems"], 2);
    assert_eq!(
        p["featured"]["contents"],
        json!([
            "<p>Mention me to talk.</p>",
            "<p>Rules: <a href=\"https://example.com/rules\" rel=\"nofollow noopener noreferrer\" target=\"_blank\">https://example.com/rules</a></p>"
        ])
    );
    assert_eq!(p["pinned"]["attributedTo"], echo);
    assert_eq!(p["pinned"]["content"], "<p>Mention me to talk.</p>");
    assert!(
        p["pinned"]["id"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{echo}/pinned/")),
        "{p}"
    );
    assert_eq!(p["discoverable"], false);
    assert_eq!(p["indexable"], true);
}
