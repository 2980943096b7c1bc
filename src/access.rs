//! Per-agent access rules, decided from verified identity evidence only: the rules of
//! `[agents.access]` match `sender.identities` (method, issuer, assurance, subject glob), never a
//! display name, a profile or an unverified address. Deny wins over allow; a sender no rule
//! names gets the agent's default. The pipeline asks once per message, before anything is
//! stored or any backend is called; each transport renders the refusal its own way.

use crate::config::{AccessConfig, AccessDefault, AccessRule};
use crate::message::{AuthMethod, IdentityEvidence, Sender};

/// Why a sender was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// A `deny` rule matched.
    Denied,
    /// The default is `deny` and no `allow` rule matched.
    NotAllowed,
}

impl Denial {
    /// The metric and log label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Denied => "denied",
            Self::NotAllowed => "not_allowed",
        }
    }
}

/// An agent's compiled access rules.
#[derive(Debug, Clone, Default)]
pub struct Access {
    default: AccessDefault,
    allow: Vec<AccessRule>,
    deny: Vec<AccessRule>,
    /// What a refused sender is told on ActivityPub.
    pub refusal_reply: crate::config::RefusalReply,
}

impl Access {
    /// From an agent's `[agents.access]`; everyone may write when there is none.
    #[must_use]
    pub fn new(config: Option<&AccessConfig>) -> Self {
        config.map_or_else(Self::default, |c| Self {
            default: c.default,
            allow: c.allow.clone(),
            deny: c.deny.clone(),
            refusal_reply: c.refusal_reply,
        })
    }

    /// Whether everyone may write (no rules, default allow): nothing to check.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.default == AccessDefault::Allow && self.deny.is_empty()
    }

    /// Decides on a sender from its verified evidence.
    ///
    /// # Errors
    /// The [`Denial`] when the sender may not write to this agent.
    pub fn decide(&self, sender: &Sender) -> Result<(), Denial> {
        if self.is_open() {
            return Ok(());
        }
        let evidence = sender.identities.as_deref().unwrap_or_default();
        let any = |rules: &[AccessRule]| {
            rules
                .iter()
                .any(|r| evidence.iter().any(|e| rule_matches(r, e)))
        };
        if any(&self.deny) {
            return Err(Denial::Denied);
        }
        match self.default {
            AccessDefault::Allow => Ok(()),
            AccessDefault::Deny if any(&self.allow) => Ok(()),
            AccessDefault::Deny => Err(Denial::NotAllowed),
        }
    }

    /// Whether a sender whose evidence can only come from `methods` could ever be let in:
    /// lets a transport refuse before it has read a message (SMTP at `RCPT`) when none could.
    #[must_use]
    pub fn may_admit_via(&self, methods: &[AuthMethod]) -> bool {
        self.default == AccessDefault::Allow
            || self.allow.iter().any(|r| {
                r.method
                    .as_deref()
                    .is_none_or(|m| methods.iter().any(|x| x.as_str() == m))
            })
    }
}

/// Whether every field `rule` names matches `e`.
fn rule_matches(rule: &AccessRule, e: &IdentityEvidence) -> bool {
    rule.method
        .as_deref()
        .is_none_or(|m| m == e.method.as_str())
        && rule.issuer.as_deref().is_none_or(|i| i == e.issuer)
        && (rule.assurance.is_empty() || rule.assurance.iter().any(|a| a == e.assurance.as_str()))
        && rule.subject.as_deref().is_none_or(|s| glob(s, &e.subject))
}

/// `pattern` with `*` standing for any run of characters (none included), matched over the
/// whole of `text`.
fn glob(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).matches(text)
}

/// A pattern in which `*` stands for any run of characters (none included), split once into
/// its literal pieces so that matching it again allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    /// The text before the first `*` (all of it when there is none).
    first: String,
    /// The pieces between two `*`s, in order.
    middle: Vec<String>,
    /// The text after the last `*`; `None` without a `*`.
    last: Option<String>,
}

impl Glob {
    /// Splits `pattern` at its `*`s.
    pub(crate) fn new(pattern: &str) -> Self {
        let mut pieces: Vec<String> = pattern.split('*').map(str::to_owned).collect();
        let first = pieces.remove(0);
        let last = pieces.pop();
        Self {
            first,
            middle: pieces,
            last,
        }
    }

    /// Whether the pattern matches the whole of `text`.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let Some(mut rest) = text.strip_prefix(self.first.as_str()) else {
            return false;
        };
        let Some(last) = &self.last else {
            // No `*`: the whole text must have been the prefix.
            return rest.is_empty();
        };
        if !rest.ends_with(last.as_str()) {
            return false;
        }
        for piece in &self.middle {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len()
    }
}

/// A short account of a sender's evidence for logs: methods, issuers and subjects, never the
/// message.
#[must_use]
pub fn evidence_summary(sender: &Sender) -> String {
    let evidence = sender.identities.as_deref().unwrap_or_default();
    if evidence.is_empty() {
        return format!("{} (no verified identity)", sender.auth_method.as_str());
    }
    evidence
        .iter()
        .map(|e| format!("{} {} via {}", e.method.as_str(), e.subject, e.issuer))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::SenderProfile;

    fn evidence(method: &str, subject: &str, issuer: &str, assurance: &str) -> IdentityEvidence {
        serde_json::from_value(serde_json::json!({
            "subject": subject,
            "issuer": issuer,
            "method": method,
            "assurance": assurance,
            "audience": "https://sb.example",
            "issued_at": "2026-11-25T00:00:00Z",
            "proof": {"type": "transport", "verified_by": "sb.example"}
        }))
        .unwrap()
    }

    fn sender(identities: Vec<IdentityEvidence>) -> Sender {
        let mut s = Sender::local_agent("bob@partner.example");
        s.verified = !identities.is_empty();
        s.identities = (!identities.is_empty()).then_some(identities);
        s
    }

    fn rule(
        method: Option<&str>,
        issuer: Option<&str>,
        assurance: &[&str],
        subject: Option<&str>,
    ) -> AccessRule {
        AccessRule {
            method: method.map(str::to_owned),
            issuer: issuer.map(str::to_owned),
            assurance: assurance.iter().map(|a| (*a).to_owned()).collect(),
            subject: subject.map(str::to_owned),
        }
    }

    fn private() -> Access {
        Access::new(Some(&AccessConfig {
            refusal_reply: Default::default(),
            limits: Default::default(),
            default: AccessDefault::Deny,
            allow: vec![
                rule(
                    Some("email-dmarc"),
                    None,
                    &[],
                    Some("mailto:*@partner.example"),
                ),
                rule(
                    Some("ap-http-signature"),
                    None,
                    &[],
                    Some("https://mastodon.example/users/*"),
                ),
                rule(
                    Some("urn:mentionable:auth:slack-workspace-member:v0.1"),
                    Some("did:web:connector.example"),
                    &["verified"],
                    None,
                ),
            ],
            deny: vec![rule(None, None, &[], Some("https://spam.example/*"))],
        }))
    }

    #[test]
    fn globs_match_the_whole_subject() {
        for (p, t, want) in [
            (
                "mailto:*@partner.example",
                "mailto:bob@partner.example",
                true,
            ),
            (
                "mailto:*@partner.example",
                "mailto:bob@partner.example.evil",
                false,
            ),
            ("mailto:*@partner.example", "mailto:@partner.example", true),
            (
                "https://m.example/users/*",
                "https://m.example/users/a",
                true,
            ),
            (
                "https://m.example/users/*",
                "https://m.example/usersX",
                false,
            ),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*", "", true),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(glob(p, t), want, "{p} ~ {t}");
        }
    }

    #[test]
    fn rules_match_evidence_and_deny_wins() {
        let a = private();
        let ok = |e: IdentityEvidence| a.decide(&sender(vec![e]));
        assert_eq!(
            ok(evidence(
                "email-dmarc",
                "mailto:bob@partner.example",
                "sb.example",
                "address"
            )),
            Ok(())
        );
        assert_eq!(
            ok(evidence(
                "email-dkim",
                "mailto:bob@partner.example",
                "sb.example",
                "domain"
            )),
            Err(Denial::NotAllowed),
            "the method must match too"
        );
        assert_eq!(
            ok(evidence(
                "ap-http-signature",
                "https://mastodon.example/users/alice",
                "sb.example",
                "domain"
            )),
            Ok(())
        );
        let slack = "urn:mentionable:auth:slack-workspace-member:v0.1";
        assert_eq!(
            ok(evidence(
                slack,
                "U123",
                "did:web:connector.example",
                "verified"
            )),
            Ok(())
        );
        assert_eq!(
            ok(evidence(
                slack,
                "U123",
                "did:web:connector.example",
                "platform"
            )),
            Err(Denial::NotAllowed),
            "assurance outside the list"
        );
        assert_eq!(
            ok(evidence(slack, "U123", "did:web:other.example", "verified")),
            Err(Denial::NotAllowed),
            "another issuer"
        );
        // Deny wins over an allow rule matched by another piece of evidence.
        let both = sender(vec![
            evidence(
                "email-dmarc",
                "mailto:bob@partner.example",
                "sb.example",
                "address",
            ),
            evidence(
                "ap-http-signature",
                "https://spam.example/users/x",
                "sb.example",
                "domain",
            ),
        ]);
        assert_eq!(a.decide(&both), Err(Denial::Denied));
    }

    #[test]
    fn display_names_profiles_and_unverified_addresses_grant_nothing() {
        let a = private();
        let mut s = sender(vec![]);
        s.address = "bob@partner.example".into();
        s.display_name = Some("mailto:bob@partner.example".into());
        s.profile = Some(SenderProfile {
            url: Some("https://mastodon.example/users/alice".into()),
            provider_subject: Some("https://mastodon.example/users/alice".into()),
            ..SenderProfile::default()
        });
        s.key_id = Some("https://mastodon.example/users/alice#main-key".into());
        assert_eq!(a.decide(&s), Err(Denial::NotAllowed));
        // An open agent lets the same sender in.
        assert_eq!(Access::new(None).decide(&s), Ok(()));
    }

    #[test]
    fn an_envelope_can_decide_when_no_allow_rule_fits_the_transport() {
        let ap_only = Access::new(Some(&AccessConfig {
            refusal_reply: Default::default(),
            limits: Default::default(),
            default: AccessDefault::Deny,
            allow: vec![rule(Some("ap-http-signature"), None, &[], None)],
            deny: vec![],
        }));
        let email = [AuthMethod::EmailDkim, AuthMethod::EmailDmarc];
        assert!(!ap_only.may_admit_via(&email));
        assert!(private().may_admit_via(&email));
        assert!(Access::new(None).may_admit_via(&email));
        let any_method = Access::new(Some(&AccessConfig {
            refusal_reply: Default::default(),
            limits: Default::default(),
            default: AccessDefault::Deny,
            allow: vec![rule(None, None, &[], Some("mailto:*@x.example"))],
            deny: vec![],
        }));
        assert!(any_method.may_admit_via(&email));
    }
}
