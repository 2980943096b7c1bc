//! Console sessions and sign-in throttling, kept in this process's memory.
//!
//! A session is what the console's cookie names: a random 256-bit id, minted by the server,
//! paired with a random anti-forgery token that every form of the session carries. A browser
//! gets one on its first page (signed out when `console.token` is set, so even the sign-in form
//! is protected), and a new one when it signs in; it ends after `console.session_idle_minutes`
//! without a request, when the operator signs out, and when the process stops. Ids are kept as
//! their SHA-256, so looking one up compares no secret byte by byte.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::Digest as _;

use crate::net::constant_time_eq;

/// The most sessions kept; past it the least recently used goes first.
const MAX_SESSIONS: usize = 4096;
/// Failed sign-ins an address may make within [`THROTTLE_WINDOW_MS`] before it is refused.
pub(super) const MAX_FAILURES: usize = 5;
/// The window over which failed sign-ins are counted.
const THROTTLE_WINDOW_MS: i64 = 60_000;
/// The most client addresses whose failures are remembered.
const MAX_THROTTLED: usize = 4096;

/// A session as a request finds it.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// The cookie's value.
    pub(super) id: String,
    /// The anti-forgery token its forms carry.
    pub(super) csrf: String,
    /// Whether it signed in with the console token.
    pub(super) signed_in: bool,
}

impl Session {
    /// Whether `given` is this session's anti-forgery token (compared in constant time).
    pub(super) fn forms_match(&self, given: &str) -> bool {
        constant_time_eq(given.as_bytes(), self.csrf.as_bytes())
    }
}

#[derive(Debug)]
struct Entry {
    csrf: String,
    signed_in: bool,
    last_seen_ms: i64,
}

#[derive(Debug, Default)]
struct Inner {
    /// By the SHA-256 of the id.
    sessions: HashMap<[u8; 32], Entry>,
    /// Each address's failed sign-ins within the window, oldest first.
    failures: HashMap<IpAddr, VecDeque<i64>>,
}

/// The sessions and the sign-in throttle, shared by the console's handlers.
#[derive(Debug, Clone)]
pub(super) struct Sessions {
    inner: Arc<Mutex<Inner>>,
    idle_ms: i64,
}

fn key(id: &str) -> [u8; 32] {
    sha2::Sha256::digest(id.as_bytes()).into()
}

fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Sessions {
    /// Sessions that end after `idle_minutes` without a request.
    pub(super) fn new(idle_minutes: u64) -> Self {
        let idle_ms = i64::try_from(idle_minutes.saturating_mul(60_000)).unwrap_or(i64::MAX);
        Self {
            inner: Arc::default(),
            idle_ms,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live session `id` names, its idle time restarted at `now_ms`.
    pub(super) fn get(&self, id: &str, now_ms: i64) -> Option<Session> {
        let mut inner = self.lock();
        let k = key(id);
        let entry = inner.sessions.get_mut(&k)?;
        if now_ms.saturating_sub(entry.last_seen_ms) > self.idle_ms {
            inner.sessions.remove(&k);
            return None;
        }
        entry.last_seen_ms = now_ms;
        Some(Session {
            id: id.to_owned(),
            csrf: entry.csrf.clone(),
            signed_in: entry.signed_in,
        })
    }

    /// A new session with a fresh id and anti-forgery token.
    pub(super) fn create(&self, signed_in: bool, now_ms: i64) -> Session {
        let (id, csrf) = (random_hex(), random_hex());
        let mut inner = self.lock();
        if inner.sessions.len() >= MAX_SESSIONS {
            let idle = self.idle_ms;
            inner
                .sessions
                .retain(|_, e| now_ms.saturating_sub(e.last_seen_ms) <= idle);
        }
        if inner.sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = inner
                .sessions
                .iter()
                .min_by_key(|(_, e)| (e.signed_in, e.last_seen_ms))
                .map(|(k, _)| *k)
        {
            inner.sessions.remove(&oldest);
        }
        inner.sessions.insert(
            key(&id),
            Entry {
                csrf: csrf.clone(),
                signed_in,
                last_seen_ms: now_ms,
            },
        );
        Session {
            id,
            csrf,
            signed_in,
        }
    }

    /// Ends the session `id` (sign-out, or the signed-out session a sign-in replaces).
    pub(super) fn revoke(&self, id: &str) {
        self.lock().sessions.remove(&key(id));
    }

    /// When `client` has failed [`MAX_FAILURES`] sign-ins within the last minute: the seconds
    /// until the oldest of them leaves the window.
    pub(super) fn throttled(&self, client: IpAddr, now_ms: i64) -> Option<u64> {
        let mut inner = self.lock();
        let failures = inner.failures.get_mut(&client)?;
        while failures
            .front()
            .is_some_and(|t| now_ms.saturating_sub(*t) >= THROTTLE_WINDOW_MS)
        {
            failures.pop_front();
        }
        if failures.len() < MAX_FAILURES {
            if failures.is_empty() {
                inner.failures.remove(&client);
            }
            return None;
        }
        let oldest = failures.front().copied().unwrap_or(now_ms);
        let wait_ms = THROTTLE_WINDOW_MS.saturating_sub(now_ms.saturating_sub(oldest));
        Some(u64::try_from(wait_ms).unwrap_or(0).div_ceil(1000).max(1))
    }

    /// Counts a failed sign-in from `client`.
    pub(super) fn failed(&self, client: IpAddr, now_ms: i64) {
        let mut inner = self.lock();
        if inner.failures.len() >= MAX_THROTTLED && !inner.failures.contains_key(&client) {
            inner.failures.retain(|_, f| {
                f.back()
                    .is_some_and(|t| now_ms.saturating_sub(*t) < THROTTLE_WINDOW_MS)
            });
        }
        if inner.failures.len() >= MAX_THROTTLED && !inner.failures.contains_key(&client) {
            return;
        }
        let f = inner.failures.entry(client).or_default();
        f.push_back(now_ms);
        while f.len() > MAX_FAILURES {
            f.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_random_expire_when_idle_and_revoke() {
        let s = Sessions::new(1);
        let a = s.create(true, 0);
        let b = s.create(true, 0);
        assert_eq!(a.id.len(), 64, "256 bits, hex");
        assert_ne!(a.id, b.id);
        assert_ne!(a.csrf, a.id);
        assert!(s.get(&a.id, 59_000).is_some());
        // Idle time counts from the last request.
        assert!(s.get(&a.id, 118_000).is_some());
        assert!(
            s.get(&a.id, 178_001).is_none(),
            "expired after a minute idle"
        );
        assert!(s.get(&a.id, 0).is_none(), "and gone");
        s.revoke(&b.id);
        assert!(s.get(&b.id, 1).is_none(), "revoked");
        assert!(s.get("not-a-session", 0).is_none());
        let c = s.create(false, 0);
        assert!(c.forms_match(&c.csrf) && !c.forms_match("") && !c.forms_match(&c.id));
    }

    #[test]
    fn five_failures_a_minute_then_refused_until_the_oldest_leaves() {
        let s = Sessions::new(1);
        let (ip, other): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "::1".parse().unwrap());
        for i in 0..5 {
            assert_eq!(s.throttled(ip, i * 1000), None);
            s.failed(ip, i * 1000);
        }
        assert_eq!(s.throttled(ip, 5_000), Some(55));
        assert_eq!(s.throttled(other, 5_000), None, "per address");
        assert_eq!(s.throttled(ip, 59_999), Some(1));
        assert_eq!(
            s.throttled(ip, 60_000),
            None,
            "the first failure left the window"
        );
        s.failed(ip, 60_000);
        assert_eq!(s.throttled(ip, 60_000), Some(1));
    }

    #[test]
    fn a_full_table_drops_the_least_recent_signed_out_session_first() {
        let s = Sessions::new(60);
        let kept = s.create(true, 0);
        for i in 0..MAX_SESSIONS {
            let _ = s.create(false, i64::try_from(i).unwrap() + 1);
        }
        assert!(s.get(&kept.id, 10).is_some(), "the signed-in one stays");
        assert_eq!(s.lock().sessions.len(), MAX_SESSIONS);
    }
}
