//! A transport that keeps what it is asked to deliver in memory: the test transport of the
//! integration suite and the no-op sink of the pipeline benchmark.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::error::OutboundError;
use crate::pipeline::{Delivery, Transport};

/// Records deliveries; can be told to fail the next few.
#[derive(Debug)]
pub struct MemoryTransport {
    name: String,
    record: bool,
    delivered: Mutex<Vec<Delivery>>,
    count: AtomicU64,
    fail_next: AtomicU32,
}

impl MemoryTransport {
    /// A recording transport called `name`.
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            record: true,
            delivered: Mutex::new(Vec::new()),
            count: AtomicU64::new(0),
            fail_next: AtomicU32::new(0),
        }
    }

    /// A transport that only counts (for benchmarks).
    #[must_use]
    pub fn counting(name: &str) -> Self {
        Self {
            record: false,
            ..Self::new(name)
        }
    }

    /// The next `n` deliveries fail temporarily.
    pub fn fail_next(&self, n: u32) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    /// Deliveries so far (attempts that succeeded).
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Copies of the recorded deliveries.
    #[must_use]
    pub fn delivered(&self) -> Vec<Delivery> {
        match self.delivered.lock() {
            Ok(v) => v.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

#[async_trait::async_trait]
impl Transport for MemoryTransport {
    fn name(&self) -> &str {
        &self.name
    }

    async fn deliver(&self, delivery: &Delivery) -> Result<(), OutboundError> {
        let failing = self
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(OutboundError::temporary("injected failure"));
        }
        if self.record {
            match self.delivered.lock() {
                Ok(mut v) => v.push(delivery.clone()),
                Err(p) => p.into_inner().push(delivery.clone()),
            }
        }
        self.count.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
