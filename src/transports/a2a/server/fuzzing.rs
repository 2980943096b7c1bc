//! The fuzz entry point into the A2A JSON-RPC server (`crate::fuzzing` says what it is for): a
//! request body's envelope and the parameters its method reads.

use serde_json::Value;

use super::call::{Call, param_str, param_usize};
use super::envelope::{Request, read_request};
use super::push_config::parse_push_config;
use super::send::{parse_message, send_config};
use crate::config::A2aConfig;
use crate::message::{Part, Timestamp};
use crate::transports::a2a::auth::Caller;
use crate::transports::a2a::mapping::{self as a2a_mapping, InPart, Limits as PartLimits};
use crate::transports::a2a::wire::{self, TaskState};

/// A JSON-RPC request body as the A2A endpoint reads it, asking for 0.3 (no version) and for
/// 1.0: the envelope, then the parameters the named method reads before it touches the task
/// store (a message and its parts, the send configuration, a push config, ids, paging).
///
/// A refusal is a JSON-RPC error answered to a string, number or null id; an accepted request
/// names its method by its 1.0 name, with proto field names made camelCase; a message that
/// reads is a user's, with an id, and its parts stay within the limits.
pub fn a2a_rpc(body: &[u8]) {
    for requested in ["", "1.0"] {
        match read_request(body, requested) {
            Err((id, e, version)) => {
                assert!(
                    matches!(id, Value::Null | Value::String(_) | Value::Number(_)),
                    "an error answered to id {id}"
                );
                let reply = wire::error_envelope(&id, &e, version);
                assert!(
                    reply["error"]["code"].is_i64() && reply["error"]["message"].is_string(),
                    "error envelope {reply}"
                );
            }
            Ok(request) => a2a_params(request),
        }
    }
}

fn no_snake_keys(what: &str, v: Option<&Value>) {
    if let Some(Value::Object(m)) = v {
        assert!(
            !m.keys().any(|k| k.contains('_')),
            "{what} keeps a proto field name: {:?}",
            m.keys().collect::<Vec<_>>()
        );
    }
}

fn a2a_params(request: Request) {
    let Request {
        id,
        method,
        version,
        params,
    } = request;
    assert!(
        wire::canonical_method(method).is_some_and(|(m, _)| m == method),
        "{method} is not a 1.0 method name"
    );
    let as_value = Value::Object(params.clone());
    no_snake_keys("params", Some(&as_value));
    no_snake_keys("message", params.get("message"));
    no_snake_keys("configuration", params.get("configuration"));
    let call = Call {
        binding: super::call::Binding::JsonRpc,
        id,
        method,
        version,
        params,
        caller: Caller::anonymous(),
        agent: None,
        idempotency_key: None,
        last_event_id: None,
        authorization: None,
        client: None,
    };
    let p = &call.params;
    match method {
        "SendMessage" | "SendStreamingMessage" => {
            let _config = send_config(&call);
            let Ok((msg, _raw)) = parse_message(&call) else {
                return;
            };
            assert_eq!(msg.role, "ROLE_USER");
            assert!(!msg.message_id.is_empty());
            let _chain = a2a_mapping::agent_chain(msg.metadata.as_ref());
            let cfg = A2aConfig::default();
            let limits = PartLimits {
                max_parts: cfg.max_parts,
                max_bytes: cfg.max_message_bytes,
            };
            let Ok(parts) = a2a_mapping::parse_parts(&msg.parts, limits) else {
                return;
            };
            assert!(!parts.is_empty() && parts.len() <= limits.max_parts);
            for part in parts {
                match part {
                    InPart::Ready(part) => {
                        let value = serde_json::to_value(&part).unwrap_or_default();
                        match serde_json::from_value::<Part>(value.clone()) {
                            Ok(back) => assert!(back == *part, "a part changed: {value}"),
                            Err(e) => panic!("a part does not read back: {e}: {value}"),
                        }
                    }
                    InPart::Bytes { data, .. } => assert!(data.len() <= limits.max_bytes),
                }
            }
        }
        "CreateTaskPushNotificationConfig" => {
            let Ok(cfg) = parse_push_config(&Value::Object(p.clone()), version, "t") else {
                return;
            };
            let url = cfg["url"].as_str().unwrap_or_default();
            assert!(
                url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")),
                "push config URL {url:?}"
            );
        }
        "ListTasks" => {
            let _ = param_usize(p, "pageSize");
            let _ = param_usize(p, "historyLength");
            if let Ok(Some(s)) = param_str(p, "status") {
                let _ = TaskState::parse(s);
            }
            if let Ok(Some(t)) = param_str(p, "statusTimestampAfter") {
                let _ = Timestamp::parse(t).map(|t| t.unix_millis());
            }
        }
        _ => {
            let _ = param_str(p, "id");
            let _ = param_str(p, "taskId");
            let _ = param_usize(p, "historyLength");
        }
    }
}
