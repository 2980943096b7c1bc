//! Inbound connection admission, shared by every listener: a cap on open connections in all and
//! one per peer, counted by slots that give their place back when dropped; the process's
//! open-file limit the caps are derived from; and the back-off an accept loop takes when the
//! system refuses it a descriptor.
//!
//! A peer is an IPv4 address or an IPv6 /64: one host on IPv6 usually owns a whole /64, so
//! counting single IPv6 addresses would not limit anyone.
//!
//! Behind a trusted proxy (`server.trusted_proxies`) a connection carries many clients: it takes
//! a place in all only ([`Admission::admit_connection`]), and each client a place of its own in
//! the per-peer count for as long as it is served ([`Admission::admit_client`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

/// Descriptors kept back from connections for everything else the process opens: database
/// connections, outbound HTTP and SMTP, the SQLite files, logs.
pub const RESERVED_DESCRIPTORS: u64 = 256;

/// The largest connection cap derived from the open-file limit when none is configured.
const AUTO_MAX_CONNECTIONS: u64 = 25_000;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The listener holds as many connections as it may.
    Full,
    /// This peer holds as many connections as one peer may.
    PeerFull,
}

impl Refusal {
    /// The metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::PeerFull => "peer_full",
        }
    }
}

#[derive(Debug)]
struct Counts {
    max: usize,
    max_per_peer: usize,
    open: AtomicUsize,
    peers: Mutex<HashMap<IpAddr, usize>>,
    gauge: Gauge,
}

/// The caps of one listener. Cloning shares the counts.
#[derive(Debug, Clone)]
pub struct Admission {
    counts: Arc<Counts>,
}

/// One admitted connection's place, or one client's; dropping it gives the place back.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<Counts>,
    /// The peer counted, if any.
    peer: Option<IpAddr>,
    /// Whether it counts among the open connections.
    connection: bool,
}

impl Admission {
    /// At most `max` connections in all and `max_per_peer` from one peer; `gauge` shows how many
    /// are open.
    #[must_use]
    pub fn new(max: usize, max_per_peer: usize, gauge: Gauge) -> Self {
        Self {
            counts: Arc::new(Counts {
                max: max.max(1),
                max_per_peer: max_per_peer.max(1),
                open: AtomicUsize::new(0),
                peers: Mutex::new(HashMap::new()),
                gauge,
            }),
        }
    }

    /// The cap on connections in all.
    #[must_use]
    pub fn max(&self) -> usize {
        self.counts.max
    }

    /// Takes a place for a new connection from `peer`: one in all and one of the peer's.
    ///
    /// # Errors
    /// When the listener or this peer is at its cap.
    pub fn admit(&self, peer: IpAddr) -> Result<Slot, Refusal> {
        self.take(Some(peer), true)
    }

    /// Takes a place in all for a connection that carries other clients (from a trusted proxy,
    /// or one whose PROXY protocol header is still to be read): no peer's count is touched.
    ///
    /// # Errors
    /// When the listener is at its cap.
    pub fn admit_connection(&self) -> Result<Slot, Refusal> {
        self.take(None, true)
    }

    /// Takes one of `client`'s places, for a client served on a connection that already holds
    /// its place in all ([`Admission::admit_connection`]).
    ///
    /// # Errors
    /// When this client is at the per-peer cap.
    pub fn admit_client(&self, client: IpAddr) -> Result<Slot, Refusal> {
        self.take(Some(client), false)
    }

    fn take(&self, peer: Option<IpAddr>, connection: bool) -> Result<Slot, Refusal> {
        let c = &self.counts;
        let peer = peer.map(peer_key);
        let mut peers = c.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if connection && c.open.load(Ordering::Relaxed) >= c.max {
            return Err(Refusal::Full);
        }
        if let Some(peer) = peer {
            let held = peers.entry(peer).or_insert(0);
            if *held >= c.max_per_peer {
                return Err(Refusal::PeerFull);
            }
            *held += 1;
        }
        if connection {
            let open = c.open.fetch_add(1, Ordering::Relaxed) + 1;
            c.gauge.set(i64::try_from(open).unwrap_or(i64::MAX));
        }
        Ok(Slot {
            counts: Arc::clone(c),
            peer,
            connection,
        })
    }

    /// Connections open now.
    #[must_use]
    pub fn open(&self) -> usize {
        self.counts.open.load(Ordering::Relaxed)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let c = &self.counts;
        let mut peers = c.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(peer) = self.peer
            && let Some(held) = peers.get_mut(&peer)
        {
            *held = held.saturating_sub(1);
            if *held == 0 {
                peers.remove(&peer);
            }
        }
        if self.connection {
            let open = c.open.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
            c.gauge.set(i64::try_from(open).unwrap_or(i64::MAX));
        }
    }
}

/// What a peer is counted as: the IPv4 address (also when written as IPv4-mapped IPv6), or the
/// IPv6 /64.
#[must_use]
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Raises the soft open-file limit to the hard one (the soft limit of a service is often 1024
/// while the hard one is far higher) and returns the limit in effect; `None` is unlimited.
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => limit = raised,
            Err(e) => tracing::debug!(error = %e, "cannot raise the open-file limit"),
        }
    }
    limit.current
}

/// The connection cap when none is configured: the open-file limit less
/// [`RESERVED_DESCRIPTORS`], at most 25,000, at least 64 (`None`: no limit).
#[must_use]
pub fn auto_max_connections(open_file_limit: Option<u64>) -> usize {
    let limit = open_file_limit.unwrap_or(u64::MAX);
    let n = limit
        .saturating_sub(RESERVED_DESCRIPTORS)
        .clamp(64, AUTO_MAX_CONNECTIONS);
    usize::try_from(n).unwrap_or(64)
}

/// The pause of an accept loop after a failed accept (out of descriptors, out of memory):
/// doubling from 10 ms to 1 s while failures go on, so the loop never spins and the failures are
/// logged once per run of them instead of once per attempt.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    /// Records a failed accept and returns how long to wait before the next one.
    pub fn failed(&mut self, listener: &str, error: &std::io::Error) -> Duration {
        self.failures = self.failures.saturating_add(1);
        if self.failures == 1 {
            tracing::warn!(%listener, %error, "accept failed; backing off until it succeeds");
        }
        let factor = 1u32 << self.failures.saturating_sub(1).min(7);
        (Self::FIRST * factor).min(Self::MAX)
    }

    /// Records a successful accept.
    pub fn succeeded(&mut self, listener: &str) {
        if self.failures > 0 {
            tracing::info!(%listener, failures = self.failures, "accepting again");
            self.failures = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn caps_count_in_all_and_per_peer_and_slots_give_places_back() {
        let a = Admission::new(3, 2, Gauge::default());
        let s1 = a.admit(ip("192.0.2.1")).unwrap();
        let _s2 = a.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(a.admit(ip("192.0.2.1")).unwrap_err(), Refusal::PeerFull);
        // IPv4-mapped IPv6 is the same peer.
        assert_eq!(
            a.admit(ip("::ffff:192.0.2.1")).unwrap_err(),
            Refusal::PeerFull
        );
        let _s3 = a.admit(ip("192.0.2.2")).unwrap();
        assert_eq!(a.admit(ip("192.0.2.3")).unwrap_err(), Refusal::Full);
        assert_eq!(a.open(), 3);
        drop(s1);
        assert_eq!(a.open(), 2);
        let _s4 = a.admit(ip("192.0.2.1")).unwrap();
    }

    #[test]
    fn an_ipv6_peer_is_its_slash_64() {
        let a = Admission::new(10, 1, Gauge::default());
        let _s = a.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            a.admit(ip("2001:db8:1:2:ffff::9")).unwrap_err(),
            Refusal::PeerFull
        );
        assert!(a.admit(ip("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn a_proxied_connection_counts_in_all_and_its_clients_per_peer() {
        let a = Admission::new(2, 1, Gauge::default());
        let proxy = a.admit_connection().unwrap();
        let _second = a.admit_connection().unwrap();
        assert_eq!(a.admit_connection().unwrap_err(), Refusal::Full);
        assert_eq!(a.open(), 2);
        // Clients take per-peer places only, whatever the connections in all.
        let c1 = a.admit_client(ip("192.0.2.1")).unwrap();
        assert_eq!(
            a.admit_client(ip("192.0.2.1")).unwrap_err(),
            Refusal::PeerFull
        );
        let _c2 = a.admit_client(ip("192.0.2.2")).unwrap();
        assert_eq!(a.open(), 2);
        // A client's place is the same as a direct connection's from that address.
        drop(proxy);
        assert_eq!(a.admit(ip("192.0.2.1")).unwrap_err(), Refusal::PeerFull);
        drop(c1);
        let _direct = a.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(a.open(), 2);
    }

    #[test]
    fn the_automatic_cap_leaves_descriptors_for_the_rest() {
        assert_eq!(auto_max_connections(Some(1024)), 768);
        assert_eq!(auto_max_connections(Some(100)), 64);
        assert_eq!(auto_max_connections(Some(1 << 20)), 25_000);
        assert_eq!(auto_max_connections(None), 25_000);
    }

    #[test]
    fn accept_backoff_doubles_up_to_a_second_and_resets() {
        let mut b = AcceptBackoff::default();
        let e = std::io::Error::other("EMFILE");
        let waits: Vec<_> = (0..10).map(|_| b.failed("test", &e)).collect();
        assert_eq!(waits[0], Duration::from_millis(10));
        assert_eq!(waits[1], Duration::from_millis(20));
        assert_eq!(waits[6], Duration::from_millis(640));
        assert_eq!(waits[9], Duration::from_secs(1));
        b.succeeded("test");
        assert_eq!(b.failed("test", &e), Duration::from_millis(10));
    }
}
