//! A loopback "remote server" standing in for another fediverse host, and the helpers that sign
//! as its actors: draft-cavage and RFC 9421 requests with the fixture RSA key or an Ed25519
//! Multikey, and the `Create` of a note such a host would send.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use switchboard::transports::activitypub::sig;

const KEY_PEM: &str = include_str!("../../fixtures/activitypub/test-key.pem");
/// The fixture RSA public key every remote actor publishes.
pub(crate) const PUB_PEM: &str = include_str!("../../fixtures/activitypub/test-key.pub.pem");

fn key_pair() -> ring::signature::RsaKeyPair {
    let der = switchboard::keys::spki_der_from_pem(KEY_PEM).unwrap();
    ring::signature::RsaKeyPair::from_pkcs8(&der).unwrap()
}

/// Signs `msg` RSA-SHA256 with the fixture key.
pub(crate) fn rsa_sign(msg: &[u8]) -> Vec<u8> {
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
pub(crate) type Post = (String, HashMap<String, String>, Value);

/// A loopback "remote server": serves documents by path (with a status) and records POSTs.
#[derive(Clone, Default)]
pub(crate) struct Remote {
    pub(crate) docs: Arc<Mutex<HashMap<String, (u16, String)>>>,
    /// Non-JSON documents: path → (content type, bytes).
    pub(crate) media: Arc<Mutex<HashMap<String, Media>>>,
    posts: Arc<Mutex<Vec<Post>>>,
    raw: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Statuses the next POSTs answer with (202 once empty).
    pub(crate) post_statuses: Arc<Mutex<Vec<u16>>>,
    gets: Arc<Mutex<Vec<String>>>,
    /// Endings of object ids: the first POST of an activity whose object's id ends so is
    /// answered 503 (each ending once).
    pub(crate) refuse_once: Arc<Mutex<Vec<String>>>,
    /// Paths answered only after a while.
    pub(crate) delays: Arc<Mutex<HashMap<String, Duration>>>,
    pub(crate) base: String,
}

async fn remote_get(r: web::Data<Remote>, req: HttpRequest) -> HttpResponse {
    let path = req.path().to_owned();
    r.gets.lock().unwrap().push(path.clone());
    if path.starts_with("/slow") {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let delay = r.delays.lock().unwrap().get(&path).copied();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
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
    let object_id = v["object"]["id"].as_str().unwrap_or_default().to_owned();
    r.raw.lock().unwrap().push(body.to_vec());
    r.posts
        .lock()
        .unwrap()
        .push((req.path().to_owned(), headers, v));
    let refused = {
        let mut endings = r.refuse_once.lock().unwrap();
        let hit = endings.iter().position(|e| object_id.ends_with(e.as_str()));
        hit.map(|i| endings.remove(i)).is_some()
    };
    let next = if refused {
        503
    } else {
        let mut q = r.post_statuses.lock().unwrap();
        if q.is_empty() { 202 } else { q.remove(0) }
    };
    HttpResponse::build(actix_web::http::StatusCode::from_u16(next).unwrap()).finish()
}

impl Remote {
    /// Binds port 0 on loopback and serves until the test ends.
    pub(crate) async fn start() -> Remote {
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

    /// The actor IRI of `name` on this host.
    pub(crate) fn actor_url(&self, name: &str) -> String {
        format!("{}/users/{name}", self.base)
    }

    /// The key id of `name`'s fixture key.
    pub(crate) fn key_id(&self, name: &str) -> String {
        format!("{}#main-key", self.actor_url(name))
    }

    /// Publishes an actor with the fixture key.
    pub(crate) fn add_actor(&self, name: &str) -> String {
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

    /// Publishes an actor with the fixture key, as a bot (`type: Service`).
    pub(crate) fn add_bot(&self, name: &str) -> String {
        let id = self.add_actor(name);
        let path = format!("/users/{name}");
        let mut doc: Value = {
            let docs = self.docs.lock().unwrap();
            serde_json::from_str(&docs[&path].1).unwrap()
        };
        doc["type"] = json!("Service");
        self.set(&path, 200, &doc);
        id
    }

    /// Serves `doc` at `path` with `status`.
    pub(crate) fn set(&self, path: &str, status: u16, doc: &Value) {
        self.docs
            .lock()
            .unwrap()
            .insert(path.to_owned(), (status, doc.to_string()));
    }

    /// Every POST received so far.
    pub(crate) fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    /// The bytes of the POST whose body has this `id`.
    pub(crate) fn raw_body_of(&self, id: &Value) -> Vec<u8> {
        let posts = self.posts();
        let i = posts.iter().position(|p| p.2["id"] == *id).unwrap();
        self.raw.lock().unwrap()[i].clone()
    }

    /// How many GETs asked for `path`.
    pub(crate) fn gets_of(&self, path: &str) -> usize {
        self.gets
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

/// The wall clock in unix seconds, as signatures are dated.
pub(crate) fn now_s() -> i64 {
    use switchboard::clock::Clock as _;
    switchboard::clock::SystemClock.now_ms() / 1000
}

/// POSTs `body` to `url`, signed draft-cavage by `key_id` with the fixture key, `Date` shifted
/// by `skew` seconds.
pub(crate) async fn post_signed(
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

/// A `Create` of note `n` by `author` on `remote`, addressed and tagged as given.
pub(crate) fn note_create(
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

/// The RSA key `key_id` names, as its actor publishes it.
pub(crate) async fn published_key(http: &reqwest::Client, key_id: &str) -> sig::PublicKey {
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

/// Standard base64 with padding.
pub(crate) fn base64_of(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Publishes an Ed25519 Multikey for `name` next to its RSA key; returns the signing pair.
pub(crate) fn add_ed25519(remote: &Remote, name: &str) -> ring::signature::Ed25519KeyPair {
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

/// POSTs `body` to `url`, signed RFC 9421 by `key_id` with `alg` through `sign`.
pub(crate) async fn post_rfc9421(
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

/// The key id that signed `post` (delivered to `remote`) over the bytes sent, after checking
/// the signature with the key published at that id.
pub(crate) async fn signed_by(http: &reqwest::Client, remote: &Remote, post: &Post) -> String {
    let (path, headers, body) = post;
    let raw = remote.raw_body_of(&body["id"]);
    let lookup = |n: &str| headers.get(n).cloned();
    let target = format!("{}{path}", remote.base);
    let view = sig::RequestView {
        method: "POST",
        path_and_query: path,
        target_uri: &target,
        header: &lookup,
    };
    let parsed = sig::parse_any(&view, Some(&raw), now_s()).unwrap();
    assert!(parsed.verify(&published_key(http, &parsed.key_id).await));
    parsed.key_id
}
