//! The earlier turns of a thread, as a dispatch shows them to its agent.
//!
//! History is what chat agents live on, and in a long thread every dispatch reads the same
//! turns again: each stays in the window for the next twenty or so. So the turns are kept in
//! memory, parsed, by `seq` ([`Turns`]): a dispatch reads only which turns the window holds (the
//! `seq`s, from the `(thread_id, seq)` index alone, without touching a message row) and reads and
//! parses the bodies of those it does not hold, usually the last one or two. Stored messages
//! never change, so a held turn is never stale, and a turn another instance wrote is simply not
//! held yet.

use std::collections::HashSet;
use std::sync::Arc;

use super::Core;
use crate::error::{Error, Result};
use crate::message::{HistoricalMessage, Part, Role, Sender, Timestamp};
use crate::store::messages::{self, StoredMessage};
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
            Self::Stored(row) => row.body.len(),
            Self::Parsed(turn) => turn.weight,
        }
    }
}

/// Turns by `seq`.
pub type Turns = crate::store::recent::Recent<Held, i64>;

/// Holds `rows`, just committed by this instance, for the dispatches that will show them (the
/// next turn of a thread shows the turns before it), so those read nothing but the index.
pub(super) fn remember(core: &Core, rows: &[Arc<StoredMessage>]) {
    for row in rows {
        core.turns.put(&row.seq, Held::Stored(Arc::clone(row)));
    }
}

/// A [`Turns`] that holds the windows of a few thousand busy threads: 65,536 turns, 64 MiB,
/// turns up to 256 KiB.
#[must_use]
pub fn turns() -> Turns {
    Turns::new(65_536, 64 << 20, 256 << 10)
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

/// The turns of `row`'s thread before it that the history policy can show (its head and one
/// more than its window, so it can tell that turns were left out), oldest first by `seq`, then
/// the answers to those turns stored after `row` (a message that waited for the run before it
/// sees that run's answer): looked up only for the inbound turns whose answer is not among them.
async fn load(core: &Core, row: &StoredMessage) -> Result<Vec<Arc<Turn>>> {
    let policy = core.history;
    let seqs = messages::thread_turn_seqs(
        &core.db,
        &row.thread_id,
        row.seq,
        policy.keep_head,
        policy.window + 1,
    )
    .await?;
    let mut turns = held(core, &seqs).await?;
    let answered: HashSet<&str> = turns
        .iter()
        .filter(|t| !t.inbound)
        .filter_map(|t| t.in_reply_to.as_deref())
        .collect();
    // When turns were left out between the head and the window, the head's answers were
    // stored long ago (and are among those left out): only the window's turns can still have
    // one to come.
    let whole = seqs.len() < policy.keep_head + policy.window + 1;
    let window_from = if whole {
        i64::MIN
    } else {
        seqs.get(policy.keep_head).copied().unwrap_or(i64::MIN)
    };
    let open: Vec<&str> = turns
        .iter()
        .filter(|t| t.inbound && t.seq >= window_from && !answered.contains(t.id.as_str()))
        .map(|t| t.id.as_str())
        .collect();
    let late = messages::late_answers(&core.db, &open, row.seq).await?;
    if !late.is_empty() {
        let mut late = held(core, &late).await?;
        turns.append(&mut late);
    }
    Ok(turns)
}

/// The turns of `seqs`, from memory where held, the rest read and parsed (and held); a turn
/// whose row is gone is left out.
async fn held(core: &Core, seqs: &[i64]) -> Result<Vec<Arc<Turn>>> {
    let mut held: Vec<Option<Arc<Turn>>> = Vec::with_capacity(seqs.len());
    let mut missing = Vec::new();
    for (seq, h) in seqs.iter().zip(core.turns.get_each(seqs)) {
        held.push(match h {
            Some(Held::Parsed(turn)) => Some(turn),
            Some(Held::Stored(row)) => {
                let turn = Arc::new(parse(&row)?);
                core.turns.put(seq, Held::Parsed(Arc::clone(&turn)));
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
            let turn = Arc::new(parse(&stored)?);
            core.turns.put(&stored.seq, Held::Parsed(Arc::clone(&turn)));
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
/// turn that ran while this one waited) comes right after the message it answers.
///
/// # Errors
/// Database errors; [`Error::Corrupt`] for a stored turn that does not parse.
pub(super) async fn before(
    core: &Core,
    row: &StoredMessage,
    agent_address: &str,
    relayed: Option<&str>,
    absorbed: &[super::conversation::Absorbed],
) -> Result<Vec<HistoricalMessage>> {
    let turns = load(core, row).await?;
    let responses: HashSet<&str> = turns
        .iter()
        .filter(|t| !t.inbound)
        .map(|t| t.id.as_str())
        .collect();
    let seqs: std::collections::HashMap<&str, i64> =
        turns.iter().map(|t| (t.id.as_str(), t.seq)).collect();
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
