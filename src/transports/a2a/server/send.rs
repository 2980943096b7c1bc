//! SendMessage and SendStreamingMessage: a new task, a turn of a task waiting for input, or a
//! retry of either, answered with the task, its stream, or the agent's direct message.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Served;
use super::call::{Call, Reply, param_usize};
use super::push_config::{check_push_target, parse_push_config, store_push_config};
use super::stream::open_stream;
use super::tasks::{render_task, task_result, visible_task};
use super::turn::{
    addressed_agent, attach_attestations, history_message, not_ingested, refusal, store_parts,
    turn_key, turn_message,
};
use crate::error::Error;
use crate::transports::a2a::NAME;
use crate::transports::a2a::mapping::{self, Limits};
use crate::transports::a2a::scope;
use crate::transports::a2a::store::{self as sql, Owner, TaskRow};
use crate::transports::a2a::tasks::{Change, Created, NewTask, TaskEngine, internal};
use crate::transports::a2a::wire::{
    self, RpcError, TaskState, UNSUPPORTED_OPERATION, Version, WireMessage,
};

/// What a send's `configuration` asks for.
pub(super) struct SendConfig {
    push: Option<Value>,
    return_immediately: bool,
    history_length: Option<usize>,
}

/// Reads a send's `configuration`.
pub(super) fn send_config(call: &Call) -> Result<SendConfig, RpcError> {
    let cfg = match call.params.get("configuration") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(RpcError::invalid_field(
                "configuration",
                "must be an object",
            ));
        }
    };
    let return_immediately = match call.version {
        Version::V1 => cfg
            .get("returnImmediately")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Version::V03 => !cfg.get("blocking").and_then(Value::as_bool).unwrap_or(true),
    };
    let push = cfg
        .get("taskPushNotificationConfig")
        .or_else(|| cfg.get("pushNotificationConfig"))
        .filter(|v| v.is_object())
        .map(|v| {
            // Checked now; the task id is filled in once the task exists.
            let flat = match call.version {
                Version::V1 => v.clone(),
                Version::V03 => json!({ "pushNotificationConfig": v }),
            };
            parse_push_config(&flat, call.version, "").map(|_| flat)
        })
        .transpose()
        .map_err(|e| RpcError {
            message: format!("configuration: {}", e.message),
            ..e
        })?;
    Ok(SendConfig {
        push,
        return_immediately,
        history_length: param_usize(&cfg, "historyLength").map_err(|_| {
            RpcError::invalid_field(
                "configuration.historyLength",
                "must be a non-negative integer",
            )
        })?,
    })
}

/// Reads a send's `message`: a user's, with an id.
pub(super) fn parse_message(call: &Call) -> Result<(WireMessage, Value), RpcError> {
    let Some(raw) = call.params.get("message").filter(|m| m.is_object()) else {
        return Err(RpcError::invalid_field("message", "is required"));
    };
    let mut raw = raw.clone();
    if call.version == Version::V03 {
        wire::message_from_v03(&mut raw);
    }
    for (field, what) in [("messageId", "a non-empty string"), ("role", "ROLE_USER")] {
        if raw
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(RpcError::invalid_field(
                &format!("message.{field}"),
                format!("is required: {what}"),
            ));
        }
    }
    let msg: WireMessage = serde_json::from_value(raw.clone())
        .map_err(|e| RpcError::invalid_field("message", format!("malformed: {e}")))?;
    if msg.role != "ROLE_USER" {
        return Err(RpcError::invalid_field(
            "message.role",
            "clients send ROLE_USER",
        ));
    }
    Ok((msg, raw))
}

pub(super) async fn send(state: &Served, call: Call, streaming: bool) -> Result<Reply, RpcError> {
    let config = send_config(&call)?;
    if let Some(p) = &config.push {
        let cfg = parse_push_config(p, call.version, "")?;
        check_push_target(&cfg, state.allow_private)
            .await
            .map_err(|e| RpcError {
                message: format!("configuration: {}", e.message),
                ..e
            })?;
    }
    let (msg, raw) = parse_message(&call)?;
    let owner = call.caller.owner.clone();
    let limits = Limits {
        max_parts: state.cfg.max_parts,
        max_bytes: state.cfg.max_message_bytes,
    };
    let in_parts = mapping::parse_parts(&msg.parts, limits)?;

    // Retries: an Idempotency-Key names the task it started (per caller and endpoint; the same
    // key with another request is refused); a resend of a messageId attaches to its task while
    // that task is still running.
    let idempotency = call.idempotency_key.as_ref().map(|key| {
        let scope = call.agent.as_deref().unwrap_or_default().to_lowercase();
        (scope, key.clone(), fingerprint(&call.params))
    });
    if let Some(task_id) = started_by(state, &owner, idempotency.as_ref()).await? {
        let row = visible_task(state, &call, &task_id).await?;
        return finish_send(state, &call, &config, row, streaming).await;
    }
    let parts = store_parts(state, in_parts).await?;
    let now = state.engine.now();
    let nm_id = uuid::Uuid::now_v7().to_string();

    if let Some(task_id) = &msg.task_id {
        let current = visible_task(state, &call, task_id).await?;
        if msg
            .context_id
            .as_deref()
            .is_some_and(|c| c != current.context_id)
        {
            return Err(RpcError::invalid_field(
                "message.contextId",
                "does not match the task's contextId",
            ));
        }
        let st = TaskState::parse(&current.state);
        if st.is_some_and(TaskState::is_terminal) {
            return Err(RpcError::new(
                UNSUPPORTED_OPERATION,
                "The task is in a terminal state and cannot accept messages",
            ));
        }
        if !st.is_some_and(TaskState::is_interrupted) {
            if current.wire_message_id == msg.message_id {
                return finish_send(state, &call, &config, current, streaming).await;
            }
            return Err(RpcError::new(
                UNSUPPORTED_OPERATION,
                "The task is still working; wait for it to ask for input",
            ));
        }
        let in_reply_to = current.last_response_id.clone();
        let (mid, wid) = (nm_id.clone(), msg.message_id.clone());
        let mut nm = turn_message(
            state,
            &call,
            &msg,
            &raw,
            &current,
            nm_id,
            parts,
            in_reply_to,
            now,
            streaming,
        )?;
        attach_attestations(state, &call, &msg, &current, true, &mut nm).await;
        // A policy state that will be refused leaves the task waiting, as it was.
        state
            .pipeline
            .check_policy_state(NAME, &current.agent, &nm)
            .await
            .map_err(|e| not_ingested(&e))?;
        let mut turn = 0usize;
        let row = state
            .engine
            .update(task_id, |row, task, now| {
                if !TaskState::parse(&row.state).is_some_and(TaskState::is_interrupted) {
                    return Err(RpcError::new(
                        UNSUPPORTED_OPERATION,
                        "The task is no longer waiting for input",
                    ));
                }
                let entry = history_message(&raw, &row.id, &row.context_id);
                if let Some(Value::Array(h)) = task.get_mut("history") {
                    h.push(entry);
                    turn = h.len();
                } else {
                    task["history"] = json!([entry]);
                    turn = 1;
                }
                row.turn_message_id.clone_from(&mid);
                row.wire_message_id.clone_from(&wid);
                let ev = TaskEngine::set_status(row, task, TaskState::Working, None, now);
                Ok(Change::Write(vec![ev]))
            })
            .await?
            .ok_or_else(RpcError::task_not_found)?;
        if let Some(p) = &config.push {
            let cfg = parse_push_config(p, call.version, &row.id)?;
            // The turn's `working` status was stored before the config: push it too. (Nothing
            // later exists yet: the message reaches the agent only below.)
            let working_seq = row.last_seq.max(1);
            store_push_config(state, &row, &cfg, working_seq - 1).await?;
            state
                .engine
                .push_stored(
                    &row.id,
                    cfg["id"].as_str().unwrap_or_default(),
                    &[working_seq],
                )
                .await?;
        }
        let external_id = turn_key(&row.id, turn);
        // The first stream event is the task as it was resumed.
        let snapshot = row.clone();
        if let Err(e) = state.pipeline.ingest(NAME, &external_id, nm).await {
            let failed_msg = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_AGENT",
                "taskId": row.id, "contextId": row.context_id,
                "parts": [{"text": refusal(&e).unwrap_or_else(|| "The message could not be accepted".into())}]});
            state
                .engine
                .update(&row.id, |r, t, now| {
                    Ok(Change::Write(vec![TaskEngine::set_status(
                        r,
                        t,
                        TaskState::Failed,
                        Some(failed_msg.clone()),
                        now,
                    )]))
                })
                .await?;
            return Err(not_ingested(&e));
        }
        return finish_send(state, &call, &config, snapshot, streaming).await;
    }

    // A new task. An anonymous caller continues a context it holds (a capability, or a name
    // its own address chose) or starts one under a name nobody else uses.
    let anonymous = call.caller.issuer.is_none();
    let named_context = msg.context_id.as_deref().filter(|c| !c.is_empty());
    let held_context_agent = match named_context {
        Some(ctx) if anonymous => held_context(state, &owner, ctx).await?,
        _ => None,
    };
    // The agent is the endpoint's, else the one the text addresses, else the one the context
    // belongs to, else the default.
    let agent = match &call.agent {
        Some(a) => a.clone(),
        None => match addressed_agent(state, &msg.parts) {
            Some(a) => a,
            None => match (held_context_agent, named_context) {
                (Some(a), _) => a,
                // (An anonymous caller's context was looked up already, in `held_context`.)
                (None, Some(ctx)) if !anonymous => {
                    sql::agent_of_context(state.engine.db(), Owner::Exactly(&owner), ctx)
                        .await
                        .map_err(|e| internal(&e))?
                        .unwrap_or_else(|| state.default_agent.clone())
                }
                (None, _) => state.default_agent.clone(),
            },
        },
    };
    if call.agent.is_some() {
        state.admit(&call.caller, &agent, call.client)?;
    } else {
        // At the hub the token was checked against whichever agent's issuer matched first;
        // the agent this message goes to must accept it under its own policy (audiences,
        // keys, algorithms), not merely trust the same issuer.
        let caller = state
            .authenticate(call.authorization.as_deref(), Some(&agent), call.client)
            .await?;
        state.admit(&caller, &agent, call.client)?;
    }
    let task_id = scope::mint_id(now);
    let context_id = named_context.map_or_else(|| scope::mint_id(now), str::to_owned);
    let status = json!({ "state": TaskState::Submitted.v1(), "timestamp": wire::timestamp(now) });
    let mut task = json!({
        "id": task_id,
        "contextId": context_id,
        "status": status,
        "history": [history_message(&raw, &task_id, &context_id)],
    });
    if let Some(m) = &msg.metadata {
        task["metadata"] = Value::Object(m.clone());
    }
    let row = TaskRow {
        id: task_id,
        agent,
        owner: owner.clone(),
        context_id,
        state: TaskState::Submitted.v1().to_owned(),
        turn_message_id: nm_id.clone(),
        wire_message_id: msg.message_id.clone(),
        last_response_id: None,
        body: task.to_string(),
        last_seq: 0,
        status_at: now,
        created_at: now,
    };
    // The task is stored already working (event 1); a stream starts from the task as
    // submitted, so it shows the whole life of the task in order.
    let mut working = row.clone();
    let mut doc = task;
    let ev = TaskEngine::set_status(&mut working, &mut doc, TaskState::Working, None, now);
    working.body = doc.to_string();
    working.last_seq = 1;
    let push = match &config.push {
        Some(p) => {
            let cfg = parse_push_config(p, call.version, &row.id)?;
            Some((
                cfg["id"].as_str().unwrap_or_default().to_owned(),
                cfg.to_string(),
            ))
        }
        None => None,
    };
    let mut nm = turn_message(
        state, &call, &msg, &raw, &row, nm_id, parts, None, now, streaming,
    )?;
    attach_attestations(state, &call, &msg, &row, false, &mut nm).await;
    // The task, its first event and its message are committed together; a resend of a running
    // task's message attaches to that task instead.
    let mut new_task = NewTask::new(
        &state.engine,
        working,
        vec![(1, ev.to_string())],
        idempotency.clone(),
        call.agent.is_none(),
        push,
    );
    if anonymous {
        new_task = new_task.resent_only_as(
            raw.get("parts").cloned().unwrap_or(Value::Null),
            named_context.map(str::to_owned),
        );
    }
    let external_id = turn_key(&row.id, 1);
    let (_, new_task) = state
        .pipeline
        .ingest_with(NAME, &external_id, nm, new_task)
        .await
        .map_err(|e| not_ingested(&e))?;
    match new_task.created {
        Some(Created::New) => finish_send(state, &call, &config, row, streaming).await,
        Some(Created::Resent(row)) => finish_send(state, &call, &config, *row, streaming).await,
        Some(Created::KeyTaken) => {
            // Another request with the same key got there first: answer with its task.
            let task_id = started_by(state, &owner, idempotency.as_ref())
                .await?
                .ok_or_else(RpcError::task_not_found)?;
            let row = visible_task(state, &call, &task_id).await?;
            finish_send(state, &call, &config, row, streaming).await
        }
        None => Err(internal(&Error::Unavailable)),
    }
}

/// The agent of the context `ctx` an anonymous caller stored as `owner` names, if it continues
/// one; `None` if it starts a conversation under that name.
///
/// # Errors
/// The refusal of a guessable name another address already uses (the A2A specification has a
/// server that cannot accept a client's `contextId` refuse it rather than mint another).
async fn held_context(state: &Served, owner: &str, ctx: &str) -> Result<Option<String>, RpcError> {
    let db = state.engine.db();
    let reach = super::tasks::anonymous_reach(owner, ctx);
    if let Some(agent) = sql::agent_of_context(db, reach, ctx)
        .await
        .map_err(|e| internal(&e))?
    {
        return Ok(Some(agent));
    }
    let taken = matches!(reach, Owner::Exactly(_))
        && sql::agent_of_context(db, Owner::Anonymous, ctx)
            .await
            .map_err(|e| internal(&e))?
            .is_some();
    if taken {
        return Err(RpcError::invalid_field(
            "message.contextId",
            "is not a conversation this caller can continue: without credentials, a contextId \
             another client chose is continued only from its address; leave it out, or use a \
             random UUID, to start a new conversation",
        ));
    }
    Ok(None)
}

/// A digest of a call's parameters in their RFC 8785 canonical form, so equal requests digest
/// alike whatever their key order or number spelling.
fn fingerprint(params: &serde_json::Map<String, Value>) -> String {
    use sha2::Digest as _;
    let body = serde_json_canonicalizer::to_string(params).unwrap_or_default();
    hex::encode(sha2::Sha256::digest(body.as_bytes()))
}

/// The task an idempotency key (scope, key, fingerprint) of `owner` started, if any.
///
/// # Errors
/// `-32602` when the key started a task for a different request (the IETF Idempotency-Key
/// draft's 422, in JSON-RPC terms).
async fn started_by(
    state: &Served,
    owner: &str,
    idempotency: Option<&(String, String, String)>,
) -> Result<Option<String>, RpcError> {
    let Some((scope, key, fingerprint)) = idempotency else {
        return Ok(None);
    };
    let stored = sql::idempotent_task(
        state.engine.db(),
        &sql::IdempotencyKey {
            owner,
            scope,
            key,
            fingerprint,
        },
    )
    .await
    .map_err(|e| internal(&e))?;
    match stored {
        Some((_, Some(seen))) if &seen != fingerprint => Err(RpcError::invalid_field(
            "Idempotency-Key",
            "was already used with a different request",
        )),
        Some((task_id, _)) => Ok(Some(task_id)),
        None => Ok(None),
    }
}

/// Answers a send with the task: a stream from `row` on, the task right away, or the task
/// once its turn ends.
async fn finish_send(
    state: &Served,
    call: &Call,
    config: &SendConfig,
    row: TaskRow,
    streaming: bool,
) -> Result<Reply, RpcError> {
    if streaming {
        let first = render_task(&row, config.history_length, true);
        return Ok(open_stream(state, call, &row.id, row.last_seq, Some(first)));
    }
    let row = if config.return_immediately {
        state.engine.get(&row.id).await?.unwrap_or(row)
    } else {
        let timeout = Duration::from_millis(state.cfg.blocking_timeout_ms);
        state
            .engine
            .wait_turn_end(&row.id, timeout)
            .await?
            .unwrap_or(row)
    };
    // The agent answered with a message instead of a task.
    if row.body.contains("\"_directMessage\"")
        && let Ok(doc) = serde_json::from_str::<Value>(&row.body)
        && let Some(m) = doc.get("_directMessage")
    {
        return Ok(Reply::Json(match call.version {
            Version::V1 => json!({ "message": m }),
            Version::V03 => wire::message_to_v03(m),
        }));
    }
    Ok(Reply::Json(task_result(
        call.version,
        &render_task(&row, config.history_length, true),
    )))
}
