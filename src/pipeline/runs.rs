//! The runs in flight in this process: one per (thread, agent), from the moment a dispatch
//! takes the thread until its batch has committed. A dispatch whose thread is taken does not
//! run: it is put back, and once the run ends the oldest message waiting for the thread is made
//! due again ([`Runs::next_waiting`]), ahead of messages that arrived after it
//! ([`Runs::wait`]); the others wait for the runs before them, so a thread with many queued
//! messages puts each back once rather than at every run. A run can be
//! interrupted ([`Runs::interrupt`]) by a newer message of its thread.
//!
//! The registry is per process: on PostgreSQL with several instances, two of them may run one
//! thread at once (each message is still answered once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// A thread and the agent (local name) it runs for.
pub(super) type Key = (String, String);

/// How long, once a run ends, the messages that waited for it keep their turn ahead of newer
/// ones: time for their jobs to be claimed again (should another instance claim one, this one
/// stops holding the thread for it after this).
const WAITERS_GRACE: Duration = Duration::from_secs(5);

/// The runs in flight.
#[derive(Debug, Default)]
pub struct Runs {
    inner: Arc<Mutex<HashMap<Key, Slot>>>,
}

/// A thread's run in flight, if any, and the messages waiting for it.
#[derive(Debug, Default)]
struct Slot {
    run: Option<Entry>,
    /// The seq of each message put back to wait, until when it keeps its place, and its job.
    waiting: Vec<(i64, Instant, String)>,
}

#[derive(Debug)]
struct Entry {
    /// Turns `true` when the run is interrupted.
    cancel: watch::Sender<bool>,
    /// Dropped when the run ends: every receiver learns so.
    _ended: watch::Sender<()>,
    ended: watch::Receiver<()>,
}

/// A run taken by [`Runs::take`]; dropping it ends the run.
#[derive(Debug)]
pub(super) struct Run {
    key: Key,
    cancel: watch::Receiver<bool>,
    runs: Arc<Mutex<HashMap<Key, Slot>>>,
}

fn lock(m: &Mutex<HashMap<Key, Slot>>) -> MutexGuard<'_, HashMap<Key, Slot>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Runs {
    /// Takes `key` for the run of the message of `seq`; `None` when a run of it is in flight,
    /// or an older message waits for its turn (messages of a thread run in order).
    pub(super) fn take(&self, key: Key, seq: i64) -> Option<Run> {
        let mut map = lock(&self.inner);
        let slot = map.entry(key.clone()).or_default();
        let now = Instant::now();
        slot.waiting
            .retain(|(s, until, _)| *s != seq && *until > now);
        if slot.run.is_some() || slot.waiting.iter().any(|(s, _, _)| *s < seq) {
            return None;
        }
        let (cancel, cancel_rx) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(());
        slot.run = Some(Entry {
            cancel,
            _ended: ended_tx,
            ended,
        });
        Some(Run {
            key,
            cancel: cancel_rx,
            runs: Arc::clone(&self.inner),
        })
    }

    /// Records that the message of `seq` (dispatched by `job`) waits for its turn in `key`, at
    /// most for `longest`.
    pub(super) fn wait(&self, key: Key, seq: i64, job: &str, longest: Duration) {
        let mut map = lock(&self.inner);
        let slot = map.entry(key).or_default();
        if !slot.waiting.iter().any(|(s, _, _)| *s == seq) {
            slot.waiting
                .push((seq, Instant::now() + longest, job.to_owned()));
        }
    }

    /// The job of the oldest message waiting for `key` when no run of it is in flight: the one
    /// to make due now (the others wait for the run it starts).
    pub(super) fn next_waiting(&self, key: &Key) -> Option<String> {
        let now = Instant::now();
        let map = lock(&self.inner);
        let slot = map.get(key).filter(|s| s.run.is_none())?;
        slot.waiting
            .iter()
            .filter(|(_, until, _)| *until > now)
            .min_by_key(|(seq, _, _)| *seq)
            .map(|(_, _, job)| job.clone())
    }

    /// Interrupts the run of `key`, if one is in flight; whether there was one.
    pub(super) fn interrupt(&self, key: &Key) -> bool {
        lock(&self.inner)
            .get(key)
            .and_then(|s| s.run.as_ref())
            .is_some_and(|e| {
                e.cancel.send_replace(true);
                true
            })
    }

    /// Resolves once the run of `key` in flight ends; `None` when none is.
    pub(super) fn ended(&self, key: &Key) -> Option<impl std::future::Future<Output = ()> + use<>> {
        let mut rx = lock(&self.inner)
            .get(key)
            .and_then(|s| s.run.as_ref())
            .map(|e| e.ended.clone())?;
        // `changed` fails once the run's sender is dropped: the run ended.
        Some(async move { while rx.changed().await.is_ok() {} })
    }
}

impl Run {
    /// The thread and agent it runs.
    pub(super) fn key(&self) -> &Key {
        &self.key
    }

    /// Resolves when the run is interrupted.
    pub(super) async fn interrupted(&self) {
        let mut rx = self.cancel.clone();
        if rx.wait_for(|c| *c).await.is_err() {
            // The entry is gone only after this run was dropped: never while it waits.
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let mut map = lock(&self.runs);
        let Some(slot) = map.get_mut(&self.key) else {
            return;
        };
        slot.run = None;
        let grace = Instant::now() + WAITERS_GRACE;
        for (_, until, _) in &mut slot.waiting {
            *until = (*until).min(grace);
        }
        if slot.waiting.is_empty() {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: &str) -> Key {
        (t.into(), "agent".into())
    }

    #[tokio::test]
    async fn a_thread_runs_once_at_a_time_and_its_end_is_heard() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        assert!(runs.take(key("t"), 2).is_none(), "taken");
        let other = runs.take(key("u"), 3);
        assert!(other.is_some(), "another thread is free");
        let ended = tokio::spawn(runs.ended(&key("t")).unwrap());
        tokio::task::yield_now().await;
        assert!(!ended.is_finished());
        drop(run);
        tokio::time::timeout(std::time::Duration::from_secs(5), ended)
            .await
            .unwrap()
            .unwrap();
        assert!(runs.take(key("t"), 2).is_some(), "free again");
        assert!(runs.ended(&key("none")).is_none());
    }

    #[test]
    fn a_message_that_waited_goes_before_newer_ones() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        runs.wait(key("t"), 2, "job-2", Duration::from_secs(60));
        runs.wait(key("t"), 4, "job-4", Duration::from_secs(60));
        assert_eq!(runs.next_waiting(&key("t")), None, "its thread still runs");
        drop(run);
        assert_eq!(
            runs.next_waiting(&key("t")).as_deref(),
            Some("job-2"),
            "the oldest"
        );
        assert!(runs.take(key("t"), 3).is_none(), "2 waited: it goes first");
        let second = runs.take(key("t"), 2).unwrap();
        drop(second);
        assert!(runs.take(key("t"), 3).is_some());
        // A waiter that does not come back within its time gives its place up.
        runs.wait(key("u"), 1, "job-1", Duration::ZERO);
        assert!(runs.take(key("u"), 5).is_some());
    }

    #[tokio::test]
    async fn an_interrupt_reaches_the_run_even_before_it_waits() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        assert!(!runs.interrupt(&key("u")));
        assert!(runs.interrupt(&key("t")));
        tokio::time::timeout(std::time::Duration::from_secs(5), run.interrupted())
            .await
            .unwrap();
    }
}
