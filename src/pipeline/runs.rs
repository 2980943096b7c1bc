//! The runs in flight in this process: one per (thread, agent), from the moment a dispatch
//! takes the thread until its batch has committed. A dispatch whose thread is taken does not
//! run: it is put back, and made due again once the run ends ([`Runs::ended`]). A run can be
//! interrupted ([`Runs::interrupt`]) by a newer message of its thread.
//!
//! The registry is per process: on PostgreSQL with several instances, two of them may run one
//! thread at once (each message is still answered once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

/// A thread and the agent (local name) it runs for.
pub(super) type Key = (String, String);

/// The runs in flight.
#[derive(Debug, Default)]
pub struct Runs {
    inner: Arc<Mutex<HashMap<Key, Entry>>>,
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
    runs: Arc<Mutex<HashMap<Key, Entry>>>,
}

impl Runs {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Entry>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `key` for a run; `None` when a run of it is in flight.
    pub(super) fn take(&self, key: Key) -> Option<Run> {
        let mut map = self.lock();
        if map.contains_key(&key) {
            return None;
        }
        let (cancel, cancel_rx) = watch::channel(false);
        let (ended_tx, ended) = watch::channel(());
        map.insert(
            key.clone(),
            Entry {
                cancel,
                _ended: ended_tx,
                ended,
            },
        );
        Some(Run {
            key,
            cancel: cancel_rx,
            runs: Arc::clone(&self.inner),
        })
    }

    /// Interrupts the run of `key`, if one is in flight; whether there was one.
    pub(super) fn interrupt(&self, key: &Key) -> bool {
        self.lock().get(key).is_some_and(|e| {
            e.cancel.send_replace(true);
            true
        })
    }

    /// Resolves once no run of `key` is in flight (at once when none is).
    pub(super) fn ended(&self, key: &Key) -> impl std::future::Future<Output = ()> + use<> {
        let rx = self.lock().get(key).map(|e| e.ended.clone());
        async move {
            if let Some(mut rx) = rx {
                // Returns an error once the run's sender is dropped: the run ended.
                while rx.changed().await.is_ok() {}
            }
        }
    }
}

impl Run {
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
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
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
        let run = runs.take(key("t")).unwrap();
        assert!(runs.take(key("t")).is_none(), "taken");
        let other = runs.take(key("u"));
        assert!(other.is_some(), "another thread is free");
        let ended = tokio::spawn(runs.ended(&key("t")));
        tokio::task::yield_now().await;
        assert!(!ended.is_finished());
        drop(run);
        tokio::time::timeout(std::time::Duration::from_secs(5), ended)
            .await
            .unwrap()
            .unwrap();
        assert!(runs.take(key("t")).is_some(), "free again");
        runs.ended(&key("none")).await;
    }

    #[tokio::test]
    async fn an_interrupt_reaches_the_run_even_before_it_waits() {
        let runs = Runs::default();
        let run = runs.take(key("t")).unwrap();
        assert!(!runs.interrupt(&key("u")));
        assert!(runs.interrupt(&key("t")));
        tokio::time::timeout(std::time::Duration::from_secs(5), run.interrupted())
            .await
            .unwrap();
    }
}
