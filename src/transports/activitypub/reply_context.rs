//! What ActivityPub needs to answer a note, kept with its message as the reply context
//! ([`crate::message::reply_context`]): who wrote it, and the note's id, audience and thread
//! fields, by which the reply is addressed, made as visible and threaded.

use serde::{Deserialize, Serialize};

use super::wire::{self, Activity, FromJson as _, Object};
use crate::error::OutboundError;
use crate::message::NormalizedMessage;

/// The reply context of a note's message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyContext {
    /// The activity's actor (its IRI): the reply's first recipient. The reply fails without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The note answered, when the activity embedded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<NoteContext>,
}

/// What a reply reads of the note it answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteContext {
    /// The note's id: the reply's `inReplyTo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What the note answers: where the reply's thread fields come from when the note has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    /// The note's `to` (IRIs): with `cc`, the visibility the reply mirrors.
    #[serde(default)]
    pub to: Vec<String>,
    /// The note's `cc` (IRIs).
    #[serde(default)]
    pub cc: Vec<String>,
    /// The note's `context` (its IRI), echoed by the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The note's `conversation`, echoed by the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

impl NoteContext {
    /// What a reply reads of `note`.
    #[must_use]
    pub fn of(note: &Object) -> Self {
        let iris = |p: &wire::Loose<wire::OneOrMany<wire::Reference>>| {
            p.iris().map(str::to_owned).collect()
        };
        Self {
            id: note.id().map(str::to_owned),
            in_reply_to: note.in_reply_to().map(str::to_owned),
            to: iris(&note.addressing.to),
            cc: iris(&note.addressing.cc),
            context: note.context().map(str::to_owned),
            conversation: note.conversation().map(str::to_owned),
        }
    }

    /// The conversation key the note names: `context`, else `conversation`.
    #[must_use]
    pub fn explicit_thread(&self) -> Option<&str> {
        self.context.as_deref().or(self.conversation.as_deref())
    }
}

impl ReplyContext {
    /// The context of a message made from `activity` (its note embedded).
    #[must_use]
    pub fn of_activity(activity: &Activity) -> Self {
        Self {
            actor: activity.actor_iri().map(str::to_owned),
            note: activity.embedded().map(NoteContext::of),
        }
    }

    /// The reply context of `msg`: the one stored with it, else, for a message stored before
    /// reply contexts existed, the same read from its `raw` activity. That fallback is all that
    /// reads `raw` to reply.
    ///
    /// # Errors
    /// Permanent: the stored context does not read.
    pub fn of(msg: &NormalizedMessage) -> Result<Self, OutboundError> {
        match msg.reply_context::<Self>() {
            Ok(Some(ctx)) => Ok(ctx),
            Ok(None) => Ok(Self::of_activity(&Activity::from_json(&msg.raw))),
            Err(e) => Err(OutboundError::permanent(format!(
                "the note's reply context does not read: {e}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_message_stored_before_contexts_existed_is_answered_from_its_raw_activity() {
        let raw = json!({
            "id": "https://m.example/a/1",
            "type": "Create",
            "actor": {"id": "https://m.example/users/alice", "type": "Person"},
            "object": {
                "id": "https://m.example/n/1",
                "type": "Note",
                "inReplyTo": "https://sb.example/agents/h/notes/0",
                "to": "https://sb.example/agents/h",
                "cc": ["https://www.w3.org/ns/activitystreams#Public"],
                "context": {"id": "https://m.example/contexts/1"},
                "conversation": "tag:m.example,2026:1",
            },
        });
        let mut msg: NormalizedMessage = serde_json::from_value(json!({
            "id": "m1",
            "thread_id": "t1",
            "sender": {"address": "@alice@m.example", "auth_method": "ap-http-signature", "verified": true},
            "recipient": "@h@sb.example",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
            "recipient_capabilities": {"mention_relay": {"kind": "addressing",
                "envelope_fields": ["to", "cc"], "also_inline": true},
                "formats": ["text/html"], "attachments": true, "streaming": false},
            "received_via": "activitypub",
            "received_at": "2026-11-25T00:00:00Z",
            "raw": raw,
        }))
        .expect("a message");
        let expected = ReplyContext {
            actor: Some("https://m.example/users/alice".into()),
            note: Some(NoteContext {
                id: Some("https://m.example/n/1".into()),
                in_reply_to: Some("https://sb.example/agents/h/notes/0".into()),
                to: vec!["https://sb.example/agents/h".into()],
                cc: vec!["https://www.w3.org/ns/activitystreams#Public".into()],
                context: Some("https://m.example/contexts/1".into()),
                conversation: Some("tag:m.example,2026:1".into()),
            }),
        };
        assert_eq!(ReplyContext::of(&msg).expect("from raw"), expected);
        assert_eq!(
            expected
                .note
                .as_ref()
                .and_then(NoteContext::explicit_thread),
            Some("https://m.example/contexts/1")
        );
        // Stored, the context is what is read, whatever `raw` holds.
        let stored = ReplyContext {
            note: None,
            ..expected
        };
        msg.set_reply_context(&stored).expect("set");
        msg.raw = json!({});
        assert_eq!(ReplyContext::of(&msg).expect("stored"), stored);
        // An activity with its object by IRI only: no note to answer.
        msg.reply_context = crate::message::ReplyContext::NONE;
        msg.raw =
            json!({"actor": "https://m.example/users/alice", "object": "https://m.example/n/1"});
        assert_eq!(ReplyContext::of(&msg).expect("from raw").note, None);
    }
}
