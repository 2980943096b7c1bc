//! One lookup per key at a time: callers that miss a cache for the same key (a host's NodeInfo,
//! say) pass through a [`Gates`] gate one after the other, so the first fetches and the rest
//! find its answer cached instead of each fetching it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{Mutex as Gate, OwnedMutexGuard};

/// How many keys are remembered before the ones nobody holds any more are dropped.
const PRUNE_AT: usize = 1024;

/// A gate per key, alive while someone holds or waits for it.
#[derive(Debug, Default)]
pub struct Gates {
    open: Mutex<HashMap<String, Weak<Gate<()>>>>,
}

/// The gate of one key, held: the next caller for the key passes once it is dropped.
#[derive(Debug)]
pub struct Passage {
    _held: OwnedMutexGuard<()>,
}

impl Gates {
    /// Waits until no one else holds `key`'s gate, and holds it.
    pub async fn enter(&self, key: &str) -> Passage {
        let gate = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            match open.get(key).and_then(Weak::upgrade) {
                Some(gate) => gate,
                None => {
                    if open.len() >= PRUNE_AT {
                        open.retain(|_, g| g.strong_count() > 0);
                    }
                    let gate = Arc::new(Gate::new(()));
                    open.insert(key.to_owned(), Arc::downgrade(&gate));
                    gate
                }
            }
        };
        Passage {
            _held: gate.lock_owned().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_caller_per_key_at_a_time_others_pass() {
        let gates = Gates::default();
        let first = gates.enter("a").await;
        let blocked = tokio::time::timeout(std::time::Duration::from_millis(50), gates.enter("a"));
        assert!(blocked.await.is_err(), "a is held");
        let _other = gates.enter("b").await;
        drop(first);
        let _again = tokio::time::timeout(std::time::Duration::from_secs(5), gates.enter("a"))
            .await
            .expect("a is free again");
    }

    #[tokio::test]
    async fn gates_nobody_holds_are_dropped() {
        let gates = Gates::default();
        for i in 0..PRUNE_AT + 10 {
            drop(gates.enter(&i.to_string()).await);
        }
        let held = gates.open.lock().unwrap().len();
        assert!(held <= PRUNE_AT, "{held} gates remembered");
    }
}
