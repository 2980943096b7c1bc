//! The conformance backend: behaves by the A2A `messageId` prefix the A2A conformance kit
//! (`a2aproject/a2a-tck`, `scenarios/*.feature`) uses, so anyone can rerun the kit against
//! switchboard (`backend = { kind = "conformance" }`). Messages from other transports, or
//! without a known prefix, complete with "Hello from TCK".
//!
//! It steers the A2A rendering through `metadata.a2a` of its responses: `status_message`
//! (the parts become the status message, not an artifact), `reply = "message"` (a direct
//! Message instead of a task) and `chunked` (each part is one artifact chunk).

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::AgentBackend;
use crate::error::OutboundError;
use crate::message::{
    ArtifactPart, BytesRef, Extra, FilePart, InlineBytes, NormalizedMessage, NormalizedResponse,
    Part, ResponseState, UrlBytes,
};

/// How long the long-running scenario works (twice the kit's reference stream timeout).
const LONG_RUN: Duration = Duration::from_secs(4);

/// Answers by messageId prefix.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConformanceAgent;

fn file(name: &str, mime: &str, bytes_ref: BytesRef) -> Part {
    Part::File(FilePart {
        name: Some(name.into()),
        mime: mime.into(),
        size: None,
        bytes_ref,
        extra: Extra::new(),
    })
}

fn inline_file() -> Part {
    file(
        "output.txt",
        "text/plain",
        BytesRef::Inline(InlineBytes {
            // "Generated file content"
            data_base64: "R2VuZXJhdGVkIGZpbGUgY29udGVudA==".into(),
        }),
    )
}

#[async_trait::async_trait]
impl AgentBackend for ConformanceAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        let id = msg
            .raw
            .pointer("/message/messageId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut hints = Map::new();
        let mut state = None;
        let parts = if id.starts_with("tck-artifact-file-url") {
            vec![file(
                "output.txt",
                "text/plain",
                BytesRef::Url(UrlBytes {
                    url: "https://example.com/output.txt".into(),
                    expires_at: None,
                }),
            )]
        } else if id.starts_with("tck-artifact-file") || id.starts_with("tck-stream-artifact-file")
        {
            vec![inline_file()]
        } else if id.starts_with("tck-artifact-text") {
            vec![Part::text("Generated text content")]
        } else if id.starts_with("tck-artifact-data") {
            vec![Part::Artifact(ArtifactPart {
                artifact_type: None,
                name: None,
                mime: "application/json".into(),
                bytes_ref: None,
                data: Some(json!({"key": "value", "count": 42})),
                extra: Extra::new(),
            })]
        } else if id.starts_with("tck-message-response") {
            hints.insert("reply".into(), json!("message"));
            vec![Part::text("Direct message response")]
        } else if id.starts_with("tck-input-required") {
            state = Some(ResponseState::InputRequired);
            vec![Part::text("Please provide more input")]
        } else if id.starts_with("tck-reject-task") {
            state = Some(ResponseState::Rejected);
            vec![Part::text("rejected")]
        } else if id.starts_with("tck-stream-001") {
            vec![Part::text("Stream hello from TCK")]
        } else if id.starts_with("tck-stream-002") {
            hints.insert("status_message".into(), json!(true));
            vec![Part::text("Stream complete")]
        } else if id.starts_with("tck-stream-003") {
            vec![Part::text("Stream task lifecycle")]
        } else if id.starts_with("tck-stream-ordering-001") {
            vec![Part::text("Ordered output")]
        } else if id.starts_with("tck-stream-artifact-text") {
            vec![Part::text("Streamed text content")]
        } else if id.starts_with("tck-stream-artifact-chunked") {
            hints.insert("chunked".into(), json!(true));
            vec![Part::text("chunk-1 "), Part::text("chunk-2")]
        } else if id.starts_with("test-resubscribe-message-id") {
            tokio::time::sleep(LONG_RUN).await;
            hints.insert("status_message".into(), json!(true));
            vec![Part::text("Done")]
        } else {
            hints.insert("status_message".into(), json!(true));
            vec![Part::text("Hello from TCK")]
        };
        let mut metadata = Map::new();
        if !hints.is_empty() {
            metadata.insert("a2a".into(), Value::Object(hints));
        }
        Ok(Some(NormalizedResponse {
            state,
            metadata: (!metadata.is_empty()).then_some(metadata),
            ..NormalizedResponse::reply_to(msg, parts)
        }))
    }
}
