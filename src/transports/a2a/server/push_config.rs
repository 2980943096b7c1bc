//! Push notification configs: their 1.0 and 0.3 shapes, and the create, get, list and delete
//! operations on a task's configs.

use serde_json::{Value, json};

use super::Served;
use super::call::{Call, param_str};
use super::tasks::visible_task;
use crate::error::Error;
use crate::transports::a2a::store::{self as sql, TaskRow};
use crate::transports::a2a::tasks::internal;
use crate::transports::a2a::wire::{self, RpcError, TaskState, Version};

/// A push config from its 1.0 (flat) or 0.3 (nested) shape, checked, in the 1.0 shape.
pub(super) fn parse_push_config(
    v: &Value,
    version: Version,
    task_id: &str,
) -> Result<Value, RpcError> {
    let src = match version {
        Version::V03 => v.get("pushNotificationConfig").unwrap_or(v),
        Version::V1 => v,
    };
    let url = src
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_field("url", "is required"))?;
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => {
            return Err(RpcError::invalid_field(
                "url",
                "must be an absolute http(s) URL",
            ));
        }
    }
    let id = src
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(|| uuid::Uuid::now_v7().to_string(), str::to_owned);
    let mut out = json!({ "taskId": task_id, "id": id, "url": url });
    if let Some(t) = src.get("token").and_then(Value::as_str) {
        out["token"] = json!(t);
    }
    if let Some(auth) = src.get("authentication").filter(|a| a.is_object()) {
        let scheme = auth
            .get("scheme")
            .and_then(Value::as_str)
            .or_else(|| auth.pointer("/schemes/0").and_then(Value::as_str))
            .ok_or_else(|| RpcError::invalid_field("authentication.scheme", "is required"))?;
        let mut a = json!({ "scheme": scheme });
        if let Some(c) = auth.get("credentials").and_then(Value::as_str) {
            a["credentials"] = json!(c);
        }
        out["authentication"] = a;
    }
    Ok(out)
}

/// Refuses a push config (in the 1.0 shape, as [`parse_push_config`] gives it) whose URL the
/// SSRF guard would refuse when its notifications are sent (`net.allow_private_addresses` as
/// `allow_private`): a loopback, private, link-local or metadata address, a name that resolves
/// only to such addresses, plain `http://` unless the development switch allows it. Refused at
/// creation, it never becomes a job that can only die.
pub(super) async fn check_push_target(cfg: &Value, allow_private: bool) -> Result<(), RpcError> {
    let url = cfg.get("url").and_then(Value::as_str).unwrap_or_default();
    let parsed =
        url::Url::parse(url).map_err(|_| RpcError::invalid_field("url", "is not a URL"))?;
    crate::net::check_target(&parsed, allow_private)
        .await
        .map_err(|why| {
            RpcError::invalid_field(
                "url",
                format!(
                    "notifications cannot be sent there ({why}); use an https:// URL of a \
                     public address"
                ),
            )
        })
}

/// A stored (1.0) push config in the caller's generation.
fn render_push_config(cfg: &Value, version: Version) -> Value {
    match version {
        Version::V1 => cfg.clone(),
        Version::V03 => {
            let mut inner = json!({ "id": cfg["id"], "url": cfg["url"] });
            if let Some(t) = cfg.get("token") {
                inner["token"] = t.clone();
            }
            if let Some(a) = cfg.get("authentication") {
                let mut auth = json!({ "schemes": [a["scheme"].clone()] });
                if let Some(c) = a.get("credentials") {
                    auth["credentials"] = c.clone();
                }
                inner["authentication"] = auth;
            }
            json!({ "taskId": cfg["taskId"], "pushNotificationConfig": inner })
        }
    }
}

/// Stores `cfg` for `row`'s task; its first notification is the event after `delivered_seq`.
pub(super) async fn store_push_config(
    state: &Served,
    row: &TaskRow,
    cfg: &Value,
    delivered_seq: i64,
) -> Result<(), RpcError> {
    let id = cfg["id"].as_str().unwrap_or_default();
    let stored: crate::Result<()> = async {
        let mut tx = state.engine.db().begin().await?;
        sql::put_push_config(
            &mut tx,
            &row.id,
            id,
            &row.owner,
            &cfg.to_string(),
            delivered_seq,
            state.engine.now(),
        )
        .await?;
        tx.commit().await
    }
    .await;
    stored.map_err(|e| internal(&e))
}

fn push_task_id(call: &Call) -> Result<String, RpcError> {
    param_str(&call.params, "taskId")?
        .map(str::to_owned)
        .ok_or_else(|| RpcError::invalid_field("taskId", "is required"))
}

/// The task a get/list/delete push-config call names: `taskId` in 1.0; in 0.3 `id` (the task),
/// or `taskId`.
fn addressed_push_task(call: &Call) -> Result<String, RpcError> {
    match call.version {
        Version::V1 => push_task_id(call),
        Version::V03 => param_str(&call.params, "id")?
            .or(param_str(&call.params, "taskId")?)
            .map(str::to_owned)
            .ok_or_else(|| RpcError::invalid_field("id", "is required")),
    }
}

pub(super) async fn create_push(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let task_id = push_task_id(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let cfg = parse_push_config(&Value::Object(call.params.clone()), call.version, &row.id)?;
    check_push_target(&cfg, state.allow_private).await?;
    if TaskState::parse(&row.state).is_some_and(TaskState::is_terminal) {
        // Nothing more will happen to a finished task: the config is told its last event (the
        // final state) once, instead of waiting for events that never come.
        store_push_config(state, &row, &cfg, row.last_seq - 1).await?;
        let id = cfg["id"].as_str().unwrap_or_default();
        state
            .engine
            .push_stored(&row.id, id, &[row.last_seq])
            .await?;
    } else {
        // Notified of the events from now on.
        store_push_config(state, &row, &cfg, row.last_seq).await?;
    }
    Ok(render_push_config(&cfg, call.version))
}

fn push_config_id(call: &Call) -> Result<String, RpcError> {
    let key = match call.version {
        Version::V1 => "id",
        Version::V03 => "pushNotificationConfigId",
    };
    param_str(&call.params, key)?
        .or(param_str(&call.params, "id")?)
        .map(str::to_owned)
        .ok_or_else(|| RpcError::invalid_field(key, "is required"))
}

pub(super) async fn get_push(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let task_id = addressed_push_task(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let id = match call.version {
        Version::V1 => push_config_id(call)?,
        Version::V03 => match param_str(&call.params, "pushNotificationConfigId")? {
            Some(id) => id.to_owned(),
            None => sql::push_configs(state.engine.db(), &row.id)
                .await
                .map_err(|e| internal(&e))?
                .first()
                .map(|c| c.id.clone())
                .ok_or_else(RpcError::task_not_found)?,
        },
    };
    let found = sql::push_config(state.engine.db(), &row.id, &id)
        .await
        .map_err(|e| internal(&e))?
        .ok_or_else(|| RpcError::new(wire::TASK_NOT_FOUND, "Push notification config not found"))?;
    let cfg: Value = serde_json::from_str(&found.body).map_err(|e| internal(&Error::corrupt(e)))?;
    Ok(render_push_config(&cfg, call.version))
}

pub(super) async fn list_push(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let task_id = addressed_push_task(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let configs: Vec<Value> = sql::push_configs(state.engine.db(), &row.id)
        .await
        .map_err(|e| internal(&e))?
        .iter()
        .filter_map(|c| serde_json::from_str::<Value>(&c.body).ok())
        .map(|c| render_push_config(&c, call.version))
        .collect();
    Ok(match call.version {
        Version::V1 => json!({ "configs": configs, "nextPageToken": "" }),
        Version::V03 => Value::Array(configs),
    })
}

pub(super) async fn delete_push(state: &Served, call: &Call) -> Result<Value, RpcError> {
    let task_id = addressed_push_task(call)?;
    let row = visible_task(state, call, &task_id).await?;
    let id = push_config_id(call)?;
    sql::delete_push_config(state.engine.db(), &row.id, &id)
        .await
        .map_err(|e| internal(&e))?;
    Ok(Value::Null)
}
