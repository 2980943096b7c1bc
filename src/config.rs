//! Typed configuration: built-in defaults, then an optional TOML file, then `SWITCHBOARD__…`
//! environment overrides, validated once.
//!
//! `SWITCHBOARD__SERVER__BIND=0.0.0.0:8080` sets `server.bind`; a numeric segment indexes an
//! array (`SWITCHBOARD__AGENTS__0__NAME`). Unknown keys are rejected with their full path.
//! Secrets are [`Secret`]s: they print as `********`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::message::{HistoryPolicy, is_domain, is_handle_name};

/// The environment prefix of overrides.
pub const ENV_PREFIX: &str = "SWITCHBOARD__";

const MASK: &str = "********";

/// A secret string that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The secret itself; keep it out of logs.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(********)")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(MASK)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Environment values that look like numbers arrive typed; a secret takes any scalar.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Scalar {
            S(String),
            I(i64),
            F(f64),
            B(bool),
        }
        Ok(Self(match Scalar::deserialize(d)? {
            Scalar::S(s) => s,
            Scalar::I(i) => i.to_string(),
            Scalar::F(f) => f.to_string(),
            Scalar::B(b) => b.to_string(),
        }))
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP serving.
    pub server: ServerConfig,
    /// The database.
    pub database: DatabaseConfig,
    /// Logging.
    pub log: LogConfig,
    /// The durable queue.
    pub queue: QueueConfig,
    /// How much of a thread agents see.
    pub history: HistoryPolicy,
    /// Outbound HTTP.
    pub net: NetConfig,
    /// The operator's HTTP message API.
    pub api: ApiConfig,
    /// Attachments and their signed URLs.
    pub media: MediaConfig,
    /// Email: the SMTP listener, inbound authentication and replies.
    pub email: EmailConfig,
    /// The ActivityPub transport.
    pub activitypub: ActivityPubConfig,
    /// The A2A transport.
    pub a2a: A2aConfig,
    /// The agents this instance hosts.
    pub agents: Vec<AgentConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default(),
            database: DatabaseConfig::default(),
            log: LogConfig::default(),
            queue: QueueConfig::default(),
            history: HistoryPolicy::default(),
            net: NetConfig::default(),
            api: ApiConfig::default(),
            media: MediaConfig::default(),
            activitypub: ActivityPubConfig::default(),
            a2a: A2aConfig::default(),
            email: EmailConfig::default(),
            agents: vec![AgentConfig {
                name: "echo".into(),
                display_name: Some("Echo".into()),
                summary: Some("Answers with the text it received.".into()),
                backend: BackendConfig::Echo,
                email: None,
                a2a: None,
            }],
        }
    }
}

/// HTTP serving.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the public HTTP listener.
    pub bind: SocketAddr,
    /// Public base URL with scheme; defaults to `http://{bind}`.
    pub public_url: Option<String>,
    /// Address of the Prometheus metrics listener.
    pub metrics_bind: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for in-flight work before releasing it.
    pub shutdown_grace_seconds: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            metrics_bind: SocketAddr::from(([127, 0, 0, 1], 9464)),
            workers: 2,
            max_body_bytes: 1024 * 1024,
            shutdown_grace_seconds: 30,
        }
    }
}

/// The database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://path` (created if missing) or `postgres://…`.
    pub url: Secret,
    /// Pool size (SQLite readers; PostgreSQL connections).
    pub max_connections: u32,
    /// How long a statement waits for a locked SQLite database.
    pub busy_timeout_ms: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("sqlite://switchboard.db"),
            max_connections: 8,
            busy_timeout_ms: 5_000,
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// Logging.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `pretty` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info,switchboard=debug`; `RUST_LOG` wins when set.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Pretty,
            filter: "info".into(),
        }
    }
}

/// Settings of one job kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobKindConfig {
    /// Concurrent claim loops.
    pub workers: usize,
    /// Jobs claimed and committed together.
    pub batch_size: usize,
    /// Attempts before the job is dead.
    pub max_attempts: u32,
}

impl Default for JobKindConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            batch_size: 64,
            max_attempts: 10,
        }
    }
}

/// The durable queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// How long a claimed job stays leased; an expired lease returns the job.
    pub lease_seconds: u64,
    /// Idle workers look for due jobs at least this often.
    pub poll_interval_ms: u64,
    /// First retry delay; doubles per attempt, with jitter.
    pub backoff_base_ms: u64,
    /// Longest retry delay.
    pub backoff_max_ms: u64,
    /// Finished jobs are deleted after this long.
    pub done_retention_seconds: u64,
    /// Per job kind (`dispatch`, `deliver`, …).
    pub kinds: BTreeMap<String, JobKindConfig>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        let mut kinds = BTreeMap::new();
        kinds.insert(
            "dispatch".into(),
            JobKindConfig {
                workers: 2,
                batch_size: 64,
                max_attempts: 8,
            },
        );
        kinds.insert(
            "deliver".into(),
            JobKindConfig {
                workers: 2,
                batch_size: 64,
                max_attempts: 15,
            },
        );
        Self {
            lease_seconds: 120,
            poll_interval_ms: 1_000,
            backoff_base_ms: 2_000,
            backoff_max_ms: 6 * 3_600_000,
            done_retention_seconds: 86_400,
            kinds,
        }
    }
}

impl QueueConfig {
    /// The settings of `kind` (defaults when not configured).
    #[must_use]
    pub fn kind(&self, kind: &str) -> JobKindConfig {
        self.kinds.get(kind).copied().unwrap_or_default()
    }
}

/// Outbound HTTP.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// DEVELOPMENT ONLY: allow loopback, private and link-local targets and plain `http://`.
    pub allow_private_addresses: bool,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
    /// Whole-request timeout unless a caller sets its own.
    pub timeout_ms: u64,
    /// Largest response body read.
    pub max_body_bytes: usize,
    /// Redirects followed.
    pub max_redirects: usize,
    /// `User-Agent` sent.
    pub user_agent: String,
}

impl Default for NetConfig {
    fn default() -> Self {
        Self {
            allow_private_addresses: false,
            connect_timeout_ms: 5_000,
            timeout_ms: 30_000,
            max_body_bytes: 1024 * 1024,
            max_redirects: 3,
            user_agent: concat!("switchboard/", env!("CARGO_PKG_VERSION")).into(),
        }
    }
}

/// The operator's HTTP message API (`POST /api/v1/messages`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Bearer token; the API is off without one.
    pub token: Option<Secret>,
    /// Where responses to API messages are POSTed; without it they are stored only.
    pub callback_url: Option<String>,
    /// HMAC secret for callback signatures (the webhook scheme).
    pub callback_secret: Option<Secret>,
}

/// Attachments (`/media/{sha256}?exp=…&sig=…`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    /// HMAC key of media URLs; the same on every instance. A random key per start when unset.
    pub secret: Option<Secret>,
    /// How long a minted media URL stays valid.
    pub url_ttl_seconds: u64,
    /// Largest attachment stored.
    pub max_bytes: usize,
}

impl Default for MediaConfig {
    fn default() -> Self {
        Self {
            secret: None,
            url_ttl_seconds: 3_600,
            max_bytes: 25 * 1024 * 1024,
        }
    }
}

/// The ActivityPub transport (`/agents/{name}`, inboxes, WebFinger, NodeInfo).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActivityPubConfig {
    /// Serve the fediverse endpoints and deliver replies.
    pub enabled: bool,
    /// Largest inbox body accepted (413 above).
    pub max_body_bytes: usize,
    /// Deepest JSON nesting accepted in an activity (400 above).
    pub max_json_depth: usize,
    /// Time budget of one inbox request, key fetches included (503 when exceeded).
    pub processing_timeout_ms: u64,
    /// Timeout of one outbound fetch or delivery.
    pub fetch_timeout_ms: u64,
    /// How long fetched actors and keys are trusted before a refetch.
    pub actor_cache_seconds: u64,
    /// Unknown parents fetched to find a thread's root.
    pub max_parent_fetches: usize,
    /// Attachments of one note downloaded into the blob store.
    pub max_attachments: usize,
    /// Concurrent deliveries to one host.
    pub host_concurrency: usize,
    /// Days of failures after which a host's deliveries stop (a success resets it).
    pub breaker_days: u64,
    /// Where remote servers truncate replies (`recipient_capabilities.max_text_chars`).
    pub max_reply_chars: u64,
}

impl Default for ActivityPubConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_body_bytes: 256 * 1024,
            max_json_depth: 32,
            processing_timeout_ms: 10_000,
            fetch_timeout_ms: 10_000,
            actor_cache_seconds: 86_400,
            max_parent_fetches: 3,
            max_attachments: 4,
            host_concurrency: 4,
            breaker_days: 7,
            max_reply_chars: 500,
        }
    }
}

/// Email: the SMTP listener, authentication of inbound mail, and delivery of replies.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmailConfig {
    /// Runs the SMTP listener and delivers replies by email.
    pub enabled: bool,
    /// Address of the SMTP listener.
    pub bind: SocketAddr,
    /// Mail domain: agents are `{name}@{domain}`. Defaults to the host of `server.public_url`.
    pub domain: Option<String>,
    /// Name in the SMTP greeting and `Authentication-Results`. Defaults to the mail domain.
    pub hostname: Option<String>,
    /// Largest message accepted (advertised as SIZE), in bytes.
    pub max_message_bytes: usize,
    /// Most recipients of one message.
    pub max_recipients: usize,
    /// Most concurrent SMTP sessions; further clients get 421.
    pub max_sessions: usize,
    /// Memory all sessions together may hold for message bodies being received, in bytes. A
    /// message that would go over it is read to its end without being kept and answered
    /// `452 4.3.1` (the client retries later), so many large messages at once cannot exhaust
    /// memory. At least `max_message_bytes`.
    pub max_data_memory_bytes: usize,
    /// Most commands in one session (floods get 421).
    pub max_commands: usize,
    /// A session is closed when the client stays silent this long.
    pub idle_timeout_seconds: u64,
    /// Longest SMTP session.
    pub session_timeout_seconds: u64,
    /// Deepest multipart nesting accepted.
    pub max_mime_depth: usize,
    /// PEM certificate chain for STARTTLS (not offered without it).
    pub tls_cert_file: Option<String>,
    /// PEM private key for STARTTLS.
    pub tls_key_file: Option<String>,
    /// DKIM selector of outbound mail; `switchboard dkim` prints the TXT record to publish.
    pub dkim_selector: String,
    /// What happens to mail that fails authentication, unless the agent says otherwise.
    pub unauthenticated: UnauthenticatedMail,
    /// `system` (the host's resolver) or `offline` (only `dns_records`; tests, air-gapped use).
    pub dns: DnsMode,
    /// TXT records answered locally before asking DNS: FQDN → record text.
    pub dns_records: BTreeMap<String, String>,
    /// Relay (smarthost) replies are sent through; without one they go straight to the
    /// recipient domain's MX hosts.
    pub relay_host: Option<String>,
    /// Relay port.
    pub relay_port: u16,
    /// `none`, `starttls` or `tls` (implicit TLS).
    pub relay_tls: RelayTls,
    /// Relay user name.
    pub relay_username: Option<String>,
    /// Relay password.
    pub relay_password: Option<Secret>,
    /// Timeout of one relay conversation.
    pub relay_timeout_seconds: u64,
    /// Port of direct MX delivery, used when no relay is set (25; others only for tests).
    pub direct_port: u16,
    /// MX answers known without DNS: domain → exchanges, most preferred first.
    pub dns_mx: BTreeMap<String, Vec<String>>,
}

impl Default for EmailConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            bind: SocketAddr::from(([127, 0, 0, 1], 2525)),
            domain: None,
            hostname: None,
            max_message_bytes: 25 * 1024 * 1024,
            max_recipients: 50,
            max_sessions: 256,
            max_data_memory_bytes: 256 * 1024 * 1024,
            max_commands: 1_000,
            idle_timeout_seconds: 60,
            session_timeout_seconds: 600,
            max_mime_depth: 10,
            tls_cert_file: None,
            tls_key_file: None,
            dkim_selector: "switchboard".into(),
            unauthenticated: UnauthenticatedMail::Accept,
            dns: DnsMode::System,
            dns_records: BTreeMap::new(),
            relay_host: None,
            relay_port: 587,
            relay_tls: RelayTls::Starttls,
            relay_username: None,
            relay_password: None,
            relay_timeout_seconds: 60,
            direct_port: 25,
            dns_mx: BTreeMap::new(),
        }
    }
}

/// What happens to mail that fails authentication (no aligned DKIM or DMARC pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnauthenticatedMail {
    /// Stored and dispatched with `verified: false`.
    Accept,
    /// Refused with 550 5.7.1.
    Reject,
}

/// Where DNS answers for DKIM, SPF and DMARC come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DnsMode {
    /// The host's resolver configuration.
    System,
    /// Only `email.dns_records`; everything else does not exist.
    Offline,
}

/// How the relay connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelayTls {
    /// Plain text (loopback relays only).
    None,
    /// STARTTLS, required.
    Starttls,
    /// Implicit TLS (port 465).
    Tls,
}

/// Email settings of one agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentEmailConfig {
    /// Overrides `email.unauthenticated` for this agent.
    pub unauthenticated: Option<UnauthenticatedMail>,
}

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

/// Per-agent A2A settings (`agents[].a2a`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentA2aConfig {
    /// Skills listed on the agent's card; one generic skill when empty.
    pub skills: Vec<A2aSkillConfig>,
    /// Who may call the agent over A2A.
    pub auth: A2aAuthConfig,
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

impl Config {
    /// Loads defaults, then `file` if given, then `SWITCHBOARD__…` variables from `env`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the offending key, or listing every semantic problem.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, Error> {
        // The defaults as a value tell environment overrides which type each key has. Masked
        // secrets are dropped from it: `#[serde(default)]` restores their real defaults.
        let mut value = toml::Value::try_from(Self::default())
            .map_err(|e| Error::Config(format!("defaults: {e}")))?;
        drop_masked(&mut value);
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            let file_value: toml::Value = toml::from_str(&text)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            merge(&mut value, file_value);
        }
        for (key, raw) in env {
            if let Some(path) = key.strip_prefix(ENV_PREFIX) {
                apply_env(&mut value, path, &raw)?;
            }
        }
        let config: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            Error::Config(format!("{path}: {}", e.into_inner()))
        })?;
        config.check()?;
        Ok(config)
    }

    /// Loads from the process environment.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn from_env(file: Option<&Path>) -> Result<Self, Error> {
        Self::load(file, std::env::vars())
    }

    /// Every semantic problem at once.
    ///
    /// # Errors
    /// [`Error::Config`] with one problem per line.
    pub fn check(&self) -> Result<(), Error> {
        let mut problems = Vec::new();
        match self.public_url() {
            Ok(url) => {
                if url.scheme() == "http" && !self.net.allow_private_addresses {
                    tracing::debug!("public_url is plain http; fine for local use only");
                }
                if self.domain().is_none_or(|d| !is_domain(&d)) {
                    problems.push(format!("server.public_url {url}: no usable host"));
                }
            }
            Err(e) => problems.push(e),
        }
        let url = self.database.url.expose();
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            problems
                .push("database.url: must start with sqlite:, postgres:// or postgresql://".into());
        }
        if self.agents.is_empty() {
            problems.push("agents: at least one agent is required".into());
        }
        let mut seen = std::collections::HashSet::new();
        for (i, agent) in self.agents.iter().enumerate() {
            if !is_handle_name(&agent.name) {
                problems.push(format!(
                    "agents[{i}].name {:?}: use letters, digits, _ - .",
                    agent.name
                ));
            }
            if !seen.insert(agent.name.to_lowercase()) {
                problems.push(format!("agents[{i}].name {:?}: duplicate", agent.name));
            }
            if let BackendConfig::Webhook {
                url, timeout_ms, ..
            } = &agent.backend
            {
                match url::Url::parse(url) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                    _ => problems.push(format!(
                        "agents[{i}].backend.url {url:?}: not an http(s) URL"
                    )),
                }
                // A lease must outlive the call it covers, or the job runs twice.
                if *timeout_ms >= self.queue.lease_seconds.saturating_mul(1000) {
                    problems.push(format!(
                        "agents[{i}].backend.timeout_ms {timeout_ms}: must be shorter than queue.lease_seconds"
                    ));
                }
            }
        }
        for (i, agent) in self.agents.iter().enumerate() {
            if let BackendConfig::A2a {
                card, timeout_ms, ..
            } = &agent.backend
            {
                match url::Url::parse(card) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                    _ => problems.push(format!(
                        "agents[{i}].backend.card {card:?}: not an http(s) URL"
                    )),
                }
                if *timeout_ms >= self.queue.lease_seconds.saturating_mul(1000) {
                    problems.push(format!(
                        "agents[{i}].backend.timeout_ms {timeout_ms}: must be shorter than queue.lease_seconds"
                    ));
                }
            }
        }
        if let Some(name) = &self.a2a.default_agent
            && !self
                .agents
                .iter()
                .any(|a| a.name.eq_ignore_ascii_case(name))
        {
            problems.push(format!("a2a.default_agent {name:?}: no such agent"));
        }
        for (i, agent) in self.agents.iter().enumerate() {
            let issuers = match agent.a2a.as_ref().map(|a| &a.auth) {
                Some(A2aAuthConfig::Jwt { issuers, .. }) => {
                    if issuers.is_empty() {
                        problems.push(format!("agents[{i}].a2a.auth.issuers: at least one issuer"));
                    }
                    issuers.as_slice()
                }
                Some(A2aAuthConfig::Oauth {
                    issuers,
                    introspection,
                    ..
                }) => {
                    if issuers.is_empty() && introspection.is_none() {
                        problems.push(format!(
                            "agents[{i}].a2a.auth: oauth needs issuers or introspection"
                        ));
                    }
                    issuers.as_slice()
                }
                _ => &[],
            };
            for (j, iss) in issuers.iter().enumerate() {
                let at = format!("agents[{i}].a2a.auth.issuers[{j}]");
                if iss.audiences.is_empty() {
                    problems.push(format!("{at}.audiences: at least one audience"));
                }
                if iss.jwks_url.is_none() && iss.keys.is_empty() {
                    problems.push(format!("{at}: needs jwks_url or keys"));
                }
                for alg in &iss.algorithms {
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
        if self.a2a.max_parts == 0 || self.a2a.max_page_size == 0 {
            problems.push("a2a.max_parts and a2a.max_page_size must be > 0".into());
        }
        if let Some(cb) = &self.api.callback_url
            && url::Url::parse(cb).is_err()
        {
            problems.push(format!("api.callback_url {cb:?}: not a URL"));
        }
        for (kind, k) in &self.queue.kinds {
            if k.workers == 0 || k.batch_size == 0 || k.max_attempts == 0 {
                problems.push(format!(
                    "queue.kinds.{kind}: workers, batch_size and max_attempts must be > 0"
                ));
            }
        }
        let ap = &self.activitypub;
        if ap.max_body_bytes == 0 || ap.max_json_depth == 0 || ap.host_concurrency == 0 {
            problems.push(
                "activitypub: max_body_bytes, max_json_depth and host_concurrency must be > 0"
                    .into(),
            );
        }
        self.check_email(&mut problems);
        if self.queue.lease_seconds == 0 {
            problems.push("queue.lease_seconds: must be > 0".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Config(problems.join("\n")))
        }
    }

    fn check_email(&self, problems: &mut Vec<String>) {
        let e = &self.email;
        if e.tls_cert_file.is_some() != e.tls_key_file.is_some() {
            problems.push("email.tls_cert_file and email.tls_key_file: set both or neither".into());
        }
        if e.max_message_bytes == 0 || e.max_recipients == 0 || e.max_sessions == 0 {
            problems.push(
                "email.max_message_bytes, max_recipients and max_sessions must be > 0".into(),
            );
        }
        if e.max_data_memory_bytes < e.max_message_bytes {
            problems.push(
                "email.max_data_memory_bytes: must be at least email.max_message_bytes".into(),
            );
        }
        if e.dkim_selector.is_empty()
            || !e
                .dkim_selector
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            problems.push(format!(
                "email.dkim_selector {:?}: use letters, digits, - and .",
                e.dkim_selector
            ));
        }
        if let Some(d) = &e.domain
            && !is_domain(d)
        {
            problems.push(format!("email.domain {d:?}: not a domain name"));
        }
    }

    /// The mail domain: `email.domain`, else the host of the public URL.
    #[must_use]
    pub fn mail_domain(&self) -> Option<String> {
        if let Some(d) = &self.email.domain {
            return Some(d.to_lowercase());
        }
        let url = self.public_url().ok()?;
        Some(url.host_str()?.to_lowercase())
    }

    /// The public base URL (scheme, host, port), without a trailing slash.
    ///
    /// # Errors
    /// A description of why the configured URL is unusable.
    pub fn public_url(&self) -> Result<url::Url, String> {
        let raw = self
            .server
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.server.bind));
        let url = url::Url::parse(&raw).map_err(|e| format!("server.public_url {raw:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "server.public_url {raw:?}: needs http(s) and a host"
            ));
        }
        Ok(url)
    }

    /// The public host, with the port when it is not the scheme's default.
    #[must_use]
    pub fn domain(&self) -> Option<String> {
        let url = self.public_url().ok()?;
        let host = url.host_str()?.to_owned();
        Some(match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host,
        })
    }

    /// The configuration as TOML with secrets masked.
    ///
    /// # Errors
    /// When serialisation fails.
    pub fn to_masked_toml(&self) -> Result<String, Error> {
        toml::to_string_pretty(self).map_err(|e| Error::Config(e.to_string()))
    }
}

fn drop_masked(v: &mut toml::Value) {
    match v {
        toml::Value::Table(t) => {
            t.retain(|_, v| v.as_str() != Some(MASK));
            t.iter_mut().for_each(|(_, v)| drop_masked(v));
        }
        toml::Value::Array(a) => a.iter_mut().for_each(drop_masked),
        _ => {}
    }
}

/// Deep-merges `over` into `base`: tables merge key by key, everything else replaces.
fn merge(base: &mut toml::Value, over: toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Applies one `SWITCHBOARD__A__B=value` override.
fn apply_env(root: &mut toml::Value, path: &str, raw: &str) -> Result<(), Error> {
    let segments: Vec<String> = path.split("__").map(str::to_lowercase).collect();
    if segments.iter().any(String::is_empty) {
        return Err(Error::Config(format!(
            "{ENV_PREFIX}{path}: empty key segment"
        )));
    }
    let mut cur = root;
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match cur {
            toml::Value::Array(items) => {
                let idx: usize = seg.parse().map_err(|_| {
                    Error::Config(format!("{ENV_PREFIX}{path}: {seg:?} must index an array"))
                })?;
                if idx > items.len() {
                    return Err(Error::Config(format!(
                        "{ENV_PREFIX}{path}: index {idx} skips entries"
                    )));
                }
                if idx == items.len() {
                    items.push(toml::Value::Table(toml::map::Map::new()));
                }
                cur = &mut items[idx];
            }
            toml::Value::Table(table) => {
                cur = table
                    .entry(seg.clone())
                    .or_insert_with(|| toml::Value::Table(toml::map::Map::new()));
            }
            _ => {
                return Err(Error::Config(format!(
                    "{ENV_PREFIX}{path}: {seg:?} is below a plain value"
                )));
            }
        }
        if last {
            *cur = env_value(cur, raw);
        }
    }
    Ok(())
}

/// Types an environment value like the value it replaces; a new key is guessed from TOML syntax.
fn env_value(existing: &toml::Value, raw: &str) -> toml::Value {
    if existing.is_str() {
        return toml::Value::String(raw.to_owned());
    }
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .filter(|v| !v.is_table())
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_are_valid_and_serve_echo_on_sqlite() {
        let c = Config::load(None, vec![]).unwrap();
        assert_eq!(c.server.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(c.database.url.expose(), "sqlite://switchboard.db");
        assert_eq!(c.agents.len(), 1);
        assert!(matches!(c.agents[0].backend, BackendConfig::Echo));
        assert_eq!(c.domain().unwrap(), "127.0.0.1:8080");
    }

    #[test]
    fn env_overrides_file_and_types_follow_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[server]\nworkers = 3\n[queue]\nlease_seconds = 5\n").unwrap();
        let c = Config::load(
            Some(&path),
            env(&[
                ("SWITCHBOARD__SERVER__WORKERS", "7"),
                ("SWITCHBOARD__DATABASE__URL", "postgres://localhost/x"),
                ("SWITCHBOARD__API__TOKEN", "12345"),
                ("SWITCHBOARD__AGENTS__0__NAME", "helper"),
                ("SWITCHBOARD__QUEUE__KINDS__DISPATCH__BATCH_SIZE", "9"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.server.workers, 7);
        assert_eq!(c.queue.lease_seconds, 5);
        assert_eq!(c.api.token.unwrap().expose(), "12345");
        assert_eq!(c.agents[0].name, "helper");
        assert_eq!(c.queue.kind("dispatch").batch_size, 9);
    }

    #[test]
    fn unknown_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[server]\nbindd = \"127.0.0.1:1\"\n").unwrap();
        let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
        assert!(e.contains("server") && e.contains("bindd"), "{e}");
        let e = Config::load(None, env(&[("SWITCHBOARD__QUEUE__LEASE", "3")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("queue") && e.contains("lease"), "{e}");
        std::fs::write(&path, "[[agents]]\nname = \"w\"\nbackend = { kind = \"webhook\", url = \"https://a.example\", secret = \"s\", urll = 1 }\n").unwrap();
        let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
        assert!(e.contains("agents[0].backend") && e.contains("urll"), "{e}");
    }

    #[test]
    fn semantic_problems_are_all_listed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[database]\nurl = \"mysql://x\"\n[[agents]]\nname = \"a b\"\nbackend = { kind = \"echo\" }\n[[agents]]\nname = \"A\"\nbackend = { kind = \"echo\" }\n[[agents]]\nname = \"a\"\nbackend = { kind = \"echo\" }\n",
        )
        .unwrap();
        let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
        assert!(e.contains("database.url"), "{e}");
        assert!(e.contains("agents[0].name"), "{e}");
        assert!(
            e.contains("agents[2].name") && e.contains("duplicate"),
            "{e}"
        );
        std::fs::write(
            &path,
            "[queue]\nlease_seconds = 10\n[[agents]]\nname = \"w\"\nbackend = { kind = \"webhook\", url = \"https://a.example\", secret = \"s\", timeout_ms = 10000 }\n",
        )
        .unwrap();
        let e = Config::load(Some(&path), vec![]).unwrap_err().to_string();
        assert!(e.contains("shorter than queue.lease_seconds"), "{e}");
    }

    #[test]
    fn secrets_never_print() {
        let c = Config::load(
            None,
            env(&[
                ("SWITCHBOARD__DATABASE__URL", "postgres://u:hunter2@db/x"),
                ("SWITCHBOARD__API__TOKEN", "tok-hunter2"),
            ]),
        )
        .unwrap();
        let shown = format!("{}{:?}", c.to_masked_toml().unwrap(), c);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("********"));
    }

    #[test]
    fn example_config_loads_and_documents_every_key() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = root.join("deploy/switchboard.example.toml");
        let c = Config::load(Some(&path), vec![]).unwrap();
        assert!(
            c.agents.len() >= 2,
            "the example shows an echo and a webhook agent"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        let mut missing = Vec::new();
        collect_keys(&defaults, "", &mut missing, &text);
        for key in [
            "public_url",
            "token",
            "callback_url",
            "callback_secret",
            "secret",
            "timeout_ms",
            "url",
        ] {
            if !text.contains(&format!("{key} =")) {
                missing.push(key.to_owned());
            }
        }
        assert!(
            missing.is_empty(),
            "keys not documented in the example: {missing:?}"
        );
    }

    fn collect_keys(v: &toml::Value, prefix: &str, missing: &mut Vec<String>, text: &str) {
        if let toml::Value::Table(t) = v {
            for (k, v) in t {
                if let Some(first) = v
                    .as_array()
                    .and_then(|a| a.first())
                    .filter(|f| f.is_table())
                {
                    if !text.contains(&format!("[[{prefix}{k}]]")) {
                        missing.push(format!("{prefix}{k}"));
                    }
                    collect_keys(first, &format!("{prefix}{k}[]."), missing, text);
                } else if v.is_table() && !(prefix.ends_with("[].") && k == "backend") {
                    collect_keys(v, &format!("{prefix}{k}."), missing, text);
                } else if !text.contains(&format!("{k} =")) {
                    missing.push(format!("{prefix}{k}"));
                }
            }
        }
    }
}
