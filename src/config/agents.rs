//! `[[agents]]`: the hosted agents and the backend that answers for each.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::a2a::AgentA2aConfig;
use super::access::AccessConfig;
use super::activitypub::AgentActivityPubConfig;
use super::email::AgentEmailConfig;
use super::secret::Secret;
use crate::message::is_handle_name;

/// One hosted agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The local name: `@{name}@{domain}`.
    pub name: String,
    /// Display name.
    #[serde(default)]
    pub display_name: Option<String>,
    /// One-line description.
    #[serde(default)]
    pub summary: Option<String>,
    /// What answers for it.
    pub backend: BackendConfig,
    /// Email settings of this agent (`agents[].email`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<AgentEmailConfig>,
    /// A2A settings of this agent (card skills).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a: Option<AgentA2aConfig>,
    /// The agent's fediverse profile (`[agents.activitypub]`): images, fields, pinned posts,
    /// bot and discovery switches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activitypub: Option<AgentActivityPubConfig>,
    /// Who may reach this agent (`[agents.access]`); everyone when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessConfig>,
    /// What happens to the agent that it is told of, as event messages (none by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<Notify>,
}

/// Something that happens to an agent that it may ask to be told of (`notify`): it then gets
/// a message whose part is an `event` ([`crate::message::EventPart`]), which expects no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Notify {
    /// A fediverse account followed it.
    Follow,
    /// A fediverse account liked one of its notes.
    Like,
    /// A fediverse account boosted (`Announce`) one of its notes.
    Announce,
    /// A fediverse account asked to quote one of its notes (answered by its `quote_policy`).
    QuoteRequest,
    /// One of its replies could not be delivered: a mail bounced (its delivery status
    /// notification says why).
    DeliveryFailed,
}

impl Notify {
    /// Its name, as `notify` and the event part write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Follow => "follow",
            Self::Like => "like",
            Self::Announce => "announce",
            Self::QuoteRequest => "quote_request",
            Self::DeliveryFailed => "delivery_failed",
        }
    }
}

/// The `[[agents]]` section: at least one agent; each named so it can be addressed, unique
/// regardless of case, with a reachable backend and a complete A2A auth setting.
/// `lease_seconds` is `queue.lease_seconds`, which every backend call must fit in.
pub(super) fn check(agents: &[AgentConfig], lease_seconds: u64, problems: &mut Vec<String>) {
    if agents.is_empty() {
        problems.push("agents: at least one agent is required".into());
    }
    let mut seen = HashSet::new();
    for (i, agent) in agents.iter().enumerate() {
        let at = format!("agents[{i}]");
        if !is_handle_name(&agent.name) {
            problems.push(format!(
                "{at}.name {:?}: use letters, digits, _ - .",
                agent.name
            ));
        }
        if !seen.insert(agent.name.to_lowercase()) {
            problems.push(format!("{at}.name {:?}: duplicate", agent.name));
        }
        agent.backend.check(&at, lease_seconds, problems);
        if let Some(a2a) = &agent.a2a {
            a2a.check(&format!("{at}.a2a"), problems);
        }
        if let Some(access) = &agent.access {
            access.check(&at, problems);
        }
        if let Some(ap) = &agent.activitypub {
            ap.check(&at, problems);
        }
    }
}

/// An agent backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum BackendConfig {
    /// Built in: answers with the text it received.
    Echo,
    /// Built in: behaves by A2A messageId prefix as the A2A conformance kit expects.
    Conformance,
    /// A remote A2A agent, called with the A2A 1.0 JSON-RPC binding.
    A2a {
        /// URL of its agent card.
        card: String,
        /// Bearer token sent on every call.
        #[serde(default)]
        token: Option<Secret>,
        /// Per-call timeout.
        #[serde(default = "default_a2a_timeout_ms")]
        timeout_ms: u64,
        /// Stream when the card allows it.
        #[serde(default = "default_true")]
        streaming: bool,
        /// Refuse the card unless one of its `signatures` verifies (a card that carries a bad
        /// signature is refused either way).
        #[serde(default)]
        require_signed_card: bool,
        /// The keys (JWKs) the card must be signed with; when empty, a signature is checked
        /// against the key set its `jku` names on the card's own origin.
        #[serde(default)]
        card_keys: Vec<jsonwebtoken::jwk::Jwk>,
    },
    /// An HTTP endpoint speaking the webhook agent protocol (spec §9).
    Webhook {
        /// Endpoint.
        url: String,
        /// HMAC-SHA256 key for `X-Switchboard-Signature`.
        secret: Secret,
        /// Per-call timeout.
        #[serde(default = "default_webhook_timeout_ms")]
        timeout_ms: u64,
        /// Also send the prompt switchboard assembles (`messages`, OpenAI chat format) beside
        /// the NormalizedMessage (`docs/agents.md`).
        #[serde(default)]
        assembled: bool,
    },
    /// An OpenAI-compatible chat-completions server (OpenAI, Ollama, vLLM, llama.cpp, LiteLLM).
    Openai {
        /// Base URL of the API, e.g. `http://127.0.0.1:11434/v1`; `/chat/completions` is
        /// appended.
        base_url: String,
        /// The model name sent with every call.
        model: String,
        /// The environment variable holding the API key (sent as a bearer token); none sent
        /// when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// The system prompt opening every assembled conversation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system_prompt: Option<String>,
        /// Ask the server to stream the answer (server-sent events).
        #[serde(default = "default_true")]
        stream: bool,
        /// `max_tokens` sent with every call; the server's default when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_tokens: Option<u32>,
        /// `temperature` sent with every call; the server's default when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        temperature: Option<f64>,
        /// Per-call timeout.
        #[serde(default = "default_openai_timeout_ms")]
        timeout_ms: u64,
        /// The key itself, read from `api_key_env` when the configuration is loaded; never
        /// serialised.
        #[serde(skip)]
        api_key: Option<Secret>,
    },
}

impl BackendConfig {
    /// The kind, as written in the configuration (`kind = "webhook"`).
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Echo => "echo",
            Self::Conformance => "conformance",
            Self::A2a { .. } => "a2a",
            Self::Webhook { .. } => "webhook",
            Self::Openai { .. } => "openai",
        }
    }

    /// Every URL the backend calls, by its key under `backend` (`card`, `url`, `base_url`):
    /// what its own check and `check-config`'s network policy hold to. Each kind names its own;
    /// the built-in ones call nothing.
    #[must_use]
    pub fn outbound_urls(&self) -> Vec<(&'static str, &str)> {
        match self {
            Self::Echo | Self::Conformance => Vec::new(),
            Self::A2a { card, .. } => vec![("card", card.as_str())],
            Self::Webhook { url, .. } => vec![("url", url.as_str())],
            Self::Openai { base_url, .. } => vec![("base_url", base_url.as_str())],
        }
    }

    /// The per-call timeout of a backend that calls out.
    const fn timeout_ms(&self) -> Option<u64> {
        match self {
            Self::Echo | Self::Conformance => None,
            Self::A2a { timeout_ms, .. }
            | Self::Webhook { timeout_ms, .. }
            | Self::Openai { timeout_ms, .. } => Some(*timeout_ms),
        }
    }

    /// A remote backend (webhook, A2A, OpenAI-compatible) needs http(s) URLs and a per-call
    /// timeout shorter than the queue lease. `at` is the agent's path (`agents[0]`).
    fn check(&self, at: &str, lease_seconds: u64, problems: &mut Vec<String>) {
        self.check_openai(at, problems);
        for (key, url) in self.outbound_urls() {
            if !url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                problems.push(format!("{at}.backend.{key} {url:?}: not an http(s) URL"));
            }
        }
        // A lease must outlive the call it covers, or the job runs twice.
        if let Some(timeout_ms) = self.timeout_ms()
            && timeout_ms >= lease_seconds.saturating_mul(1000)
        {
            problems.push(format!(
                "{at}.backend.timeout_ms {timeout_ms}: must be shorter than queue.lease_seconds"
            ));
        }
    }
}

impl BackendConfig {
    /// The settings only an OpenAI-compatible backend has: a model, a key variable that names
    /// a set variable, and numbers the API accepts.
    fn check_openai(&self, at: &str, problems: &mut Vec<String>) {
        let Self::Openai {
            model,
            api_key_env,
            max_tokens,
            temperature,
            api_key,
            ..
        } = self
        else {
            return;
        };
        if model.trim().is_empty() {
            problems.push(format!("{at}.backend.model: must not be empty"));
        }
        if let Some(var) = api_key_env {
            let valid = !var.is_empty()
                && !var.starts_with(|c: char| c.is_ascii_digit())
                && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                problems.push(format!(
                    "{at}.backend.api_key_env {var:?}: not an environment variable name"
                ));
            } else if api_key.as_ref().is_none_or(|k| k.expose().is_empty()) {
                problems.push(format!(
                    "{at}.backend.api_key_env {var:?}: the variable is not set (or empty)"
                ));
            }
        }
        if *max_tokens == Some(0) {
            problems.push(format!("{at}.backend.max_tokens: must be > 0"));
        }
        if let Some(t) = temperature
            && !(0.0..=2.0).contains(t)
        {
            problems.push(format!(
                "{at}.backend.temperature {t}: must be within 0..=2"
            ));
        }
    }

    /// Reads the API key of an OpenAI-compatible backend from the variable `api_key_env`
    /// names, looked up with `lookup`.
    pub(super) fn resolve_api_key(&mut self, lookup: impl Fn(&str) -> Option<String>) {
        if let Self::Openai {
            api_key_env: Some(var),
            api_key,
            ..
        } = self
        {
            *api_key = lookup(var).map(Secret::new);
        }
    }
}

fn default_openai_timeout_ms() -> u64 {
    60_000
}

fn default_a2a_timeout_ms() -> u64 {
    60_000
}

fn default_true() -> bool {
    true
}

fn default_webhook_timeout_ms() -> u64 {
    30_000
}
