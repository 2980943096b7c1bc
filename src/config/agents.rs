//! `[[agents]]`: the hosted agents and the backend that answers for each.

use serde::{Deserialize, Serialize};

use super::a2a::AgentA2aConfig;
use super::email::AgentEmailConfig;
use super::secret::Secret;

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
    },
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
