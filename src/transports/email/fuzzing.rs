//! Fuzz entry points into the email transport (`crate::fuzzing` says what they are for): the
//! SMTP session with its DATA framing, and a message's parse and authentication.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Mutex, OnceLock, PoisonError};

use memchr::memmem;
use prometheus_client::metrics::gauge::Gauge;

use super::auth::{AuthOutcome, Envelope, StaticTxt, Verifier, aligned};
use super::parse::{self, MAX_TAIL_IDS, ParsedMail};
use super::session::{Flow, Limits, Receiver, Session, Settings};
use super::smtp::{DataBudget, Rcpt, Reply, SessionEnvelope};
use crate::config::DnsMode;
use crate::fuzzing::{now, one_line};

/// The one domain whose mail can authenticate: its SPF record admits 192.0.2.1, its DKIM
/// key is [`DKIM_KEY`] under the selector `fz`, and it publishes DMARC `p=reject`.
pub const MAIL_DOMAIN: &str = "fuzz.test";

/// The DKIM key of [`MAIL_DOMAIN`] (Ed25519, selector `fz`), as published. The seed corpus
/// holds a message signed with it; its private half was thrown away.
pub const DKIM_KEY: &str = "v=DKIM1; k=ed25519; p=Yuux4TSBgMj/wUunuxYRFH/GMGwApwfo1NDUX/V99j8=";

/// Where every message comes from: the address the SPF record of [`MAIL_DOMAIN`] admits.
const MAIL_PEER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

/// The envelope sender of every message: in [`MAIL_DOMAIN`], so SPF passes for it.
const MAIL_FROM: &str = "sender@fuzz.test";

/// The SMTP session and its DATA framing, from the first command to the close.
///
/// The first byte chooses the settings (bit 0: STARTTLS offered; bit 1: a body memory budget too
/// small for any message, so every non-empty body is read to its end and refused); the rest is
/// what the client sends. The session reads it in one piece, a line at a time (each read ending
/// at an LF, as clients write), one byte at a time, and in pieces cut at pseudo-random points
/// (drawn from a hash of the input, so a failure replays), and must say and do exactly the same
/// each way: the same replies, the same messages handed on, the same end. Each reply line is
/// well formed and free of control characters. Read one byte at a time, each message body ends
/// at the first `<CRLF>.<CRLF>` after the `354` and nowhere else, and what the receiver is handed
/// is that body with its dot-stuffing undone.
pub fn smtp_session(data: &[u8]) {
    let Some((&flags, stream)) = data.split_first() else {
        return;
    };
    let settings = smtp_settings(flags);
    let whole = smtp_run(&settings, stream, Reads::Whole);
    check_replies(&whole.out);
    for reads in [Reads::Lines, Reads::Bytes, Reads::Random(fnv1a(data))] {
        let other = smtp_run(&settings, stream, reads);
        assert!(
            whole == other,
            "the session answered differently when the bytes came as {reads:?}:\n  whole: {whole:?}\n  other: {other:?}"
        );
    }
}

/// How the client's bytes arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// In one read.
    Whole,
    /// One read per line, each ending at an LF.
    Lines,
    /// One read per byte.
    Bytes,
    /// Reads of 1 to 64 bytes, their lengths drawn from this seed.
    Random(u64),
}

/// FNV-1a of `data`: the seed of the pseudo-random reads, so that they replay with the input.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `stream` cut into reads of 1 to 64 bytes, their lengths drawn by xorshift64 from `seed`.
fn random_reads(stream: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed | 1;
    let mut rest = stream;
    let mut out = Vec::new();
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Mostly short reads, now and then a longer one: 1 to 2^k bytes, k from 0 to 6.
        let cap = 1usize << (state % 7);
        let len = usize::try_from(state >> 8).unwrap_or(0) % cap + 1;
        let (head, tail) = rest.split_at(len.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

fn smtp_settings(flags: u8) -> Settings {
    let starved = flags & 2 != 0;
    Settings {
        hostname: "mx.fuzz.test".into(),
        limits: Limits {
            // With a starved budget no body is kept, whatever its size; without one, bodies over
            // 2 KiB are refused, which short inputs can reach.
            max_message_bytes: if starved { 1 << 30 } else { 2048 },
            max_recipients: 3,
            max_commands: 40,
            idle_timeout_seconds: 60,
            session_timeout_seconds: 600,
        },
        starttls: flags & 1 != 0,
        budget: DataBudget::new(if starved { 1024 } else { 1 << 20 }, &Gauge::default()),
    }
}

/// Takes `@fuzz.test` mailboxes (`busy@` is refused for now, `nobody@` for good) and every
/// message, recording each.
#[derive(Default)]
struct FakeReceiver {
    delivered: Mutex<Vec<Vec<u8>>>,
}

impl FakeReceiver {
    fn delivered(&self) -> Vec<Vec<u8>> {
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Receiver for FakeReceiver {
    async fn rcpt(&self, address: &str) -> Result<Rcpt, Reply> {
        let refused = Reply::new(550, [5, 1, 1], "Mailbox unavailable");
        let Some((local, domain)) = address.rsplit_once('@') else {
            return Err(refused);
        };
        if !domain.eq_ignore_ascii_case(MAIL_DOMAIN) {
            return Err(refused);
        }
        match local {
            "busy" => Err(Reply::new(450, [4, 2, 1], "Mailbox busy")),
            "nobody" => Err(refused),
            _ => Ok(match local.strip_prefix("bounces+") {
                Some(token) => Rcpt::Bounce(token.to_owned()),
                None => Rcpt::Agent(local.to_ascii_lowercase()),
            }),
        }
    }

    async fn message(&self, _envelope: SessionEnvelope<'_>, raw: &[u8]) -> Reply {
        let mut delivered = self
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        delivered.push(raw.to_vec());
        Reply::new(
            250,
            [2, 0, 0],
            format!("Message queued as {}", delivered.len()),
        )
    }
}

/// What a session said and did.
#[derive(Debug, PartialEq, Eq)]
struct Transcript {
    out: Vec<u8>,
    delivered: Vec<Vec<u8>>,
    flow: Flow,
}

fn smtp_run(settings: &Settings, stream: &[u8], reads: Reads) -> Transcript {
    let fake = FakeReceiver::default();
    let peer = SocketAddr::new(IpAddr::V4(MAIL_PEER), 50000);
    let mut session = Session::new(settings, &fake, peer);
    let mut out = Vec::new();
    session.greeting(&mut out);
    if reads != Reads::Bytes {
        let mut flow = Flow::Read;
        let chunks: Vec<&[u8]> = match reads {
            Reads::Lines => stream.split_inclusive(|&b| b == b'\n').collect(),
            Reads::Random(seed) => random_reads(stream, seed),
            Reads::Whole | Reads::Bytes => vec![stream],
        };
        for chunk in chunks {
            flow = now(session.ingest(chunk, &mut out));
            if flow != Flow::Read {
                break;
            }
        }
        return Transcript {
            out,
            delivered: fake.delivered(),
            flow,
        };
    }
    // One byte at a time, watching where each body starts and ends.
    let mut flow = Flow::Read;
    let mut body_start = None;
    for (i, byte) in stream.iter().enumerate() {
        let before = session.receiving_data();
        let count = fake.delivered().len();
        flow = now(session.ingest(std::slice::from_ref(byte), &mut out));
        match (before, session.receiving_data()) {
            (false, true) => body_start = Some(i + 1),
            (true, false) => {
                let start = body_start.take().unwrap_or_default();
                let delivered = fake.delivered();
                let kept = (delivered.len() > count).then(|| delivered[count].as_slice());
                check_body(&stream[start..=i], kept);
            }
            _ => {}
        }
        if flow != Flow::Read {
            break;
        }
    }
    if let (Some(start), Flow::Read) = (body_start, flow) {
        let mut t = b"\r\n".to_vec();
        t.extend_from_slice(&stream[start..]);
        assert!(
            memmem::find(&t, b"\r\n.\r\n").is_none(),
            "a body went on past its <CRLF>.<CRLF>: {:?}",
            String::from_utf8_lossy(&t)
        );
    }
    Transcript {
        out,
        delivered: fake.delivered(),
        flow,
    }
}

/// `wire` is what came between the `354` and the end of a body, its terminator included; `kept`
/// what the receiver was handed, if the body was kept.
fn check_body(wire: &[u8], kept: Option<&[u8]>) {
    // The 354 reply ended a line, so the body starts at the start of a line.
    let mut t = b"\r\n".to_vec();
    t.extend_from_slice(wire);
    assert_eq!(
        memmem::find(&t, b"\r\n.\r\n").map(|at| at + 5),
        Some(t.len()),
        "a body ended somewhere other than at its first <CRLF>.<CRLF>: {:?}",
        String::from_utf8_lossy(wire)
    );
    let Some(kept) = kept else { return };
    // Without the final ".\r\n", a line's leading dot removed.
    let lines = &t[..t.len() - 3];
    let mut body = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i..].starts_with(b"\r\n.") {
            body.extend_from_slice(b"\r\n");
            i += 3;
        } else {
            body.push(lines[i]);
            i += 1;
        }
    }
    assert_eq!(
        kept,
        &body[2..],
        "the receiver was handed something other than the body"
    );
}

/// Every reply line: three digits, a space or a dash, printable text, CRLF.
fn check_replies(out: &[u8]) {
    for line in out.split_inclusive(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(line);
        let Some(line) = line.strip_suffix(b"\r\n") else {
            panic!("a reply line does not end in CRLF: {text:?}");
        };
        assert!(
            line.len() >= 4
                && line[..3].iter().all(u8::is_ascii_digit)
                && matches!(line[3], b' ' | b'-'),
            "a malformed reply line: {text:?}"
        );
        assert!(
            !line.iter().any(u8::is_ascii_control),
            "a control character in a reply line: {text:?}"
        );
    }
}

/// A raw message after the final dot: the checks before parsing, the parse the message is
/// routed by, then DKIM, SPF, ARC and DMARC against the static DNS table, as from
/// `sender@fuzz.test` at 192.0.2.1.
///
/// What is kept of the message is one line each (no control characters), addresses have a
/// local part and a lowercase domain, and thread id lists stay bounded. DKIM passes only under
/// the one published key; a message that passes DMARC goes on as from a sender in
/// [`MAIL_DOMAIN`], and when it has a From, as from the From that DMARC checked.
pub fn email_message(raw: &[u8]) {
    if let Some((mail, auth)) = email_outcome(raw) {
        check_auth(&mail, &auth);
    }
}

/// What the inbound side makes of `raw`, if it gets as far as authentication.
fn email_outcome(raw: &[u8]) -> Option<(ParsedMail, AuthOutcome)> {
    parse::check_raw(raw).ok()?;
    // mail-parser panics on some inputs, which `parse::parse_mime` catches in the server; the
    // fuzzer's panic hook would abort on it first, so such inputs stop here, under a quiet hook.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let parses =
        std::panic::catch_unwind(|| mail_parser::MessageParser::default().parse(raw).is_some());
    std::panic::set_hook(hook);
    if parses.is_err() {
        return None;
    }
    let (mail, parsed) = parse::parse_with(raw, MAIL_FROM, 10).ok()?;
    check_parsed(&mail);
    let env = Envelope {
        ip: IpAddr::V4(MAIL_PEER),
        helo: "mail.fuzz.test",
        mail_from: MAIL_FROM,
    };
    let (runtime, verifier) = mail_verifier();
    let auth = runtime.block_on(verifier.verify(raw, &parsed, &env));
    Some((mail, auth))
}

fn mail_verifier() -> &'static (tokio::runtime::Runtime, Verifier) {
    static VERIFIER: OnceLock<(tokio::runtime::Runtime, Verifier)> = OnceLock::new();
    VERIFIER.get_or_init(|| {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("a runtime for the harness: {e}"),
        };
        let records: HashMap<String, String> = [
            ("fz._domainkey.fuzz.test", DKIM_KEY),
            ("fuzz.test", "v=spf1 ip4:192.0.2.1 -all"),
            ("_dmarc.fuzz.test", "v=DMARC1; p=reject"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let verifier = runtime.block_on(async {
            let txt = StaticTxt::new(&records, true)?;
            Verifier::new(DnsMode::Offline, txt, "mx.fuzz.test")
        });
        match verifier {
            Ok(v) => (runtime, v),
            Err(e) => panic!("the harness's verifier: {e}"),
        }
    })
}

fn check_parsed(mail: &ParsedMail) {
    for (what, m) in [("From", &mail.from), ("Reply-To", &mail.reply_to)] {
        let Some(m) = m else { continue };
        let Some((local, domain)) = m.address.rsplit_once('@') else {
            panic!("{what} address without @: {:?}", m.address);
        };
        assert!(
            !m.address.contains(char::is_control),
            "{what} address with a control character: {:?}",
            m.address
        );
        assert!(
            !local.is_empty() && !domain.is_empty(),
            "{what} {:?}",
            m.address
        );
        assert_eq!(domain, domain.to_ascii_lowercase(), "{what} domain case");
        if let Some(name) = &m.name {
            one_line(what, name);
        }
    }
    for a in mail.to.iter().chain(&mail.cc) {
        assert_eq!(*a, a.to_ascii_lowercase(), "To/Cc addresses are lowercased");
        assert!(!a.contains(char::is_control), "To/Cc address {a:?}");
    }
    for (what, v) in [
        ("Subject", &mail.subject),
        ("Date", &mail.date),
        ("Message-ID", &mail.message_id),
    ] {
        if let Some(v) = v {
            one_line(what, v);
        }
    }
    for ids in [&mail.in_reply_to, &mail.references] {
        assert!(ids.len() <= MAX_TAIL_IDS + 1, "{} ids kept", ids.len());
        for id in ids {
            assert!(
                !id.is_empty() && !id.contains(char::is_whitespace),
                "message id {id:?}"
            );
        }
    }
    if let Some(guid) = &mail.thread_index_guid {
        assert!(
            guid.len() == 32 && guid.bytes().all(|b| b.is_ascii_hexdigit()),
            "Thread-Index GUID {guid:?}"
        );
    }
    assert!(
        mail.text.as_ref().is_none_or(|t| !t.is_empty()),
        "an empty text is None"
    );
    for a in &mail.attachments {
        assert_eq!(a.mime, a.mime.to_ascii_lowercase(), "attachment media type");
        if let Some(name) = &a.name {
            one_line("an attachment name", name);
        }
    }
    for r in mail.dsn.iter().flat_map(|d| &d.recipients) {
        for field in [
            &r.recipient,
            &r.action,
            &r.status,
            &r.diagnostic,
            &r.remote_mta,
        ] {
            one_line("a DSN's field", field);
        }
    }
}

fn check_auth(mail: &ParsedMail, auth: &AuthOutcome) {
    assert!(
        !auth.results.contains(['\r', '\n']),
        "Authentication-Results spans lines: {:?}",
        auth.results
    );
    if let Some((d, s)) = &auth.dkim_pass {
        assert!(
            d.eq_ignore_ascii_case(MAIL_DOMAIN) && s.eq_ignore_ascii_case("fz"),
            "DKIM passed for d={d} s={s}, which publish no key"
        );
    }
    if auth.dmarc_pass {
        // The sender the message is handed on as: its From, else the envelope sender. (DMARC
        // may pass on a later From address when the first is no address at all; the message
        // then goes on as from its envelope sender.)
        let routed = mail.from.as_ref().map_or(MAIL_FROM, |m| m.address.as_str());
        let domain = routed.rsplit_once('@').map_or("", |(_, d)| d);
        assert!(
            aligned(domain, MAIL_DOMAIN),
            "DMARC passed (From domain {:?}) but the message is handed on as from {routed:?}",
            auth.from_domain
        );
        // The same domain, but for case: mail-auth lowercases beyond ASCII.
        if mail.from.is_some() {
            assert_eq!(
                domain.to_lowercase(),
                auth.from_domain,
                "DMARC checked one From, the message is routed by another"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::seeds;
    use crate::transports::email::inbound::{Vouched, what_auth_vouches_for};

    #[test]
    fn the_signed_seed_passes_dkim_and_dmarc_under_the_harness_key() {
        let (_, raw) = seeds("email_message")
            .into_iter()
            .find(|(name, _)| name == "dkim-signed.eml")
            .unwrap();
        let (mail, auth) = email_outcome(&raw).unwrap();
        assert_eq!(auth.dkim_pass, Some(("fuzz.test".into(), "fz".into())));
        assert!(auth.dkim_aligned && auth.dmarc_pass, "{auth:?}");
        assert_eq!(mail.from.unwrap().address, "alice@fuzz.test");
        // The same message with its body changed no longer passes DKIM.
        let mut forged = raw.clone();
        let at = forged.len() - 4;
        forged[at] = b'X';
        let (_, auth) = email_outcome(&forged).unwrap();
        assert_eq!(auth.dkim_pass, None, "{}", auth.results);
    }

    /// Kept by the `email_message` fuzz target: the first From address is no mailbox, and
    /// DMARC passed on a later one. The message goes on as from its envelope sender, which DMARC
    /// never checked, so the pass vouches for nobody: no `email-dmarc` evidence, and the From is
    /// not authenticated.
    #[test]
    fn a_dmarc_pass_without_a_usable_from_vouches_for_nobody() {
        let (_, raw) = seeds("email_message")
            .into_iter()
            .find(|(name, _)| name == "found-dmarc-on-a-later-from.eml")
            .unwrap();
        let (mail, auth) = email_outcome(&raw).unwrap();
        assert!(
            auth.dmarc_pass,
            "the input still passes DMARC: {}",
            auth.results
        );
        assert_eq!(mail.from, None);
        assert_eq!(
            what_auth_vouches_for(&mail, &auth),
            Vouched {
                dmarc: false,
                from_authenticated: false
            }
        );
    }
}
