//! The task operations: get, list (with page tokens), cancel and resubscribe, and the Task
//! document as a caller sees it. Who sees which task is [`crate::transports::a2a::scope`]'s
//! rule: another caller's task answers exactly as an unknown id does.

use base64::Engine as _;
use serde_json::{Value, json};

use super::Served;
use super::call::{Call, Reply, param_str, param_usize};
use super::stream::open_stream;
use crate::transports::a2a::auth::Caller;
use crate::transports::a2a::scope;
use crate::transports::a2a::store::{self as sql, Owner, TaskFilter, TaskRow};
use crate::transports::a2a::tasks::{Change, TaskEngine, internal};
use crate::transports::a2a::wire::{
    self, RpcError, TASK_NOT_CANCELABLE, TaskState, UNSUPPORTED_OPERATION, Version,
};

/// The Task document of `row` as the caller sees it.
pub(super) fn render_task(row: &TaskRow, history_length: Option<usize>, artifacts: bool) -> Value {
    let mut task: Value = serde_json::from_str(&row.body).unwrap_or_else(|_| json!({}));
    if let Some(obj) = task.as_object_mut() {
        // Keys starting with `_` are switchboard's own bookkeeping.
        obj.retain(|k, _| !k.starts_with('_'));
        match history_length {
            Some(0) => {
                obj.remove("history");
            }
            Some(n) => {
                if let Some(Value::Array(h)) = obj.get_mut("history")
                    && h.len() > n
                {
                    let cut = h.len() - n;
                    h.drain(..cut);
                }
            }
            None => {}
        }
        if !artifacts
            || obj
                .get("artifacts")
                .is_some_and(|a| a.as_array().is_some_and(Vec::is_empty))
        {
            obj.remove("artifacts");
        }
    }
    task
}

pub(super) fn task_result(version: Version, task: &Value) -> Value {
    match version {
        Version::V1 => json!({ "task": task }),
        Version::V03 => wire::task_to_v03(task),
    }
}

/// Whether `caller` may read and continue a task stored under `owner`: an identified caller
/// its own, an anonymous caller any anonymous task whose id it holds (the id is its capability).
pub(super) fn may_see(caller: &Caller, owner: &str) -> bool {
    if caller.issuer.is_none() {
        scope::is_anonymous(owner)
    } else {
        owner == caller.owner
    }
}

/// Whose anonymous tasks in `context` the anonymous caller stored as `owner` reaches: any
/// anonymous caller's when the context id is a capability, else only those from its own address.
pub(super) fn anonymous_reach<'a>(owner: &'a str, context: &str) -> Owner<'a> {
    if scope::is_capability(context) {
        Owner::Anonymous
    } else {
        Owner::Exactly(owner)
    }
}

/// The task `id` if the caller may see it (others' tasks look exactly like unknown ones).
pub(super) async fn visible_task(
    state: &Served,
    call: &Call,
    id: &str,
) -> Result<TaskRow, RpcError> {
    let row = state
        .engine
        .get(id)
        .await?
        .ok_or_else(RpcError::task_not_found)?;
    let agent_ok = call
        .agent
        .as_deref()
        .is_none_or(|a| a.eq_ignore_ascii_case(&row.agent));
    if may_see(&call.caller, &row.owner) && agent_ok {
        Ok(row)
    } else {
        Err(RpcError::task_not_found())
    }
}

pub(super) async fn get_task(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let id = param_str(&call.params, "id")?
        .ok_or_else(|| RpcError::invalid_field("id", "is required"))?;
    let history_length = param_usize(&call.params, "historyLength")?;
    let row = visible_task(state, call, id).await?;
    let task = render_task(&row, history_length, true);
    Ok(match call.version {
        Version::V1 => task,
        Version::V03 => wire::task_to_v03(&task),
    })
}

fn encode_cursor(row: &TaskRow) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}:{}", row.status_at, row.id))
}

fn decode_cursor(s: &str) -> Option<(i64, String)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (at, id) = raw.split_once(':')?;
    Some((at.parse().ok()?, id.to_owned()))
}

pub(super) async fn list_tasks(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let p = &call.params;
    let page_size = match param_usize(p, "pageSize")? {
        None => 50,
        Some(n) if (1..=state.cfg.max_page_size as usize).contains(&n) => n,
        Some(_) => {
            return Err(RpcError::invalid_field(
                "pageSize",
                format!("must be between 1 and {}", state.cfg.max_page_size),
            ));
        }
    };
    let status = match param_str(p, "status")? {
        None | Some("" | "TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(
            TaskState::parse(s)
                .ok_or_else(|| RpcError::invalid_field("status", "not a task state"))?
                .v1(),
        ),
    };
    let cursor = match param_str(p, "pageToken")? {
        None | Some("") => None,
        Some(t) => Some(decode_cursor(t).ok_or_else(|| {
            RpcError::invalid_field("pageToken", "not a token this server issued")
        })?),
    };
    let status_after = match param_str(p, "statusTimestampAfter")? {
        None => None,
        Some(t) => Some(
            crate::message::Timestamp::parse(t)
                .map_err(|_| {
                    RpcError::invalid_field("statusTimestampAfter", "not an RFC 3339 timestamp")
                })?
                .unix_millis(),
        ),
    };
    let history_length = param_usize(p, "historyLength")?;
    let include_artifacts = p
        .get("includeArtifacts")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let context_id = param_str(p, "contextId")?.filter(|c| !c.is_empty());
    let anonymous = call.caller.issuer.is_none();
    if anonymous && context_id.is_none() {
        // Nothing tells one anonymous caller from another but the ids it holds: without a
        // context to list, there is nothing of its own to show.
        return Ok(json!({
            "tasks": [],
            "nextPageToken": "",
            "pageSize": page_size,
            "totalSize": 0,
        }));
    }
    let filter = TaskFilter {
        owner: match context_id {
            Some(ctx) if anonymous => anonymous_reach(&call.caller.owner, ctx),
            _ => Owner::Exactly(&call.caller.owner),
        },
        agent: call.agent.as_deref(),
        context_id,
        state: status,
        status_after,
    };
    let limit = i64::try_from(page_size + 1).unwrap_or(101);
    let db = state.engine.db();
    let mut rows = sql::list_tasks(
        db,
        &filter,
        cursor.as_ref().map(|(a, i)| (*a, i.as_str())),
        limit,
    )
    .await
    .map_err(|e| internal(&e))?;
    let total = sql::count_tasks(db, &filter)
        .await
        .map_err(|e| internal(&e))?;
    let next = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(encode_cursor).unwrap_or_default()
    } else {
        String::new()
    };
    let tasks: Vec<Value> = rows
        .iter()
        .map(|r| {
            let t = render_task(r, history_length, include_artifacts);
            match call.version {
                Version::V1 => t,
                Version::V03 => wire::task_to_v03(&t),
            }
        })
        .collect();
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": next,
        "pageSize": page_size,
        "totalSize": total,
    }))
}

pub(super) async fn cancel_task(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let id = param_str(&call.params, "id")?
        .ok_or_else(|| RpcError::invalid_field("id", "is required"))?;
    visible_task(state, call, id).await?;
    let row = state
        .engine
        .update(id, |row, task, now| {
            if TaskState::parse(&row.state).is_some_and(TaskState::is_terminal) {
                return Err(RpcError::new(
                    TASK_NOT_CANCELABLE,
                    "Task cannot be canceled",
                ));
            }
            Ok(Change::Write(vec![TaskEngine::set_status(
                row,
                task,
                TaskState::Canceled,
                None,
                now,
            )]))
        })
        .await?
        .ok_or_else(RpcError::task_not_found)?;
    let task = render_task(&row, None, true);
    Ok(match call.version {
        Version::V1 => task,
        Version::V03 => wire::task_to_v03(&task),
    })
}

pub(super) async fn subscribe(state: &Served, call: &Call) -> Result<Reply, RpcError> {
    let id = param_str(&call.params, "id")?
        .ok_or_else(|| RpcError::invalid_field("id", "is required"))?;
    let row = visible_task(state, call, id).await?;
    if let Some(seq) = call.last_event_id {
        // A reconnect: replay what the client missed, then follow.
        return Ok(open_stream(state, call, &row.id, seq.max(0), None));
    }
    if TaskState::parse(&row.state).is_some_and(TaskState::is_terminal) {
        return Err(RpcError::new(
            UNSUPPORTED_OPERATION,
            "The task is in a terminal state; there is nothing to subscribe to",
        ));
    }
    let first = render_task(&row, None, true);
    Ok(open_stream(state, call, &row.id, row.last_seq, Some(first)))
}
