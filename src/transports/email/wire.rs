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

/// The most recipients of one report that are read, and the longest field kept (characters):
/// a report is the remote's text, not ours.
const MAX_RECIPIENTS: usize = 100;
const MAX_FIELD_CHARS: usize = 1_000;

/// One recipient's block of a delivery status notification (RFC 3464 §2.3), the fields
/// switchboard keeps; each missing one is empty. Address-typed fields lose their type
/// (`rfc822; bob@example.com` is `bob@example.com`, `dns; mx.example.com` is
/// `mx.example.com`); control characters become spaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecipientStatus {
    /// `Final-Recipient` (else `Original-Recipient`).
    pub recipient: String,
    /// `Action`, lowercased (`failed`, `delayed`, `delivered`, `relayed`, `expanded`).
    pub action: String,
    /// `Status`: the enhanced status code (`5.1.1`, RFC 3463), empty when it is not one.
    pub status: String,
    /// `Diagnostic-Code` without its type: the remote server's reply (`550 5.1.1 …`).
    pub diagnostic: String,
    /// `Remote-MTA`: the server that gave the diagnostic.
    pub remote_mta: String,
}

impl RecipientStatus {
    /// Whether the delivery to this recipient failed for good: the action is `failed`, or the
    /// status is permanent (`5.x.x`) and the action says nothing else.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.action == "failed" || (self.action.is_empty() && self.status.starts_with('5'))
    }

    /// Why, in one line: the status code and the diagnostic (what an agent is told).
    #[must_use]
    pub fn reason(&self) -> String {
        joined(&[&self.status, &self.diagnostic])
    }

    /// One line for logs and the delivery record's detail: the action, then [`Self::reason`].
    #[must_use]
    pub fn detail(&self) -> String {
        joined(&[&self.action, &self.status, &self.diagnostic])
    }
}

/// The fields that are not empty, separated by spaces.
fn joined(fields: &[&str]) -> String {
    fields
        .iter()
        .filter(|f| !f.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a delivery status notification (RFC 3464) says: the `message/delivery-status` part's
/// per-message fields, then one block per recipient.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    /// `Reporting-MTA`: the server that wrote the report.
    pub reporting_mta: String,
    /// The recipients' blocks, in order.
    pub recipients: Vec<RecipientStatus>,
}

impl DeliveryReport {
    /// Reads the `message/delivery-status` part's `text`: folded lines unfolded, blocks parted by
    /// blank lines, the first holding the per-message fields. Unknown fields are skipped, a
    /// block without any recipient field is no recipient.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut report = Self::default();
        for (i, block) in blocks(text).into_iter().enumerate() {
            let get = |name: &str| {
                block
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map_or("", |(_, v)| v.as_str())
            };
            if i == 0 && report.reporting_mta.is_empty() {
                report.reporting_mta = untyped(get("Reporting-MTA"));
            }
            let recipient = match untyped(get("Final-Recipient")) {
                r if r.is_empty() => untyped(get("Original-Recipient")),
                r => r,
            };
            let action = one_line(get("Action")).to_ascii_lowercase();
            if recipient.is_empty() && action.is_empty() {
                continue;
            }
            if report.recipients.len() == MAX_RECIPIENTS {
                break;
            }
            let status = get("Status")
                .split_whitespace()
                .next()
                .filter(|s| is_status_code(s))
                .unwrap_or_default()
                .to_owned();
            report.recipients.push(RecipientStatus {
                recipient,
                action,
                status,
                diagnostic: untyped(get("Diagnostic-Code")),
                remote_mta: untyped(get("Remote-MTA")),
            });
        }
        report
    }

    /// The first recipient whose delivery failed for good, if one did.
    #[must_use]
    pub fn failure(&self) -> Option<&RecipientStatus> {
        self.recipients.iter().find(|r| r.failed())
    }
}

/// The blocks of a delivery-status body: each a list of (field name, unfolded value).
fn blocks(text: &str) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = Vec::new();
    let mut block: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            if !block.is_empty() {
                out.push(std::mem::take(&mut block));
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            // A folded line continues the field before it.
            if let Some((_, v)) = block.last_mut()
                && v.chars().count() < MAX_FIELD_CHARS
            {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some((name, value)) = line.split_once(':') {
            block.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    if !block.is_empty() {
        out.push(block);
    }
    out
}

/// A typed field's value without its type (`rfc822; a@b` is `a@b`; a value without a type is
/// kept), on one line and at most [`MAX_FIELD_CHARS`] long.
fn untyped(value: &str) -> String {
    let v = match value.split_once(';') {
        Some((kind, rest)) if !kind.trim().is_empty() && !kind.contains(char::is_whitespace) => {
            rest
        }
        _ => value,
    };
    one_line(v)
}

/// `v` on one line (control characters become spaces), at most [`MAX_FIELD_CHARS`] long.
fn one_line(v: &str) -> String {
    v.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_FIELD_CHARS)
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Whether `s` is an enhanced status code: class 2, 4 or 5, then two numbers of at most three
/// digits (RFC 3463).
fn is_status_code(s: &str) -> bool {
    let mut parts = s.split('.');
    let class_ok = parts.next().is_some_and(|c| matches!(c, "2" | "4" | "5"));
    let rest: Vec<&str> = parts.collect();
    class_ok
        && rest.len() == 2
        && rest
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
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
    fn a_delivery_report_is_read_block_by_block_with_folded_lines() {
        let r = DeliveryReport::parse(
            "Reporting-MTA: dns; mx.b.example\nArrival-Date: Sun, 29 Nov 2026 10:00:00 +0000\n\n\
             Final-Recipient: rfc822; x@b.example\nOriginal-Recipient: rfc822;X@b.example\n\
             Action: Failed\nStatus: 5.1.1 (bad mailbox)\nRemote-MTA: dns; in.b.example\n\
             Diagnostic-Code: smtp; 550 5.1.1 <x@b.example>:\n    Recipient address rejected\n\n\
             Final-Recipient: rfc822;y@b.example\nAction: delayed\nStatus: 4.4.1\n",
        );
        assert_eq!(r.reporting_mta, "mx.b.example");
        assert_eq!(r.recipients.len(), 2);
        let x = &r.recipients[0];
        assert_eq!(
            (x.recipient.as_str(), x.action.as_str(), x.status.as_str()),
            ("x@b.example", "failed", "5.1.1")
        );
        assert_eq!(x.remote_mta, "in.b.example");
        assert_eq!(
            x.diagnostic,
            "550 5.1.1 <x@b.example>: Recipient address rejected"
        );
        assert!(x.failed());
        assert_eq!(
            x.detail(),
            "failed 5.1.1 550 5.1.1 <x@b.example>: Recipient address rejected"
        );
        assert!(!r.recipients[1].failed(), "delayed is not failed");
        assert_eq!(r.failure(), Some(x));
    }

    #[test]
    fn a_delivery_status_fails_on_the_action_or_a_permanent_status_alone() {
        let one = |t: &str| DeliveryReport::parse(t).recipients.remove(0);
        assert!(one("Final-Recipient: rfc822; x@y\nStatus: 5.0.0\n").failed());
        assert!(!one("Final-Recipient: rfc822; x@y\nAction: delayed\nStatus: 4.4.1\n").failed());
        assert!(!one("Final-Recipient: rfc822; x@y\nAction: delivered\nStatus: 2.0.0\n").failed());
        // Not a status code: kept out of the record.
        assert_eq!(
            one("Final-Recipient: x@y\nAction: failed\nStatus: 550\n").status,
            ""
        );
        assert!(
            DeliveryReport::parse("Reporting-MTA: dns; a\n")
                .failure()
                .is_none()
        );
        // Every field is one line, whatever the report holds.
        let odd = one("Final-Recipient: rfc822; x@y\nAction: fai\u{1}\0led\n");
        assert_eq!(odd.action, "fai  led");
    }
}
