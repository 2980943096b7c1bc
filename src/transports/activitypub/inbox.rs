//! The verified inbox, per agent (`/agents/{name}/inbox`) and shared (`/inbox`).
//!
//! Order of work: size (the payload limit), JSON and nesting depth, activity id and its host,
//! replay check, authentication (HTTP signature, FEP-8b32 proof), then the activity itself. Every
//! activity that authenticates is answered 202 — handled, duplicate, or deliberately ignored; 401
//! is only for authentication failures, 503 for trouble worth a retry.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::fetch::FetchError;
use super::mapping::{self, iri, str_of};
use super::sig::{self, RequestView, Scheme};
use super::{HttpState, Inner, NAME, RemoteActor, store};
use crate::message::{NormalizedMessage, Part};
use crate::pipeline::Pipeline;

pub(super) fn routes(cfg: &mut web::ServiceConfig, limit: usize) {
    cfg.service(
        web::resource("/inbox")
            .app_data(web::PayloadConfig::new(limit))
            .route(web::post().to(shared_inbox)),
    )
    .service(
        web::resource("/agents/{name}/inbox")
            .app_data(web::PayloadConfig::new(limit))
            .route(web::post().to(agent_inbox)),
    );
}

/// A refusal: HTTP status and a reason safe to show the peer.
#[derive(Debug)]
pub(super) struct Reject(pub u16, pub String);

impl Reject {
    fn unauth(why: impl std::fmt::Display) -> Self {
        Self(401, format!("authentication failed: {why}"))
    }
    fn invalid(why: impl Into<String>) -> Self {
        Self(400, why.into())
    }
}

impl From<crate::Error> for Reject {
    fn from(e: crate::Error) -> Self {
        use crate::error::ErrorKind as K;
        let status = match e.kind() {
            K::Invalid => 400,
            K::Unauthenticated => 401,
            K::Forbidden => 403,
            K::NotFound => 404,
            K::TooLarge => 413,
            K::RateLimited => 429,
            K::Temporary | K::Permanent => 503,
        };
        Self(status, e.to_string())
    }
}

/// The parts of the request the verifier needs, owned so the work can move to the main runtime.
#[derive(Debug, Clone)]
pub(super) struct Incoming {
    pub method: String,
    pub path_and_query: String,
    pub headers: HashMap<String, String>,
}

impl Incoming {
    pub(super) fn from_request(req: &HttpRequest) -> Self {
        let mut headers: HashMap<String, String> = HashMap::new();
        for (name, value) in req.headers() {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            headers
                .entry(name.as_str().to_ascii_lowercase())
                .and_modify(|e| {
                    e.push_str(", ");
                    e.push_str(&v);
                })
                .or_insert(v);
        }
        Self {
            method: req.method().as_str().to_owned(),
            path_and_query: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.path().to_owned(), |p| p.as_str().to_owned()),
            headers,
        }
    }
}

fn depth(v: &Value) -> usize {
    // Iterative, so a hostile document cannot exhaust the stack here.
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(m) => stack.extend(m.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

async fn shared_inbox(
    state: web::Data<HttpState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    receive(&state, &req, body).await
}

async fn agent_inbox(
    state: web::Data<HttpState>,
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let name = path.into_inner();
    if state.ap.inner.agents.get(&name).is_none() {
        return render(Err(Reject(404, "no such agent".into())));
    }
    receive(&state, &req, body).await
}

fn render(r: Result<(), Reject>) -> HttpResponse {
    match r {
        Ok(()) => HttpResponse::Accepted().finish(),
        Err(Reject(status, reason)) => {
            if status >= 500 {
                tracing::warn!(status, %reason, "inbox delivery failed");
            } else {
                tracing::debug!(status, %reason, "inbox delivery refused");
            }
            let code = actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
            let mut b = HttpResponse::build(code);
            if status == 503 {
                b.insert_header(("Retry-After", "60"));
            }
            b.json(json!({ "error": reason }))
        }
    }
}

async fn receive(state: &HttpState, req: &HttpRequest, body: web::Bytes) -> HttpResponse {
    let inner = Arc::clone(&state.ap.inner);
    let activity: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return render(Err(Reject::invalid(format!("body is not JSON: {e}")))),
    };
    if depth(&activity) > inner.cfg.max_json_depth {
        return render(Err(Reject::invalid("JSON nested too deeply")));
    }
    let incoming = Incoming::from_request(req);
    let pipeline = state.pipeline.clone();
    let limit = Duration::from_millis(inner.cfg.processing_timeout_ms);
    let result = state
        .pipeline
        .on_main(async move {
            match tokio::time::timeout(
                limit,
                process(&inner, &pipeline, &incoming, &body, activity),
            )
            .await
            {
                Ok(r) => Ok(r),
                Err(_) => Ok(Err(Reject(503, "processing took too long".into()))),
            }
        })
        .await
        .unwrap_or_else(|e| Err(Reject::from(e)));
    render(result)
}

/// How the activity was authenticated.
#[derive(Debug, Clone)]
pub(super) struct Auth {
    /// `ap-http-signature` or `ap-object-integrity-proof`.
    pub method: crate::message::AuthMethod,
    /// The key.
    pub key_id: String,
    /// The authenticated actor.
    pub actor: Arc<RemoteActor>,
}

/// Verifies the request's HTTP signature; returns the signing actor and key id. A failing
/// verification refetches the key once.
pub(super) async fn verify_http(
    inner: &Inner,
    incoming: &Incoming,
    body: Option<&[u8]>,
) -> Result<(Arc<RemoteActor>, String, Scheme), VerifyError> {
    let lookup = |n: &str| incoming.headers.get(n).cloned();
    let target = format!("{}{}", inner.base, incoming.path_and_query);
    let view = RequestView {
        method: &incoming.method,
        path_and_query: &incoming.path_and_query,
        target_uri: &target,
        header: &lookup,
    };
    let now = inner.clock.now_ms() / 1000;
    let parsed = sig::parse_any(&view, body, now).map_err(VerifyError::Sig)?;
    let mut force = false;
    loop {
        let actor = inner
            .key_owner(&parsed.key_id, force)
            .await
            .map_err(VerifyError::Key)?;
        if let Some(key) = actor.key(&parsed.key_id)
            && parsed.verify(key)
        {
            return Ok((actor, parsed.key_id.clone(), parsed.scheme));
        }
        if force {
            return Err(VerifyError::Sig(sig::SigError::Invalid));
        }
        force = true;
    }
}

/// Why HTTP-signature verification failed.
#[derive(Debug)]
pub(super) enum VerifyError {
    /// The signature itself.
    Sig(sig::SigError),
    /// The key could not be fetched.
    Key(FetchError),
}

/// How old an object integrity proof may be: a week, well inside the fortnight seen activity
/// ids are remembered.
const PROOF_MAX_AGE_MS: i64 = SEEN_RETENTION_MS / 2;

/// Verifies a FEP-8b32 proof on `doc`; returns the controller actor and the key id.
async fn verify_proof(
    inner: &Inner,
    doc: &Value,
) -> Result<Option<(Arc<RemoteActor>, String)>, String> {
    let Some(p) = super::proof::prepare(doc).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    // Younger than the memory of seen ids, so no proof outlives its replay protection.
    super::proof::check_current(doc, inner.clock.now_ms(), PROOF_MAX_AGE_MS)
        .map_err(|e| e.to_string())?;
    let mut force = false;
    loop {
        let actor = inner
            .key_owner(&p.verification_method, force)
            .await
            .map_err(|e| format!("proof key: {e}"))?;
        if let Some(sig::PublicKey::Ed25519(raw)) = actor.key(&p.verification_method)
            && p.verify(raw)
        {
            return Ok(Some((actor, p.verification_method.clone())));
        }
        if force {
            return Err("proof does not verify".into());
        }
        force = true;
    }
}

fn actor_of(activity: &Value) -> Option<&str> {
    activity.get("actor").and_then(iri)
}

async fn process(
    inner: &Inner,
    pipeline: &Pipeline,
    incoming: &Incoming,
    body: &[u8],
    activity: Value,
) -> Result<(), Reject> {
    let id = str_of(&activity, "id")
        .ok_or_else(|| Reject::invalid("activity has no id"))?
        .to_owned();
    let kind = str_of(&activity, "type")
        .ok_or_else(|| Reject::invalid("activity has no type"))?
        .to_owned();
    let actor_iri = actor_of(&activity)
        .ok_or_else(|| Reject::invalid("activity has no actor"))?
        .to_owned();
    let actor_host = mapping::host_of(&actor_iri).ok_or_else(|| Reject::invalid("bad actor"))?;
    if mapping::host_of(&id).as_deref() != Some(actor_host.as_str()) {
        return Err(Reject(
            403,
            "activity id and actor are on different hosts".into(),
        ));
    }
    if inner.is_local(&actor_iri) {
        return Err(Reject(
            403,
            "activities of local actors are not accepted".into(),
        ));
    }
    if store::seen(&inner.db, &id).await? {
        return Ok(());
    }

    // Authentication.
    let http = verify_http(inner, incoming, Some(body)).await;
    let http = match http {
        Ok(ok) => Some(ok),
        Err(VerifyError::Sig(sig::SigError::Missing)) => None,
        Err(VerifyError::Sig(e)) => return Err(Reject::unauth(e)),
        Err(VerifyError::Key(e)) => {
            // A deleted account signs its own Delete with a key that is gone: nothing to verify
            // and nothing worth a retry. The keyId is the sender's choice, so only the actor
            // document itself answering 404/410 proves the account is gone.
            let self_delete = kind == "Delete"
                && activity.get("object").and_then(iri) == Some(actor_iri.as_str());
            if self_delete
                && matches!(e, FetchError::Gone)
                && matches!(inner.actor(&actor_iri, true).await, Err(FetchError::Gone))
            {
                forget_actor(inner, &actor_iri).await?;
                store::mark_seen(&inner.db, &id, inner.clock.now_ms()).await?;
                return Ok(());
            }
            return Err(match e {
                FetchError::Temporary(r) => Reject(503, format!("key fetch failed: {r}")),
                other => Reject::unauth(format!("key unavailable: {other}")),
            });
        }
    };
    let proof = match verify_proof(inner, &activity).await {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, activity = %id, "object proof not accepted");
            None
        }
    };
    let auth = match (&proof, &http) {
        (Some((a, kid)), _) if a.id == actor_iri => Auth {
            method: crate::message::AuthMethod::ApObjectIntegrityProof,
            key_id: kid.clone(),
            actor: Arc::clone(a),
        },
        (_, Some((a, kid, _))) if a.id == actor_iri => Auth {
            method: crate::message::AuthMethod::ApHttpSignature,
            key_id: kid.clone(),
            actor: Arc::clone(a),
        },
        (None, None) => return Err(Reject::unauth("the request is not signed")),
        _ => return Err(Reject::unauth("the signer is not the activity's actor")),
    };
    // Remember hosts that sign RFC 9421 (a read, and a write only the first time).
    if let Some((a, _, Scheme::Rfc9421)) = &http
        && let Some(h) = mapping::host_of(&a.id)
        && store::host(&inner.db, &h)
            .await
            .is_ok_and(|row| row.rfc9421 == 0)
    {
        let _ = store::set_rfc9421(&inner.db, &h, inner.clock.now_ms()).await;
    }

    let now = inner.clock.now_ms();
    match kind.as_str() {
        // Marks the id seen in the same transaction that stores the note.
        "Create" if on_create(inner, pipeline, &activity, &id, &auth).await? => return Ok(()),
        "Create" => {}
        "Follow" => on_follow(inner, &activity, &auth).await?,
        "Undo" => on_undo(inner, &activity, &auth).await?,
        "Delete" => on_delete(inner, &activity, &auth).await?,
        "Update" => on_update(inner, &activity, &auth).await?,
        other => tracing::debug!(kind = other, activity = %id, "activity ignored"),
    }
    store::mark_seen(&inner.db, &id, now).await?;
    Ok(())
}

async fn forget_actor(inner: &Inner, actor: &str) -> Result<(), Reject> {
    store::remove_follower(&inner.db, None, actor).await?;
    store::delete_actor(&inner.db, actor).await?;
    inner.forget(actor);
    Ok(())
}

/// The object of an activity when it is embedded (and only then).
fn embedded(activity: &Value) -> Option<&Value> {
    activity.get("object").filter(|o| o.is_object())
}

/// Returns whether the activity id was recorded as seen (with the stored note).
async fn on_create(
    inner: &Inner,
    pipeline: &Pipeline,
    activity: &Value,
    activity_id: &str,
    auth: &Auth,
) -> Result<bool, Reject> {
    let fetched;
    let note = match activity.get("object") {
        Some(o) if o.is_object() => o,
        // Only the IRI: the note is fetched (signed, through the guarded client) from the
        // actor's own host, and must be the document at that IRI.
        Some(Value::String(iri)) => {
            if mapping::host_of(iri) != mapping::host_of(&auth.actor.id) {
                return Err(Reject(403, "the object is not on the actor's host".into()));
            }
            fetched = match inner.fetch_object(iri).await {
                Ok(doc) => doc,
                Err(FetchError::Gone) => return Ok(false),
                Err(FetchError::Temporary(e)) => {
                    return Err(Reject(503, format!("the object could not be fetched: {e}")));
                }
                Err(FetchError::Permanent(e)) => {
                    return Err(Reject::invalid(format!(
                        "the object could not be fetched: {e}"
                    )));
                }
            };
            &fetched
        }
        _ => return Ok(false),
    };
    if !matches!(
        str_of(note, "type"),
        Some("Note" | "Article" | "Page" | "Question")
    ) {
        return Ok(false);
    }
    // With the fetched note in place of its IRI, so `raw` holds it as replies expect
    // (`inReplyTo`, visibility and mentions are read from `raw.object`).
    let resolved = activity
        .get("object")
        .is_some_and(Value::is_string)
        .then(|| {
            let mut a = activity.clone();
            a["object"] = note.clone();
            a
        });
    let activity = resolved.as_ref().unwrap_or(activity);
    let note_id = str_of(note, "id").ok_or_else(|| Reject::invalid("object has no id"))?;
    let author = note
        .get("attributedTo")
        .and_then(|a| mapping::many(Some(a)).into_iter().find_map(iri));
    if author != Some(auth.actor.id.as_str())
        || mapping::host_of(note_id) != mapping::host_of(&auth.actor.id)
    {
        return Err(Reject(403, "the note is not the actor's".into()));
    }
    let woken: Vec<_> = inner
        .agents
        .all()
        .into_iter()
        .filter(|a| mapping::wakes(note, activity, &inner.actor_url(&a.name)))
        .collect();
    if woken.is_empty() {
        return Ok(false);
    }
    let (thread_key, parent) = thread_of(inner, note).await;
    let in_reply_to = parent.as_ref().and_then(|p| p.message_id.clone());
    let parts = parts_of(inner, note).await;
    let visibility = mapping::visibility_of(note, auth.actor.followers.as_deref());
    let public = matches!(
        visibility,
        crate::message::Visibility::Public | crate::message::Visibility::Unlisted
    );
    forget_old_activity_ids(inner);
    // The note and its activity id are stored with the first woken agent's copy of the message.
    let mut note_rows = Some(NoteRows {
        id: note_id.to_owned(),
        agent: String::new(),
        author: auth.actor.id.clone(),
        message_id: String::new(),
        thread_key: thread_key.clone(),
        public,
        body: note.to_string(),
        activity_id: activity_id.to_owned(),
    });
    for agent in &woken {
        let msg = build_message(
            inner,
            activity,
            auth,
            &agent.address,
            &thread_key,
            in_reply_to.as_deref(),
            &parts,
        )?;
        let external = format!("{activity_id} {}", agent.name);
        match note_rows.take() {
            Some(mut rows) => {
                rows.agent.clone_from(&agent.name);
                rows.message_id.clone_from(&msg.id);
                pipeline.ingest_with(NAME, &external, msg, rows).await?;
            }
            None => {
                pipeline.ingest(NAME, &external, msg).await?;
            }
        }
    }
    Ok(true)
}

/// Seen activity ids are kept this long: longer than any sender retries (Mastodon: about a week).
const SEEN_RETENTION_MS: i64 = 14 * 86_400_000;

/// How often activity ids older than [`SEEN_RETENTION_MS`] are forgotten.
const SEEN_CLEANUP_EVERY_MS: i64 = 3_600_000;

/// Forgets activity ids seen longer ago than [`SEEN_RETENTION_MS`], at most once per
/// [`SEEN_CLEANUP_EVERY_MS`], in the background.
fn forget_old_activity_ids(inner: &Inner) {
    let now = inner.clock.now_ms();
    let last = inner
        .seen_cleanup
        .load(std::sync::atomic::Ordering::Relaxed);
    if now - last < SEEN_CLEANUP_EVERY_MS
        || inner
            .seen_cleanup
            .compare_exchange(
                last,
                now,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    let db = inner.db.clone();
    tokio::spawn(async move {
        match store::forget_seen_before(&db, now - SEEN_RETENTION_MS).await {
            Ok(n) if n > 0 => tracing::debug!(n, "forgot old activity ids"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "forgetting old activity ids failed"),
        }
    });
}

/// What the inbox stores with a woken note's message, in its ingest transaction: the note
/// (for threads, replies and edits) and its activity id (replays are acknowledged, not
/// processed again).
struct NoteRows {
    id: String,
    agent: String,
    author: String,
    message_id: String,
    thread_key: String,
    public: bool,
    body: String,
    activity_id: String,
}

#[async_trait::async_trait]
impl crate::pipeline::IngestWrite for NoteRows {
    async fn write(&mut self, tx: &mut crate::store::Tx, now: i64) -> crate::Result<bool> {
        store::insert_object(
            tx,
            &store::NewObject {
                id: &self.id,
                kind: "in",
                agent: &self.agent,
                author: &self.author,
                message_id: Some(&self.message_id),
                thread_key: &self.thread_key,
                public: self.public,
                body: &self.body,
            },
            now,
        )
        .await?;
        store::mark_seen_tx(tx, &self.activity_id, now).await?;
        Ok(true)
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// The conversation key and the known parent of a note: `context`/`conversation`, else the
/// thread of a known parent, else the root of the `inReplyTo` chain (fetching at most
/// `max_parent_fetches` unknown parents), else the note itself.
async fn thread_of(inner: &Inner, note: &Value) -> (String, Option<store::ObjectRow>) {
    let explicit = mapping::explicit_thread(note);
    let Some(mut parent) = note.get("inReplyTo").and_then(iri).map(str::to_owned) else {
        return (
            explicit.unwrap_or_else(|| str_of(note, "id").unwrap_or_default().to_owned()),
            None,
        );
    };
    let known = store::object(&inner.db, &parent).await.ok().flatten();
    if let Some(k) = &known {
        return (explicit.unwrap_or_else(|| k.thread_key.clone()), known);
    }
    if let Some(e) = explicit {
        return (e, None);
    }
    for _ in 0..inner.cfg.max_parent_fetches {
        let Ok(doc) = inner.fetch_object(&parent).await else {
            break;
        };
        if let Some(e) = mapping::explicit_thread(&doc) {
            return (e, None);
        }
        match doc.get("inReplyTo").and_then(iri) {
            Some(up) => {
                if let Ok(Some(k)) = store::object(&inner.db, up).await {
                    return (k.thread_key, None);
                }
                parent = up.to_owned();
            }
            None => break,
        }
    }
    (parent, None)
}

/// Text and attachments of a note as parts. Attachments are downloaded into the blob store
/// within the media size limit; what cannot be stored becomes a link.
async fn parts_of(inner: &Inner, note: &Value) -> Vec<Part> {
    let mut parts = Vec::new();
    let text = mapping::note_text(note);
    if !text.is_empty() {
        parts.push(Part::text(text));
    }
    for a in mapping::attachments(note, inner.cfg.max_attachments) {
        let link = || {
            serde_json::from_value::<Part>(json!({"kind": "link", "url": a.url, "title": a.name}))
                .ok()
        };
        if a.is_link {
            parts.extend(link());
            continue;
        }
        let stored = match inner.fetch_bytes(&a.url).await {
            Ok((mt, bytes)) => {
                let mime = a
                    .mime
                    .clone()
                    .or(mt)
                    .unwrap_or_else(|| "application/octet-stream".into());
                match inner.blobs.put(&bytes, &mime).await {
                    Ok(r) => serde_json::from_value::<Part>(json!({
                        "kind": "file",
                        "name": a.name,
                        "mime": mime,
                        "size": bytes.len(),
                        "bytes_ref": {"kind": "content_addressed", "algo": r.algo, "digest": r.digest},
                    }))
                    .ok(),
                    Err(e) => {
                        tracing::debug!(error = %e, url = %a.url, "attachment not stored");
                        None
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, url = %a.url, "attachment not fetched");
                None
            }
        };
        parts.extend(stored.or_else(link));
    }
    if parts.is_empty() {
        parts.push(Part::text(""));
    }
    parts
}

fn build_message(
    inner: &Inner,
    activity: &Value,
    auth: &Auth,
    recipient: &str,
    thread_key: &str,
    in_reply_to: Option<&str>,
    parts: &[Part],
) -> Result<NormalizedMessage, Reject> {
    let now = inner.clock.now();
    let doc = &auth.actor.doc;
    let name = str_of(doc, "name").filter(|s| !s.is_empty());
    let icon = doc
        .get("icon")
        .and_then(|i| mapping::many(Some(i)).into_iter().next())
        .and_then(|i| match i {
            Value::String(s) => Some(json!({"url": s})),
            o => str_of(o, "url").map(|u| {
                let mut a = json!({"url": u});
                if let Some(mt) = str_of(o, "mediaType") {
                    a["mime_type"] = json!(mt);
                }
                a
            }),
        });
    let mut profile = json!({
        "username": str_of(doc, "preferredUsername"),
        "provider": "activitypub",
        "provider_subject": auth.actor.id,
    });
    if let Some(n) = name {
        profile["display_name"] = json!(n);
    }
    if let Some(u) = doc
        .get("url")
        .and_then(|u| mapping::many(Some(u)).into_iter().find_map(iri))
    {
        profile["url"] = json!(u);
    }
    if let Some(i) = icon {
        profile["avatar"] = i;
    }
    let mut sender = json!({
        "address": auth.actor.address,
        "profile": profile,
        "auth_method": auth.method.as_str(),
        "verified": true,
        "key_id": auth.key_id,
        "identities": [{
            "subject": auth.actor.id,
            "issuer": inner.domain,
            "method": auth.method.as_str(),
            "assurance": "domain",
            "audience": recipient,
            "issued_at": now,
            "source": {"transport": NAME},
            "proof": {"type": "transport", "verified_by": inner.domain, "key_id": auth.key_id},
        }],
    });
    if let Some(n) = name {
        sender["display_name"] = json!(n);
    }
    let mut msg = json!({
        "id": uuid::Uuid::now_v7().to_string(),
        "thread_id": thread_key,
        "sender": sender,
        "recipient": recipient,
        "parts": parts,
        "recipient_capabilities": {
            "mention_relay": {"kind": "addressing", "envelope_fields": ["to", "cc"], "also_inline": true},
            "formats": ["text/html", "text/plain"],
            "attachments": true,
            "streaming": false,
            "max_text_chars": inner.cfg.max_reply_chars,
        },
        "received_via": NAME,
        "received_at": now,
        "raw": activity,
    });
    if let Some(r) = in_reply_to {
        msg["in_reply_to"] = json!(r);
    }
    serde_json::from_value(msg).map_err(|e| Reject::invalid(format!("cannot map the note: {e}")))
}

async fn on_follow(inner: &Inner, activity: &Value, auth: &Auth) -> Result<(), Reject> {
    let Some(target) = activity.get("object").and_then(iri) else {
        return Err(Reject::invalid("Follow without object"));
    };
    let Some(agent) = inner.local_agent(target) else {
        return Ok(());
    };
    let follow_id = str_of(activity, "id").unwrap_or_default();
    let inbox = auth
        .actor
        .delivery_inbox()
        .ok_or_else(|| Reject::invalid("the follower has no inbox"))?
        .to_owned();
    let now = inner.clock.now_ms();
    store::add_follower(
        &inner.db,
        &agent.name,
        &auth.actor.id,
        &inbox,
        follow_id,
        now,
    )
    .await?;
    let mut follow = activity.clone();
    if let Some(m) = follow.as_object_mut() {
        for k in ["@context", "proof", "signature"] {
            m.remove(k);
        }
    }
    let actor = inner.actor_url(&agent.name);
    let accept = json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{actor}#accepts/{}", uuid::Uuid::now_v7()),
        "type": "Accept",
        "actor": actor,
        "to": [auth.actor.id],
        "object": follow,
    });
    let mut tx = inner.db.begin().await?;
    let enqueued = super::outbound::enqueue(inner, &mut tx, &agent.name, &[inbox], &accept).await?;
    tx.commit().await?;
    inner.queue.hand_over(enqueued);
    Ok(())
}

async fn on_undo(inner: &Inner, activity: &Value, auth: &Auth) -> Result<(), Reject> {
    let object = activity.get("object");
    match object {
        Some(o @ Value::Object(_)) => {
            if str_of(o, "type") != Some("Follow") {
                return Ok(());
            }
            if o.get("actor").and_then(iri) != Some(auth.actor.id.as_str()) {
                return Err(Reject(403, "undoing someone else's Follow".into()));
            }
            let agent = o
                .get("object")
                .and_then(iri)
                .and_then(|t| inner.local_agent(t));
            store::remove_follower(
                &inner.db,
                agent.as_ref().map(|a| a.name.as_str()),
                &auth.actor.id,
            )
            .await?;
        }
        Some(Value::String(_)) => {
            // An Undo naming only the Follow's id: the actor unfollows.
            store::remove_follower(&inner.db, None, &auth.actor.id).await?;
        }
        _ => {}
    }
    Ok(())
}

async fn on_delete(inner: &Inner, activity: &Value, auth: &Auth) -> Result<(), Reject> {
    let Some(target) = activity.get("object").and_then(iri) else {
        return Ok(());
    };
    if target == auth.actor.id {
        return forget_actor(inner, target).await;
    }
    store::delete_object(&inner.db, target, &auth.actor.id, inner.clock.now_ms()).await?;
    Ok(())
}

async fn on_update(inner: &Inner, activity: &Value, auth: &Auth) -> Result<(), Reject> {
    let Some(obj) = embedded(activity) else {
        return Ok(());
    };
    let Some(id) = str_of(obj, "id") else {
        return Ok(());
    };
    if id == auth.actor.id {
        // A profile update: refresh what we cached.
        store::put_actor(&inner.db, id, &obj.to_string(), inner.clock.now_ms()).await?;
        inner.forget(id);
        return Ok(());
    }
    if obj.get("attributedTo").and_then(iri) != Some(auth.actor.id.as_str()) {
        return Err(Reject(403, "the object is not the actor's".into()));
    }
    store::update_object(
        &inner.db,
        id,
        &auth.actor.id,
        &obj.to_string(),
        inner.clock.now_ms(),
    )
    .await?;
    Ok(())
}
