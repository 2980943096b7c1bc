//! What verified activities do: `Create` wakes agents (a note addressed to and mentioning them
//! becomes a NormalizedMessage, stored with the note in one ingest transaction), `Follow` and
//! `Undo` manage followers, `Delete` (and `Undo` of a `Create`) erases a note and the messages
//! it became, `Update` keeps stored notes and actors current.

use serde_json::{Value, json};

use super::fetch::FetchError;
use super::mapping::{self, iri, str_of};
use super::reject::Reject;
use super::verify::Auth;
use super::wire::{self, FromJson as _};
use super::{Inner, NAME, store};
use crate::message::Part;
use crate::moderation::Who;
use crate::pipeline::Pipeline;

pub(super) async fn forget_actor(inner: &Inner, actor: &str) -> Result<(), Reject> {
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
pub(super) async fn on_create(
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
                return Err(Reject::new(403, "the object is not on the actor's host"));
            }
            fetched = match inner.fetch_object(iri).await {
                Ok(doc) => doc,
                Err(FetchError::Gone) => return Ok(false),
                Err(FetchError::Temporary(e)) => {
                    return Err(Reject::new(
                        503,
                        format!("the object could not be fetched: {e}"),
                    ));
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
    // With the fetched note in place of its IRI: `raw` holds the note itself (agents read it
    // there), and the note is read from the activity like an embedded one.
    let resolved = activity
        .get("object")
        .is_some_and(Value::is_string)
        .then(|| {
            let mut a = activity.clone();
            a["object"] = note.clone();
            a
        });
    let activity = resolved.as_ref().unwrap_or(activity);
    let typed_activity = wire::Activity::from_json(activity);
    let Some(typed) = typed_activity.embedded() else {
        return Ok(false);
    };
    if !matches!(typed.kind(), Some("Note" | "Article" | "Page" | "Question")) {
        return Ok(false);
    }
    let note_id = typed
        .id()
        .ok_or_else(|| Reject::invalid("object has no id"))?;
    let author = typed.author();
    if author != Some(auth.actor.id.as_str())
        || mapping::host_of(note_id) != mapping::host_of(&auth.actor.id)
    {
        return Err(Reject::new(403, "the note is not the actor's"));
    }
    let woken: Vec<_> = inner
        .agents
        .all()
        .into_iter()
        .filter(|a| mapping::wakes(typed, &typed_activity, &inner.actor_url(&a.name)))
        .collect();
    if woken.is_empty() {
        return Ok(false);
    }
    let (thread_key, parent) = thread_of(inner, typed).await;
    let in_reply_to = parent.as_ref().and_then(|p| p.message_id.clone());
    let parts = parts_of(inner, typed).await;
    let visibility = mapping::visibility_of(typed, auth.actor.followers.as_deref());
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
        blocked_by_sender: false,
    });
    let max_reply_chars = inner.reply_limit(&auth.actor.id).await;
    let blocked_by = store::agents_blocked_by(&inner.db, &auth.actor.id).await?;
    for agent in &woken {
        let msg = mapping::note_message(mapping::WokenNote {
            id: uuid::Uuid::now_v7().to_string(),
            activity,
            actor_id: &auth.actor.id,
            actor_address: &auth.actor.address,
            actor_doc: &auth.actor.doc,
            method: auth.method.clone(),
            key_id: &auth.key_id,
            verifier: &inner.domain,
            recipient: &agent.address,
            thread_key: &thread_key,
            in_reply_to: in_reply_to.as_deref(),
            parts: parts.clone(),
            max_reply_chars,
            now: inner.clock.now(),
        })
        .map_err(|e| Reject::from(crate::Error::corrupt(e)))?;
        // An agent that blocks the actor is skipped silently; one whose access rules refuse it
        // is skipped too: the inbox still answers 202, and the sender is told only when the
        // agent's `refusal_reply` says so.
        if pipeline
            .blocked(Some(&agent.name), NAME, &Who::of(&msg.sender))
            .is_some()
        {
            continue;
        }
        if pipeline.authorize(agent, NAME, &msg.sender).is_err() {
            inner.metrics.refused_from(
                mapping::host_of(&auth.actor.id)
                    .as_deref()
                    .unwrap_or_default(),
                &format!("refused by the access rules of agent {}", agent.name),
                inner.clock.now_ms(),
            );
            refusal_reply(inner, agent, activity_id, msg).await;
            continue;
        }
        let external = format!("{activity_id} {}", agent.name);
        // The sender blocked the agent: stored, held, never answered.
        let blocked = blocked_by.contains(&agent.name);
        if blocked {
            super::moderation::note_held(inner, agent, &auth.actor.id);
        }
        match note_rows.take() {
            Some(mut rows) => {
                rows.agent.clone_from(&agent.name);
                rows.message_id.clone_from(&msg.id);
                rows.blocked_by_sender = blocked;
                pipeline.ingest_with(NAME, &external, msg, rows).await?;
            }
            None if blocked => {
                pipeline
                    .ingest_with(NAME, &external, msg, super::moderation::BlockedBySender)
                    .await?;
            }
            None => {
                pipeline.ingest(NAME, &external, msg).await?;
            }
        }
    }
    Ok(true)
}

/// Tells the sender of `msg`, refused by `agent`'s access rules, that the agent does not take
/// its messages — when the agent's `refusal_reply` asks for it: a direct message, or a reply
/// in the thread as visible as the note. The same activity again makes the same note, sent
/// once. Best effort: a failure is logged.
async fn refusal_reply(
    inner: &Inner,
    agent: &crate::agents::Agent,
    activity_id: &str,
    msg: crate::message::NormalizedMessage,
) {
    use sha2::Digest as _;
    let visibility = match agent.access.refusal_reply {
        crate::config::RefusalReply::None => return,
        crate::config::RefusalReply::Direct => Some(crate::message::Visibility::Direct),
        crate::config::RefusalReply::Public => None,
    };
    let digest = hex::encode(sha2::Sha256::digest(format!(
        "{activity_id} {}",
        agent.name
    )));
    let mut response = crate::message::NormalizedResponse::reply_to(
        &msg,
        vec![Part::text("This agent does not accept messages from you.")],
    );
    response.id = format!("refusal-{}", &digest[..32]);
    response.visibility = visibility;
    let delivery = crate::pipeline::Delivery {
        continues: false,
        job_id: format!("refusal:{}", response.id),
        attempt: 1,
        response,
        original: std::sync::Arc::new(msg),
    };
    if let Err(e) = inner.send_reply(&delivery).await {
        tracing::warn!(agent = %agent.name, error = %e, "refusal reply not sent");
    }
}

/// How often activity ids older than [`store::SEEN_RETENTION_MS`] are forgotten.
const SEEN_CLEANUP_EVERY_MS: i64 = 3_600_000;

/// Forgets activity ids seen longer ago than [`store::SEEN_RETENTION_MS`], at most once per
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
        match store::forget_seen_before(&db, now - store::SEEN_RETENTION_MS).await {
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
    /// The author blocked the agent: the message is held.
    blocked_by_sender: bool,
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

    fn blocked_by_sender(&self) -> bool {
        self.blocked_by_sender
    }
}

/// The thread key a note's explicit `context`/`conversation` names: for a context we minted
/// (a server that adopts the context of the note it answers sends ours back), the thread it
/// was minted for, so the conversation does not split; else the value itself.
async fn explicit_thread(inner: &Inner, note: &wire::Object) -> Option<String> {
    let key = mapping::explicit_thread(note)?;
    if let Some((agent, id)) = inner.local_context(&key)
        && let Ok(Some(c)) = store::context(&inner.db, id).await
        && c.agent == agent
    {
        return Some(c.thread_key);
    }
    Some(key)
}

/// The conversation key and the known parent of a note: `context`/`conversation`, else the
/// thread of a known parent, else the root of the `inReplyTo` chain (fetching at most
/// `max_parent_fetches` unknown parents), else the note itself.
async fn thread_of(inner: &Inner, note: &wire::Object) -> (String, Option<store::ObjectRow>) {
    let explicit = explicit_thread(inner, note).await;
    let Some(mut parent) = note.in_reply_to().map(str::to_owned) else {
        return (
            explicit.unwrap_or_else(|| note.id().unwrap_or_default().to_owned()),
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
        let doc = wire::Object::from_json(&doc);
        if let Some(e) = explicit_thread(inner, &doc).await {
            return (e, None);
        }
        match doc.in_reply_to() {
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
async fn parts_of(inner: &Inner, note: &wire::Object) -> Vec<Part> {
    let mut parts = Vec::new();
    // A mention of one of our agents reads as its handle (`@name@{handle domain}`), whatever
    // name the sender's tag gave it.
    let mut mentions = mapping::mention_names(note);
    for (href, addr) in &mut mentions {
        if let Some(agent) = inner.local_agent(href) {
            addr.clone_from(&agent.address);
        }
    }
    let text = mapping::note_text_with(note, &mentions);
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

pub(super) async fn on_follow(
    inner: &Inner,
    pipeline: &Pipeline,
    activity: &Value,
    auth: &Auth,
) -> Result<(), Reject> {
    let Some(target) = activity.get("object").and_then(iri) else {
        return Err(Reject::invalid("Follow without object"));
    };
    let Some(agent) = inner.local_agent(target) else {
        return Ok(());
    };
    // An actor the agent blocks does not become its follower: dropped unanswered, as its
    // mentions are (a server-wide block refused it before this).
    if pipeline
        .blocked(
            Some(&agent.name),
            NAME,
            &Who::default()
                .with_sender(&auth.actor.id)
                .with_sender(&auth.actor.address),
        )
        .is_some()
    {
        return Ok(());
    }
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
    let follow = mapping::embeddable(activity);
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
    let enqueued =
        super::outbound::enqueue(inner, &mut tx, &agent.name, &[inbox], &[accept]).await?;
    tx.commit().await?;
    inner.queue.hand_over(enqueued);
    let event = super::events::Event {
        kind: crate::config::Notify::Follow,
        activity,
        object: None,
        outcome: None,
    };
    super::events::tell(inner, pipeline, &agent, &event, auth).await
}

pub(super) async fn on_undo(
    inner: &Inner,
    pipeline: &Pipeline,
    activity: &Value,
    auth: &Auth,
) -> Result<(), Reject> {
    // An Undo of a Create takes the note back, as a Delete does.
    if let Some(undone) = undone_create(inner, activity).await? {
        return match undone {
            Some(note) => erase_note(inner, pipeline, &note, auth).await,
            None => Ok(()),
        };
    }
    let object = activity.get("object");
    match object {
        Some(o @ Value::Object(_)) => {
            if str_of(o, "type") != Some("Follow") {
                return Ok(());
            }
            if o.get("actor").and_then(iri) != Some(auth.actor.id.as_str()) {
                return Err(Reject::new(403, "undoing someone else's Follow"));
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

pub(super) async fn on_delete(
    inner: &Inner,
    pipeline: &Pipeline,
    activity: &Value,
    auth: &Auth,
) -> Result<(), Reject> {
    let Some(target) = activity.get("object").and_then(iri) else {
        return Ok(());
    };
    if target == auth.actor.id {
        return forget_actor(inner, target).await;
    }
    erase_note(inner, pipeline, target, auth).await
}

/// The note an `Undo` takes back when its object is a `Create`: `Some(Some(note IRI))`, or
/// `Some(None)` for a Create stored before whose note is erased already; `None` when the
/// object is no Create (an Undo naming only an activity id is one when a stored message came
/// from a Create of that id).
async fn undone_create(inner: &Inner, activity: &Value) -> Result<Option<Option<String>>, Reject> {
    match activity.get("object") {
        Some(o @ Value::Object(_)) if str_of(o, "type") == Some("Create") => {
            Ok(Some(o.get("object").and_then(iri).map(str::to_owned)))
        }
        Some(Value::String(id)) => {
            // Each agent the Create woke has a copy, stored under `{activity id} {agent}`.
            let keys: Vec<String> = inner
                .agents
                .all()
                .iter()
                .map(|a| format!("{id} {}", a.name))
                .collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let copies = crate::store::erasure::claimed_by(&inner.db, NAME, &keys).await?;
            let Some(first) = copies.first() else {
                return Ok(None);
            };
            let note = crate::store::messages::get(&inner.db, first)
                .await?
                .and_then(|m| serde_json::from_str::<Value>(&m.body).ok())
                .and_then(|b| b.pointer("/raw/object").and_then(iri).map(str::to_owned));
            Ok(Some(note))
        }
        _ => Ok(None),
    }
}

/// Erases the received note `note_id` when `auth`'s actor wrote it: the messages it became
/// (one per agent it woke) are erased with the stored note, in one transaction
/// ([`Pipeline::erase`]). A note unknown here, or another actor's, changes nothing; so does
/// erasing it again.
async fn erase_note(
    inner: &Inner,
    pipeline: &Pipeline,
    note_id: &str,
    auth: &Auth,
) -> Result<(), Reject> {
    let Some(note) = store::object(&inner.db, note_id).await? else {
        return Ok(());
    };
    if note.kind != "in" || note.author != auth.actor.id {
        tracing::debug!(note = %note_id, actor = %auth.actor.id, "a delete of someone else's note: nothing erased");
        return Ok(());
    }
    let copies = copies_of(inner, &note).await?;
    if note.deleted != 0 && copies.is_empty() {
        return Ok(());
    }
    let mut write = ErasedNote {
        id: note.id.clone(),
        author: note.author.clone(),
        body: store::tombstone(&note.body, &note.id),
    };
    pipeline.erase(&copies, Some(&mut write)).await?;
    Ok(())
}

/// The stored messages (not erased yet) a received note became: every inbound message of its
/// thread whose raw form carries the note.
async fn copies_of(inner: &Inner, note: &store::ObjectRow) -> Result<Vec<String>, Reject> {
    let Some(first) = note.message_id.as_deref() else {
        return Ok(Vec::new());
    };
    let Some(thread) = crate::store::messages::get(&inner.db, first).await? else {
        return Ok(Vec::new());
    };
    let candidates =
        crate::store::erasure::inbound_containing(&inner.db, &thread.thread_id, &note.id).await?;
    Ok(candidates
        .into_iter()
        .filter(|(_, body)| {
            serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|b| b.pointer("/raw/object").and_then(iri).map(str::to_owned))
                .is_some_and(|id| id == note.id)
        })
        .map(|(id, _)| id)
        .collect())
}

/// A received note's row as erased with its messages: deleted, its body a tombstone.
struct ErasedNote {
    id: String,
    author: String,
    body: String,
}

#[async_trait::async_trait]
impl crate::pipeline::EraseWrite for ErasedNote {
    async fn write(&mut self, tx: &mut crate::store::Tx, now: i64) -> crate::Result<()> {
        store::erase_object(tx, &self.id, &self.author, &self.body, now).await?;
        Ok(())
    }
}

pub(super) async fn on_update(inner: &Inner, activity: &Value, auth: &Auth) -> Result<(), Reject> {
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
        return Err(Reject::new(403, "the object is not the actor's"));
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
