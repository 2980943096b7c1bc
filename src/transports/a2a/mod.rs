//! The A2A transport: an A2A 1.0 JSON-RPC server (with 0.3 compatibility) for every hosted
//! agent, at a hub endpoint (`/a2a`) and one endpoint per agent (`/agents/{name}/a2a`).
//!
//! Inbound: a verified SendMessage becomes a durable task and a NormalizedMessage handed to the
//! pipeline; outbound: [`A2aTransport::deliver`] turns the agent's NormalizedResponse into task
//! status, artifacts and stream events. Layout: [`wire`] (shapes, errors, 0.3 translation),
//! [`mapping`] (parts and states), [`tasks`] (durable tasks and change notifications),
//! [`scope`] (whose a task is), [`card`] (agent cards), [`server`] (JSON-RPC and SSE handlers).

pub mod auth;
pub mod card;
pub mod mapping;
pub mod push;
pub mod reply_context;
pub mod scope;
pub mod server;
pub mod store;
pub mod tasks;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::web;
use serde_json::{Value, json};
use tokio::sync::watch;

use self::auth::Verifier;
use self::card::{CardContext, RenderedCard};
use self::server::A2aState;
use super::{Parts, Started, TransportModule};
use crate::error::{Error, Result};
use crate::pipeline::Pipeline;
use crate::queue::JobHandler;

use self::mapping::{response_state, to_a2a_part};
use self::store::TaskRow;
use self::tasks::{Change, TaskEngine, TaskWrites};
use self::wire::TaskState;
use crate::error::OutboundError;
use crate::message::{NormalizedMessage, ResponseEvent};
use crate::pipeline::{
    AfterCommit, DeliversInTransaction, Delivery, EndsTurns, StreamsProgress, Transport,
};

/// The A2A transport as the application assembles it: the task engine its server and its
/// outbound half share, and the parts its routes and push jobs are built from.
#[derive(Debug)]
pub struct A2a {
    engine: TaskEngine,
    parts: Parts,
}

/// The A2A transport, as the application lists it.
pub const TRANSPORT: super::Descriptor = super::Descriptor {
    name: NAME,
    job_kinds: &[push::KIND],
    listeners: &[],
    address: Some(crate::ops::AddressKind {
        key: "a2a_card",
        label: "A2A card",
        rank: 3,
        of: card_url,
    }),
    build,
};

/// The URL of `agent`'s agent card, when A2A is on.
fn card_url(
    config: &crate::config::Config,
    site: &crate::site::Site,
    agent: &str,
) -> Option<String> {
    config
        .a2a
        .enabled
        .then(|| site.url(&format!("/agents/{agent}/agent-card.json")))
}

/// Builds the A2A transport, or nothing when `a2a.enabled` is off.
///
/// # Errors
/// None today; the signature is every transport's.
pub fn build(parts: &Parts) -> Result<Option<Box<dyn TransportModule>>> {
    Ok(parts.config.a2a.enabled.then(|| {
        Box::new(A2a {
            engine: TaskEngine::new(parts.db.clone(), parts.clock.clone(), parts.queue.clone()),
            parts: parts.clone(),
        }) as Box<dyn TransportModule>
    }))
}

#[async_trait::async_trait]
impl TransportModule for A2a {
    fn outbound(&self) -> Arc<dyn Transport> {
        Arc::new(A2aTransport::new(self.engine.clone()))
    }

    fn jobs(&self) -> Vec<(&'static str, Arc<dyn JobHandler>)> {
        let p = &self.parts;
        let push = push::PushHandler::new(
            p.db.clone(),
            p.http.clone(),
            p.keys.clone(),
            p.clock.clone(),
            p.queue.clone(),
            p.site.base_url().to_owned(),
        );
        vec![(push::KIND, Arc::new(push))]
    }

    /// Its routes (cards, JSON-RPC endpoints) and, on PostgreSQL, its channel on the instance's
    /// one `LISTEN` connection, which carries task changes made by other instances to this
    /// one's streams.
    async fn start(&self, pipeline: &Pipeline, _: watch::Receiver<bool>) -> Result<Started> {
        let state = build_state(pipeline.clone(), self.engine.clone(), &self.parts).await?;
        tasks::listen(&self.engine, &self.parts.queue);
        Ok(Started {
            routes: Some(Arc::new(move |cfg: &mut web::ServiceConfig| {
                server::configure(cfg, state.clone());
            })),
            ..Started::default()
        })
    }
}

/// Builds the state of the A2A routes: default agent, cards and their validators.
///
/// # Errors
/// [`Error::Config`] when no agent can answer at the hub.
async fn build_state(
    pipeline: Pipeline,
    engine: TaskEngine,
    parts: &Parts,
) -> Result<Arc<A2aState>> {
    let config = &parts.config;
    let public_url = parts.site.base_url();
    let agents = pipeline.agents().all();
    let default_agent = config
        .a2a
        .default_agent
        .clone()
        .or_else(|| config.agents.first().map(|a| a.name.clone()))
        .and_then(|n| pipeline.agents().get(&n))
        .or_else(|| agents.first().cloned())
        .map(|a| a.name.clone())
        .ok_or_else(|| Error::Config("a2a: no agent to answer at the hub".into()))?;
    let ctx = CardContext {
        public_url,
        cfg: &config.a2a,
    };
    let key = parts.keys.ed25519(push::KEY_NAME).await?;
    let sign = |card: Value| card::signed(card, &key, public_url);
    let mut cards = HashMap::new();
    let mut extended_cards = HashMap::new();
    let mut policies = HashMap::new();
    for agent in &agents {
        let settings = config
            .agents
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(&agent.name))
            .and_then(|a| a.a2a.as_ref());
        if let Some(s) = settings {
            policies.insert(agent.name.to_lowercase(), s.auth.clone());
        }
        let name = agent.name.to_lowercase();
        if let Some(c) = card::agent_card(&ctx, agent, settings, false) {
            cards.insert(name.clone(), RenderedCard::new(&sign(c)?));
        }
        if let Some(c) = card::agent_card(&ctx, agent, settings, true) {
            extended_cards.insert(name, sign(c)?);
        }
    }
    let default_policy = policies.get(&default_agent.to_lowercase());
    let hub_card = RenderedCard::new(&sign(card::hub_card(
        &ctx,
        parts.site.domain(),
        &agents,
        policies.values(),
        default_policy,
    ))?);
    // Last-Modified: when each card's content first appeared, kept in the database.
    let now = pipeline.clock().now_ms();
    let hub_card = {
        let at = store::card_modified(&parts.db, "", &hub_card.etag, now).await?;
        hub_card.modified_at(at)
    };
    let mut dated = HashMap::with_capacity(cards.len());
    for (name, card) in cards {
        let at = store::card_modified(&parts.db, &name, &card.etag, now).await?;
        dated.insert(name, card.modified_at(at));
    }
    let cards = dated;
    Ok(Arc::new(A2aState {
        agents: Arc::clone(pipeline.agents()),
        main: pipeline.on_main((pipeline.clone(), engine)),
        cfg: config.a2a.clone(),
        default_agent,
        max_body: config.server.max_body_bytes,
        hub_card,
        cards,
        extended_cards,
        verifier: Verifier::new(parts.http.clone(), parts.clock.clone(), parts.site.domain()),
        policies,
        trust: parts.trust.clone(),
        public_url: public_url.to_owned(),
        web_domain: parts.site.domain().to_owned(),
        allow_private: config.net.allow_private_addresses,
    }))
}

/// The transport name A2A messages are ingested under.
pub const NAME: &str = "a2a";

/// Where a task document remembers the artifact a turn is streaming (never rendered).
const STREAMING_KEY: &str = "_streaming";

/// The artifact a turn's streamed chunks build: one per inbound message.
fn stream_artifact_id(original: &NormalizedMessage) -> String {
    format!("{}-stream", original.id)
}

/// Whether `task` was streaming the artifact of `original`'s turn; forgets it either way (the
/// turn is ending).
fn take_stream(task: &mut Value, original: &NormalizedMessage) -> bool {
    task.as_object_mut()
        .and_then(|t| t.remove(STREAMING_KEY))
        .is_some_and(|id| id == stream_artifact_id(original).as_str())
}

/// Ends a streamed artifact whose turn did not end in it (the answer went into the status
/// message, or there was none): an empty last chunk, appended, so what streamed stays as it is.
fn end_stream(row: &TaskRow, original: &NormalizedMessage) -> Value {
    json!({ "artifactUpdate": {
        "taskId": row.id, "contextId": row.context_id,
        "artifact": {
            "artifactId": stream_artifact_id(original), "name": "response",
            "parts": [{ "text": "" }],
        },
        "append": true, "lastChunk": true,
    }})
}

/// Where a task document keeps the parts of a multi-agent chain's earlier answers until its
/// last answer arrives (never rendered).
const CHAIN_KEY: &str = "_chain";

/// `parts` (A2A parts), each marked with the agent that wrote it, for a combined answer.
fn attributed(parts: &[Value], agent: &str) -> Vec<Value> {
    parts
        .iter()
        .map(|p| {
            let mut p = p.clone();
            p["metadata"]["mentionable"]["agent"] = json!(agent);
            p
        })
        .collect()
}

/// The parts earlier agents of a chain answered with, held back in `task` (removed).
fn take_chain(task: &mut Value) -> Vec<Value> {
    match task.as_object_mut().and_then(|t| t.remove(CHAIN_KEY)) {
        Some(Value::Array(parts)) => parts,
        _ => Vec::new(),
    }
}

/// The task a message belongs to (its reply context's).
fn task_of(original: &NormalizedMessage) -> Result<String, OutboundError> {
    reply_context::ReplyContext::of(original).map(|c| c.task_id)
}

fn not_stored(task_id: &str) -> OutboundError {
    OutboundError::permanent(format!("A2A task {task_id} is not stored"))
}

/// The change a response makes to its task: status, artifacts or a direct message, and the
/// stream events that tell of them.
fn apply_response(
    d: &Delivery,
    row: &mut TaskRow,
    task: &mut Value,
    now: i64,
) -> Result<Change, wire::RpcError> {
    let resp = &d.response;
    if row.last_response_id.as_deref() == Some(resp.id.as_str())
        || TaskState::parse(&row.state).is_some_and(TaskState::is_terminal)
    {
        // Already applied (a retried delivery), or canceled meanwhile.
        return Ok(Change::Keep);
    }
    let state = response_state(resp);
    let mut parts: Vec<Value> = resp.parts.iter().map(to_a2a_part).collect();
    row.last_response_id = Some(resp.id.clone());
    let mut streamed = take_stream(task, &d.original);
    if d.continues && state == TaskState::Completed {
        // Sibling agents answer next: this answer waits for theirs, so the caller gets one
        // combined answer when the chain ends.
        let mut held = take_chain(task);
        held.extend(attributed(&parts, &resp.agent));
        task[CHAIN_KEY] = Value::Array(held);
        let mut events = Vec::new();
        if streamed {
            events.push(end_stream(row, &d.original));
        }
        return Ok(Change::Write(events));
    }
    let held = take_chain(task);
    if !held.is_empty() {
        let own = attributed(&parts, &resp.agent);
        parts = held;
        parts.extend(own);
    }
    let mut metadata = resp.metadata.clone().unwrap_or_default();
    let hints = match metadata.remove("a2a") {
        Some(Value::Object(h)) => h,
        _ => serde_json::Map::new(),
    };
    let hint = |k: &str| hints.get(k).and_then(Value::as_bool).unwrap_or(false);
    let direct = hints.get("reply").and_then(Value::as_str) == Some("message");
    let mut events = Vec::new();
    let mut status_message = None;
    let agent_message = json!({
        "messageId": resp.id, "contextId": row.context_id, "taskId": row.id,
        "role": "ROLE_AGENT", "parts": parts,
    });
    if parts.is_empty() {
    } else if direct {
        let mut m = agent_message.clone();
        if let Some(o) = m.as_object_mut() {
            o.remove("taskId");
        }
        task["_directMessage"] = m.clone();
        events.push(json!({ "message": m }));
    } else if state == TaskState::Completed && !hint("status_message") {
        // A streamed answer ends in the artifact its chunks built: same id, the final parts
        // replacing them (`append: false`, `lastChunk: true`).
        let artifact_id = if std::mem::take(&mut streamed) {
            stream_artifact_id(&d.original)
        } else {
            resp.id.clone()
        };
        let mut artifact = json!({ "artifactId": artifact_id, "name": "response", "parts": parts });
        if !metadata.is_empty() {
            artifact["metadata"] = Value::Object(metadata.clone());
        }
        match task.get_mut("artifacts") {
            Some(Value::Array(a)) => a.push(artifact.clone()),
            _ => task["artifacts"] = json!([artifact.clone()]),
        }
        if hint("chunked") {
            let n = parts.len();
            for (i, p) in parts.iter().enumerate() {
                let mut chunk = artifact.clone();
                chunk["parts"] = json!([p]);
                events.push(json!({ "artifactUpdate": {
                    "taskId": row.id, "contextId": row.context_id,
                    "artifact": chunk, "append": i > 0, "lastChunk": i + 1 == n,
                }}));
            }
        } else {
            events.push(json!({ "artifactUpdate": {
                "taskId": row.id, "contextId": row.context_id,
                "artifact": artifact, "append": false, "lastChunk": true,
            }}));
        }
    } else {
        match task.get_mut("history") {
            Some(Value::Array(h)) => h.push(agent_message.clone()),
            _ => task["history"] = json!([agent_message.clone()]),
        }
        status_message = Some(agent_message);
    }
    if streamed {
        events.push(end_stream(row, &d.original));
    }
    events.push(TaskEngine::set_status(
        row,
        task,
        state,
        status_message,
        now,
    ));
    Ok(Change::Write(events))
}

/// Applies agents' responses to their tasks.
#[derive(Debug, Clone)]
pub struct A2aTransport {
    engine: TaskEngine,
}

impl A2aTransport {
    /// Over the task store.
    #[must_use]
    pub fn new(engine: TaskEngine) -> Self {
        Self { engine }
    }
}

#[async_trait::async_trait]
impl Transport for A2aTransport {
    fn name(&self) -> &str {
        NAME
    }

    /// Anyone may call; an answer goes back in the caller's own request.
    fn exposure(&self) -> crate::pipeline::Exposure {
        crate::pipeline::Exposure {
            open: true,
            answers_in_request: true,
            per_host: false,
        }
    }

    /// The tasks whose status last changed before `before`: their documents hold the
    /// caller's messages.
    async fn erase_before(&self, before: i64) -> crate::error::Result<u64> {
        self.engine.erase_before(before, 500).await
    }

    async fn deliver(&self, d: &Delivery) -> Result<(), OutboundError> {
        let task_id = task_of(&d.original)?;
        let outcome = self
            .engine
            .update(&task_id, |row, task, now| apply_response(d, row, task, now))
            .await
            .map_err(|e| OutboundError::temporary(e.message))?;
        match outcome {
            Some(_) => Ok(()),
            None => Err(not_stored(&task_id)),
        }
    }

    fn carries_policy_parts(&self) -> bool {
        true
    }

    fn delivers_in_transaction(&self) -> Option<&dyn DeliversInTransaction> {
        Some(self)
    }

    fn streams_progress(&self) -> Option<&dyn StreamsProgress> {
        Some(self)
    }

    fn ends_turns(&self) -> Option<&dyn EndsTurns> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl DeliversInTransaction for A2aTransport {
    async fn deliver_in(
        &self,
        tx: &mut crate::store::Tx,
        d: &Delivery,
    ) -> Result<AfterCommit, OutboundError> {
        let task_id = task_of(&d.original)?;
        let mut writes = TaskWrites::default();
        let outcome = self
            .engine
            .update_in(tx, &mut writes, &task_id, |row, task, now| {
                apply_response(d, row, task, now)
            })
            .await
            .map_err(|e| OutboundError::temporary(e.message))?;
        if outcome.is_none() {
            return Err(not_stored(&task_id));
        }
        let engine = self.engine.clone();
        Ok(Box::new(move || engine.committed(writes)))
    }
}

#[async_trait::async_trait]
impl StreamsProgress for A2aTransport {
    /// Text deltas and finished parts become artifact-update chunks of one artifact per turn,
    /// in order: the first with `append: false`, the rest `append: true`, none the last chunk
    /// (the turn's end closes it: with the final parts when it completes, else with an empty
    /// last chunk).
    async fn progress(
        &self,
        original: &NormalizedMessage,
        event: &ResponseEvent,
    ) -> Result<(), OutboundError> {
        let part = match event {
            ResponseEvent::Delta(d) => json!({ "text": d.text }),
            ResponseEvent::Part(p) => to_a2a_part(&p.part),
            _ => return Ok(()),
        };
        let task_id = task_of(original)?;
        let artifact_id = stream_artifact_id(original);
        self.engine
            .update(&task_id, |row, task, _now| {
                let state = TaskState::parse(&row.state);
                if row.turn_message_id != original.id
                    || state.is_some_and(|s| s.is_terminal() || s.is_interrupted())
                {
                    return Ok(Change::Keep);
                }
                let append =
                    task.get(STREAMING_KEY).and_then(Value::as_str) == Some(artifact_id.as_str());
                task[STREAMING_KEY] = json!(artifact_id);
                Ok(Change::Write(vec![json!({ "artifactUpdate": {
                    "taskId": row.id, "contextId": row.context_id,
                    "artifact": { "artifactId": artifact_id, "name": "response", "parts": [part] },
                    "append": append, "lastChunk": false,
                }})]))
            })
            .await
            .map_err(|e| OutboundError::temporary(e.message))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl EndsTurns for A2aTransport {
    /// A task whose agent had nothing to say completes without artifacts; one whose dispatch
    /// failed for good fails, with a status message that says so and nothing more. Only the
    /// turn that `original` started is ended: a task that has moved on is left alone.
    async fn unanswered(
        &self,
        original: &NormalizedMessage,
        failure: Option<&str>,
    ) -> Result<(), OutboundError> {
        let task_id = task_of(original)?;
        if let Some(why) = failure {
            tracing::warn!(
                task = %task_id,
                error = why,
                "the agent could not answer; the task fails"
            );
        }
        self.engine
            .update(&task_id, |row, task, now| {
                let state = TaskState::parse(&row.state);
                // A sibling agent woken in a chain is not the task's turn, but the task waits
                // for it: its silence ends the chain with what the others said.
                let relayed = crate::pipeline::relayed_from(original).is_some()
                    && task.get(CHAIN_KEY).is_some();
                if (row.turn_message_id != original.id && !relayed)
                    || state.is_some_and(|s| s.is_terminal() || s.is_interrupted())
                {
                    return Ok(Change::Keep);
                }
                let mut events = Vec::new();
                if take_stream(task, original) {
                    events.push(end_stream(row, original));
                }
                let held = take_chain(task);
                if !held.is_empty() {
                    let artifact = json!({
                        "artifactId": format!("{}-chain", original.id),
                        "name": "response",
                        "parts": held,
                    });
                    match task.get_mut("artifacts") {
                        Some(Value::Array(a)) => a.push(artifact.clone()),
                        _ => task["artifacts"] = json!([artifact.clone()]),
                    }
                    events.push(json!({ "artifactUpdate": {
                        "taskId": row.id, "contextId": row.context_id,
                        "artifact": artifact, "append": false, "lastChunk": true,
                    }}));
                }
                let (state, message) = match failure {
                    None => (TaskState::Completed, None),
                    Some(_) => (
                        TaskState::Failed,
                        Some(json!({
                            "messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_AGENT",
                            "taskId": row.id, "contextId": row.context_id,
                            "parts": [{"text": "The agent could not answer this message."}],
                        })),
                    ),
                };
                events.push(TaskEngine::set_status(row, task, state, message, now));
                Ok(Change::Write(events))
            })
            .await
            .map_err(|e| OutboundError::temporary(e.message))?;
        Ok(())
    }
}
