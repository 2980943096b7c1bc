//! `[limits]` and `[agents.access.limits]`: how many messages a sender, an agent and (for
//! ActivityPub) a remote host may send per window, and how many backend calls an agent takes
//! at once, and how many agent hops a multi-agent conversation may take. The global section is
//! every agent's default; an agent's own values replace it field by field.

use serde::{Deserialize, Serialize};

/// At most `requests` per `per_seconds` (a fixed window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Messages let in per window.
    pub requests: u32,
    /// The window's length.
    pub per_seconds: u32,
}

/// Rate limits and the backend concurrency cap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Per sender (its first verified identity, else its address) and agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_sender: Option<Rate>,
    /// Per agent, all senders together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_agent: Option<Rate>,
    /// Per remote host and agent, for ActivityPub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_host: Option<Rate>,
    /// Backend calls an agent takes at once (the rest wait their turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_calls: Option<usize>,
    /// Agent turns a multi-agent chain started by this agent may take, the first answer
    /// included ([`DEFAULT_MAX_HOPS`] when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u32>,
}

/// Backend calls one agent takes at once when nothing says otherwise.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 16;

/// Agent turns a multi-agent chain takes at most when nothing says otherwise.
pub const DEFAULT_MAX_HOPS: u32 = 3;

/// The most `max_hops` may be set to: a chain longer than this is a loop, not a conversation.
pub const MAX_MAX_HOPS: u32 = 16;

impl LimitsConfig {
    /// `self`'s values where set, else `defaults`'s.
    #[must_use]
    pub fn over(&self, defaults: &Self) -> Self {
        Self {
            per_sender: self.per_sender.or(defaults.per_sender),
            per_agent: self.per_agent.or(defaults.per_agent),
            per_host: self.per_host.or(defaults.per_host),
            max_concurrent_calls: self.max_concurrent_calls.or(defaults.max_concurrent_calls),
            max_hops: self.max_hops.or(defaults.max_hops),
        }
    }

    /// Windows and counts must be above zero.
    pub(super) fn check(&self, at: &str, problems: &mut Vec<String>) {
        for (key, rate) in [
            ("per_sender", self.per_sender),
            ("per_agent", self.per_agent),
            ("per_host", self.per_host),
        ] {
            if let Some(r) = rate
                && (r.requests == 0 || r.per_seconds == 0)
            {
                problems.push(format!(
                    "{at}.{key}: requests and per_seconds must be above 0"
                ));
            }
        }
        if self.max_concurrent_calls == Some(0) {
            problems.push(format!("{at}.max_concurrent_calls: must be above 0"));
        }
        if let Some(n) = self.max_hops
            && !(1..=MAX_MAX_HOPS).contains(&n)
        {
            problems.push(format!("{at}.max_hops: must be 1 to {MAX_MAX_HOPS}"));
        }
    }
}
