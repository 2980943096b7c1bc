//! Remote hosts as the operator sees them (the console's remote-hosts page): what this instance
//! refused from each host lately, how its deliveries to each ActivityPub host and through each
//! mail relay (or recipient domain) went since it started, and the delivery health transports
//! keep in the database ([`HostSource`]: ActivityPub's failure streaks and circuit breaker).
//!
//! Everything here is bounded: at most [`MAX_HOSTS`] hosts per record (the one heard from
//! longest ago is forgotten first) and [`MAX_REFUSALS`] refusals per host. It lives in
//! [`crate::metrics::Metrics`], which every part of the server holds.
//!
//! Recording a refusal is one call wherever something from a remote host is refused:
//! [`crate::metrics::Metrics::refused_from`]`(host, reason, now_ms)` (or [`Hosts::refused`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::Result;

/// The most hosts each record keeps.
pub const MAX_HOSTS: usize = 1_024;
/// The most refusals kept per host (the newest).
pub const MAX_REFUSALS: usize = 20;
/// The longest reason kept, in characters.
const MAX_REASON: usize = 200;

/// One refusal of something a remote host sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// When (unix ms).
    pub at_ms: i64,
    /// Why, in a few words.
    pub reason: String,
}

/// How deliveries to one host (or through one relay) went since this instance started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Deliveries that succeeded.
    pub delivered: u64,
    /// Deliveries that failed.
    pub failed: u64,
    /// When the last one succeeded (unix ms).
    pub last_delivered_ms: Option<i64>,
    /// The last failure: when (unix ms) and why.
    pub last_error: Option<(i64, String)>,
}

/// Where outbound traffic went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Signed POSTs to an ActivityPub host's inboxes.
    ActivityPub,
    /// Mail handed to a relay, or to a recipient domain's MX hosts.
    Mail,
}

/// The state of a host's delivery circuit breaker, as the transport models it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Deliveries go out.
    Closed,
    /// Deliveries fail but are still tried (retried with backoff).
    Failing,
    /// Failing for longer than the breaker allows: deliveries end at once, untried.
    Open,
}

impl Circuit {
    /// The state's name: `closed`, `failing`, `open`.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Failing => "failing",
            Self::Open => "open",
        }
    }
}

/// A host's delivery health as a transport keeps it (in the database, shared by instances).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHealth {
    /// The host.
    pub host: String,
    /// The transport that delivers to it.
    pub transport: &'static str,
    /// Its circuit.
    pub circuit: Circuit,
    /// Consecutive failures.
    pub failures: i64,
    /// Since when every delivery failed (unix ms).
    pub failing_since: Option<i64>,
    /// The last delivery error.
    pub last_error: Option<String>,
}

/// A transport's view of the hosts it delivers to, read when the page is shown.
#[async_trait::async_trait]
pub trait HostSource: Send + Sync + std::fmt::Debug {
    /// The hosts with a delivery record worth showing (failing, or failed lately).
    ///
    /// # Errors
    /// Database errors.
    async fn hosts(&self) -> Result<Vec<HostHealth>>;
}

/// A map of at most [`MAX_HOSTS`] entries, each with when it was last touched.
#[derive(Debug)]
struct Bounded<T> {
    entries: HashMap<String, (i64, T)>,
}

impl<T: Default> Bounded<T> {
    fn new() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }

    /// The entry of `key`, made room for (forgetting the one touched longest ago) when new.
    fn touch(&mut self, key: &str, now_ms: i64) -> &mut T {
        if !self.entries.contains_key(key) && self.entries.len() >= MAX_HOSTS {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        let e = self
            .entries
            .entry(key.to_owned())
            .or_insert_with(|| (now_ms, T::default()));
        e.0 = e.0.max(now_ms);
        &mut e.1
    }
}

impl<T: Clone> Bounded<T> {
    /// Every entry, the one touched last first.
    fn newest_first(&self) -> Vec<(String, T)> {
        let mut v: Vec<(&String, &(i64, T))> = self.entries.iter().collect();
        v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(b.0)));
        v.into_iter()
            .map(|(k, (_, t))| (k.clone(), t.clone()))
            .collect()
    }
}

/// What the remote-hosts page shows of this instance's memory.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Recent refusals per host, the host refused last first (each host's newest first).
    pub refusals: Vec<(String, Vec<Refusal>)>,
    /// Deliveries per ActivityPub host since the start.
    pub activitypub: Vec<(String, Traffic)>,
    /// Mail per relay (or recipient domain) since the start.
    pub mail: Vec<(String, Traffic)>,
}

/// The bounded records of remote hosts (see the module's documentation).
#[derive(Debug)]
pub struct Hosts {
    refusals: Mutex<Bounded<VecDeque<Refusal>>>,
    activitypub: Mutex<Bounded<Traffic>>,
    mail: Mutex<Bounded<Traffic>>,
    sources: RwLock<Vec<Arc<dyn HostSource>>>,
}

impl Default for Hosts {
    fn default() -> Self {
        Self {
            refusals: Mutex::new(Bounded::new()),
            activitypub: Mutex::new(Bounded::new()),
            mail: Mutex::new(Bounded::new()),
            sources: RwLock::new(Vec::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `reason` on one line, at most [`MAX_REASON`] characters.
fn short(reason: &str) -> String {
    let one_line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    one_line.chars().take(MAX_REASON).collect()
}

impl Hosts {
    /// Records that something from `host` was refused, and why (kept short). A host is
    /// lowercased; an empty one is not recorded.
    pub fn refused(&self, host: &str, reason: &str, now_ms: i64) {
        let host = host.trim().to_ascii_lowercase();
        if host.is_empty() {
            return;
        }
        let mut r = lock(&self.refusals);
        let list = r.touch(&host, now_ms);
        if list.len() >= MAX_REFUSALS {
            list.pop_back();
        }
        list.push_front(Refusal {
            at_ms: now_ms,
            reason: short(reason),
        });
    }

    /// Records one delivery through `channel` to `key` (an ActivityPub host, a relay or mail
    /// domain): `Ok` delivered, `Err` failed with why.
    pub fn delivered(
        &self,
        channel: Channel,
        key: &str,
        outcome: std::result::Result<(), &str>,
        now_ms: i64,
    ) {
        let key = key.trim().to_ascii_lowercase();
        if key.is_empty() {
            return;
        }
        let mut m = lock(match channel {
            Channel::ActivityPub => &self.activitypub,
            Channel::Mail => &self.mail,
        });
        let t = m.touch(&key, now_ms);
        match outcome {
            Ok(()) => {
                t.delivered += 1;
                t.last_delivered_ms = Some(now_ms);
            }
            Err(e) => {
                t.failed += 1;
                t.last_error = Some((now_ms, short(e)));
            }
        }
    }

    /// Adds a transport's view of its hosts.
    pub fn add_source(&self, source: Arc<dyn HostSource>) {
        self.sources
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(source);
    }

    /// The transports' views of their hosts.
    #[must_use]
    pub fn sources(&self) -> Vec<Arc<dyn HostSource>> {
        self.sources
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// What is held now.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            refusals: lock(&self.refusals)
                .newest_first()
                .into_iter()
                .map(|(h, l)| (h, l.into_iter().collect()))
                .collect(),
            activitypub: lock(&self.activitypub).newest_first(),
            mail: lock(&self.mail).newest_first(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_kept_per_host_newest_first_and_bounded() {
        let h = Hosts::default();
        for i in 0..(MAX_REFUSALS + 5) {
            h.refused(
                "Bad.Example",
                &format!("reason {i}\r\nX: y"),
                i64::try_from(i).unwrap(),
            );
        }
        h.refused("", "ignored", 1);
        h.refused("other.example", "401 unsigned", 3);
        let s = h.snapshot();
        assert_eq!(s.refusals.len(), 2);
        let (host, list) = &s.refusals[0];
        assert_eq!(host, "bad.example");
        assert_eq!(list.len(), MAX_REFUSALS);
        assert_eq!(list[0].reason, format!("reason {}  X: y", MAX_REFUSALS + 4));
        assert_eq!(s.refusals[1].1[0].reason, "401 unsigned");
        let long = "x".repeat(1_000);
        h.refused("bad.example", &long, 100);
        assert_eq!(h.snapshot().refusals[0].1[0].reason.len(), MAX_REASON);
    }

    #[test]
    fn hosts_past_the_bound_forget_the_one_heard_from_longest_ago() {
        let h = Hosts::default();
        for i in 0..=MAX_HOSTS {
            h.delivered(
                Channel::ActivityPub,
                &format!("h{i}.example"),
                Ok(()),
                i64::try_from(i).unwrap() + 10,
            );
        }
        let s = h.snapshot();
        assert_eq!(s.activitypub.len(), MAX_HOSTS);
        assert!(!s.activitypub.iter().any(|(k, _)| k == "h0.example"));
        h.delivered(Channel::Mail, "relay.example:587", Err("relay: 451"), 5);
        h.delivered(Channel::Mail, "relay.example:587", Ok(()), 6);
        let mail = &h.snapshot().mail[0].1;
        assert_eq!((mail.delivered, mail.failed), (1, 1));
        assert_eq!(mail.last_delivered_ms, Some(6));
        assert_eq!(mail.last_error, Some((5, "relay: 451".to_owned())));
    }
}
