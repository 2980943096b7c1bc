//! What the SMTP session and the inbound side both speak of: the [`Reply`] a client is told,
//! the recipients ([`Rcpt`]) and envelope ([`SessionEnvelope`]) of a transaction, and the
//! memory budget for message bodies being received ([`DataBudget`]).
//!
//! Both sides import this module and it imports neither, so the session ([`super::session`])
//! knows nothing of what is done with a message and the inbound side ([`super::inbound`])
//! nothing of the command grammar.

use std::borrow::Cow;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One SMTP reply line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Basic code.
    pub code: u16,
    /// Enhanced status code (RFC 3463).
    pub esc: [u8; 3],
    /// Text.
    pub text: Cow<'static, str>,
}

impl Reply {
    /// A reply.
    #[must_use]
    pub fn new(code: u16, esc: [u8; 3], text: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            esc,
            text: text.into(),
        }
    }

    /// Appends the reply line, CRLF included, to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let [a, b, c] = self.esc;
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{} {a}.{b}.{c} {}\r\n", self.code, self.text);
    }
}

/// An accepted recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rcpt {
    /// One of our agents, by local name.
    Agent(String),
    /// Our VERP bounce address: the response id whose delivery bounced.
    Bounce(String),
    /// A role address (`postmaster@`, `abuse@`, `dmarc@` of a served domain, or the bare
    /// `postmaster`), lowercase as it will be recorded.
    Role(String),
}

/// The envelope of one transaction, as the session holds it when the message is complete.
#[derive(Debug, Clone, Copy)]
pub struct SessionEnvelope<'a> {
    /// The client.
    pub peer: SocketAddr,
    /// HELO/EHLO name.
    pub helo: &'a str,
    /// MAIL FROM, empty for the null sender.
    pub mail_from: &'a str,
    /// Accepted recipients.
    pub rcpts: &'a [Rcpt],
    /// Whether the session is under TLS.
    pub tls: bool,
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

    /// An empty share of the budget, for one message body.
    pub(super) fn hold(&self) -> Held {
        Held {
            budget: self.clone(),
            permit: None,
            kib: 0,
        }
    }
}

/// The part of the budget one message body holds; given back when dropped.
#[derive(Debug)]
pub(super) struct Held {
    budget: DataBudget,
    permit: Option<OwnedSemaphorePermit>,
    kib: usize,
}

impl Held {
    /// Grows the share to cover `len` bytes; false when the budget has no room.
    pub(super) fn cover(&mut self, len: usize) -> bool {
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

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::gauge::Gauge;

    use super::{DataBudget, Reply};

    #[test]
    fn a_reply_is_one_line_with_its_enhanced_code() {
        let mut out = Vec::new();
        Reply::new(250, [2, 1, 5], "OK").write(&mut out);
        Reply::new(550, [5, 6, 0], format!("bad {}", 1)).write(&mut out);
        assert_eq!(out, b"250 2.1.5 OK\r\n550 5.6.0 bad 1\r\n");
    }

    #[test]
    fn a_share_grows_in_steps_and_is_given_back() {
        let gauge = Gauge::default();
        let budget = DataBudget::new(128 * 1024, &gauge);
        let mut a = budget.hold();
        assert!(a.cover(1));
        assert_eq!(gauge.get(), 64 * 1024, "a whole step is taken");
        assert!(a.cover(64 * 1024));
        assert_eq!(gauge.get(), 64 * 1024, "still within the step");
        assert!(a.cover(64 * 1024 + 1));
        assert_eq!(gauge.get(), 128 * 1024);
        let mut b = budget.hold();
        assert!(!b.cover(1), "the budget is spent");
        drop(a);
        assert_eq!(gauge.get(), 0);
        assert!(b.cover(1));
    }
}
