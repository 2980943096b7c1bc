//! What A2A needs to answer a turn: the task it belongs to and that task's context, kept with
//! the message as its reply context ([`crate::message::reply_context`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::OutboundError;
use crate::message::NormalizedMessage;

/// The reply context of an A2A turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyContext {
    /// The task the turn belongs to: the response changes its status and artifacts.
    pub task_id: String,
    /// The task's `contextId`.
    pub context_id: String,
}

impl ReplyContext {
    /// The reply context of `msg`: the one stored with it, else, for a message stored before
    /// reply contexts existed, the ids switchboard wrote into its `raw` then (`taskId`,
    /// `contextId`). That fallback is all that reads `raw` to reply.
    ///
    /// # Errors
    /// Permanent: the message names no task (or its context does not read).
    pub fn of(msg: &NormalizedMessage) -> Result<Self, OutboundError> {
        if let Some(ctx) = msg
            .reply_context::<Self>()
            .map_err(|e| OutboundError::permanent(e.to_string()))?
        {
            return Ok(ctx);
        }
        let id = |key: &str| msg.raw.get(key).and_then(Value::as_str).map(str::to_owned);
        Ok(Self {
            task_id: id("taskId")
                .ok_or_else(|| OutboundError::permanent("the message names no A2A task"))?,
            context_id: id("contextId").unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(raw: Value) -> NormalizedMessage {
        serde_json::from_value(json!({
            "id": "m1",
            "thread_id": "t1",
            "sender": {"address": "@caller@a2a.example", "auth_method": "none", "verified": false},
            "recipient": "@echo@agents.test",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
            "recipient_capabilities": {"mention_relay": {"kind": "none"},
                "formats": ["text/plain"], "attachments": true, "streaming": false},
            "received_via": "a2a",
            "received_at": "2026-11-25T00:00:00Z",
            "raw": raw,
        }))
        .expect("a message")
    }

    #[test]
    fn the_task_is_the_contexts_and_else_the_one_raw_names() {
        let mut m = message(json!({"taskId": "old", "contextId": "c-old"}));
        let ctx = ReplyContext {
            task_id: "task-1".into(),
            context_id: "ctx-1".into(),
        };
        // A message stored before reply contexts existed.
        assert_eq!(
            ReplyContext::of(&m).expect("from raw"),
            ReplyContext {
                task_id: "old".into(),
                context_id: "c-old".into(),
            }
        );
        m.set_reply_context(&ctx).expect("set");
        assert_eq!(ReplyContext::of(&m).expect("stored"), ctx);
        assert!(ReplyContext::of(&message(json!({"message": {}}))).is_err());
    }
}
