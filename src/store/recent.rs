//! Rows this instance wrote last, kept in memory as written so that the step that comes next
//! (a message's dispatch, a response's delivery, a task's next change) need not read them back.
//!
//! Bounded in rows and in bytes; when full the rows put longest ago go first (a miss only costs
//! a read). Only what a commit wrote goes in, after the commit.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The map's hasher: keys are ids this instance or its database made, never chosen by a remote,
/// so the map needs no hash that resists collisions chosen by an attacker.
type Hasher = foldhash::fast::RandomState;

/// What a remembered row weighs, in bytes (its large fields).
pub trait Weight {
    /// Approximate size in bytes.
    fn weight(&self) -> usize;
}

/// The rows last written, by id (a string unless said otherwise).
#[derive(Debug)]
pub struct Recent<V, K = String> {
    rows: Mutex<Rows<V, K>>,
    max_rows: usize,
    max_bytes: usize,
    max_row_bytes: usize,
}

#[derive(Debug)]
struct Rows<V, K> {
    /// Each row with the number of the put that wrote it.
    by_id: HashMap<K, (V, u64), Hasher>,
    /// Ids in the order they were put, with the put's number (an id put again is here twice;
    /// only the entry whose number matches is the row's).
    order: VecDeque<(K, u64)>,
    puts: u64,
    bytes: usize,
}

impl<V, K: Hash + Eq> Rows<V, K> {
    /// Drops the row put longest ago; false when none is left.
    fn evict_oldest(&mut self) -> bool
    where
        V: Weight,
    {
        while let Some((id, n)) = self.order.pop_front() {
            if self.by_id.get(&id).is_some_and(|(_, held)| *held == n) {
                if let Some((old, _)) = self.by_id.remove(&id) {
                    self.bytes -= old.weight();
                }
                return true;
            }
        }
        false
    }
}

impl<V: Clone + Weight, K: Hash + Eq + Clone> Recent<V, K> {
    /// At most `max_rows` rows and `max_bytes` bytes; rows over `max_row_bytes` are not kept.
    /// With `max_rows` 0 it holds nothing.
    #[must_use]
    pub fn new(max_rows: usize, max_bytes: usize, max_row_bytes: usize) -> Self {
        Self {
            rows: Mutex::new(Rows {
                by_id: HashMap::default(),
                order: VecDeque::new(),
                puts: 0,
                bytes: 0,
            }),
            max_rows,
            max_bytes,
            max_row_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Rows<V, K>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The row written last under `id`, if still held.
    #[must_use]
    pub fn get<Q: Hash + Eq + ?Sized>(&self, id: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.lock().by_id.get(id).map(|(row, _)| row.clone())
    }

    /// The rows held under each of `ids`, in order (one lock for all).
    pub fn get_each<'q, Q: Hash + Eq + ?Sized + 'q>(
        &self,
        ids: impl IntoIterator<Item = &'q Q>,
    ) -> Vec<Option<V>>
    where
        K: Borrow<Q>,
    {
        let r = self.lock();
        ids.into_iter()
            .map(|id| r.by_id.get(id).map(|(row, _)| row.clone()))
            .collect()
    }

    /// Remembers `row` under `id`, replacing what was there (a row too large to keep is
    /// forgotten instead, so an older version is never served).
    pub fn put<Q: Hash + Eq + ToOwned<Owned = K> + ?Sized>(&self, id: &Q, row: V)
    where
        K: Borrow<Q>,
    {
        self.put_unless(id, row, |_, _| false);
    }

    /// As [`Recent::put`], but keeps what is there when `stale(held, row)`: a writer that
    /// remembers a row after its commit may come after one that committed a newer version.
    pub fn put_unless<Q: Hash + Eq + ToOwned<Owned = K> + ?Sized>(
        &self,
        id: &Q,
        row: V,
        stale: impl Fn(&V, &V) -> bool,
    ) where
        K: Borrow<Q>,
    {
        if self.max_rows == 0 {
            return;
        }
        let weight = row.weight();
        let mut r = self.lock();
        if r.by_id.get(id).is_some_and(|(held, _)| stale(held, &row)) {
            return;
        }
        if let Some((old, _)) = r.by_id.remove(id) {
            r.bytes -= old.weight();
        }
        if weight > self.max_row_bytes {
            return;
        }
        while (r.by_id.len() >= self.max_rows || r.bytes + weight > self.max_bytes)
            && r.evict_oldest()
        {}
        // Ids put again leave entries behind in the order: past twice the rows, it is rebuilt.
        if r.order.len() > 2 * self.max_rows {
            let Rows { by_id, order, .. } = &mut *r;
            order.retain(|(id, n)| by_id.get::<K>(id).is_some_and(|(_, held)| held == n));
        }
        r.puts += 1;
        let n = r.puts;
        let id = id.to_owned();
        r.order.push_back((id.clone(), n));
        r.bytes += weight;
        r.by_id.insert(id, (row, n));
    }

    /// Forgets `id` (another instance changed it).
    pub fn forget<Q: Hash + Eq + ?Sized>(&self, id: &Q)
    where
        K: Borrow<Q>,
    {
        let mut r = self.lock();
        if let Some((old, _)) = r.by_id.remove(id) {
            r.bytes -= old.weight();
        }
    }

    /// Forgets every row (what was announced while this instance was not listening may have
    /// changed any of them).
    pub fn clear(&self) {
        let mut r = self.lock();
        r.by_id.clear();
        r.order.clear();
        r.bytes = 0;
    }

    /// Rows and bytes held.
    #[must_use]
    pub fn size(&self) -> (usize, usize) {
        let r = self.lock();
        (r.by_id.len(), r.bytes)
    }
}

impl Weight for String {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl<T: Weight> Weight for std::sync::Arc<T> {
    fn weight(&self) -> usize {
        T::weight(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_budgets() {
        let recent = Recent::new(100, 1_000, 100);
        recent.put("a", "x".repeat(10));
        recent.put("a", "x".repeat(20));
        assert_eq!(recent.size(), (1, 20));
        assert_eq!(recent.get("a").map(|r| r.len()), Some(20));
        // Too large to remember: forgotten, so a stale smaller version is not served.
        recent.put("a", "x".repeat(101));
        assert!(recent.get("a").is_none());
        assert_eq!(recent.size(), (0, 0));
        // Filling past the byte budget drops the oldest rows first.
        for i in 0..=10 {
            recent.put(&i.to_string(), "x".repeat(100));
        }
        assert_eq!(recent.size(), (10, 1_000));
        assert!(recent.get("0").is_none());
        assert!(recent.get("1").is_some() && recent.get("10").is_some());
        recent.forget("10");
        assert_eq!(recent.size(), (9, 900));
        let cleared = Recent::new(10, 1_000, 100);
        cleared.put("x", "x".repeat(10));
        cleared.clear();
        assert_eq!(cleared.size(), (0, 0));
        assert!(cleared.get("x").is_none());
        // A row put again counts from its last put.
        recent.put("1", "x".repeat(100));
        recent.put("11", "x".repeat(100));
        recent.put("12", "x".repeat(100));
        assert!(recent.get("1").is_some());
        assert!(recent.get("2").is_none());
        // A newer version is not replaced by an older one.
        recent.put_unless("v", "x".repeat(2), |held, new| held.len() > new.len());
        recent.put_unless("v", "x".to_owned(), |held, new| held.len() > new.len());
        assert_eq!(recent.get("v").map(|r| r.len()), Some(2));
        // And past the row budget.
        let few = Recent::new(2, 1_000, 100);
        for i in 0..3 {
            few.put(&i.to_string(), String::new());
        }
        assert_eq!(few.size().0, 2);
        assert!(few.get("0").is_none());
        // Puts of one id again and again keep the order bounded.
        for _ in 0..100 {
            few.put("2", String::new());
        }
        assert!(few.rows.lock().unwrap().order.len() <= 4);
        assert!(few.get("1").is_some() && few.get("2").is_some());
    }
}
