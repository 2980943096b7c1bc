//! switchboard's interop peer on the Rust fediverse stack: one actor, `alice`, built on the
//! `activitypub_federation` crate (Lemmy's), which signs and verifies draft-cavage HTTP
//! signatures through `http-signature-normalization`, fetches with `Accept:
//! application/activity+json` and refuses documents whose `id` is not their URL.
//!
//! Run: `ap-rs-peer <port> [--mastodon-compat]` (or `PEER_PORT`). With `--mastodon-compat` the
//! crate signs as Lemmy does towards Mastodon (`http_signature_compat`: `Date` and `Host`
//! covered, no `(created)`); without, with its defaults (`hs2019` over `(request-target)
//! (created) (expires)` and the headers present, which for a GET leaves `Host` out). It serves `http://localhost:<port>` on 127.0.0.1
//! (the crate wants a domain, not an IP, and plain http only in debug mode) and prints
//! `READY <port>` once listening. Besides the federation routes it answers a small control API:
//!
//! - `POST /admin/follow {"target": "name@host"}`: WebFinger lookup, then `Follow`.
//! - `POST /admin/note {"target": "name@host" | actor IRI, "text", "visibility": "public" |
//!   "direct", "in_reply_to"?}`: a mentioning `Create(Note)`; answers `{"note", "activity"}`.
//! - `POST /admin/fetch {"url"}`: the crate's signed fetch of a document (content type and `id`
//!   checked by the crate); answers the document.
//! - `POST /admin/profile {"target": "name@host"}`: the actor's profile as the crate reads it
//!   into typed documents (type, `icon`, `image`, `attachment` fields, `featured` fetched as an
//!   `OrderedCollection` of notes, the first note dereferenced at its id, `discoverable`,
//!   `indexable`); answers what it read.
//! - `GET /admin/received`: every activity whose signature and content the crate verified.
//! - `GET /admin/rejected`: why the inbox refused what it refused.
//! - `GET /admin/following`: the actors whose `Accept` of our `Follow` arrived and verified.

// switchboard's clippy.toml (found up the tree) bans wall-clock reads in favour of its test
// clock; this separate program has no such clock, and the crate reads the wall clock anyway.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use activitypub_federation::activity_sending::SendActivityTask;
use activitypub_federation::axum::inbox::{receive_activity, ActivityData};
use activitypub_federation::axum::json::FederationJson;
use activitypub_federation::config::{Data, FederationConfig, FederationMiddleware};
use activitypub_federation::fetch::fetch_object_http;
use activitypub_federation::fetch::object_id::ObjectId;
use activitypub_federation::fetch::webfinger::{
    build_webfinger_response, extract_webfinger_name, webfinger_resolve_actor,
};
use activitypub_federation::http_signatures::generate_actor_keypair;
use activitypub_federation::kinds::activity::{AcceptType, CreateType, FollowType};
use activitypub_federation::kinds::collection::OrderedCollectionType;
use activitypub_federation::kinds::object::{ImageType, NoteType};
use activitypub_federation::protocol::context::WithContext;
use activitypub_federation::protocol::public_key::PublicKey;
use activitypub_federation::protocol::verification::verify_domains_match;
use activitypub_federation::traits::{ActivityHandler, Actor, Object};
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use url::Url;

const PUBLIC: &str = "https://www.w3.org/ns/activitystreams#Public";
const LOCAL_NAME: &str = "alice";

/// Any failure: a message, answered as 400 by the inbox and the control API.
#[derive(Debug)]
struct Fail(String);

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail(e.to_string())
    }
}

fn fail(msg: impl Into<String>) -> Fail {
    Fail(msg.into())
}

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, self.0).into_response()
    }
}

/// The peer's state: its own actor, what it learnt, what it received.
#[derive(Clone)]
struct Peer(Arc<State>);

struct State {
    origin: String,
    users: Mutex<HashMap<Url, User>>,
    notes: Mutex<HashMap<Url, Note>>,
    /// Follow id → (followed actor, accepted).
    follows: Mutex<HashMap<Url, (Url, bool)>>,
    received: Mutex<Vec<Value>>,
    rejected: Mutex<Vec<String>>,
    next: AtomicU64,
}

impl Peer {
    fn url(&self, path: &str) -> Url {
        Url::parse(&format!("{}{path}", self.0.origin)).expect("a URL on our origin")
    }

    fn fresh_id(&self, kind: &str) -> Url {
        let n = self.0.next.fetch_add(1, Ordering::Relaxed);
        self.url(&format!("/{kind}/{n}"))
    }

    fn me(&self) -> User {
        self.0.users.lock().unwrap()[&self.url(&format!("/users/{LOCAL_NAME}"))].clone()
    }
}

/// An actor: ours (with its private key) or one fetched from elsewhere.
#[derive(Debug, Clone)]
struct User {
    id: Url,
    username: String,
    inbox: Url,
    shared_inbox: Option<Url>,
    public_key_pem: String,
    private_key_pem: Option<String>,
    fetched_at: DateTime<Utc>,
}

/// The actor types a fediverse server publishes (switchboard's agents are `Service`s).
#[derive(Debug, Clone, Serialize, Deserialize)]
enum ActorType {
    Person,
    Service,
    Application,
    Group,
    Organization,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Endpoints {
    shared_inbox: Option<Url>,
}

/// An actor document as it travels.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActorDoc {
    #[serde(rename = "type")]
    kind: ActorType,
    id: ObjectId<User>,
    preferred_username: String,
    inbox: Url,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoints: Option<Endpoints>,
    public_key: PublicKey,
}

#[async_trait::async_trait]
impl Object for User {
    type DataType = Peer;
    type Kind = ActorDoc;
    type Error = Fail;

    fn last_refreshed_at(&self) -> Option<DateTime<Utc>> {
        Some(self.fetched_at)
    }

    async fn read_from_id(id: Url, data: &Data<Peer>) -> Result<Option<Self>, Fail> {
        Ok(data.0.users.lock().unwrap().get(&id).cloned())
    }

    async fn into_json(self, _: &Data<Peer>) -> Result<ActorDoc, Fail> {
        let public_key = self.public_key();
        Ok(ActorDoc {
            kind: ActorType::Person,
            id: self.id.into(),
            preferred_username: self.username,
            inbox: self.inbox,
            endpoints: Some(Endpoints {
                shared_inbox: self.shared_inbox,
            }),
            public_key,
        })
    }

    async fn verify(doc: &ActorDoc, expected: &Url, _: &Data<Peer>) -> Result<(), Fail> {
        verify_domains_match(doc.id.inner(), expected)?;
        if doc.public_key.owner != *doc.id.inner() {
            return Err(fail("the key's owner is not the actor"));
        }
        Ok(())
    }

    async fn from_json(doc: ActorDoc, data: &Data<Peer>) -> Result<Self, Fail> {
        let user = User {
            id: doc.id.into_inner(),
            username: doc.preferred_username,
            inbox: doc.inbox,
            shared_inbox: doc.endpoints.and_then(|e| e.shared_inbox),
            public_key_pem: doc.public_key.public_key_pem,
            private_key_pem: None,
            fetched_at: Utc::now(),
        };
        data.0
            .users
            .lock()
            .unwrap()
            .insert(user.id.clone(), user.clone());
        Ok(user)
    }
}

impl Actor for User {
    fn id(&self) -> Url {
        self.id.clone()
    }

    fn public_key_pem(&self) -> &str {
        &self.public_key_pem
    }

    fn private_key_pem(&self) -> Option<String> {
        self.private_key_pem.clone()
    }

    fn inbox(&self) -> Url {
        self.inbox.clone()
    }

    fn shared_inbox(&self) -> Option<Url> {
        self.shared_inbox.clone()
    }
}

/// A note, ours or received.
#[derive(Debug, Clone)]
struct Note(NoteDoc);

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NoteDoc {
    #[serde(rename = "type")]
    kind: NoteType,
    id: ObjectId<Note>,
    attributed_to: ObjectId<User>,
    content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    in_reply_to: Option<Url>,
    /// Everything else (addressing, tags, `context`, `conversation`, ...), kept as sent.
    #[serde(flatten)]
    rest: Map<String, Value>,
}

#[async_trait::async_trait]
impl Object for Note {
    type DataType = Peer;
    type Kind = NoteDoc;
    type Error = Fail;

    async fn read_from_id(id: Url, data: &Data<Peer>) -> Result<Option<Self>, Fail> {
        Ok(data.0.notes.lock().unwrap().get(&id).cloned())
    }

    async fn into_json(self, _: &Data<Peer>) -> Result<NoteDoc, Fail> {
        Ok(self.0)
    }

    async fn verify(doc: &NoteDoc, expected: &Url, _: &Data<Peer>) -> Result<(), Fail> {
        verify_domains_match(doc.id.inner(), expected)?;
        verify_domains_match(doc.attributed_to.inner(), expected)?;
        Ok(())
    }

    async fn from_json(doc: NoteDoc, data: &Data<Peer>) -> Result<Self, Fail> {
        data.0
            .notes
            .lock()
            .unwrap()
            .insert(doc.id.inner().clone(), Note(doc.clone()));
        Ok(Note(doc))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Follow {
    id: Url,
    #[serde(rename = "type")]
    kind: FollowType,
    actor: ObjectId<User>,
    object: ObjectId<User>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Accept {
    id: Url,
    #[serde(rename = "type")]
    kind: AcceptType,
    actor: ObjectId<User>,
    object: Follow,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Create {
    id: Url,
    #[serde(rename = "type")]
    kind: CreateType,
    actor: ObjectId<User>,
    object: NoteDoc,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// What the inbox takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Inbound {
    Accept(Accept),
    Create(Create),
}

#[async_trait::async_trait]
impl ActivityHandler for Follow {
    type DataType = Peer;
    type Error = Fail;

    fn id(&self) -> &Url {
        &self.id
    }

    fn actor(&self) -> &Url {
        self.actor.inner()
    }

    async fn verify(&self, _: &Data<Peer>) -> Result<(), Fail> {
        Err(fail("this peer only sends follows"))
    }

    async fn receive(self, _: &Data<Peer>) -> Result<(), Fail> {
        Err(fail("this peer only sends follows"))
    }
}

#[async_trait::async_trait]
impl ActivityHandler for Accept {
    type DataType = Peer;
    type Error = Fail;

    fn id(&self) -> &Url {
        &self.id
    }

    fn actor(&self) -> &Url {
        self.actor.inner()
    }

    /// The accepted Follow is one we sent, to the actor who accepts it.
    async fn verify(&self, data: &Data<Peer>) -> Result<(), Fail> {
        if self.object.actor.inner() != &data.me().id {
            return Err(fail("the accepted Follow is not ours"));
        }
        match data.0.follows.lock().unwrap().get(&self.object.id) {
            Some((target, _)) if target == self.actor.inner() => Ok(()),
            Some(_) => Err(fail("the Follow was not sent to the accepting actor")),
            None => Err(fail("no such Follow was sent")),
        }
    }

    async fn receive(self, data: &Data<Peer>) -> Result<(), Fail> {
        if let Some(f) = data.0.follows.lock().unwrap().get_mut(&self.object.id) {
            f.1 = true;
        }
        data.0
            .received
            .lock()
            .unwrap()
            .push(serde_json::to_value(&self)?);
        Ok(())
    }
}

#[async_trait::async_trait]
impl ActivityHandler for Create {
    type DataType = Peer;
    type Error = Fail;

    fn id(&self) -> &Url {
        &self.id
    }

    fn actor(&self) -> &Url {
        self.actor.inner()
    }

    /// The note is the actor's, on its host; a reply must answer a note of ours that exists.
    async fn verify(&self, data: &Data<Peer>) -> Result<(), Fail> {
        Note::verify(&self.object, &self.id, data).await?;
        if self.object.attributed_to.inner() != self.actor.inner() {
            return Err(fail("the note is not the actor's"));
        }
        if let Some(parent) = &self.object.in_reply_to {
            let parent: ObjectId<Note> = parent.clone().into();
            if !parent.is_local(data) {
                return Err(fail("a reply to a note that is not ours"));
            }
            parent.dereference_local(data).await?;
        }
        Ok(())
    }

    async fn receive(self, data: &Data<Peer>) -> Result<(), Fail> {
        Note::from_json(self.object.clone(), data).await?;
        data.0
            .received
            .lock()
            .unwrap()
            .push(serde_json::to_value(&self)?);
        Ok(())
    }
}

#[async_trait::async_trait]
impl ActivityHandler for Inbound {
    type DataType = Peer;
    type Error = Fail;

    fn id(&self) -> &Url {
        match self {
            Inbound::Accept(a) => a.id(),
            Inbound::Create(c) => c.id(),
        }
    }

    fn actor(&self) -> &Url {
        match self {
            Inbound::Accept(a) => a.actor(),
            Inbound::Create(c) => c.actor(),
        }
    }

    async fn verify(&self, data: &Data<Peer>) -> Result<(), Fail> {
        match self {
            Inbound::Accept(a) => a.verify(data).await,
            Inbound::Create(c) => c.verify(data).await,
        }
    }

    async fn receive(self, data: &Data<Peer>) -> Result<(), Fail> {
        match self {
            Inbound::Accept(a) => a.receive(data).await,
            Inbound::Create(c) => c.receive(data).await,
        }
    }
}

/// Signs `activity` as our actor and POSTs it to `inbox`, through the crate.
async fn send<A>(activity: A, inbox: Url, data: &Data<Peer>) -> Result<(), Fail>
where
    A: ActivityHandler + Serialize + Debug + Send + Sync,
{
    let me = data.me();
    let activity = WithContext::new_default(activity);
    for task in SendActivityTask::prepare(&activity, &me, vec![inbox], data).await? {
        task.sign_and_send(data).await?;
    }
    Ok(())
}

/// An actor by `name@host` (WebFinger) or by IRI.
async fn lookup(target: &str, data: &Data<Peer>) -> Result<User, Fail> {
    if target.starts_with("http://") || target.starts_with("https://") {
        ObjectId::<User>::parse(target)?.dereference(data).await
    } else {
        webfinger_resolve_actor::<Peer, User>(target.trim_start_matches('@'), data).await
    }
}

async fn inbox(data: Data<Peer>, activity: ActivityData) -> Response {
    match receive_activity::<WithContext<Inbound>, User, Peer>(activity, &data).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(e) => {
            eprintln!("inbox refused: {e}");
            data.0.rejected.lock().unwrap().push(e.0.clone());
            e.into_response()
        }
    }
}

async fn actor(Path(name): Path<String>, data: Data<Peer>) -> Result<Response, Fail> {
    if name != LOCAL_NAME {
        return Ok(StatusCode::NOT_FOUND.into_response());
    }
    let doc = data.me().into_json(&data).await?;
    let context = json!([
        "https://www.w3.org/ns/activitystreams",
        "https://w3id.org/security/v1"
    ]);
    Ok(FederationJson(WithContext::new(doc, context)).into_response())
}

async fn note(Path(n): Path<String>, data: Data<Peer>) -> Result<Response, Fail> {
    let id = data.url(&format!("/notes/{n}"));
    match ObjectId::<Note>::from(id).dereference_local(&data).await {
        Ok(note) => {
            let doc = note.into_json(&data).await?;
            Ok(FederationJson(WithContext::new_default(doc)).into_response())
        }
        Err(_) => Ok(StatusCode::NOT_FOUND.into_response()),
    }
}

#[derive(Deserialize)]
struct WebfingerQuery {
    resource: String,
}

async fn webfinger(Query(q): Query<WebfingerQuery>, data: Data<Peer>) -> Result<Response, Fail> {
    let name = extract_webfinger_name(&q.resource, &data)?;
    if name != LOCAL_NAME {
        return Ok(StatusCode::NOT_FOUND.into_response());
    }
    Ok(Json(build_webfinger_response(q.resource.clone(), data.me().id)).into_response())
}

#[derive(Deserialize)]
struct FollowCmd {
    target: String,
}

async fn admin_follow(data: Data<Peer>, Json(cmd): Json<FollowCmd>) -> Result<Json<Value>, Fail> {
    let target = lookup(&cmd.target, &data).await?;
    let follow = Follow {
        id: data.fresh_id("follows"),
        kind: FollowType::Follow,
        actor: data.me().id.into(),
        object: target.id.clone().into(),
    };
    data.0
        .follows
        .lock()
        .unwrap()
        .insert(follow.id.clone(), (target.id.clone(), false));
    let answer = json!({"id": follow.id, "actor": target.id});
    send(follow, target.shared_inbox_or_inbox(), &data).await?;
    Ok(Json(answer))
}

#[derive(Deserialize)]
struct NoteCmd {
    target: String,
    text: String,
    #[serde(default)]
    visibility: Option<String>,
    #[serde(default)]
    in_reply_to: Option<Url>,
}

async fn admin_note(data: Data<Peer>, Json(cmd): Json<NoteCmd>) -> Result<Json<Value>, Fail> {
    let target = lookup(&cmd.target, &data).await?;
    let me = data.me();
    let host = target
        .id
        .host_str()
        .map(|h| match target.id.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_owned(),
        })
        .unwrap_or_default();
    let (to, cc) = if cmd.visibility.as_deref() == Some("direct") {
        (json!([target.id]), json!([]))
    } else {
        (json!([PUBLIC]), json!([target.id]))
    };
    let id = data.fresh_id("notes");
    let mut rest = Map::new();
    rest.insert("to".into(), to.clone());
    rest.insert("cc".into(), cc.clone());
    rest.insert(
        "tag".into(),
        json!([{"type": "Mention", "href": target.id, "name": format!("@{}@{host}", target.username)}]),
    );
    rest.insert("published".into(), json!(Utc::now().to_rfc3339()));
    let doc = NoteDoc {
        kind: NoteType::Note,
        id: id.clone().into(),
        attributed_to: me.id.clone().into(),
        content: format!(
            "<p><span class=\"h-card\"><a href=\"{}\" class=\"u-url mention\">@<span>{}</span></a></span> {}</p>",
            target.id, target.username, cmd.text
        ),
        in_reply_to: cmd.in_reply_to,
        rest,
    };
    Note::from_json(doc.clone(), &data).await?;
    let activity_id = data.url(&format!("{}/activity", id.path()));
    let mut rest = Map::new();
    rest.insert("to".into(), to);
    rest.insert("cc".into(), cc);
    let create = Create {
        id: activity_id.clone(),
        kind: CreateType::Create,
        actor: me.id.into(),
        object: doc,
        rest,
    };
    send(create, target.shared_inbox_or_inbox(), &data).await?;
    Ok(Json(json!({"note": id, "activity": activity_id})))
}

#[derive(Deserialize)]
struct FetchCmd {
    url: Url,
}

async fn admin_fetch(data: Data<Peer>, Json(cmd): Json<FetchCmd>) -> Result<Json<Value>, Fail> {
    Ok(Json(
        fetch_object_http::<Peer, Value>(&cmd.url, &data)
            .await?
            .object,
    ))
}

/// A profile image (`icon`, `image`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImageDoc {
    #[serde(rename = "type")]
    kind: ImageType,
    url: Url,
    media_type: Option<String>,
}

/// A profile field (`attachment` of `PropertyValue`s).
#[derive(Debug, Serialize, Deserialize)]
struct FieldDoc {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    value: String,
}

/// What a profile adds to an actor document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProfileDoc {
    #[serde(rename = "type")]
    kind: ActorType,
    icon: Option<ImageDoc>,
    image: Option<ImageDoc>,
    #[serde(default)]
    attachment: Vec<FieldDoc>,
    featured: Option<Url>,
    discoverable: Option<bool>,
    indexable: Option<bool>,
}

/// The `featured` collection: notes, embedded.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FeaturedDoc {
    #[serde(rename = "type")]
    _kind: OrderedCollectionType,
    total_items: u64,
    ordered_items: Vec<NoteDoc>,
}

#[derive(Deserialize)]
struct ProfileCmd {
    target: String,
}

async fn admin_profile(data: Data<Peer>, Json(cmd): Json<ProfileCmd>) -> Result<Json<Value>, Fail> {
    let user = lookup(&cmd.target, &data).await?;
    let doc = fetch_object_http::<Peer, ProfileDoc>(&user.id, &data)
        .await?
        .object;
    let featured_url = doc
        .featured
        .clone()
        .ok_or_else(|| fail("no featured collection"))?;
    let featured = fetch_object_http::<Peer, FeaturedDoc>(&featured_url, &data)
        .await?
        .object;
    // The first pinned note, dereferenced at its id through the crate's object store (fetched,
    // its id and author checked against where it came from).
    let first = featured
        .ordered_items
        .first()
        .map(|n| n.id.inner().clone())
        .ok_or_else(|| fail("no pinned note"))?;
    let note = ObjectId::<Note>::from(first).dereference(&data).await?;
    Ok(Json(json!({
        "type": doc.kind,
        "icon": doc.icon,
        "image": doc.image,
        "fields": doc.attachment,
        "featured": {
            "totalItems": featured.total_items,
            "contents": featured.ordered_items.iter().map(|n| n.content.clone()).collect::<Vec<_>>(),
        },
        "pinned": {
            "id": note.0.id.inner(),
            "attributedTo": note.0.attributed_to.inner(),
            "content": note.0.content,
        },
        "discoverable": doc.discoverable,
        "indexable": doc.indexable,
    })))
}

async fn admin_received(data: Data<Peer>) -> Json<Value> {
    Json(Value::Array(data.0.received.lock().unwrap().clone()))
}

async fn admin_rejected(data: Data<Peer>) -> Json<Value> {
    Json(json!(data.0.rejected.lock().unwrap().clone()))
}

async fn admin_following(data: Data<Peer>) -> Json<Value> {
    let accepted: Vec<Url> = data
        .0
        .follows
        .lock()
        .unwrap()
        .values()
        .filter(|f| f.1)
        .map(|f| f.0.clone())
        .collect();
    Json(json!(accepted))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("PEER_PORT").ok())
        .ok_or("usage: ap-rs-peer <port> [--mastodon-compat]")?
        .parse()?;
    let compat = std::env::args().nth(2).as_deref() == Some("--mastodon-compat");
    let domain = format!("localhost:{port}");
    let origin = format!("http://{domain}");
    let keys = generate_actor_keypair()?;
    let me = User {
        id: Url::parse(&format!("{origin}/users/{LOCAL_NAME}"))?,
        username: LOCAL_NAME.into(),
        inbox: Url::parse(&format!("{origin}/users/{LOCAL_NAME}/inbox"))?,
        shared_inbox: Some(Url::parse(&format!("{origin}/inbox"))?),
        public_key_pem: keys.public_key,
        private_key_pem: Some(keys.private_key),
        fetched_at: Utc::now(),
    };
    let peer = Peer(Arc::new(State {
        origin,
        users: Mutex::new(HashMap::from([(me.id.clone(), me.clone())])),
        notes: Mutex::default(),
        follows: Mutex::default(),
        received: Mutex::default(),
        rejected: Mutex::default(),
        next: AtomicU64::new(1),
    }));
    // debug: plain http, explicit ports and loopback hosts are allowed (tests only).
    let config = FederationConfig::builder()
        .domain(domain)
        .app_data(peer)
        .debug(true)
        .http_signature_compat(compat)
        .signed_fetch_actor(&me)
        .build()
        .await?;
    let app = Router::new()
        .route("/.well-known/webfinger", get(webfinger))
        .route("/users/:name", get(actor))
        .route("/users/:name/inbox", post(inbox))
        .route("/inbox", post(inbox))
        .route("/notes/:n", get(note))
        .route("/admin/follow", post(admin_follow))
        .route("/admin/note", post(admin_note))
        .route("/admin/fetch", post(admin_fetch))
        .route("/admin/profile", post(admin_profile))
        .route("/admin/received", get(admin_received))
        .route("/admin/rejected", get(admin_rejected))
        .route("/admin/following", get(admin_following))
        .layer(FederationMiddleware::new(config));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("READY {port}");
    axum::serve(listener, app).await?;
    Ok(())
}
