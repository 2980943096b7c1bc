//! Transcripts of the command grammar, without sockets: each test is a dialogue with a
//! [`Session`] whose [`Receiver`] is a fake that takes `@agents.test` addresses and records the
//! messages handed to it.

use std::sync::Mutex;

use futures_util::FutureExt as _;
use prometheus_client::metrics::gauge::Gauge;

use super::{DataReader, Flow, Limits, Receiver, Session, Settings};
use crate::transports::email::smtp::{DataBudget, Rcpt, Reply, SessionEnvelope};

/// A message the fake was handed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Delivered {
    helo: String,
    mail_from: String,
    rcpts: Vec<Rcpt>,
    tls: bool,
    raw: Vec<u8>,
}

/// Takes every `@agents.test` address but `nobody@` (refused for good) and `busy@` (refused
/// for now), and the empty path (the bare `postmaster`); answers 451 to a message containing
/// `fail`, 250 to the rest.
#[derive(Default)]
struct Fake {
    delivered: Mutex<Vec<Delivered>>,
}

impl Receiver for Fake {
    async fn rcpt(&self, address: &str) -> Result<Rcpt, Reply> {
        if address.is_empty() {
            return Ok(Rcpt::Role("postmaster".into()));
        }
        let refused = Reply::new(550, [5, 1, 1], "Mailbox unavailable");
        let (local, domain) = address.rsplit_once('@').ok_or(refused.clone())?;
        match local {
            _ if domain != "agents.test" => Err(refused),
            "nobody" => Err(refused),
            "busy" => Err(Reply::new(450, [4, 2, 1], "Mailbox busy")),
            _ => Ok(match local.strip_prefix("bounces+") {
                Some(token) => Rcpt::Bounce(token.to_owned()),
                None => Rcpt::Agent(local.split('+').next().unwrap_or(local).to_owned()),
            }),
        }
    }

    async fn message(&self, envelope: SessionEnvelope<'_>, raw: &[u8]) -> Reply {
        if raw.windows(4).any(|w| w == b"fail") {
            return Reply::new(451, [4, 3, 0], "Try again later");
        }
        let mut delivered = self.delivered.lock().unwrap();
        delivered.push(Delivered {
            helo: envelope.helo.to_owned(),
            mail_from: envelope.mail_from.to_owned(),
            rcpts: envelope.rcpts.to_vec(),
            tls: envelope.tls,
            raw: raw.to_vec(),
        });
        Reply::new(
            250,
            [2, 0, 0],
            format!("Message queued as {}", delivered.len()),
        )
    }
}

fn settings() -> Settings {
    Settings {
        hostname: "mx.agents.test".into(),
        limits: Limits {
            max_message_bytes: 50_000,
            max_recipients: 2,
            max_commands: 100,
            idle_timeout_seconds: 60,
            session_timeout_seconds: 600,
        },
        starttls: false,
        budget: DataBudget::new(1 << 20, &Gauge::default()),
    }
}

/// One side of a dialogue: what the client sends, what the session answers.
struct Dialogue<'a> {
    session: Session<'a, Fake>,
    fake: &'a Fake,
    flow: Flow,
}

impl<'a> Dialogue<'a> {
    fn new(settings: &'a Settings, fake: &'a Fake) -> Self {
        Self {
            session: Session::new(settings, fake, "192.0.2.1:50000".parse().unwrap()),
            fake,
            flow: Flow::Read,
        }
    }

    /// Sends `bytes` in one read; the replies, each whole (a multi-line reply is one string).
    fn send(&mut self, bytes: impl AsRef<[u8]>) -> Vec<String> {
        let mut out = Vec::new();
        self.flow = self
            .session
            .ingest(bytes.as_ref(), &mut out)
            .now_or_never()
            .expect("the fake receiver never waits");
        let text = String::from_utf8(out).unwrap();
        let mut replies = Vec::new();
        let mut reply = String::new();
        for line in text.split_inclusive("\r\n") {
            assert!(line.ends_with("\r\n"), "a partial reply line: {text:?}");
            reply.push_str(line);
            if line.as_bytes().get(3) != Some(&b'-') {
                replies.push(std::mem::take(&mut reply));
            }
        }
        assert!(reply.is_empty(), "an unfinished multi-line reply: {text:?}");
        replies
    }

    /// Sends one command line; its one reply must start with `want`.
    #[track_caller]
    fn cmd(&mut self, line: &str, want: &str) -> String {
        let replies = self.send(format!("{line}\r\n"));
        assert_eq!(replies.len(), 1, "{line}: {replies:?}");
        assert!(
            replies[0].starts_with(want),
            "{line}: want {want}, got {replies:?}"
        );
        replies[0].clone()
    }

    /// Sends `bytes` in one read; the replies must start with `want`, one to one, in order.
    #[track_caller]
    fn group(&mut self, bytes: impl AsRef<[u8]>, want: &[&str]) {
        let replies = self.send(bytes);
        assert_eq!(replies.len(), want.len(), "want {want:?}, got {replies:?}");
        for (got, want) in replies.iter().zip(want) {
            assert!(got.starts_with(want), "want {want:?}, got {replies:?}");
        }
    }

    /// EHLO, MAIL FROM and RCPT TO, one at a time, then DATA.
    #[track_caller]
    fn transaction(&mut self, from: &str, to: &[&str]) {
        self.cmd("EHLO client.test", "250");
        self.cmd(&format!("MAIL FROM:<{from}>"), "250 2.1.0");
        for t in to {
            self.cmd(&format!("RCPT TO:<{t}>"), "250 2.1.5");
        }
        self.cmd("DATA", "354");
    }

    fn delivered(&self) -> Vec<Delivered> {
        self.fake.delivered.lock().unwrap().clone()
    }

    /// The body of the only message delivered so far.
    #[track_caller]
    fn only_body(&self) -> Vec<u8> {
        let d = self.delivered();
        assert_eq!(d.len(), 1, "{d:?}");
        d[0].raw.clone()
    }
}

/// A dialogue under the default [`settings`] changed by `tweak`.
fn talk(tweak: impl FnOnce(&mut Settings), script: impl FnOnce(&mut Dialogue<'_>)) {
    let mut settings = settings();
    tweak(&mut settings);
    let fake = Fake::default();
    script(&mut Dialogue::new(&settings, &fake));
}

fn agent(name: &str) -> Rcpt {
    Rcpt::Agent(name.into())
}

#[test]
fn the_greeting_names_the_host() {
    let settings = settings();
    let fake = Fake::default();
    let t = Dialogue::new(&settings, &fake);
    let mut out = Vec::new();
    t.session.greeting(&mut out);
    assert_eq!(out, b"220 mx.agents.test ESMTP switchboard\r\n");
}

#[test]
fn ehlo_lists_the_extensions_and_helo_names_the_host() {
    talk(
        |_| {},
        |t| {
            let ehlo = t.cmd("EHLO client.test", "250-mx.agents.test");
            for ext in [
                "PIPELINING",
                "SIZE 50000",
                "8BITMIME",
                "SMTPUTF8",
                "ENHANCEDSTATUSCODES",
            ] {
                assert!(ehlo.contains(ext), "{ext} missing: {ehlo}");
            }
            assert!(!ehlo.contains("STARTTLS"), "not offered: {ehlo}");
            t.cmd("HELO old.client.test", "250 2.0.0 mx.agents.test");
            t.cmd(
                "HELP",
                "214 2.0.0 EHLO HELO MAIL RCPT DATA RSET NOOP QUIT STARTTLS",
            );
        },
    );
    talk(
        |s| s.starttls = true,
        |t| {
            let ehlo = t.cmd("EHLO client.test", "250-");
            assert!(ehlo.contains("STARTTLS"), "offered: {ehlo}");
        },
    );
}

#[test]
fn commands_out_of_sequence_are_503() {
    talk(
        |_| {},
        |t| {
            t.cmd(
                "MAIL FROM:<a@b.example>",
                "503 5.5.1 Polite people say EHLO first",
            );
            t.cmd("RCPT TO:<echo@agents.test>", "503 5.5.1 MAIL first");
            t.cmd("DATA", "503 5.5.1 MAIL first");
            t.cmd("EHLO client.test", "250");
            t.cmd("RCPT TO:<echo@agents.test>", "503 5.5.1 MAIL first");
            t.cmd("DATA", "503 5.5.1 MAIL first");
            t.cmd("MAIL FROM:<a@b.example>", "250 2.1.0 OK");
            t.cmd("MAIL FROM:<a@b.example>", "503 5.5.1 Sender already given");
            t.cmd("DATA", "554 5.5.1 No valid recipients");
            t.cmd("RCPT TO:<nobody@agents.test>", "550");
            t.cmd("DATA", "554 5.5.1 No valid recipients");
        },
    );
}

#[test]
fn rset_helo_and_ehlo_end_the_transaction() {
    talk(
        |_| {},
        |t| {
            t.cmd("EHLO client.test", "250");
            for reset in ["RSET", "EHLO again.test", "HELO again.test"] {
                t.cmd("MAIL FROM:<a@b.example>", "250");
                t.cmd("RCPT TO:<echo@agents.test>", "250");
                t.cmd(reset, "250");
                t.cmd("DATA", "503 5.5.1 MAIL first");
                t.cmd("RCPT TO:<echo@agents.test>", "503 5.5.1 MAIL first");
            }
            // RSET keeps the HELO.
            t.cmd("RSET", "250 2.0.0 OK");
            t.cmd("MAIL FROM:<a@b.example>", "250");
        },
    );
}

#[test]
fn noop_and_quit() {
    talk(
        |_| {},
        |t| {
            t.cmd("NOOP", "250 2.0.0 OK");
            t.cmd("NOOP anything", "250 2.0.0 OK");
            assert_eq!(t.flow, Flow::Read);
            // What follows QUIT is never read.
            t.group("QUIT\r\nNOOP\r\n", &["221 2.0.0 Bye"]);
            assert_eq!(t.flow, Flow::Close);
        },
    );
}

#[test]
fn syntax_errors_are_500_and_501_and_disabled_commands_502() {
    talk(
        |_| {},
        |t| {
            t.cmd("BOGUS", "500 5.5.1 Invalid command");
            t.cmd("EHLO client.test", "250");
            t.cmd("MAIL FROM:nobody", "501");
            t.cmd("MAIL FROM:<a@b.example> SIZE=huge", "501");
            t.cmd("MAIL FROM:<a@b.example> NOSUCHPARAM=1", "504 5.5.4");
            t.cmd("MAIL FROM:<a@b.example>", "250");
            t.cmd("RCPT TO:echo", "501");
            for disabled in ["VRFY echo", "EXPN staff"] {
                t.cmd(disabled, "502 5.5.1 Command disabled");
            }
            for missing in ["BDAT 10 LAST", "AUTH PLAIN", "ETRN agents.test", "LHLO x"] {
                t.cmd(missing, "502 5.5.1 Command not implemented");
            }
            // None of them touched the transaction.
            t.cmd("RCPT TO:<echo@agents.test>", "250");
            t.cmd("DATA", "354");
        },
    );
}

#[test]
fn a_command_line_past_the_line_limit_is_refused() {
    talk(
        |_| {},
        |t| {
            // More than 4,096 bytes without a line end.
            t.group(
                format!("NOOP {}", "x".repeat(5_000)),
                &["500 5.5.2 Line is too long"],
            );
            assert_eq!(t.flow, Flow::Read);
            // The rest of that line is dropped with it, up to its end: one reply per line.
            t.group("x".repeat(5_000), &[]);
            t.group("\r\n", &[]);
            // The same once part of the line is buffered.
            t.group("NOOP ", &[]);
            t.group("y".repeat(5_000), &["500 5.5.2 Line is too long"]);
            // A command in the rest of the line never runs; what follows the line end does.
            t.group("QUIT\r\n", &[]);
            assert_eq!(t.flow, Flow::Read);
            t.cmd("NOOP", "250");
        },
    );
}

/// The replies to `wire` fed in pieces cut at `cuts`, one reply per string.
fn replies(wire: &[u8], cuts: &[usize]) -> Vec<String> {
    let settings = settings();
    let fake = Fake::default();
    let mut t = Dialogue::new(&settings, &fake);
    let mut out = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain([&wire.len()]) {
        out.extend(t.send(&wire[from..to]));
        if t.flow != Flow::Read {
            break;
        }
        from = to;
    }
    out
}

/// Found by the `smtp_session` fuzz target: a malformed command read in one piece took the next
/// line with it (`MAIL FROM` with no colon: smtp-proto looked for it on the next line), where
/// read a byte at a time it was answered alone, or dropped. Each command line is now framed
/// before it is parsed, so the replies are the same however the reads split the bytes.
#[test]
fn a_malformed_command_is_answered_alone_however_the_reads_split_it() {
    let cases: [(&[u8], &[&str]); 3] = [
        (
            b"EHLO c.example\r\nMAIL FROM\r\nNOOP\r\n",
            &["250-mx.agents.test", "501 5.5.2", "250 2.0.0 OK"],
        ),
        (
            b"EHLO c.example\r\nMAIL FROM\nNOOP\r\n",
            &["250-mx.agents.test", "500 5.5.2", "250 2.0.0 OK"],
        ),
        (
            b"EHLO c.example\r\nRCPT TO\r\nNOOP\r\nMAIL FROM:<a@b.example>\rRSET\r\nRSET\r\n",
            &[
                "250-mx.agents.test",
                "501 5.5.2",
                "250 2.0.0 OK",
                "500 5.5.2",
                "250 2.0.0 OK",
            ],
        ),
    ];
    for (wire, want) in cases {
        let whole = replies(wire, &[]);
        assert_eq!(whole.len(), want.len(), "{whole:?}");
        for (got, want) in whole.iter().zip(want) {
            assert!(got.starts_with(want), "want {want:?}, got {whole:?}");
        }
        let bytewise: Vec<usize> = (1..wire.len()).collect();
        assert_eq!(replies(wire, &bytewise), whole, "one byte at a time");
        for cut in 0..=wire.len() {
            assert_eq!(replies(wire, &[cut]), whole, "cut at {cut}");
        }
    }
    // The inputs the fuzz target kept, after their settings byte.
    for kept in [
        &include_bytes!("../../../../fuzz/corpus/smtp_session/found-split-command-dropped")[1..],
        &include_bytes!("../../../../fuzz/corpus/smtp_session/found-bare-lf-swallows-a-line")[1..],
    ] {
        let whole = replies(kept, &[]);
        let bytewise: Vec<usize> = (1..kept.len()).collect();
        assert_eq!(replies(kept, &bytewise), whole, "one byte at a time");
    }
}

#[test]
fn a_command_split_across_reads_is_answered_once_whole() {
    talk(
        |_| {},
        |t| {
            t.group("EH", &[]);
            t.group("LO client.test\r", &[]);
            t.group("\nMAIL FROM:<a@", &["250-mx.agents.test"]);
            t.group("b.example>\r\n", &["250 2.1.0"]);
        },
    );
}

#[test]
fn recipients_are_asked_of_the_receiver_and_capped() {
    talk(
        |_| {},
        |t| {
            t.cmd("EHLO client.test", "250");
            t.cmd("MAIL FROM:<a@b.example>", "250");
            t.cmd(
                "RCPT TO:<nobody@agents.test>",
                "550 5.1.1 Mailbox unavailable",
            );
            t.cmd("RCPT TO:<echo@elsewhere.test>", "550 5.1.1");
            t.cmd("RCPT TO:<busy@agents.test>", "450 4.2.1 Mailbox busy");
            t.cmd("RCPT TO:<echo@agents.test>", "250 2.1.5 OK");
            t.cmd("RCPT TO:<helper+tag@agents.test>", "250 2.1.5");
            // A recipient already accepted is fine, past the cap too.
            t.cmd("RCPT TO:<helper@agents.test>", "250 2.1.5");
            t.cmd(
                "RCPT TO:<bounces+x@agents.test>",
                "452 4.5.3 Too many recipients",
            );
            // The receiver is asked first: an address that is not ours is still 550.
            t.cmd("RCPT TO:<nobody@agents.test>", "550 5.1.1");
            t.cmd("DATA", "354");
            t.group("x\r\n.\r\n", &["250"]);
            assert_eq!(t.delivered()[0].rcpts, [agent("echo"), agent("helper")]);
        },
    );
}

#[test]
fn a_declared_size_over_the_limit_is_552() {
    talk(
        |_| {},
        |t| {
            t.cmd("EHLO client.test", "250");
            t.cmd(
                "MAIL FROM:<a@b.example> SIZE=60000",
                "552 5.3.4 Message too big for system",
            );
            t.cmd("MAIL FROM:<a@b.example> SIZE=50000", "250");
        },
    );
}

#[test]
fn mail_parameters_and_the_null_sender() {
    talk(
        |_| {},
        |t| {
            t.cmd("EHLO client.test", "250");
            t.cmd("MAIL FROM:<> BODY=8BITMIME SMTPUTF8", "250 2.1.0");
            t.cmd("RCPT TO:<echo@agents.test>", "250");
            t.cmd("DATA", "354");
            t.group("bounce\r\n.\r\n", &["250"]);
            let d = t.delivered();
            assert_eq!(d[0].mail_from, "");
            assert_eq!(d[0].helo, "client.test");
        },
    );
}

#[test]
fn a_pipelined_group_is_answered_in_order_in_one_write() {
    talk(
        |_| {},
        |t| {
            t.cmd("EHLO client.test", "250");
            t.group(
                "MAIL FROM:<bob@b.example>\r\nRCPT TO:<echo@agents.test>\r\nRCPT TO:<nobody@agents.test>\r\nRCPT TO:<helper@agents.test>\r\nDATA\r\n",
                &["250 2.1.0", "250 2.1.5", "550 5.1.1", "250 2.1.5", "354"],
            );
            assert!(t.session.receiving_data());
            // The end of one message and the next transaction in one write, as Exim sends
            // them: the reply after the dot comes before the next group's replies.
            t.group(
                "first\r\n.\r\nMAIL FROM:<carol@c.example>\r\nRCPT TO:<echo@agents.test>\r\nDATA\r\nsecond\r\n.\r\nNOOP\r\n",
                &[
                    "250 2.0.0 Message queued as 1",
                    "250 2.1.0",
                    "250 2.1.5",
                    "354",
                    "250 2.0.0 Message queued as 2",
                    "250 2.0.0 OK",
                ],
            );
            assert!(!t.session.receiving_data());
            let d = t.delivered();
            assert_eq!(
                d[0],
                Delivered {
                    helo: "client.test".into(),
                    mail_from: "bob@b.example".into(),
                    rcpts: vec![agent("echo"), agent("helper")],
                    tls: false,
                    raw: b"first\r\n".to_vec(),
                }
            );
            assert_eq!(d[1].mail_from, "carol@c.example");
            assert_eq!(d[1].rcpts, [agent("echo")]);
            assert_eq!(d[1].raw, b"second\r\n");
        },
    );
}

#[test]
fn data_ends_only_at_crlf_dot_crlf_and_dots_are_unstuffed() {
    talk(
        |_| {},
        |t| {
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("a\r\n..x\r\n...\r\n.y\r\n", &[]);
            t.group(".\r\n", &["250"]);
            assert_eq!(t.only_body(), b"a\r\n.x\r\n..\r\ny\r\n");
        },
    );
    // Right after 354 a dot ends an empty message, or is a stuffed first line.
    talk(
        |_| {},
        |t| {
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group(".\r\n", &["250"]);
            assert_eq!(t.only_body(), b"");
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("..x\r\n.\r\n", &["250"]);
            assert_eq!(t.delivered()[1].raw, b".x\r\n");
        },
    );
}

#[test]
fn bare_lf_and_cr_never_end_data_so_nothing_is_smuggled() {
    for end in [
        "\n.\n",
        "\r\n.\n",
        "\n.\r\n",
        "\r.\r\n",
        "\r.\r",
        "\r\n.\r\r\n",
        "\r\n.\r\r\r\n",
    ] {
        talk(
            |_| {},
            |t| {
                t.transaction("bob@b.example", &["echo@agents.test"]);
                let smuggled = format!(
                    "hi{end}MAIL FROM:<admin@agents.test>\r\nRCPT TO:<echo@agents.test>\r\nDATA\r\nsmuggled\r\n"
                );
                t.group(&smuggled, &[]);
                assert!(t.session.receiving_data(), "{end:?} ended DATA");
                t.group(".\r\n", &["250"]);
                // The smuggled commands are part of the one message (a dot after CRLF is
                // unstuffed as in any line); none was run.
                let body = smuggled.replacen("\r\n.", "\r\n", 1);
                assert_eq!(t.only_body(), body.as_bytes(), "{end:?}");
                t.cmd("RCPT TO:<echo@agents.test>", "503");
            },
        );
    }
}

#[test]
fn a_message_is_the_same_however_the_reads_split_it() {
    let body = "From: bob@b.example\r\n\r\n..stuffed\r\nline\r\n";
    let wire = format!("{body}.\r\nNOOP\r\n");
    for cut in 0..=wire.len() {
        talk(
            |_| {},
            |t| {
                t.transaction("bob@b.example", &["echo@agents.test"]);
                let (head, tail) = wire.as_bytes().split_at(cut);
                let mut replies = t.send(head);
                replies.extend(t.send(tail));
                assert_eq!(replies.len(), 2, "cut at {cut}: {replies:?}");
                assert!(replies[0].starts_with("250 2.0.0 Message queued"));
                assert!(replies[1].starts_with("250 2.0.0 OK"));
                assert_eq!(t.only_body(), body.replace("..s", ".s").as_bytes());
            },
        );
    }
}

#[test]
fn a_message_over_the_size_limit_is_read_to_its_end_and_refused() {
    talk(
        |s| s.limits.max_message_bytes = 100,
        |t| {
            t.transaction("bob@b.example", &["echo@agents.test"]);
            // Refused only after the final dot, however many reads it takes.
            for _ in 0..5 {
                t.group("x".repeat(60) + "\r\n", &[]);
                assert!(t.session.receiving_data());
            }
            t.group(
                ".\r\nNOOP\r\n",
                &["552 5.3.4 Message too big for system", "250"],
            );
            assert!(t.delivered().is_empty());
            // The transaction is over.
            t.cmd("RCPT TO:<echo@agents.test>", "503");
            // Over the limit and ended in the same read.
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("y".repeat(200) + "\r\n.\r\n", &["552 5.3.4"]);
            // At the limit is fine.
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("z".repeat(98) + "\r\n.\r\n", &["250"]);
            assert_eq!(t.only_body().len(), 100);
        },
    );
}

#[test]
fn a_look_alike_terminator_in_a_message_not_kept_smuggles_nothing_either() {
    for end in [
        "\r\n.\r\r\n",
        "\r\n.\r\r\r\n",
        "\n.\n",
        "\r\n.\n",
        "\n.\r\n",
        "\r.\r\n",
    ] {
        talk(
            |s| s.limits.max_message_bytes = 100,
            |t| {
                t.transaction("bob@b.example", &["echo@agents.test"]);
                // Over the limit first, so the rest is read without being kept.
                let smuggled = format!(
                    "{}{end}MAIL FROM:<admin@agents.test>\r\nRCPT TO:<echo@agents.test>\r\nDATA\r\nsmuggled\r\n",
                    "x".repeat(200)
                );
                t.group(&smuggled, &[]);
                assert!(t.session.receiving_data(), "{end:?} ended DATA");
                t.group(".\r\n", &["552 5.3.4"]);
                assert!(t.delivered().is_empty(), "{end:?}");
                t.cmd("RCPT TO:<echo@agents.test>", "503");
            },
        );
    }
}

#[test]
fn a_message_past_the_memory_budget_is_deferred_452() {
    let gauge = Gauge::default();
    talk(
        |s| s.budget = DataBudget::new(64 * 1024, &gauge),
        |t| {
            // Another session holds the whole budget.
            let mut other = t.session.settings.budget.hold();
            assert!(other.cover(64 * 1024));
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("hello\r\n", &[]);
            t.group(
                ".\r\n",
                &["452 4.3.1 Insufficient system storage, try again later"],
            );
            assert!(t.delivered().is_empty());
            t.cmd("NOOP", "250");
            // Given back, the retry lands and the session's share is returned after it.
            drop(other);
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("hello\r\n.\r\n", &["250"]);
            assert_eq!(gauge.get(), 0);
        },
    );
}

#[test]
fn the_receivers_answer_after_the_dot_ends_the_transaction() {
    talk(
        |_| {},
        |t| {
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("please fail\r\n.\r\n", &["451 4.3.0 Try again later"]);
            t.cmd("RCPT TO:<echo@agents.test>", "503");
            t.transaction("bob@b.example", &["echo@agents.test"]);
            t.group("fine\r\n.\r\n", &["250 2.0.0 Message queued as 1"]);
        },
    );
}

#[test]
fn past_the_command_cap_the_session_closes_421() {
    talk(
        |s| s.limits.max_commands = 3,
        |t| {
            t.group(
                "NOOP\r\nBOGUS\r\nNOOP\r\nNOOP\r\nNOOP\r\n",
                &[
                    "250",
                    "500",
                    "250",
                    "421 4.7.0 Too many commands, closing connection",
                ],
            );
            assert_eq!(t.flow, Flow::Close);
        },
    );
    // A syntax error past the cap is answered, then the 421.
    talk(
        |s| s.limits.max_commands = 1,
        |t| {
            t.group("NOOP\r\nBOGUS\r\n", &["250", "500", "421 4.7.0"]);
            assert_eq!(t.flow, Flow::Close);
        },
    );
}

#[test]
fn starttls_drops_what_follows_and_starts_anew() {
    talk(
        |_| {},
        |t| {
            t.cmd("STARTTLS", "502 5.7.0 TLS not available");
        },
    );
    talk(
        |s| s.starttls = true,
        |t| {
            t.cmd("EHLO client.test", "250");
            t.cmd("MAIL FROM:<bob@b.example>", "250");
            t.group(
                "STARTTLS\r\nMAIL FROM:<evil@b.example>\r\nRCPT TO:<echo@agents.test>\r\n",
                &["220 2.0.0 Ready to start TLS"],
            );
            assert_eq!(t.flow, Flow::StartTls);
            t.session.tls_started();
            // Neither the injected commands nor the transaction before STARTTLS survive.
            t.cmd("RCPT TO:<echo@agents.test>", "503");
            t.cmd(
                "MAIL FROM:<bob@b.example>",
                "503 5.5.1 Polite people say EHLO first",
            );
            let ehlo = t.cmd("EHLO client.test", "250");
            assert!(!ehlo.contains("STARTTLS"), "{ehlo}");
            t.cmd("STARTTLS", "504 5.7.4 Already in TLS");
            t.cmd("MAIL FROM:<bob@b.example>", "250");
            t.cmd("RCPT TO:<echo@agents.test>", "250");
            t.cmd("DATA", "354");
            t.group("over TLS\r\n.\r\n", &["250"]);
            assert!(t.delivered()[0].tls);
        },
    );
}

/// The DATA reader alone, as it starts after 354.
fn feed(input: &[u8]) -> (bool, Vec<u8>) {
    let mut rx = DataReader::new();
    let mut msg = Vec::new();
    let done = rx.ingest(&mut input.iter(), Some(&mut msg));
    (done, msg)
}

#[test]
fn an_empty_body_ends_at_the_first_dot() {
    assert_eq!(feed(b".\r\n"), (true, Vec::new()));
}

#[test]
fn a_stuffed_first_line_loses_one_dot() {
    assert_eq!(feed(b"..x\r\nb\r\n.\r\n"), (true, b".x\r\nb\r\n".to_vec()));
}

#[test]
fn a_body_without_leading_dot_is_unchanged() {
    assert_eq!(feed(b"a\r\n.\r\n"), (true, b"a\r\n".to_vec()));
}

#[test]
fn the_bare_postmaster_reaches_the_receiver_as_the_empty_path_in_any_case() {
    talk(
        |_| {},
        |t| {
            t.cmd("EHLO client.test", "250");
            t.cmd("MAIL FROM:<>", "250 2.1.0");
            // RFC 5321 §4.1.1.3: `Postmaster` without a domain, in any case.
            t.cmd("RCPT TO:<Postmaster>", "250 2.1.5");
            t.cmd("RCPT TO:<POSTMASTER>", "250 2.1.5");
            t.cmd("DATA", "354");
            t.cmd("Subject: x\r\n\r\nhello\r\n.", "250");
            let d = t.delivered();
            assert_eq!(
                d[0].rcpts,
                vec![Rcpt::Role("postmaster".into())],
                "one recipient"
            );
            assert_eq!(d[0].mail_from, "");
        },
    );
}
