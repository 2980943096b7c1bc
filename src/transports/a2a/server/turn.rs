//! What a message turn hands the pipeline: the agent it goes to, its stored attachments, its
//! NormalizedMessage and history entry, and the answer when the pipeline refuses it.

use serde_json::{Value, json};

use super::Served;
use super::call::Call;
use crate::error::Error;
use crate::message::{
    BytesRef, Extra, FilePart, IdentityEvidence, MentionRelay, NoRelay, NormalizedMessage, Part,
    ReceivedVia, RecipientCapabilities,
};
use crate::transports::a2a::NAME;
use crate::transports::a2a::mapping::{self, InPart};
use crate::transports::a2a::scope;
use crate::transports::a2a::store::{self as sql, TaskRow};
use crate::transports::a2a::tasks::internal;
use crate::transports::a2a::wire::{self, RpcError, WireMessage};
use crate::trust::Expected;

/// The leading `@name` (or `@name@domain`) of the first text part, if it names a local agent.
pub(super) fn addressed_agent(state: &Served, parts: &[Value]) -> Option<String> {
    let text = parts
        .iter()
        .find_map(|p| p.get("text").and_then(Value::as_str))?;
    local_agent(state, text.split_whitespace().next()?)
}

/// Every local agent the leading `@name` words of the first text part name, in order, each
/// once (the run of handles ends at the first word that is not one).
fn addressed_agents(state: &Served, parts: &[Value]) -> Vec<String> {
    let Some(text) = parts
        .iter()
        .find_map(|p| p.get("text").and_then(Value::as_str))
    else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let Some(name) = local_agent(state, word) else {
            break;
        };
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The local agent `word` (`@name` or `@name@domain`, a trailing `,` or `:` allowed) names.
fn local_agent(state: &Served, word: &str) -> Option<String> {
    let handle = word.strip_prefix('@')?;
    let (name, domain) = match handle.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (handle, None),
    };
    let name = name.trim_end_matches([',', ':']);
    let agents = state.pipeline.agents();
    if domain.is_some_and(|d| {
        let d = d.trim_end_matches([',', ':']);
        !d.eq_ignore_ascii_case(agents.domain()) && !d.eq_ignore_ascii_case(&state.web_domain)
    }) {
        return None;
    }
    agents.get(name).map(|a| a.name.clone())
}

/// Stores attachments and builds the contract parts.
pub(super) async fn store_parts(state: &Served, parts: Vec<InPart>) -> Result<Vec<Part>, RpcError> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            InPart::Ready(p) => out.push(*p),
            InPart::Bytes { data, mime, name } => {
                let stored =
                    state
                        .pipeline
                        .blobs()
                        .put(&data, &mime)
                        .await
                        .map_err(|e| match e {
                            Error::TooLarge(why) => RpcError::invalid_field("message.parts", why),
                            other => internal(&other),
                        })?;
                out.push(Part::File(FilePart {
                    name,
                    mime,
                    size: u64::try_from(data.len()).ok(),
                    bytes_ref: BytesRef::ContentAddressed(stored),
                    extra: Extra::new(),
                }));
            }
        }
    }
    Ok(out)
}

/// The wire message as it goes into the task's history.
pub(super) fn history_message(raw: &Value, task_id: &str, context_id: &str) -> Value {
    let mut m = raw.clone();
    if let Some(obj) = m.as_object_mut() {
        obj.insert("taskId".into(), json!(task_id));
        obj.insert("contextId".into(), json!(context_id));
    }
    m
}

/// Why a message was refused, when the caller may be told (its own fault).
pub(super) fn refusal(e: &Error) -> Option<String> {
    match e {
        Error::Invalid(why) | Error::TooLarge(why) => Some(why.clone()),
        _ => None,
    }
}

/// The JSON-RPC error for a message ingest refused or could not take.
pub(super) fn not_ingested(e: &Error) -> RpcError {
    // The agent's access rules: without a credential, presenting one may help (401); with
    // one, it will not (403).
    if let Error::RateLimited { retry_after_s } = e {
        return RpcError::new(wire::RATE_LIMITED, retry_after_s.to_string());
    }
    if let Error::Blocked = e {
        return RpcError::new(
            wire::FORBIDDEN,
            "this agent does not accept messages from this caller",
        );
    }
    if let Error::Refused { authenticated } = e {
        let code = if *authenticated {
            wire::FORBIDDEN
        } else {
            wire::UNAUTHENTICATED
        };
        return RpcError::new(code, "this agent does not accept messages from this caller");
    }
    match refusal(e) {
        Some(why) => RpcError::invalid_field("message", why),
        None => internal(e),
    }
}

/// The dedupe key of turn `n` (from 1) of task `task_id`.
pub(super) fn turn_key(task_id: &str, n: usize) -> String {
    format!("{task_id}:{n}")
}

/// The identity evidence the first turn of task `task_id` was stored with, which a
/// continuation assertion on a later turn vouches for again. None when that turn is no longer
/// stored or cannot be read (logged), so that continuations are then dropped.
async fn opening_identities(state: &Served, task_id: &str) -> Vec<IdentityEvidence> {
    /// The part of a stored NormalizedMessage read here.
    #[derive(serde::Deserialize)]
    struct Opening {
        sender: OpeningSender,
    }
    #[derive(serde::Deserialize)]
    struct OpeningSender {
        #[serde(default)]
        identities: Option<Vec<IdentityEvidence>>,
    }
    let body = match sql::inbound_body(state.engine.db(), NAME, &turn_key(task_id, 1)).await {
        Ok(Some(body)) => body,
        Ok(None) => return Vec::new(),
        Err(e) => {
            tracing::warn!(task = task_id, error = %e, "the task's first turn could not be read");
            return Vec::new();
        }
    };
    match serde_json::from_str::<Opening>(&body) {
        Ok(o) => o.sender.identities.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(task = task_id, error = %e, "the task's first turn could not be read");
            Vec::new()
        }
    }
}

/// Appends to the turn's sender the evidence of the identity assertions its message forwards
/// (checked by [`crate::trust`]; `aud` must be the endpoint the message came to, the agent's or
/// the hub's); assertions that fail are dropped there. `later_turn`: the message continues
/// task `row`, so a continuation assertion for it is accepted, for the subject a subject
/// assertion on the task's first turn vouched for.
pub(super) async fn attach_attestations(
    state: &Served,
    call: &Call,
    msg: &WireMessage,
    row: &TaskRow,
    later_turn: bool,
    nm: &mut NormalizedMessage,
) {
    let assertions = mapping::identity_assertions(msg.metadata.as_ref());
    if assertions.is_empty() {
        return;
    }
    let name = state
        .pipeline
        .agents()
        .get(&row.agent)
        .map_or_else(|| row.agent.clone(), |a| a.name.clone());
    let mut audiences = vec![format!("{}/agents/{name}/a2a", state.public_url)];
    if call.agent.is_none() {
        audiences.push(format!("{}/a2a", state.public_url));
    }
    let opening = if later_turn {
        opening_identities(state, &row.id).await
    } else {
        Vec::new()
    };
    let expected = Expected {
        audiences: &audiences,
        task_id: later_turn.then_some(row.id.as_str()),
        opening: &opening,
        transport: NAME,
    };
    let evidence = state.trust.verify_all(&assertions, &expected).await;
    if !evidence.is_empty() {
        nm.sender
            .identities
            .get_or_insert_with(Vec::new)
            .extend(evidence);
    }
}

/// The NormalizedMessage of a turn of task `row`.
#[allow(clippy::too_many_arguments)]
pub(super) fn turn_message(
    state: &Served,
    call: &Call,
    msg: &WireMessage,
    raw: &Value,
    row: &TaskRow,
    id: String,
    parts: Vec<Part>,
    in_reply_to: Option<String>,
    now: i64,
    streaming: bool,
) -> Result<NormalizedMessage, RpcError> {
    let agent = state
        .pipeline
        .agents()
        .get(&row.agent)
        .ok_or_else(|| RpcError::new(wire::INTERNAL_ERROR, "the task's agent is gone"))?;
    let policy_resolution = mapping::policy_claim(msg.metadata.as_ref(), now)
        .map_err(|why| RpcError::invalid_field("message.metadata", why))?;
    let mut nm = NormalizedMessage {
        id,
        thread_id: scope::thread_id(&row.owner, &row.context_id),
        in_reply_to,
        sender: call.caller.sender.clone(),
        recipient: agent.address.clone(),
        parts,
        content_warning: None,
        sensitive: false,
        history: None,
        history_cache_breakpoint_after: None,
        recipient_capabilities: RecipientCapabilities {
            mention_relay: MentionRelay::None(NoRelay {}),
            agent_chain: mapping::agent_chain(msg.metadata.as_ref()),
            formats: vec![
                "text/plain".into(),
                "text/markdown".into(),
                "application/json".into(),
            ],
            attachments: true,
            streaming,
            max_text_chars: None,
        },
        received_via: ReceivedVia::A2a,
        received_at: crate::message::Timestamp::from_unix_millis(now),
        raw: json!({
            "taskId": row.id,
            "contextId": row.context_id,
            "method": call.method,
            "message": raw,
            "metadata": call.params.get("metadata"),
        }),
        policy_resolution,
        received_trace: None,
        reply_context: crate::message::ReplyContext::NONE,
        extra: also_addressed(state, call, msg, &agent.name),
    };
    nm.set_reply_context(&crate::transports::a2a::reply_context::ReplyContext {
        task_id: row.id.clone(),
        context_id: row.context_id.clone(),
    })
    .map_err(|e| internal(&Error::corrupt(e)))?;
    Ok(nm)
}

/// At the hub, the further agents a message's leading handles name besides `agent` (A2A gives
/// its caller one answer: the pipeline has them answer after `agent`, in one chain).
fn also_addressed(state: &Served, call: &Call, msg: &WireMessage, agent: &str) -> Extra {
    let mut extra = Extra::new();
    if call.agent.is_some() {
        return extra;
    }
    let others: Vec<Value> = addressed_agents(state, &msg.parts)
        .into_iter()
        .filter(|n| !n.eq_ignore_ascii_case(agent))
        .filter_map(|n| state.pipeline.agents().get(&n).map(|a| json!(a.address)))
        .collect();
    if !others.is_empty() {
        extra.insert(crate::message::ALSO_ADDRESSED.into(), Value::Array(others));
    }
    extra
}
