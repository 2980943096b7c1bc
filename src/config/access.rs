//! `[agents.access]`: who may reach an agent, decided from verified identity evidence only.

use serde::{Deserialize, Serialize};

use super::limits::LimitsConfig;

/// What happens to a sender no rule names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessDefault {
    /// Everyone may write (public agents stay public).
    #[default]
    Allow,
    /// Only senders an `allow` rule matches may write.
    Deny,
}

/// What a sender refused on ActivityPub is told.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefusalReply {
    /// Nothing: the inbox answers 202 as for any activity, and the refusal tells nothing.
    #[default]
    None,
    /// A short direct message to the sender.
    Direct,
    /// A short reply in the thread, as visible as the refused note.
    Public,
}

/// One rule: every field given must match the same piece of evidence in `sender.identities`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessRule {
    /// The evidence method, e.g. `email-dmarc`, `ap-http-signature`, `a2a-jwt`, or a
    /// connector's method URN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Who vouches for the evidence: this server's host for transport evidence, or a trusted
    /// connector's issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// Accepted assurance levels (any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assurance: Vec<String>,
    /// The subject, with `*` standing for any run of characters: `mailto:*@partner.example`,
    /// `https://mastodon.example/users/*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl AccessRule {
    fn is_empty(&self) -> bool {
        self.method.is_none()
            && self.issuer.is_none()
            && self.assurance.is_empty()
            && self.subject.is_none()
    }
}

/// An agent's access rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// For senders no rule names.
    #[serde(default)]
    pub default: AccessDefault,
    /// Senders let in (when `default` is `deny`).
    #[serde(default)]
    pub allow: Vec<AccessRule>,
    /// Senders kept out; deny wins over allow.
    #[serde(default)]
    pub deny: Vec<AccessRule>,
    /// This agent's rate limits and backend concurrency, over `[limits]`.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// What a refused sender is told on ActivityPub (other transports answer in their own
    /// protocol's terms).
    #[serde(default)]
    pub refusal_reply: RefusalReply,
}

impl AccessConfig {
    /// Every rule names at least one field (an empty rule would match everyone, which `default`
    /// says more plainly).
    pub(super) fn check(&self, at: &str, problems: &mut Vec<String>) {
        self.limits.check(&format!("{at}.access.limits"), problems);
        for (list, rules) in [("allow", &self.allow), ("deny", &self.deny)] {
            for (i, r) in rules.iter().enumerate() {
                if r.is_empty() {
                    problems.push(format!(
                        "{at}.access.{list}[{i}]: name at least one of method, issuer, \
                         assurance, subject"
                    ));
                }
                if r.subject.as_deref() == Some("") {
                    problems.push(format!("{at}.access.{list}[{i}].subject: empty"));
                }
            }
        }
    }
}
