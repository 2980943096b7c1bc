//! Threads, inbound messages with their dedupe keys, agents' responses, and delivery outcomes.

use std::collections::{HashMap, HashSet};

use super::{Arg, Backend, Db, Tx, in_list, rows};
use crate::error::Result;

/// A stored message or response.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct StoredMessage {
    /// Insertion order.
    pub seq: i64,
    /// Id.
    pub id: String,
    /// Switchboard thread id.
    pub thread_id: String,
    /// `in` (NormalizedMessage) or `out` (NormalizedResponse).
    pub direction: String,
    /// The agent's local name.
    pub agent: String,
    /// The transport it came in on (or goes out by).
    pub transport: String,
    /// The JSON body.
    pub body: String,
    /// Stored at (unix ms).
    pub created_at: i64,
    /// When it was erased (its author deleted it: the body is reduced to ids and addressing),
    /// if it was.
    #[sqlx(default)]
    #[serde(default)]
    pub deleted_at: Option<i64>,
    /// The body as the value it was written from, when this instance stored the row: the
    /// stages that follow (dispatch, history, delivery) copy it instead of parsing the JSON
    /// again. Never read from the database.
    #[sqlx(skip)]
    #[serde(skip)]
    pub parsed: Option<Parsed>,
}

/// A stored body as the value it was written from.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// An inbound message (or a turn relayed to another agent).
    Message(std::sync::Arc<crate::message::NormalizedMessage>),
    /// An agent's response.
    Response(std::sync::Arc<crate::message::NormalizedResponse>),
}

impl StoredMessage {
    /// The stored body as a message: shared with the value it was written from when held (copy
    /// it with [`std::sync::Arc::make_mut`] to change it), parsed otherwise.
    ///
    /// # Errors
    /// [`crate::error::Error::Corrupt`] when the body does not parse.
    pub fn message(&self) -> Result<std::sync::Arc<crate::message::NormalizedMessage>> {
        match &self.parsed {
            Some(Parsed::Message(m)) => Ok(std::sync::Arc::clone(m)),
            _ => crate::message::NormalizedMessage::from_stored_json(&self.body)
                .map(std::sync::Arc::new)
                .map_err(|e| self.corrupt(&e)),
        }
    }

    /// The stored body as a response, like [`StoredMessage::message`].
    ///
    /// # Errors
    /// [`crate::error::Error::Corrupt`] when the body does not parse.
    pub fn response(&self) -> Result<crate::message::NormalizedResponse> {
        match &self.parsed {
            Some(Parsed::Response(r)) => Ok(r.as_ref().clone()),
            _ => self.parse(),
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.body).map_err(|e| self.corrupt(&e))
    }

    fn corrupt(&self, e: &serde_json::Error) -> crate::error::Error {
        crate::error::Error::Corrupt(format!("stored message {} is corrupt: {e}", self.id))
    }
}

/// A dedupe key claimed for a message.
#[derive(Debug, Clone, Copy)]
pub struct ExternalKey<'a> {
    /// Transport.
    pub transport: &'a str,
    /// The wire id.
    pub external_id: &'a str,
    /// The message claiming it.
    pub message_id: &'a str,
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct MessageIdRow {
    message_id: String,
}

/// Claims dedupe keys in one statement; returns the message ids whose key was new. A message
/// missing from the answer is a duplicate (see [`duplicate_of`]).
///
/// # Errors
/// Database errors.
pub async fn claim_external_ids(
    tx: &mut Tx,
    keys: &[ExternalKey<'_>],
    now: i64,
) -> Result<HashSet<String>> {
    if keys.is_empty() {
        return Ok(HashSet::new());
    }
    let (values, args) = rows(keys, |k| {
        [
            Arg::Text(k.transport),
            Arg::Text(k.external_id),
            Arg::Text(k.message_id),
            Arg::Int(now),
        ]
    });
    let sql = format!(
        "INSERT INTO inbound_seen (transport, external_id, message_id, created_at) VALUES {values} \
         ON CONFLICT DO NOTHING RETURNING message_id"
    );
    let rows: Vec<MessageIdRow> = tx.fetch_all(&sql, &args).await?;
    Ok(rows.into_iter().map(|r| r.message_id).collect())
}

/// Gives a dedupe key back (its message was declined in the same transaction).
///
/// # Errors
/// Database errors.
pub async fn release_external_id(tx: &mut Tx, transport: &str, external_id: &str) -> Result<()> {
    tx.execute(
        "DELETE FROM inbound_seen WHERE transport = $1 AND external_id = $2",
        &[Arg::Text(transport), Arg::Text(external_id)],
    )
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct DuplicateRow {
    message_id: String,
    thread_id: Option<String>,
}

/// The message (and its thread) that already holds `(transport, external_id)`.
///
/// # Errors
/// Database errors.
pub async fn duplicate_of(
    tx: &mut Tx,
    transport: &str,
    external_id: &str,
) -> Result<Option<(String, String)>> {
    let row: Option<DuplicateRow> = tx
        .fetch_optional(
            "SELECT s.message_id, m.thread_id FROM inbound_seen s LEFT JOIN messages m ON m.id = s.message_id \
             WHERE s.transport = $1 AND s.external_id = $2",
            &[Arg::Text(transport), Arg::Text(external_id)],
        )
        .await?;
    Ok(row.map(|r| (r.message_id, r.thread_id.unwrap_or_default())))
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct ThreadKeyRow {
    id: String,
    transport: String,
    thread_key: String,
}

/// Maps each `(transport, thread key)` to switchboard's thread id, creating the threads that do
/// not exist yet with the given new id; returns every key's id.
///
/// Existing threads are read, not upserted: an upsert writes a new version of every existing
/// row (and locks it) on each message, which on PostgreSQL made a batch of messages to a few
/// hundred busy threads as costly as a batch of updates. Only missing threads are inserted
/// (`ON CONFLICT DO NOTHING`); one another instance created meanwhile is read again.
///
/// # Errors
/// Database errors.
pub async fn upsert_threads(
    tx: &mut Tx,
    threads: &[(&str, &str, &str)],
    now: i64,
) -> Result<HashMap<(String, String), String>> {
    let mut seen = HashSet::new();
    let unique: Vec<_> = threads
        .iter()
        .filter(|(t, k, _)| seen.insert((*t, *k)))
        .collect();
    let mut found = thread_ids(tx, unique.iter().map(|(t, k, _)| (*t, *k))).await?;
    let missing: Vec<_> = unique
        .into_iter()
        .filter(|(t, k, _)| !found.contains_key(&((*t).to_owned(), (*k).to_owned())))
        .collect();
    if missing.is_empty() {
        return Ok(found);
    }
    let (values, args) = rows(&missing, |(transport, key, id)| {
        [
            Arg::Text(id),
            Arg::Text(transport),
            Arg::Text(key),
            Arg::Int(now),
        ]
    });
    let sql = format!(
        "INSERT INTO threads (id, transport, thread_key, created_at) VALUES {values} \
         ON CONFLICT (transport, thread_key) DO NOTHING RETURNING id, transport, thread_key"
    );
    let inserted: Vec<ThreadKeyRow> = tx.fetch_all(&sql, &args).await?;
    found.extend(
        inserted
            .into_iter()
            .map(|r| ((r.transport, r.thread_key), r.id)),
    );
    let raced: Vec<(&str, &str)> = missing
        .iter()
        .filter(|(t, k, _)| !found.contains_key(&((*t).to_owned(), (*k).to_owned())))
        .map(|(t, k, _)| (*t, *k))
        .collect();
    if !raced.is_empty() {
        found.extend(thread_ids(tx, raced.into_iter()).await?);
    }
    Ok(found)
}

/// Switchboard's ids of those of `keys` (`(transport, thread key)`) that are threads already.
///
/// # Errors
/// Database errors.
pub async fn thread_ids<'a>(
    tx: &mut Tx,
    keys: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<HashMap<(String, String), String>> {
    let keys: Vec<(&str, &str)> = keys.collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let (values, args) = rows(&keys, |(transport, key)| {
        [Arg::Text(transport), Arg::Text(key)]
    });
    let sql = format!(
        "SELECT id, transport, thread_key FROM threads \
         WHERE (transport, thread_key) IN (VALUES {values})"
    );
    let rows: Vec<ThreadKeyRow> = tx.fetch_all(&sql, &args).await?;
    Ok(rows
        .into_iter()
        .map(|r| ((r.transport, r.thread_key), r.id))
        .collect())
}

/// A message or response to store.
#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    /// Id.
    pub id: &'a str,
    /// Switchboard thread id.
    pub thread_id: &'a str,
    /// `in` or `out`.
    pub direction: &'a str,
    /// The agent's local name.
    pub agent: &'a str,
    /// Transport.
    pub transport: &'a str,
    /// For a response: the message it answers (unique: one response per message).
    pub answers: Option<&'a str>,
    /// JSON body.
    pub body: &'a str,
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct IdRow {
    id: String,
    seq: i64,
}

/// Stores messages in one statement; returns the rows stored (a message is skipped when its
/// id, or for a response the message it answers, is already stored).
///
/// # Errors
/// Database errors.
pub async fn insert_many(
    tx: &mut Tx,
    msgs: &[NewMessage<'_>],
    now: i64,
) -> Result<Vec<StoredMessage>> {
    if msgs.is_empty() {
        return Ok(Vec::new());
    }
    let (values, args) = rows(msgs, |m| {
        [
            Arg::Text(m.id),
            Arg::Text(m.thread_id),
            Arg::Text(m.direction),
            Arg::Text(m.agent),
            Arg::Text(m.transport),
            Arg::OptText(m.answers),
            Arg::Text(m.body),
            Arg::Int(now),
        ]
    });
    let sql = format!(
        "INSERT INTO messages (id, thread_id, direction, agent, transport, answers, body, created_at) \
         VALUES {values} ON CONFLICT DO NOTHING RETURNING id, seq"
    );
    let rows: Vec<IdRow> = tx.fetch_all(&sql, &args).await?;
    let seqs: HashMap<String, i64> = rows.into_iter().map(|r| (r.id, r.seq)).collect();
    // The blobs each stored row refers to, so that erasing it erases what only it referred to.
    let refs: Vec<(&str, &str)> = msgs
        .iter()
        .filter(|m| seqs.contains_key(m.id))
        .flat_map(|m| {
            super::blobs::digests_in(m.body)
                .into_iter()
                .map(move |d| (d, m.id))
        })
        .collect();
    super::blobs::add_refs(tx, &refs).await?;
    Ok(msgs
        .iter()
        .filter_map(|m| {
            Some(StoredMessage {
                seq: *seqs.get(m.id)?,
                id: m.id.to_owned(),
                thread_id: m.thread_id.to_owned(),
                direction: m.direction.to_owned(),
                agent: m.agent.to_owned(),
                transport: m.transport.to_owned(),
                body: m.body.to_owned(),
                created_at: now,
                deleted_at: None,
                parsed: None,
            })
        })
        .collect())
}

impl crate::store::recent::Weight for StoredMessage {
    /// The body, twice over when it is held parsed too.
    fn weight(&self) -> usize {
        self.body.len() * if self.parsed.is_some() { 2 } else { 1 }
    }
}

/// Messages and responses this instance stored last (they never change), so that dispatch and
/// delivery need not read them back.
pub type Recent = crate::store::recent::Recent<std::sync::Arc<StoredMessage>>;

/// Stored messages or responses by id, from `recent` where it holds them, the rest read.
///
/// # Errors
/// Database errors.
pub async fn get_many_cached(
    db: &Db,
    recent: &Recent,
    ids: &[&str],
) -> Result<HashMap<String, std::sync::Arc<StoredMessage>>> {
    let mut found = HashMap::with_capacity(ids.len());
    let mut missing = Vec::new();
    for id in ids {
        match recent.get(*id) {
            Some(row) => {
                found.insert((*id).to_owned(), row);
            }
            None => missing.push(*id),
        }
    }
    for row in get_many(db, &missing).await? {
        found.insert(row.id.clone(), std::sync::Arc::new(row));
    }
    Ok(found)
}

const COLUMNS: &str =
    "seq, id, thread_id, direction, agent, transport, body, created_at, deleted_at";

/// One stored message or response by id.
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, id: &str) -> Result<Option<StoredMessage>> {
    db.fetch_optional(
        &format!("SELECT {COLUMNS} FROM messages WHERE id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// Stored messages or responses by id, in no particular order.
///
/// # Errors
/// Database errors.
pub async fn get_many(db: &Db, ids: &[&str]) -> Result<Vec<StoredMessage>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM messages WHERE id IN ({})",
        in_list(ids.len(), 1)
    );
    let args: Vec<Arg<'_>> = ids.iter().map(|id| Arg::Text(id)).collect();
    db.fetch_all(&sql, &args).await
}

/// The response that answers `message_id`, if any.
///
/// # Errors
/// Database errors.
pub async fn response_to(db: &Db, message_id: &str) -> Result<Option<StoredMessage>> {
    db.fetch_optional(
        &format!("SELECT {COLUMNS} FROM messages WHERE answers = $1"),
        &[Arg::Text(message_id)],
    )
    .await
}

/// The latest response `agent` (local name) gave in `thread_id`.
///
/// # Errors
/// Database errors.
pub async fn last_response(db: &Db, thread_id: &str, agent: &str) -> Result<Option<StoredMessage>> {
    db.fetch_optional(
        &format!(
            "SELECT {COLUMNS} FROM messages WHERE thread_id = $1 AND direction = 'out' \
             AND agent = $2 ORDER BY seq DESC LIMIT 1"
        ),
        &[Arg::Text(thread_id), Arg::Text(agent)],
    )
    .await
}

/// The `seq`s of the turns of `thread_id` before `before_seq` that history can show (erased
/// ones are left out): the first `head` and the last `tail`, in order. Read from the
/// `(thread_id, seq, deleted_at)` index alone: no message row is touched.
///
/// # Errors
/// Database errors.
pub async fn thread_turn_seqs(
    db: &Db,
    thread_id: &str,
    before_seq: i64,
    head: usize,
    tail: usize,
) -> Result<Vec<i64>> {
    #[derive(serde::Deserialize, sqlx::FromRow)]
    struct Seq {
        seq: i64,
    }
    let lim = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let rows: Vec<Seq> = db
        .fetch_all(
            "SELECT seq FROM (SELECT seq FROM messages WHERE thread_id = $1 AND seq < $2 AND deleted_at IS NULL ORDER BY seq LIMIT $3) h \
             UNION ALL SELECT seq FROM (SELECT seq FROM messages WHERE thread_id = $1 AND seq < $2 AND deleted_at IS NULL ORDER BY seq DESC LIMIT $4) t",
            &[
                Arg::Text(thread_id),
                Arg::Int(before_seq),
                Arg::Int(lim(head)),
                Arg::Int(lim(tail)),
            ],
        )
        .await?;
    // A short thread is in both halves: repeats are dropped here (`UNION` would sort them
    // away through a temporary table on every call).
    let mut seqs: Vec<i64> = rows.into_iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    Ok(seqs)
}

/// [`thread_turn_seqs`] for many turns at once: for each `(thread_id, before_seq)`, the `seq`s of
/// its window, in order. On PostgreSQL it is one statement for them all (a `LATERAL` join over
/// the list, each side the same two index ranges: one round trip per batch); SQLite, with no
/// round trip to save, reads them one by one.
///
/// # Errors
/// Database errors.
pub async fn thread_windows(
    db: &Db,
    turns: &[(&str, i64)],
    head: usize,
    tail: usize,
) -> Result<Vec<Vec<i64>>> {
    #[derive(serde::Deserialize, sqlx::FromRow)]
    struct Seq {
        k: i64,
        seq: i64,
    }
    if db.backend() == Backend::Sqlite {
        let mut out = Vec::with_capacity(turns.len());
        for (thread_id, before) in turns {
            out.push(thread_turn_seqs(db, thread_id, *before, head, tail).await?);
        }
        return Ok(out);
    }
    let lim = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut out: Vec<Vec<i64>> = vec![Vec::new(); turns.len()];
    for (chunk_no, chunk) in turns.chunks(LIST_PER_STATEMENT).enumerate() {
        let first = chunk_no * LIST_PER_STATEMENT;
        let mut args = vec![Arg::Int(lim(head)), Arg::Int(lim(tail))];
        for (i, (thread_id, before)) in chunk.iter().enumerate() {
            args.extend([
                Arg::Int(lim(first + i)),
                Arg::Text(thread_id),
                Arg::Int(*before),
            ]);
        }
        let sql = format!(
            "SELECT w.k, m.seq FROM (VALUES {}) AS w (k, thread_id, before_seq) CROSS JOIN LATERAL (\
             (SELECT seq FROM messages WHERE thread_id = w.thread_id AND seq < w.before_seq AND deleted_at IS NULL ORDER BY seq LIMIT $1) \
             UNION ALL (SELECT seq FROM messages WHERE thread_id = w.thread_id AND seq < w.before_seq AND deleted_at IS NULL ORDER BY seq DESC LIMIT $2)) m",
            super::values_list(chunk.len(), 3, 3)
        );
        let rows: Vec<Seq> = db.fetch_all(&sql, &args).await?;
        for r in rows {
            if let Some(seqs) = usize::try_from(r.k).ok().and_then(|k| out.get_mut(k)) {
                seqs.push(r.seq);
            }
        }
    }
    // A short thread is in both halves: repeats are dropped here, as in `thread_turn_seqs`.
    for seqs in &mut out {
        seqs.sort_unstable();
        seqs.dedup();
    }
    Ok(out)
}

/// The most items one statement asks for by a list: windows in [`thread_windows`] (three
/// parameters each), ids in [`answers_to`].
const LIST_PER_STATEMENT: usize = 1_000;

/// The `seq`s of the first `limit` turns of `thread_id` not erased, ascending, from the
/// `(thread_id, seq, deleted_at)` index alone.
///
/// # Errors
/// Database errors.
pub async fn thread_seqs(db: &Db, thread_id: &str, limit: usize) -> Result<Vec<i64>> {
    #[derive(serde::Deserialize, sqlx::FromRow)]
    struct Seq {
        seq: i64,
    }
    let rows: Vec<Seq> = db
        .fetch_all(
            "SELECT seq FROM messages WHERE thread_id = $1 AND deleted_at IS NULL ORDER BY seq LIMIT $2",
            &[
                Arg::Text(thread_id),
                Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
            ],
        )
        .await?;
    Ok(rows.into_iter().map(|r| r.seq).collect())
}

/// The responses to the messages `ids` that are not erased, as (the message answered, the
/// response's `seq`): the answers a history looks for that came while a later message waited
/// for its turn. One lookup in the unique `answers` index each, asked together (a statement per
/// thousand ids).
///
/// # Errors
/// Database errors.
pub async fn answers_to(db: &Db, ids: &[&str]) -> Result<Vec<(String, i64)>> {
    #[derive(serde::Deserialize, sqlx::FromRow)]
    struct Answer {
        answers: String,
        seq: i64,
    }
    let mut out = Vec::new();
    for chunk in ids.chunks(LIST_PER_STATEMENT) {
        let args: Vec<Arg<'_>> = chunk.iter().map(|id| Arg::Text(id)).collect();
        let rows: Vec<Answer> = db
            .fetch_all(
                &format!(
                    "SELECT answers, seq FROM messages WHERE answers IN ({}) AND deleted_at IS NULL",
                    in_list(chunk.len(), 1)
                ),
                &args,
            )
            .await?;
        out.extend(rows.into_iter().map(|r| (r.answers, r.seq)));
    }
    Ok(out)
}

/// Stored messages and responses by `seq`, in no particular order (those missing are left out).
///
/// # Errors
/// Database errors.
pub async fn get_by_seqs(db: &Db, seqs: &[i64]) -> Result<Vec<StoredMessage>> {
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    let args: Vec<Arg<'_>> = seqs.iter().map(|s| Arg::Int(*s)).collect();
    db.fetch_all(
        &format!(
            "SELECT {COLUMNS} FROM messages WHERE seq IN ({})",
            in_list(seqs.len(), 1)
        ),
        &args,
    )
    .await
}

/// The final outcome of a delivery job.
#[derive(Debug, Clone)]
pub struct DeliveryRecord<'a> {
    /// The delivery job.
    pub job_id: &'a str,
    /// The response delivered.
    pub response_id: &'a str,
    /// Transport.
    pub transport: &'a str,
    /// `delivered` or `failed`.
    pub outcome: &'a str,
    /// Attempts made.
    pub attempts: i64,
    /// Failure detail (operators only).
    pub detail: Option<&'a str>,
}

/// Records final delivery outcomes in one statement (a retried job's record is replaced).
///
/// # Errors
/// Database errors.
pub async fn record_deliveries(
    tx: &mut Tx,
    records: &[DeliveryRecord<'_>],
    now: i64,
) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let (values, args) = rows(records, |r| {
        [
            Arg::Text(r.job_id),
            Arg::Text(r.response_id),
            Arg::Text(r.transport),
            Arg::Text(r.outcome),
            Arg::Int(r.attempts),
            Arg::OptText(r.detail),
            Arg::Int(now),
        ]
    });
    let sql = format!(
        "INSERT INTO deliveries (job_id, response_id, transport, outcome, attempts, detail, finished_at) VALUES {values} \
         ON CONFLICT (job_id) DO UPDATE SET outcome = excluded.outcome, attempts = excluded.attempts, \
         detail = excluded.detail, finished_at = excluded.finished_at"
    );
    tx.execute(&sql, &args).await?;
    Ok(())
}

/// Counts used by tests and operators: messages per direction.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct DirectionCount {
    /// `in` or `out`.
    pub direction: String,
    /// Count.
    pub n: i64,
}

/// Message counts per direction.
///
/// # Errors
/// Database errors.
pub async fn counts(db: &Db) -> Result<Vec<DirectionCount>> {
    db.fetch_all(
        "SELECT direction, COUNT(*) AS n FROM messages GROUP BY direction",
        &[],
    )
    .await
}

/// How a message's dispatch ended without a response.
#[derive(Debug, Clone, Copy)]
pub struct DispatchOutcome<'a> {
    /// The message.
    pub message_id: &'a str,
    /// `no_reply`, `failed`, `merged` (it joined a later turn) or `interrupted`.
    pub outcome: &'a str,
    /// For `failed`: the failure's class (never its text).
    pub error_class: Option<&'a str>,
}

/// Records on each message how its dispatch ended without a response (one statement per
/// distinct outcome; a message dispatched again is simply overwritten).
///
/// # Errors
/// Database errors.
pub async fn record_outcomes(tx: &mut Tx, outcomes: &[DispatchOutcome<'_>]) -> Result<()> {
    let mut groups: std::collections::BTreeMap<_, Vec<&str>> = std::collections::BTreeMap::new();
    for o in outcomes {
        groups
            .entry((o.outcome, o.error_class))
            .or_default()
            .push(o.message_id);
    }
    for ((outcome, class), ids) in groups {
        let sql = format!(
            "UPDATE messages SET outcome = $1, error_class = $2 WHERE id IN ({})",
            in_list(ids.len(), 3)
        );
        let mut args = vec![Arg::Text(outcome), Arg::OptText(class)];
        args.extend(ids.iter().map(|id| Arg::Text(id)));
        tx.execute(&sql, &args).await?;
    }
    Ok(())
}

/// An inbound message with how far its dispatch got, for merging turns.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct InboundState {
    /// Insertion order.
    pub seq: i64,
    /// Id.
    pub id: String,
    /// The agent's local name.
    pub agent: String,
    /// The JSON body.
    pub body: String,
    /// How its dispatch ended without a response, when it did.
    pub outcome: Option<String>,
    /// Its response's id, once one is stored.
    pub response: Option<String>,
}

const INBOUND_STATE: &str = "SELECT m.seq, m.id, m.agent, m.body, m.outcome, r.id AS response \
     FROM messages m LEFT JOIN messages r ON r.answers = m.id";

/// The inbound messages to `agent` after `after_seq` in a thread that have neither an outcome
/// nor a response yet and are not erased, oldest first.
///
/// # Errors
/// Database errors.
pub async fn unanswered_after(
    db: &Db,
    thread_id: &str,
    agent: &str,
    after_seq: i64,
) -> Result<Vec<InboundState>> {
    db.fetch_all(
        &format!(
            "{INBOUND_STATE} WHERE m.thread_id = $1 AND m.direction = 'in' AND m.agent = $2 \
             AND m.seq > $3 AND m.outcome IS NULL AND r.id IS NULL AND m.deleted_at IS NULL ORDER BY m.seq"
        ),
        &[Arg::Text(thread_id), Arg::Text(agent), Arg::Int(after_seq)],
    )
    .await
}

/// The messages of a thread before `before_seq` that follow its last response and are not
/// erased (at most the last `limit`), oldest first.
///
/// # Errors
/// Database errors.
pub async fn since_last_response(
    db: &Db,
    thread_id: &str,
    before_seq: i64,
    limit: usize,
) -> Result<Vec<InboundState>> {
    let mut rows: Vec<InboundState> = db
        .fetch_all(
            &format!(
                "{INBOUND_STATE} WHERE m.thread_id = $1 AND m.direction = 'in' AND m.seq < $2 \
                 AND m.deleted_at IS NULL AND m.seq > COALESCE((SELECT MAX(o.seq) FROM messages o WHERE o.thread_id = $1 \
                 AND o.direction = 'out' AND o.seq < $2), 0) ORDER BY m.seq DESC LIMIT $3"
            ),
            &[
                Arg::Text(thread_id),
                Arg::Int(before_seq),
                Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)),
            ],
        )
        .await?;
    rows.reverse();
    Ok(rows)
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct OutcomeRow {
    outcome: Option<String>,
}

/// How a message's dispatch ended without a response, when it did (`None` too for an
/// unknown message).
///
/// # Errors
/// Database errors.
pub async fn outcome_of(db: &Db, id: &str) -> Result<Option<String>> {
    let row: Option<OutcomeRow> = db
        .fetch_optional(
            "SELECT outcome FROM messages WHERE id = $1",
            &[Arg::Text(id)],
        )
        .await?;
    Ok(row.and_then(|r| r.outcome))
}
