//! Pure mapping between chat completions and the contract: an answer's parts, the fold of a
//! streamed answer into ResponseEvents and parts, and the classification of a refusal.

use std::collections::BTreeMap;

use serde_json::Value;

use super::wire::{ChatChunk, ChatCompletion, ErrorBody, FunctionCall, ToolCall, Usage};
use crate::error::OutboundError;
use crate::message::{
    DeltaEvent, Extra, Part, PartEvent, ResponseEvent, TextMime, TextPart, ToolCallPart,
};
use crate::net::HttpResponse;

/// The data of the event that ends a stream.
const DONE: &str = "[DONE]";

/// Whether `s` is a plain identifier safe to record (`invalid_request_error`, `429`): a
/// provider's error class may be kept, its prose never.
fn is_class(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn class_of(v: Option<&Value>) -> Option<String> {
    let s = match v? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    is_class(&s).then_some(s)
}

/// The error class of a refusal body (`{"error": {"type": …, "code": …}}`): its `type`, else
/// its `code`, when either is a plain identifier. The error's message is never read.
#[must_use]
pub fn error_class(body: &[u8]) -> Option<String> {
    let e = serde_json::from_slice::<ErrorBody>(body).ok()?.error;
    class_of(e.kind.as_ref()).or_else(|| class_of(e.code.as_ref()))
}

/// Adds the provider's error class (or nothing) to a failure's reason.
fn with_class(mut e: OutboundError, class: Option<&str>) -> OutboundError {
    if let Some(class) = class {
        match &mut e {
            OutboundError::Temporary { reason, .. } | OutboundError::Permanent { reason, .. } => {
                reason.push(' ');
                reason.push_str(class);
            }
        }
    }
    e
}

/// The failure an answer other than 200 is: 408, 429 and 5xx temporary (honouring
/// `Retry-After`), anything else permanent; the reason is the status and the provider's error
/// class, never its text.
#[must_use]
pub fn failure(resp: &HttpResponse, now_ms: i64) -> OutboundError {
    let class = error_class(&resp.body);
    let e = match crate::net::classify_status(resp, now_ms) {
        Err(e) => e,
        Ok(()) => OutboundError::permanent(format!("unexpected HTTP {}", resp.status.as_u16())),
    };
    with_class(e, class.as_deref())
}

/// A text part of model output (markdown, which the transports render).
fn text_part(text: String) -> Part {
    Part::Text(TextPart {
        mime: TextMime::Markdown,
        content: text,
        extra: Extra::new(),
    })
}

/// A tool call the model asked for, as a `tool_call` part (not executed: no result). Arguments
/// that are not JSON are kept as a string.
fn tool_call_part(index: usize, id: Option<String>, name: String, arguments: &str) -> Part {
    let args = if arguments.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
    };
    Part::ToolCall(ToolCallPart {
        id: id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| format!("call_{index}")),
        name,
        args,
        result: None,
        error: None,
        extra: Extra::new(),
    })
}

/// The parts of a whole answer (its text, then its tool calls) and the tokens it took, when
/// the server says.
///
/// # Errors
/// A permanent failure when the body is not a chat completion.
pub fn completion_parts(body: &[u8]) -> Result<(Vec<Part>, Option<Usage>), OutboundError> {
    let c: ChatCompletion = serde_json::from_slice(body)
        .map_err(|e| OutboundError::permanent(format!("answer is not a chat completion: {e}")))?;
    let usage = c.usage;
    let Some(choice) = c.choices.into_iter().next() else {
        return Err(OutboundError::permanent("chat completion without choices"));
    };
    let mut parts = Vec::new();
    if let Some(text) = choice.message.content.filter(|t| !t.is_empty()) {
        parts.push(text_part(text));
    }
    for (i, ToolCall { id, function }) in
        choice.message.tool_calls.into_iter().flatten().enumerate()
    {
        let FunctionCall { name, arguments } = function;
        parts.push(tool_call_part(i, id, name, &arguments));
    }
    Ok((parts, usage))
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct CallSoFar {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Folds a streamed answer, one `data:` event at a time, into the ResponseEvents it stands for
/// (text as `delta`s while it arrives; each tool call as one `part` once complete) and, at the
/// end, the answer's parts.
#[derive(Debug, Default)]
pub struct StreamFold {
    text: String,
    calls: BTreeMap<usize, CallSoFar>,
    done: bool,
    error: Option<OutboundError>,
    usage: Option<Usage>,
}

impl StreamFold {
    /// Reads the data of one event; returns the ResponseEvents it completes.
    pub fn event(&mut self, data: &str) -> Vec<ResponseEvent> {
        if self.done || self.error.is_some() {
            return Vec::new();
        }
        let data = data.trim();
        if data == DONE {
            self.done = true;
            return self.calls_done();
        }
        let chunk: ChatChunk = match serde_json::from_str(data) {
            Ok(c) => c,
            Err(e) => {
                self.error = Some(OutboundError::permanent(format!(
                    "malformed stream event: {e}"
                )));
                return Vec::new();
            }
        };
        if let Some(err) = chunk.error {
            // The server failed after it began answering: another attempt may succeed.
            let class = class_of(err.kind.as_ref()).or_else(|| class_of(err.code.as_ref()));
            self.error = Some(with_class(
                OutboundError::temporary("error in the answer stream"),
                class.as_deref(),
            ));
            return Vec::new();
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let mut out = Vec::new();
        let Some(choice) = chunk.choices.into_iter().next() else {
            return out;
        };
        if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
            self.text.push_str(&text);
            out.push(ResponseEvent::Delta(DeltaEvent { text }));
        }
        for piece in choice.delta.tool_calls.into_iter().flatten() {
            let call = self.calls.entry(piece.index).or_default();
            if let Some(id) = piece.id.filter(|i| !i.is_empty()) {
                call.id = Some(id);
            }
            if let Some(f) = piece.function {
                if let Some(name) = f.name {
                    call.name.push_str(&name);
                }
                if let Some(args) = f.arguments {
                    call.arguments.push_str(&args);
                }
            }
        }
        out
    }

    /// The tool calls of the answer as `part` events.
    fn calls_done(&self) -> Vec<ResponseEvent> {
        self.call_parts()
            .into_iter()
            .map(|part| ResponseEvent::Part(PartEvent { part }))
            .collect()
    }

    fn call_parts(&self) -> Vec<Part> {
        self.calls
            .iter()
            .map(|(i, c)| tool_call_part(*i, c.id.clone(), c.name.clone(), &c.arguments))
            .collect()
    }

    /// Whether the stream ended with `[DONE]` (a stream that did not may still have content).
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The tokens the answer took, when the stream reported them.
    #[must_use]
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The answer's parts: its text, then its tool calls.
    ///
    /// # Errors
    /// The failure the stream reported or a malformed event (reported once the stream is read).
    pub fn finish(self) -> Result<Vec<Part>, OutboundError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut parts = Vec::new();
        let calls = self.call_parts();
        if !self.text.is_empty() {
            parts.push(text_part(self.text));
        }
        parts.extend(calls);
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: u16, body: &str) -> HttpResponse {
        HttpResponse {
            status: reqwest::StatusCode::from_u16(status).unwrap(),
            headers: reqwest::header::HeaderMap::new(),
            body: bytes::Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn a_refusal_keeps_the_class_never_the_text() {
        let e = failure(
            &refusal(
                400,
                r#"{"error":{"message":"secret detail sk-123","type":"invalid_request_error","code":"model_not_found"}}"#,
            ),
            0,
        );
        assert!(matches!(e, OutboundError::Permanent { .. }));
        assert_eq!(e.reason(), "HTTP 400 invalid_request_error");
        // A code when the type is missing; prose in either is dropped.
        let e = failure(&refusal(404, r#"{"error":{"code":404}}"#), 0);
        assert_eq!(e.reason(), "HTTP 404 404");
        let e = failure(
            &refusal(
                500,
                r#"{"error":{"type":"a sentence with spaces","message":"x"}}"#,
            ),
            0,
        );
        assert!(matches!(e, OutboundError::Temporary { .. }));
        assert_eq!(e.reason(), "HTTP 500");
        assert_eq!(failure(&refusal(401, "not json"), 0).reason(), "HTTP 401");
    }

    #[test]
    fn a_stream_folds_into_deltas_tool_calls_and_parts() {
        let mut f = StreamFold::default();
        let events = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"search","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"rust\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        ];
        let mut seen = Vec::new();
        for e in events {
            seen.extend(f.event(e));
        }
        let deltas: Vec<String> = seen
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        assert_eq!(
            deltas,
            [
                r#"{"type":"delta","text":"Hel"}"#,
                r#"{"type":"delta","text":"lo"}"#
            ]
        );
        let done = f.event("[DONE]");
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            serde_json::json!([{"type": "part", "part": {"kind": "tool_call", "id": "call_a",
                                 "name": "search", "args": {"q": "rust"}}}])
        );
        assert!(f.is_done());
        let parts = serde_json::to_value(f.finish().unwrap()).unwrap();
        assert_eq!(
            parts,
            serde_json::json!([
                {"kind": "text", "mime": "text/markdown", "content": "Hello"},
                {"kind": "tool_call", "id": "call_a", "name": "search", "args": {"q": "rust"}},
            ])
        );
    }

    #[test]
    fn an_error_in_the_stream_is_temporary_and_malformed_events_permanent() {
        let mut f = StreamFold::default();
        f.event(r#"{"choices":[{"delta":{"content":"x"}}]}"#);
        f.event(r#"{"error":{"message":"overloaded, details","type":"server_error"}}"#);
        let e = f.finish().unwrap_err();
        assert!(matches!(e, OutboundError::Temporary { .. }));
        assert_eq!(e.reason(), "error in the answer stream server_error");
        let mut f = StreamFold::default();
        f.event(r#"{"choices":[{"delta":{"content":"x"}}]}"#);
        f.event(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}"#);
        assert_eq!(
            f.usage().map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((5, 1)),
            "a stream's last event may say what it took"
        );
        let mut f = StreamFold::default();
        f.event("{not json");
        assert!(matches!(f.finish(), Err(OutboundError::Permanent { .. })));
    }

    #[test]
    fn a_whole_answer_gives_text_and_tool_calls() {
        let (parts, usage) = completion_parts(
            br#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"lookup","arguments":"{\"id\":7}"}},
                {"type":"function","function":{"name":"raw","arguments":"not json"}}]}}],
              "usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}"#,
        )
        .unwrap();
        assert_eq!(
            usage,
            Some(Usage {
                prompt_tokens: 31,
                completion_tokens: 9
            }),
            "the usage is read"
        );
        assert_eq!(
            serde_json::to_value(parts).unwrap(),
            serde_json::json!([
                {"kind": "tool_call", "id": "c1", "name": "lookup", "args": {"id": 7}},
                {"kind": "tool_call", "id": "call_1", "name": "raw", "args": "not json"},
            ])
        );
        assert!(completion_parts(br#"{"choices":[]}"#).is_err());
        assert!(completion_parts(b"[]").is_err());
    }
}
