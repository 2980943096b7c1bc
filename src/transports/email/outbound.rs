//! Replies: the RFC 5322 message built from a `NormalizedResponse` (pure), signed with DKIM by
//! mail-auth's signer, and sent through the configured relay with lettre.
//!
//! Every header value that came from the wire (display names, subjects) is reduced to one line
//! before it is written, and lettre encodes it, so nothing can inject a header.

use std::time::SystemTime;

use base64::Engine as _;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::{Address, Message};
use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;

use super::parse::sanitize_line;
use crate::markdown::escape_html as escape;
use crate::message::{Part, TextMime};

/// The most `References` ids a reply carries (some receivers refuse more than 100).
pub const MAX_REFERENCES: usize = 50;

/// The headers a DKIM signature covers (repeated names are not over-signed).
pub const SIGNED_HEADERS: [&str; 12] = [
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "In-Reply-To",
    "References",
    "Auto-Submitted",
    "MIME-Version",
    "Content-Type",
    // RFC 8058 §4: a one-click unsubscribe counts only under a signature that covers both.
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
];

/// Why a reply could not be built or signed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An address lettre refuses.
    #[error("unusable address {0:?}")]
    Address(String),
    /// lettre refused the message.
    #[error("message: {0}")]
    Message(String),
    /// Signing failed.
    #[error("DKIM signing: {0}")]
    Sign(String),
}

/// One attachment of a reply.
#[derive(Debug, Clone)]
pub struct OutFile {
    /// File name.
    pub name: String,
    /// Media type.
    pub mime: String,
    /// Bytes.
    pub data: Vec<u8>,
}

/// Everything a reply is built from.
#[derive(Debug, Clone)]
pub struct ReplyInput<'a> {
    /// The agent's address and display name.
    pub from: (&'a str, Option<&'a str>),
    /// Who gets it, with display name.
    pub to: (&'a str, Option<&'a str>),
    /// Who else is shown as a recipient (`Cc`), addresses only.
    pub cc: &'a [String],
    /// The subject being answered.
    pub subject: Option<&'a str>,
    /// A content warning the agent set on its answer: it opens the subject
    /// ([`warned_subject`]).
    pub content_warning: Option<&'a str>,
    /// Our Message-ID for the reply, without brackets.
    pub message_id: &'a str,
    /// The Message-ID answered.
    pub parent_id: Option<&'a str>,
    /// The parent's References.
    pub parent_references: &'a [String],
    /// The parent's In-Reply-To (used when it has no References).
    pub parent_in_reply_to: &'a [String],
    /// Date header.
    pub date: SystemTime,
    /// Plain text (or markdown).
    pub text: String,
    /// HTML rendering, if any.
    pub html: Option<String>,
    /// Attachments.
    pub files: Vec<OutFile>,
}

/// `Re: subject`, never `Re: Re: subject`.
#[must_use]
pub fn reply_subject(subject: Option<&str>) -> String {
    let s = sanitize_line(subject.unwrap_or(""));
    if s.is_empty() {
        return "Re: your message".into();
    }
    let is_re = s.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("re:"));
    if is_re { s } else { format!("Re: {s}") }
}

/// `subject` opened by the content warning `cw`, when there is one: `[CW: spoilers] Re: …`
/// (reduced to one line, like every header value).
#[must_use]
pub fn warned_subject(cw: Option<&str>, subject: String) -> String {
    match cw.map(sanitize_line).filter(|c| !c.is_empty()) {
        Some(cw) => format!("[CW: {cw}] {subject}"),
        None => subject,
    }
}

/// The References of a reply: the parent's References (or its In-Reply-To), then the parent.
#[must_use]
pub fn reply_references(parent: &str, refs: &[String], irt: &[String]) -> Vec<String> {
    let mut out: Vec<String> = if refs.is_empty() {
        irt.iter().take(1).cloned().collect()
    } else {
        refs.to_vec()
    };
    out.retain(|r| r != parent);
    out.push(parent.to_owned());
    if out.len() > MAX_REFERENCES {
        // Keep the root and the newest ones.
        let tail = out.split_off(out.len() - (MAX_REFERENCES - 1));
        out.truncate(1);
        out.extend(tail);
    }
    out
}

/// Text, HTML and attachments of a reply from the response's parts (file bytes are looked up by
/// the caller through `fetch`).
pub fn render_parts(parts: &[Part]) -> (String, Option<String>) {
    let mut text = Vec::new();
    let mut html = Vec::new();
    for p in parts {
        match p {
            Part::Text(t) => match t.mime {
                TextMime::Html => {
                    text.push(html_to_text(&t.content));
                    html.push(t.content.clone());
                }
                _ => {
                    text.push(t.content.clone());
                    html.push(crate::markdown::to_html(&t.content));
                }
            },
            Part::Link(l) => {
                let line = match &l.title {
                    Some(title) => format!("{title}: {}", l.url),
                    None => l.url.clone(),
                };
                html.push(format!(
                    "<p><a href=\"{}\">{}</a></p>",
                    escape(&l.url),
                    escape(l.title.as_deref().unwrap_or(&l.url))
                ));
                text.push(line);
            }
            Part::Policy(p) => {
                text.push(p.policy.message.clone());
                html.push(format!("<p>{}</p>", escape(&p.policy.message)));
            }
            _ => {}
        }
    }
    let text = text.join("\n\n");
    // Never end the body in whitespace-only lines (see auth.rs on relaxed canonicalisation).
    let text = text.trim_end().to_owned() + "\n";
    let html = (!html.is_empty()).then(|| html.join("\n"));
    (text, html)
}

fn html_to_text(html: &str) -> String {
    mail_parser::decoders::html::html_to_text(html)
}

fn mailbox(addr: &str, name: Option<&str>) -> Result<Mailbox, BuildError> {
    let address: Address = addr
        .parse()
        .map_err(|_| BuildError::Address(sanitize_line(addr)))?;
    let name = name.map(sanitize_line).filter(|n| !n.is_empty());
    Ok(Mailbox::new(name, address))
}

/// Builds the reply's bytes (unsigned).
///
/// # Errors
/// Unusable addresses; lettre refusing the message.
pub fn build_reply(r: &ReplyInput<'_>) -> Result<Vec<u8>, BuildError> {
    let mut b = Message::builder()
        .from(mailbox(r.from.0, r.from.1)?)
        .to(mailbox(r.to.0, r.to.1)?)
        .subject(warned_subject(r.content_warning, reply_subject(r.subject)))
        .message_id(Some(format!("<{}>", r.message_id)))
        .date(r.date)
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-replied".into(),
        ));
    for c in r.cc {
        b = b.cc(mailbox(c, None)?);
    }
    if let Some(parent) = r.parent_id {
        let refs = reply_references(parent, r.parent_references, r.parent_in_reply_to);
        b = b.in_reply_to(format!("<{parent}>")).references(
            refs.iter()
                .map(|id| format!("<{id}>"))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    let alt = match &r.html {
        Some(html) => MultiPart::alternative_plain_html(r.text.clone(), html.clone()),
        None => MultiPart::alternative().singlepart(SinglePart::plain(r.text.clone())),
    };
    let body = if r.files.is_empty() {
        alt
    } else {
        let mut mixed = MultiPart::mixed().multipart(alt);
        for f in &r.files {
            let ct = ContentType::parse(&f.mime)
                .or_else(|_| ContentType::parse("application/octet-stream"))
                .map_err(|e| BuildError::Message(e.to_string()))?;
            mixed =
                mixed.singlepart(Attachment::new(sanitize_line(&f.name)).body(f.data.clone(), ct));
        }
        mixed
    };
    let msg = b
        .multipart(body)
        .map_err(|e| BuildError::Message(e.to_string()))?;
    Ok(msg.formatted())
}

/// How the body of a message we sign is canonicalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodySigning {
    /// Relaxed: our own mail (replies, reports).
    Relaxed,
    /// Simple: a forwarded message, signed as it came, byte for byte, with no canonicalisation
    /// of its whitespace for mail-auth to get wrong (see docs/protocols/email.md on its
    /// relaxed-body defect).
    Simple,
}

/// Signs `raw` (RSA-SHA256, relaxed headers, the body as `body` says) and returns the signed
/// message.
///
/// # Errors
/// An unusable key.
pub fn dkim_sign(
    raw: &[u8],
    pkcs8_der: &[u8],
    domain: &str,
    selector: &str,
    body: BodySigning,
) -> Result<Vec<u8>, BuildError> {
    use mail_auth::dkim::Canonicalization;
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8_der));
    let key = RsaKey::<Sha256>::from_key_der(der).map_err(|e| BuildError::Sign(e.to_string()))?;
    let sig = DkimSigner::from_key(key)
        .domain(domain)
        .selector(selector)
        .headers(SIGNED_HEADERS)
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(match body {
            BodySigning::Relaxed => Canonicalization::Relaxed,
            BodySigning::Simple => Canonicalization::Simple,
        })
        .sign(raw)
        .map_err(|e| BuildError::Sign(e.to_string()))?;
    Ok([sig.to_header().as_bytes(), raw].concat())
}

/// The header lines put on top of a forwarded role message (RFC 5321 §4.4: a server that
/// passes a message on adds its `Received` line, which also counts towards the loop limit):
/// `Received` with the client, our host, the first role address and the time of receipt, and
/// `X-Original-To` with every role address it was sent to.
#[must_use]
pub fn forward_trace(job: &super::roles::RoleJob, hostname: &str) -> String {
    let when = chrono::DateTime::from_timestamp_millis(job.received_at)
        .unwrap_or_default()
        .to_rfc2822();
    let helo = sanitize_line(&job.helo).replace(['(', ')', ';'], " ");
    let with = if job.tls { "ESMTPS" } else { "ESMTP" };
    let id = job.digest.get(..16).unwrap_or(&job.digest);
    let rcpts: Vec<String> = job.rcpts.iter().map(|r| sanitize_line(r)).collect();
    let first = rcpts.first().map(String::as_str).unwrap_or("postmaster");
    format!(
        "Received: from {helo} ([{ip}])\r\n\tby {hostname} with {with} id {id}\r\n\tfor <{first}>; {when}\r\nX-Original-To: {all}\r\n",
        ip = job.client_ip,
        all = rcpts.join(", "),
    )
}

/// The DNS TXT record that publishes a DKIM public key (SPKI DER).
#[must_use]
pub fn dkim_txt_record(spki_der: &[u8]) -> String {
    format!(
        "v=DKIM1; k=rsa; p={}",
        base64::engine::general_purpose::STANDARD.encode(spki_der)
    )
}

/// The retry class of a relay failure: 4xx and connection trouble are temporary, 5xx permanent.
#[must_use]
pub fn classify(e: &lettre::transport::smtp::Error) -> crate::error::OutboundError {
    use crate::error::OutboundError;
    let reason = format!("relay: {e}");
    let err = if e.is_permanent() {
        OutboundError::permanent(reason)
    } else {
        OutboundError::temporary(reason)
    };
    // The reply code, when the server answered with one (its three digits).
    match e.status().and_then(|code| code.to_string().parse().ok()) {
        Some(code) => err.with_status(crate::error::PeerStatus::Smtp(code)),
        None => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    fn input<'a>(subject: Option<&'a str>, to_name: Option<&'a str>) -> ReplyInput<'a> {
        ReplyInput {
            from: ("echo@agents.test", Some("Echo")),
            to: ("alice@example.com", to_name),
            cc: &[],
            subject,
            content_warning: None,
            message_id: "r1@agents.test",
            parent_id: Some("m2@example.com"),
            parent_references: &[],
            parent_in_reply_to: &[],
            date: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            text: "Hello *there*\n".into(),
            html: Some(crate::markdown::to_html("Hello *there*")),
            files: vec![],
        }
    }

    fn header_names(raw: &[u8]) -> Vec<String> {
        super::super::parse::raw_headers(raw)
            .into_iter()
            .map(|(n, _)| n.to_ascii_lowercase())
            .collect()
    }

    #[test]
    fn a_forward_keeps_the_message_under_a_trace_line_and_our_signature() {
        let job = super::super::roles::RoleJob {
            digest: "ab".repeat(32),
            rcpts: vec!["postmaster@agents.test".into(), "abuse@agents.test".into()],
            mail_from: String::new(),
            client_ip: "192.0.2.7".parse().unwrap(),
            helo: "mx (evil); x".into(),
            tls: true,
            received_at: 1_795_000_000_000,
        };
        let trace = forward_trace(&job, "mx.agents.test");
        assert!(
            trace.starts_with("Received: from mx  evil   x ([192.0.2.7])\r\n\tby mx.agents.test with ESMTPS id abababababababab\r\n\tfor <postmaster@agents.test>; "),
            "{trace}"
        );
        assert!(
            trace.ends_with("\r\nX-Original-To: postmaster@agents.test, abuse@agents.test\r\n"),
            "{trace}"
        );
        let original = b"From: r@reports.example\r\nTo: dmarc@agents.test\r\nSubject: Report\r\n\r\nbody  \r\n \r\n\r\n";
        let forwarded = [trace.as_bytes(), original].concat();
        let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).unwrap();
        let der = rsa::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).unwrap();
        let signed = dkim_sign(
            &forwarded,
            der.as_bytes(),
            "agents.test",
            "sel",
            BodySigning::Simple,
        )
        .unwrap();
        assert!(
            signed.ends_with(&forwarded),
            "the message is kept as it came"
        );
        let sig = String::from_utf8_lossy(&signed[..signed.len() - forwarded.len()]).into_owned();
        assert!(sig.starts_with("DKIM-Signature:"), "{sig}");
        assert!(sig.contains("c=relaxed/simple"), "{sig}");
        assert!(sig.contains("d=agents.test"), "{sig}");
    }

    #[test]
    fn subjects_do_not_stack() {
        assert_eq!(reply_subject(Some("Hello")), "Re: Hello");
        assert_eq!(reply_subject(Some("RE: Hello")), "RE: Hello");
        assert_eq!(reply_subject(Some("re:x")), "re:x");
        assert_eq!(reply_subject(None), "Re: your message");
        assert_eq!(reply_subject(Some("Ü")), "Re: Ü");
        assert_eq!(
            warned_subject(Some("spoilers"), "Re: Hello".into()),
            "[CW: spoilers] Re: Hello"
        );
        assert_eq!(
            warned_subject(Some("a\r\nBcc: x@y"), "Re: Hello".into()),
            "[CW: a  Bcc: x@y] Re: Hello",
            "one line"
        );
        assert_eq!(warned_subject(Some(""), "Re: Hello".into()), "Re: Hello");
        assert_eq!(warned_subject(None, "Re: Hello".into()), "Re: Hello");
    }

    #[test]
    fn references_follow_rfc_5322() {
        let r = reply_references("m2", &["m0".into(), "m1".into()], &[]);
        assert_eq!(r, vec!["m0", "m1", "m2"]);
        let r = reply_references("m2", &[], &["m1".into()]);
        assert_eq!(r, vec!["m1", "m2"]);
        let many: Vec<String> = (0..200).map(|i| format!("x{i}")).collect();
        let r = reply_references("p", &many, &[]);
        assert_eq!(r.len(), MAX_REFERENCES);
        assert_eq!(r[0], "x0");
        assert_eq!(r.last().unwrap(), "p");
    }

    #[test]
    fn reply_has_threading_and_auto_submitted_headers() {
        let raw = build_reply(&input(Some("Question"), Some("Alice"))).unwrap();
        let h = super::super::parse::raw_headers(&raw);
        let get = |n: &str| {
            h.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("Subject").unwrap(), "Re: Question");
        assert_eq!(get("In-Reply-To").unwrap(), "<m2@example.com>");
        assert_eq!(get("References").unwrap(), "<m2@example.com>");
        assert_eq!(get("Message-ID").unwrap(), "<r1@agents.test>");
        assert_eq!(get("Auto-Submitted").unwrap(), "auto-replied");
        assert!(get("From").unwrap().contains("echo@agents.test"));
        assert!(
            get("Content-Type")
                .unwrap()
                .starts_with("multipart/alternative")
        );
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains("<em>there</em>"), "{text}");
    }

    #[test]
    fn header_injection_through_names_and_subjects_is_neutralised() {
        let evil_subject = "Hi\r\nBcc: victim@example.net\r\nX-Evil: 1";
        let evil_name = "Alice\r\nBcc: victim@example.net";
        let raw = build_reply(&input(Some(evil_subject), Some(evil_name))).unwrap();
        let names = header_names(&raw);
        assert!(
            !names.iter().any(|n| n == "bcc" || n == "x-evil"),
            "{names:?}"
        );
        let text = String::from_utf8_lossy(&raw);
        assert!(
            !text.contains("\r\nBcc:") && !text.contains("\nBcc:"),
            "{text}"
        );
        assert!(
            build_reply(&ReplyInput {
                to: ("alice@example.com\r\nBcc: x@y.z", None),
                ..input(None, None)
            })
            .is_err()
        );
    }

    #[test]
    fn file_parts_become_attachments() {
        let mut r = input(Some("files"), None);
        r.files.push(OutFile {
            name: "report\r\nBcc: x@y.z.pdf".into(),
            mime: "application/pdf".into(),
            data: b"%PDF-1.4 test".to_vec(),
        });
        let raw = build_reply(&r).unwrap();
        let h = super::super::parse::raw_headers(&raw);
        let ct = h
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("Content-Type"))
            .unwrap();
        assert!(ct.1.starts_with("multipart/mixed"), "{ct:?}");
        let parsed = mail_parser::MessageParser::default().parse(&raw).unwrap();
        let att: Vec<_> = parsed.attachments().collect();
        assert_eq!(att.len(), 1);
        assert_eq!(att[0].contents(), b"%PDF-1.4 test");
        assert!(!header_names(&raw).iter().any(|n| n == "bcc"));
        assert!(parsed.body_text(0).unwrap().contains("Hello"));
    }
}
