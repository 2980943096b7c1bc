//! One SMTP connection: the I/O loop around the [`Session`] state machine. It reads from any
//! byte stream (TCP, or TLS after STARTTLS), feeds the session, and writes what the session
//! answers, one write per read; every read is under the idle timeout, every write under the idle
//! timeout and the session deadline, and the session under its wall-clock limit. When the server
//! stops, a session between messages is told `421` at once; a message being received is
//! finished first.
//!
//! After `220` to STARTTLS, whatever the client sent behind the command in the same packet is
//! discarded unread, then the TLS handshake starts and the session begins anew (no HELO, no
//! transaction): plaintext commands cannot be injected into the encrypted session.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use super::session::{Flow, Limits, Receiver, Session, Settings};
use super::smtp::DataBudget;

/// What every connection of a listener shares.
pub struct Server {
    settings: Settings,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: watch::Receiver<bool>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("settings", &self.settings)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Sessions greeting as `hostname` under `limits`, bodies drawing on `budget`, STARTTLS
    /// offered when there is a `tls` acceptor; `shutdown` turns true when the server stops.
    #[must_use]
    pub fn new(
        hostname: String,
        limits: Limits,
        budget: DataBudget,
        tls: Option<tokio_rustls::TlsAcceptor>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            settings: Settings {
                hostname,
                limits,
                starttls: tls.is_some(),
                budget,
            },
            tls,
            shutdown,
        }
    }
}

/// What a run of the loop ended with.
enum Next<S> {
    Done,
    StartTls(S),
}

/// Serves one connection to its end, asking `receiver` about recipients and messages.
pub async fn serve<S, R>(stream: S, peer: SocketAddr, server: &Server, receiver: &R)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    R: Receiver,
{
    let limits = &server.settings.limits;
    let deadline = Instant::now() + Duration::from_secs(limits.session_timeout_seconds);
    let mut session = Session::new(&server.settings, receiver, peer);
    let next = match run(&mut session, stream, true, server, deadline).await {
        Ok(n) => n,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "SMTP session ended");
            return;
        }
    };
    if let Next::StartTls(stream) = next {
        let Some(acceptor) = &server.tls else {
            return;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let tls = match tokio::time::timeout(left, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => return,
        };
        session.tls_started();
        if let Err(e) = run(&mut session, tls, false, server, deadline).await {
            tracing::debug!(%peer, error = %e, "SMTP session ended");
        }
    }
}

/// Reads, feeds `session` and writes its replies until it closes or starts TLS.
async fn run<S, R>(
    session: &mut Session<'_, R>,
    mut stream: S,
    greet: bool,
    server: &Server,
    deadline: Instant,
) -> std::io::Result<Next<S>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    R: Receiver,
{
    let idle = Duration::from_secs(server.settings.limits.idle_timeout_seconds);
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::with_capacity(512);
    if greet {
        session.greeting(&mut out);
        write_within(&mut stream, &out, idle, deadline).await?;
        out.clear();
    }
    let mut shutdown = server.shutdown.clone();
    loop {
        if *shutdown.borrow() && !session.receiving_data() {
            // Between messages: nothing is lost by closing; the client sends the rest
            // to another instance or later.
            write_within(
                &mut stream,
                b"421 4.3.2 Service shutting down, try again later\r\n",
                idle,
                deadline,
            )
            .await?;
            return Ok(Next::Done);
        }
        let now = Instant::now();
        if now >= deadline {
            write_within(
                &mut stream,
                b"421 4.4.2 Session time limit reached, closing\r\n",
                idle,
                deadline,
            )
            .await?;
            return Ok(Next::Done);
        }
        let wait = idle.min(deadline - now);
        let between_messages = !session.receiving_data() && !*shutdown.borrow();
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
                write_within(
                    &mut stream,
                    b"421 4.4.2 Timeout, closing connection\r\n",
                    idle,
                    deadline,
                )
                .await?;
                return Ok(Next::Done);
            }
        };
        let flow = session.ingest(&buf[..n], &mut out).await;
        if !out.is_empty() {
            write_within(&mut stream, &out, idle, deadline).await?;
            out.clear();
        }
        match flow {
            Flow::Read => {}
            Flow::Close => return Ok(Next::Done),
            Flow::StartTls => return Ok(Next::StartTls(stream)),
        }
    }
}

/// Writes and flushes `bytes` within `idle` and before `deadline`, else a `TimedOut` error: a
/// client that does not read its replies cannot hold the session (and its permit) forever.
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::write_within;

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
}
