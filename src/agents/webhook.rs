//! The webhook agent (spec §9): POSTs the NormalizedMessage, HMAC-signed, and reads a JSON
//! NormalizedResponse, an SSE stream of ResponseEvents (reported as they arrive when the caller
//! wants progress), or 204 for no reply.

use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use super::assembly::assemble;
use super::{AgentBackend, Progress, complete_response, idempotency_key};
use crate::clock::SharedClock;
use crate::config::Secret;
use crate::error::OutboundError;
use crate::message::{
    Extra, NormalizedMessage, NormalizedResponse, Part, ResponseEvent, TextMime, TextPart,
};
use crate::net::sse;
use crate::net::{HttpClient, signed_headers};

/// The header carrying the dispatch's stable id.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// An agent behind an HTTP endpoint.
#[derive(Debug)]
pub struct WebhookAgent {
    url: String,
    secret: Secret,
    timeout: Duration,
    http: HttpClient,
    clock: SharedClock,
    assembled: bool,
}

impl WebhookAgent {
    /// A webhook agent calling `url`.
    #[must_use]
    pub fn new(
        url: String,
        secret: Secret,
        timeout: Duration,
        http: HttpClient,
        clock: SharedClock,
    ) -> Self {
        Self {
            url,
            secret,
            timeout,
            http,
            clock,
            assembled: false,
        }
    }

    /// The same agent, also sending the assembled prompt (`messages`) beside the message.
    #[must_use]
    pub fn assembled(mut self, on: bool) -> Self {
        self.assembled = on;
        self
    }
}

#[async_trait::async_trait]
impl AgentBackend for WebhookAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.call(msg, None).await
    }

    fn streams(&self) -> bool {
        true
    }

    async fn respond_streaming(
        &self,
        msg: &NormalizedMessage,
        progress: Progress<'_>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.call(msg, Some(progress)).await
    }
}

impl WebhookAgent {
    async fn call(
        &self,
        msg: &NormalizedMessage,
        progress: Option<Progress<'_>>,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        let body = if self.assembled {
            // The prompt switchboard would give a chat model, beside the message itself.
            let mut value =
                serde_json::to_value(msg).map_err(|e| OutboundError::permanent(e.to_string()))?;
            let messages = serde_json::to_value(assemble(msg, None))
                .map_err(|e| OutboundError::permanent(e.to_string()))?;
            if let Value::Object(obj) = &mut value {
                obj.insert("messages".to_owned(), messages);
            }
            serde_json::to_vec(&value)
        } else {
            serde_json::to_vec(msg)
        }
        .map_err(|e| OutboundError::permanent(e.to_string()))?;
        let mut headers = signed_headers(&self.secret, self.clock.now_ms(), &body);
        // The same on every attempt of this dispatch, so the agent can recognise a repeat.
        let key = HeaderValue::from_str(&idempotency_key(msg))
            .map_err(|_| OutboundError::permanent("message id is not a valid header value"))?;
        headers.insert(IDEMPOTENCY_KEY, key);
        crate::telemetry::inject(&mut headers);
        // Events of a 200 event stream are reported as they arrive; malformed ones are skipped
        // here and refused when the whole stream is read below.
        let mut on_event = |event: &sse::SseEvent| {
            let Some(report) = progress else { return };
            if let Ok(ev @ (ResponseEvent::Delta(_) | ResponseEvent::Part(_))) =
                serde_json::from_str::<ResponseEvent>(&event.data)
            {
                report(ev);
            }
        };
        let resp = self
            .http
            .post_streamed(&self.url, headers, body, self.timeout, &mut on_event)
            .await?;
        self.http.classify_status(&resp)?;
        if resp.status == reqwest::StatusCode::NO_CONTENT {
            return Ok(None);
        }
        if resp.status != reqwest::StatusCode::OK {
            return Err(OutboundError::permanent(format!(
                "unexpected HTTP {}",
                resp.status.as_u16()
            )));
        }
        match resp.media_type().as_str() {
            "application/json" => {
                let value: Value = serde_json::from_slice(&resp.body).map_err(|e| {
                    OutboundError::permanent(format!("agent answer is not JSON: {e}"))
                })?;
                complete_response(value, msg).map(Some)
            }
            "text/event-stream" => parse_event_stream(&resp.body, msg),
            other => Err(OutboundError::permanent(format!(
                "agent answered with unsupported type {other:?}"
            ))),
        }
    }
}

/// Folds an SSE stream of ResponseEvents into the final response.
///
/// `delta` text is appended to the current text part, `part` events add parts (a tool call with
/// an id already seen replaces the earlier one), and `done` gives the response, whose parts fall
/// back to the accumulated ones when it has none. A stream that ends without `done` but with
/// content is a completed response; an empty one is a temporary failure. An event the stream
/// did not end with a blank line is discarded, as the event-stream format says.
///
/// # Errors
/// Malformed events are permanent failures.
pub fn parse_event_stream(
    body: &[u8],
    msg: &NormalizedMessage,
) -> Result<Option<NormalizedResponse>, OutboundError> {
    if std::str::from_utf8(body).is_err() {
        return Err(OutboundError::permanent("event stream is not UTF-8"));
    }
    let mut parts: Vec<Part> = Vec::new();
    let mut done: Option<Value> = None;
    let mut apply = |data: &str, parts: &mut Vec<Part>| -> Result<(), OutboundError> {
        if data.is_empty() {
            return Ok(());
        }
        let ev: ResponseEvent = serde_json::from_str(data)
            .map_err(|e| OutboundError::permanent(format!("malformed event: {e}")))?;
        match ev {
            ResponseEvent::Delta(d) => match parts.last_mut() {
                Some(Part::Text(t)) => t.content.push_str(&d.text),
                _ => parts.push(Part::Text(TextPart {
                    mime: TextMime::Plain,
                    content: d.text,
                    extra: Extra::new(),
                })),
            },
            ResponseEvent::Part(p) => {
                if let Part::ToolCall(call) = &p.part
                    && let Some(slot) = parts
                        .iter_mut()
                        .find(|x| matches!(x, Part::ToolCall(c) if c.id == call.id))
                {
                    *slot = p.part;
                    return Ok(());
                }
                parts.push(p.part);
            }
            ResponseEvent::Done(d) => done = Some(d.response),
            ResponseEvent::Other(_) => {}
        }
        Ok(())
    };
    for event in sse::parse(body) {
        apply(&event.data, &mut parts)?;
    }
    match done {
        Some(mut value) => {
            let empty = value
                .get("parts")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
            if empty && !parts.is_empty() {
                value["parts"] = serde_json::to_value(&parts)
                    .map_err(|e| OutboundError::permanent(e.to_string()))?;
            }
            complete_response(value, msg).map(Some)
        }
        None if !parts.is_empty() => {
            let value = serde_json::json!({ "parts": parts });
            complete_response(value, msg).map(Some)
        }
        None => Err(OutboundError::temporary(
            "event stream ended without content",
        )),
    }
}
