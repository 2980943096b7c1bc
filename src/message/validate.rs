//! Validation of the contract beyond what serde checks: non-empty parts, well-formed addresses.

use super::address::Address;
use super::types::{NormalizedMessage, NormalizedResponse, Part, ResponseState};

/// Why a message or response is malformed. The text is safe to show to the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

fn fail<T>(msg: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError(msg.into()))
}

fn check_parts(parts: &[Part]) -> Result<(), ValidationError> {
    for (i, part) in parts.iter().enumerate() {
        match part {
            Part::ToolCall(t) if t.id.is_empty() => {
                return fail(format!("parts[{i}]: tool_call id is empty"));
            }
            Part::File(f) if f.mime.is_empty() => {
                return fail(format!("parts[{i}]: file mime is empty"));
            }
            Part::Artifact(a) if a.bytes_ref.is_none() && a.data.is_none() => {
                return fail(format!(
                    "parts[{i}]: artifact has neither bytes_ref nor data"
                ));
            }
            Part::Link(l) if url::Url::parse(&l.url).is_err() => {
                return fail(format!("parts[{i}]: link url is not a URL"));
            }
            Part::Event(e) if e.event.is_empty() => {
                return fail(format!("parts[{i}]: event is empty"));
            }
            Part::Other(map)
                if map
                    .get("kind")
                    .and_then(|k| k.as_str())
                    .is_none_or(str::is_empty) =>
            {
                return fail(format!("parts[{i}]: kind is empty"));
            }
            _ => {}
        }
    }
    Ok(())
}

impl NormalizedMessage {
    /// Checks what serde cannot: ids, addresses, non-empty parts.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.id.is_empty() {
            return fail("id is empty");
        }
        if self.thread_id.is_empty() {
            return fail("thread_id is empty");
        }
        if Address::parse_handle(&self.recipient).is_none() {
            return fail(format!(
                "recipient {:?} is not an @name@domain address",
                self.recipient
            ));
        }
        if Address::parse(&self.sender.address).is_none() {
            return fail(format!(
                "sender.address {:?} is neither @user@domain nor user@domain",
                self.sender.address
            ));
        }
        for (i, ev) in self.sender.identities.iter().flatten().enumerate() {
            if ev.subject.is_empty() || ev.issuer.is_empty() {
                return fail(format!(
                    "sender.identities[{i}]: subject and issuer are required"
                ));
            }
        }
        if self.parts.is_empty() {
            return fail("parts is empty");
        }
        check_parts(&self.parts)
    }
}

impl NormalizedResponse {
    /// Checks addresses and that a completed response has content.
    ///
    /// # Errors
    /// The first problem found.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.id.is_empty() || self.in_reply_to.is_empty() || self.thread_id.is_empty() {
            return fail("id, in_reply_to and thread_id are required");
        }
        if Address::parse_handle(&self.agent).is_none() {
            return fail(format!(
                "agent {:?} is not an @name@domain address",
                self.agent
            ));
        }
        if self.parts.is_empty() && self.effective_state() == ResponseState::Completed {
            return fail("a completed response needs at least one part");
        }
        for m in self.mentions.iter().flatten() {
            if Address::parse(m).is_none() {
                return fail(format!("mention {m:?} is not an address"));
            }
        }
        check_parts(&self.parts)
    }
}
