//! Interactions an agent asked to be told of (`notify`): a follow, a like or boost of one of its
//! notes, a quote request, each handed to the agent as a message whose part is an `event`. The
//! sender is the verified actor; the thread is the note's when the event concerns one of the
//! agent's notes. No reply is expected: the agent answers only if it chooses to.

use serde_json::Value;

use super::mapping::{self, iri};
use super::reject::Reject;
use super::verify::Auth;
use super::{Inner, NAME, store};
use crate::agents::Agent;
use crate::config::Notify;
use crate::message::{EventPart, Extra, Part};
use crate::moderation::Who;
use crate::pipeline::Pipeline;

impl Inner {
    /// The note at `iri` when one of our agents wrote it and it stands, with that agent.
    ///
    /// # Errors
    /// Database errors.
    pub(super) async fn own_note(
        &self,
        iri: &str,
    ) -> crate::Result<Option<(store::ObjectRow, std::sync::Arc<Agent>)>> {
        let Some(note) = store::object(&self.db, iri).await? else {
            return Ok(None);
        };
        if note.kind != "out" || note.deleted != 0 {
            return Ok(None);
        }
        Ok(self.agents.get(&note.agent).map(|agent| (note, agent)))
    }
}

/// What happened, to tell the agent.
pub(super) struct Event<'a> {
    /// Which interaction.
    pub kind: Notify,
    /// The verified activity.
    pub activity: &'a Value,
    /// The agent's note it concerns, if any.
    pub object: Option<&'a str>,
    /// What switchboard decided, if it did (`accepted`, `rejected`).
    pub outcome: Option<&'a str>,
}

/// Hands `agent` the event when it asked to be told of its kind, unless it blocks the actor
/// or its access rules refuse it. Told once per activity (the ingest's external id).
///
/// # Errors
/// Database errors (the sender retries).
pub(super) async fn tell(
    inner: &Inner,
    pipeline: &Pipeline,
    agent: &Agent,
    event: &Event<'_>,
    auth: &Auth,
) -> Result<(), Reject> {
    if !agent.notified_of(event.kind) {
        return Ok(());
    }
    let activity_id = mapping::str_of(event.activity, "id").unwrap_or_default();
    let thread = match event.object {
        Some(o) => store::object(&inner.db, o).await?.map(|r| r.thread_key),
        None => None,
    };
    let thread_key =
        thread.unwrap_or_else(|| format!("ap-events:{}:{}", agent.name, auth.actor.id));
    let part = Part::Event(EventPart {
        event: event.kind.as_str().to_owned(),
        object: event.object.map(str::to_owned),
        outcome: event.outcome.map(str::to_owned),
        extra: Extra::new(),
    });
    let msg = mapping::note_message(mapping::WokenNote {
        id: uuid::Uuid::now_v7().to_string(),
        activity: event.activity,
        actor_id: &auth.actor.id,
        actor_address: &auth.actor.address,
        actor_doc: &auth.actor.doc,
        method: auth.method.clone(),
        key_id: &auth.key_id,
        verifier: &inner.domain,
        recipient: &agent.address,
        thread_key: &thread_key,
        in_reply_to: None,
        parts: vec![part],
        max_reply_chars: inner.reply_limit(&auth.actor.id).await,
        now: inner.clock.now(),
    })
    .map_err(|e| Reject::from(crate::Error::corrupt(e)))?;
    if pipeline
        .blocked(Some(&agent.name), NAME, &Who::of(&msg.sender))
        .is_some()
        || pipeline.authorize(agent, NAME, &msg.sender).is_err()
    {
        return Ok(());
    }
    let external = format!("{activity_id} {}", agent.name);
    pipeline.ingest(NAME, &external, msg).await?;
    Ok(())
}

/// A `Like` or an `Announce` (`kind`) of one of our agents' notes: told to the agent that
/// wrote it. Of anything else: nothing.
///
/// # Errors
/// Database errors.
pub(super) async fn on_like_or_announce(
    inner: &Inner,
    pipeline: &Pipeline,
    activity: &Value,
    auth: &Auth,
    kind: Notify,
) -> Result<(), Reject> {
    let Some(object) = activity.get("object").and_then(iri) else {
        return Ok(());
    };
    let Some((_, agent)) = inner.own_note(object).await? else {
        return Ok(());
    };
    let event = Event {
        kind,
        activity,
        object: Some(object),
        outcome: None,
    };
    tell(inner, pipeline, &agent, &event, auth).await
}
