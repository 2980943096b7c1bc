//! `[a2a]`: the A2A transport, and the per-agent A2A settings (`agents[].a2a`): card skills
//! and how callers authenticate.

use serde::{Deserialize, Serialize};

use super::secret::Secret;

/// The A2A transport (`/.well-known/agent-card.json`, `POST /a2a`, `POST /agents/{name}/a2a`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct A2aConfig {
    /// Serve A2A at all.
    pub enabled: bool,
    /// The agent the hub endpoint answers for when a message names none; the first configured
    /// agent when unset.
    pub default_agent: Option<String>,
    /// How long a blocking SendMessage waits for the task to finish or ask for input before
    /// returning it still working.
    pub blocking_timeout_ms: u64,
    /// Most parts in one inbound message.
    pub max_parts: usize,
    /// Most bytes of text and decoded data in one inbound message.
    pub max_message_bytes: usize,
    /// `Cache-Control: max-age` of agent cards.
    pub card_max_age_seconds: u64,
    /// `provider.organization` on agent cards.
    pub provider_organization: Option<String>,
    /// Largest `pageSize` ListTasks honours.
    pub max_page_size: u32,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            default_agent: None,
            blocking_timeout_ms: 30_000,
            max_parts: 64,
            max_message_bytes: 512 * 1024,
            card_max_age_seconds: 300,
            provider_organization: None,
            max_page_size: 100,
        }
    }
}

impl A2aConfig {
    /// The default agent must be one of the agents named `agents`, and the limits must admit
    /// something.
    pub(super) fn check(&self, agents: &[&str], problems: &mut Vec<String>) {
        if let Some(name) = &self.default_agent
            && !agents.iter().any(|a| a.eq_ignore_ascii_case(name))
        {
            problems.push(format!("a2a.default_agent {name:?}: no such agent"));
        }
        if self.max_parts == 0 || self.max_page_size == 0 {
            problems.push("a2a.max_parts and a2a.max_page_size must be > 0".into());
        }
    }
}

/// Per-agent A2A settings (`agents[].a2a`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentA2aConfig {
    /// Skills listed on the agent's card; one generic skill when empty.
    pub skills: Vec<A2aSkillConfig>,
    /// Skills listed only on the extended card, which callers get with a credential the agent
    /// accepts (`GetExtendedAgentCard`); the public card then says `extendedAgentCard: true`.
    pub extended_skills: Vec<A2aSkillConfig>,
    /// Who may call the agent over A2A.
    pub auth: A2aAuthConfig,
}

impl AgentA2aConfig {
    /// The auth policy must be sound, and an extended card needs callers who authenticate.
    pub(super) fn check(&self, at: &str, problems: &mut Vec<String>) {
        self.auth.check(&format!("{at}.auth"), problems);
        if !self.extended_skills.is_empty() && matches!(self.auth, A2aAuthConfig::Public) {
            problems.push(format!(
                "{at}.extended_skills: the extended card is for authenticated callers; \
                 set {at}.auth to jwt or oauth"
            ));
        }
    }
}

/// How A2A callers of an agent authenticate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum A2aAuthConfig {
    /// Anyone; callers are anonymous and see only anonymous tasks.
    #[default]
    Public,
    /// Bearer JWTs from the configured issuers (`a2a-jwt` evidence).
    Jwt {
        /// Trusted issuers.
        issuers: Vec<JwtIssuerConfig>,
        /// Clock skew allowed on `exp` and `nbf`.
        #[serde(default = "default_leeway_seconds")]
        leeway_seconds: u64,
    },
    /// OAuth 2 access tokens: JWT access tokens from the issuers, or opaque tokens checked by
    /// RFC 7662 introspection (`a2a-oauth` evidence).
    Oauth {
        /// Issuers of JWT access tokens.
        #[serde(default)]
        issuers: Vec<JwtIssuerConfig>,
        /// Introspection endpoint for opaque tokens.
        #[serde(default)]
        introspection: Option<IntrospectionConfig>,
        /// Token endpoint advertised on the card (client credentials flow).
        #[serde(default)]
        token_url: Option<String>,
        /// RFC 8414 metadata URL advertised on the card.
        #[serde(default)]
        metadata_url: Option<String>,
        /// Clock skew allowed on `exp` and `nbf`.
        #[serde(default = "default_leeway_seconds")]
        leeway_seconds: u64,
    },
}

impl A2aAuthConfig {
    /// Token auth needs somewhere to check tokens, and each issuer must be usable. `at` is the
    /// setting's path (`agents[0].a2a.auth`).
    pub(super) fn check(&self, at: &str, problems: &mut Vec<String>) {
        let issuers = match self {
            Self::Public => return,
            Self::Jwt { issuers, .. } => {
                if issuers.is_empty() {
                    problems.push(format!("{at}.issuers: at least one issuer"));
                }
                issuers
            }
            Self::Oauth {
                issuers,
                introspection,
                ..
            } => {
                if issuers.is_empty() && introspection.is_none() {
                    problems.push(format!("{at}: oauth needs issuers or introspection"));
                }
                issuers
            }
        };
        for (j, iss) in issuers.iter().enumerate() {
            iss.check(&format!("{at}.issuers[{j}]"), problems);
        }
    }
}

fn default_leeway_seconds() -> u64 {
    60
}

/// A trusted token issuer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtIssuerConfig {
    /// The exact `iss`.
    pub issuer: String,
    /// Accepted `aud` values (at least one must match).
    pub audiences: Vec<String>,
    /// JWKS URL; keys are cached and refetched when a token names an unknown `kid`.
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// Static public keys.
    #[serde(default)]
    pub keys: Vec<StaticKeyConfig>,
    /// Allowed algorithms (asymmetric only).
    #[serde(default = "default_jwt_algorithms")]
    pub algorithms: Vec<String>,
    /// Assurance of the evidence minted (`agent` for JWT, `oauth` for OAuth by default).
    #[serde(default)]
    pub assurance: Option<String>,
}

impl JwtIssuerConfig {
    /// An issuer needs an audience, keys or a JWKS URL, and only asymmetric algorithms. `at` is
    /// the issuer's path (`agents[0].a2a.auth.issuers[0]`).
    fn check(&self, at: &str, problems: &mut Vec<String>) {
        if self.audiences.is_empty() {
            problems.push(format!("{at}.audiences: at least one audience"));
        }
        if self.jwks_url.is_none() && self.keys.is_empty() {
            problems.push(format!("{at}: needs jwks_url or keys"));
        }
        for alg in &self.algorithms {
            if !matches!(
                alg.as_str(),
                "RS256"
                    | "RS384"
                    | "RS512"
                    | "PS256"
                    | "PS384"
                    | "PS512"
                    | "ES256"
                    | "ES384"
                    | "EdDSA"
            ) {
                problems.push(format!(
                    "{at}.algorithms: {alg:?} is not an accepted asymmetric algorithm"
                ));
            }
        }
    }
}

fn default_jwt_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into(), "EdDSA".into()]
}

/// A static public key of an issuer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticKeyConfig {
    /// Key id the tokens name (any token matches a key without one).
    #[serde(default)]
    pub kid: Option<String>,
    /// SPKI `PUBLIC KEY` PEM (RSA, EC P-256 or Ed25519).
    pub pem: String,
}

/// An RFC 7662 introspection endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    /// Endpoint.
    pub url: String,
    /// Client id (HTTP Basic).
    pub client_id: String,
    /// Client secret (HTTP Basic).
    pub client_secret: Secret,
    /// Required `aud`, when set.
    #[serde(default)]
    pub audience: Option<String>,
    /// How long an active answer is reused (never past the token's `exp`); 0 asks every time.
    /// A revoked token keeps working at most this long.
    #[serde(default = "default_introspection_cache_seconds")]
    pub cache_seconds: u64,
}

fn default_introspection_cache_seconds() -> u64 {
    60
}

/// One skill on an agent card.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aSkillConfig {
    /// Stable id.
    pub id: String,
    /// Name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example prompts.
    #[serde(default)]
    pub examples: Vec<String>,
}
