//! The one place that reads the wall clock, so time is a parameter everywhere else and tests can
//! control it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::message::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Whole seconds since the Unix epoch, for wire formats that count in seconds (HTTP
    /// signatures, JWTs).
    fn now_s(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }

    /// The current instant as a contract timestamp.
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.now_ms())
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock set to `ms`.
    #[must_use]
    pub fn new(ms: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(ms)))
    }

    /// Moves the clock forward.
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Nanoseconds since the Unix epoch on the system clock: the start of an exported trace span,
/// which must be comparable with the spans of other processes (never a test's clock).
#[must_use]
#[allow(clippy::disallowed_methods)]
pub fn system_unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
