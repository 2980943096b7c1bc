//! The OpenAI-compatible agent: any server with the chat-completions API (OpenAI, Ollama, vLLM,
//! llama.cpp's server, LiteLLM) answers for the agent.
//!
//! Each turn is assembled into a prompt ([`super::assembly`]) and sent to
//! `{base_url}/chat/completions`, through the one outbound client (SSRF guard, timeouts, body
//! cap). A streamed answer (`stream = true`) is reported as `delta` events while it arrives and
//! its tool calls as `tool_call` parts (never executed); a whole answer gives the same parts.
//! 408, 429 and 5xx are retried by the dispatch job with backoff (a `Retry-After` honoured);
//! other refusals end the job with the status and the provider's error class, never its text.

mod mapping;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use self::mapping::{StreamFold, completion_parts, failure};
use self::wire::Usage;
use super::assembly::assemble;
use super::{AgentBackend, Progress};
use crate::clock::SharedClock;
use crate::config::Secret;
use crate::error::OutboundError;
use crate::message::{NormalizedMessage, NormalizedResponse};
use crate::metrics::Metrics;
use crate::net::HttpClient;
use crate::net::sse::SseEvent;
use crate::store::Db;

/// How an OpenAI-compatible agent is called (`[[agents]] backend = { kind = "openai", … }`).
#[derive(Debug, Clone)]
pub struct OpenAiSettings {
    /// The API's base URL; `/chat/completions` is appended.
    pub base_url: String,
    /// The model.
    pub model: String,
    /// The bearer token, when the server wants one.
    pub api_key: Option<Secret>,
    /// The system prompt opening every conversation.
    pub system_prompt: Option<String>,
    /// Ask for a streamed answer.
    pub stream: bool,
    /// `max_tokens`, when set.
    pub max_tokens: Option<u32>,
    /// `temperature`, when set.
    pub temperature: Option<f64>,
    /// Per-call timeout.
    pub timeout: Duration,
}

/// An agent answered by a chat model.
#[derive(Debug)]
pub struct OpenAiAgent {
    url: String,
    settings: OpenAiSettings,
    http: HttpClient,
    clock: SharedClock,
    /// Where its tokens are counted.
    meter: Option<Meter>,
}

/// Where an agent's tokens are counted: the metrics, and the database for the console.
#[derive(Debug)]
struct Meter {
    agent: String,
    metrics: Arc<Metrics>,
    db: Db,
}

impl OpenAiAgent {
    /// An agent calling the server `settings` describe.
    #[must_use]
    pub fn new(settings: OpenAiSettings, http: HttpClient, clock: SharedClock) -> Self {
        let url = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        Self {
            url,
            settings,
            http,
            clock,
            meter: None,
        }
    }

    /// Counts the tokens of `agent`'s answers in `metrics`
    /// (`switchboard_llm_tokens_total{agent,model,kind}`) and in `db` (the console's totals).
    #[must_use]
    pub fn metered(mut self, agent: &str, metrics: Arc<Metrics>, db: Db) -> Self {
        self.meter = Some(Meter {
            agent: agent.to_owned(),
            metrics,
            db,
        });
        self
    }

    /// Records what an answer took: on the call's span, in the metrics and in the database (a
    /// failure to store it is logged; the answer stands).
    async fn used(&self, usage: Option<Usage>) {
        let span = tracing::Span::current();
        span.record("gen_ai.request.model", self.settings.model.as_str());
        let Some(u) = usage else { return };
        span.record("gen_ai.usage.input_tokens", u.prompt_tokens);
        span.record("gen_ai.usage.output_tokens", u.completion_tokens);
        let Some(m) = &self.meter else { return };
        let model = self.settings.model.as_str();
        m.metrics
            .llm_tokens(&m.agent, model, u.prompt_tokens, u.completion_tokens);
        let row = crate::store::usage::Usage {
            agent: &m.agent,
            model,
            at_ms: self.clock.now_ms(),
            prompt_tokens: i64::try_from(u.prompt_tokens).unwrap_or(i64::MAX),
            completion_tokens: i64::try_from(u.completion_tokens).unwrap_or(i64::MAX),
        };
        if let Err(e) = crate::store::usage::record(&m.db, &row).await {
            tracing::warn!(agent = %m.agent, error = %e, "token usage not stored");
        }
    }

    /// The request headers: JSON, and the key as a bearer token marked sensitive (so no
    /// `Debug` of the request shows it).
    fn headers(&self) -> Result<HeaderMap, OutboundError> {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &self.settings.api_key {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                .map_err(|_| OutboundError::permanent("the API key is not a valid header value"))?;
            v.set_sensitive(true);
            h.insert(AUTHORIZATION, v);
        }
        crate::telemetry::inject(&mut h);
        Ok(h)
    }

    async fn call(
        &self,
        msg: &NormalizedMessage,
        progress: Option<Progress<'_>>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        let s = &self.settings;
        let messages = assemble(msg, s.system_prompt.as_deref());
        let body = serde_json::to_vec(&wire::ChatRequest {
            model: &s.model,
            messages: &messages,
            stream: s.stream,
            max_tokens: s.max_tokens,
            temperature: s.temperature,
        })
        .map_err(|e| OutboundError::permanent(e.to_string()))?;
        // A streamed answer is folded as it arrives, its events reported when asked for.
        let mut fold = StreamFold::default();
        let mut on_event = |event: &SseEvent| {
            for ev in fold.event(&event.data) {
                if let Some(report) = progress {
                    report(ev);
                }
            }
        };
        let resp = self
            .http
            .post_streamed(&self.url, self.headers()?, body, s.timeout, &mut on_event)
            .await?;
        if resp.status != reqwest::StatusCode::OK {
            return Err(failure(&resp, self.clock.now_ms()));
        }
        let parts = match resp.media_type().as_str() {
            "text/event-stream" => {
                let ended = fold.is_done();
                self.used(fold.usage()).await;
                let parts = fold.finish()?;
                if !ended && parts.is_empty() {
                    return Err(OutboundError::temporary(
                        "answer stream ended without content",
                    ));
                }
                parts
            }
            "application/json" => {
                let (parts, usage) = completion_parts(&resp.body)?;
                self.used(usage).await;
                parts
            }
            other => {
                return Err(OutboundError::permanent(format!(
                    "server answered with unsupported type {other:?}"
                )));
            }
        };
        if parts.is_empty() {
            tracing::debug!(message = %msg.id, "the model answered nothing");
            return Ok(None);
        }
        Ok(Some(NormalizedResponse::reply_to(msg, parts)))
    }
}

#[async_trait::async_trait]
impl AgentBackend for OpenAiAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.call(msg, None).await
    }

    fn streams(&self) -> bool {
        self.settings.stream
    }

    async fn respond_streaming(
        &self,
        msg: &NormalizedMessage,
        progress: Progress<'_>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.call(msg, Some(progress)).await
    }
}
