//! The earlier turns of a thread, as a dispatch shows them to its agent.
//!
//! History is what chat agents live on, and in a long thread every dispatch reads the same
//! turns again: each stays in the window for the next twenty or so. So the turns are kept in
//! memory, parsed, by `seq` ([`Turns`]): a dispatch reads only which turns the window holds (the
//! `seq`s, from the `(thread_id, seq)` index alone, without touching a message row) and reads and
//! parses the bodies of those it does not hold, usually the last one or two. Stored messages
//! change only when they are erased (their author deleted them, or retention: [`forget`] on
//! every instance), and windows leave erased turns out, so a held turn is never shown stale,
//! and a turn another instance wrote is simply not held yet.

use std::sync::Arc;

use super::Core;
use crate::error::{Error, OutboundError, Result};
use crate::message::{HistoricalMessage, HistoryPolicy, Part, Role, Sender, Timestamp};
use crate::store::messages::{self, Parsed, StoredMessage};
use crate::store::recent::Weight;

/// One stored turn, as much of it as history needs (`raw`, capabilities and the rest are not
/// kept).
#[derive(Debug)]
pub struct Turn {
    id: String,
    seq: i64,
    /// An inbound message (a response otherwise).
    inbound: bool,
    /// The turn it answers, when it names one (for a response, always).
    in_reply_to: Option<String>,
    /// Who wrote it (for a response, the agent's address).
    sender: Arc<Sender>,
    parts: Arc<Vec<Part>>,
    timestamp: Timestamp,
    /// What it weighs in memory (its stored body's length, an upper bound).
    weight: usize,
}

impl Weight for Turn {
    fn weight(&self) -> usize {
        self.weight
    }
}

/// A turn held in memory: as stored (this instance wrote it and nobody has shown it yet), or
/// parsed.
#[derive(Debug, Clone)]
pub enum Held {
    /// The row as written; parsed the first time a dispatch shows it.
    Stored(Arc<StoredMessage>),
    /// Parsed.
    Parsed(Arc<Turn>),
}

impl Weight for Held {
    fn weight(&self) -> usize {
        match self {
            // The row's own weight: its body, and the value it was written from when held too.
            Self::Stored(row) => row.weight(),
            Self::Parsed(turn) => turn.weight,
        }
    }
}

/// Turns by `seq`.
pub type Turns = crate::store::recent::Recent<Held, i64>;

/// The `seq`s of each thread's turns, when this instance is the only one writing the database
/// (SQLite): then every turn it stores is noted here as it is stored, and a dispatch finds its window
/// here instead of asking the database, whose readers must read the index pages again after
/// every commit. A thread is known *whole* once it was created here or its `seq`s were read
/// once; until then what is noted of it is only a part, and the database is asked. Bounded in
/// memory, each thread weighed with its entry and id as well as its `seq`s (a workload of
/// one-turn threads holds far more threads than turns); when full it starts over. With
/// PostgreSQL, where other instances store turns too, it holds nothing and the database is
/// always asked.
#[derive(Debug)]
pub struct ThreadSeqs {
    inner: Option<Arc<std::sync::Mutex<ThreadsInner>>>,
}

#[derive(Debug, Default)]
struct ThreadsInner {
    by_thread: std::collections::HashMap<String, ThreadEntry, foldhash::fast::RandomState>,
    /// Threads a transaction is writing turns to, and how many such transactions: until their
    /// rows are noted, their windows are read from the database ([`ThreadSeqs::writing`]).
    writing: std::collections::HashMap<String, usize, foldhash::fast::RandomState>,
    /// What `by_thread` weighs ([`THREAD_BYTES`], [`SEQ_BYTES`]).
    bytes: usize,
    /// How many times it started over: a read begun before then may lack turns noted since
    /// and forgotten.
    restarts: u64,
}

impl ThreadsInner {
    fn start_over(&mut self) {
        self.by_thread.clear();
        self.bytes = 0;
        self.restarts += 1;
    }

    /// Starts over if full, before more is added (so it holds at most one addition more than
    /// [`THREADS_HELD_BYTES`]).
    fn make_room(&mut self) {
        if self.bytes >= THREADS_HELD_BYTES {
            self.start_over();
        }
    }

    /// Applies `f` to the entry of `thread_id`, made (and weighed) if it is new.
    fn with_entry<R>(&mut self, thread_id: &str, f: impl FnOnce(&mut ThreadEntry) -> R) -> R {
        if let Some(entry) = self.by_thread.get_mut(thread_id) {
            return f(entry);
        }
        self.bytes += THREAD_BYTES + thread_id.len();
        f(self.by_thread.entry(thread_id.to_owned()).or_default())
    }

    /// Adds `seq` to the thread's entry, unless the thread is too long to hold.
    fn insert(&mut self, thread_id: &str, seq: i64) {
        let added = self.with_entry(thread_id, |e| !e.long && e.insert(seq));
        if added {
            self.bytes += SEQ_BYTES;
        }
    }
}

#[derive(Debug, Default)]
struct ThreadEntry {
    /// Ascending.
    seqs: Vec<i64>,
    /// Every turn of the thread is in `seqs`.
    whole: bool,
    /// Too long a thread to hold: the database is asked.
    long: bool,
}

/// What [`ThreadSeqs`] holds at most, weighed as [`THREAD_BYTES`] and [`SEQ_BYTES`] say: some
/// 70,000 one-turn threads, or a million turns of long ones.
const THREADS_HELD_BYTES: usize = 16 << 20;

/// What a thread held weighs besides its id's characters and its `seq`s: its map entry, the
/// table's spare room and the allocations of its id and `seq` vector (about 215 bytes measured
/// for a thread of a 26-character id and one or two `seq`s).
const THREAD_BYTES: usize = 176;

/// What a `seq` held weighs: 8 bytes, and the room its vector grew into.
const SEQ_BYTES: usize = 12;

/// The longest thread whose `seq`s are read into [`ThreadSeqs`].
const LONGEST_HELD: usize = 1 << 16;

/// What [`ThreadSeqs`] knows of a thread's window.
enum Lookup {
    /// The thread is held whole.
    Held(Window),
    /// Not held whole yet: its `seq`s are to be read.
    Unknown,
    /// Not held (too long, or `seq`s are not held at all): the database is asked each time.
    Asked,
}

/// Turns stored after a message that history looks through in memory for answers that came
/// while it waited; past this many the database's `answers` index is asked instead.
const LATER_TURNS: usize = 64;

/// Where a window's turns are: its `seq`s, and those of the thread's turns stored after the
/// message, when known.
struct Window {
    seqs: Vec<i64>,
    later: Option<Vec<i64>>,
}

impl ThreadEntry {
    /// Adds `seq` in its place; whether it was not there yet.
    fn insert(&mut self, seq: i64) -> bool {
        match self.seqs.last() {
            Some(&last) if last >= seq => match self.seqs.binary_search(&seq) {
                Ok(_) => false,
                Err(at) => {
                    self.seqs.insert(at, seq);
                    true
                }
            },
            _ => {
                self.seqs.push(seq);
                true
            }
        }
    }

    /// The first `head` and last `tail` `seq`s before `before`, and those after it.
    fn window(&self, before: i64, head: usize, tail: usize) -> Window {
        let end = self.seqs.partition_point(|&s| s < before);
        let mut seqs: Vec<i64> = self.seqs[..end.min(head)].to_vec();
        let from = end.saturating_sub(tail).max(seqs.len());
        seqs.extend_from_slice(&self.seqs[from..end]);
        let after = end + usize::from(self.seqs.get(end) == Some(&before));
        let later = self.seqs.get(after..).unwrap_or_default();
        Window {
            seqs,
            later: (later.len() <= LATER_TURNS).then(|| later.to_vec()),
        }
    }
}

fn lock_threads(m: &std::sync::Mutex<ThreadsInner>) -> std::sync::MutexGuard<'_, ThreadsInner> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Threads a transaction is writing ([`ThreadSeqs::writing`]); dropped once its rows are noted
/// (or the transaction failed).
#[derive(Debug)]
#[must_use = "drop it once the rows it covers are noted"]
pub(super) struct Writing {
    inner: Option<Arc<std::sync::Mutex<ThreadsInner>>>,
    threads: Vec<String>,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let Some(inner) = &self.inner else {
            return;
        };
        let mut held = lock_threads(inner);
        for t in &self.threads {
            if let Some(n) = held.writing.get_mut(t) {
                *n -= 1;
                if *n == 0 {
                    held.writing.remove(t);
                }
            }
        }
    }
}

impl ThreadSeqs {
    /// Holding `seq`s when `single_writer` (this instance alone writes the database); holding
    /// nothing otherwise.
    #[must_use]
    pub fn new(single_writer: bool) -> Self {
        Self {
            inner: single_writer.then(|| Arc::new(std::sync::Mutex::new(ThreadsInner::default()))),
        }
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, ThreadsInner>> {
        self.inner.as_deref().map(lock_threads)
    }

    /// Marks `threads` as being written by a transaction about to commit: until the returned
    /// [`Writing`] is dropped (after its rows are noted), their windows are read from the
    /// database, so a turn committed but not yet noted is never missed by a dispatch running
    /// meanwhile.
    pub(super) fn writing<'a>(&self, threads: impl IntoIterator<Item = &'a str>) -> Writing {
        let Some(inner) = &self.inner else {
            return Writing {
                inner: None,
                threads: Vec::new(),
            };
        };
        let mut threads: Vec<String> = threads.into_iter().map(str::to_owned).collect();
        threads.sort_unstable();
        threads.dedup();
        let mut held = lock_threads(inner);
        for t in &threads {
            *held.writing.entry(t.clone()).or_default() += 1;
        }
        Writing {
            inner: Some(Arc::clone(inner)),
            threads,
        }
    }

    /// Notes stored `rows`; the threads `opened` had none before.
    pub(super) fn note(&self, rows: &[Arc<StoredMessage>], opened: &[&str]) {
        let Some(mut inner) = self.lock() else {
            return;
        };
        inner.make_room();
        for id in opened {
            inner.with_entry(id, |e| e.whole = true);
        }
        for row in rows {
            inner.insert(&row.thread_id, row.seq);
        }
    }

    /// Forgets the turn `seq` of `thread_id` (it was erased).
    pub(super) fn forget(&self, thread_id: &str, seq: i64) {
        let Some(mut inner) = self.lock() else {
            return;
        };
        if let Some(entry) = inner.by_thread.get_mut(thread_id)
            && let Ok(at) = entry.seqs.binary_search(&seq)
        {
            entry.seqs.remove(at);
            inner.bytes = inner.bytes.saturating_sub(SEQ_BYTES);
        }
    }

    /// The window of `thread_id` before `before`, as far as it is held.
    fn window(&self, thread_id: &str, before: i64, head: usize, tail: usize) -> Lookup {
        let Some(inner) = self.lock() else {
            return Lookup::Asked;
        };
        if inner.writing.contains_key(thread_id) {
            return Lookup::Asked;
        }
        match inner.by_thread.get(thread_id) {
            Some(e) if e.long => Lookup::Asked,
            Some(e) if e.whole => Lookup::Held(e.window(before, head, tail)),
            _ => Lookup::Unknown,
        }
    }

    /// The mark to pass to [`ThreadSeqs::load`], taken before the read.
    fn mark(&self) -> u64 {
        self.lock().map_or(0, |inner| inner.restarts)
    }

    /// Adds the `seq`s of `thread_id` read from the database, all of them unless there were
    /// more than [`LONGEST_HELD`]: the thread is now known whole (what was noted meanwhile is
    /// kept, so a turn stored during the read is not lost), or known to be too long to hold.
    /// Nothing is added when it started over since `mark` (what was noted meanwhile is gone).
    fn load(&self, thread_id: &str, seqs: &[i64], mark: u64) {
        let Some(mut inner) = self.lock() else {
            return;
        };
        // Full, it starts over first: that too voids a read begun before (the turns of this
        // thread noted since the read would be gone, and it would be held whole without them).
        inner.make_room();
        if inner.restarts != mark {
            return;
        }
        if seqs.len() > LONGEST_HELD {
            let dropped = inner.with_entry(thread_id, |e| {
                e.long = true;
                std::mem::take(&mut e.seqs).len()
            });
            inner.bytes = inner.bytes.saturating_sub(dropped * SEQ_BYTES);
            return;
        }
        let added = inner.with_entry(thread_id, |e| {
            e.whole = true;
            seqs.iter().filter(|&&seq| e.insert(seq)).count()
        });
        inner.bytes += added * SEQ_BYTES;
    }
}

/// What history needs of a stored inbound message.
#[derive(serde::Deserialize)]
struct InboundTurn {
    id: String,
    #[serde(default)]
    in_reply_to: Option<String>,
    sender: Sender,
    parts: Vec<Part>,
    received_at: Timestamp,
}

/// What history needs of a stored response.
#[derive(serde::Deserialize)]
struct OutboundTurn {
    id: String,
    #[serde(default)]
    in_reply_to: Option<String>,
    agent: String,
    parts: Vec<Part>,
}

fn parse(row: &StoredMessage) -> Result<Turn> {
    let corrupt =
        |e: serde_json::Error| Error::Corrupt(format!("stored message {} is corrupt: {e}", row.id));
    let weight = row.body.len();
    match &row.parsed {
        Some(Parsed::Message(m)) => {
            return Ok(Turn {
                id: m.id.clone(),
                seq: row.seq,
                inbound: true,
                in_reply_to: m.in_reply_to.clone(),
                sender: Arc::new(m.sender.clone()),
                parts: Arc::new(m.parts.clone()),
                timestamp: m.received_at,
                weight,
            });
        }
        Some(Parsed::Response(r)) => {
            return Ok(Turn {
                id: r.id.clone(),
                seq: row.seq,
                inbound: false,
                in_reply_to: Some(r.in_reply_to.clone()),
                sender: Arc::new(Sender::local_agent(&r.agent)),
                parts: Arc::new(r.parts.clone()),
                timestamp: Timestamp::from_unix_millis(row.created_at),
                weight,
            });
        }
        None => {}
    }
    Ok(if row.direction == "in" {
        let m: InboundTurn = serde_json::from_str(&row.body).map_err(corrupt)?;
        Turn {
            id: m.id,
            seq: row.seq,
            inbound: true,
            in_reply_to: m.in_reply_to,
            sender: Arc::new(m.sender),
            parts: Arc::new(m.parts),
            timestamp: m.received_at,
            weight,
        }
    } else {
        let r: OutboundTurn = serde_json::from_str(&row.body).map_err(corrupt)?;
        Turn {
            id: r.id,
            seq: row.seq,
            inbound: false,
            in_reply_to: r.in_reply_to,
            sender: Arc::new(Sender::local_agent(&r.agent)),
            parts: Arc::new(r.parts),
            timestamp: Timestamp::from_unix_millis(row.created_at),
            weight,
        }
    })
}

/// The turns each of a batch's turns shows as its history, by its `seq` ([`windows`]), or the
/// error its dispatch ends with.
#[derive(Default)]
pub(super) struct Windows(
    std::collections::HashMap<
        i64,
        std::result::Result<Vec<Arc<Turn>>, OutboundError>,
        foldhash::fast::RandomState,
    >,
);

/// The history of `rows` (turns about to run), looked up for all of them at once. Each one's
/// window (its thread's turns before it that the history policy can show: its head and one more
/// than its window, so it can tell that turns were left out) comes from [`ThreadSeqs`] where
/// held (a thread not held yet is read once and held), the others asked of the database
/// together ([`messages::thread_windows`]: one statement on PostgreSQL, instead of one per
/// turn). Then the answers to those turns stored after it (a message that waited for the run
/// before it sees that run's answer), for the inbound turns whose answer is not among them:
/// found among the turns stored since when [`ThreadSeqs`] knows them, the others asked of the
/// `answers` index in one statement for the batch ([`messages::answers_to`]).
///
/// A turn that cannot be read or parsed ends the dispatch of the turns whose history shows it,
/// and only theirs.
///
/// # Errors
/// Database errors, for the whole batch.
pub(super) async fn windows(core: &Core, rows: &[&StoredMessage]) -> Result<Windows> {
    let policy = core.history;
    let (head, tail) = (policy.keep_head, policy.window + 1);
    let mut found: Vec<(&StoredMessage, Window)> = Vec::with_capacity(rows.len());
    let mut asked: Vec<&StoredMessage> = Vec::new();
    for row in rows {
        let mut window = core
            .caches
            .threads
            .window(&row.thread_id, row.seq, head, tail);
        if let Lookup::Unknown = window {
            let mark = core.caches.threads.mark();
            let all = messages::thread_seqs(&core.db, &row.thread_id, LONGEST_HELD + 1).await?;
            core.caches.threads.load(&row.thread_id, &all, mark);
            window = core
                .caches
                .threads
                .window(&row.thread_id, row.seq, head, tail);
        }
        match window {
            Lookup::Held(w) => found.push((row, w)),
            Lookup::Unknown | Lookup::Asked => asked.push(row),
        }
    }
    let turns: Vec<(&str, i64)> = asked
        .iter()
        .map(|row| (row.thread_id.as_str(), row.seq))
        .collect();
    let read = messages::thread_windows(&core.db, &turns, head, tail).await?;
    found.extend(
        asked
            .into_iter()
            .zip(read)
            .map(|(row, seqs)| (row, Window { seqs, later: None })),
    );

    /// A turn's window read: its turns, and the ids of those whose answer may still come.
    struct Shown<'a> {
        row: &'a StoredMessage,
        /// The window's turns stored since, when known.
        later: Option<Vec<i64>>,
        turns: Result<Vec<Arc<Turn>>>,
        open: Vec<String>,
    }
    let mut shown = Vec::with_capacity(found.len());
    for (row, window) in found {
        let turns = held(core, &window.seqs).await;
        let open = turns
            .as_ref()
            .map_or_else(|_| Vec::new(), |t| open(&policy, &window.seqs, t));
        shown.push(Shown {
            row,
            later: window.later,
            turns,
            open,
        });
    }
    // Where the turns stored since are not known, the answers to the open turns are asked of
    // the `answers` index, for the whole batch at once (no statement when none is open).
    let ids: Vec<&str> = shown
        .iter()
        .filter(|s| s.later.is_none())
        .flat_map(|s| s.open.iter().map(String::as_str))
        .collect();
    let answers: foldhash::HashMap<String, i64> = messages::answers_to(&core.db, &ids)
        .await?
        .into_iter()
        .collect();
    let mut loaded = Windows::default();
    for s in shown {
        let later = s.later.unwrap_or_else(|| {
            s.open
                .iter()
                .filter_map(|id| answers.get(id).copied())
                .filter(|&seq| seq > s.row.seq)
                .collect()
        });
        let turns = match s.turns {
            Ok(mut turns) if !s.open.is_empty() && !later.is_empty() => {
                held(core, &later).await.map(|later| {
                    turns.extend(later.into_iter().filter(|t| answers_one_of(t, &s.open)));
                    turns
                })
            }
            turns => turns,
        };
        loaded
            .0
            .insert(s.row.seq, turns.map_err(OutboundError::from));
    }
    Ok(loaded)
}

/// The ids of the inbound turns among `turns` (the window `seqs`) whose answer may still come
/// after it: those not answered among them. When turns were left out between the head and the
/// window, the head's answers were stored long ago (and are among those left out): only the
/// window's turns can still have one to come.
fn open(policy: &HistoryPolicy, seqs: &[i64], turns: &[Arc<Turn>]) -> Vec<String> {
    let answered: foldhash::HashSet<&str> = turns
        .iter()
        .filter(|t| !t.inbound)
        .filter_map(|t| t.in_reply_to.as_deref())
        .collect();
    let whole = seqs.len() < policy.keep_head + policy.window + 1;
    let window_from = if whole {
        i64::MIN
    } else {
        seqs.get(policy.keep_head).copied().unwrap_or(i64::MIN)
    };
    turns
        .iter()
        .filter(|t| t.inbound && t.seq >= window_from && !answered.contains(t.id.as_str()))
        .map(|t| t.id.clone())
        .collect()
}

/// Whether `turn` is a response to one of `open`.
fn answers_one_of(turn: &Turn, open: &[String]) -> bool {
    !turn.inbound
        && turn
            .in_reply_to
            .as_deref()
            .is_some_and(|a| open.iter().any(|o| o == a))
}

/// The turns of `seqs`, from memory where held, the rest read and parsed (and held); a turn
/// whose row is gone or erased is left out.
async fn held(core: &Core, seqs: &[i64]) -> Result<Vec<Arc<Turn>>> {
    let mut held: Vec<Option<Arc<Turn>>> = Vec::with_capacity(seqs.len());
    let mut missing = Vec::new();
    for (seq, h) in seqs.iter().zip(core.caches.turns.get_each(seqs)) {
        held.push(match h {
            Some(Held::Parsed(turn)) => Some(turn),
            Some(Held::Stored(row)) if row.deleted_at.is_some() => None,
            Some(Held::Stored(row)) => {
                let turn = Arc::new(parse(&row)?);
                core.caches.turns.put(seq, Held::Parsed(Arc::clone(&turn)));
                Some(turn)
            }
            None => {
                missing.push(*seq);
                None
            }
        });
    }
    if !missing.is_empty() {
        for stored in messages::get_by_seqs(&core.db, &missing).await? {
            if stored.deleted_at.is_some() {
                continue;
            }
            let turn = Arc::new(parse(&stored)?);
            core.caches
                .turns
                .put(&stored.seq, Held::Parsed(Arc::clone(&turn)));
            if let Some(i) = seqs.iter().position(|s| *s == stored.seq) {
                held[i] = Some(turn);
            }
        }
    }
    Ok(held.into_iter().flatten().collect())
}

/// The thread's turns before `row`, as the agent `agent_address` sees them: its own are
/// assistant turns, everyone else's user turns. A turn relayed from one agent to another is the
/// same words as the response it relays: only the response is kept (and not even that when it
/// is `relayed`, the response the current turn itself relays). The earlier messages the turn
/// takes in (`absorbed`) open it and are not repeated here. A response stored after `row` (to a
/// turn that ran while this one waited) comes right after the message it answers. `windows` are
/// those its batch looked up ([`windows`]).
///
/// # Errors
/// What looking up its history failed with ([`windows`]): database errors, or a stored turn
/// that does not parse ([`Error::Corrupt`], permanent).
pub(super) fn before(
    row: &StoredMessage,
    windows: &Windows,
    agent_address: &str,
    relayed: Option<&str>,
    absorbed: &[super::conversation::Absorbed],
) -> std::result::Result<Vec<HistoricalMessage>, OutboundError> {
    let turns = match windows.0.get(&row.seq) {
        Some(Ok(turns)) => turns,
        Some(Err(e)) => return Err(e.clone()),
        None => {
            return Err(Error::Invalid(format!(
                "no history window was looked up for message {}",
                row.id
            ))
            .into());
        }
    };
    let responses: foldhash::HashSet<&str> = turns
        .iter()
        .filter(|t| !t.inbound)
        .map(|t| t.id.as_str())
        .collect();
    let seqs: foldhash::HashMap<&str, i64> = turns.iter().map(|t| (t.id.as_str(), t.seq)).collect();
    let mut shown: Vec<((i64, i64), &Turn)> = turns
        .iter()
        .filter(|t| relayed != Some(t.id.as_str()) && !absorbed.iter().any(|a| a.id == t.id))
        .filter(|t| {
            !(t.inbound
                && t.in_reply_to
                    .as_deref()
                    .is_some_and(|id| responses.contains(id))
                && super::chain::relays(&t.sender))
        })
        .map(|t| {
            let answered = t
                .in_reply_to
                .as_deref()
                .and_then(|id| seqs.get(id))
                .filter(|_| !t.inbound && t.seq > row.seq);
            let place = answered.map_or((t.seq, 0), |&a| (a, t.seq));
            (place, t.as_ref())
        })
        .collect();
    shown.sort_by_key(|(place, _)| *place);
    Ok(shown
        .into_iter()
        .map(|(_, t)| HistoricalMessage {
            id: Some(t.id.clone()),
            role: if !t.inbound && t.sender.address.eq_ignore_ascii_case(agent_address) {
                Role::Assistant
            } else {
                Role::User
            },
            sender: Arc::clone(&t.sender),
            parts: Arc::clone(&t.parts),
            timestamp: t.timestamp,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(thread: &str, seq: i64) -> Arc<StoredMessage> {
        Arc::new(StoredMessage {
            seq,
            id: format!("m{seq}"),
            thread_id: thread.to_owned(),
            direction: "in".into(),
            agent: "echo".into(),
            transport: "api".into(),
            body: "{}".into(),
            created_at: 0,
            deleted_at: None,
            parsed: None,
        })
    }

    fn turn(seq: i64, inbound: bool, in_reply_to: Option<&str>) -> Arc<Turn> {
        Arc::new(Turn {
            id: format!("m{seq}"),
            seq,
            inbound,
            in_reply_to: in_reply_to.map(str::to_owned),
            sender: Arc::new(Sender::local_agent("@echo@x")),
            parts: Arc::new(Vec::new()),
            timestamp: Timestamp::from_unix_millis(0),
            weight: 0,
        })
    }

    #[test]
    fn the_turns_whose_answer_may_come_later_are_the_unanswered_ones_of_the_window() {
        let policy = HistoryPolicy {
            keep_head: 1,
            window: 2,
            ..HistoryPolicy::default()
        };
        // A whole thread: 1 answered by 2, 3 and 4 not answered (yet).
        let whole = [
            turn(1, true, None),
            turn(2, false, Some("m1")),
            turn(3, true, None),
            turn(4, true, Some("m2")),
        ];
        assert_eq!(open(&policy, &[1, 2, 3], &whole[..3]), ["m3"]);
        assert_eq!(open(&policy, &[1, 2, 3, 4], &whole), ["m3", "m4"]);
        // Turns left out between the head (1) and the window (7, 8, 9): the head's answer was
        // stored long ago, so only the window's unanswered turns are open.
        let cut = [
            turn(1, true, None),
            turn(7, true, None),
            turn(8, false, Some("m7")),
            turn(9, true, None),
        ];
        assert_eq!(open(&policy, &[1, 7, 8, 9], &cut), ["m9"]);

        let open = vec!["m3".to_owned()];
        assert!(answers_one_of(&turn(5, false, Some("m3")), &open));
        assert!(!answers_one_of(&turn(5, false, Some("m1")), &open));
        assert!(
            !answers_one_of(&turn(5, true, Some("m3")), &open),
            "an inbound message that replies to it is not its answer"
        );
    }

    #[test]
    fn a_stored_turn_weighs_what_it_holds() {
        let plain = row("t", 1);
        assert_eq!(Held::Stored(Arc::clone(&plain)).weight(), plain.body.len());
        let response: crate::message::NormalizedResponse =
            serde_json::from_value(serde_json::json!({
                "id": "r1", "in_reply_to": "m1", "thread_id": "t", "agent": "@echo@x", "parts": []
            }))
            .unwrap();
        let mut written = (*plain).clone();
        written.body = serde_json::to_string(&response).unwrap();
        written.parsed = Some(Parsed::Response(Arc::new(response)));
        let body = written.body.len();
        // Held with the value it was written from: the body twice over, as the rows cache
        // counts it.
        assert_eq!(Held::Stored(Arc::new(written)).weight(), 2 * body);
    }

    fn held(threads: &ThreadSeqs, thread: &str, before: i64, head: usize, tail: usize) -> Window {
        match threads.window(thread, before, head, tail) {
            Lookup::Held(w) => w,
            Lookup::Unknown => panic!("{thread} unknown"),
            Lookup::Asked => panic!("{thread} asked"),
        }
    }

    #[test]
    fn a_thread_being_written_is_read_from_the_database_until_its_rows_are_noted() {
        let threads = ThreadSeqs::new(true);
        threads.note(&[row("t", 1)], &["t"]);
        threads.note(&[row("u", 2)], &["u"]);
        // A transaction writes turn 3 of `t`, commits, and has not noted it yet: a dispatch
        // running meanwhile must not take `t`'s window from memory, which lacks turn 3.
        let first = threads.writing(["t", "t"]);
        let second = threads.writing(["t"]);
        assert!(matches!(threads.window("t", 4, 1, 20), Lookup::Asked));
        assert_eq!(
            held(&threads, "u", 5, 1, 20).seqs,
            vec![2],
            "other threads are held"
        );
        threads.note(&[row("t", 3)], &[]);
        drop(first);
        assert!(
            matches!(threads.window("t", 4, 1, 20), Lookup::Asked),
            "a second transaction still writes it"
        );
        drop(second);
        assert_eq!(held(&threads, "t", 4, 1, 20).seqs, vec![1, 3]);
        // Where nothing is held, marking costs nothing and changes nothing.
        let none = ThreadSeqs::new(false);
        drop(none.writing(["t"]));
        assert!(matches!(none.window("t", 4, 1, 20), Lookup::Asked));
    }

    #[test]
    fn a_window_is_the_head_and_the_tail_before_the_turn_and_what_came_after() {
        let threads = ThreadSeqs::new(true);
        let rows: Vec<_> = (1..=10).map(|s| row("t", s * 10)).collect();
        threads.note(&rows[..1], &["t"]);
        threads.note(&rows[1..], &[]);
        let w = held(&threads, "t", 80, 2, 3);
        assert_eq!(w.seqs, vec![10, 20, 50, 60, 70]);
        assert_eq!(w.later, Some(vec![90, 100]));
        // A short thread: head and tail overlap, nothing twice.
        let w = held(&threads, "t", 40, 2, 3);
        assert_eq!(w.seqs, vec![10, 20, 30]);
        // A turn stored out of order goes in its place.
        threads.note(&[row("t", 35)], &[]);
        assert_eq!(held(&threads, "t", 40, 2, 3).seqs, vec![10, 20, 30, 35]);
        // Too many turns after it: those are left to the database.
        let many: Vec<_> = (0..=LATER_TURNS as i64)
            .map(|s| row("t", 1_000 + s))
            .collect();
        threads.note(&many, &[]);
        assert_eq!(held(&threads, "t", 100, 2, 3).later, None);
    }

    #[test]
    fn one_turn_threads_are_bounded_by_what_they_weigh_not_by_their_turns() {
        let threads = ThreadSeqs::new(true);
        let inner = || threads.inner.as_ref().unwrap().lock().unwrap();
        // A uuid's length, as thread ids have.
        let id = |n: usize| format!("{n:036}");
        let most = THREADS_HELD_BYTES / (THREAD_BYTES + 36 + SEQ_BYTES) + 64;
        for n in 0..3 * most {
            let row = row(&id(n), n as i64);
            threads.note(std::slice::from_ref(&row), &[row.thread_id.as_str()]);
            assert!(inner().by_thread.len() <= most, "{n}");
        }
        assert!(inner().restarts >= 2, "it started over");
        // It starts over whole: a thread held since is known whole, one from before unknown.
        let last = 3 * most - 1;
        assert_eq!(
            held(&threads, &id(last), i64::MAX, 1, 20).seqs,
            vec![last as i64]
        );
        assert!(matches!(threads.window(&id(0), 5, 1, 20), Lookup::Unknown));
        // What it weighs follows what it holds; forgetting every turn leaves the threads' entries.
        let held_now: Vec<(String, Vec<i64>)> = inner()
            .by_thread
            .iter()
            .map(|(t, e)| (t.clone(), e.seqs.clone()))
            .collect();
        let weighed: usize = held_now
            .iter()
            .map(|(t, s)| THREAD_BYTES + t.len() + SEQ_BYTES * s.len())
            .sum();
        assert_eq!(inner().bytes, weighed);
        for (t, seqs) in &held_now {
            for &s in seqs {
                threads.forget(t, s);
            }
        }
        let entries: usize = held_now.iter().map(|(t, _)| THREAD_BYTES + t.len()).sum();
        assert_eq!(inner().bytes, entries);
    }

    #[test]
    fn a_thread_not_opened_here_is_held_once_read_and_keeps_what_came_meanwhile() {
        let threads = ThreadSeqs::new(true);
        // Noted, but earlier turns may exist: unknown until read.
        threads.note(&[row("old", 50)], &[]);
        assert!(matches!(threads.window("old", 60, 2, 3), Lookup::Unknown));
        threads.load("old", &[10, 20], threads.mark());
        assert_eq!(held(&threads, "old", 60, 2, 3).seqs, vec![10, 20, 50]);
        // An erased turn leaves its thread's windows.
        threads.forget("old", 20);
        assert_eq!(held(&threads, "old", 60, 2, 3).seqs, vec![10, 50]);
        threads.forget("old", 20);
        threads.forget("unknown", 1);
        // A thread longer than is held is asked of the database from then on.
        let long: Vec<i64> = (0..=LONGEST_HELD as i64).collect();
        threads.load("long", &long, threads.mark());
        assert!(matches!(threads.window("long", 5, 2, 3), Lookup::Asked));
        threads.note(&[row("long", 1 << 20)], &[]);
        assert!(matches!(threads.window("long", 5, 2, 3), Lookup::Asked));
        // A read begun before it started over adds nothing: turns noted meanwhile are gone.
        let mark = threads.mark();
        threads.note(&[row("late", 7)], &[]);
        threads.inner.as_ref().unwrap().lock().unwrap().start_over();
        threads.load("late", &[1, 2], mark);
        assert!(matches!(threads.window("late", 9, 2, 3), Lookup::Unknown));
        // With several instances (PostgreSQL) nothing is held.
        let none = ThreadSeqs::new(false);
        none.note(&[row("t", 1)], &["t"]);
        assert!(matches!(none.window("t", 5, 2, 3), Lookup::Asked));
    }
}
