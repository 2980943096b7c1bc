//! Moderation activities from remote servers: `Block` of one of our agents by an actor (from then
//! the agent never addresses or delivers to that actor, and the actor's notes to it are stored
//! but not answered, until the actor's `Undo`), and `Flag`, a report of abuse (stored for the
//! operator and, when `moderation.reports_to` is set, mailed there by a job committed with it).

use serde_json::{Value, json};

use super::mapping::{self, iri, str_of};
use super::reject::Reject;
use super::verify::Auth;
use super::{Inner, NAME, store};

/// The most reported objects kept of one report.
const MAX_OBJECTS: usize = 50;
/// The longest comment kept of one report, in characters.
const MAX_COMMENT: usize = 5_000;

/// `Block {actor, object: our agent}`: the actor blocks the agent. A Block of anything else is
/// ignored. The actor also stops following the agent (as the blocking server does on its side).
pub(super) async fn on_block(inner: &Inner, activity: &Value, auth: &Auth) -> Result<(), Reject> {
    let Some(agent) = activity
        .get("object")
        .and_then(iri)
        .and_then(|t| inner.local_agent(t))
    else {
        return Ok(());
    };
    let id = str_of(activity, "id").unwrap_or_default();
    let now = inner.clock.now_ms();
    store::add_blocked_by(&inner.db, &agent.name, &auth.actor.id, id, now).await?;
    store::remove_follower(&inner.db, Some(&agent.name), &auth.actor.id).await?;
    inner.metrics.moderation("block");
    tracing::info!(agent = %agent.name, actor = %auth.actor.id, "blocked by a remote actor");
    Ok(())
}

/// An `Undo` of a `Block`: the actor lifts its block. Returns whether the Undo was one (an
/// embedded `Block`, or the id of a Block the actor made); any other Undo is left to the
/// caller. Only the blocking actor may undo its Block.
pub(super) async fn on_undo_block(
    inner: &Inner,
    activity: &Value,
    auth: &Auth,
) -> Result<bool, Reject> {
    let removed = match activity.get("object") {
        Some(o @ Value::Object(_)) if str_of(o, "type") == Some("Block") => {
            if o.get("actor").and_then(iri) != Some(auth.actor.id.as_str()) {
                return Err(Reject::new(403, "undoing someone else's Block"));
            }
            let Some(agent) = o
                .get("object")
                .and_then(iri)
                .and_then(|t| inner.local_agent(t))
            else {
                return Ok(true);
            };
            store::remove_blocked_by(&inner.db, &agent.name, &auth.actor.id).await?
        }
        Some(Value::String(id)) => {
            match store::remove_block_activity(&inner.db, &auth.actor.id, id).await? {
                0 => return Ok(false),
                n => n,
            }
        }
        _ => return Ok(false),
    };
    if removed > 0 {
        inner.metrics.moderation("unblock");
        tracing::info!(actor = %auth.actor.id, "a remote actor lifted its block");
    }
    Ok(true)
}

/// The local agent an IRI of ours names: its actor, or one of its notes.
fn agent_of(inner: &Inner, object: &str) -> Option<String> {
    if let Some(a) = inner.local_agent(object) {
        return Some(a.name.clone());
    }
    let rest = object.strip_prefix(&format!("{}/agents/", inner.base))?;
    let (name, _) = rest.split_once("/notes/")?;
    inner.agents.get(name).map(|a| a.name.clone())
}

/// `Flag {actor, object: [our actor or note IRIs, …], content}`: a report of abuse, often sent
/// by a server's instance actor. Stored once per activity with the objects of ours it names
/// (a report naming none of ours is ignored); mailed to `moderation.reports_to` when set.
pub(super) async fn on_flag(
    inner: &Inner,
    activity: &Value,
    activity_id: &str,
    auth: &Auth,
) -> Result<(), Reject> {
    let objects: Vec<&str> = mapping::many(activity.get("object"))
        .into_iter()
        .filter_map(iri)
        .filter(|o| inner.is_local(o))
        .take(MAX_OBJECTS)
        .collect();
    if objects.is_empty() {
        return Ok(());
    }
    let agent = objects.iter().find_map(|o| agent_of(inner, o));
    let content: String = str_of(activity, "content")
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .take(MAX_COMMENT)
        .collect();
    let id = uuid::Uuid::now_v7().to_string();
    let host = mapping::host_of(&auth.actor.id).unwrap_or_default();
    let objects = json!(objects).to_string();
    let now = inner.clock.now_ms();
    let report = crate::store::reports::NewReport {
        id: &id,
        activity_id,
        transport: NAME,
        reporter: &auth.actor.id,
        host: &host,
        agent: agent.as_deref(),
        objects: &objects,
        content: &content,
    };
    let mut tx = inner.db.begin().await?;
    let stored = crate::store::reports::insert(&mut tx, &report, now).await?;
    let mut enqueued = None;
    if stored && let Some(to) = &inner.reports_to {
        let payload = serde_json::to_string(&crate::store::reports::MailJob {
            report_id: id.clone(),
            to: to.clone(),
        })
        .map_err(crate::Error::corrupt)?;
        let job = (format!("{}:{id}", crate::store::reports::JOB_KIND), payload);
        enqueued = Some(
            inner
                .queue
                .enqueue(&mut tx, crate::store::reports::JOB_KIND, &[job], now)
                .await?,
        );
    }
    tx.commit().await?;
    if let Some(e) = enqueued {
        inner.queue.hand_over(e);
    }
    if stored {
        inner.metrics.moderation("report");
        tracing::info!(report = %id, reporter = %auth.actor.id, agent = ?agent, "report received");
    }
    Ok(())
}

/// Counts and logs a note from `actor`, who blocked `agent`, stored and held.
pub(super) fn note_held(inner: &Inner, agent: &crate::agents::Agent, actor: &str) {
    inner
        .metrics
        .refused(&agent.name, NAME, "blocked-by-sender");
    tracing::info!(agent = %agent.name, actor, "note from an actor who blocked the agent: stored, not answered");
}

/// The ingest write of a note to an agent its author blocked: nothing of its own to store, and
/// the message held.
pub(super) struct BlockedBySender;

#[async_trait::async_trait]
impl crate::pipeline::IngestWrite for BlockedBySender {
    async fn write(&mut self, _: &mut crate::store::Tx, _: i64) -> crate::Result<bool> {
        Ok(true)
    }

    fn blocked_by_sender(&self) -> bool {
        true
    }
}
