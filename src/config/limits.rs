//! `[limits]` and `[agents.access.limits]`: how many messages a sender, an agent and (for
//! ActivityPub) a remote host may send per window, how many an automated party (a bot, another
//! agent) gets answered, how many backend calls an agent takes at once, and how many agent hops
//! a multi-agent conversation may take. The global section is every agent's default; an agent's
//! own values replace it field by field. A rate left unset everywhere is the built-in default
//! where there is one ([`DEFAULT_PER_SENDER`], [`DEFAULT_PER_HOST`],
//! [`DEFAULT_PER_AUTOMATED`]); `"off"` removes it.

use serde::{Deserialize, Serialize};

/// At most `requests` per `per_seconds` (a fixed window); [`Rate::OFF`] (written `"off"`) is no
/// limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Messages let in per window.
    pub requests: u32,
    /// The window's length.
    pub per_seconds: u32,
}

impl Rate {
    /// No limit: an operator's `"off"`, which also removes a built-in default.
    pub const OFF: Self = Self {
        requests: 0,
        per_seconds: 0,
    };

    /// Whether this is [`Rate::OFF`].
    #[must_use]
    pub const fn is_off(self) -> bool {
        self.requests == 0 && self.per_seconds == 0
    }
}

/// A rate as written: `{ requests, per_seconds }`, or `"off"`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RateForm {
    Off(Off),
    Rate { requests: u32, per_seconds: u32 },
}

/// The word `"off"`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Off {
    Off,
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_off() {
            RateForm::Off(Off::Off).serialize(s)
        } else {
            RateForm::Rate {
                requests: self.requests,
                per_seconds: self.per_seconds,
            }
            .serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match RateForm::deserialize(d)? {
            RateForm::Off(Off::Off) => Self::OFF,
            RateForm::Rate {
                requests,
                per_seconds,
            } => Self {
                requests,
                per_seconds,
            },
        })
    }
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
    /// Per automated party (a bot, another agent: [`crate::message::Sender::automated`]) and
    /// agent: the messages of that party the agent answers per window, on a transport where an
    /// answer is a new message to the party (or, on A2A, a call made within an agent chain).
    /// Past it the party's messages are stored but not answered, for the window and a cooldown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_automated: Option<Rate>,
    /// How long an automated party that went past `per_automated` stays unanswered, from the
    /// message that went past it ([`DEFAULT_AUTOMATED_COOLDOWN_SECONDS`] when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automated_cooldown_seconds: Option<u32>,
    /// Backend calls an agent takes at once (the rest wait their turn).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_calls: Option<usize>,
    /// Agent turns a multi-agent chain started by this agent may take, the first answer
    /// included ([`DEFAULT_MAX_HOPS`] when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_hops: Option<u32>,
}

/// `per_sender` when nothing sets it, on the open networks (ActivityPub, email, A2A): a person
/// writes far less, a flood from one sender is cut at once.
pub const DEFAULT_PER_SENDER: Rate = Rate {
    requests: 60,
    per_seconds: 60,
};

/// `per_host` when nothing sets it (ActivityPub): a whole server's users together.
pub const DEFAULT_PER_HOST: Rate = Rate {
    requests: 600,
    per_seconds: 60,
};

/// `per_automated` when nothing sets it: five exchanges with one bot in ten minutes.
pub const DEFAULT_PER_AUTOMATED: Rate = Rate {
    requests: 5,
    per_seconds: 600,
};

/// `automated_cooldown_seconds` when nothing sets it.
pub const DEFAULT_AUTOMATED_COOLDOWN_SECONDS: u32 = 600;

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
            per_automated: self.per_automated.or(defaults.per_automated),
            automated_cooldown_seconds: self
                .automated_cooldown_seconds
                .or(defaults.automated_cooldown_seconds),
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
            ("per_automated", self.per_automated),
        ] {
            if let Some(r) = rate
                && !r.is_off()
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
