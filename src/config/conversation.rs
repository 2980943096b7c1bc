//! `[conversation]`: how messages that arrive close together in a thread become agent turns —
//! the inbound debounce and what happens to a message whose thread already has a run in flight.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The longest debounce, in milliseconds.
pub const MAX_DEBOUNCE_MS: u64 = 60_000;

/// What becomes of a message whose thread (with the same agent) has a run in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueMode {
    /// It runs after the run in flight, and sees its answer.
    #[default]
    Followup,
    /// It waits like `followup`; of the messages waiting when the run ends only the latest
    /// runs, and the earlier ones are merged into it.
    Collect,
    /// The run in flight is cancelled; the latest message runs with it in its history.
    Interrupt,
}

/// The settings one transport's messages follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conversation {
    /// How long a text-only message waits for more from the same sender (0: not at all).
    pub debounce_ms: u64,
    /// The queue mode.
    pub queue: QueueMode,
}

impl Conversation {
    /// Whether messages of this transport may be merged or collapsed: anything but the
    /// default (no debounce, `followup`), which needs none of the look-ups merging does.
    #[must_use]
    pub fn merges(&self) -> bool {
        self.debounce_ms > 0 || self.queue != QueueMode::Followup
    }
}

/// One transport's overrides (unset keys follow `[conversation]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationOverride {
    /// As [`ConversationConfig::debounce_ms`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
    /// As [`ConversationConfig::queue`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueMode>,
}

/// Conversation semantics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConversationConfig {
    /// A text-only message (no attachment, not a `/command`) waits this long for more from the
    /// same sender in the same thread, which then join it in one turn; 0 turns it off.
    pub debounce_ms: u64,
    /// What a message does when its thread has a run in flight.
    pub queue: QueueMode,
    /// Per transport (`activitypub`, `email`, `a2a`, `api`).
    pub transports: BTreeMap<String, ConversationOverride>,
}

impl ConversationConfig {
    /// The settings messages of `transport` follow.
    #[must_use]
    pub fn of(&self, transport: &str) -> Conversation {
        let own = self.transports.get(transport);
        Conversation {
            debounce_ms: own.and_then(|o| o.debounce_ms).unwrap_or(self.debounce_ms),
            queue: own.and_then(|o| o.queue).unwrap_or(self.queue),
        }
    }

    /// Debounces within bounds, overrides only for the `transports` the application has
    /// (not checked when none are given).
    pub(super) fn check(&self, transports: &[&str], problems: &mut Vec<String>) {
        let debounce = |path: &str, ms: u64, problems: &mut Vec<String>| {
            if ms > MAX_DEBOUNCE_MS {
                problems.push(format!(
                    "{path}.debounce_ms {ms}: must be between 0 and {MAX_DEBOUNCE_MS}"
                ));
            }
        };
        debounce("conversation", self.debounce_ms, problems);
        for (name, o) in &self.transports {
            let path = format!("conversation.transports.{name}");
            if !transports.is_empty() && !transports.contains(&name.as_str()) {
                problems.push(format!(
                    "{path}: unknown transport (one of {})",
                    transports.join(", ")
                ));
            }
            if let Some(ms) = o.debounce_ms {
                debounce(&path, ms, problems);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_overrides_only_what_it_sets() {
        let mut c = ConversationConfig {
            debounce_ms: 500,
            ..ConversationConfig::default()
        };
        c.transports.insert(
            "activitypub".into(),
            ConversationOverride {
                debounce_ms: None,
                queue: Some(QueueMode::Collect),
            },
        );
        c.transports.insert(
            "a2a".into(),
            ConversationOverride {
                debounce_ms: Some(0),
                queue: None,
            },
        );
        assert_eq!(
            c.of("activitypub"),
            Conversation {
                debounce_ms: 500,
                queue: QueueMode::Collect
            }
        );
        assert_eq!(c.of("a2a"), Conversation::default());
        assert_eq!(c.of("email").debounce_ms, 500);
        assert!(!ConversationConfig::default().of("api").merges());
    }

    #[test]
    fn debounces_are_bounded_and_transports_known() {
        let mut c = ConversationConfig {
            debounce_ms: 60_001,
            ..ConversationConfig::default()
        };
        c.transports.insert(
            "xmpp".into(),
            ConversationOverride {
                debounce_ms: Some(70_000),
                queue: None,
            },
        );
        let mut problems = Vec::new();
        c.check(&["activitypub", "email", "a2a", "api"], &mut problems);
        assert_eq!(
            problems,
            [
                "conversation.debounce_ms 60001: must be between 0 and 60000",
                "conversation.transports.xmpp: unknown transport (one of activitypub, email, a2a, api)",
                "conversation.transports.xmpp.debounce_ms 70000: must be between 0 and 60000",
            ]
        );
    }
}
