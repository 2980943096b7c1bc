//! The ActivityPub transport's tables (`migrations/*/20261122000010_activitypub.sql`,
//! `*_ap_contexts.sql`, `*_reports.sql`): followers, cached remote actors, notes, the thread
//! contexts we mint, seen activity ids, per-host delivery health and the remote actors that
//! block our agents. Portable SQL over [`crate::store::Db`], like the core's store modules.

use crate::error::Result;
use crate::store::{Arg, Db, Tx};

/// Seen activity ids are kept this long: longer than any sender retries (Mastodon: about a week).
pub const SEEN_RETENTION_MS: i64 = 14 * 86_400_000;

/// One stored note (ours or received).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ObjectRow {
    /// The note's IRI.
    pub id: String,
    /// `in` or `out`.
    pub kind: String,
    /// The local agent it belongs to.
    pub agent: String,
    /// Its author's actor IRI.
    pub author: String,
    /// The NormalizedMessage (in) or NormalizedResponse (out) it corresponds to.
    pub message_id: Option<String>,
    /// Its conversation key.
    pub thread_key: String,
    /// 1 when anyone may fetch it (public or unlisted).
    pub public: i64,
    /// The note JSON (ours: the Create activity's object).
    pub body: String,
    /// 1 once deleted.
    pub deleted: i64,
}

/// A note to store.
#[derive(Debug, Clone)]
pub struct NewObject<'a> {
    /// IRI.
    pub id: &'a str,
    /// `in` or `out`.
    pub kind: &'a str,
    /// Local agent name.
    pub agent: &'a str,
    /// Author IRI.
    pub author: &'a str,
    /// Message or response id.
    pub message_id: Option<&'a str>,
    /// Conversation key.
    pub thread_key: &'a str,
    /// Fetchable by anyone.
    pub public: bool,
    /// JSON.
    pub body: &'a str,
}

const OBJ_COLS: &str = "id, kind, agent, author, message_id, thread_key, public, body, deleted";

/// Stores a note unless its id is known; returns whether it was stored.
///
/// # Errors
/// Database errors.
pub async fn insert_object(tx: &mut Tx, o: &NewObject<'_>, now: i64) -> Result<bool> {
    let n = tx
        .execute(
            "INSERT INTO ap_objects (id, kind, agent, author, message_id, thread_key, public, body, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) ON CONFLICT DO NOTHING",
            &[
                Arg::Text(o.id),
                Arg::Text(o.kind),
                Arg::Text(o.agent),
                Arg::Text(o.author),
                Arg::OptText(o.message_id),
                Arg::Text(o.thread_key),
                Arg::Int(i64::from(o.public)),
                Arg::Text(o.body),
                Arg::Int(now),
            ],
        )
        .await?;
    Ok(n > 0)
}

/// A note by IRI.
///
/// # Errors
/// Database errors.
pub async fn object(db: &Db, id: &str) -> Result<Option<ObjectRow>> {
    db.fetch_optional(
        &format!("SELECT {OBJ_COLS} FROM ap_objects WHERE id = $1 LIMIT 1"),
        &[Arg::Text(id)],
    )
    .await
}

/// What is kept of a received note its author deleted: an ActivityStreams `Tombstone` with
/// its id, its former type and the fields that thread replies to it (`inReplyTo`, `context`,
/// `conversation`); nothing its author wrote.
#[must_use]
pub fn tombstone(body: &str, id: &str) -> String {
    let note: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let mut t = serde_json::json!({"id": id, "type": "Tombstone"});
    if let Some(kind) = note.get("type").filter(|k| k.is_string()) {
        t["formerType"] = kind.clone();
    }
    for key in ["inReplyTo", "context", "conversation"] {
        if let Some(v) = note.get(key).filter(|v| v.is_string()) {
            t[key] = v.clone();
        }
    }
    t.to_string()
}

/// Marks an author's note deleted and replaces its body (with its [`tombstone`]), in the
/// transaction that erases the messages it became; returns rows changed.
///
/// # Errors
/// Database errors.
pub async fn erase_object(
    tx: &mut Tx,
    id: &str,
    author: &str,
    body: &str,
    now: i64,
) -> Result<u64> {
    tx.execute(
        "UPDATE ap_objects SET deleted = 1, body = $3, updated_at = $4 WHERE id = $1 AND author = $2",
        &[Arg::Text(id), Arg::Text(author), Arg::Text(body), Arg::Int(now)],
    )
    .await
}

/// Retention: deletes up to `limit` received notes stored before `before` (unix ms), oldest
/// first; returns how many. Notes our agents posted stay.
///
/// # Errors
/// Database errors.
pub async fn erase_received_before(db: &Db, before: i64, limit: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM ap_objects WHERE id IN (SELECT id FROM ap_objects WHERE kind = 'in' \
         AND created_at < $1 ORDER BY created_at LIMIT $2)",
        &[Arg::Int(before), Arg::Int(limit)],
    )
    .await
}

/// Stores an edit of an author's received note; returns rows changed.
///
/// # Errors
/// Database errors.
pub async fn update_object(db: &Db, id: &str, author: &str, body: &str, now: i64) -> Result<u64> {
    db.execute(
        "UPDATE ap_objects SET body = $3, updated_at = $4 WHERE id = $1 AND author = $2 AND deleted = 0",
        &[Arg::Text(id), Arg::Text(author), Arg::Text(body), Arg::Int(now)],
    )
    .await
}

/// The newest public notes an agent posted.
///
/// # Errors
/// Database errors.
pub async fn outbox(db: &Db, agent: &str, limit: i64) -> Result<Vec<ObjectRow>> {
    db.fetch_all(
        &format!(
            "SELECT {OBJ_COLS} FROM ap_objects WHERE agent = $1 AND kind = 'out' AND deleted = 0 AND public = 1 \
             ORDER BY created_at DESC LIMIT $2"
        ),
        &[Arg::Text(agent), Arg::Int(limit)],
    )
    .await
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct Count {
    n: i64,
}

/// How many public notes an agent posted.
///
/// # Errors
/// Database errors.
pub async fn outbox_count(db: &Db, agent: &str) -> Result<i64> {
    let c: Option<Count> = db
        .fetch_optional(
            "SELECT COUNT(*) AS n FROM ap_objects WHERE agent = $1 AND kind = 'out' AND deleted = 0 AND public = 1",
            &[Arg::Text(agent)],
        )
        .await?;
    Ok(c.map_or(0, |c| c.n))
}

/// A thread context we minted (FEP-7888).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ContextRow {
    /// The id in its URL (`{actor}/contexts/{id}`).
    pub id: String,
    /// The thread it names (`ap_objects.thread_key`).
    pub thread_key: String,
    /// The agent that minted it: the collection's `attributedTo`.
    pub agent: String,
}

/// The context minted for a thread, if any.
///
/// # Errors
/// Database errors.
pub async fn context_of_thread(db: &Db, thread_key: &str) -> Result<Option<ContextRow>> {
    db.fetch_optional(
        "SELECT id, thread_key, agent FROM ap_contexts WHERE thread_key = $1",
        &[Arg::Text(thread_key)],
    )
    .await
}

/// A minted context by id.
///
/// # Errors
/// Database errors.
pub async fn context(db: &Db, id: &str) -> Result<Option<ContextRow>> {
    db.fetch_optional(
        "SELECT id, thread_key, agent FROM ap_contexts WHERE id = $1",
        &[Arg::Text(id)],
    )
    .await
}

/// The thread's context: the one minted before (by any agent), else `id` minted now for
/// `agent`. Concurrent mints for one thread agree on the first.
///
/// # Errors
/// Database errors.
pub async fn mint_context(
    db: &Db,
    id: &str,
    thread_key: &str,
    agent: &str,
    now: i64,
) -> Result<ContextRow> {
    db.execute(
        "INSERT INTO ap_contexts (id, thread_key, agent, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (thread_key) DO NOTHING",
        &[
            Arg::Text(id),
            Arg::Text(thread_key),
            Arg::Text(agent),
            Arg::Int(now),
        ],
    )
    .await?;
    context_of_thread(db, thread_key)
        .await?
        .ok_or_else(|| crate::error::Error::NotFound(format!("context of {thread_key}")))
}

/// The ids of a thread's notes that anyone may fetch (public or unlisted, not deleted), ours
/// and received, oldest first, at most `limit`; and how many there are.
///
/// # Errors
/// Database errors.
pub async fn public_thread(db: &Db, thread_key: &str, limit: i64) -> Result<(i64, Vec<String>)> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Id {
        id: String,
    }
    let c: Option<Count> = db
        .fetch_optional(
            "SELECT COUNT(*) AS n FROM ap_objects WHERE thread_key = $1 AND public = 1 AND deleted = 0",
            &[Arg::Text(thread_key)],
        )
        .await?;
    let ids: Vec<Id> = db
        .fetch_all(
            "SELECT id FROM ap_objects WHERE thread_key = $1 AND public = 1 AND deleted = 0 \
             ORDER BY created_at, id LIMIT $2",
            &[Arg::Text(thread_key), Arg::Int(limit)],
        )
        .await?;
    Ok((
        c.map_or(0, |c| c.n),
        ids.into_iter().map(|i| i.id).collect(),
    ))
}

/// A follower.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct FollowerRow {
    /// Actor IRI.
    pub actor: String,
    /// Where to deliver (shared inbox preferred).
    pub inbox: String,
}

/// Records a follower (replacing an earlier Follow of the same actor).
///
/// # Errors
/// Database errors.
pub async fn add_follower(
    db: &Db,
    agent: &str,
    actor: &str,
    inbox: &str,
    follow_id: &str,
    now: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO ap_followers (agent, actor, inbox, follow_id, created_at) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (agent, actor) DO UPDATE SET inbox = $3, follow_id = $4",
        &[
            Arg::Text(agent),
            Arg::Text(actor),
            Arg::Text(inbox),
            Arg::Text(follow_id),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// Removes a follower of one agent (`Some`) or of all (`None`).
///
/// # Errors
/// Database errors.
pub async fn remove_follower(db: &Db, agent: Option<&str>, actor: &str) -> Result<u64> {
    match agent {
        Some(a) => {
            db.execute(
                "DELETE FROM ap_followers WHERE agent = $1 AND actor = $2",
                &[Arg::Text(a), Arg::Text(actor)],
            )
            .await
        }
        None => {
            db.execute(
                "DELETE FROM ap_followers WHERE actor = $1",
                &[Arg::Text(actor)],
            )
            .await
        }
    }
}

/// An agent's followers.
///
/// # Errors
/// Database errors.
pub async fn followers(db: &Db, agent: &str) -> Result<Vec<FollowerRow>> {
    db.fetch_all(
        "SELECT actor, inbox FROM ap_followers WHERE agent = $1 ORDER BY created_at",
        &[Arg::Text(agent)],
    )
    .await
}

/// A cached actor document.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ActorRow {
    /// The document.
    pub doc: String,
    /// When it was fetched.
    pub fetched_at: i64,
}

/// A cached actor by IRI.
///
/// # Errors
/// Database errors.
pub async fn actor(db: &Db, id: &str) -> Result<Option<ActorRow>> {
    db.fetch_optional(
        "SELECT doc, fetched_at FROM ap_actors WHERE id = $1",
        &[Arg::Text(id)],
    )
    .await
}

/// Caches an actor document.
///
/// # Errors
/// Database errors.
pub async fn put_actor(db: &Db, id: &str, doc: &str, now: i64) -> Result<()> {
    db.execute(
        "INSERT INTO ap_actors (id, doc, fetched_at) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO UPDATE SET doc = $2, fetched_at = $3",
        &[Arg::Text(id), Arg::Text(doc), Arg::Int(now)],
    )
    .await?;
    Ok(())
}

/// Forgets an actor.
///
/// # Errors
/// Database errors.
pub async fn delete_actor(db: &Db, id: &str) -> Result<()> {
    db.execute("DELETE FROM ap_actors WHERE id = $1", &[Arg::Text(id)])
        .await?;
    Ok(())
}

/// Whether an activity id was processed before.
///
/// # Errors
/// Database errors.
pub async fn seen(db: &Db, id: &str) -> Result<bool> {
    let c: Option<Count> = db
        .fetch_optional(
            "SELECT COUNT(*) AS n FROM ap_seen WHERE id = $1",
            &[Arg::Text(id)],
        )
        .await?;
    Ok(c.is_some_and(|c| c.n > 0))
}

/// Records a processed activity id; returns `false` when it was already recorded.
///
/// # Errors
/// Database errors.
pub async fn mark_seen(db: &Db, id: &str, now: i64) -> Result<bool> {
    Ok(db
        .execute(
            "INSERT INTO ap_seen (id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[Arg::Text(id), Arg::Int(now)],
        )
        .await?
        > 0)
}

/// Deletes seen activity ids recorded before `before`; returns how many.
///
/// # Errors
/// Database errors.
pub async fn forget_seen_before(db: &Db, before: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM ap_seen WHERE created_at < $1",
        &[Arg::Int(before)],
    )
    .await
}

/// As [`mark_seen`], inside a transaction.
///
/// # Errors
/// Database errors.
pub async fn mark_seen_tx(tx: &mut Tx, id: &str, now: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO ap_seen (id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        &[Arg::Text(id), Arg::Int(now)],
    )
    .await?;
    Ok(())
}

/// Delivery health of a host.
#[derive(Debug, Clone, Default, sqlx::FromRow, serde::Deserialize)]
pub struct HostRow {
    /// Since when every delivery failed (unix ms), if failing.
    pub failing_since: Option<i64>,
    /// Consecutive failures.
    pub failures: i64,
    /// 1 when the host has sent us a valid RFC 9421 signature.
    pub rfc9421: i64,
}

/// A host's delivery health.
///
/// # Errors
/// Database errors.
pub async fn host(db: &Db, host: &str) -> Result<HostRow> {
    Ok(db
        .fetch_optional(
            "SELECT failing_since, failures, rfc9421 FROM ap_hosts WHERE host = $1",
            &[Arg::Text(host)],
        )
        .await?
        .unwrap_or_default())
}

/// Records a delivery outcome for a host: success clears the failure streak; a failure
/// (`Some(error)`) extends it and is kept as the host's last error.
///
/// # Errors
/// Database errors.
pub async fn record_delivery(db: &Db, host: &str, error: Option<&str>, now: i64) -> Result<()> {
    match error {
        None => {
            db.execute(
                "INSERT INTO ap_hosts (host, failing_since, failures, updated_at) VALUES ($1, NULL, 0, $2) \
                 ON CONFLICT (host) DO UPDATE SET failing_since = NULL, failures = 0, updated_at = $2",
                &[Arg::Text(host), Arg::Int(now)],
            )
            .await?
        }
        Some(e) => {
            db.execute(
                "INSERT INTO ap_hosts (host, failing_since, failures, last_error, updated_at) \
                 VALUES ($1, $2, 1, $3, $2) \
                 ON CONFLICT (host) DO UPDATE SET failing_since = COALESCE(ap_hosts.failing_since, $2), \
                 failures = ap_hosts.failures + 1, last_error = $3, updated_at = $2",
                &[Arg::Text(host), Arg::Int(now), Arg::Text(e)],
            )
            .await?
        }
    };
    Ok(())
}

/// A host's delivery health as the operator's remote-hosts page shows it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct HostHealthRow {
    /// The host.
    pub host: String,
    /// Since when every delivery failed (unix ms), if failing.
    pub failing_since: Option<i64>,
    /// Consecutive failures.
    pub failures: i64,
    /// The last delivery error, if any.
    pub last_error: Option<String>,
    /// When the row last changed (unix ms).
    pub updated_at: i64,
}

/// Every host with a delivery record, those failing longest first, at most `limit`.
///
/// # Errors
/// Database errors.
pub async fn hosts(db: &Db, limit: i64) -> Result<Vec<HostHealthRow>> {
    db.fetch_all(
        "SELECT host, failing_since, failures, last_error, updated_at FROM ap_hosts \
         WHERE failures > 0 OR last_error IS NOT NULL OR failing_since IS NOT NULL \
         ORDER BY failures DESC, updated_at DESC, host LIMIT $1",
        &[Arg::Int(limit)],
    )
    .await
}

/// Records that `actor` blocked `agent` (a `Block` activity, `activity_id`); a block already
/// recorded keeps its time and takes the newer activity id.
///
/// # Errors
/// Database errors.
pub async fn add_blocked_by(
    db: &Db,
    agent: &str,
    actor: &str,
    activity_id: &str,
    now: i64,
) -> Result<()> {
    db.execute(
        "INSERT INTO ap_blocked_by (agent, actor, activity_id, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (agent, actor) DO UPDATE SET activity_id = $3",
        &[
            Arg::Text(agent),
            Arg::Text(actor),
            Arg::Text(activity_id),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// Lifts `actor`'s block of `agent`; returns rows removed.
///
/// # Errors
/// Database errors.
pub async fn remove_blocked_by(db: &Db, agent: &str, actor: &str) -> Result<u64> {
    db.execute(
        "DELETE FROM ap_blocked_by WHERE agent = $1 AND actor = $2",
        &[Arg::Text(agent), Arg::Text(actor)],
    )
    .await
}

/// Lifts the block `actor` made with the activity `activity_id`; returns rows removed.
///
/// # Errors
/// Database errors.
pub async fn remove_block_activity(db: &Db, actor: &str, activity_id: &str) -> Result<u64> {
    db.execute(
        "DELETE FROM ap_blocked_by WHERE actor = $1 AND activity_id = $2",
        &[Arg::Text(actor), Arg::Text(activity_id)],
    )
    .await
}

/// The agents `actor` blocks.
///
/// # Errors
/// Database errors.
pub async fn agents_blocked_by(db: &Db, actor: &str) -> Result<Vec<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Agent {
        agent: String,
    }
    let rows: Vec<Agent> = db
        .fetch_all(
            "SELECT agent FROM ap_blocked_by WHERE actor = $1",
            &[Arg::Text(actor)],
        )
        .await?;
    Ok(rows.into_iter().map(|r| r.agent).collect())
}

/// The actors that block `agent`.
///
/// # Errors
/// Database errors.
pub async fn blockers_of(db: &Db, agent: &str) -> Result<std::collections::HashSet<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Actor {
        actor: String,
    }
    let rows: Vec<Actor> = db
        .fetch_all(
            "SELECT actor FROM ap_blocked_by WHERE agent = $1",
            &[Arg::Text(agent)],
        )
        .await?;
    Ok(rows.into_iter().map(|r| r.actor).collect())
}

/// Remembers that a host signs (and so verifies) RFC 9421.
///
/// # Errors
/// Database errors.
pub async fn set_rfc9421(db: &Db, host: &str, now: i64) -> Result<()> {
    db.execute(
        "INSERT INTO ap_hosts (host, rfc9421, updated_at) VALUES ($1, 1, $2) \
         ON CONFLICT (host) DO UPDATE SET rfc9421 = 1, updated_at = $2",
        &[Arg::Text(host), Arg::Int(now)],
    )
    .await?;
    Ok(())
}

/// The profile an agent last announced (`ap_profiles`).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ProfileRow {
    /// The digest of what its actor published.
    pub digest: String,
    /// The profile images it keeps in the blob store: digests, space-separated.
    pub images: String,
}

/// The profile `agent` last announced, read in `tx`.
///
/// # Errors
/// Database errors.
pub async fn profile_in(tx: &mut Tx, agent: &str) -> Result<Option<ProfileRow>> {
    tx.fetch_optional(
        "SELECT digest, images FROM ap_profiles WHERE agent = $1",
        &[Arg::Text(agent)],
    )
    .await
}

/// Records `digest` (and `images`) as the profile `agent` announces, in place of `previous`
/// (`None`: no profile recorded yet). Returns false when another writer recorded a profile
/// first: that writer announces it.
///
/// # Errors
/// Database errors.
pub async fn replace_profile(
    tx: &mut Tx,
    agent: &str,
    previous: Option<&str>,
    digest: &str,
    images: &str,
    now: i64,
) -> Result<bool> {
    let n = match previous {
        Some(old) => {
            tx.execute(
                "UPDATE ap_profiles SET digest = $1, images = $2, updated_at = $3 \
                 WHERE agent = $4 AND digest = $5",
                &[
                    Arg::Text(digest),
                    Arg::Text(images),
                    Arg::Int(now),
                    Arg::Text(agent),
                    Arg::Text(old),
                ],
            )
            .await?
        }
        None => {
            tx.execute(
                "INSERT INTO ap_profiles (agent, digest, images, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT DO NOTHING",
                &[
                    Arg::Text(agent),
                    Arg::Text(digest),
                    Arg::Text(images),
                    Arg::Int(now),
                ],
            )
            .await?
        }
    };
    Ok(n > 0)
}

/// The account `agent` moved to (`ap_moves`), if it moved.
///
/// # Errors
/// Database errors.
pub async fn moved_to(db: &Db, agent: &str) -> Result<Option<String>> {
    let row: Option<MoveRow> = db
        .fetch_optional(
            "SELECT target FROM ap_moves WHERE agent = $1",
            &[Arg::Text(agent)],
        )
        .await?;
    Ok(row.map(|r| r.target))
}

/// A recorded move (`ap_moves`).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
struct MoveRow {
    /// The actor IRI moved to.
    target: String,
}

/// The last move of an agent.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Deserialize)]
pub struct LastMove {
    /// The actor IRI it moved to.
    pub target: String,
    /// When (unix ms).
    pub moved_at: i64,
}

/// The last move recorded for `agent`, if it moved.
///
/// # Errors
/// Database errors.
pub async fn last_move(db: &Db, agent: &str) -> Result<Option<LastMove>> {
    db.fetch_optional(
        "SELECT target, moved_at FROM ap_moves WHERE agent = $1",
        &[Arg::Text(agent)],
    )
    .await
}

/// Records in `tx` that `agent` moved to the actor `target`, in place of any earlier move.
///
/// # Errors
/// Database errors.
pub async fn record_move(tx: &mut Tx, agent: &str, target: &str, now: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO ap_moves (agent, target, moved_at) VALUES ($1, $2, $3) \
         ON CONFLICT (agent) DO UPDATE SET target = excluded.target, moved_at = excluded.moved_at",
        &[Arg::Text(agent), Arg::Text(target), Arg::Int(now)],
    )
    .await?;
    Ok(())
}

/// Whether `actor` follows `agent`.
///
/// # Errors
/// Database errors.
pub async fn is_follower(db: &Db, agent: &str, actor: &str) -> Result<bool> {
    let row: Option<FollowerRow> = db
        .fetch_optional(
            "SELECT actor, inbox FROM ap_followers WHERE agent = $1 AND actor = $2",
            &[Arg::Text(agent), Arg::Text(actor)],
        )
        .await?;
    Ok(row.is_some())
}

/// A quote an agent authorized (`ap_quote_authorizations`).
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct QuoteRow {
    /// The agent whose note is quoted.
    pub agent: String,
    /// The quoting note's IRI.
    pub quoting: String,
    /// The quoted note's IRI (ours).
    pub quoted: String,
}

/// Records in `tx` that `agent` lets `quoting` quote its note `quoted`, under `key` (a second
/// record under the same key changes nothing).
///
/// # Errors
/// Database errors.
pub async fn authorize_quote(tx: &mut Tx, key: &str, q: &QuoteRow, now: i64) -> Result<()> {
    tx.execute(
        "INSERT INTO ap_quote_authorizations (key, agent, quoting, quoted, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        &[
            Arg::Text(key),
            Arg::Text(&q.agent),
            Arg::Text(&q.quoting),
            Arg::Text(&q.quoted),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// The quote authorized under `key`.
///
/// # Errors
/// Database errors.
pub async fn quote_authorization(db: &Db, key: &str) -> Result<Option<QuoteRow>> {
    db.fetch_optional(
        "SELECT agent, quoting, quoted FROM ap_quote_authorizations WHERE key = $1",
        &[Arg::Text(key)],
    )
    .await
}
