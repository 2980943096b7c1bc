//! `[queue]`: leases, polling, back-off and retention of the durable queue, and its job kinds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Settings of one job kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobKindConfig {
    /// Concurrent claim loops.
    pub workers: usize,
    /// Jobs claimed and committed together.
    pub batch_size: usize,
    /// Attempts before the job is dead.
    pub max_attempts: u32,
}

impl Default for JobKindConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            batch_size: 64,
            max_attempts: 10,
        }
    }
}

/// The durable queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// How long a claimed job stays leased; an expired lease returns the job.
    pub lease_seconds: u64,
    /// Idle workers look for due jobs at least this often.
    pub poll_interval_ms: u64,
    /// First retry delay; doubles per attempt, with jitter.
    pub backoff_base_ms: u64,
    /// Longest retry delay.
    pub backoff_max_ms: u64,
    /// Finished jobs are deleted after this long.
    pub done_retention_seconds: u64,
    /// Per job kind (`dispatch`, `deliver`, …).
    pub kinds: BTreeMap<String, JobKindConfig>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        let mut kinds = BTreeMap::new();
        kinds.insert(
            "dispatch".into(),
            JobKindConfig {
                workers: 2,
                batch_size: 64,
                max_attempts: 8,
            },
        );
        kinds.insert(
            "deliver".into(),
            JobKindConfig {
                workers: 2,
                batch_size: 64,
                max_attempts: 15,
            },
        );
        Self {
            lease_seconds: 120,
            poll_interval_ms: 1_000,
            backoff_base_ms: 2_000,
            backoff_max_ms: 6 * 3_600_000,
            done_retention_seconds: 86_400,
            kinds,
        }
    }
}

impl QueueConfig {
    /// The settings of `kind` (defaults when not configured).
    #[must_use]
    pub fn kind(&self, kind: &str) -> JobKindConfig {
        self.kinds.get(kind).copied().unwrap_or_default()
    }

    /// Every job kind must be able to run, and a lease must last.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        for (kind, k) in &self.kinds {
            if k.workers == 0 || k.batch_size == 0 || k.max_attempts == 0 {
                problems.push(format!(
                    "queue.kinds.{kind}: workers, batch_size and max_attempts must be > 0"
                ));
            }
        }
        if self.lease_seconds == 0 {
            problems.push("queue.lease_seconds: must be > 0".into());
        }
    }
}
