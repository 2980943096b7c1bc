//! The built-in echo agent: answers with the text it received, so a new install works at once.

use crate::error::OutboundError;
use crate::message::{Extra, NormalizedMessage, NormalizedResponse, Part, TextMime, TextPart};

use super::AgentBackend;

/// Answers every message with its own text; events (which expect no reply) with nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct EchoAgent;

#[async_trait::async_trait]
impl AgentBackend for EchoAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        if msg.parts.iter().any(|p| matches!(p, Part::Event(_))) {
            return Ok(None);
        }
        let texts: Vec<&TextPart> = msg
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t),
                _ => None,
            })
            .collect();
        let part = match texts.as_slice() {
            [] => Part::text(format!(
                "(received {} part(s) without text)",
                msg.parts.len()
            )),
            [one] => Part::Text((*one).clone()),
            many => Part::Text(TextPart {
                mime: TextMime::Plain,
                content: many
                    .iter()
                    .map(|t| t.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n\n"),
                extra: Extra::new(),
            }),
        };
        Ok(Some(NormalizedResponse::reply_to(msg, vec![part])))
    }
}
