//! Agent cards: the hub card (`/.well-known/agent-card.json`) and one per agent (with its
//! extended card for authenticated callers, when it has one), signed with the server's A2A key
//! and rendered once at start-up with their caching validators (`ETag`, `Last-Modified`).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::mapping::TOOL_EVENTS_EXTENSION;
use crate::agents::Agent;
use crate::config::{A2aAuthConfig, A2aConfig, A2aSkillConfig, AgentA2aConfig};
use crate::keys::Ed25519Key;
use crate::policy::POLICY_EXTENSION;
use crate::trust::IDENTITY_EXTENSION;

/// A rendered card with its validators.
#[derive(Debug, Clone)]
pub struct RenderedCard {
    /// The JSON body.
    pub body: String,
    /// Strong entity tag (quoted).
    pub etag: String,
    /// When this content first appeared (unix seconds), for Last-Modified.
    pub modified_s: i64,
}

impl RenderedCard {
    /// Renders `card`; its modification time is set once known ([`RenderedCard::modified_at`]).
    #[must_use]
    pub fn new(card: &Value) -> Self {
        let body = card.to_string();
        let digest = Sha256::digest(body.as_bytes());
        Self {
            etag: format!("\"{}\"", hex::encode(&digest[..16])),
            body,
            modified_s: 0,
        }
    }

    /// The card, with the time its content first appeared (unix milliseconds).
    #[must_use]
    pub fn modified_at(mut self, unix_ms: i64) -> Self {
        self.modified_s = unix_ms.div_euclid(1000);
        self
    }

    /// Whether a conditional request can be answered 304: `If-None-Match` (weak comparison,
    /// RFC 9110 §13.1.2: a `W/` tag matches its strong twin; `*` matches any) when present,
    /// else `If-Modified-Since` at or after the content's time.
    #[must_use]
    pub fn not_modified(
        &self,
        if_none_match: Option<&str>,
        if_modified_since: Option<&str>,
    ) -> bool {
        let opaque = |t: &str| t.trim().trim_start_matches("W/").to_owned();
        if let Some(tags) = if_none_match {
            let mine = opaque(&self.etag);
            return tags
                .split(',')
                .any(|t| t.trim() == "*" || opaque(t) == mine);
        }
        if_modified_since
            .and_then(crate::net::date::parse_unix_s)
            .is_some_and(|since| since >= self.modified_s)
    }
}

/// What every card shares.
#[derive(Debug, Clone)]
pub struct CardContext<'a> {
    /// Public base URL without a trailing slash.
    pub public_url: &'a str,
    /// Transport settings.
    pub cfg: &'a A2aConfig,
}

fn capabilities(extended: bool) -> Value {
    json!({
        "streaming": true,
        "pushNotifications": true,
        "extendedAgentCard": extended,
        "extensions": [{
            "uri": TOOL_EVENTS_EXTENSION,
            "description": "Tool calls and results travel as DataParts {type: tool-call|tool-result|tool-error}.",
            "required": false,
        }, {
            "uri": IDENTITY_EXTENSION,
            "description": "Identity a trusted connector verified, forwarded as compact JWS subject assertions in message metadata under this URI ({\"assertions\": [jws]}).",
            "required": false,
        }, {
            "uri": POLICY_EXTENSION,
            "description": "A task in TASK_STATE_INPUT_REQUIRED or TASK_STATE_AUTH_REQUIRED carries a DataPart {type: policy, policy: {kind, message, state, ...}}; the next message of the task resolves it by sending {\"state\": state} in message metadata under this URI. A state is single-use, expires, and is bound to the task's context and the caller.",
            "required": false,
        }],
    })
}

/// The endpoint's bindings: JSON-RPC (preferred, first) and HTTP+JSON at the same URL, the
/// REST resources below it.
fn interfaces(url: &str) -> Value {
    json!([
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ])
}

fn provider(ctx: &CardContext<'_>) -> Value {
    json!({
        "organization": ctx.cfg.provider_organization.clone().unwrap_or_else(|| "switchboard".into()),
        "url": ctx.public_url,
    })
}

const INPUT_MODES: [&str; 4] = [
    "text/plain",
    "text/markdown",
    "application/json",
    "application/octet-stream",
];
const OUTPUT_MODES: [&str; 3] = ["text/plain", "text/markdown", "application/json"];

fn skill_list(agent: &Agent, skills: &[A2aSkillConfig]) -> Vec<Value> {
    skills
        .iter()
        .map(|k| {
            let tags = if k.tags.is_empty() {
                vec![agent.name.clone()]
            } else {
                k.tags.clone()
            };
            let mut v =
                json!({"id": k.id, "name": k.name, "description": k.description, "tags": tags});
            if !k.examples.is_empty() {
                v["examples"] = json!(k.examples);
            }
            v
        })
        .collect()
}

fn skills(agent: &Agent, settings: Option<&AgentA2aConfig>) -> Vec<Value> {
    let configured = skill_list(agent, settings.map_or(&[], |s| &s.skills));
    if configured.is_empty() {
        vec![json!({
            "id": "chat",
            "name": agent.display_name.clone().unwrap_or_else(|| agent.name.clone()),
            "description": agent.summary.clone().unwrap_or_else(|| format!("Talk to {}", agent.address)),
            "tags": ["chat", agent.name],
        })]
    } else {
        configured
    }
}

/// `securitySchemes` entries of a policy (none for public agents).
fn schemes(policy: &A2aAuthConfig) -> Vec<(&'static str, Value)> {
    match policy {
        A2aAuthConfig::Public => Vec::new(),
        A2aAuthConfig::Jwt { .. } => vec![(
            "jwt",
            json!({"httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"}}),
        )],
        A2aAuthConfig::Oauth {
            token_url,
            metadata_url,
            ..
        } => {
            let mut scheme = json!({"flows": {}});
            if let Some(t) = token_url {
                scheme["flows"]["clientCredentials"] = json!({"tokenUrl": t, "scopes": {}});
            }
            if let Some(m) = metadata_url {
                scheme["oauth2MetadataUrl"] = json!(m);
            }
            vec![("oauth", json!({ "oauth2SecurityScheme": scheme }))]
        }
    }
}

/// Adds `securitySchemes` (from every policy) and `securityRequirements` (from `required`).
fn add_security<'a>(
    card: &mut Value,
    all: impl IntoIterator<Item = &'a A2aAuthConfig>,
    required: Option<&A2aAuthConfig>,
) {
    let mut map = serde_json::Map::new();
    for p in all {
        for (name, s) in schemes(p) {
            map.insert(name.into(), s);
        }
    }
    if map.is_empty() {
        return;
    }
    card["securitySchemes"] = Value::Object(map);
    if let Some(req) = required {
        let reqs: Vec<Value> = schemes(req)
            .into_iter()
            .map(|(name, _)| json!({"schemes": {name: {}}}))
            .collect();
        if !reqs.is_empty() {
            card["securityRequirements"] = json!(reqs);
        }
    }
}

/// The card of one agent: the public one, or (`extended`) the one callers with a credential the
/// agent accepts get, which also lists the agent's `extended_skills`. `None` when `extended`
/// and the agent has no extended card.
#[must_use]
pub fn agent_card(
    ctx: &CardContext<'_>,
    agent: &Agent,
    settings: Option<&AgentA2aConfig>,
    extended: bool,
) -> Option<Value> {
    let more = settings.map_or(&[][..], |s| &s.extended_skills);
    if extended && more.is_empty() {
        return None;
    }
    let mut skills = skills(agent, settings);
    if extended {
        skills.extend(skill_list(agent, more));
    }
    let policy = settings.map(|s| &s.auth);
    let mut card = json!({
        "name": agent.display_name.clone().unwrap_or_else(|| agent.name.clone()),
        "description": agent.summary.clone().unwrap_or_else(|| format!("{} on switchboard", agent.address)),
        "supportedInterfaces": interfaces(&format!("{}/agents/{}/a2a", ctx.public_url, agent.name)),
        "provider": provider(ctx),
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": capabilities(!more.is_empty()),
        "defaultInputModes": INPUT_MODES,
        "defaultOutputModes": OUTPUT_MODES,
        "skills": skills,
    });
    add_security(&mut card, policy, policy);
    Some(card)
}

/// The hub card: one endpoint for every agent (a leading `@name` picks one).
#[must_use]
pub fn hub_card<'a>(
    ctx: &CardContext<'_>,
    domain: &str,
    agents: &[std::sync::Arc<Agent>],
    policies: impl IntoIterator<Item = &'a A2aAuthConfig>,
    default_policy: Option<&A2aAuthConfig>,
) -> Value {
    let skills: Vec<Value> = agents
        .iter()
        .map(|a| {
            json!({
                "id": a.name,
                "name": a.display_name.clone().unwrap_or_else(|| a.name.clone()),
                "description": a.summary.clone().unwrap_or_else(|| format!("Talk to {}", a.address)),
                "tags": ["agent", a.name],
                "examples": [format!("@{} hello", a.name)],
            })
        })
        .collect();
    let mut card = json!({
        "name": format!("switchboard on {domain}"),
        "description": "Every agent of this switchboard behind one A2A endpoint: start a message with @name to pick one.",
        "supportedInterfaces": interfaces(&format!("{}/a2a", ctx.public_url)),
        "provider": provider(ctx),
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": capabilities(false),
        "defaultInputModes": INPUT_MODES,
        "defaultOutputModes": OUTPUT_MODES,
        "skills": skills,
    });
    add_security(&mut card, policies, default_policy);
    card
}

/// `card` with its `signatures`: one detached JWS made with the server's A2A key over the card's
/// RFC 8785 form, naming the key (`kid`) and the JWKS that publishes it (`jku`).
///
/// # Errors
/// [`crate::Error::Invalid`] if the card cannot be canonicalised (it always can).
pub fn signed(mut card: Value, key: &Ed25519Key, public_url: &str) -> crate::Result<Value> {
    let kid = super::push::kid(&key.public_key_raw());
    let jku = format!("{public_url}{JWKS_PATH}");
    let signature = crate::jws::sign(&card, key, &kid, &jku)
        .map_err(|e| crate::Error::Invalid(e.to_string()))?;
    card[crate::jws::SIGNATURES] = json!([signature]);
    Ok(card)
}

/// Where the server's JWKS (the A2A key: push JWTs and card signatures) is served.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";
