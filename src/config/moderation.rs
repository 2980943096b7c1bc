//! `[moderation]`: senders refused before anything is stored (`[[moderation.blocks]]`, for the
//! whole server or one agent), and where reports (ActivityPub `Flag`) are forwarded.

use serde::{Deserialize, Serialize};

/// Blocks and reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModerationConfig {
    /// Senders refused; the operator API and console add more at run time (stored in the
    /// database, shared by every instance).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockConfig>,
    /// A mail address every inbound report is forwarded to, besides being stored.
    pub reports_to: Option<String>,
}

/// One block: exactly one of `sender`, `domain` and `issuer`, each a pattern in which `*`
/// stands for any run of characters (case-insensitive).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockConfig {
    /// The sender's address: an ActivityPub actor IRI (`https://bad.example/users/*`), a mail
    /// address (`*@spam.example`), an A2A caller's evidence subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// The sender's instance or mail domain (`bad.example`, `*.bad.example`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The issuer that vouches for an A2A caller or a connector's forwarded identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The one agent the block applies to; every agent when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Why, for the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ModerationConfig {
    /// Each block names exactly one thing to match and, when scoped, a hosted agent;
    /// `reports_to` is a mail address.
    pub(super) fn check(&self, agents: &[&str], problems: &mut Vec<String>) {
        for (i, b) in self.blocks.iter().enumerate() {
            let at = format!("moderation.blocks[{i}]");
            let given = [&b.sender, &b.domain, &b.issuer]
                .iter()
                .filter(|p| p.is_some())
                .count();
            if given != 1 {
                problems.push(format!(
                    "{at}: give exactly one of sender, domain and issuer"
                ));
            }
            if [&b.sender, &b.domain, &b.issuer]
                .iter()
                .any(|p| p.as_deref().is_some_and(|p| p.trim().is_empty()))
            {
                problems.push(format!("{at}: empty pattern"));
            }
            if let Some(agent) = &b.agent
                && !agents.contains(&agent.as_str())
            {
                problems.push(format!("{at}.agent: no agent {agent:?}"));
            }
        }
        if let Some(to) = &self.reports_to
            && crate::message::Address::parse(to).is_none_or(|a| a.handle)
        {
            problems.push(format!(
                "moderation.reports_to: {to:?} is not a mail address"
            ));
        }
    }
}
