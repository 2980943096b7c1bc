//! The ActivityPub transport over real HTTP: discovery documents, the verified inbox with its
//! bad-input cases, the addressing rule, follows, deletes and updates, replies delivered signed
//! to a loopback "remote server", fixtures shaped like Mastodon, GoToSocial, Misskey,
//! Pleroma/Akkoma and Lemmy payloads, and the interop suite against a real Fedify peer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use switchboard::store::{Arg, Db};
use switchboard::transports::activitypub::{mapping, sig};

use crate::helpers::{Engine, RecordingAgent, TestApp, on_both_engines, spawn_app, wait_for};

const KEY_PEM: &str = include_str!("../fixtures/activitypub/test-key.pem");
const PUB_PEM: &str = include_str!("../fixtures/activitypub/test-key.pub.pem");

fn key_pair() -> ring::signature::RsaKeyPair {
    let der = switchboard::keys::spki_der_from_pem(KEY_PEM).unwrap();
    ring::signature::RsaKeyPair::from_pkcs8(&der).unwrap()
}

fn rsa_sign(msg: &[u8]) -> Vec<u8> {
    let kp = key_pair();
    let mut sig = vec![0; kp.public().modulus_len()];
    kp.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        msg,
        &mut sig,
    )
    .unwrap();
    sig
}

/// A non-JSON document: content type and bytes.
type Media = (String, Vec<u8>);

/// One recorded POST: path, headers, JSON body.
type Post = (String, HashMap<String, String>, Value);

/// One addressing case: name, to, cc, mentions, wakes echo, wakes helper.
type Case<'a> = (
    &'a str,
    Vec<String>,
    Vec<String>,
    Vec<(&'a str, String)>,
    bool,
    bool,
);

/// A loopback "remote server": serves documents by path (with a status) and records POSTs.
#[derive(Clone, Default)]
struct Remote {
    docs: Arc<Mutex<HashMap<String, (u16, String)>>>,
    /// Non-JSON documents: path → (content type, bytes).
    media: Arc<Mutex<HashMap<String, Media>>>,
    posts: Arc<Mutex<Vec<Post>>>,
    raw: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Statuses the next POSTs answer with (202 once empty).
    post_statuses: Arc<Mutex<Vec<u16>>>,
    gets: Arc<Mutex<Vec<String>>>,
    base: String,
}

async fn remote_get(r: web::Data<Remote>, req: HttpRequest) -> HttpResponse {
    let path = req.path().to_owned();
    r.gets.lock().unwrap().push(path.clone());
    if path.starts_with("/slow") {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if let Some((ct, bytes)) = r.media.lock().unwrap().get(&path) {
        return HttpResponse::Ok()
            .content_type(ct.as_str())
            .body(bytes.clone());
    }
    match r.docs.lock().unwrap().get(&path) {
        Some((status, body)) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(*status).unwrap())
                .content_type("application/activity+json")
                .body(body.clone())
        }
        None => HttpResponse::NotFound().finish(),
    }
}

async fn remote_post(r: web::Data<Remote>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    r.raw.lock().unwrap().push(body.to_vec());
    r.posts
        .lock()
        .unwrap()
        .push((req.path().to_owned(), headers, v));
    let next = {
        let mut q = r.post_statuses.lock().unwrap();
        if q.is_empty() { 202 } else { q.remove(0) }
    };
    HttpResponse::build(actix_web::http::StatusCode::from_u16(next).unwrap()).finish()
}

impl Remote {
    async fn start() -> Remote {
        let mut r = Remote::default();
        let data = r.clone();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(web::Data::new(data.clone()))
                .default_service(web::route().to(
                    |r: web::Data<Remote>, req: HttpRequest, body: web::Bytes| async move {
                        if req.method() == actix_web::http::Method::POST {
                            remote_post(r, req, body).await
                        } else {
                            remote_get(r, req).await
                        }
                    },
                ))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
        r.base = format!("http://{}", server.addrs()[0]);
        // The Arc'd maps are shared with the clone the server holds.
        tokio::spawn(server.run());
        r
    }

    fn actor_url(&self, name: &str) -> String {
        format!("{}/users/{name}", self.base)
    }

    fn key_id(&self, name: &str) -> String {
        format!("{}#main-key", self.actor_url(name))
    }

    /// Publishes an actor with the fixture key.
    fn add_actor(&self, name: &str) -> String {
        let id = self.actor_url(name);
        let doc = json!({
            "@context": ["https://www.w3.org/ns/activitystreams", "https://w3id.org/security/v1"],
            "id": id,
            "type": "Person",
            "preferredUsername": name,
            "name": format!("{name} remote"),
            "url": format!("{}/@{name}", self.base),
            "icon": {"type": "Image", "mediaType": "image/png", "url": format!("{}/avatars/{name}.png", self.base)},
            "inbox": format!("{id}/inbox"),
            "followers": format!("{id}/followers"),
            "endpoints": {"sharedInbox": format!("{}/inbox", self.base)},
            "publicKey": {"id": self.key_id(name), "owner": id, "publicKeyPem": PUB_PEM},
        });
        self.set(&format!("/users/{name}"), 200, &doc);
        id
    }

    fn set(&self, path: &str, status: u16, doc: &Value) {
        self.docs
            .lock()
            .unwrap()
            .insert(path.to_owned(), (status, doc.to_string()));
    }

    fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    fn raw_body_of(&self, id: &Value) -> Vec<u8> {
        let posts = self.posts();
        let i = posts.iter().position(|p| p.2["id"] == *id).unwrap();
        self.raw.lock().unwrap()[i].clone()
    }

    fn gets_of(&self, path: &str) -> usize {
        self.gets
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

fn now_s() -> i64 {
    use switchboard::clock::Clock as _;
    switchboard::clock::SystemClock.now_ms() / 1000
}

/// POSTs `body` to `url`, signed draft-cavage by `key_id` with the fixture key, `Date` shifted
/// by `skew` seconds.
async fn post_signed(
    http: &reqwest::Client,
    url: &str,
    body: &[u8],
    key_id: &str,
    skew: i64,
) -> reqwest::Response {
    let u = url::Url::parse(url).unwrap();
    let headers = sig::sign_cavage::<()>("POST", &u, Some(body), key_id, now_s() + skew, |m| {
        Ok(rsa_sign(m))
    })
    .unwrap();
    let mut req = http
        .post(url)
        .header("content-type", "application/activity+json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(k, v);
    }
    req.send().await.unwrap()
}

async fn count(db: &Db, sql: &str, args: &[Arg<'_>]) -> i64 {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let n: Option<N> = db.fetch_optional(sql, args).await.unwrap();
    n.map_or(0, |n| n.n)
}

fn note_create(
    remote: &Remote,
    author: &str,
    n: &str,
    to: Vec<String>,
    cc: Vec<String>,
    mentions: &[(&str, &str)],
    content: &str,
) -> Value {
    let actor = remote.actor_url(author);
    let id = format!("{}/notes/{n}", remote.base);
    let tags: Vec<Value> = mentions
        .iter()
        .map(|(href, name)| json!({"type": "Mention", "href": href, "name": name}))
        .collect();
    json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{id}/activity"),
        "type": "Create",
        "actor": actor,
        "to": to,
        "cc": cc,
        "object": {
            "id": id,
            "type": "Note",
            "attributedTo": actor,
            "to": to,
            "cc": cc,
            "content": content,
            "tag": tags,
            "published": "2026-11-22T06:00:00Z",
        }
    })
}

struct Setup {
    t: TestApp,
    remote: Remote,
    echo: Arc<RecordingAgent>,
    helper: Arc<RecordingAgent>,
}

async fn setup(engine: Engine, tweak: impl FnOnce(&mut switchboard::Config)) -> Setup {
    let remote = Remote::start().await;
    let echo = Arc::new(RecordingAgent::default());
    let helper = Arc::new(RecordingAgent::default());
    let (e, h) = (echo.clone(), helper.clone());
    let t = spawn_app(engine, move |c, o| {
        tweak(c);
        o.agents.push(("echo".into(), e));
        o.agents.push(("helper".into(), h));
    })
    .await;
    Setup {
        t,
        remote,
        echo,
        helper,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_documents() {
    let s = setup(Engine::Sqlite, |_| {}).await;
    let (t, http) = (&s.t, &s.t.http);
    let domain = t.domain();
    let actor = format!("{}/agents/echo", t.base);

    let wf: Value = http
        .get(format!(
            "{}/.well-known/webfinger?resource=acct:echo@{domain}",
            t.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(wf["subject"], format!("acct:echo@{domain}"));
    assert_eq!(wf["links"][0]["rel"], "self");
    assert_eq!(wf["links"][0]["href"], actor);
    assert_eq!(
        wf["links"][1]["rel"],
        "https://mentionable.dev/ns/rel/agent-card"
    );
    assert_eq!(
        wf["links"][2]["rel"],
        "http://webfinger.net/rel/profile-page"
    );
    assert_eq!(wf["links"][3]["rel"], "mailto");
    assert!(
        wf["links"][3]["href"]
            .as_str()
            .unwrap()
            .starts_with("mailto:echo@"),
        "{wf}"
    );
    // The agent-card link leads to the A2A transport's card for the same agent.
    let card = http
        .get(wf["links"][1]["href"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(card.status(), 200);
    let card: Value = card.json().await.unwrap();
    assert!(card["supportedInterfaces"].is_array(), "{card}");
    let by_url = http
        .get(format!("{}/.well-known/webfinger", t.base))
        .query(&[("resource", &actor)])
        .send()
        .await
        .unwrap();
    assert_eq!(by_url.status(), 200);
    for unknown in [
        format!("acct:nobody@{domain}"),
        "acct:echo@elsewhere.example".into(),
    ] {
        let r = http
            .get(format!("{}/.well-known/webfinger", t.base))
            .query(&[("resource", unknown)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    }

    let doc: Value = http
        .get(&actor)
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["type"], "Service");
    assert_eq!(doc["preferredUsername"], "echo");
    assert_eq!(doc["inbox"], format!("{actor}/inbox"));
    assert_eq!(doc["outbox"], format!("{actor}/outbox"));
    assert_eq!(doc["followers"], format!("{actor}/followers"));
    assert_eq!(doc["endpoints"]["sharedInbox"], format!("{}/inbox", t.base));
    assert_eq!(doc["publicKey"]["id"], format!("{actor}#main-key"));
    let spki =
        switchboard::keys::spki_der_from_pem(doc["publicKey"]["publicKeyPem"].as_str().unwrap())
            .unwrap();
    assert!(spki.len() > 270, "RSA-2048 SPKI");
    let mk = doc["assertionMethod"][0]["publicKeyMultibase"]
        .as_str()
        .unwrap();
    assert!(mk.starts_with("z6Mk"), "{mk}");
    assert_eq!(doc["assertionMethod"][0]["type"], "Multikey");
    assert!(
        doc["@context"]
            .to_string()
            .contains("https://www.w3.org/ns/activitystreams")
    );

    let page = http
        .get(&actor)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(&format!("@echo@{domain}"))
    );
    assert_eq!(
        http.get(format!("{}/agents/nobody", t.base))
            .header("accept", "application/activity+json")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    let ni: Value = http
        .get(format!("{}/.well-known/nodeinfo", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let href = ni["links"][0]["href"].as_str().unwrap().to_owned();
    let ni: Value = http.get(href).send().await.unwrap().json().await.unwrap();
    assert_eq!(ni["version"], "2.1");
    assert_eq!(ni["protocols"], json!(["activitypub"]));

    let inst: Value = http
        .get(format!("{}/actor", t.base))
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(inst["type"], "Application");
    assert!(
        inst["publicKey"]["publicKeyPem"]
            .as_str()
            .unwrap()
            .contains("PUBLIC KEY")
    );

    for coll in ["outbox", "followers"] {
        let c: Value = http
            .get(format!("{actor}/{coll}"))
            .header("accept", "application/activity+json")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(c["type"], "OrderedCollection");
        assert_eq!(c["totalItems"], 0);
    }
}

/// The RSA key `key_id` names, as its actor publishes it.
async fn published_key(http: &reqwest::Client, key_id: &str) -> sig::PublicKey {
    let actor: Value = http
        .get(key_id.split('#').next().unwrap())
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(actor["publicKey"]["id"], key_id);
    sig::PublicKey::Rsa(
        switchboard::keys::spki_der_from_pem(actor["publicKey"]["publicKeyPem"].as_str().unwrap())
            .unwrap(),
    )
}

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

on_both_engines!(bad_input_is_refused);

async fn bad_input_is_refused(engine: Engine) {
    let s = setup(engine, |c| {
        c.activitypub.max_body_bytes = 64 * 1024;
        c.activitypub.processing_timeout_ms = 1_500;
    })
    .await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{}/inbox", t.base);
    let d = t.domain();
    let key = remote.key_id("alice");
    let make = |n: &str| {
        note_create(
            remote,
            "alice",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hi</p>",
        )
    };
    let status = |r: reqwest::Response| r.status().as_u16();

    // Unsigned.
    let body = serde_json::to_vec(&make("b1")).unwrap();
    let r = t
        .http
        .post(&inbox)
        .header("content-type", "application/activity+json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 401, "unsigned");

    // Wrong signature: signed, then the signature bytes replaced.
    let u = url::Url::parse(&inbox).unwrap();
    let mut hs =
        sig::sign_cavage::<()>("POST", &u, Some(&body), &key, now_s(), |m| Ok(rsa_sign(m)))
            .unwrap();
    for h in &mut hs {
        if h.0 == "signature" {
            let other = base64_of(&rsa_sign(b"something else"));
            let cut = h.1.find("signature=\"").unwrap();
            h.1 = format!("{}signature=\"{other}\"", &h.1[..cut]);
        }
    }
    let mut req = t.http.post(&inbox).body(body.clone());
    for (k, v) in &hs {
        req = req.header(*k, v);
    }
    assert_eq!(status(req.send().await.unwrap()), 401, "wrong signature");
    // The failure forced one refetch of the key (rotation), and no more.
    assert_eq!(remote.gets_of("/users/alice"), 2);

    // Digest mismatch: headers signed for one body, another body sent.
    let mut req = t
        .http
        .post(&inbox)
        .body(serde_json::to_vec(&make("b2")).unwrap());
    let hs = sig::sign_cavage::<()>("POST", &u, Some(&body), &key, now_s(), |m| Ok(rsa_sign(m)))
        .unwrap();
    for (k, v) in &hs {
        req = req.header(*k, v);
    }
    assert_eq!(status(req.send().await.unwrap()), 401, "digest mismatch");

    // Stale and future dates.
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, -3 * 3600).await),
        401,
        "stale"
    );
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, 3 * 3600).await),
        401,
        "future"
    );

    // Unreachable key: the key URL answers 404.
    let ghost = make("b3");
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&ghost).unwrap(),
        &format!("{}/users/ghost#main-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 401, "key 404");
    // … or nobody listens there at all: worth a retry.
    let r = post_signed(
        &t.http,
        &inbox,
        &body,
        "http://127.0.0.1:9/users/x#main-key",
        0,
    )
    .await;
    assert_eq!(status(r), 503, "key host down");

    // A key server that does not answer in time: the request's time budget ends it, with 503.
    let started = std::time::Instant::now();
    let r = post_signed(
        &t.http,
        &inbox,
        &body,
        &format!("{}/slow/key#main-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 503, "processing time bounded");
    assert!(started.elapsed() < Duration::from_secs(4));

    // Actor and activity id on different hosts.
    let mut forged = make("b4");
    forged["id"] = json!("https://elsewhere.example/activities/1");
    assert_eq!(
        status(
            post_signed(
                &t.http,
                &inbox,
                &serde_json::to_vec(&forged).unwrap(),
                &key,
                0
            )
            .await
        ),
        403,
        "host mismatch"
    );

    // Signed by someone who is not the actor.
    remote.add_actor("bob");
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &remote.key_id("bob"), 0).await),
        401,
        "signer is not the actor"
    );

    // Oversized, malformed and deeply nested bodies.
    let mut big = make("b5");
    big["object"]["content"] = json!("x".repeat(70 * 1024));
    assert_eq!(
        status(post_signed(&t.http, &inbox, &serde_json::to_vec(&big).unwrap(), &key, 0).await),
        413,
        "oversized"
    );
    assert_eq!(
        status(post_signed(&t.http, &inbox, b"{\"id\": ", &key, 0).await),
        400,
        "malformed"
    );
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let mut nested = make("b6");
    nested["object"]["junk"] = serde_json::from_str(&deep).unwrap();
    assert_eq!(
        status(
            post_signed(
                &t.http,
                &inbox,
                &serde_json::to_vec(&nested).unwrap(),
                &key,
                0
            )
            .await
        ),
        400,
        "nested"
    );

    // Replay: the same activity twice is 202 both times and dispatched once.
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, 0).await),
        202
    );
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, 0).await),
        202
    );
    wait_for(10, "the call", || async {
        (!s.echo.seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.echo.seen.lock().unwrap().len(),
        1,
        "replay not dispatched"
    );
    let db = t.open_db().await;
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in'",
            &[]
        )
        .await,
        1
    );

    // A Delete from an actor that is gone (its key answers 410): 202, nothing else.
    remote.add_actor("gone");
    let follow = json!({"id": format!("{}/follows/g", remote.base), "type": "Follow", "actor": remote.actor_url("gone"), "object": echo});
    assert_eq!(
        status(
            post_signed(
                &t.http,
                &inbox,
                &serde_json::to_vec(&follow).unwrap(),
                &remote.key_id("gone"),
                0
            )
            .await
        ),
        202
    );
    let del = json!({"id": format!("{}/users/gone#delete", remote.base), "type": "Delete", "actor": remote.actor_url("gone"), "object": remote.actor_url("gone")});
    // A forged self-Delete signed with a key id that answers 404 while the actor is alive:
    // refused, the actor is kept, and the activity id is not burnt.
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&del).unwrap(),
        &format!("{}/users/nobody#main-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 401, "forged delete with a missing key");
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_followers", &[]).await,
        1,
        "the live actor's follow stays"
    );
    remote.set("/users/gone", 410, &json!({"type": "Tombstone"}));
    // The cached key would still verify; force the gone path by signing with a rotated key id.
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&del).unwrap(),
        &format!("{}/users/gone#other-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 202, "delete from a gone actor");
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_followers", &[]).await,
        0,
        "its follow is gone too"
    );
}

fn base64_of(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_on_a_private_address_is_never_fetched() {
    let remote = Remote::start().await;
    remote.add_actor("alice");
    let t = spawn_app(Engine::Sqlite, |c, _| c.net.allow_private_addresses = false).await;
    let echo = format!("{}/agents/echo", t.base);
    let c = note_create(
        &remote,
        "alice",
        "p1",
        vec![echo.clone()],
        vec![],
        &[(&echo, "@echo@x")],
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
    assert_eq!(r.status(), 401);
    assert_eq!(
        remote.gets_of("/users/alice"),
        0,
        "the guard refused before connecting"
    );
}

/// Payloads shaped like each server's (from their documented and observed formats, written
/// here, not copied) parse and map: who wakes, the text, visibility and thread key.
#[test]
fn fixtures_from_other_servers_parse_and_map() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/activitypub");
    let agent = "https://sb.example/agents/helper";
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let fx: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let activity = &fx["activity"];
        let expect = &fx["expect"];
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let mut note = activity["object"].clone();
        if activity["type"] == "Announce" {
            note = note["object"].clone();
        }
        if let Some(w) = expect.get("wakes") {
            let inner = if activity["type"] == "Announce" {
                &activity["object"]
            } else {
                activity
            };
            assert_eq!(
                mapping::wakes(&note, inner, agent),
                w.as_bool().unwrap(),
                "{name}: wakes"
            );
        }
        if let Some(text) = expect.get("text") {
            assert_eq!(
                mapping::note_text(&note),
                text.as_str().unwrap(),
                "{name}: text"
            );
        }
        if let Some(v) = expect.get("visibility") {
            let followers = format!(
                "{}/followers",
                mapping::iri(&activity["actor"]).unwrap_or_default()
            );
            assert_eq!(
                serde_json::to_value(mapping::visibility_of(&note, Some(&followers))).unwrap(),
                *v,
                "{name}: visibility"
            );
        }
        if let Some(th) = expect.get("thread") {
            assert_eq!(
                mapping::explicit_thread(&note).as_deref(),
                th.as_str(),
                "{name}: thread"
            );
        }
        if let Some(k) = expect.get("type") {
            assert_eq!(activity["type"], *k, "{name}: type");
        }
        seen += 1;
    }
    assert!(seen >= 10, "fixtures found: {seen}");
}

// ---------------------------------------------------------------------------------------------
// Interop with a real Fedify 2.3.6 server.

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

/// Publishes an Ed25519 Multikey for `name` next to its RSA key; returns the signing pair.
fn add_ed25519(remote: &Remote, name: &str) -> ring::signature::Ed25519KeyPair {
    use ring::signature::KeyPair as _;
    let doc =
        ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(doc.as_ref()).unwrap();
    let raw: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
    let path = format!("/users/{name}");
    let mut actor: Value = serde_json::from_str(&remote.docs.lock().unwrap()[&path].1).unwrap();
    let id = remote.actor_url(name);
    actor["assertionMethod"] = json!([{
        "id": format!("{id}#ed25519"),
        "type": "Multikey",
        "controller": id,
        "publicKeyMultibase": switchboard::transports::activitypub::proof::ed25519_multikey(&raw),
    }]);
    remote.set(&path, 200, &actor);
    pair
}

async fn post_rfc9421(
    http: &reqwest::Client,
    url: &str,
    body: &[u8],
    key_id: &str,
    alg: &str,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> reqwest::Response {
    let u = url::Url::parse(url).unwrap();
    let headers = sig::sign_rfc9421::<()>("POST", &u, Some(body), key_id, alg, now_s(), |m| {
        Ok(sign(m))
    })
    .unwrap();
    let mut req = http
        .post(url)
        .header("content-type", "application/activity+json")
        .body(body.to_vec());
    for (k, v) in headers {
        req = req.header(k, v);
    }
    req.send().await.unwrap()
}

on_both_engines!(rfc9421_and_object_proofs_authenticate);

async fn rfc9421_and_object_proofs_authenticate(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let ed = add_ed25519(remote, "alice");
    remote.add_actor("bob");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let d = t.domain();
    let make = |n: &str| {
        note_create(
            remote,
            "alice",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hi</p>",
        )
    };

    // RFC 9421 with the RSA key, and with the Ed25519 key.
    let body = serde_json::to_vec(&make("r1")).unwrap();
    let r = post_rfc9421(
        &t.http,
        &inbox,
        &body,
        &remote.key_id("alice"),
        "rsa-v1_5-sha256",
        rsa_sign,
    )
    .await;
    assert_eq!(r.status(), 202, "rfc9421 rsa");
    let body = serde_json::to_vec(&make("r2")).unwrap();
    let r = post_rfc9421(
        &t.http,
        &inbox,
        &body,
        &format!("{alice}#ed25519"),
        "ed25519",
        |m| ed.sign(m).as_ref().to_vec(),
    )
    .await;
    assert_eq!(r.status(), 202, "rfc9421 ed25519");
    // Tampered body under RFC 9421: Content-Digest mismatch.
    let u = url::Url::parse(&inbox).unwrap();
    let hs = sig::sign_rfc9421::<()>(
        "POST",
        &u,
        Some(&body),
        &remote.key_id("alice"),
        "rsa-v1_5-sha256",
        now_s(),
        |m| Ok(rsa_sign(m)),
    )
    .unwrap();
    let mut req = t
        .http
        .post(&inbox)
        .body(serde_json::to_vec(&make("r3")).unwrap());
    for (k, v) in hs {
        req = req.header(k, v);
    }
    assert_eq!(
        req.send().await.unwrap().status(),
        401,
        "content-digest mismatch"
    );

    // A forwarded activity: HTTP-signed by bob, carrying alice's FEP-8b32 proof.
    let at = |offset_s: i64| {
        use switchboard::clock::Clock as _;
        let ms = switchboard::clock::SystemClock.now_ms() + offset_s * 1000;
        switchboard::message::Timestamp::from_unix_millis(ms)
            .as_datetime()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let mut fwd = make("r4");
    switchboard::transports::activitypub::proof::attach(
        &mut fwd,
        &format!("{alice}#ed25519"),
        &at(-60),
        |m| ed.sign(m).as_ref().to_vec(),
    );
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&fwd).unwrap(),
        &remote.key_id("bob"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202, "forwarded with a proof");
    let msgs = wait_for(10, "three calls", || async {
        let v = s.echo.seen.lock().unwrap().clone();
        (v.len() == 3).then_some(v)
    })
    .await;
    let by_proof = msgs.iter().find(|m| m.raw["id"] == fwd["id"]).unwrap();
    assert_eq!(
        by_proof.sender.auth_method.as_str(),
        "ap-object-integrity-proof"
    );
    assert_eq!(
        by_proof.sender.key_id.as_deref(),
        Some(format!("{alice}#ed25519").as_str())
    );
    // The same forward with a tampered proof is refused.
    let mut bad = make("r5");
    switchboard::transports::activitypub::proof::attach(
        &mut bad,
        &format!("{alice}#ed25519"),
        &at(-60),
        |m| ed.sign(m).as_ref().to_vec(),
    );
    bad["object"]["content"] = json!("<p>changed</p>");
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&bad).unwrap(),
        &remote.key_id("bob"),
        0,
    )
    .await;
    assert_eq!(r.status(), 401, "tampered proof");

    // Proofs that are not current are refused, though their signatures verify: made more than
    // a week ago, dated in the future, past their `expires`, or not dated at all.
    for (i, what) in [
        "a stale proof",
        "a proof from the future",
        "an expired proof",
        "an undated proof",
    ]
    .into_iter()
    .enumerate()
    {
        let created = match i {
            0 => at(-8 * 86_400),
            1 => at(2 * 3_600),
            _ => at(-60),
        };
        let mut doc = make(&format!("r6-{i}"));
        // The proof is signed as it stands, so only its dates are wrong.
        let mut probe = doc.clone();
        switchboard::transports::activitypub::proof::attach(
            &mut probe,
            &format!("{alice}#ed25519"),
            &created,
            |_| vec![0; 64],
        );
        let mut config = probe["proof"].clone();
        let c = config.as_object_mut().unwrap();
        c.remove("proofValue");
        match i {
            2 => {
                c.insert("expires".into(), json!(at(-7_200)));
            }
            3 => {
                c.remove("created");
            }
            _ => {}
        }
        doc["proof"] =
            switchboard::transports::activitypub::proof::sign_config(&doc, config, |m| {
                ed.sign(m).as_ref().to_vec()
            });
        let r = post_signed(
            &t.http,
            &inbox,
            &serde_json::to_vec(&doc).unwrap(),
            &remote.key_id("bob"),
            0,
        )
        .await;
        assert_eq!(r.status(), 401, "{what}");
    }
    assert_eq!(
        s.echo.seen.lock().unwrap().len(),
        3,
        "none of them dispatched"
    );
}

on_both_engines!(deliveries_retry_stop_and_break);

async fn deliveries_retry_stop_and_break(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let d = t.domain();
    let key = remote.key_id("alice");
    let make = |n: &str| {
        note_create(
            remote,
            "alice",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hi</p>",
        )
    };
    let db = t.open_db().await;

    // 503 then 429 (with Retry-After 0) then accepted: retried to success.
    remote.post_statuses.lock().unwrap().extend([503, 429]);
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&make("q1")).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(20, "delivery after retries", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'done'",
            &[],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    assert_eq!(
        remote
            .posts()
            .iter()
            .filter(|p| p.2["type"] == "Create")
            .count(),
        3
    );

    // 400 is final: the job is dead after one attempt.
    remote.post_statuses.lock().unwrap().push(400);
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&make("q2")).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(20, "a dead job", || async {
        (count(&db, "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'dead' AND attempts = 1", &[]).await == 1).then_some(())
    })
    .await;
    assert_eq!(
        remote
            .posts()
            .iter()
            .filter(|p| p.2["type"] == "Create")
            .count(),
        4
    );

    // Every POST is a delivery attempt with its outcome, and every ap_deliver job shows in the
    // job metrics: 503 and 429 were retried, 202 delivered, 400 failed for good.
    let counted = [
        "switchboard_deliveries_total{transport=\"activitypub\",outcome=\"retry\"} 2",
        "switchboard_deliveries_total{transport=\"activitypub\",outcome=\"delivered\"} 1",
        "switchboard_deliveries_total{transport=\"activitypub\",outcome=\"failed\"} 1",
        "switchboard_jobs_total{kind=\"ap_deliver\",outcome=\"retry\"} 2",
        "switchboard_jobs_total{kind=\"ap_deliver\",outcome=\"done\"} 1",
        "switchboard_jobs_total{kind=\"ap_deliver\",outcome=\"dead\"} 1",
    ];
    wait_for(20, "the delivery metrics", || async {
        let text = metrics(t).await;
        counted
            .iter()
            .all(|needle| text.contains(needle))
            .then_some(())
    })
    .await;

    // A host failing for longer than breaker_days gets nothing sent.
    let host = mapping::host_of(&remote.base).unwrap();
    db.execute(
        "UPDATE ap_hosts SET failing_since = $1 WHERE host = $2",
        &[Arg::Int(1), Arg::Text(&host)],
    )
    .await
    .unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_hosts WHERE host = $1",
            &[Arg::Text(&host)]
        )
        .await,
        1
    );
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&make("q3")).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(20, "the breaker", || async {
        (count(&db, "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'dead' AND last_error LIKE '%failing for more than%'", &[]).await == 1).then_some(())
    })
    .await;
    assert_eq!(
        remote
            .posts()
            .iter()
            .filter(|p| p.2["type"] == "Create")
            .count(),
        4,
        "nothing sent"
    );
}

/// The metrics listener's exposition text.
async fn metrics(t: &TestApp) -> String {
    t.http
        .get(format!("http://{}/metrics", t.app().metrics_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
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

/// GoToSocial publishes its key as a separate document (`…/main-key`, no fragment) whose `owner`
/// is the actor; activitypub_federation signs `hs2019` with `(created)` and `(expires)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_documents_and_hs2019_with_created() {
    let s = setup(Engine::Sqlite, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let gts = remote.actor_url("gts");
    let key_id = format!("{gts}/main-key");
    remote.set(
        "/users/gts",
        200,
        &json!({"id": gts, "type": "Person", "preferredUsername": "gts", "inbox": format!("{gts}/inbox"),
                "publicKey": {"id": key_id, "owner": gts, "publicKeyPem": PUB_PEM}}),
    );
    remote.set(
        "/users/gts/main-key",
        200,
        &json!({"id": key_id, "owner": gts, "publicKeyPem": PUB_PEM}),
    );
    let echo = format!("{}/agents/echo", t.base);
    let d = t.domain();
    let c = note_create(
        remote,
        "gts",
        "g1",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi</p>",
    );
    let body = serde_json::to_vec(&c).unwrap();
    let r = post_signed(&t.http, &format!("{echo}/inbox"), &body, &key_id, 0).await;
    assert_eq!(r.status(), 202, "fragment-less key document");

    // What GoToSocial really serves at its key URL: a stub of the actor (`id` = actor URL)
    // whose `publicKey.owner` names the actor.
    let gts2 = remote.actor_url("gts2");
    let key2 = format!("{gts2}/main-key");
    let stub = json!({"id": gts2, "type": "Person", "preferredUsername": "gts2",
        "publicKey": {"id": key2, "owner": gts2, "publicKeyPem": PUB_PEM}});
    let mut full = stub.clone();
    full["inbox"] = json!(format!("{gts2}/inbox"));
    remote.set("/users/gts2", 200, &full);
    remote.set("/users/gts2/main-key", 200, &stub);
    let c2 = note_create(
        remote,
        "gts2",
        "g2",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi again</p>",
    );
    let body2 = serde_json::to_vec(&c2).unwrap();
    let r = post_signed(&t.http, &format!("{echo}/inbox"), &body2, &key2, 0).await;
    assert_eq!(r.status(), 202, "GoToSocial's stub-actor key document");

    // hs2019 over (request-target) (created) (expires) digest, as activitypub_federation signs.
    let c = note_create(
        remote,
        "gts",
        "g2",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi</p>",
    );
    let body = serde_json::to_vec(&c).unwrap();
    let (created, expires) = (now_s(), now_s() + 3600);
    let digest = sig::digest_header(&body);
    let path = "/agents/echo/inbox";
    let signing = format!(
        "(request-target): post {path}\n(created): {created}\n(expires): {expires}\ndigest: {digest}"
    );
    let header = format!(
        "keyId=\"{key_id}\",algorithm=\"hs2019\",created={created},expires={expires},headers=\"(request-target) (created) (expires) digest\",signature=\"{}\"",
        base64_of(&rsa_sign(signing.as_bytes()))
    );
    let r = t
        .http
        .post(format!("{}{path}", t.base))
        .header("digest", digest)
        .header("signature", header)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "hs2019 with (created)/(expires)");
    wait_for(10, "two calls", || async {
        (s.echo.seen.lock().unwrap().len() == 2).then_some(())
    })
    .await;
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

/// An actor's row in `ap_actors`: its document and when it was fetched.
async fn cached_actor(db: &Db, id: &str) -> (Value, i64) {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Row {
        doc: String,
        fetched_at: i64,
    }
    let row: Row = db
        .fetch_optional(
            "SELECT doc, fetched_at FROM ap_actors WHERE id = $1",
            &[Arg::Text(id)],
        )
        .await
        .unwrap()
        .unwrap();
    (serde_json::from_str(&row.doc).unwrap(), row.fetched_at)
}

on_both_engines!(key_claims_cannot_take_over_another_actor);

/// Actor-cache poisoning: an attacker's documents on its own host name another host's actor
/// (bob) — as the id of a key the attacker publishes, or as the `id`/owner of a key document —
/// and none of it may change what bob resolves to: his replies still go to his inbox, his own
/// signatures verify from his cached entry (no refetch), signatures under those keys never
/// authenticate bob, and his `ap_actors` row is untouched.
async fn key_claims_cannot_take_over_another_actor(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, victim) = (&s.t, &s.remote);
    let evil = Remote::start().await;
    let bob = victim.add_actor("bob");
    let bob_key = victim.key_id("bob");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{}/inbox", t.base);
    let d = t.domain();
    let db = t.open_db().await;
    let creates = |r: &Remote| {
        r.posts()
            .into_iter()
            .filter(|(_, _, b)| b["type"] == "Create")
            .count()
    };
    let both = || creates(victim) + creates(&evil);
    // A mention of echo by bob, signed with `key_id`.
    let mention = |n: &str, key_id: &str| {
        let c = note_create(
            victim,
            "bob",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            &format!("<p>{n}</p>"),
        );
        let body = serde_json::to_vec(&c).unwrap();
        let (http, inbox, key_id) = (t.http.clone(), inbox.clone(), key_id.to_owned());
        async move { post_signed(&http, &inbox, &body, &key_id, 0).await.status() }
    };
    // A Like by an evil actor, signed with its own key: authenticates it (caching its
    // document) and is otherwise ignored.
    let like = |name: &str| {
        let like = json!({"id": format!("{}/likes/{name}", evil.base), "type": "Like",
            "actor": evil.actor_url(name), "object": format!("{}/notes/x", evil.base)});
        let body = serde_json::to_vec(&like).unwrap();
        let (http, inbox, key_id) = (t.http.clone(), inbox.clone(), evil.key_id(name));
        async move { post_signed(&http, &inbox, &body, &key_id, 0).await.status() }
    };

    // bob mentions echo and is answered at his own inbox.
    assert_eq!(mention("b1", &bob_key).await, 202);
    wait_for(15, "the first reply", || async {
        (creates(victim) == 1).then_some(())
    })
    .await;
    let original = cached_actor(&db, &bob).await;
    assert_eq!(original.0["inbox"], format!("{bob}/inbox"));
    assert_eq!(victim.gets_of("/users/bob"), 1);

    // mallory publishes a second key whose id is bob's actor IRI, and authenticates.
    let mallory = evil.add_actor("mallory");
    let mut doc: Value =
        serde_json::from_str(&evil.docs.lock().unwrap()["/users/mallory"].1).unwrap();
    doc["publicKey"] = json!([
        doc["publicKey"].clone(),
        {"id": bob, "owner": mallory, "publicKeyPem": PUB_PEM},
    ]);
    evil.set("/users/mallory", 200, &doc);
    assert_eq!(like("mallory").await, 202);
    // bob's next mention is still answered at bob's inbox, not mallory's.
    assert_eq!(mention("b2", &bob_key).await, 202);
    wait_for(15, "the second reply", || async {
        (both() == 2).then_some(())
    })
    .await;
    assert_eq!(creates(victim), 2, "bob's reply went to bob");
    assert_eq!(creates(&evil), 0, "nothing went to mallory");

    // trudy publishes an Ed25519 key under bob's key id, and authenticates.
    evil.add_actor("trudy");
    let trudy_ed = {
        use ring::signature::KeyPair as _;
        let pkcs8 =
            ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
                .unwrap();
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let raw: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
        let mut doc: Value =
            serde_json::from_str(&evil.docs.lock().unwrap()["/users/trudy"].1).unwrap();
        doc["assertionMethod"] = json!([{
            "id": bob_key, "type": "Multikey", "controller": evil.actor_url("trudy"),
            "publicKeyMultibase": switchboard::transports::activitypub::proof::ed25519_multikey(&raw),
        }]);
        evil.set("/users/trudy", 200, &doc);
        pair
    };
    assert_eq!(like("trudy").await, 202);
    // bob's own signature still verifies from his cached entry: no refetch was needed.
    assert_eq!(mention("b3", &bob_key).await, 202);
    assert_eq!(
        victim.gets_of("/users/bob"),
        1,
        "bob's cached key was not displaced"
    );
    // trudy's key under bob's key id does not authenticate a Create as bob.
    let forged = note_create(
        victim,
        "bob",
        "b4",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>forged</p>",
    );
    let r = post_rfc9421(
        &t.http,
        &inbox,
        &serde_json::to_vec(&forged).unwrap(),
        &bob_key,
        "ed25519",
        |m| trudy_ed.sign(m).as_ref().to_vec(),
    )
    .await;
    assert_eq!(r.status(), 401, "trudy's key under bob's key id");
    // (That failure refetched bob once, as any failing signature does: key rotation.)
    let before = cached_actor(&db, &bob).await;
    let bob_gets = victim.gets_of("/users/bob");

    // Key documents on the evil host that name bob: a document claiming to be bob (its own
    // URL as owner), a key whose owner is bob, a GoToSocial-like stub whose id is bob. A
    // Create as bob signed under any of them is refused.
    let stub = |kid: &str| {
        json!({"id": bob, "type": "Person", "preferredUsername": "bob",
            "inbox": format!("{}/inbox", evil.base),
            "publicKey": {"id": kid, "publicKeyPem": PUB_PEM}})
    };
    let k1 = format!("{}/keys/k1", evil.base);
    let mut claims_bob = stub(&k1);
    claims_bob["owner"] = json!(k1);
    evil.set("/keys/k1", 200, &claims_bob);
    let k2 = format!("{}/keys/k2", evil.base);
    evil.set(
        "/keys/k2",
        200,
        &json!({"id": k2, "owner": bob, "publicKeyPem": PUB_PEM}),
    );
    let k3 = format!("{}/keys/k3", evil.base);
    evil.set("/keys/k3", 200, &stub(&k3));
    for (n, path, k) in [
        ("b5", "/keys/k1", &k1),
        ("b6", "/keys/k2", &k2),
        ("b7", "/keys/k3", &k3),
    ] {
        assert_eq!(mention(n, k).await, 401, "key document {k}");
        assert_eq!(victim.gets_of("/users/bob"), bob_gets, "{k} sent us to bob");
        assert_eq!(evil.gets_of(path), 1);
    }
    assert_eq!(
        cached_actor(&db, &bob).await,
        before,
        "bob's cached entry is untouched"
    );
    assert_eq!(
        victim.gets_of("/users/bob"),
        bob_gets,
        "nor was bob refetched"
    );

    // Through all of it bob's cached document stayed his own.
    assert_eq!(before.0, original.0);
    // Only bob's three genuine mentions were dispatched, and every reply went to bob.
    wait_for(15, "the third reply", || async {
        (both() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = s.echo.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|m| m.sender.address == format!("@bob@{}", mapping::host_of(&bob).unwrap()))
    );
    assert_eq!(creates(victim), 3);
    assert_eq!(creates(&evil), 0);
}
