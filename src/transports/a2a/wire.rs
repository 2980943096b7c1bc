//! A2A wire shapes: JSON-RPC envelopes and errors, task states, the inbound Message and Part
//! types, and the translation between the 1.0 ProtoJSON shapes switchboard stores and the 0.3
//! shapes older clients speak. Pure data: no I/O.

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The protocol generation a request is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// A2A 1.0: PascalCase methods, wrapped results, ProtoJSON enums.
    V1,
    /// A2A 0.3: slash methods, `kind` discriminators, lowercase states.
    V03,
}

/// JSON-RPC parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC method not found.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// TaskNotFoundError.
pub const TASK_NOT_FOUND: i64 = -32001;
/// TaskNotCancelableError.
pub const TASK_NOT_CANCELABLE: i64 = -32002;
/// PushNotificationNotSupportedError.
pub const PUSH_NOT_SUPPORTED: i64 = -32003;
/// UnsupportedOperationError.
pub const UNSUPPORTED_OPERATION: i64 = -32004;
/// ContentTypeNotSupportedError.
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
/// ExtendedAgentCardNotConfiguredError.
pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
/// VersionNotSupportedError.
pub const VERSION_NOT_SUPPORTED: i64 = -32009;
/// Not a wire code: the request is answered with HTTP 401 and `WWW-Authenticate`.
pub const UNAUTHENTICATED: i64 = -31401;
/// Not a wire code: the request is answered with HTTP 403 (the agent's access rules refuse
/// the caller).
pub const FORBIDDEN: i64 = -31403;
/// Not a wire code: the request is answered with HTTP 429 and `Retry-After` (the seconds are
/// the error's message).
pub const RATE_LIMITED: i64 = -31429;

/// A JSON-RPC error as the server renders it.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// Human-readable message (never internal detail).
    pub message: String,
    /// `BadRequest.fieldViolations` as `(field, description)`.
    pub violations: Vec<(String, String)>,
}

impl RpcError {
    /// An error with a code and message.
    #[must_use]
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            violations: Vec::new(),
        }
    }

    /// Invalid params naming the offending field.
    #[must_use]
    pub fn invalid_field(field: &str, description: impl Into<String>) -> Self {
        let description = description.into();
        Self {
            code: INVALID_PARAMS,
            message: format!("Invalid params: {field}: {description}"),
            violations: vec![(field.to_owned(), description)],
        }
    }

    /// TaskNotFound.
    #[must_use]
    pub fn task_not_found() -> Self {
        Self::new(TASK_NOT_FOUND, "Task not found")
    }

    /// The `google.rpc.ErrorInfo` reason of the code.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self.code {
            TASK_NOT_FOUND => "TASK_NOT_FOUND",
            TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
            PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
            CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
            EXTENDED_CARD_NOT_CONFIGURED => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            PARSE_ERROR => "PARSE_ERROR",
            INVALID_REQUEST => "INVALID_REQUEST",
            METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
            INVALID_PARAMS => "INVALID_PARAMS",
            UNAUTHENTICATED => "UNAUTHENTICATED",
            FORBIDDEN => "FORBIDDEN",
            RATE_LIMITED => "RATE_LIMITED",
            _ => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status of the error in the HTTP+JSON binding, and its `google.rpc.Code` name.
    #[must_use]
    pub fn http_status(&self) -> u16 {
        self.status().0
    }

    fn status(&self) -> (u16, &'static str) {
        match self.code {
            TASK_NOT_FOUND | METHOD_NOT_FOUND => (404, "NOT_FOUND"),
            TASK_NOT_CANCELABLE
            | PUSH_NOT_SUPPORTED
            | UNSUPPORTED_OPERATION
            | EXTENDED_CARD_NOT_CONFIGURED
            | VERSION_NOT_SUPPORTED => (400, "FAILED_PRECONDITION"),
            CONTENT_TYPE_NOT_SUPPORTED => (415, "INVALID_ARGUMENT"),
            PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS => (400, "INVALID_ARGUMENT"),
            UNAUTHENTICATED => (401, "UNAUTHENTICATED"),
            FORBIDDEN => (403, "PERMISSION_DENIED"),
            RATE_LIMITED => (429, "RESOURCE_EXHAUSTED"),
            _ => (500, "INTERNAL"),
        }
    }

    /// The `ErrorInfo` (and `BadRequest`, when fields are named) details of the error.
    fn details(&self) -> Value {
        let mut details = vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.reason(),
            "domain": "a2a-protocol.org",
            "metadata": {},
        })];
        if !self.violations.is_empty() {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": self.violations.iter()
                    .map(|(f, d)| json!({"field": f, "description": d}))
                    .collect::<Vec<_>>(),
            }));
        }
        Value::Array(details)
    }

    /// The `error` member: 1.0 carries an array of `ErrorInfo` (and `BadRequest`) in `data`;
    /// 0.3 a free-form object.
    #[must_use]
    pub fn to_json(&self, version: Version) -> Value {
        let data = match version {
            Version::V1 => self.details(),
            Version::V03 => json!({ "reason": self.reason() }),
        };
        json!({ "code": self.code, "message": self.message, "data": data })
    }
}

/// An HTTP+JSON error body: a `google.rpc.Status` (`code` the HTTP status, `status` its
/// `google.rpc.Code` name) under `error`, with the same details as a JSON-RPC error.
#[must_use]
pub fn rest_error(e: &RpcError) -> Value {
    let (code, status) = e.status();
    json!({ "error": {
        "code": code, "status": status, "message": e.message, "details": e.details(),
    }})
}

/// A JSON-RPC error response.
#[must_use]
pub fn error_envelope(id: &Value, e: &RpcError, version: Version) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json(version) })
}

/// A JSON-RPC result response.
#[must_use]
pub fn result_envelope(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// A task state (1.0 ProtoJSON names are the canonical spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Accepted, not yet worked on.
    Submitted,
    /// Being worked on.
    Working,
    /// The agent needs more input.
    InputRequired,
    /// The agent needs credentials out of band.
    AuthRequired,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Canceled by the caller.
    Canceled,
    /// Declined by the agent.
    Rejected,
}

impl TaskState {
    /// Every state.
    pub const ALL: [Self; 8] = [
        Self::Submitted,
        Self::Working,
        Self::InputRequired,
        Self::AuthRequired,
        Self::Completed,
        Self::Failed,
        Self::Canceled,
        Self::Rejected,
    ];

    /// The 1.0 ProtoJSON name.
    #[must_use]
    pub fn v1(self) -> &'static str {
        match self {
            Self::Submitted => "TASK_STATE_SUBMITTED",
            Self::Working => "TASK_STATE_WORKING",
            Self::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            Self::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
            Self::Completed => "TASK_STATE_COMPLETED",
            Self::Failed => "TASK_STATE_FAILED",
            Self::Canceled => "TASK_STATE_CANCELED",
            Self::Rejected => "TASK_STATE_REJECTED",
        }
    }

    /// The 0.3 name.
    #[must_use]
    pub fn v03(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Working => "working",
            Self::InputRequired => "input-required",
            Self::AuthRequired => "auth-required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Rejected => "rejected",
        }
    }

    /// Parses either spelling.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|st| st.v1() == s || st.v03() == s)
    }

    /// Terminal: the task never changes again.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Interrupted: waiting for the caller (input or credentials).
    #[must_use]
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }

    /// A blocking send and a stream stop here.
    #[must_use]
    pub fn ends_turn(self) -> bool {
        self.is_terminal() || self.is_interrupted()
    }
}

/// An inbound Message, accepted in the 1.0 shape (0.3 bodies are translated first).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireMessage {
    /// Creator-chosen id.
    pub message_id: String,
    /// The conversation.
    #[serde(default)]
    pub context_id: Option<String>,
    /// The task this continues.
    #[serde(default)]
    pub task_id: Option<String>,
    /// `ROLE_USER` from clients.
    pub role: String,
    /// The content.
    pub parts: Vec<Value>,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Extension URIs.
    #[serde(default)]
    pub extensions: Option<Vec<String>>,
    /// Referenced tasks.
    #[serde(default)]
    pub reference_task_ids: Option<Vec<String>>,
}

/// Translates a 0.3 Message (or Part list) into the 1.0 shape, in place.
pub fn message_from_v03(m: &mut Value) {
    let Some(obj) = m.as_object_mut() else { return };
    obj.remove("kind");
    if let Some(Value::String(role)) = obj.get_mut("role") {
        *role = match role.as_str() {
            "user" => "ROLE_USER".into(),
            "agent" => "ROLE_AGENT".into(),
            other => other.to_owned(),
        };
    }
    if let Some(Value::Array(parts)) = obj.get_mut("parts") {
        for p in parts {
            part_from_v03(p);
        }
    }
}

fn part_from_v03(p: &mut Value) {
    let Some(obj) = p.as_object_mut() else { return };
    let Some(Value::String(kind)) = obj.remove("kind") else {
        return;
    };
    if kind == "file"
        && let Some(Value::Object(file)) = obj.remove("file")
    {
        if let Some(b) = file.get("bytes") {
            obj.insert("raw".into(), b.clone());
        }
        if let Some(u) = file.get("uri") {
            obj.insert("url".into(), u.clone());
        }
        if let Some(n) = file.get("name") {
            obj.insert("filename".into(), n.clone());
        }
        if let Some(t) = file.get("mimeType") {
            obj.insert("mediaType".into(), t.clone());
        }
    }
}

fn part_to_v03(p: &Value) -> Value {
    let Some(obj) = p.as_object() else {
        return p.clone();
    };
    let mut out = Map::new();
    if let Some(t) = obj.get("text") {
        out.insert("kind".into(), json!("text"));
        out.insert("text".into(), t.clone());
    } else if let Some(d) = obj.get("data") {
        out.insert("kind".into(), json!("data"));
        out.insert("data".into(), d.clone());
    } else {
        let mut file = Map::new();
        if let Some(b) = obj.get("raw") {
            file.insert("bytes".into(), b.clone());
        }
        if let Some(u) = obj.get("url") {
            file.insert("uri".into(), u.clone());
        }
        if let Some(n) = obj.get("filename") {
            file.insert("name".into(), n.clone());
        }
        if let Some(t) = obj.get("mediaType") {
            file.insert("mimeType".into(), t.clone());
        }
        out.insert("kind".into(), json!("file"));
        out.insert("file".into(), Value::Object(file));
    }
    if let Some(m) = obj.get("metadata") {
        out.insert("metadata".into(), m.clone());
    }
    Value::Object(out)
}

fn parts_to_v03(v: &mut Value) {
    if let Some(Value::Array(parts)) = v.get_mut("parts") {
        for p in parts.iter_mut() {
            *p = part_to_v03(p);
        }
    }
}

/// A 1.0 Message rendered in 0.3.
#[must_use]
pub fn message_to_v03(m: &Value) -> Value {
    let mut m = m.clone();
    if let Some(obj) = m.as_object_mut() {
        obj.insert("kind".into(), json!("message"));
        if let Some(Value::String(role)) = obj.get_mut("role") {
            *role = if role == "ROLE_AGENT" {
                "agent"
            } else {
                "user"
            }
            .into();
        }
    }
    parts_to_v03(&mut m);
    m
}

fn status_to_v03(s: &mut Value) {
    if let Some(Value::String(state)) = s.get_mut("state")
        && let Some(st) = TaskState::parse(state)
    {
        *state = st.v03().into();
    }
    if let Some(msg) = s.get_mut("message") {
        *msg = message_to_v03(msg);
    }
}

/// A 1.0 Task rendered in 0.3.
#[must_use]
pub fn task_to_v03(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(obj) = t.as_object_mut() {
        obj.insert("kind".into(), json!("task"));
        if let Some(s) = obj.get_mut("status") {
            status_to_v03(s);
        }
        if let Some(Value::Array(h)) = obj.get_mut("history") {
            for m in h.iter_mut() {
                *m = message_to_v03(m);
            }
        }
        if let Some(Value::Array(arts)) = obj.get_mut("artifacts") {
            for a in arts.iter_mut() {
                parts_to_v03(a);
            }
        }
    }
    t
}

/// A 1.0 StreamResponse (`{"task"}`, `{"message"}`, `{"statusUpdate"}`, `{"artifactUpdate"}`)
/// rendered as the bare 0.3 event.
#[must_use]
pub fn stream_response_to_v03(ev: &Value) -> Value {
    if let Some(t) = ev.get("task") {
        return task_to_v03(t);
    }
    if let Some(m) = ev.get("message") {
        return message_to_v03(m);
    }
    if let Some(s) = ev.get("statusUpdate") {
        let mut s = s.clone();
        let fin = s
            .pointer("/status/state")
            .and_then(Value::as_str)
            .and_then(TaskState::parse)
            .is_some_and(TaskState::ends_turn);
        if let Some(obj) = s.as_object_mut() {
            obj.insert("kind".into(), json!("status-update"));
            obj.insert("final".into(), json!(fin));
            if let Some(st) = obj.get_mut("status") {
                status_to_v03(st);
            }
        }
        return s;
    }
    if let Some(a) = ev.get("artifactUpdate") {
        let mut a = a.clone();
        if let Some(obj) = a.as_object_mut() {
            obj.insert("kind".into(), json!("artifact-update"));
            if let Some(art) = obj.get_mut("artifact") {
                parts_to_v03(art);
            }
        }
        return a;
    }
    ev.clone()
}

/// The 1.0 name of a method in either generation, with the generation its name belongs to.
#[must_use]
pub fn canonical_method(method: &str) -> Option<(&'static str, Version)> {
    const V1: [&str; 11] = [
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    ];
    if let Some(m) = V1.iter().find(|m| **m == method) {
        return Some((m, Version::V1));
    }
    let m = match method {
        "message/send" => "SendMessage",
        "message/stream" => "SendStreamingMessage",
        "tasks/get" => "GetTask",
        "tasks/list" => "ListTasks",
        "tasks/cancel" => "CancelTask",
        "tasks/resubscribe" => "SubscribeToTask",
        "tasks/pushNotificationConfig/set" => "CreateTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/get" => "GetTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/list" => "ListTaskPushNotificationConfigs",
        "tasks/pushNotificationConfig/delete" => "DeleteTaskPushNotificationConfig",
        "agent/getAuthenticatedExtendedCard" => "GetExtendedAgentCard",
        _ => return None,
    };
    Some((m, Version::V03))
}

/// UTC timestamp with milliseconds and `Z`, as A2A wants it.
#[must_use]
pub fn timestamp(ms: i64) -> String {
    crate::message::Timestamp::from_unix_millis(ms)
        .as_datetime()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_both_spellings() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.v1()), Some(s));
            assert_eq!(TaskState::parse(s.v03()), Some(s));
        }
        assert_eq!(TaskState::parse("TASK_STATE_UNSPECIFIED"), None);
    }

    #[test]
    fn errors_carry_error_info() {
        let e = RpcError::invalid_field("message.parts", "required");
        let v = e.to_json(Version::V1);
        assert_eq!(v["code"], -32602);
        assert_eq!(v["data"][0]["reason"], "INVALID_PARAMS");
        assert_eq!(v["data"][0]["domain"], "a2a-protocol.org");
        assert_eq!(v["data"][1]["fieldViolations"][0]["field"], "message.parts");
    }

    #[test]
    fn v03_translation() {
        let mut m = json!({"kind":"message","role":"user","messageId":"m","parts":[
            {"kind":"text","text":"hi"},
            {"kind":"file","file":{"bytes":"aGk=","name":"a.txt","mimeType":"text/plain"}}]});
        message_from_v03(&mut m);
        assert_eq!(m["role"], "ROLE_USER");
        assert_eq!(m["parts"][0], json!({"text":"hi"}));
        assert_eq!(m["parts"][1]["raw"], "aGk=");
        let ev = json!({"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_COMPLETED"}}});
        let old = stream_response_to_v03(&ev);
        assert_eq!(old["kind"], "status-update");
        assert_eq!(old["final"], true);
        assert_eq!(old["status"]["state"], "completed");
        assert_eq!(timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
