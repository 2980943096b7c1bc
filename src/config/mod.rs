//! Typed configuration: built-in defaults, then an optional TOML file, then `SWITCHBOARD__…`
//! environment overrides, validated once.
//!
//! `SWITCHBOARD__SERVER__BIND=0.0.0.0:8080` sets `server.bind`; a numeric segment indexes an
//! array (`SWITCHBOARD__AGENTS__0__NAME`). Unknown keys are rejected with their full path.
//! Secrets are [`Secret`]s: they print as `********`. Each may instead be read from a file
//! named by the key with `_file` appended (`secret_file`, `token_file`, `url_file` under
//! `[database]`), relative names in systemd's `$CREDENTIALS_DIRECTORY` when it is set.
//!
//! Each section lives in its own module with its defaults and a check of its own values;
//! [`Config::check`] runs them all and reports every problem together.

mod a2a;
mod access;
mod activitypub;
mod agents;
mod api;
mod console;
mod conversation;
mod database;
mod email;
mod limits;
mod log;
mod media;
mod moderation;
mod net;
mod policy;
mod queue;
mod secret;
mod server;
mod telemetry;
#[cfg(test)]
mod tests;
mod trust;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use a2a::{
    A2aAuthConfig, A2aConfig, A2aSkillConfig, AgentA2aConfig, IntrospectionConfig, JwtIssuerConfig,
    StaticKeyConfig,
};
pub use access::{AccessConfig, AccessDefault, AccessRule, RefusalReply};
pub use activitypub::{
    AccountRef, ActivityPubConfig, AgentActivityPubConfig, ImageSource, MAX_ALIASES, MAX_PINNED,
    MAX_PROFILE_FIELDS, ProfileField, QuotePolicy, image_type, read_image_file,
};
pub use agents::{AgentConfig, BackendConfig, Notify};
pub use api::ApiConfig;
pub use console::ConsoleConfig;
pub use conversation::{
    Conversation, ConversationConfig, ConversationOverride, MAX_DEBOUNCE_MS, QueueMode,
};
pub use database::{DatabaseConfig, Durability};
pub use email::{
    AgentEmailConfig, DnsMode, EmailConfig, Postmaster, RelayTls, UnauthenticatedMail,
};
pub use limits::{
    DEFAULT_AUTOMATED_COOLDOWN_SECONDS, DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_HOPS,
    DEFAULT_PER_AUTOMATED, DEFAULT_PER_HOST, DEFAULT_PER_SENDER, LimitsConfig, MAX_MAX_HOPS, Rate,
};
pub use log::{LogConfig, LogFormat};
pub use media::MediaConfig;
pub use moderation::{BlockConfig, ModerationConfig};
pub use net::NetConfig;
pub use policy::PolicyConfig;
pub use queue::{JobKindConfig, QueueConfig};
pub use secret::{CREDENTIALS_DIRECTORY, MIN_SECRET_BYTES, Secret};
pub use server::{KEK_BYTES, ServerConfig, kek_bytes};
pub use telemetry::TelemetryConfig;
pub use trust::{TrustConfig, TrustedIssuerConfig};

use crate::error::Error;
use crate::message::HistoryPolicy;
use secret::MASK;

/// The environment prefix of overrides.
pub const ENV_PREFIX: &str = "SWITCHBOARD__";

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
    /// Trace export (OpenTelemetry).
    pub telemetry: TelemetryConfig,
    /// The durable queue.
    pub queue: QueueConfig,
    /// How much of a thread agents see.
    pub history: HistoryPolicy,
    /// Outbound HTTP.
    pub net: NetConfig,
    /// The operator's HTTP message API.
    pub api: ApiConfig,
    /// The operator's web console.
    pub console: ConsoleConfig,
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
    /// Every agent's default rate limits and backend concurrency.
    pub limits: LimitsConfig,
    /// Trusted connector issuers of forwarded identity assertions.
    pub trust: TrustConfig,
    /// Policy parts' single-use states.
    pub policy: PolicyConfig,
    /// Inbound debounce and what a message does while its thread has a run in flight.
    pub conversation: ConversationConfig,
    /// Blocked senders and where reports go.
    pub moderation: ModerationConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            server: ServerConfig::default(),
            database: DatabaseConfig::default(),
            log: LogConfig::default(),
            telemetry: TelemetryConfig::default(),
            queue: QueueConfig::default(),
            history: HistoryPolicy::default(),
            net: NetConfig::default(),
            api: ApiConfig::default(),
            console: ConsoleConfig::default(),
            media: MediaConfig::default(),
            activitypub: ActivityPubConfig::default(),
            a2a: A2aConfig::default(),
            email: EmailConfig::default(),
            limits: LimitsConfig::default(),
            agents: vec![AgentConfig {
                activitypub: None,
                name: "echo".into(),
                display_name: Some("Echo".into()),
                summary: Some("Answers with the text it received.".into()),
                backend: BackendConfig::Echo,
                email: None,
                a2a: None,
                access: None,
                notify: Vec::new(),
            }],
            trust: TrustConfig::default(),
            policy: PolicyConfig::default(),
            conversation: ConversationConfig::default(),
            moderation: ModerationConfig::default(),
        }
    }
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
        let env: Vec<(String, String)> = env.into_iter().collect();
        for (key, raw) in &env {
            if let Some(path) = key.strip_prefix(ENV_PREFIX) {
                apply_env(&mut value, path, raw)?;
            }
        }
        let credentials = env
            .iter()
            .find(|(k, v)| k == CREDENTIALS_DIRECTORY && !v.is_empty())
            .map(|(_, v)| std::path::PathBuf::from(v));
        secret::read_secret_files(&mut value, credentials.as_deref()).map_err(Error::Config)?;
        let mut config: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            Error::Config(format!("{path}: {}", e.into_inner()))
        })?;
        // Keys named by variable (`api_key_env`) come from the same environment.
        for agent in &mut config.agents {
            agent
                .backend
                .resolve_api_key(|var| env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone()));
        }
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

    /// Every semantic problem at once: each section checks its own values, given what it needs
    /// to know of the others.
    ///
    /// # Errors
    /// [`Error::Config`] with one problem per line.
    pub fn check(&self) -> Result<(), Error> {
        self.check_with(&[])
    }

    /// As [`Config::check`], knowing the names of the application's transports:
    /// `[conversation.transports]` may name only those.
    ///
    /// # Errors
    /// As [`Config::check`].
    pub fn check_with(&self, transports: &[&str]) -> Result<(), Error> {
        let mut problems = Vec::new();
        self.server
            .check(self.net.allow_private_addresses, &mut problems);
        self.database.check(&mut problems);
        self.telemetry.check(&mut problems);
        agents::check(&self.agents, self.queue.lease_seconds, &mut problems);
        let names: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
        self.a2a.check(&names, &mut problems);
        self.api.check(&mut problems);
        self.console.check(self.server.metrics_bind, &mut problems);
        self.queue.check(&mut problems);
        self.activitypub.check(&mut problems);
        self.email.check(&mut problems);
        self.limits.check("limits", &mut problems);
        self.trust.check(&mut problems);
        self.policy.check(&mut problems);
        self.conversation.check(transports, &mut problems);
        self.moderation.check(&names, &mut problems);
        if self.moderation.reports_to.is_some() && !self.email.enabled {
            problems.push(
                "moderation.reports_to: reports are mailed through the email transport; enable [email]"
                    .into(),
            );
        }
        // A blocking A2A call or an inbox delivery must be able to finish inside the request
        // deadline, after a body that took as long as it may.
        let (server, longest) = (
            &self.server,
            self.a2a
                .blocking_timeout_ms
                .max(self.activitypub.processing_timeout_ms),
        );
        if server.request_timeout_ms < server.body_timeout_ms.saturating_add(longest) {
            problems.push(format!(
                "server.request_timeout_ms {}: must be at least server.body_timeout_ms plus the \
                 longest of a2a.blocking_timeout_ms and activitypub.processing_timeout_ms ({})",
                server.request_timeout_ms,
                server.body_timeout_ms.saturating_add(longest)
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Config(problems.join("\n")))
        }
    }

    /// The secrets too weak to guard what they guard, one line each naming its key: a webhook
    /// secret, the API token or the console token shorter than [`MIN_SECRET_BYTES`] (or
    /// empty). `check-config` and `serve` refuse them unless given `--allow-weak`, which is for
    /// tests.
    #[must_use]
    pub fn weak_secrets(&self) -> Vec<String> {
        let mut secrets: Vec<(String, &Secret)> = Vec::new();
        for (i, agent) in self.agents.iter().enumerate() {
            if let BackendConfig::Webhook { secret, .. } = &agent.backend {
                secrets.push((format!("agents[{i}].backend.secret"), secret));
            }
        }
        if let Some(t) = &self.api.token {
            secrets.push(("api.token".into(), t));
        }
        if let Some(t) = &self.console.token {
            secrets.push(("console.token".into(), t));
        }
        secrets
            .into_iter()
            .filter_map(|(key, secret)| {
                let len = secret.expose().len();
                if len == 0 {
                    Some(format!(
                        "{key}: empty; use at least {MIN_SECRET_BYTES} random bytes \
                         (`openssl rand -hex 32`)"
                    ))
                } else if len < MIN_SECRET_BYTES {
                    Some(format!(
                        "{key}: {len} bytes is too short to be a secret; use at least \
                         {MIN_SECRET_BYTES} random bytes (`openssl rand -hex 32`)"
                    ))
                } else {
                    None
                }
            })
            .collect()
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
        self.server.public_url()
    }

    /// The public host, with the port when it is not the scheme's default.
    #[must_use]
    pub fn domain(&self) -> Option<String> {
        self.server.domain()
    }

    /// The domain of agents' fediverse handles: `server.handle_domain`, else [`Self::domain`].
    #[must_use]
    pub fn handle_domain(&self) -> Option<String> {
        self.server.handle_domain()
    }

    /// The configuration as TOML with secrets masked.
    ///
    /// # Errors
    /// When serialisation fails.
    pub fn to_masked_toml(&self) -> Result<String, Error> {
        toml::to_string_pretty(self).map_err(|e| Error::Config(e.to_string()))
    }
}

/// Removes masked secrets from the defaults, so their real defaults apply.
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
