//! The SMTP session as a state machine that holds no socket: bytes go in through
//! [`Session::ingest`], reply lines come out in a buffer the caller writes, and the returned
//! [`Flow`] says whether to read on, start TLS or close. Command lines are framed by the
//! session's own reader (`line`: CRLF-terminated, no bare CR or LF, at most 4,096 bytes) and
//! only then parsed, one whole line at a time, by `smtp-proto`, so a command is answered the
//! same however the reads split its bytes. What needs the rest of the server (whether a recipient is ours, what becomes of a finished
//! message) is asked of a [`Receiver`]; the connection loop ([`super::connection`]) does the
//! reading and writing, the timeouts, the TLS handshake and the shutdown.
//!
//! Commands per session and recipients per message are capped; DATA ends only on
//! `<CRLF>.<CRLF>` (no other CR or LF around a dot ends it: `data`), and a message over the size limit is read to its
//! end without being kept and answered 552. Bodies being received draw on one memory budget
//! shared by every session ([`DataBudget`]); a message that would go over it is read to its end
//! without being kept and answered `452 4.3.1`, so the client retries later.
//!
//! Every command found in the bytes of one [`Session::ingest`] is answered into the same buffer,
//! so the replies to a pipelined group (RFC 2920), the reply after a final dot and the replies to
//! the next message's commands sent behind it included, leave in one write.

use std::borrow::Cow;
use std::net::SocketAddr;

use smtp_proto::{
    EXT_8BIT_MIME, EXT_ENHANCED_STATUS_CODES, EXT_PIPELINING, EXT_SIZE, EXT_SMTP_UTF8,
    EXT_START_TLS, EhloResponse, Request,
};

use super::smtp::{DataBudget, Held, Rcpt, Reply, SessionEnvelope};
use crate::config::EmailConfig;

mod data;
mod line;
#[cfg(test)]
mod tests;

use data::DataReader;
use line::{Line, LineReader};

/// Session limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest message.
    pub max_message_bytes: usize,
    /// Recipients per message.
    pub max_recipients: usize,
    /// Commands per session.
    pub max_commands: usize,
    /// Silence allowed.
    pub idle_timeout_seconds: u64,
    /// Whole session.
    pub session_timeout_seconds: u64,
}

impl From<&EmailConfig> for Limits {
    fn from(c: &EmailConfig) -> Self {
        Self {
            max_message_bytes: c.max_message_bytes,
            max_recipients: c.max_recipients,
            max_commands: c.max_commands,
            idle_timeout_seconds: c.idle_timeout_seconds,
            session_timeout_seconds: c.session_timeout_seconds,
        }
    }
}

/// What every session of a listener shares.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The name the server greets with and answers HELO and EHLO with.
    pub hostname: String,
    /// The limits.
    pub limits: Limits,
    /// Whether STARTTLS is offered (outside TLS).
    pub starttls: bool,
    /// Memory for message bodies being received.
    pub budget: DataBudget,
}

/// What the session asks of the rest of the server.
///
/// Both methods are awaited inside [`Session::ingest`], in command order, so their answers are
/// written in order among the other replies of a pipelined group.
pub trait Receiver: Sync {
    /// Whether mail for `address` (the RCPT TO path, without its angle brackets) is taken: the
    /// recipient it names, or the reply that refuses it.
    fn rcpt(&self, address: &str) -> impl Future<Output = Result<Rcpt, Reply>> + Send;

    /// Whether mail from `from` (the MAIL FROM path, without its angle brackets; empty for the
    /// null sender) is taken at all: `Err` is the reply that refuses it. Everyone by default.
    fn mail(&self, from: &str) -> impl Future<Output = Result<(), Reply>> + Send {
        let _ = from;
        async { Ok(()) }
    }

    /// A complete message (dot-stuffing undone, the final dot gone) with the envelope it came
    /// with; the reply is what the client is told after the final dot.
    fn message(
        &self,
        envelope: SessionEnvelope<'_>,
        raw: &[u8],
    ) -> impl Future<Output = Reply> + Send;
}

/// What the connection does once the replies in the buffer are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read on.
    Read,
    /// The client asked for STARTTLS and was told `220`: drop whatever it sent behind the
    /// command unread, run the TLS handshake, then call [`Session::tls_started`].
    StartTls,
    /// Close the connection (after QUIT, or past the command cap).
    Close,
}

/// One SMTP session, from the greeting to the close, without its socket.
pub struct Session<'a, R> {
    settings: &'a Settings,
    receiver: &'a R,
    lines: LineReader,
    mode: Mode,
    state: State,
}

impl<R> std::fmt::Debug for Session<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("peer", &self.state.peer)
            .field("tls", &self.state.tls)
            .field("helo", &self.state.helo)
            .field("mail_from", &self.state.mail_from)
            .field("rcpts", &self.state.rcpts)
            .field("commands", &self.state.commands)
            .field("receiving_data", &!matches!(self.mode, Mode::Command))
            .finish_non_exhaustive()
    }
}

/// What the session knows of its client and the transaction under way.
struct State {
    peer: SocketAddr,
    tls: bool,
    helo: Option<String>,
    mail_from: Option<String>,
    rcpts: Vec<Rcpt>,
    commands: usize,
}

/// What the next bytes are.
enum Mode {
    /// Commands.
    Command,
    /// A message body being kept, with its share of the memory budget.
    Data(DataReader, Vec<u8>, Held),
    /// A message body that is not kept, read to its end; then this reply.
    Skip(DataReader, Reply),
}

/// What a command leads to, beyond its reply.
enum Step {
    /// The reply is written; the next command follows.
    Next,
    /// `DATA` was accepted: the message body follows.
    Data,
    /// `STARTTLS` was accepted.
    StartTls,
    /// `QUIT`.
    Quit,
}

impl<'a, R: Receiver> Session<'a, R> {
    /// A new session with the client at `peer`, before the greeting.
    #[must_use]
    pub fn new(settings: &'a Settings, receiver: &'a R, peer: SocketAddr) -> Self {
        Self {
            settings,
            receiver,
            lines: LineReader::default(),
            mode: Mode::Command,
            state: State {
                peer,
                tls: false,
                helo: None,
                mail_from: None,
                rcpts: Vec::new(),
                commands: 0,
            },
        }
    }

    /// Appends the `220` greeting to `out`.
    pub fn greeting(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"220 ");
        out.extend_from_slice(self.settings.hostname.as_bytes());
        out.extend_from_slice(b" ESMTP switchboard\r\n");
    }

    /// Whether a message body is being received (kept or not): the session is not between
    /// messages.
    #[must_use]
    pub fn receiving_data(&self) -> bool {
        !matches!(self.mode, Mode::Command)
    }

    /// The TLS handshake after [`Flow::StartTls`] succeeded: the session begins anew, with no
    /// HELO, no transaction and nothing of the plaintext left to parse. The command count goes
    /// on.
    pub fn tls_started(&mut self) {
        self.state.tls = true;
        self.state.helo = None;
        self.state.reset();
        self.lines = LineReader::default();
        self.mode = Mode::Command;
    }

    /// Takes the bytes the client sent, appending the replies they call for to `out` in order.
    /// The returned [`Flow`] says what to do once `out` is written; after [`Flow::StartTls`]
    /// and [`Flow::Close`] the bytes not yet read are dropped.
    pub async fn ingest(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Flow {
        let limits = &self.settings.limits;
        let mut iter = bytes.iter();
        loop {
            match &mut self.mode {
                Mode::Data(rx, msg, held) => {
                    let done = rx.ingest(&mut iter, Some(msg));
                    let refusal = if msg.len() > limits.max_message_bytes {
                        Some(Reply::new(552, [5, 3, 4], "Message too big for system"))
                    } else if !held.cover(msg.len()) {
                        tracing::warn!(peer = %self.state.peer, "SMTP body memory budget exhausted; message deferred");
                        Some(Reply::new(
                            452,
                            [4, 3, 1],
                            "Insufficient system storage, try again later",
                        ))
                    } else {
                        None
                    };
                    if let Some(reply) = refusal {
                        // Not kept: the rest of the body is read and dropped, then refused.
                        if done {
                            self.mode = Mode::Command;
                            reply.write(out);
                            self.state.reset();
                        } else {
                            self.mode = Mode::Skip(*rx, reply);
                        }
                        continue;
                    }
                    if !done {
                        return Flow::Read;
                    }
                    // The budget stays held while the message is checked and stored.
                    let Mode::Data(_, raw, held) = std::mem::replace(&mut self.mode, Mode::Command)
                    else {
                        continue;
                    };
                    let reply = self.receiver.message(self.state.envelope(), &raw).await;
                    drop(raw);
                    drop(held);
                    reply.write(out);
                    self.state.reset();
                }
                Mode::Skip(rx, reply) => {
                    if !rx.ingest(&mut iter, None) {
                        return Flow::Read;
                    }
                    reply.write(out);
                    self.mode = Mode::Command;
                    self.state.reset();
                }
                Mode::Command => {
                    let max_commands = limits.max_commands;
                    let Some(line) = self.lines.next(&mut iter) else {
                        return Flow::Read;
                    };
                    let parsed = match line {
                        Line::Command(line) => {
                            Request::parse(&mut line.iter()).map_err(|e| syntax_reply(&e))
                        }
                        Line::BareLineEnding => Err(Reply::new(
                            500,
                            [5, 5, 2],
                            "Syntax error: a command line ends with CRLF and holds no other CR or LF",
                        )),
                        Line::TooLong => Err(Reply::new(500, [5, 5, 2], "Line is too long")),
                    };
                    let req = match parsed {
                        Ok(req) => req,
                        Err(reply) => {
                            self.state.commands += 1;
                            reply.write(out);
                            if self.state.flooding(max_commands, out) {
                                return Flow::Close;
                            }
                            continue;
                        }
                    };
                    self.state.commands += 1;
                    if self.state.flooding(max_commands, out) {
                        return Flow::Close;
                    }
                    match self
                        .state
                        .command(req, self.settings, self.receiver, out)
                        .await
                    {
                        Step::Next => {}
                        Step::Data => {
                            out.extend_from_slice(
                                b"354 Start mail input; end with <CRLF>.<CRLF>\r\n",
                            );
                            self.mode = Mode::Data(
                                DataReader::new(),
                                Vec::with_capacity(8192),
                                self.settings.budget.hold(),
                            );
                        }
                        Step::StartTls => {
                            Reply::new(220, [2, 0, 0], "Ready to start TLS").write(out);
                            // Anything pipelined behind STARTTLS is dropped unread.
                            return Flow::StartTls;
                        }
                        Step::Quit => {
                            Reply::new(221, [2, 0, 0], "Bye").write(out);
                            return Flow::Close;
                        }
                    }
                }
            }
        }
    }
}

impl State {
    /// Ends the transaction (not the HELO).
    fn reset(&mut self) {
        self.mail_from = None;
        self.rcpts.clear();
    }

    /// The envelope of the transaction under way.
    fn envelope(&self) -> SessionEnvelope<'_> {
        SessionEnvelope {
            peer: self.peer,
            helo: self.helo.as_deref().unwrap_or_default(),
            mail_from: self.mail_from.as_deref().unwrap_or_default(),
            rcpts: &self.rcpts,
            tls: self.tls,
        }
    }

    /// Past the command cap: says so, and the session closes.
    fn flooding(&self, max_commands: usize, out: &mut Vec<u8>) -> bool {
        if self.commands <= max_commands {
            return false;
        }
        Reply::new(421, [4, 7, 0], "Too many commands, closing connection").write(out);
        true
    }

    /// Runs one command, writing its reply to `out` unless the returned [`Step`] says
    /// otherwise.
    async fn command<R: Receiver>(
        &mut self,
        req: Request<Cow<'_, str>>,
        settings: &Settings,
        receiver: &R,
        out: &mut Vec<u8>,
    ) -> Step {
        let limits = &settings.limits;
        let reply = match req {
            Request::Ehlo { host } => {
                self.helo = Some(host.into_owned());
                self.reset();
                let mut r = EhloResponse::new(settings.hostname.as_str());
                r.capabilities = EXT_PIPELINING
                    | EXT_SIZE
                    | EXT_8BIT_MIME
                    | EXT_SMTP_UTF8
                    | EXT_ENHANCED_STATUS_CODES;
                if settings.starttls && !self.tls {
                    r.capabilities |= EXT_START_TLS;
                }
                r.size = limits.max_message_bytes;
                let start = out.len();
                if r.write(&mut *out).is_ok() {
                    return Step::Next;
                }
                out.truncate(start);
                Reply::new(451, [4, 3, 0], "Try again later")
            }
            Request::Helo { host } => {
                self.helo = Some(host.into_owned());
                self.reset();
                Reply::new(250, [2, 0, 0], settings.hostname.clone())
            }
            Request::Mail { from } => {
                if self.helo.is_none() {
                    Reply::new(503, [5, 5, 1], "Polite people say EHLO first")
                } else if self.mail_from.is_some() {
                    Reply::new(503, [5, 5, 1], "Sender already given")
                } else if from.size > limits.max_message_bytes {
                    Reply::new(552, [5, 3, 4], "Message too big for system")
                } else {
                    let from = from.address.trim();
                    match receiver.mail(from).await {
                        Ok(()) => {
                            self.mail_from = Some(from.to_owned());
                            Reply::new(250, [2, 1, 0], "OK")
                        }
                        Err(refusal) => refusal,
                    }
                }
            }
            Request::Rcpt { to } => {
                if self.mail_from.is_none() {
                    Reply::new(503, [5, 5, 1], "MAIL first")
                } else {
                    match receiver.rcpt(&to.address).await {
                        Ok(r) if self.rcpts.contains(&r) => Reply::new(250, [2, 1, 5], "OK"),
                        Ok(_) if self.rcpts.len() >= limits.max_recipients => {
                            Reply::new(452, [4, 5, 3], "Too many recipients")
                        }
                        Ok(r) => {
                            self.rcpts.push(r);
                            Reply::new(250, [2, 1, 5], "OK")
                        }
                        Err(refusal) => refusal,
                    }
                }
            }
            Request::Data => {
                if self.mail_from.is_none() {
                    Reply::new(503, [5, 5, 1], "MAIL first")
                } else if self.rcpts.is_empty() {
                    Reply::new(554, [5, 5, 1], "No valid recipients")
                } else {
                    return Step::Data;
                }
            }
            Request::Rset => {
                self.reset();
                Reply::new(250, [2, 0, 0], "OK")
            }
            Request::Noop { .. } => Reply::new(250, [2, 0, 0], "OK"),
            Request::Quit => return Step::Quit,
            Request::Vrfy { .. } | Request::Expn { .. } => {
                Reply::new(502, [5, 5, 1], "Command disabled")
            }
            Request::StartTls => {
                if self.tls {
                    Reply::new(504, [5, 7, 4], "Already in TLS")
                } else if !settings.starttls {
                    Reply::new(502, [5, 7, 0], "TLS not available")
                } else {
                    return Step::StartTls;
                }
            }
            Request::Help { .. } => Reply::new(
                214,
                [2, 0, 0],
                "EHLO HELO MAIL RCPT DATA RSET NOOP QUIT STARTTLS",
            ),
            Request::Lhlo { .. }
            | Request::Bdat { .. }
            | Request::Auth { .. }
            | Request::Etrn { .. }
            | Request::Atrn { .. }
            | Request::Burl { .. } => Reply::new(502, [5, 5, 1], "Command not implemented"),
        };
        reply.write(out);
        Step::Next
    }
}

/// The reply to a whole command line that does not parse.
fn syntax_reply(e: &smtp_proto::Error) -> Reply {
    use smtp_proto::Error as E;
    match e {
        E::UnknownCommand => Reply::new(500, [5, 5, 1], "Invalid command"),
        E::InvalidSenderAddress => {
            Reply::new(501, [5, 1, 8], "Bad sender's mailbox address syntax")
        }
        E::InvalidRecipientAddress => {
            Reply::new(501, [5, 1, 3], "Bad destination mailbox address syntax")
        }
        E::SyntaxError { syntax } => {
            Reply::new(501, [5, 5, 2], format!("Syntax error, expected: {syntax}"))
        }
        E::InvalidParameter { param } => {
            Reply::new(501, [5, 5, 4], format!("Invalid parameter {param:?}"))
        }
        E::UnsupportedParameter { param } => Reply::new(
            504,
            [5, 5, 4],
            format!(
                "Unsupported parameter {:?}",
                super::parse::sanitize_line(param)
            ),
        ),
        E::ResponseTooLong => Reply::new(500, [5, 5, 2], "Line is too long"),
        // The line is whole, so a parser that wants more found a known command's arguments
        // cut short (`MAIL FROM` with no colon).
        E::NeedsMoreData { .. } => {
            Reply::new(501, [5, 5, 2], "Syntax error in parameters or arguments")
        }
        E::InvalidResponse { .. } => Reply::new(500, [5, 5, 2], "Syntax error"),
    }
}
