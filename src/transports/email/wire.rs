//! Email's wire shapes, pure data: a mailbox, the JSON summary of a received mail that a
//! message keeps as its `raw` (with its SMTP envelope and the reference to its stored bytes),
//! and what a delivery status notification (RFC 3464) says. Parsing the bytes is
//! [`super::parse`]'s; building a reply, [`super::outbound`]'s.

use serde::{Deserialize, Serialize};

/// A mailbox: display name and address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mailbox {
    /// Display name, decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `local@domain`, domain lowercased.
    pub address: String,
}

/// The summary of a received mail, as its message's `raw` (`docs/protocols/email.md`). Every
/// field is always written (an absent one as `null` or empty) except `roles`, written only for
/// mail to role addresses. Read back, a field missing from a message stored by an older version
/// takes its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// `Message-ID`, without angle brackets.
    pub message_id: Option<String>,
    /// Subject, decoded.
    pub subject: Option<String>,
    /// The first `From` mailbox.
    pub from: Option<Mailbox>,
    /// The first `Reply-To` mailbox.
    pub reply_to: Option<Mailbox>,
    /// `To` addresses, lowercased.
    pub to: Vec<String>,
    /// `Cc` addresses, lowercased.
    pub cc: Vec<String>,
    /// `Date` as written.
    pub date: Option<String>,
    /// `In-Reply-To` ids.
    pub in_reply_to: Vec<String>,
    /// `References` ids, oldest first.
    pub references: Vec<String>,
    /// The conversation GUID of an Outlook `Thread-Index`, hex.
    pub thread_index_guid: Option<String>,
    /// The thread key (`{agent}:{root Message-ID}`).
    pub thread_key: Option<String>,
    /// The agent's address the mail was written to (`{agent}@{mail domain}`).
    pub agent_address: Option<String>,
    /// Whether the From address is the sender's own (aligned DKIM or a DMARC pass); absent
    /// from messages stored before the flag existed.
    pub from_authenticated: Option<bool>,
    /// The `Authentication-Results` value switchboard wrote for it.
    pub authentication_results: String,
    /// Its size in bytes.
    pub size: usize,
    /// The whole message, when it was stored.
    pub body: Option<BodyRef>,
    /// Attachments over the media size limit, dropped.
    pub dropped_attachments: usize,
    /// The SMTP envelope it came with.
    pub envelope: Envelope,
    /// The role addresses a copy handed to an agent stands for (never answered).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

/// A received mail's SMTP envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Envelope {
    /// `MAIL FROM` (empty for the null sender).
    pub mail_from: String,
    /// The `RCPT TO` addresses of ours: agents' and role addresses.
    pub rcpt_to: Vec<String>,
    /// The client's IP address.
    pub client_ip: String,
    /// The `HELO`/`EHLO` name.
    pub helo: String,
    /// Whether the session was encrypted (STARTTLS).
    pub tls: bool,
}

/// The stored bytes of a whole message (a content-addressed blob).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BodyRef {
    /// Digest algorithm (`sha256`).
    pub algo: String,
    /// Lower-case hex digest.
    pub digest: String,
    /// `message/rfc822`.
    pub mime: String,
}

impl BodyRef {
    /// The reference to the message whose bytes hash to `digest` (SHA-256, hex).
    #[must_use]
    pub fn rfc822(digest: &str) -> Self {
        Self {
            algo: "sha256".into(),
            digest: digest.to_owned(),
            mime: "message/rfc822".into(),
        }
    }
}

/// The per-recipient fields of a delivery status notification that switchboard reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryStatus {
    /// `Action`, lowercased (`failed`, `delayed`, `delivered`, …).
    pub action: String,
    /// `Status` (`5.1.1`).
    pub status: String,
    /// `Diagnostic-Code`.
    pub diagnostic_code: String,
}

impl DeliveryStatus {
    /// The fields of the first recipient block of a `message/delivery-status` part's `text`
    /// (each the first line of its name; missing ones empty).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_owned())
                })
                .unwrap_or_default()
        };
        Self {
            action: field("Action").to_ascii_lowercase(),
            status: field("Status"),
            diagnostic_code: field("Diagnostic-Code"),
        }
    }

    /// Whether the delivery failed: the action is `failed` or the status permanent (5.x.x).
    #[must_use]
    pub fn failed(&self) -> bool {
        self.action == "failed" || self.status.starts_with('5')
    }
}

/// What a delivery status notification (RFC 3464) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dsn {
    /// `Action: failed` (or a 5.x.x status).
    pub failed: bool,
    /// `Status` and `Diagnostic-Code`, for operators.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_summary_is_written_with_every_field_and_roles_only_when_there_are_some() {
        let s = Summary {
            message_id: Some("a@b".into()),
            from: Some(Mailbox {
                name: None,
                address: "bob@b.example".into(),
            }),
            thread_key: Some("echo:a@b".into()),
            agent_address: Some("echo@agents.test".into()),
            from_authenticated: Some(true),
            body: Some(BodyRef::rfc822("ab12")),
            ..Summary::default()
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(
            v,
            json!({
                "message_id": "a@b", "subject": null, "from": {"address": "bob@b.example"},
                "reply_to": null, "to": [], "cc": [], "date": null, "in_reply_to": [],
                "references": [], "thread_index_guid": null, "thread_key": "echo:a@b",
                "agent_address": "echo@agents.test", "from_authenticated": true,
                "authentication_results": "", "size": 0,
                "body": {"algo": "sha256", "digest": "ab12", "mime": "message/rfc822"},
                "dropped_attachments": 0,
                "envelope": {"mail_from": "", "rcpt_to": [], "client_ip": "", "helo": "", "tls": false},
            })
        );
        assert_eq!(serde_json::from_value::<Summary>(v).expect("back"), s);
        let roles = Summary {
            roles: vec!["postmaster".into()],
            ..s
        };
        assert_eq!(
            serde_json::to_value(&roles).expect("json")["roles"],
            json!(["postmaster"])
        );
    }

    #[test]
    fn a_delivery_status_fails_on_the_action_or_a_permanent_status() {
        let failed = DeliveryStatus::parse(
            "Final-Recipient: rfc822; x@y\nAction: Failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 no\n",
        );
        assert_eq!(failed.action, "failed");
        assert_eq!(failed.status, "5.1.1");
        assert_eq!(failed.diagnostic_code, "smtp; 550 no");
        assert!(failed.failed());
        assert!(!DeliveryStatus::parse("Action: delayed\nStatus: 4.4.1\n").failed());
        assert!(DeliveryStatus::parse("Status: 5.0.0\n").failed());
    }
}
