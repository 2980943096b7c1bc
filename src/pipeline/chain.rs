//! Multi-agent conversations: an agent's response that mentions other local agents wakes them,
//! in the same thread, with the hop limit and the no-revisit rule enforced here, once for
//! every transport. Transports only render the addressing (ActivityPub `to`/`cc` and `Mention`
//! tags, email `Cc`) and thread the sibling's reply under the mentioning one
//! ([`relayed_from`]).
//!
//! Rules:
//! - a turn that does not come from an agent starts a chain: its answer is hop 1, and the
//!   chain's `max_hops` is the answering agent's (`limits.max_hops`);
//! - a turn that comes with `recipient_capabilities.agent_chain` (from a sibling, or an A2A
//!   caller's `metadata.mentionable.agent_chain`) continues it: `max_hops` is the smaller of
//!   the chain's and the agent's own;
//! - the agents an answer wakes are those of `response.mentions` that are local, and, where
//!   the reply path relays inline mentions (`inline`, `addressing`), the local `@name@domain`
//!   handles in its text;
//! - a sibling is woken only while `hop < max_hops`, and never when it already answered in the
//!   chain (the dispatch job carries the chain's agents).

use crate::agents::{Agent, AgentRegistry};
use crate::message::{
    ALSO_ADDRESSED, AgentChain, MentionRelay, NormalizedMessage, NormalizedResponse, ON_BEHALF_OF,
    Part, Sender, Timestamp,
};

/// A turn switchboard hands to a sibling agent on behalf of the agent that mentioned it.
#[derive(Debug, Clone)]
pub(super) struct Sibling {
    /// The new inbound message (same thread, sender the mentioning agent).
    pub(super) msg: NormalizedMessage,
    /// The sibling's local name.
    pub(super) agent: String,
    /// The agents that answered in the chain so far (local names, oldest first).
    pub(super) chain: Vec<String>,
    /// The sender of the turn that started the chain, whose evidence the sibling's own access
    /// rules and rate limits judge the turn by.
    pub(super) origin: Sender,
}

/// When `msg` is a turn relayed by switchboard from one local agent to another: the id of the
/// response it relays (`in_reply_to`) and the mentioning agent's address. Transports thread the
/// reply under that response (ActivityPub `inReplyTo` its note; email `In-Reply-To` its mail)
/// and address the mentioning agent too.
#[must_use]
pub fn relayed_from(msg: &NormalizedMessage) -> Option<(&str, &str)> {
    let relayed = msg.recipient_capabilities.agent_chain.is_some() && relays(&msg.sender);
    if !relayed {
        return None;
    }
    Some((msg.in_reply_to.as_deref()?, msg.sender.address.as_str()))
}

/// Whether `sender` is a local agent whose turn the pipeline relayed. Only the pipeline writes
/// a sender without evidence that names whom it acts for: a transport's sender is built from
/// what its peer proved (an anonymous A2A caller has no evidence either, and no such field).
pub(super) fn relays(sender: &Sender) -> bool {
    sender.auth_method == crate::message::AuthMethod::None
        && sender.verified
        && sender.identities.is_none()
        && sender.extra.contains_key(ON_BEHALF_OF)
}

/// The `@name@domain` handles written in `text`, in order (what an `inline` or `addressing`
/// reply path reads as mentions).
#[must_use]
pub fn inline_handles(text: &str) -> Vec<&str> {
    let handle_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':');
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(off) = text[i..].find('@') {
        let start = i + off;
        i = start + 1;
        // A handle starts a word: not the middle of an address like a@b@c.
        if start > 0 && handle_char(char::from(bytes[start - 1])) {
            continue;
        }
        let name_len = text[i..]
            .find(|c: char| !handle_char(c))
            .unwrap_or(text.len() - i);
        let at = i + name_len;
        if name_len == 0 || bytes.get(at) != Some(&b'@') {
            continue;
        }
        let host_len = text[at + 1..]
            .find(|c: char| !host_char(c))
            .unwrap_or(text.len() - at - 1);
        let end = at + 1 + host_len;
        let handle = text[start..end].trim_end_matches(['.', ':', '-']);
        if handle.len() > at + 1 - start {
            out.push(handle);
        }
        i = end;
    }
    out
}

/// The local agents `response` (by `agent`, answering `answered`) mentions, in order, each
/// once, without `agent` itself.
fn mentioned(
    agents: &AgentRegistry,
    answered: &NormalizedMessage,
    agent: &Agent,
    response: &NormalizedResponse,
) -> Vec<std::sync::Arc<Agent>> {
    let inline = matches!(
        answered.recipient_capabilities.mention_relay,
        MentionRelay::Inline(_) | MentionRelay::Addressing(_)
    );
    let mut found: Vec<std::sync::Arc<Agent>> = Vec::new();
    let texts: Vec<&str> = if inline {
        response
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.content.as_str()),
                _ => None,
            })
            .collect()
    } else {
        Vec::new()
    };
    // The agents a person addressed alongside this one, where the transport gives one answer,
    // come after it in the chain that person's turn starts.
    let also: Vec<&str> = match answered.extra.get(ALSO_ADDRESSED) {
        Some(serde_json::Value::Array(a))
            if answered.recipient_capabilities.agent_chain.is_none() =>
        {
            a.iter().filter_map(serde_json::Value::as_str).collect()
        }
        _ => Vec::new(),
    };
    let addresses = response
        .mentions
        .iter()
        .flatten()
        .map(String::as_str)
        .chain(texts.iter().flat_map(|t| inline_handles(t)))
        .chain(also);
    for a in addresses {
        if let Some(m) = agents.resolve(a)
            && !m.name.eq_ignore_ascii_case(&agent.name)
            && !found.iter().any(|f| f.name == m.name)
        {
            found.push(m);
        }
    }
    found
}

/// The turns `response` wakes: one per mentioned local agent, while the chain has hops left
/// and the agent has not answered in it. `chain` is the agents that answered before `agent`.
pub(super) fn siblings(
    agents: &AgentRegistry,
    answered: &NormalizedMessage,
    origin: &Sender,
    chain: &[String],
    agent: &Agent,
    response: &NormalizedResponse,
    now: Timestamp,
) -> Vec<Sibling> {
    let own_max = agent.limits.max_hops;
    let (hop, max_hops) = match answered.recipient_capabilities.agent_chain {
        Some(c) => (c.hop.max(1), c.max_hops.min(own_max)),
        None => (1, own_max),
    };
    let mut visited: Vec<String> = chain.to_vec();
    visited.push(agent.name.clone());
    let mut out = Vec::new();
    for sibling in mentioned(agents, answered, agent, response) {
        if hop >= max_hops {
            tracing::info!(
                agent = %agent.name,
                mentioned = %sibling.name,
                hop,
                max_hops,
                "chain at its hop limit: the mentioned agent is not woken"
            );
            break;
        }
        if visited
            .iter()
            .any(|v| v.eq_ignore_ascii_case(&sibling.name))
        {
            tracing::info!(
                agent = %agent.name,
                mentioned = %sibling.name,
                "agent already answered in this chain: not woken again"
            );
            continue;
        }
        let next = hop + 1;
        let mut msg = answered.clone();
        msg.id = uuid::Uuid::now_v7().to_string();
        msg.in_reply_to = Some(response.id.clone());
        msg.sender = Sender {
            display_name: agent.display_name.clone(),
            ..Sender::local_agent(&agent.address)
        };
        msg.sender
            .extra
            .insert(ON_BEHALF_OF.into(), answered.on_behalf_of());
        msg.recipient.clone_from(&sibling.address);
        msg.parts.clone_from(&response.parts);
        msg.history = None;
        msg.history_cache_breakpoint_after = None;
        msg.recipient_capabilities.agent_chain = Some(AgentChain {
            hop: next,
            max_hops,
            is_final: next >= max_hops,
        });
        msg.received_at = now;
        msg.policy_resolution = None;
        msg.received_trace = None;
        msg.extra.remove(ALSO_ADDRESSED);
        // What a transport saw before the first turn is in the thread's history by now.
        msg.extra.remove(crate::agents::assembly::THREAD_CONTEXT);
        out.push(Sibling {
            msg,
            agent: sibling.name.clone(),
            chain: visited.clone(),
            origin: origin.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::inline_handles;

    #[test]
    fn inline_handles_are_found_in_prose() {
        assert_eq!(
            inline_handles("Ask @helper@sb.example:8080, or @b@sb.example. Not a@b@c."),
            vec!["@helper@sb.example:8080", "@b@sb.example"]
        );
        assert_eq!(
            inline_handles("<p><span>@x@h.example</span> hi @@ @y@ @z</p>"),
            vec!["@x@h.example"]
        );
        assert!(inline_handles("mail me at a@b.example").is_empty());
    }
}
