//! The SMTP session: a state machine over any byte stream (TCP, or TLS after STARTTLS), with
//! commands parsed by `smtp-proto`. Every read is under the idle timeout and the session under
//! its wall-clock limit; commands per session and recipients per message are capped; DATA ends
//! only on `<CRLF>.<CRLF>` (a bare LF never ends it), and a message over the size limit is read
//! to its end without being kept and answered 552. Bodies being received draw on one memory
//! budget shared by every session ([`DataBudget`]); a message that would go over it is read to
//! its end without being kept and answered `452 4.3.1`, so the client retries later.
//!
//! After `220` to STARTTLS, whatever the client sent behind the command in the same packet is
//! discarded unread, then the TLS handshake starts and the session begins anew (no HELO, no
//! transaction): plaintext commands cannot be injected into the encrypted session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use smtp_proto::request::receiver::{DataReceiver, DummyDataReceiver, RequestReceiver};
use smtp_proto::{
    EXT_8BIT_MIME, EXT_ENHANCED_STATUS_CODES, EXT_PIPELINING, EXT_SIZE, EXT_SMTP_UTF8,
    EXT_START_TLS, EhloResponse, Request,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::inbound::{Inbound, Rcpt, SessionEnvelope};

/// One SMTP reply line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Basic code.
    pub code: u16,
    /// Enhanced status code (RFC 3463).
    pub esc: [u8; 3],
    /// Text.
    pub text: String,
}

impl Reply {
    /// A reply.
    #[must_use]
    pub fn new(code: u16, esc: [u8; 3], text: impl Into<String>) -> Self {
        Self {
            code,
            esc,
            text: text.into(),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let [a, b, c] = self.esc;
        out.extend_from_slice(format!("{} {a}.{b}.{c} {}\r\n", self.code, self.text).as_bytes());
    }
}

/// Memory for message bodies being received, shared by every session, counted in KiB.
#[derive(Debug, Clone)]
pub struct DataBudget {
    kib: Arc<Semaphore>,
    gauge: Gauge,
}

/// Memory is taken from the budget in steps of this many KiB, not per read.
const BUDGET_STEP_KIB: usize = 64;

impl DataBudget {
    /// A budget of `bytes`, whose use is shown by `gauge`.
    #[must_use]
    pub fn new(bytes: usize, gauge: &Gauge) -> Self {
        let kib = (bytes / 1024).clamp(1, Semaphore::MAX_PERMITS);
        Self {
            kib: Arc::new(Semaphore::new(kib)),
            gauge: gauge.clone(),
        }
    }
}

/// The part of the budget one message body holds; given back when dropped.
struct Held {
    budget: DataBudget,
    permit: Option<OwnedSemaphorePermit>,
    kib: usize,
}

impl Held {
    fn new(budget: &DataBudget) -> Self {
        Self {
            budget: budget.clone(),
            permit: None,
            kib: 0,
        }
    }

    /// Grows the share to cover `len` bytes; false when the budget has no room.
    fn cover(&mut self, len: usize) -> bool {
        let need = len.div_ceil(1024);
        if need <= self.kib {
            return true;
        }
        let want = need.next_multiple_of(BUDGET_STEP_KIB) - self.kib;
        let Some(more) = u32::try_from(want)
            .ok()
            .and_then(|n| Arc::clone(&self.budget.kib).try_acquire_many_owned(n).ok())
        else {
            return false;
        };
        match &mut self.permit {
            Some(p) => p.merge(more),
            None => self.permit = Some(more),
        }
        self.kib += want;
        self.budget
            .gauge
            .inc_by(i64::try_from(want * 1024).unwrap_or(i64::MAX));
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget
            .gauge
            .dec_by(i64::try_from(self.kib * 1024).unwrap_or(i64::MAX));
    }
}

/// What a run of the loop ended with.
enum Next<S> {
    Done,
    StartTls(S),
}

/// The per-session state.
struct Session {
    ctx: Arc<Inbound>,
    peer: SocketAddr,
    tls: bool,
    helo: Option<String>,
    mail_from: Option<String>,
    rcpts: Vec<Rcpt>,
    commands: usize,
    deadline: Instant,
}

enum Mode {
    Command,
    Data(DataReceiver, Vec<u8>, Held),
    /// Reading a message that is not kept, to its end; then this reply.
    Skip(DummyDataReceiver, Reply),
}

/// Serves one connection to its end.
pub async fn serve<S>(stream: S, peer: SocketAddr, ctx: Arc<Inbound>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let deadline = Instant::now() + Duration::from_secs(ctx.limits.session_timeout_seconds);
    let mut s = Session {
        ctx: Arc::clone(&ctx),
        peer,
        tls: false,
        helo: None,
        mail_from: None,
        rcpts: Vec::new(),
        commands: 0,
        deadline,
    };
    let next = match s.run(stream, true).await {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "SMTP session ended");
            return;
        }
    };
    if let Next::StartTls(stream) = next {
        let Some(acceptor) = ctx.tls.clone() else {
            return;
        };
        let left = s.deadline.saturating_duration_since(Instant::now());
        let tls = match tokio::time::timeout(left, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => return,
        };
        s.tls = true;
        s.helo = None;
        s.reset();
        if let Err(e) = s.run(tls, false).await {
            tracing::debug!(%peer, error = %e, "SMTP session ended");
        }
    }
}

impl Session {
    fn reset(&mut self) {
        self.mail_from = None;
        self.rcpts.clear();
    }

    async fn run<S>(&mut self, mut stream: S, greet: bool) -> std::io::Result<Next<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let hostname = self.ctx.hostname.clone();
        if greet {
            self.send(
                &mut stream,
                format!("220 {hostname} ESMTP switchboard\r\n").as_bytes(),
            )
            .await?;
        }
        let idle = Duration::from_secs(self.ctx.limits.idle_timeout_seconds);
        let max_size = self.ctx.limits.max_message_bytes;
        let mut receiver = RequestReceiver::default();
        let mut mode = Mode::Command;
        let mut buf = vec![0u8; 8192];
        let mut out = Vec::with_capacity(512);
        let mut shutdown = self.ctx.shutdown.clone();
        loop {
            if *shutdown.borrow() && matches!(mode, Mode::Command) {
                // Between messages: nothing is lost by closing; the client sends the rest
                // to another instance or later.
                self.send(
                    &mut stream,
                    b"421 4.3.2 Service shutting down, try again later\r\n",
                )
                .await?;
                return Ok(Next::Done);
            }
            let now = Instant::now();
            if now >= self.deadline {
                self.send(
                    &mut stream,
                    b"421 4.4.2 Session time limit reached, closing\r\n",
                )
                .await?;
                return Ok(Next::Done);
            }
            let wait = idle.min(self.deadline - now);
            let between_messages = matches!(mode, Mode::Command) && !*shutdown.borrow();
            let read = tokio::select! {
                r = tokio::time::timeout(wait, stream.read(&mut buf)) => r,
                // A message being received is finished first.
                changed = shutdown.changed(), if between_messages => {
                    if changed.is_err() {
                        // The server is gone without a word: nothing more can be stored.
                        return Ok(Next::Done);
                    }
                    continue;
                }
            };
            let n = match read {
                Ok(Ok(0)) => return Ok(Next::Done),
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    self.send(&mut stream, b"421 4.4.2 Timeout, closing connection\r\n")
                        .await?;
                    return Ok(Next::Done);
                }
            };
            let mut iter = buf[..n].iter();
            loop {
                match &mut mode {
                    Mode::Data(rx, msg, held) => {
                        let done = rx.ingest(&mut iter, msg);
                        let refusal = if msg.len() > max_size {
                            Some(Reply::new(552, [5, 3, 4], "Message too big for system"))
                        } else if !held.cover(msg.len()) {
                            tracing::warn!(peer = %self.peer, "SMTP body memory budget exhausted; message deferred");
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
                                mode = Mode::Command;
                                reply.write(&mut out);
                                self.reset();
                            } else {
                                mode = Mode::Skip(DummyDataReceiver::new_data(rx), reply);
                            }
                            continue;
                        }
                        if done {
                            let raw = std::mem::take(msg);
                            // The budget stays held while the message is checked and stored.
                            let Mode::Data(_, _, held) =
                                std::mem::replace(&mut mode, Mode::Command)
                            else {
                                continue;
                            };
                            let reply = self.finish_message(&raw).await;
                            drop(raw);
                            drop(held);
                            reply.write(&mut out);
                            self.reset();
                            continue;
                        }
                        break;
                    }
                    Mode::Skip(rx, reply) => {
                        if rx.ingest(&mut iter) {
                            reply.write(&mut out);
                            mode = Mode::Command;
                            self.reset();
                            continue;
                        }
                        break;
                    }
                    Mode::Command => {
                        let req = match receiver.ingest(&mut iter) {
                            Ok(req) => req,
                            Err(smtp_proto::Error::NeedsMoreData { .. }) => break,
                            Err(e) => {
                                self.commands += 1;
                                syntax_reply(&e).write(&mut out);
                                if self.flooding(&mut stream, &mut out).await? {
                                    return Ok(Next::Done);
                                }
                                continue;
                            }
                        };
                        self.commands += 1;
                        if self.flooding(&mut stream, &mut out).await? {
                            return Ok(Next::Done);
                        }
                        match self.command(req, &hostname) {
                            Action::Reply(r) => r.write(&mut out),
                            Action::Ehlo(bytes) => out.extend_from_slice(&bytes),
                            Action::Data => {
                                out.extend_from_slice(
                                    b"354 Start mail input; end with <CRLF>.<CRLF>\r\n",
                                );
                                mode = Mode::Data(
                                    data_receiver(),
                                    Vec::with_capacity(8192),
                                    Held::new(&self.ctx.data_budget),
                                );
                            }
                            Action::StartTls => {
                                Reply::new(220, [2, 0, 0], "Ready to start TLS").write(&mut out);
                                self.send(&mut stream, &out).await?;
                                // Anything pipelined behind STARTTLS is dropped unread.
                                return Ok(Next::StartTls(stream));
                            }
                            Action::Quit => {
                                Reply::new(221, [2, 0, 0], "Bye").write(&mut out);
                                self.send(&mut stream, &out).await?;
                                return Ok(Next::Done);
                            }
                        }
                    }
                }
            }
            if !out.is_empty() {
                self.send(&mut stream, &out).await?;
                out.clear();
            }
        }
    }

    /// Writes and flushes `bytes`, within the idle timeout and the session deadline: a client
    /// that does not read its replies cannot hold the session (and its permit) forever. A
    /// write that does not finish in time ends the session with an error.
    async fn send<S>(&self, stream: &mut S, bytes: &[u8]) -> std::io::Result<()>
    where
        S: AsyncWrite + Unpin,
    {
        let idle = Duration::from_secs(self.ctx.limits.idle_timeout_seconds);
        write_within(stream, bytes, idle, self.deadline).await
    }

    /// Past the command cap: says so and closes.
    async fn flooding<S>(&mut self, stream: &mut S, out: &mut Vec<u8>) -> std::io::Result<bool>
    where
        S: AsyncWrite + Unpin,
    {
        if self.commands <= self.ctx.limits.max_commands {
            return Ok(false);
        }
        Reply::new(421, [4, 7, 0], "Too many commands, closing connection").write(out);
        self.send(stream, out).await?;
        Ok(true)
    }

    fn command(&mut self, req: Request<std::borrow::Cow<'_, str>>, hostname: &str) -> Action {
        let ctx = Arc::clone(&self.ctx);
        let limits = &ctx.limits;
        match req {
            Request::Ehlo { host } => {
                self.helo = Some(host.into_owned());
                self.reset();
                let mut r = EhloResponse::new(hostname);
                r.capabilities = EXT_PIPELINING
                    | EXT_SIZE
                    | EXT_8BIT_MIME
                    | EXT_SMTP_UTF8
                    | EXT_ENHANCED_STATUS_CODES;
                if self.ctx.tls.is_some() && !self.tls {
                    r.capabilities |= EXT_START_TLS;
                }
                r.size = limits.max_message_bytes;
                let mut bytes = Vec::new();
                if r.write(&mut bytes).is_err() {
                    return Action::Reply(Reply::new(451, [4, 3, 0], "Try again later"));
                }
                Action::Ehlo(bytes)
            }
            Request::Helo { host } => {
                self.helo = Some(host.into_owned());
                self.reset();
                Action::Reply(Reply::new(250, [2, 0, 0], hostname))
            }
            Request::Mail { from } => {
                if self.helo.is_none() {
                    return Action::Reply(Reply::new(
                        503,
                        [5, 5, 1],
                        "Polite people say EHLO first",
                    ));
                }
                if self.mail_from.is_some() {
                    return Action::Reply(Reply::new(503, [5, 5, 1], "Sender already given"));
                }
                if from.size > limits.max_message_bytes {
                    return Action::Reply(Reply::new(552, [5, 3, 4], "Message too big for system"));
                }
                self.mail_from = Some(from.address.trim().to_owned());
                Action::Reply(Reply::new(250, [2, 1, 0], "OK"))
            }
            Request::Rcpt { to } => {
                if self.mail_from.is_none() {
                    return Action::Reply(Reply::new(503, [5, 5, 1], "MAIL first"));
                }
                match self.ctx.resolve(&to.address) {
                    Some(r) if self.rcpts.contains(&r) => {
                        Action::Reply(Reply::new(250, [2, 1, 5], "OK"))
                    }
                    Some(_) if self.rcpts.len() >= limits.max_recipients => {
                        Action::Reply(Reply::new(452, [4, 5, 3], "Too many recipients"))
                    }
                    Some(r) => {
                        self.rcpts.push(r);
                        Action::Reply(Reply::new(250, [2, 1, 5], "OK"))
                    }
                    None => Action::Reply(Reply::new(550, [5, 1, 1], "Mailbox unavailable")),
                }
            }
            Request::Data => {
                if self.mail_from.is_none() {
                    Action::Reply(Reply::new(503, [5, 5, 1], "MAIL first"))
                } else if self.rcpts.is_empty() {
                    Action::Reply(Reply::new(554, [5, 5, 1], "No valid recipients"))
                } else {
                    Action::Data
                }
            }
            Request::Rset => {
                self.reset();
                Action::Reply(Reply::new(250, [2, 0, 0], "OK"))
            }
            Request::Noop { .. } => Action::Reply(Reply::new(250, [2, 0, 0], "OK")),
            Request::Quit => Action::Quit,
            Request::Vrfy { .. } | Request::Expn { .. } => {
                Action::Reply(Reply::new(502, [5, 5, 1], "Command disabled"))
            }
            Request::StartTls => {
                if self.tls {
                    Action::Reply(Reply::new(504, [5, 7, 4], "Already in TLS"))
                } else if self.ctx.tls.is_none() {
                    Action::Reply(Reply::new(502, [5, 7, 0], "TLS not available"))
                } else {
                    Action::StartTls
                }
            }
            Request::Help { .. } => Action::Reply(Reply::new(
                214,
                [2, 0, 0],
                "EHLO HELO MAIL RCPT DATA RSET NOOP QUIT STARTTLS",
            )),
            Request::Lhlo { .. }
            | Request::Bdat { .. }
            | Request::Auth { .. }
            | Request::Etrn { .. }
            | Request::Atrn { .. }
            | Request::Burl { .. } => {
                Action::Reply(Reply::new(502, [5, 5, 1], "Command not implemented"))
            }
        }
    }

    async fn finish_message(&self, raw: &[u8]) -> Reply {
        let env = SessionEnvelope {
            peer: self.peer,
            helo: self.helo.clone().unwrap_or_default(),
            mail_from: self.mail_from.clone().unwrap_or_default(),
            rcpts: self.rcpts.clone(),
            tls: self.tls,
        };
        self.ctx.receive(&env, raw).await
    }
}

/// Writes and flushes `bytes` within `idle` and before `deadline`, else a `TimedOut` error.
async fn write_within<S>(
    stream: &mut S,
    bytes: &[u8],
    idle: Duration,
    deadline: Instant,
) -> std::io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    // A zero wait still lets a write that completes at once through (the future is polled
    // before the timer), so the closing 421 past the deadline is still sent.
    let wait = idle.min(deadline.saturating_duration_since(Instant::now()));
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    match tokio::time::timeout(wait, write).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "writing a reply timed out",
        )),
    }
}

/// A DATA receiver primed as if a CRLF had just been seen: the 354 reply ends a line, so a
/// `.` right at the start of the body is the end-of-data dot (an empty message) or a stuffed
/// dot, exactly as after any other CRLF.
fn data_receiver() -> DataReceiver {
    let mut rx = DataReceiver::new();
    let mut scratch = Vec::with_capacity(2);
    // Two bytes with no dot cannot end the message; they only set the CRLF state.
    let _ = rx.ingest(&mut b"\r\n".iter(), &mut scratch);
    rx
}

enum Action {
    Reply(Reply),
    Ehlo(Vec<u8>),
    Data,
    StartTls,
    Quit,
}

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
        E::NeedsMoreData { .. } | E::InvalidResponse { .. } => {
            Reply::new(500, [5, 5, 2], "Syntax error")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{data_receiver, write_within};

    #[tokio::test]
    async fn a_client_that_does_not_read_cannot_block_a_write() {
        // The peer never reads: the 8-byte pipe fills and the write must give up.
        let (mut ours, _theirs) = tokio::io::duplex(8);
        let far = Instant::now() + Duration::from_secs(3600);
        let err = write_within(&mut ours, &[b'x'; 64], Duration::from_millis(50), far)
            .await
            .err();
        assert_eq!(err.map(|e| e.kind()), Some(std::io::ErrorKind::TimedOut));
        // The session deadline bounds it too.
        let soon = Instant::now() + Duration::from_millis(50);
        let err = write_within(&mut ours, &[b'x'; 64], Duration::from_secs(3600), soon)
            .await
            .err();
        assert_eq!(err.map(|e| e.kind()), Some(std::io::ErrorKind::TimedOut));
        // A write that fits goes through.
        let (mut ours, _theirs) = tokio::io::duplex(64);
        assert!(
            write_within(&mut ours, b"250 OK\r\n", Duration::ZERO, far)
                .await
                .is_ok()
        );
    }

    fn feed(input: &[u8]) -> (bool, Vec<u8>) {
        let mut rx = data_receiver();
        let mut msg = Vec::new();
        let done = rx.ingest(&mut input.iter(), &mut msg);
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
}
