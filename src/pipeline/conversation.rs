//! Conversation semantics that need no I/O: which messages wait for more (the inbound
//! debounce), and which earlier messages a turn takes in.

use crate::message::{NormalizedMessage, Part};
use crate::store::messages::InboundState;

/// The outcome of a message merged into a later turn.
pub(super) const MERGED: &str = "merged";

/// The outcome of a message whose run was interrupted by a newer one.
pub(super) const INTERRUPTED: &str = "interrupted";

/// Whether `msg` waits for more from its sender under a debounce: text only (an attachment, a
/// link, data or a policy presentation goes at once), and not a command (text opening with
/// `/`), which stays a turn of its own.
#[must_use]
pub(super) fn debounces(msg: &NormalizedMessage) -> bool {
    msg.policy_resolution.is_none()
        && msg.parts.iter().all(|p| matches!(p, Part::Text(_)))
        && !msg.parts.iter().any(|p| match p {
            Part::Text(t) => t.content.trim_start().starts_with('/'),
            _ => false,
        })
}

/// What a merge needs of a stored inbound message.
#[derive(serde::Deserialize)]
struct Said {
    sender: Address,
    parts: Vec<Part>,
}

#[derive(serde::Deserialize)]
struct Address {
    address: String,
}

/// A message a turn takes in.
#[derive(Debug)]
pub(super) struct Absorbed {
    /// Its id.
    pub(super) id: String,
    /// Its parts, which open the turn.
    pub(super) parts: Vec<Part>,
}

/// Of the messages before a turn (oldest first, since the thread's last response), the run
/// just before it that the turn takes in: messages to the same `agent` from the same `sender`
/// with no response and no outcome but `merged`. Another sender's message, an answered one, or
/// one that ended otherwise (`interrupted`, `no_reply`, `failed`) ends the run, and stays in
/// the history.
pub(super) fn absorbed(before: &[InboundState], agent: &str, sender: &str) -> Vec<Absorbed> {
    let mut taken = Vec::new();
    for m in before.iter().rev() {
        let open = m.response.is_none()
            && m.agent == agent
            && matches!(m.outcome.as_deref(), None | Some(MERGED));
        let Some(said) = open
            .then(|| serde_json::from_str::<Said>(&m.body).ok())
            .flatten()
            .filter(|s| s.sender.address.eq_ignore_ascii_case(sender))
        else {
            break;
        };
        taken.push(Absorbed {
            id: m.id.clone(),
            parts: said.parts,
        });
    }
    taken.reverse();
    taken
}

/// Whether any of `later` comes from `sender`.
pub(super) fn any_from(later: &[InboundState], sender: &str) -> bool {
    later.iter().any(|m| {
        serde_json::from_str::<Said>(&m.body)
            .is_ok_and(|s| s.sender.address.eq_ignore_ascii_case(sender))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, sender: &str, outcome: Option<&str>, answered: bool) -> InboundState {
        InboundState {
            seq: 0,
            id: id.into(),
            agent: "bot".into(),
            body: serde_json::json!({
                "sender": {"address": sender},
                "parts": [{"kind": "text", "mime": "text/plain", "content": id}]
            })
            .to_string(),
            outcome: outcome.map(Into::into),
            response: answered.then(|| format!("r-{id}")),
        }
    }

    #[test]
    fn a_turn_takes_in_its_senders_unanswered_run_just_before_it() {
        let before = [
            row("a1", "@a@x", None, false),
            row("b1", "@b@x", Some(MERGED), false),
            row("a2", "@a@x", Some(MERGED), false),
            row("a3", "@A@x", None, false),
        ];
        let ids: Vec<String> = absorbed(&before, "bot", "@a@x")
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(ids, ["a2", "a3"], "another sender ends the run");
        assert!(absorbed(&before, "other-bot", "@a@x").is_empty());
        let ended = [
            row("a1", "@a@x", Some(INTERRUPTED), false),
            row("a2", "@a@x", None, true),
        ];
        assert!(absorbed(&ended, "bot", "@a@x").is_empty());
        assert!(any_from(&before, "@b@x"));
        assert!(!any_from(&before, "@c@x"));
    }

    #[test]
    fn only_plain_text_waits() {
        let text = |t: &str| -> NormalizedMessage {
            serde_json::from_value(serde_json::json!({
                "id": "m", "thread_id": "t",
                "sender": {"address": "@a@x", "auth_method": "none", "verified": false},
                "recipient": "@bot@x",
                "parts": [{"kind": "text", "mime": "text/plain", "content": t}],
                "recipient_capabilities": {"mention_relay": {"kind": "none"}, "formats": ["text/plain"], "attachments": false, "streaming": false},
                "received_via": "api", "received_at": "2026-01-02T03:04:05.678Z"
            }))
            .unwrap()
        };
        assert!(debounces(&text("hello")));
        assert!(!debounces(&text(" /reset")));
        let mut with_link = text("see");
        with_link.parts.push(
            serde_json::from_value(
                serde_json::json!({"kind": "link", "url": "https://x.example/"}),
            )
            .unwrap(),
        );
        assert!(!debounces(&with_link));
    }
}
