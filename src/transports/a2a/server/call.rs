//! One JSON-RPC call as the methods see it, what a method answers with, and readers of its
//! parameters. The envelope makes calls and writes replies; the methods take calls.

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::transports::a2a::auth::Caller;
use crate::transports::a2a::wire::{RpcError, Version};

/// Which of the specification's bindings a call came in on: the same methods, two encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Binding {
    /// JSON-RPC 2.0: results and stream events inside envelopes.
    JsonRpc,
    /// HTTP+JSON (REST): bare results and stream events, errors as `google.rpc.Status`.
    HttpJson,
}

/// One parsed call.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) binding: Binding,
    pub(super) id: Value,
    pub(super) method: &'static str,
    pub(super) version: Version,
    pub(super) params: Map<String, Value>,
    pub(super) caller: Caller,
    /// The per-agent endpoint's agent; `None` at the hub.
    pub(super) agent: Option<String>,
    pub(super) idempotency_key: Option<String>,
    pub(super) last_event_id: Option<i64>,
    pub(super) authorization: Option<String>,
    /// The client's address (behind trusted proxies, the one they name): an anonymous caller's
    /// messages count in the rate limits per address.
    pub(super) client: Option<std::net::IpAddr>,
}

/// What a call produced.
pub(super) enum Reply {
    Json(Value),
    Stream(mpsc::Receiver<Bytes>),
}

/// The string parameter `key`, if present.
pub(super) fn param_str<'a>(
    params: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a str>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(RpcError::invalid_field(key, "must be a string")),
    }
}

/// The non-negative integer parameter `key`, if present.
pub(super) fn param_usize(
    params: &Map<String, Value>,
    key: &str,
) -> Result<Option<usize>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| RpcError::invalid_field(key, "must be a non-negative integer")),
    }
}
