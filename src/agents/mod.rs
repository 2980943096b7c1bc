//! Agent backends (echo, webhook, conformance, a2a, openai) and the registry built from
//! configuration; the assembly of prompts for chat models lives in [`assembly`].

mod a2a;
pub mod assembly;
mod conformance;
mod echo;
mod openai;
mod webhook;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

pub use a2a::{A2aAgent, A2aRemote};
pub use conformance::ConformanceAgent;
pub use echo::EchoAgent;
pub use openai::{OpenAiAgent, OpenAiSettings};
pub use webhook::WebhookAgent;

use crate::clock::SharedClock;
use crate::config::{AgentConfig, BackendConfig};
use crate::error::OutboundError;
use crate::message::{Address, NormalizedMessage, NormalizedResponse, ResponseEvent};
use crate::net::HttpClient;
use crate::store::Db;

/// Where a backend reports its response while producing it (a `delta` of text, a finished
/// `part`). Best effort: what is stored and delivered is the final response.
pub type Progress<'a> = &'a (dyn Fn(ResponseEvent) + Send + Sync);

/// Something that answers an agent's messages.
#[async_trait::async_trait]
pub trait AgentBackend: Send + Sync + std::fmt::Debug {
    /// Answers `msg`; `None` means the agent has nothing to say.
    ///
    /// # Errors
    /// Temporary failures are retried with backoff; permanent ones end the job.
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError>;

    /// Whether [`AgentBackend::respond_streaming`] may report anything (only then is progress
    /// collected).
    fn streams(&self) -> bool {
        false
    }

    /// Answers `msg` like [`AgentBackend::respond`], reporting the response to `progress` as
    /// it is produced, for backends that stream. The default reports nothing.
    ///
    /// # Errors
    /// As [`AgentBackend::respond`].
    async fn respond_streaming(
        &self,
        msg: &NormalizedMessage,
        progress: Progress<'_>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        let _ = progress;
        self.respond(msg).await
    }
}

/// A hosted agent.
#[derive(Debug)]
pub struct Agent {
    /// Local name.
    pub name: String,
    /// `@name@domain`.
    pub address: String,
    /// Display name.
    pub display_name: Option<String>,
    /// One-line description.
    pub summary: Option<String>,
    /// What answers for it.
    pub backend: Arc<dyn AgentBackend>,
    /// Who may reach it.
    pub access: crate::access::Access,
    /// How much it takes: rate limits and backend concurrency.
    pub limits: crate::limits::AgentLimits,
    /// What happens to it that it is told of (`notify`).
    pub notify: Vec<crate::config::Notify>,
}

impl Agent {
    /// Whether it asked to be told of `event`.
    #[must_use]
    pub fn notified_of(&self, event: crate::config::Notify) -> bool {
        self.notify.contains(&event)
    }
}

/// The agents of this instance, by name.
#[derive(Debug, Default)]
pub struct AgentRegistry {
    domain: String,
    by_name: HashMap<String, Arc<Agent>>,
    /// `[limits]`, for agents added without a configuration of their own.
    defaults: crate::config::LimitsConfig,
}

impl AgentRegistry {
    /// Builds every configured agent (A2A client backends read their earlier responses from
    /// `db`; chat-model backends count their tokens in `metrics`).
    #[must_use]
    pub fn from_config(
        agents: &[AgentConfig],
        domain: &str,
        http: &HttpClient,
        clock: &SharedClock,
        db: &Db,
        defaults: &crate::config::LimitsConfig,
        metrics: &Arc<crate::metrics::Metrics>,
    ) -> Self {
        let mut reg = Self {
            domain: domain.to_owned(),
            by_name: HashMap::new(),
            defaults: defaults.clone(),
        };
        for a in agents {
            let backend: Arc<dyn AgentBackend> = match &a.backend {
                BackendConfig::Echo => Arc::new(EchoAgent),
                BackendConfig::Conformance => Arc::new(ConformanceAgent),
                BackendConfig::A2a {
                    card,
                    token,
                    timeout_ms,
                    streaming,
                    require_signed_card,
                    card_keys,
                } => Arc::new(A2aAgent::new(
                    a.name.clone(),
                    db.clone(),
                    A2aRemote {
                        card_url: card.clone(),
                        token: token.clone(),
                        timeout: std::time::Duration::from_millis(*timeout_ms),
                        streaming: *streaming,
                        require_signed_card: *require_signed_card,
                        card_keys: card_keys.clone(),
                    },
                    http.clone(),
                )),
                BackendConfig::Webhook {
                    url,
                    secret,
                    timeout_ms,
                    assembled,
                } => Arc::new(
                    WebhookAgent::new(
                        url.clone(),
                        secret.clone(),
                        std::time::Duration::from_millis(*timeout_ms),
                        http.clone(),
                        clock.clone(),
                    )
                    .assembled(*assembled),
                ),
                BackendConfig::Openai {
                    base_url,
                    model,
                    system_prompt,
                    stream,
                    max_tokens,
                    temperature,
                    timeout_ms,
                    api_key,
                    api_key_env: _,
                } => Arc::new(
                    OpenAiAgent::new(
                        OpenAiSettings {
                            base_url: base_url.clone(),
                            model: model.clone(),
                            api_key: api_key.clone(),
                            system_prompt: system_prompt.clone(),
                            stream: *stream,
                            max_tokens: *max_tokens,
                            temperature: *temperature,
                            timeout: std::time::Duration::from_millis(*timeout_ms),
                        },
                        http.clone(),
                        clock.clone(),
                    )
                    .metered(&a.name, Arc::clone(metrics), db.clone()),
                ),
            };
            reg.insert(&a.name, a.display_name.clone(), a.summary.clone(), backend);
            if let Some(agent) = reg.by_name.get_mut(&a.name.to_lowercase())
                && let Some(agent) = Arc::get_mut(agent)
            {
                agent.access = crate::access::Access::new(a.access.as_ref());
                let own = a
                    .access
                    .as_ref()
                    .map(|x| x.limits.clone())
                    .unwrap_or_default();
                agent.limits = crate::limits::AgentLimits::new(&own.over(defaults));
                agent.notify.clone_from(&a.notify);
            }
        }
        reg
    }

    /// Adds an agent, or replaces its backend (keeping its access rules, limits and
    /// `notify`).
    pub fn insert(
        &mut self,
        name: &str,
        display_name: Option<String>,
        summary: Option<String>,
        backend: Arc<dyn AgentBackend>,
    ) {
        let (access, limits, notify) = self
            .by_name
            .get(&name.to_lowercase())
            .map(|a| (a.access.clone(), a.limits.clone(), a.notify.clone()))
            .unwrap_or_else(|| {
                (
                    crate::access::Access::default(),
                    crate::limits::AgentLimits::new(&self.defaults),
                    Vec::new(),
                )
            });
        let agent = Agent {
            name: name.to_owned(),
            address: format!("@{name}@{}", self.domain),
            display_name,
            summary,
            backend,
            access,
            limits,
            notify,
        };
        self.by_name.insert(name.to_lowercase(), Arc::new(agent));
    }

    /// The agent called `name` (case-insensitive).
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<Agent>> {
        self.by_name.get(&name.to_lowercase()).cloned()
    }

    /// The local agent an `@name@domain` address names, if it is ours.
    #[must_use]
    pub fn resolve(&self, address: &str) -> Option<Arc<Agent>> {
        let a = Address::parse_handle(address)?;
        if !a.domain.eq_ignore_ascii_case(&self.domain) {
            return None;
        }
        self.get(a.local)
    }

    /// Every agent, sorted by name.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Agent>> {
        let mut v: Vec<_> = self.by_name.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The public domain agents live on.
    #[must_use]
    pub fn domain(&self) -> &str {
        &self.domain
    }
}

/// The idempotency key of a message's agent call: the stable id of its dispatch job
/// (`dispatch:{message id}`), the same on every attempt, so an agent can recognise a call
/// repeated after a crash or a retry.
#[must_use]
pub fn idempotency_key(msg: &NormalizedMessage) -> String {
    format!("dispatch:{}", msg.id)
}

/// Completes a response object an agent returned: fills `id`, `in_reply_to`, `thread_id` and
/// `agent` from `msg` when absent, then parses and validates it.
///
/// # Errors
/// A permanent failure: the agent's answer is malformed.
pub fn complete_response(
    mut value: Value,
    msg: &NormalizedMessage,
) -> Result<NormalizedResponse, OutboundError> {
    let Value::Object(obj) = &mut value else {
        return Err(OutboundError::permanent(
            "agent answer is not a JSON object",
        ));
    };
    let defaults = [
        ("id", uuid::Uuid::now_v7().to_string()),
        ("in_reply_to", msg.id.clone()),
        ("thread_id", msg.thread_id.clone()),
        ("agent", msg.recipient.clone()),
    ];
    for (k, v) in defaults {
        if obj.get(k).is_none_or(Value::is_null) {
            obj.insert(k.to_owned(), Value::String(v));
        }
    }
    obj.entry("parts").or_insert_with(|| Value::Array(vec![]));
    let resp: NormalizedResponse = serde_json::from_value(value).map_err(|e| {
        OutboundError::permanent(format!("agent answer is not a NormalizedResponse: {e}"))
    })?;
    if resp.in_reply_to != msg.id || resp.agent != msg.recipient {
        return Err(OutboundError::permanent(
            "agent answer names another message or agent",
        ));
    }
    resp.validate()
        .map_err(|e| OutboundError::permanent(format!("agent answer is invalid: {e}")))?;
    Ok(resp)
}
