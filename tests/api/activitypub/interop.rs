//! Interop with a real Fedify 2.3.6 server, run when the Fedify peer is installed.

use std::sync::{Arc, Mutex};
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
    start_peer_with(&[]).await
}

/// Starts the peer with extra environment variables.
async fn start_peer_with(env: &[(&str, &str)]) -> Peer {
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
        .envs(env.iter().copied())
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

/// Waits (30 s at most) until Fedify has received an activity that `matches`.
async fn peer_receives(
    http: &reqwest::Client,
    peer: &Peer,
    what: &str,
    matches: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(30, what, || async {
        peer_received(http, peer)
            .await
            .into_iter()
            .find(|a| matches(a))
    })
    .await
}

/// Has Fedify follow `target` and waits for the `Accept` it verified; returns the Accept.
async fn fedify_follows(http: &reqwest::Client, peer: &Peer, target: &str) -> Value {
    let r = http
        .post(format!("{}/admin/follow", peer.base))
        .json(&json!({"target": target}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    peer_receives(http, peer, "Fedify to receive the Accept", |a| {
        a["type"] == "Accept"
    })
    .await
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
    let accept = fedify_follows(&t.http, &peer, &echo).await;
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
    let reply = peer_receives(&t.http, &peer, "Fedify to receive the reply", |a| {
        a["type"] == "Create" && a["object"]["inReplyTo"] == sent["note"]
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

/// A server whose NodeInfo names software with a small limit gets a long reply as a thread:
/// Fedify receives and verifies every note, each answering the one before, the code block whole
/// in one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_gets_a_long_reply_as_a_thread_of_notes() {
    if !interop() {
        return;
    }
    let peer = start_peer_with(&[("PEER_SOFTWARE", "fedify-small")]).await;
    let s = setup(Engine::Sqlite, |c| {
        c.activitypub
            .max_reply_chars
            .software
            .insert("fedify-small".into(), 140);
    })
    .await;
    let t = &s.t;
    let echo = format!("{}/agents/echo", t.base);
    let text = "This answer is longer than the peer takes in one note, so it comes as a thread. \
        Each note answers the one before it.<br>```<br>let total = 1 + 2;<br>```<br>\
        After the code there are a few more words, and then the end of it all.";
    let sent: Value = t
        .http
        .post(format!("{}/admin/note", peer.base))
        .json(&json!({"target": echo, "text": text, "visibility": "public"}))
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
    assert_eq!(msg.recipient_capabilities.max_text_chars, Some(140));
    // Follow the chain from the peer's note as Fedify received it.
    let chain = wait_for(30, "Fedify to receive the whole thread", || async {
        let got: Vec<Value> = peer_received(&t.http, &peer)
            .await
            .into_iter()
            .filter(|a| a["type"] == "Create")
            .map(|a| a["object"].clone())
            .collect();
        let mut chain: Vec<Value> = Vec::new();
        let mut parent = sent["note"].clone();
        while let Some(n) = got.iter().find(|n| n["inReplyTo"] == parent) {
            parent = n["id"].clone();
            chain.push(n.clone());
        }
        let n = chain.len();
        let done = n > 1
            && chain[n - 1]["content"]
                .as_str()
                .is_some_and(|c| c.contains(&format!("({n}/{n})")));
        done.then_some(chain)
    })
    .await;
    assert!(chain.len() >= 3, "{chain:#?}");
    let texts: Vec<String> = chain.iter().map(mapping::note_text).collect();
    for (i, shown) in texts.iter().enumerate() {
        assert!(shown.chars().count() <= 140, "{shown}");
        assert!(
            shown.ends_with(&format!("({}/{})", i + 1, chain.len())),
            "{shown}"
        );
    }
    let code: Vec<&String> = texts.iter().filter(|x| x.contains("```")).collect();
    assert_eq!(code.len(), 1, "{texts:#?}");
    assert!(
        code[0].contains("```\nlet total = 1 + 2;\n```"),
        "{}",
        code[0]
    );
    for n in &chain {
        assert_eq!(n["context"], chain[0]["context"]);
    }
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

/// The operator's main site at `https://127.0.0.1:{port}` (the handle domain): nothing of its
/// own, but `/.well-known/webfinger` proxied to switchboard, as the handle domain must serve
/// it. TLS with the test CA's certificate for 127.0.0.1; every request target is recorded.
struct MainSite {
    port: u16,
    upstream: Arc<Mutex<String>>,
    requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MainSite {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn main_site() -> MainSite {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<_> = CertificateDer::pem_file_iter(tls_fixture("tls.crt"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(tls_fixture("tls.key")).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let upstream = Arc::new(Mutex::new(String::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (up, seen) = (upstream.clone(), requests.clone());
    let http = reqwest::Client::new();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, up, seen, http) =
                (acceptor.clone(), up.clone(), seen.clone(), http.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut chunk = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                let target = String::from_utf8_lossy(&head)
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("/")
                    .to_owned();
                seen.lock().unwrap().push(target.clone());
                let (status, ctype, body) = if target.starts_with("/.well-known/webfinger") {
                    let url = format!("{}{target}", up.lock().unwrap());
                    let r = http.get(url).send().await.unwrap();
                    let ctype = r
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("application/octet-stream")
                        .to_owned();
                    (
                        r.status().as_u16(),
                        ctype,
                        r.bytes().await.unwrap().to_vec(),
                    )
                } else {
                    (404, "text/plain".to_owned(), b"the main site".to_vec())
                };
                let head = format!(
                    "HTTP/1.1 {status} Proxied\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(&body).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    MainSite {
        port,
        upstream,
        requests,
        task,
    }
}

fn tls_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/email")
        .join(name)
}

/// `server.handle_domain`: Fedify finds `@echo@{main site}` by WebFinger at the main site (which
/// proxies it to switchboard), gets the actor on switchboard's host, follows it, mentions it by
/// that handle and gets a reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_finds_an_agent_under_the_handle_domain() {
    if !interop() {
        return;
    }
    let site = main_site().await;
    let ca = tls_fixture("ca.crt");
    let peer = start_peer_with(&[("NODE_EXTRA_CA_CERTS", ca.to_str().unwrap())]).await;
    let handle_domain = format!("127.0.0.1:{}", site.port);
    let hd = handle_domain.clone();
    let s = setup(Engine::Sqlite, move |c| {
        c.server.handle_domain = Some(hd);
    })
    .await;
    let t = &s.t;
    *site.upstream.lock().unwrap() = t.base.clone();
    let echo = format!("{}/agents/echo", t.base);
    let handle = format!("@echo@{handle_domain}");
    let admin = |path: &str, body: Value| {
        let req = t
            .http
            .post(format!("{}/admin/{path}", peer.base))
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200, "{:?}", r.text().await);
            r.json::<Value>().await.unwrap()
        }
    };

    // The handle resolves, through the main site's WebFinger, to the actor on our host.
    let found = admin("lookup", json!({"target": handle})).await;
    assert_eq!(found["id"], echo, "{found}");
    assert_eq!(found["preferredUsername"], "echo");
    assert!(
        site.requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.starts_with("/.well-known/webfinger?")),
        "Fedify asked the main site"
    );

    // Follow by handle → Accept.
    admin("follow", json!({"target": handle})).await;
    let accept = peer_receives(&t.http, &peer, "Fedify to receive the Accept", |a| {
        a["type"] == "Accept"
    })
    .await;
    assert_eq!(accept["actor"], echo);

    // Mention by handle → the agent is addressed by it, and the reply comes back.
    let sent = admin(
        "note",
        json!({"target": handle, "text": "hello by handle", "visibility": "public", "mention": handle}),
    )
    .await;
    let msg = wait_for(30, "the agent call", || async {
        s.echo.seen.lock().unwrap().first().cloned()
    })
    .await;
    assert_eq!(msg.recipient, handle);
    let text = match &msg.parts[0] {
        switchboard::message::Part::Text(t) => t.content.clone(),
        p => panic!("{p:?}"),
    };
    assert_eq!(text, format!("{handle} hello by handle"));
    let reply = peer_receives(&t.http, &peer, "Fedify to receive the reply", |a| {
        a["type"] == "Create" && a["object"]["inReplyTo"] == sent["note"]
    })
    .await;
    assert_eq!(reply["actor"], echo);
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

/// Fedify reads an agent's profile (type, icon, image, fields, the featured collection and a
/// pinned note looked up at its id, the discovery switches), follows it, and, after restarts,
/// receives — and verifies — exactly one `Update` of the actor: none for a restart with the same
/// profile, one for a restart with a changed profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_reads_a_profile_and_gets_one_update_when_it_changes() {
    if !interop() {
        return;
    }
    let peer = start_peer().await;
    let avatar = super::profile::png_file();
    let first = super::profile::full_profile(&avatar);
    let bind: std::net::SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let start = |db, profile: switchboard::config::AgentActivityPubConfig| {
        crate::helpers::spawn_on(db, move |c, _| {
            c.server.bind = bind;
            super::profile::with_profile(c, profile);
        })
    };
    let mut t = start(
        crate::helpers::fresh_db(Engine::Sqlite).await,
        first.clone(),
    )
    .await;
    let echo = format!("{}/agents/echo", t.base);
    let http = t.http.clone();
    let r = http
        .post(format!("{}/admin/profile", peer.base))
        .json(&json!({"target": echo}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let profile: Value = r.json().await.unwrap();
    assert_eq!(profile["type"], "Person", "{profile}");
    assert_eq!(profile["icon"]["mediaType"], "image/png");
    assert!(
        profile["icon"]["url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{echo}/images/")),
        "{profile}"
    );
    assert_eq!(
        profile["image"],
        json!({"url": "https://cdn.example/banner.jpg", "mediaType": "image/jpeg"})
    );
    assert_eq!(profile["fields"][0]["name"], "Website");
    let website = profile["fields"][0]["value"].as_str().unwrap();
    assert!(
        website.contains("rel=\"me nofollow noopener noreferrer\""),
        "{website}"
    );
    assert_eq!(profile["fields"][1]["name"], "Source");
    assert_eq!(profile["featured"]["id"], format!("{echo}/featured"));
    assert_eq!(profile["featured"]["totalItems"], 2);
    assert_eq!(
        profile["featured"]["items"][0]["content"],
        "<p>Mention me to talk.</p>"
    );
    assert_eq!(profile["pinned"]["isNote"], true);
    assert_eq!(profile["pinned"]["attributedTo"], echo);
    assert_eq!(profile["pinned"]["content"], "<p>Mention me to talk.</p>");
    assert_eq!(profile["discoverable"], false);
    assert_eq!(profile["indexable"], true);

    // Fedify follows the agent.
    fedify_follows(&http, &peer, &echo).await;

    // Restarted with the same profile, then with a changed one.
    t.stop().await;
    let mut t = start(t.db.take(), first.clone()).await;
    t.stop().await;
    let mut changed = first.clone();
    changed.bot = true;
    changed.fields.pop();
    let t = start(t.db.take(), changed).await;
    let update = peer_receives(&http, &peer, "Fedify to receive the Update", |a| {
        a["type"] == "Update"
    })
    .await;
    assert_eq!(update["actor"], echo);
    assert_eq!(update["object"]["id"], echo);
    assert_eq!(update["object"]["type"], "Service");
    let db = t.open_db().await;
    wait_for(20, "the Update job done", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'done' AND payload LIKE '%#updates/%'",
            &[],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    let updates = peer_received(&http, &peer)
        .await
        .into_iter()
        .filter(|a| a["type"] == "Update")
        .count();
    assert_eq!(updates, 1, "one Update: none for the unchanged restart");
}

/// Fedify follows `echo`, which then moves to `next` (naming `echo` among its aliases): Fedify
/// verifies the `Move`, finds the alias on the new account and follows it, as Mastodon does;
/// it reads `movedTo` in the old actor's `Update` and the alias on the new actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_follows_an_agent_that_moved() {
    if !interop() {
        return;
    }
    let peer = start_peer().await;
    let bind: std::net::SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let base = format!("http://{bind}");
    let echo = format!("{base}/agents/echo");
    let next = format!("{base}/agents/next");
    let config: Arc<Mutex<Option<switchboard::Config>>> = Arc::default();
    let kept = Arc::clone(&config);
    let alias = echo.clone();
    let t = crate::helpers::spawn_app(Engine::Sqlite, move |c, _| {
        c.server.bind = bind;
        super::migration::add_agent(c, "next", vec![alias]);
        *kept.lock().unwrap() = Some(c.clone());
    })
    .await;
    let mut config = config.lock().unwrap().take().unwrap();
    config.server.public_url = Some(t.base.clone());
    fedify_follows(&t.http, &peer, &echo).await;

    let parts = switchboard::app::offline_parts(config).await.unwrap();
    let moved = switchboard::transports::activitypub::move_agent(&parts, "echo", &next)
        .await
        .unwrap();
    assert_eq!(moved.inboxes, 1);
    let moves = wait_for(30, "Fedify to follow the new account", || async {
        let m: Vec<Value> = t
            .http
            .get(format!("{}/admin/moves", peer.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (!m.is_empty()).then_some(m)
    })
    .await;
    assert_eq!(
        moves,
        vec![json!({"from": echo, "to": next, "followed": true})]
    );
    // `next` has Fedify's actor among its followers, and Fedify its Accept.
    let db = t.open_db().await;
    let alice = format!("{}/users/alice", peer.base);
    wait_for(30, "next's new follower", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_followers WHERE agent = 'next' AND actor = $1",
            &[Arg::Text(&alice)],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    peer_receives(&t.http, &peer, "Fedify to receive next's Accept", |a| {
        a["type"] == "Accept" && a["actor"] == next
    })
    .await;
    let profile = |target: String| {
        let http = t.http.clone();
        let url = format!("{}/admin/profile", peer.base);
        async move {
            http.post(url)
                .json(&json!({"target": target}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    // The old actor as Fedify read it from the verified Update (its own cache of the actor
    // is minutes old), and the new one as it looked it up.
    let update = peer_receives(&t.http, &peer, "Fedify to receive the Update", |a| {
        a["type"] == "Update" && a["actor"] == echo
    })
    .await;
    assert_eq!(update["object"]["movedTo"], next, "{update}");
    assert_eq!(profile(next.clone()).await["aliases"], json!([echo]));
    parts.db.close().await;
}

/// Fedify reads who may quote an agent's reply (`interactionPolicy`), asks to quote it
/// (`QuoteRequest` with its quoting note), gets an `Accept` and reads the `QuoteAuthorization`
/// it names: the agent, Fedify's note and the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedify_asks_to_quote_a_reply_and_gets_an_authorization() {
    if !interop() {
        return;
    }
    let peer = start_peer().await;
    let t = crate::helpers::spawn_app(Engine::Sqlite, |_, _| {}).await;
    let echo = format!("{}/agents/echo", t.base);
    let sent: Value = t
        .http
        .post(format!("{}/admin/note", peer.base))
        .json(&json!({"target": echo, "text": "hello", "visibility": "public"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reply = peer_receives(&t.http, &peer, "Fedify to receive the reply", |a| {
        a["type"] == "Create" && a["object"]["inReplyTo"] == sent["note"]
    })
    .await;
    let reply_id = reply["object"]["id"].as_str().unwrap().to_owned();
    let asked: Value = t
        .http
        .post(format!("{}/admin/quote", peer.base))
        .json(&json!({"target": reply_id}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(asked["canQuote"], json!([mapping::PUBLIC]), "{asked}");
    let accept = peer_receives(&t.http, &peer, "Fedify to receive the Accept", |a| {
        a["type"] == "Accept" && a["object"]["id"] == asked["id"]
    })
    .await;
    assert_eq!(accept["actor"], echo);
    let result = accept["result"].as_str().unwrap().to_owned();
    let read: Value = t
        .http
        .post(format!("{}/admin/authorization", peer.base))
        .json(&json!({"target": result}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        read,
        json!({
            "isAuthorization": true,
            "id": result,
            "attributedTo": echo,
            "interactingObject": asked["note"],
            "interactionTarget": reply_id,
        })
    );
}
