//! The runs in flight in this process: one per (thread, agent), from the moment a dispatch
//! takes the thread until its batch has committed. A dispatch whose thread is taken does not
//! run: its job is kept, still leased to this instance ([`Runs::park`]), and once the run ends
//! the oldest message waiting for the thread goes back to the workers ([`Runs::next_parked`]),
//! ahead of messages that arrived after it ([`Runs::wait`]); the others wait for the runs before
//! them. A message this process stores and dispatches at once holds its place from its commit
//! ([`Runs::expect`]), so that its thread's next message, picked up by another worker, cannot
//! run first. Nothing of this touches the database beyond renewing the kept job's lease. A run
//! can be interrupted ([`Runs::interrupt`]) by a newer message of its thread.
//!
//! The registry is per process. On PostgreSQL, which several instances may share, a run taken
//! here is also leased in the database ([`crate::store::runs`]), and a message whose thread is
//! taken, here or elsewhere, waits there instead of being parked here; interrupts reach every
//! instance by `NOTIFY` ([`NOTIFY_CHANNEL`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::store::jobs::JobRow;

/// What a run is of: a thread and the agent (local name) it runs for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    /// The thread.
    pub(super) thread_id: String,
    /// The agent.
    pub(super) agent: String,
}

impl Key {
    /// The run of `agent` in `thread_id`.
    pub(super) fn new(thread_id: &str, agent: &str) -> Self {
        Self {
            thread_id: thread_id.to_owned(),
            agent: agent.to_owned(),
        }
    }
}

/// A message's place in the runs: its run and its position (`seq`) in the thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Place {
    /// The run.
    pub(super) key: Key,
    /// The message's position in its thread.
    pub(super) seq: i64,
}

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
    /// The messages waiting for their turn.
    waiting: Vec<Waiter>,
}

/// A message waiting for its thread.
#[derive(Debug)]
struct Waiter {
    seq: i64,
    /// Until when it keeps its place (while its job is not parked here).
    until: Instant,
    /// Its job, once kept leased here, and the lease's end (unix ms).
    parked: Option<(JobRow, i64)>,
}

#[derive(Debug)]
struct Entry {
    /// The run's message.
    seq: i64,
    /// Turns `true` when the run is interrupted.
    cancel: watch::Sender<bool>,
}

/// The PostgreSQL channel on which an instance that stores a message tells every instance to
/// interrupt the run of its thread in flight, if any: one line per message,
/// `thread id`, `agent` and `seq` separated by tabs.
pub(super) const NOTIFY_CHANNEL: &str = "switchboard_runs";

/// The line of [`NOTIFY_CHANNEL`] for a message of `seq` in `key`.
pub(super) fn notification(key: &Key, seq: i64) -> String {
    format!("{}\t{}\t{seq}", key.thread_id, key.agent)
}

/// The runs to interrupt a notification names: key and the newer message's `seq` (malformed
/// lines are skipped).
pub(super) fn parse_notification(payload: &str) -> impl Iterator<Item = Place> + '_ {
    payload.lines().filter_map(|line| {
        let mut f = line.split('\t');
        let (t, a, seq) = (f.next()?, f.next()?, f.next()?.parse().ok()?);
        Some(Place {
            key: Key::new(t, a),
            seq,
        })
    })
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
        slot.waiting.retain(|w| w.parked.is_some() || w.until > now);
        if slot.run.is_some() || slot.waiting.iter().any(|w| w.seq < seq) {
            return None;
        }
        slot.waiting.retain(|w| w.seq != seq);
        let (cancel, cancel_rx) = watch::channel(false);
        slot.run = Some(Entry { seq, cancel });
        Some(Run {
            key,
            cancel: cancel_rx,
            runs: Arc::clone(&self.inner),
        })
    }

    /// Records that the message of `seq` waits for its turn in `key`, at most for `longest`
    /// from now (a place it holds already is kept at least as long).
    pub(super) fn wait(&self, key: Key, seq: i64, longest: Duration) {
        let mut map = lock(&self.inner);
        Self::hold_place(&mut map, key, seq, Instant::now() + longest);
    }

    /// Records that the messages just stored, whose dispatch jobs this process's workers are
    /// about to run, are on their way to their threads: until each one's dispatch reaches
    /// [`Runs::take`] (for [`WAITERS_GRACE`] at the longest), no newer message of its thread
    /// takes the thread before it, even when a worker that got the newer job first is quicker.
    pub(super) fn expect(&self, stored: impl IntoIterator<Item = Place>) {
        let until = Instant::now() + WAITERS_GRACE;
        let mut map = lock(&self.inner);
        for Place { key, seq } in stored {
            Self::hold_place(&mut map, key, seq, until);
        }
    }

    fn hold_place(map: &mut HashMap<Key, Slot>, key: Key, seq: i64, until: Instant) {
        let slot = map.entry(key).or_default();
        match slot.waiting.iter_mut().find(|w| w.seq == seq) {
            Some(w) => w.until = w.until.max(until),
            None => slot.waiting.push(Waiter {
                seq,
                until,
                parked: None,
            }),
        }
    }

    /// Keeps the job of the waiting message of `seq` (leased here until `lease_until`) until
    /// its turn comes ([`Runs::next_parked`]).
    pub(super) fn park(&self, key: Key, seq: i64, job: JobRow, lease_until: i64) {
        let mut map = lock(&self.inner);
        let slot = map.entry(key).or_default();
        let parked = Some((job, lease_until));
        match slot.waiting.iter_mut().find(|w| w.seq == seq) {
            Some(w) => w.parked = parked,
            None => slot.waiting.push(Waiter {
                seq,
                until: Instant::now(),
                parked,
            }),
        }
    }

    /// Forgets the message of `seq` waiting in `key` (its job was lost to another worker).
    pub(super) fn leave(&self, key: &Key, seq: i64) {
        if let Some(slot) = lock(&self.inner).get_mut(key) {
            slot.waiting.retain(|w| w.seq != seq);
        }
    }

    /// When no run of `key` is in flight and the oldest message waiting for it is parked here:
    /// its job, to hand back to the workers (it keeps its place ahead of newer messages until it
    /// takes the thread, for a grace period).
    pub(super) fn next_parked(&self, key: &Key) -> Option<(JobRow, i64)> {
        let now = Instant::now();
        let mut map = lock(&self.inner);
        let slot = map.get_mut(key).filter(|s| s.run.is_none())?;
        slot.waiting.retain(|w| w.parked.is_some() || w.until > now);
        let oldest = slot.waiting.iter_mut().min_by_key(|w| w.seq)?;
        let job = oldest.parked.take()?;
        oldest.until = now + WAITERS_GRACE;
        Some(job)
    }

    /// Interrupts the run of `key` in flight, if there is one for a message older than
    /// `newer` (the message that interrupts it); whether there was one.
    pub(super) fn interrupt(&self, key: &Key, newer: i64) -> bool {
        lock(&self.inner)
            .get(key)
            .and_then(|s| s.run.as_ref())
            .filter(|e| e.seq < newer)
            .is_some_and(|e| {
                e.cancel.send_replace(true);
                true
            })
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
        for w in &mut slot.waiting {
            w.until = w.until.min(grace);
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
        Key::new(t, "agent")
    }

    fn place(t: &str, seq: i64) -> Place {
        Place { key: key(t), seq }
    }

    #[test]
    fn a_thread_runs_once_at_a_time() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        assert!(runs.take(key("t"), 2).is_none(), "taken");
        let other = runs.take(key("u"), 3);
        assert!(other.is_some(), "another thread is free");
        drop(run);
        assert!(runs.take(key("t"), 2).is_some(), "free again");
    }

    fn job(id: &str) -> JobRow {
        JobRow {
            id: id.into(),
            kind: "dispatch".into(),
            payload: "{}".into(),
            attempts: 1,
            max_attempts: 5,
        }
    }

    #[test]
    fn a_message_that_waited_goes_before_newer_ones() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        runs.wait(key("t"), 2, Duration::from_secs(60));
        runs.wait(key("t"), 4, Duration::from_secs(60));
        runs.park(key("t"), 4, job("job-4"), 9);
        runs.park(key("t"), 2, job("job-2"), 9);
        assert!(
            runs.next_parked(&key("t")).is_none(),
            "its thread still runs"
        );
        drop(run);
        let (first, until) = runs.next_parked(&key("t")).unwrap();
        assert_eq!((first.id.as_str(), until), ("job-2", 9), "the oldest first");
        assert!(runs.next_parked(&key("t")).is_none(), "one at a time");
        assert!(runs.take(key("t"), 3).is_none(), "2 waited: it goes first");
        let second = runs.take(key("t"), 2).unwrap();
        assert!(runs.take(key("t"), 4).is_none());
        drop(second);
        assert_eq!(runs.next_parked(&key("t")).unwrap().0.id, "job-4");
        assert!(runs.take(key("t"), 4).is_some());
        // A waiter that does not come back within its time gives its place up.
        runs.wait(key("u"), 1, Duration::ZERO);
        assert!(runs.take(key("u"), 5).is_some());
    }

    #[test]
    fn a_message_stored_first_takes_its_thread_first_whichever_dispatch_comes_first() {
        let runs = Runs::default();
        runs.expect([place("t", 1), place("t", 2), place("u", 3)]);
        assert!(
            runs.take(key("t"), 2).is_none(),
            "1 was stored first and has not run yet"
        );
        runs.wait(key("t"), 2, Duration::from_secs(60));
        runs.park(key("t"), 2, job("job-2"), 9);
        assert!(runs.take(key("u"), 3).is_some(), "other threads are free");
        let first = runs.take(key("t"), 1).unwrap();
        assert!(runs.next_parked(&key("t")).is_none(), "1 runs");
        drop(first);
        assert_eq!(runs.next_parked(&key("t")).unwrap().0.id, "job-2");
        assert!(runs.take(key("t"), 2).is_some());
        // A place kept for a message whose dispatch never comes is given up after the grace.
        runs.expect([place("v", 1)]);
        lock(&runs.inner)
            .get_mut(&key("v"))
            .unwrap()
            .waiting
            .iter_mut()
            .for_each(|w| w.until = Instant::now());
        assert!(runs.take(key("v"), 2).is_some());
    }

    #[test]
    fn waiting_again_never_shortens_a_place() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        runs.wait(key("t"), 2, Duration::from_secs(60));
        runs.wait(key("t"), 2, Duration::ZERO);
        drop(run);
        assert!(runs.take(key("t"), 3).is_none(), "2 keeps its place");
    }

    #[tokio::test]
    async fn an_interrupt_reaches_the_run_even_before_it_waits() {
        let runs = Runs::default();
        let run = runs.take(key("t"), 1).unwrap();
        assert!(!runs.interrupt(&key("u"), 2));
        assert!(!runs.interrupt(&key("t"), 1), "only an older message's run");
        assert!(runs.interrupt(&key("t"), 2));
        tokio::time::timeout(std::time::Duration::from_secs(5), run.interrupted())
            .await
            .unwrap();
    }

    #[test]
    fn notifications_name_the_thread_agent_and_newer_message() {
        let line = notification(&key("t-1"), 42);
        let both = format!("{line}\nbroken\n{}", notification(&key("u"), 7));
        let parsed: Vec<Place> = parse_notification(&both).collect();
        assert_eq!(parsed, vec![place("t-1", 42), place("u", 7)]);
    }
}
