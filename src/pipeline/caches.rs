//! The pipeline's in-memory state beside the database: what this instance committed last,
//! kept so that the stage that reads it next need not read it back. The database is the truth;
//! every cache here holds only what a commit wrote (after that commit), or what was read from
//! the database, so a miss costs a read and never a wrong answer. What each holds, who fills
//! it, and why it is never stale:
//!
//! | cache | holds | filled by | never stale because |
//! |---|---|---|---|
//! | [`Caches::recent`] | stored messages and responses by id, as written | ingest and dispatch commits ([`Caches::hold`]) | stored rows change only when erased, and an erasure forgets them here, on every instance ([`Caches::forget`], `NOTIFY`) |
//! | [`Caches::turns`] | history turns by `seq`, as written or parsed | commits ([`Caches::hold`]); history reads of turns not held | as `recent`; and a window leaves erased turns out, so a turn held after its erasure is never asked for |
//! | [`Caches::threads`] | the `seq`s of each thread's turns (SQLite only) | commits ([`Caches::hold`]); a thread's `seq`s read once | on SQLite this instance is the only writer: every turn stored is noted as it is stored, and from just before its commit until it is noted its thread is read from the database ([`Caches::writing`]); a thread is used only once known whole |
//!
//! `tests/api/caches.rs` checks that a dispatch sees the same history with these on as with
//! them off ([`Caches::off`]), on both engines, across a restart and with a second instance.

use std::sync::Arc;

pub(super) use super::history::Writing;
use super::history::{Held, ThreadSeqs, Turns};
use crate::store::erasure::ErasedRow;
use crate::store::messages::{Recent as RecentRows, StoredMessage};
use crate::store::recent::Recent;

/// The pipeline's caches (see the module's table).
#[derive(Debug)]
pub struct Caches {
    /// Messages and responses stored last, by id, for the stages that read them next (a
    /// message's dispatch, a response's delivery): 4,096 rows, 16 MiB, rows up to 256 KiB.
    pub(super) recent: RecentRows,
    /// Parsed turns that history shows again and again, by `seq`: the windows of a few
    /// thousand busy threads (65,536 turns, 64 MiB, turns up to 256 KiB).
    pub(super) turns: Turns,
    /// The `seq`s of each thread's turns, where this instance alone writes the database.
    pub(super) threads: ThreadSeqs,
}

impl Caches {
    /// The caches of an instance; `single_writer` when it alone writes its database (SQLite).
    #[must_use]
    pub fn new(single_writer: bool) -> Self {
        Self {
            recent: Recent::new(4_096, 16 << 20, 256 << 10),
            turns: Recent::new(65_536, 64 << 20, 256 << 10),
            threads: ThreadSeqs::new(single_writer),
        }
    }

    /// Caches that hold nothing: every read goes to the database (the oracle the caches are
    /// tested against).
    #[must_use]
    pub fn off() -> Self {
        Self {
            recent: Recent::new(0, 0, 0),
            turns: Recent::new(0, 0, 0),
            threads: ThreadSeqs::new(false),
        }
    }

    /// Holds `rows`, just committed by this instance, each with the value it was written from
    /// ([`StoredMessage::parsed`]): dispatch and delivery find them in `recent`, and the next
    /// turns of their threads show them without reading anything but the index (`turns`), or
    /// on SQLite not even that (`threads`). `opened` are the threads this commit created: they
    /// had no turn before.
    pub(super) fn hold(&self, rows: Vec<StoredMessage>, opened: &[&str]) {
        let rows: Vec<Arc<StoredMessage>> = rows.into_iter().map(Arc::new).collect();
        for row in &rows {
            self.recent.put(&row.id, Arc::clone(row));
            self.turns.put(&row.seq, Held::Stored(Arc::clone(row)));
        }
        self.threads.note(&rows, opened);
    }

    /// Marks `threads` as being written by a transaction about to commit, until the returned
    /// guard is dropped, which is done once the rows are held ([`Caches::hold`]): meanwhile a
    /// dispatch reads their windows from the database, never missing a turn committed but not
    /// yet held.
    pub(super) fn writing<'a>(&self, threads: impl IntoIterator<Item = &'a str>) -> Writing {
        self.threads.writing(threads)
    }

    /// Forgets what is held of the erased `rows`: the rows, their turns and their place in
    /// their threads.
    pub(super) fn forget(&self, rows: &[ErasedRow]) {
        for row in rows {
            self.recent.forget(row.id.as_str());
            self.turns.forget(&row.seq);
            self.threads.forget(&row.thread_id, row.seq);
        }
    }

    /// Forgets a row another instance erased (`seq`, id).
    pub(super) fn forget_notified(&self, seq: i64, id: &str) {
        self.recent.forget(id);
        self.turns.forget(&seq);
    }

    /// Forgets every row held: erasures may have been missed (the `LISTEN` connection was
    /// lost). On PostgreSQL `threads` holds nothing.
    pub(super) fn clear(&self) {
        self.recent.clear();
        self.turns.clear();
    }
}
