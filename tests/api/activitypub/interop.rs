//! Interop with a real Fedify 2.3.6 server, run when the Fedify peer is installed.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::store::Arg;
use switchboard::transports::activitypub::mapping;

use super::{count, setup};
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

fn interop() -> bool {
    crate::helpers::interop("Fedify")
}

async fn start_peer() -> Peer {
    let dir = std::env::var("SWITCHBOARD_AP_PEER_DIR")
        .expect("SWITCHBOARD_AP_PEER_DIR (source scripts/peers/activitypub.sh)");
    let node = std::env::var("SWITCHBOARD_AP_NODE").expect("SWITCHBOARD_AP_NODE");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/activitypub/peer.mjs");
    let copy = std::path::Path::new(&dir).join("peer.mjs");
    std::fs::copy(&script, &copy).unwrap();
    let mut child = std::process::Command::new(node)
        .arg(&copy)
        .current_dir(&dir)
        .env("PEER_PORT", port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the Fedify peer starts");
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
        base: format!("http://127.0.0.1:{port}"),
    };
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the Fedify peer is ready");
    peer
}

async fn peer_received(http: &reqwest::Client, peer: &Peer) -> Vec<Value> {
    http.get(format!("{}/admin/received", peer.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_follows_mentions_and_gets_replies() {
    if !interop() {
        return;
    }
    let peer = start_peer().await;
    let s = setup(Engine::Sqlite, |_| {}).await;
    let t = &s.t;
    let echo = format!("{}/agents/echo", t.base);
    let alice = format!("{}/users/alice", peer.base);

    // Follow → Accept, which Fedify verified before recording it.
    let r = t
        .http
        .post(format!("{}/admin/follow", peer.base))
        .json(&json!({"target": echo}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let accept = wait_for(30, "Fedify to receive the Accept", || async {
        peer_received(&t.http, &peer)
            .await
            .into_iter()
            .find(|a| a["type"] == "Accept")
    })
    .await;
    assert_eq!(accept["actor"], echo);
    let f: Value = t
        .http
        .get(format!("{echo}/followers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(f["orderedItems"], json!([alice]));
    // Fedify knocked first with RFC 9421, and we accepted it without a fallback.
    let db = t.open_db().await;
    let host = mapping::host_of(&alice).unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_hosts WHERE host = $1 AND rfc9421 = 1",
            &[Arg::Text(&host)]
        )
        .await,
        1
    );

    // A public mention gets a threaded public reply.
    let sent: Value = t
        .http
        .post(format!("{}/admin/note", peer.base))
        .json(&json!({"target": echo, "text": "ping from fedify", "visibility": "public"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let msg = wait_for(30, "the agent call", || async {
        s.echo.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(msg.sender.address, format!("@alice@{host}"));
    assert!(msg.sender.verified);
    // Fedify signs its activities with an FEP-8b32 eddsa-jcs-2022 proof, which takes precedence.
    assert_eq!(msg.sender.auth_method.as_str(), "ap-object-integrity-proof");
    assert!(
        msg.sender
            .key_id
            .as_deref()
            .is_some_and(|k| k.starts_with(&alice))
    );
    let reply = wait_for(30, "Fedify to receive the reply", || async {
        peer_received(&t.http, &peer)
            .await
            .into_iter()
            .find(|a| a["type"] == "Create" && a["object"]["inReplyTo"] == sent["note"])
    })
    .await;
    let note = &reply["object"];
    assert_eq!(reply["actor"], echo);
    let to = mapping::iris(note.get("to"));
    let cc = mapping::iris(note.get("cc"));
    assert!(
        to.iter().any(|x| x == mapping::PUBLIC || x == "as:Public"),
        "{note}"
    );
    assert!(cc.contains(&alice), "{note}");
    let tags = mapping::many(note.get("tag"));
    assert!(
        tags.iter()
            .any(|t| t["type"] == "Mention" && t["href"] == alice),
        "{note}"
    );

    // A direct message is answered directly.
    let sent: Value = t
        .http
        .post(format!("{}/admin/note", peer.base))
        .json(&json!({"target": echo, "text": "psst", "visibility": "direct"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reply = wait_for(30, "the direct reply", || async {
        peer_received(&t.http, &peer)
            .await
            .into_iter()
            .find(|a| a["type"] == "Create" && a["object"]["inReplyTo"] == sent["note"])
    })
    .await;
    let note = &reply["object"];
    assert_eq!(mapping::iris(note.get("to")), vec![alice.clone()], "{note}");
    assert!(mapping::iris(note.get("cc")).is_empty(), "{note}");
    drop(peer);
}

/// Fedify mentions an agent that asks for consent: the reply carries the text and a link to
/// the state's landing page; pressing its button brings the agent back into the same thread
/// (a second reply to the same note, in the same context), with the resolution verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_gets_a_consent_link_whose_button_resumes_the_thread() {
    if !interop() {
        return;
    }
    let peer = start_peer().await;
    let agent = std::sync::Arc::new(crate::helpers::PolicyAgent::default());
    let a = agent.clone();
    let t = crate::helpers::spawn_app(Engine::Sqlite, move |_, o| {
        o.agents.push(("bot".into(), a));
    })
    .await;
    let bot = format!("{}/agents/bot", t.base);
    let sent: Value = t
        .http
        .post(format!("{}/admin/note", peer.base))
        .json(&json!({"target": bot, "text": "may I join? need consent?", "visibility": "direct"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let replies = |n: usize| {
        let (http, peer, note) = (&t.http, &peer, sent["note"].clone());
        async move {
            let got: Vec<Value> = peer_received(http, peer)
                .await
                .into_iter()
                .filter(|a| a["type"] == "Create" && a["object"]["inReplyTo"] == note)
                .collect();
            (got.len() >= n).then_some(got)
        }
    };
    let first = wait_for(30, "Fedify to receive the request", || replies(1)).await;
    let note = &first[0]["object"];
    let content = note["content"].as_str().unwrap();
    assert!(content.contains("Consent needed"), "{note}");
    assert!(content.contains("Review and consent"), "{note}");
    let at = content.find("/policy/").expect("a landing link") + "/policy/".len();
    let state: String = content[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    assert_eq!(state.len(), 43, "{content}");

    let page = format!("{}/policy/{state}", t.base);
    assert_eq!(t.http.get(&page).send().await.unwrap().status(), 200);
    assert_eq!(t.http.post(&page).send().await.unwrap().status(), 200);
    let both = wait_for(30, "Fedify to receive the answer", || replies(2)).await;
    let answer = &both[1]["object"];
    assert!(
        answer["content"]
            .as_str()
            .unwrap()
            .contains("resolved consent_required verified=true"),
        "{answer}"
    );
    assert_eq!(answer["context"], note["context"], "the same thread");
    let alice = format!("{}/users/alice", peer.base);
    assert_eq!(mapping::iris(answer.get("to")), vec![alice], "{answer}");
    let res = agent.nth(2).await.policy_resolution.expect("a resolution");
    assert!(res.verified);
    assert_eq!(res.in_reply_to_state, state);
    drop(peer);
}

/// Fedify writes to one agent, whose reply mentions a sibling agent: Fedify receives both
/// replies, the sibling's threaded under the first (its `inReplyTo`) in the same context, and
/// each addressing Fedify's actor and the other agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_sees_a_sibling_agents_reply_threaded_under_the_first() {
    if !interop() {
        return;
    }
    let peer = start_peer().await;
    let helper = crate::multi_agent::MentionAgent::inline("helper");
    let scout = crate::multi_agent::MentionAgent::new("scout");
    let (h, s) = (helper.clone(), scout.clone());
    let t = crate::helpers::spawn_app(Engine::Sqlite, move |_, o| {
        o.agents.push(("helper".into(), h));
        o.agents.push(("scout".into(), s));
    })
    .await;
    helper.mention(&[&t.agent("scout")]);
    let helper_iri = format!("{}/agents/helper", t.base);
    let scout_iri = format!("{}/agents/scout", t.base);
    let alice = format!("{}/users/alice", peer.base);
    let sent: Value = t
        .http
        .post(format!("{}/admin/note", peer.base))
        .json(&json!({"target": helper_iri, "text": "who can help?", "visibility": "direct"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let got = wait_for(30, "Fedify to receive both replies", || async {
        let c: Vec<Value> = peer_received(&t.http, &peer)
            .await
            .into_iter()
            .filter(|a| a["type"] == "Create")
            .collect();
        (c.len() >= 2).then_some(c)
    })
    .await;
    let first = got.iter().find(|c| c["actor"] == helper_iri).unwrap();
    let second = got.iter().find(|c| c["actor"] == scout_iri).unwrap();
    let (n1, n2) = (&first["object"], &second["object"]);
    assert_eq!(n1["inReplyTo"], sent["note"], "{n1}");
    assert_eq!(n2["inReplyTo"], n1["id"], "{n2}");
    assert!(n1["context"].is_string(), "{n1}");
    assert_eq!(n2["context"], n1["context"], "the same conversation");
    let to1 = mapping::iris(n1.get("to"));
    assert!(to1.contains(&alice) && to1.contains(&scout_iri), "{n1}");
    let to2 = mapping::iris(n2.get("to"));
    assert!(to2.contains(&alice) && to2.contains(&helper_iri), "{n2}");
    assert_eq!((helper.calls(), scout.calls()), (1, 1));
    drop(peer);
}
