//! A message's reply context: what the transport it came in on needs to answer it (email's
//! addresses and thread key, ActivityPub's note, audience and thread fields, A2A's task), as
//! that transport's own serde type, held as JSON.
//!
//! Contract:
//! - it is the transport's business alone: read and written only through
//!   [`NormalizedMessage::reply_context`] and [`NormalizedMessage::set_reply_context`], each
//!   transport with its own type (`ReplyContext` in its folder);
//! - it is never shown to an agent or an API client: the field is skipped by serde, so a
//!   message serialised for a backend, a read view or the JSON Schema has no trace of it;
//! - it is stored with the message: the stored body is the message's JSON with the context
//!   beside its fields under [`STORED_REPLY_CONTEXT`] ([`NormalizedMessage::to_stored_json`],
//!   [`NormalizedMessage::from_stored_json`]). Messages stored before it existed have none, and
//!   their transports read what they need from `raw` instead.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::types::NormalizedMessage;

/// The key a stored message's JSON holds its reply context under. Reserved: a field of this
/// name among a message's unknown fields (`extra`) is dropped when the message is stored.
pub const STORED_REPLY_CONTEXT: &str = "reply_context";

/// A transport's reply context as JSON, opaque to everything but that transport.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplyContext(Option<Value>);

impl ReplyContext {
    /// No reply context (a message of a transport that needs none, or stored before contexts
    /// existed).
    pub const NONE: Self = Self(None);

    /// Whether there is one.
    #[must_use]
    pub const fn is_some(&self) -> bool {
        self.0.is_some()
    }
}

/// A reply context that does not convert to or from the transport's type.
#[derive(Debug, thiserror::Error)]
#[error("reply context: {0}")]
pub struct ReplyContextError(#[from] serde_json::Error);

/// A message as stored: its fields, and its reply context beside them.
#[derive(Serialize)]
struct Stored<'a> {
    #[serde(flatten)]
    message: &'a NormalizedMessage,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_context: Option<&'a Value>,
}

impl NormalizedMessage {
    /// The reply context its transport set, as that transport's type `T`; `None` when the
    /// message has none (one stored before reply contexts existed).
    ///
    /// # Errors
    /// The context does not read as a `T` (another transport's, or a newer shape).
    pub fn reply_context<T: DeserializeOwned>(&self) -> Result<Option<T>, ReplyContextError> {
        match &self.reply_context.0 {
            Some(v) => Ok(Some(T::deserialize(v)?)),
            None => Ok(None),
        }
    }

    /// Sets the reply context to `ctx`, the transport's own type.
    ///
    /// # Errors
    /// `ctx` does not serialise to JSON (a map with keys that are not strings).
    pub fn set_reply_context<T: Serialize>(&mut self, ctx: &T) -> Result<(), ReplyContextError> {
        self.reply_context = ReplyContext(Some(serde_json::to_value(ctx)?));
        Ok(())
    }

    /// The JSON the message is stored as: its own fields and, beside them, its reply context
    /// ([`STORED_REPLY_CONTEXT`]; an unknown field of that name is left out).
    ///
    /// # Errors
    /// An unknown field that does not serialise.
    pub fn to_stored_json(&self) -> serde_json::Result<String> {
        if self.extra.contains_key(STORED_REPLY_CONTEXT) {
            let mut m = self.clone();
            m.extra.remove(STORED_REPLY_CONTEXT);
            return m.to_stored_json();
        }
        serde_json::to_string(&Stored {
            message: self,
            reply_context: self.reply_context.0.as_ref(),
        })
    }

    /// A message from the JSON it was stored as ([`NormalizedMessage::to_stored_json`]), with
    /// its reply context.
    ///
    /// # Errors
    /// The JSON is no stored message.
    pub fn from_stored_json(json: &str) -> serde_json::Result<Self> {
        // The context is among the fields the message does not know (`extra`) as it is read.
        let mut message: Self = serde_json::from_str(json)?;
        message.reply_context = ReplyContext(
            message
                .extra
                .remove(STORED_REPLY_CONTEXT)
                .filter(|v| !v.is_null()),
        );
        Ok(message)
    }

    /// A stored message's JSON (read as a value) as a reader outside its transport is shown it:
    /// without the reply context.
    pub fn strip_stored(body: &mut Value) {
        if let Some(m) = body.as_object_mut() {
            m.remove(STORED_REPLY_CONTEXT);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A transport's context, as a transport would define it.
    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Ctx {
        thread_key: String,
        roles: Vec<String>,
    }

    fn message() -> NormalizedMessage {
        serde_json::from_value(json!({
            "id": "m1",
            "thread_id": "t1",
            "sender": {"address": "bob@b.example", "auth_method": "none", "verified": false},
            "recipient": "@echo@agents.test",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
            "recipient_capabilities": {"mention_relay": {"kind": "none"},
                "formats": ["text/plain"], "attachments": false, "streaming": false},
            "received_via": "email",
            "received_at": "2026-11-25T00:00:00Z",
            "raw": {"subject": "hello"},
        }))
        .expect("a message")
    }

    fn ctx() -> Ctx {
        Ctx {
            thread_key: "echo:<a@b>".into(),
            roles: vec!["abuse@agents.test".into()],
        }
    }

    #[test]
    fn a_context_is_read_back_as_the_type_it_was_set_as() {
        let mut m = message();
        assert_eq!(m.reply_context::<Ctx>().expect("none"), None);
        m.set_reply_context(&ctx()).expect("set");
        assert_eq!(m.reply_context::<Ctx>().expect("read"), Some(ctx()));
        assert!(
            m.reply_context::<Vec<u8>>().is_err(),
            "another type does not read it"
        );
    }

    #[test]
    fn agents_never_see_the_context_and_the_store_keeps_it() {
        let mut m = message();
        m.set_reply_context(&ctx()).expect("set");
        let shown = serde_json::to_value(&m).expect("json");
        assert!(shown.get(STORED_REPLY_CONTEXT).is_none(), "{shown}");
        assert_eq!(shown["raw"], json!({"subject": "hello"}));

        let stored = m.to_stored_json().expect("stored");
        let mut v: Value = serde_json::from_str(&stored).expect("json");
        assert_eq!(v[STORED_REPLY_CONTEXT]["thread_key"], "echo:<a@b>");
        let back = NormalizedMessage::from_stored_json(&stored).expect("read");
        assert_eq!(back, m);
        assert!(back.extra.is_empty(), "the context is no unknown field");
        NormalizedMessage::strip_stored(&mut v);
        assert_eq!(v, shown, "a read view is the message as agents see it");
    }

    #[test]
    fn a_message_stored_before_contexts_existed_has_none() {
        let stored = serde_json::to_string(&message()).expect("json");
        let back = NormalizedMessage::from_stored_json(&stored).expect("read");
        assert!(!back.reply_context.is_some());
        assert_eq!(back, message());
    }

    #[test]
    fn an_unknown_field_of_the_reserved_name_is_not_stored() {
        let mut m = message();
        m.extra
            .insert(STORED_REPLY_CONTEXT.into(), json!({"thread_key": "forged"}));
        let stored = m.to_stored_json().expect("stored");
        let back = NormalizedMessage::from_stored_json(&stored).expect("read");
        assert_eq!(back.reply_context::<Ctx>().expect("none"), None);
        assert!(back.extra.is_empty());

        m.set_reply_context(&ctx()).expect("set");
        let back = NormalizedMessage::from_stored_json(&m.to_stored_json().expect("stored"))
            .expect("read");
        assert_eq!(back.reply_context::<Ctx>().expect("read"), Some(ctx()));
    }
}
