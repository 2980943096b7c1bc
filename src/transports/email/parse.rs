//! Inbound mail, parsed (pure functions, no I/O): the raw header block, the fields switchboard
//! maps, the text an agent sees (quoted replies and signatures stripped), the thread keys, and
//! the RFC 3834 rules that say a message must never be answered.

use std::borrow::Cow;

use base64::Engine as _;
use mail_parser::{HeaderName, MessageParser, MimeHeaders, PartType};

pub use super::wire::{DeliveryReport, Mailbox};

/// The most `Received` headers before a message is treated as looping.
pub const MAX_RECEIVED: usize = 50;

/// RFC 5322's line limit, without the CRLF.
pub const MAX_LINE: usize = 998;

/// Why a message cannot be accepted as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a parsable message.
    #[error("the message could not be parsed")]
    Malformed,
    /// A header name with whitespace or control characters (`Fr om:`), which parsers disagree on.
    #[error("a header name is malformed")]
    BadHeaderName,
    /// A line ending in a bare LF (or a bare CR): rejected so no parser can be smuggled past.
    #[error("bare LF or CR line endings are not accepted")]
    BareLineEnding,
    /// A line over 998 characters.
    #[error("a line is longer than 998 characters")]
    LineTooLong,
    /// Multiparts nested deeper than the cap.
    #[error("MIME parts are nested too deeply")]
    TooDeep,
    /// Over `MAX_RECEIVED` hops.
    #[error("too many Received headers: mail loop")]
    Loop,
    /// More than one `From` header (RFC 5322 allows one): the message would be routed by one
    /// and authenticated (DMARC) by another.
    #[error("more than one From header")]
    ManyFrom,
    /// The (first) `From` address holds control characters (a NUL in its domain, say): no
    /// mailbox can be written so, and it would go on into the sender's address and DMARC's
    /// domain.
    #[error("the From address holds control characters")]
    ControlInFrom,
}

/// One attachment or inline image.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// File name, when given.
    pub name: Option<String>,
    /// Media type.
    pub mime: String,
    /// Decoded bytes.
    pub data: Vec<u8>,
}

/// What switchboard maps of a message.
#[derive(Debug, Clone, Default)]
pub struct ParsedMail {
    /// `Message-ID`, without angle brackets.
    pub message_id: Option<String>,
    /// The first `From` mailbox.
    pub from: Option<Mailbox>,
    /// Every `From` domain (DMARC exempts messages with several).
    pub from_count: usize,
    /// The first `Reply-To` mailbox.
    pub reply_to: Option<Mailbox>,
    /// `To` addresses, lowercased.
    pub to: Vec<String>,
    /// `Cc` addresses, lowercased.
    pub cc: Vec<String>,
    /// Subject, decoded.
    pub subject: Option<String>,
    /// `Date` as written.
    pub date: Option<String>,
    /// `In-Reply-To` ids.
    pub in_reply_to: Vec<String>,
    /// `References` ids, oldest first.
    pub references: Vec<String>,
    /// The conversation GUID of an Outlook `Thread-Index`, hex.
    pub thread_index_guid: Option<String>,
    /// The text an agent sees: quoted replies and signatures stripped.
    pub text: Option<String>,
    /// The whole text body.
    pub full_text: Option<String>,
    /// Attachments and inline images.
    pub attachments: Vec<Attachment>,
    /// Why this message must never be answered (RFC 3834), if so.
    pub no_reply: Option<&'static str>,
    /// A delivery status notification (RFC 3464): what it says of each recipient.
    pub dsn: Option<DeliveryReport>,
    /// The agent conversation an answer to this mail continues, when another switchboard's
    /// agent sent it ([`CHAIN_HEADER`]).
    pub agent_chain: Option<crate::message::AgentChain>,
}

/// The header an agent's mail carries its hop in an agent conversation by
/// (`hop=1; max-hops=3`), so that another switchboard answering it continues the chain.
pub const CHAIN_HEADER: &str = "X-Mentionable-Agent-Chain";

/// The value of [`CHAIN_HEADER`] for a mail written at `chain`'s hop.
#[must_use]
pub fn chain_header(chain: crate::message::AgentChain) -> String {
    format!("hop={}; max-hops={}", chain.hop, chain.max_hops)
}

/// The chain a turn answering a mail whose [`CHAIN_HEADER`] is `value` continues: the next hop,
/// at most the mail's `max-hops` (never above what any configuration allows).
#[must_use]
pub fn chain_of(value: &str) -> Option<crate::message::AgentChain> {
    let (mut hop, mut max_hops) = (None, None);
    for param in value.split(';') {
        let (k, v) = param.split_once('=')?;
        let v: u32 = v.trim().parse().ok()?;
        match k.trim().to_ascii_lowercase().as_str() {
            "hop" => hop = Some(v),
            "max-hops" => max_hops = Some(v.min(crate::config::MAX_MAX_HOPS)),
            _ => {}
        }
    }
    let (hop, max_hops) = (hop?, max_hops?);
    if hop == 0 || max_hops == 0 {
        return None;
    }
    let hop = hop.saturating_add(1);
    Some(crate::message::AgentChain {
        hop,
        max_hops,
        is_final: hop >= max_hops,
    })
}

/// The unfolded header fields of a raw message, in order.
#[must_use]
pub fn raw_headers(raw: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in header_lines(raw) {
        let line = String::from_utf8_lossy(line);
        if line.starts_with([' ', '\t']) {
            if let Some(last) = out.last_mut() {
                last.1.push(' ');
                last.1.push_str(line.trim());
            }
            continue;
        }
        match line.split_once(':') {
            Some((name, value)) => out.push((name.to_owned(), value.trim().to_owned())),
            None => out.push((line.into_owned(), String::new())),
        }
    }
    out
}

/// The lines of the header block, without their CRLF, up to the blank line that ends it.
fn header_lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = &raw[..header_end(raw)];
    std::iter::from_fn(move || {
        let (line, next) = match memchr::memmem::find(rest, b"\r\n") {
            Some(at) => (&rest[..at], &rest[at + 2..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        (!line.is_empty()).then_some(line)
    })
}

/// Where the header block ends (the offset of the blank line, or the end).
fn header_end(raw: &[u8]) -> usize {
    memchr::memmem::find(raw, b"\r\n\r\n").map_or(raw.len(), |p| p + 2)
}

/// Checks the raw bytes before any parser sees them: line endings, line lengths, header names.
///
/// # Errors
/// The first problem found.
pub fn check_raw(raw: &[u8]) -> Result<(), ParseError> {
    let mut start = 0;
    // Each line ends at the first CR or LF after its start, which must be a CR followed by LF.
    while let Some(len) = memchr::memchr2(b'\r', b'\n', &raw[start..]) {
        if len > MAX_LINE {
            return Err(ParseError::LineTooLong);
        }
        let end = start + len;
        if raw[end] != b'\r' || raw.get(end + 1) != Some(&b'\n') {
            return Err(ParseError::BareLineEnding);
        }
        start = end + 2;
    }
    if raw.len() - start > MAX_LINE {
        return Err(ParseError::LineTooLong);
    }
    for line in header_lines(raw) {
        if line.starts_with(b" ") || line.starts_with(b"\t") {
            continue;
        }
        let name = line.split(|&b| b == b':').next().unwrap_or(line);
        if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic() && *b != b':') {
            return Err(ParseError::BadHeaderName);
        }
    }
    Ok(())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Why a message must never be answered (RFC 3834 §2 and common practice), if so.
#[must_use]
pub fn no_reply_reason(headers: &[(String, String)], mail_from: &str) -> Option<&'static str> {
    if mail_from.is_empty() {
        return Some("null sender");
    }
    let local = mail_from
        .rsplit_once('@')
        .map_or(mail_from, |(l, _)| l)
        .to_ascii_lowercase();
    if local == "mailer-daemon" || local.starts_with("owner-") || local.ends_with("-request") {
        return Some("system sender");
    }
    if let Some(v) = header(headers, "Auto-Submitted") {
        let kw = v.split(';').next().unwrap_or("").trim();
        if !kw.eq_ignore_ascii_case("no") {
            return Some("auto-submitted");
        }
    }
    if headers
        .iter()
        .any(|(n, _)| n.len() > 5 && n[..5].eq_ignore_ascii_case("list-"))
    {
        return Some("mailing list");
    }
    if let Some(p) = header(headers, "Precedence") {
        let p = p.trim().to_ascii_lowercase();
        if matches!(p.as_str(), "bulk" | "list" | "junk") {
            return Some("bulk precedence");
        }
    }
    if header(headers, "X-Auto-Response-Suppress").is_some() {
        return Some("auto responses suppressed");
    }
    if header(headers, "Content-Type").is_some_and(|ct| {
        let ct = ct.to_ascii_lowercase();
        ct.starts_with("multipart/report") && ct.contains("delivery-status")
    }) {
        return Some("delivery status notification");
    }
    None
}

/// The number of `Received` headers.
#[must_use]
pub fn received_count(headers: &[(String, String)]) -> usize {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Received"))
        .count()
}

/// Strips `<>` and whitespace from a message id. An id with whitespace or control characters
/// inside is no id (it would go on into thread keys and the References of replies).
fn clean_id(id: &str) -> Option<String> {
    let id = id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!id.is_empty()
        && id.len() <= 995
        && !id.contains(|c: char| c.is_whitespace() || c.is_control()))
    .then(|| id.to_owned())
}

/// How many ids of a `References`/`In-Reply-To` list are kept besides the first: the first
/// (the thread's root) and the last ones (the nearest parents) are what threading needs, and
/// RFC 5322 §3.6.4 allows trimming the middle. Bounds the lookup's bind parameters.
pub const MAX_TAIL_IDS: usize = 20;

/// The `<id>`s in a header value, in order: the first and the last [`MAX_TAIL_IDS`].
#[must_use]
pub fn message_ids(value: &str) -> Vec<String> {
    let mut first = None;
    let mut tail = std::collections::VecDeque::with_capacity(MAX_TAIL_IDS + 1);
    let mut keep = |id: String| {
        if first.is_none() {
            first = Some(id);
        } else {
            if tail.len() == MAX_TAIL_IDS {
                tail.pop_front();
            }
            tail.push_back(id);
        }
    };
    let mut rest = value;
    let mut found = false;
    while let Some(start) = rest.find('<') {
        let Some(len) = rest[start..].find('>') else {
            break;
        };
        if let Some(id) = clean_id(&rest[start + 1..start + len]) {
            found = true;
            keep(id);
        }
        rest = &rest[start + len + 1..];
    }
    if !found {
        // Some clients omit the brackets around a single id.
        value.split_whitespace().filter_map(clean_id).for_each(keep);
    }
    first.into_iter().chain(tail).collect()
}

/// The conversation GUID (bytes 6..22) of an Outlook `Thread-Index`, hex.
#[must_use]
pub fn thread_index_guid(value: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.split_whitespace().collect::<String>())
        .ok()?;
    (bytes.len() >= 22 && (bytes.len() - 22) % 5 == 0).then(|| hex::encode(&bytes[6..22]))
}

/// The mailbox `addr` names: none without a local part and a domain, or with a control
/// character in either.
fn mailbox(addr: &mail_parser::Addr<'_>) -> Option<Mailbox> {
    let address = addr.address.as_deref()?.trim();
    let (local, domain) = address.rsplit_once('@')?;
    if local.is_empty() || domain.is_empty() || address.contains(char::is_control) {
        return None;
    }
    Some(Mailbox {
        name: addr
            .name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(sanitize_line),
        address: format!("{local}@{}", domain.to_ascii_lowercase()),
    })
}

fn addresses(a: Option<&mail_parser::Address<'_>>) -> Vec<Mailbox> {
    a.map(|a| a.iter().filter_map(mailbox).collect())
        .unwrap_or_default()
}

/// One line of text: control characters (CR, LF, tabs…) become spaces.
#[must_use]
pub fn sanitize_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

/// The deepest multipart nesting under the root part.
fn depth(msg: &mail_parser::Message<'_>, part: u32, level: usize, cap: usize) -> usize {
    if level > cap {
        return level;
    }
    let Some(p) = msg.parts.get(part as usize) else {
        return level;
    };
    match &p.body {
        PartType::Multipart(children) => children
            .iter()
            .map(|c| depth(msg, *c, level + 1, cap))
            .max()
            .unwrap_or(level + 1),
        PartType::Message(inner) => depth(inner, 0, level + 1, cap),
        _ => level,
    }
}

/// Parses a raw message that passed [`check_raw`].
///
/// # Errors
/// [`ParseError::Malformed`] when nothing sensible is in it, [`ParseError::TooDeep`] past
/// `max_depth` nested multiparts, [`ParseError::Loop`] past [`MAX_RECEIVED`] hops.
pub fn parse(raw: &[u8], mail_from: &str, max_depth: usize) -> Result<ParsedMail, ParseError> {
    parse_with(raw, mail_from, max_depth).map(|(p, _)| p)
}

/// mail-parser's parse of `raw`; `None` when it finds no message, or panics (0.11.9 does on some
/// malformed nested multiparts: "Invalid part ID, could not find multipart", found by the
/// `email_message` fuzz target). A panic here would end the SMTP session without an answer and
/// the sender would retry the same bytes forever; as malformed mail it gets `550 5.6.0`.
#[must_use]
pub fn parse_mime(raw: &[u8]) -> Option<mail_parser::Message<'_>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        MessageParser::default().parse(raw)
    }))
    .unwrap_or_else(|_| {
        tracing::warn!("the MIME parser failed on a message; refused as malformed");
        None
    })
}

/// As [`parse`], also returning mail-parser's parse, so authentication reads the very same
/// headers (the From that DMARC checks is the From the message is routed by).
///
/// # Errors
/// As [`parse`].
pub fn parse_with<'x>(
    raw: &'x [u8],
    mail_from: &str,
    max_depth: usize,
) -> Result<(ParsedMail, mail_parser::Message<'x>), ParseError> {
    let headers = raw_headers(raw);
    if received_count(&headers) > MAX_RECEIVED {
        return Err(ParseError::Loop);
    }
    let msg = parse_mime(raw).ok_or(ParseError::Malformed)?;
    if header(&headers, "From").is_none() && header(&headers, "Message-ID").is_none() {
        return Err(ParseError::Malformed);
    }
    if depth(&msg, 0, 0, max_depth) > max_depth {
        return Err(ParseError::TooDeep);
    }
    if msg
        .root_part()
        .headers()
        .iter()
        .filter(|h| h.name == HeaderName::From)
        .count()
        > 1
    {
        return Err(ParseError::ManyFrom);
    }
    // The first From address, as DMARC takes it: a first one that is no mailbox is no sender,
    // rather than leaving a later address to stand for it unauthenticated; one with control
    // characters is no address at all, and the message is refused.
    let first_from = msg.from().and_then(|a| a.first());
    if first_from
        .and_then(|a| a.address.as_deref())
        .is_some_and(|a| a.contains(char::is_control))
    {
        return Err(ParseError::ControlInFrom);
    }
    let from: Vec<Mailbox> = first_from.and_then(mailbox).into_iter().collect();
    let full_text = msg
        .body_text(0)
        .map(Cow::into_owned)
        .map(|t| t.replace("\r\n", "\n"));
    let text = full_text.as_deref().map(strip_reply);
    let mut attachments = Vec::new();
    for part in msg.attachments() {
        let mime = part.content_type().map_or_else(
            || "application/octet-stream".to_owned(),
            |ct| match ct.subtype() {
                Some(sub) => format!("{}/{}", ct.ctype(), sub).to_ascii_lowercase(),
                None => ct.ctype().to_ascii_lowercase(),
            },
        );
        if let PartType::Message(_) = part.body {
            // A forwarded message: kept whole.
        }
        attachments.push(Attachment {
            name: part.attachment_name().map(sanitize_line),
            mime,
            data: part.contents().to_vec(),
        });
    }
    let parsed = ParsedMail {
        message_id: msg.message_id().and_then(clean_id),
        from_count: msg.from().map_or(0, |a| a.iter().count()),
        from: from.into_iter().next(),
        reply_to: addresses(msg.reply_to()).into_iter().next(),
        to: addresses(msg.to())
            .into_iter()
            .map(|m| m.address.to_ascii_lowercase())
            .collect(),
        cc: addresses(msg.cc())
            .into_iter()
            .map(|m| m.address.to_ascii_lowercase())
            .collect(),
        subject: msg.subject().map(sanitize_line),
        date: header(&headers, "Date").map(sanitize_line),
        in_reply_to: header(&headers, "In-Reply-To")
            .map(message_ids)
            .unwrap_or_default(),
        references: header(&headers, "References")
            .map(message_ids)
            .unwrap_or_default(),
        thread_index_guid: header(&headers, "Thread-Index").and_then(thread_index_guid),
        text: text.filter(|t| !t.is_empty()),
        full_text,
        attachments,
        no_reply: no_reply_reason(&headers, mail_from),
        dsn: dsn(&msg),
        agent_chain: header(&headers, CHAIN_HEADER).and_then(chain_of),
    };
    Ok((parsed, msg))
}

/// Reads the `message/delivery-status` part of a report, if there is one.
fn dsn(msg: &mail_parser::Message<'_>) -> Option<DeliveryReport> {
    let ct = msg.content_type()?;
    if !(ct.ctype().eq_ignore_ascii_case("multipart")
        && ct
            .subtype()
            .is_some_and(|s| s.eq_ignore_ascii_case("report")))
    {
        return None;
    }
    msg.parts.iter().find_map(|part| {
        let pct = part.content_type()?;
        let is_status = pct.ctype().eq_ignore_ascii_case("message")
            && pct.subtype().is_some_and(|s| {
                s.eq_ignore_ascii_case("delivery-status")
                    || s.eq_ignore_ascii_case("global-delivery-status")
            });
        is_status.then(|| DeliveryReport::parse(&String::from_utf8_lossy(part.contents())))
    })
}

/// The new text of a reply: quoted lines, the attribution line above a quote
/// ("On … wrote:"), forwarded originals and the signature (after "-- ") are removed. When
/// nothing would be left, the text is kept whole.
#[must_use]
pub fn strip_reply(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept: Vec<&str> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_end();
        if t == "--" || *line == "-- " {
            break;
        }
        if t.starts_with("-----Original Message-----")
            || t.starts_with("________________________________")
            || t.starts_with("---------- Forwarded message")
        {
            break;
        }
        let lower = t.to_ascii_lowercase();
        if lower.ends_with("wrote:") || lower.ends_with("schrieb:") || lower.ends_with("a écrit :")
        {
            // "On Mon, … wrote:", possibly wrapped over two lines.
            if lower.starts_with("on ") || lower.starts_with("am ") || lower.starts_with("le ") {
                break;
            }
            if i > 0
                && lines[i - 1]
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("on ")
            {
                kept.pop();
                break;
            }
        }
        if t.starts_with('>') {
            continue;
        }
        kept.push(line);
    }
    while kept.last().is_some_and(|l| l.trim().is_empty()) {
        kept.pop();
    }
    while kept.first().is_some_and(|l| l.trim().is_empty()) {
        kept.remove(0);
    }
    let out = kept.join("\n");
    if out.trim().is_empty() {
        text.trim().to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// mail-parser 0.11.9 panics on this message (found by the `email_message` fuzz target);
    /// it is refused as malformed instead of ending the session.
    #[test]
    fn a_message_the_mime_parser_panics_on_is_malformed() {
        let raw = include_bytes!(
            "../../../fuzz/corpus/email_message/finding-mail-parser-multipart-panic"
        );
        assert!(matches!(
            parse_with(raw, "alhce@fuzz.test", 10),
            Err(ParseError::Malformed)
        ));
    }

    fn crlf(s: &str) -> Vec<u8> {
        s.replace('\n', "\r\n").into_bytes()
    }

    #[test]
    fn strips_quotes_and_signatures() {
        let t = "Yes, Tuesday works.\n\nOn Mon, 3 Nov 2026 at 10:00, Bob <b@x.org> wrote:\n> Does Tuesday work?\n> Bob\n";
        assert_eq!(strip_reply(t), "Yes, Tuesday works.");
        let t = "Sure.\n-- \nAlice\nACME Inc.\n";
        assert_eq!(strip_reply(t), "Sure.");
        let t = "Yes.\n\n-----Original Message-----\nFrom: Bob\nSubject: x\n\nquestion";
        assert_eq!(strip_reply(t), "Yes.");
        let t = "Fine\nOn Mon, 3 Nov 2026, Bob Example <b@x.org>\nwrote:\n> q";
        assert_eq!(strip_reply(t), "Fine");
        let t = "> only a quote\n";
        assert_eq!(strip_reply(t), "> only a quote");
        let t = "inline\n> q1\nanswer1\n> q2\nanswer2";
        assert_eq!(strip_reply(t), "inline\nanswer1\nanswer2");
    }

    #[test]
    fn loop_rules_follow_rfc_3834() {
        let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| ((*a).into(), (*b).into()))
                .collect()
        };
        assert_eq!(no_reply_reason(&h(&[]), ""), Some("null sender"));
        assert_eq!(
            no_reply_reason(&h(&[]), "MAILER-DAEMON@x.org"),
            Some("system sender")
        );
        assert_eq!(
            no_reply_reason(&h(&[]), "owner-list@x.org"),
            Some("system sender")
        );
        assert_eq!(
            no_reply_reason(&h(&[]), "list-request@x.org"),
            Some("system sender")
        );
        assert_eq!(
            no_reply_reason(&h(&[("Auto-Submitted", "auto-replied")]), "a@x.org"),
            Some("auto-submitted")
        );
        assert_eq!(
            no_reply_reason(&h(&[("auto-submitted", "No")]), "a@x.org"),
            None
        );
        assert_eq!(
            no_reply_reason(&h(&[("List-Id", "<l.x.org>")]), "a@x.org"),
            Some("mailing list")
        );
        assert_eq!(
            no_reply_reason(&h(&[("Precedence", "bulk")]), "a@x.org"),
            Some("bulk precedence")
        );
        assert_eq!(
            no_reply_reason(&h(&[("Precedence", "first-class")]), "a@x.org"),
            None
        );
        assert_eq!(
            no_reply_reason(&h(&[("X-Auto-Response-Suppress", "All")]), "a@x.org"),
            Some("auto responses suppressed")
        );
        assert_eq!(
            no_reply_reason(
                &h(&[(
                    "Content-Type",
                    "multipart/report; report-type=delivery-status; boundary=x"
                )]),
                "a@x.org"
            ),
            Some("delivery status notification")
        );
        assert_eq!(no_reply_reason(&h(&[("Subject", "hi")]), "a@x.org"), None);
    }

    #[test]
    fn raw_checks_refuse_smuggling_shapes_long_lines_and_odd_header_names() {
        assert_eq!(check_raw(&crlf("From: a@x.org\n\nhi\n")), Ok(()));
        assert_eq!(
            check_raw(b"From: a@x.org\r\n\r\nhi\n.\nMAIL FROM:<x>\r\n"),
            Err(ParseError::BareLineEnding)
        );
        assert_eq!(
            check_raw(b"From: a@x.org\r\n\r\nhi\r.\r\n"),
            Err(ParseError::BareLineEnding)
        );
        let long = format!("From: a@x.org\r\n\r\n{}\r\n", "a".repeat(999));
        assert_eq!(check_raw(long.as_bytes()), Err(ParseError::LineTooLong));
        // 998 characters is the limit (RFC 5322 §2.1.1), the last line's too, ended or not.
        let limit = format!(
            "From: a@x.org\r\n\r\n{}\r\n{}",
            "a".repeat(998),
            "b".repeat(998)
        );
        assert_eq!(check_raw(limit.as_bytes()), Ok(()));
        let tail = format!("From: a@x.org\r\n\r\nhi\r\n{}", "b".repeat(999));
        assert_eq!(check_raw(tail.as_bytes()), Err(ParseError::LineTooLong));
        // A CR at the very end, a lone LF first thing, a CR CR LF.
        for bad in [
            &b"From: a@x.org\r\n\r\nhi\r"[..],
            b"\nFrom: a@x.org\r\n",
            b"hi\r\r\n",
        ] {
            assert_eq!(check_raw(bad), Err(ParseError::BareLineEnding), "{bad:?}");
        }
        // Folded header lines are not names; 8-bit bytes in a name are refused.
        assert_eq!(check_raw(b"Subject: a\r\n b\r\n\tc\r\n\r\nhi\r\n"), Ok(()));
        assert_eq!(
            check_raw(b"Fr\xc3\xb6m: a@x.org\r\n\r\nhi\r\n"),
            Err(ParseError::BadHeaderName)
        );
        assert_eq!(
            check_raw(&crlf("Fr om: a@x.org\n\nhi\n")),
            Err(ParseError::BadHeaderName)
        );
        assert_eq!(
            check_raw(&crlf("From: a@x.org\nno colon here\n\nhi\n")),
            Err(ParseError::BadHeaderName)
        );
    }

    #[test]
    fn threading_fields() {
        let raw = crlf(
            "From: \"Alice\" <alice@Example.COM>\nTo: echo@agents.test, Other <o@agents.test>\nCc: c@agents.test\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\nMessage-ID: <m2@example.com>\nIn-Reply-To: <m1@agents.test>\nReferences: <m0@example.com>\n <m1@agents.test>\nThread-Index: AQHZpP3Jr6zG5Ug0S0GZqZ0n4r0xYQ==\n\nHello\n",
        );
        let p = parse(&raw, "alice@example.com", 10).unwrap();
        assert_eq!(p.message_id.as_deref(), Some("m2@example.com"));
        assert_eq!(p.from.as_ref().unwrap().address, "alice@example.com");
        assert_eq!(p.from.as_ref().unwrap().name.as_deref(), Some("Alice"));
        assert_eq!(p.to, vec!["echo@agents.test", "o@agents.test"]);
        assert_eq!(p.cc, vec!["c@agents.test"]);
        assert_eq!(p.subject.as_deref(), Some("Grüße"));
        assert_eq!(p.in_reply_to, vec!["m1@agents.test"]);
        assert_eq!(p.references, vec!["m0@example.com", "m1@agents.test"]);
        assert_eq!(p.thread_index_guid.as_deref().map(str::len), Some(32));
        assert_eq!(p.text.as_deref(), Some("Hello"));
        assert_eq!(p.no_reply, None);
    }

    #[test]
    fn long_reference_lists_keep_the_root_and_the_last_ids() {
        let value: String = (0..5000).map(|i| format!(" <r{i}@x.org>")).collect();
        let ids = message_ids(&value);
        assert_eq!(ids.len(), 1 + MAX_TAIL_IDS);
        assert_eq!(ids[0], "r0@x.org");
        assert_eq!(ids[1], format!("r{}@x.org", 5000 - MAX_TAIL_IDS));
        assert_eq!(ids[MAX_TAIL_IDS], "r4999@x.org");
        assert_eq!(message_ids("<a@x> <b@x>"), vec!["a@x", "b@x"]);
        assert_eq!(message_ids("a@x"), vec!["a@x"]);
    }

    /// Found by the `email_message` fuzz target: with two From headers, mail was routed by the
    /// last and DMARC checked the first; with a first From address that is no mailbox, routed by
    /// the second.
    #[test]
    fn the_sender_is_the_from_that_dmarc_checks() {
        let two = crlf("From: a@fuzz.test\nFrom: victim@bank.example\nMessage-ID: <t@x>\n\nHi\n");
        assert_eq!(
            parse(&two, "a@fuzz.test", 10).unwrap_err(),
            ParseError::ManyFrom
        );
        let first_bad = crlf("From: @fuzz.test, victim@bank.example\nMessage-ID: <u@x>\n\nHi\n");
        let p = parse(&first_bad, "a@fuzz.test", 10).unwrap();
        assert_eq!(p.from, None);
        assert_eq!(p.from_count, 2);
        let one = crlf("From: A <a@Fuzz.Test>, b@x.org\nMessage-ID: <v@x>\n\nHi\n");
        assert_eq!(
            parse(&one, "a@fuzz.test", 10)
                .unwrap()
                .from
                .unwrap()
                .address,
            "a@fuzz.test"
        );
    }

    /// Found by the `email_message` fuzz target: a From domain with a NUL (and a non-ASCII
    /// capital) went on as the sender's address. A From address with control characters is
    /// refused (`550 5.6.0`); other addresses with them are dropped.
    #[test]
    fn a_from_address_with_control_characters_is_refused() {
        let raw = include_bytes!(
            "../../../fuzz/corpus/email_message/found-unicode-case-in-from-domain.eml"
        );
        assert_eq!(
            parse(raw, "list-owner@fuzz.test", 10).unwrap_err(),
            ParseError::ControlInFrom
        );
        for from in [
            "a@fuzz\x01.test",
            "A <a@fuzz.test\x7f>",
            "a\x00b@fuzz.test",
            "a@fuzz.test\x00, b@fuzz.test",
        ] {
            let raw = crlf(&format!("From: {from}\nMessage-ID: <c@x>\n\nHi\n"));
            check_raw(&raw).unwrap();
            assert_eq!(
                parse(&raw, "a@fuzz.test", 10).unwrap_err(),
                ParseError::ControlInFrom,
                "{from:?}"
            );
        }
        let raw = crlf(
            "From: a@fuzz.test\nReply-To: r@fuzz\x01.test\nTo: helper@agents.test, x@agents\x00.test\nMessage-ID: <d@x>\n\nHi\n",
        );
        let p = parse(&raw, "a@fuzz.test", 10).unwrap();
        assert_eq!(p.from.unwrap().address, "a@fuzz.test");
        assert_eq!(p.reply_to, None);
        assert_eq!(p.to, vec!["helper@agents.test"]);
    }

    /// Found by the `email_message` fuzz target: NULs inside a Message-ID were kept.
    #[test]
    fn message_ids_with_control_characters_are_not_kept() {
        let raw = crlf(
            "From: a@x.org\nMessage-ID: <r\0\0eply-2@x.org>\nIn-Reply-To: <p\x01@x.org> <q@x.org>\n\nHi\n",
        );
        check_raw(&raw).unwrap();
        let p = parse(&raw, "a@x.org", 10).unwrap();
        assert_eq!(p.message_id, None);
        assert_eq!(p.in_reply_to, vec!["q@x.org"]);
    }

    #[test]
    fn html_only_mail_gives_text_and_attachments_are_kept() {
        let raw = crlf(
            "From: a@x.org\nTo: echo@agents.test\nMessage-ID: <h@x.org>\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b1\n\n--b1\nContent-Type: text/html; charset=iso-8859-1\nContent-Transfer-Encoding: quoted-printable\n\n<p>Hall=F6 <b>Welt</b></p>\n--b1\nContent-Type: image/png\nContent-Disposition: attachment; filename=\"dot.png\"\nContent-Transfer-Encoding: base64\n\niVBORw0KGgo=\n--b1--\n",
        );
        let p = parse(&raw, "a@x.org", 10).unwrap();
        let text = p.text.unwrap();
        assert!(text.contains("Hallö") && text.contains("Welt"), "{text}");
        assert!(!text.contains("<p>"), "{text}");
        assert_eq!(p.attachments.len(), 1);
        assert_eq!(p.attachments[0].name.as_deref(), Some("dot.png"));
        assert_eq!(p.attachments[0].mime, "image/png");
        assert_eq!(p.attachments[0].data, b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn nesting_past_the_cap_and_loops_are_refused() {
        let mut body = String::from("hi\n");
        for i in 0..12 {
            body = format!(
                "Content-Type: multipart/mixed; boundary=b{i}\n\n--b{i}\n{body}\n--b{i}--\n"
            );
        }
        let raw = crlf(&format!(
            "From: a@x.org\nMessage-ID: <d@x.org>\nMIME-Version: 1.0\n{body}"
        ));
        assert_eq!(parse(&raw, "a@x.org", 10).unwrap_err(), ParseError::TooDeep);
        assert!(parse(&raw, "a@x.org", 20).is_ok());
        let mut hops = String::new();
        for i in 0..51 {
            hops.push_str(&format!("Received: from h{i} by h{}\n", i + 1));
        }
        let raw = crlf(&format!(
            "{hops}From: a@x.org\nMessage-ID: <l@x.org>\n\nhi\n"
        ));
        assert_eq!(parse(&raw, "a@x.org", 10).unwrap_err(), ParseError::Loop);
    }

    #[test]
    fn dsn_is_read() {
        let raw = crlf(
            "From: MAILER-DAEMON@mx.example.com\nTo: bounces+r1@agents.test\nMessage-ID: <b@mx>\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=r\n\n--r\nContent-Type: text/plain\n\nfailed\n--r\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.com\n\nFinal-Recipient: rfc822; bob@example.com\nAction: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 no such user\n--r--\n",
        );
        let p = parse(&raw, "", 10).unwrap();
        let d = p.dsn.unwrap();
        assert_eq!(d.reporting_mta, "mx.example.com");
        let failed = d.failure().unwrap();
        assert_eq!(
            (failed.recipient.as_str(), failed.status.as_str()),
            ("bob@example.com", "5.1.1")
        );
        assert_eq!(failed.diagnostic, "550 5.1.1 no such user");
        assert_eq!(p.no_reply, Some("null sender"));
    }

    #[test]
    fn postfix_and_exim_bounces_are_read() {
        let postfix = parse(
            &crlf(include_str!(
                "../../../tests/fixtures/email/dsn-postfix.eml"
            )),
            "",
            10,
        )
        .unwrap();
        let report = postfix.dsn.unwrap();
        assert_eq!(report.reporting_mta, "mx.relay.test");
        let failed = report.failure().unwrap();
        assert_eq!(failed.recipient, "alice@example.com");
        assert_eq!(failed.status, "5.1.1");
        assert_eq!(failed.remote_mta, "in.example.com");
        assert_eq!(
            failed.diagnostic,
            "550 5.1.1 <alice@example.com>: Recipient address rejected: User unknown in virtual mailbox table"
        );
        assert_eq!(postfix.no_reply, Some("null sender"));

        let exim = parse(
            &crlf(include_str!("../../../tests/fixtures/email/dsn-exim.eml")),
            "",
            10,
        )
        .unwrap();
        let report = exim.dsn.unwrap();
        assert_eq!(report.reporting_mta, "mail.example.net");
        let failed = report.failure().unwrap();
        assert_eq!(
            (failed.recipient.as_str(), failed.status.as_str()),
            ("bob@example.net", "5.0.0")
        );
        assert_eq!(failed.remote_mta, "mx.example.net");
        assert_eq!(
            failed.diagnostic,
            "550 5.2.1 <bob@example.net>: mailbox disabled"
        );
        assert_eq!(
            exim.references,
            ["0193a1b2-0000-7000-8000-00000000cafe@agents.test"]
        );
    }

    #[test]
    fn a_delay_warning_is_no_failure() {
        let raw = crlf(
            "From: MAILER-DAEMON@mx.relay.test\nTo: bounces+r1@agents.test\nMessage-ID: <w@mx>\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=r\n\n--r\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.relay.test\n\nFinal-Recipient: rfc822; bob@example.com\nAction: delayed\nStatus: 4.4.1\nDiagnostic-Code: X-Postfix; connect to in.example.com[192.0.2.25]:25: Connection refused\nWill-Retry-Until: Sun, 4 Dec 2026 06:00:00 +0000\n--r--\n",
        );
        let report = parse(&raw, "", 10).unwrap().dsn.unwrap();
        assert_eq!(report.recipients[0].action, "delayed");
        assert!(report.failure().is_none());
    }

    #[test]
    fn an_agents_mail_carries_its_hop_and_an_answer_continues_it() {
        let chain = crate::message::AgentChain {
            hop: 1,
            max_hops: 3,
            is_final: false,
        };
        let value = chain_header(chain);
        assert_eq!(value, "hop=1; max-hops=3");
        let next = chain_of(&value).unwrap();
        assert_eq!((next.hop, next.max_hops, next.is_final), (2, 3, false));
        assert_eq!(chain_of("Max-Hops=3;hop=2").map(|c| c.is_final), Some(true));
        for bad in ["", "hop=1", "hop=x; max-hops=3", "hop=0; max-hops=3", "hop"] {
            assert_eq!(chain_of(bad), None, "{bad}");
        }
        let raw = format!(
            "{CHAIN_HEADER}: {value}\r\nFrom: a@x.example\r\nTo: b@y.example\r\n\
             Subject: s\r\n\r\nhi\r\n"
        );
        let parsed = parse(raw.as_bytes(), "a@x.example", 10).unwrap();
        assert_eq!(parsed.agent_chain.map(|c| c.hop), Some(2));
    }
}
