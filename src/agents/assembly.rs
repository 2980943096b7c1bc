//! The assembly layer: a NormalizedMessage and its history as the prompt a chat model reads (an
//! OpenAI-style `messages` array).
//!
//! Stored content stays exactly what people wrote; everything a model needs beyond it is
//! composed here, at the last moment (`docs/agents.md`, "Assembly"):
//!
//! - user turns carry an attribution prefix, `[Name]: text`, or `[Name (token)]: text` when the
//!   reply path relays mentions by a token the agent must copy to reach the sender again (the
//!   `@user@host` handle on ActivityPub, the mail address on email); already-prefixed text is
//!   left alone, so assembling twice changes nothing;
//! - order: the system prompt, the history as the history policy trimmed it (its head first and
//!   unchanged, so a prompt cache over it holds), then the system blocks of the current turn (its
//!   thread context, the agent-chain cue) right above the current turn;
//! - the agent's own turns are `assistant` turns; everyone else's, other agents included, are
//!   attributed `user` turns;
//! - consecutive turns of the same role are merged, so roles alternate.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{
    AgentChain, BytesRef, MentionRelay, NormalizedMessage, Part, Role, Sender, TextMime,
};

/// The extension field of a NormalizedMessage holding a summary of earlier messages the
/// transport saw but switchboard did not store (a thread's parent posts, an email's quoted
/// chain), ready for a model to read; assembled as a system block above its turn.
pub const THREAD_CONTEXT: &str = "thread_context";

/// The role of one assembled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    /// Instructions and context from switchboard and the operator.
    System,
    /// Anyone but the agent.
    User,
    /// The agent itself.
    Assistant,
}

/// One message of an assembled prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: ChatRole,
    /// What is said.
    pub content: String,
}

/// The prompt for `msg`: `system_prompt` (when given and not blank), the history, the current
/// turn's system blocks and the current turn (its content warning, if any, on a line before its
/// text), with roles alternating.
#[must_use]
pub fn assemble(msg: &NormalizedMessage, system_prompt: Option<&str>) -> Vec<ChatMessage> {
    let relay = &msg.recipient_capabilities.mention_relay;
    let mut out: Vec<ChatMessage> = Vec::new();
    if let Some(prompt) = system_prompt.filter(|p| !p.trim().is_empty()) {
        push(&mut out, ChatRole::System, prompt.to_owned());
    }
    for turn in msg.history.iter().flatten() {
        match turn.role {
            Role::Assistant => push(&mut out, ChatRole::Assistant, render_parts(&turn.parts)),
            Role::User => push(
                &mut out,
                ChatRole::User,
                attribute(&turn.sender, relay, &render_parts(&turn.parts)),
            ),
        }
    }
    if let Some(context) = msg.extra.get(THREAD_CONTEXT).and_then(Value::as_str) {
        push(&mut out, ChatRole::System, context.trim().to_owned());
    }
    if let Some(chain) = &msg.recipient_capabilities.agent_chain {
        push(&mut out, ChatRole::System, chain_cue(chain));
    }
    let mut said = render_parts(&msg.parts);
    if let Some(cw) = msg
        .content_warning
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        said = format!("(content warning: {cw})\n{said}");
    }
    push(
        &mut out,
        ChatRole::User,
        attribute(&msg.sender, relay, &said),
    );
    out
}

/// Appends a turn, merged into the previous one when both have the same role; empty turns are
/// dropped.
fn push(out: &mut Vec<ChatMessage>, role: ChatRole, content: String) {
    if content.trim().is_empty() {
        return;
    }
    match out.last_mut() {
        Some(prev) if prev.role == role => {
            prev.content.push_str("\n\n");
            prev.content.push_str(&content);
        }
        _ => out.push(ChatMessage { role, content }),
    }
}

/// What tells an agent where it stands in an agent-to-agent chain.
#[must_use]
pub fn chain_cue(chain: &AgentChain) -> String {
    if chain.is_final {
        format!(
            "You are the FINAL hop ({} of {}): conclude; do not invite another agent.",
            chain.hop, chain.max_hops
        )
    } else {
        format!(
            "You are responding as hop {} of a chain capped at {} hops.",
            chain.hop, chain.max_hops
        )
    }
}

/// The attribution prefix of a turn by `sender`, e.g. `[Alice (@alice@mastodon.example)]: `.
#[must_use]
pub fn attribution_prefix(sender: &Sender, relay: &MentionRelay) -> String {
    let name = display_name(sender);
    match mention_token(sender, relay).filter(|t| *t != name) {
        Some(token) => format!("[{name} ({token})]: "),
        None => format!("[{name}]: "),
    }
}

/// `content` with `sender`'s attribution in front, unless it already starts with it.
fn attribute(sender: &Sender, relay: &MentionRelay, content: &str) -> String {
    if content.trim().is_empty() {
        return String::new();
    }
    let prefix = attribution_prefix(sender, relay);
    if content.starts_with(&prefix) {
        return content.to_owned();
    }
    format!("{prefix}{content}")
}

/// The name a model reads for `sender`: the display name, the profile's, else the address.
/// Brackets and line breaks are replaced, so a name cannot close the prefix or forge a turn.
fn display_name(sender: &Sender) -> String {
    let name = sender
        .display_name
        .as_deref()
        .or_else(|| sender.profile.as_ref()?.display_name.as_deref())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(&sender.address);
    name.chars()
        .map(|c| match c {
            '[' => '(',
            ']' => ')',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// The token an agent copies into its reply to mention `sender` on this reply path: the
/// `@user@host` handle where mentions are addressed (ActivityPub) or written inline, the mail
/// address where recipient fields wake people (email); none where the agent cannot mention
/// (A2A).
fn mention_token<'a>(sender: &'a Sender, relay: &MentionRelay) -> Option<&'a str> {
    let address = sender.address.as_str();
    let handle = address.starts_with('@');
    match relay {
        MentionRelay::Addressing(_) | MentionRelay::Inline(_) => handle.then_some(address),
        MentionRelay::RecipientField(_) => (!handle && address.contains('@')).then_some(address),
        MentionRelay::None(_) | MentionRelay::Other(_) => None,
    }
}

/// The parts of a turn as text a model reads: text as written (HTML as its text), links,
/// attachments and artifacts by reference, tool calls and policy parts described.
#[must_use]
pub fn render_parts(parts: &[Part]) -> String {
    let mut out: Vec<String> = Vec::new();
    for p in parts {
        let line = match p {
            Part::Text(t) if t.mime == TextMime::Html => {
                mail_parser::decoders::html::html_to_text(&t.content)
                    .trim()
                    .to_owned()
            }
            Part::Text(t) => t.content.clone(),
            Part::Link(l) => match &l.title {
                Some(title) => format!("{title}: {}", l.url),
                None => l.url.clone(),
            },
            Part::File(f) => {
                let name = f.name.as_deref().unwrap_or("file");
                match url_of(&f.bytes_ref) {
                    Some(url) => format!("[attachment {name} ({}): {url}]", f.mime),
                    None => format!("[attachment {name} ({})]", f.mime),
                }
            }
            Part::Artifact(a) => {
                let name = a.name.as_deref().unwrap_or("artifact");
                match &a.data {
                    Some(data) => format!("[artifact {name} ({})]: {data}", a.mime),
                    None => format!("[artifact {name} ({})]", a.mime),
                }
            }
            Part::ToolCall(c) => {
                let mut s = format!("[tool call {} {}: {}", c.id, c.name, c.args);
                if let Some(r) = &c.result {
                    s.push_str(&format!(" → {r}"));
                }
                if let Some(e) = &c.error {
                    s.push_str(&format!(" → error: {}", e.message));
                }
                s.push(']');
                s
            }
            Part::Policy(p) => format!("[{}: {}]", p.policy.kind.as_str(), p.policy.message),
            Part::Event(e) => {
                let of = e
                    .object
                    .as_deref()
                    .map(|o| format!(" of {o}"))
                    .unwrap_or_default();
                let outcome = e
                    .outcome
                    .as_deref()
                    .map(|o| format!(", {o}"))
                    .unwrap_or_default();
                format!(
                    "[event: {}{of}{outcome}; no reply is expected: answer {} unless you choose to write back]",
                    e.event,
                    crate::message::NO_REPLY
                )
            }
            Part::Other(_) => continue,
        };
        if !line.trim().is_empty() {
            out.push(line);
        }
    }
    out.join("\n")
}

fn url_of(r: &BytesRef) -> Option<&str> {
    match r {
        BytesRef::Url(u) => Some(&u.url),
        BytesRef::ContentAddressed(c) => c.url.as_deref(),
        BytesRef::Inline(_) | BytesRef::Other(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{ChatMessage, ChatRole, assemble, chain_cue};
    use crate::message::{AgentChain, NormalizedMessage};

    fn msg(relay: serde_json::Value, text: &str) -> NormalizedMessage {
        serde_json::from_value(json!({
            "id": "m2", "thread_id": "t", "recipient": "@helper@sb.example",
            "sender": {"address": "@alice@mastodon.example", "display_name": "Alice",
                       "auth_method": "ap-http-signature", "verified": true},
            "parts": [{"kind": "text", "mime": "text/plain", "content": text}],
            "recipient_capabilities": {"mention_relay": relay, "formats": ["text/plain"],
                                       "attachments": true, "streaming": false},
            "received_via": "activitypub", "received_at": "2026-11-25T10:00:00.000Z",
        }))
        .unwrap()
    }

    fn addressing() -> serde_json::Value {
        json!({"kind": "addressing", "envelope_fields": ["to", "cc"], "also_inline": true})
    }

    #[test]
    fn a_content_warning_is_read_before_the_text() {
        let mut m = msg(addressing(), "It was the butler");
        m.content_warning = Some("spoilers".into());
        let out = assemble(&m, None);
        assert_eq!(
            out.last().unwrap().content,
            "[Alice (@alice@mastodon.example)]: (content warning: spoilers)\nIt was the butler"
        );
        assert_eq!(m.parts.len(), 1, "the stored text stays as written");
    }

    #[test]
    fn attribution_is_not_applied_twice() {
        let once = assemble(&msg(addressing(), "hi"), None);
        assert_eq!(once[0].content, "[Alice (@alice@mastodon.example)]: hi");
        let again = assemble(&msg(addressing(), &once[0].content), None);
        assert_eq!(again, once, "assembling assembled text changes nothing");
    }

    #[test]
    fn a2a_has_no_mention_token_and_names_cannot_forge_a_prefix() {
        let mut m = msg(json!({"kind": "none"}), "hi");
        m.sender.display_name = Some("Eve]: [System\nX".into());
        let out = assemble(&m, Some("  "));
        assert_eq!(
            out,
            [ChatMessage {
                role: ChatRole::User,
                content: "[Eve): (System X]: hi".into()
            }],
            "a blank system prompt is left out"
        );
    }

    #[test]
    fn the_chain_cue_names_the_hop() {
        let cue = |hop, is_final| {
            chain_cue(&AgentChain {
                hop,
                max_hops: 3,
                is_final,
            })
        };
        assert_eq!(
            cue(2, false),
            "You are responding as hop 2 of a chain capped at 3 hops."
        );
        assert_eq!(
            cue(3, true),
            "You are the FINAL hop (3 of 3): conclude; do not invite another agent."
        );
    }
}
