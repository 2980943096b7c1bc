//! SQL of the A2A transport: tasks, their events, idempotency keys and push configs.
//!
//! A task row holds the whole Task document plus the columns queries filter on; every change
//! of a task is written together with the events it produced, guarded by the task's last event
//! sequence so two writers (a cancel and a delivery) cannot both apply.

use crate::error::Result;
use crate::store::{self as sql, Arg, Db, Tx};

/// A stored task.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct TaskRow {
    /// Task id (server-generated).
    pub id: String,
    /// The agent's local name.
    pub agent: String,
    /// The principal that created it; only it sees the task.
    pub owner: String,
    /// The A2A contextId.
    pub context_id: String,
    /// ProtoJSON state name (`TASK_STATE_WORKING`…).
    pub state: String,
    /// The NormalizedMessage id of the current turn.
    pub turn_message_id: String,
    /// The wire messageId of the current turn.
    pub wire_message_id: String,
    /// The last response applied.
    pub last_response_id: Option<String>,
    /// The Task document (1.0 ProtoJSON).
    pub body: String,
    /// Sequence of the task's last event.
    pub last_seq: i64,
    /// Status timestamp (unix ms).
    pub status_at: i64,
    /// Created at (unix ms).
    pub created_at: i64,
}

/// A stored stream event.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct EventRow {
    /// Sequence within the task, from 1.
    pub seq: i64,
    /// One StreamResponse (1.0 ProtoJSON).
    pub body: String,
}

const TASK_COLUMNS: &str = "id, agent, owner, context_id, state, turn_message_id, wire_message_id, \
     last_response_id, body, last_seq, status_at, created_at";

/// Inserts new tasks in one statement.
///
/// # Errors
/// Database errors.
pub async fn insert_tasks(tx: &mut Tx, tasks: &[&TaskRow]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let (values, args) = sql::rows(tasks, |t| {
        [
            Arg::Text(&t.id),
            Arg::Text(&t.agent),
            Arg::Text(&t.owner),
            Arg::Text(&t.context_id),
            Arg::Text(&t.state),
            Arg::Text(&t.turn_message_id),
            Arg::Text(&t.wire_message_id),
            Arg::OptText(t.last_response_id.as_deref()),
            Arg::Text(&t.body),
            Arg::Int(t.last_seq),
            Arg::Int(t.status_at),
            Arg::Int(t.created_at),
        ]
    });
    tx.execute(
        &format!("INSERT INTO a2a_tasks ({TASK_COLUMNS}) VALUES {values}"),
        &args,
    )
    .await?;
    Ok(())
}

/// Writes changed tasks `(task, expected_seq)` in one statement, each only if nobody changed
/// it since it was read (its `last_seq` is still the expected one). Returns the ids written.
/// A task may appear only once.
///
/// # Errors
/// Database errors.
pub async fn update_tasks(
    tx: &mut Tx,
    changes: &[(&TaskRow, i64)],
) -> Result<std::collections::HashSet<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Id {
        id: String,
    }
    if changes.is_empty() {
        return Ok(std::collections::HashSet::new());
    }
    let (values, args) = sql::rows(changes, |(t, expected)| {
        [
            Arg::Text(&t.id),
            Arg::Text(&t.state),
            Arg::Text(&t.turn_message_id),
            Arg::Text(&t.wire_message_id),
            Arg::OptText(t.last_response_id.as_deref()),
            Arg::Text(&t.body),
            Arg::Int(t.last_seq),
            Arg::Int(t.status_at),
            Arg::Int(*expected),
        ]
    });
    let sql: std::borrow::Cow<'static, str> = if changes.len() == 1 {
        // One task (every change made inside a dispatch, and the writer's batches of one): a
        // plain update by key, without the temporary table SQLite builds for a VALUES list.
        "UPDATE a2a_tasks SET state = $2, turn_message_id = $3, wire_message_id = $4, \
         last_response_id = $5, body = $6, last_seq = $7, status_at = $8 \
         WHERE id = $1 AND last_seq = $9 RETURNING id"
            .into()
    } else {
        // VALUES columns are named column1… on both engines.
        format!(
            "UPDATE a2a_tasks AS t SET state = v.column2, turn_message_id = v.column3, \
             wire_message_id = v.column4, last_response_id = v.column5, body = v.column6, \
             last_seq = v.column7, status_at = v.column8 \
             FROM (VALUES {values}) AS v \
             WHERE t.id = v.column1 AND t.last_seq = v.column9 RETURNING id"
        )
        .into()
    };
    let rows: Vec<Id> = tx.fetch_all(&sql, &args).await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Appends events `(task id, seq, body)` of several tasks in one statement.
///
/// # Errors
/// Database errors (a duplicate sequence among them).
pub async fn insert_events(tx: &mut Tx, events: &[(&str, i64, &str)], now: i64) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let (values, args) = sql::rows(events, |(task_id, seq, body)| {
        [
            Arg::Text(task_id),
            Arg::Int(*seq),
            Arg::Text(body),
            Arg::Int(now),
        ]
    });
    tx.execute(
        &format!("INSERT INTO a2a_task_events (task_id, seq, body, created_at) VALUES {values}"),
        &args,
    )
    .await?;
    Ok(())
}

/// The task `id`.
///
/// # Errors
/// Database errors.
pub async fn get_task(db: &Db, id: &str) -> Result<Option<TaskRow>> {
    db.fetch_optional(
        &format!("SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// The task `id`, read inside `tx`.
///
/// # Errors
/// Database errors.
pub async fn get_task_in(tx: &mut Tx, id: &str) -> Result<Option<TaskRow>> {
    tx.fetch_optional(
        &format!("SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// The tasks in one of `states` of `owner` whose current turn's wire id is `wire_message_id`,
/// newest first, read inside the transaction that creates a new task.
///
/// # Errors
/// Database errors.
pub async fn tasks_by_wire_message(
    tx: &mut Tx,
    owner: &str,
    wire_message_id: &str,
    states: &[&str],
) -> Result<Vec<TaskRow>> {
    let list = sql::in_list(states.len(), 3);
    let mut args = vec![Arg::Text(owner), Arg::Text(wire_message_id)];
    args.extend(states.iter().map(|s| Arg::Text(s)));
    // Plain equalities, not a `(owner, wire_message_id) IN (VALUES …)` list: SQLite builds
    // a temporary table for such a list at every call.
    tx.fetch_all(
        &format!(
            "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE owner = $1 AND wire_message_id = $2 \
             AND state IN ({list}) ORDER BY created_at DESC"
        ),
        &args,
    )
    .await
}

/// Whose tasks a query reads.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// One identified principal's (or, for idempotency and resends, one anonymous owner's).
    Exactly(&'a str),
    /// Any anonymous caller's: only ever read with a task or context id, the capability that
    /// stands for an anonymous caller ([`super::scope`]).
    Anonymous,
}

impl<'a> Owner<'a> {
    /// The condition on `owner`, with its argument as `$n`.
    fn condition(self, n: usize) -> (String, Arg<'a>) {
        match self {
            Owner::Exactly(o) => (format!("owner = ${n}"), Arg::Text(o)),
            Owner::Anonymous => (
                format!("owner LIKE ${n}"),
                Arg::Text(super::scope::ANONYMOUS_OWNERS),
            ),
        }
    }
}

/// The agent a context belongs to, if any task of `owner` used it.
///
/// # Errors
/// Database errors.
pub async fn agent_of_context(
    db: &Db,
    owner: Owner<'_>,
    context_id: &str,
) -> Result<Option<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct AgentRow {
        agent: String,
    }
    let (cond, arg) = owner.condition(2);
    let row: Option<AgentRow> = db
        .fetch_optional(
            &format!("SELECT agent FROM a2a_tasks WHERE context_id = $1 AND {cond} LIMIT 1"),
            &[Arg::Text(context_id), arg],
        )
        .await?;
    Ok(row.map(|r| r.agent))
}

/// The stored body (a NormalizedMessage's JSON) of the inbound message that holds the dedupe
/// key `(transport, external_id)`, if it is still stored.
///
/// # Errors
/// Database errors.
pub async fn inbound_body(db: &Db, transport: &str, external_id: &str) -> Result<Option<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct BodyRow {
        body: String,
    }
    let row: Option<BodyRow> = db
        .fetch_optional(
            "SELECT m.body FROM inbound_seen s JOIN messages m ON m.id = s.message_id \
             WHERE s.transport = $1 AND s.external_id = $2",
            &[Arg::Text(transport), Arg::Text(external_id)],
        )
        .await?;
    Ok(row.map(|r| r.body))
}

/// Events of a task after `seq`, in order.
///
/// # Errors
/// Database errors.
pub async fn events_after(db: &Db, task_id: &str, seq: i64) -> Result<Vec<EventRow>> {
    db.fetch_all(
        "SELECT seq, body FROM a2a_task_events WHERE task_id = $1 AND seq > $2 ORDER BY seq",
        &[Arg::Text(task_id), Arg::Int(seq)],
    )
    .await
}

/// What ListTasks filters on.
#[derive(Debug, Clone)]
pub struct TaskFilter<'a> {
    /// Whose tasks.
    pub owner: Owner<'a>,
    /// Restrict to one agent (per-agent endpoint).
    pub agent: Option<&'a str>,
    /// Restrict to one context.
    pub context_id: Option<&'a str>,
    /// Restrict to one state.
    pub state: Option<&'a str>,
    /// Only tasks whose status changed at or after this time.
    pub status_after: Option<i64>,
}

fn filter_sql<'a>(f: &TaskFilter<'a>) -> (String, Vec<Arg<'a>>) {
    let (mut sql, owner) = f.owner.condition(1);
    let mut args = vec![owner];
    let mut add = |col: &str, a: Arg<'a>, args: &mut Vec<Arg<'a>>| {
        args.push(a);
        sql.push_str(&format!(" AND {col} ${}", args.len()));
    };
    if let Some(a) = f.agent {
        add("agent =", Arg::Text(a), &mut args);
    }
    if let Some(c) = f.context_id {
        add("context_id =", Arg::Text(c), &mut args);
    }
    if let Some(s) = f.state {
        add("state =", Arg::Text(s), &mut args);
    }
    if let Some(t) = f.status_after {
        add("status_at >=", Arg::Int(t), &mut args);
    }
    (sql, args)
}

/// One page of tasks, newest status first, strictly after the cursor `(status_at, id)`.
///
/// # Errors
/// Database errors.
pub async fn list_tasks(
    db: &Db,
    f: &TaskFilter<'_>,
    after: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<TaskRow>> {
    let (mut cond, mut args) = filter_sql(f);
    if let Some((at, id)) = after {
        let n = args.len();
        cond.push_str(&format!(
            " AND (status_at < ${} OR (status_at = ${} AND id < ${}))",
            n + 1,
            n + 2,
            n + 3
        ));
        args.extend([Arg::Int(at), Arg::Int(at), Arg::Text(id)]);
    }
    args.push(Arg::Int(limit));
    db.fetch_all(
        &format!(
            "SELECT {TASK_COLUMNS} FROM a2a_tasks WHERE {cond} ORDER BY status_at DESC, id DESC LIMIT ${}",
            args.len()
        ),
        &args,
    )
    .await
}

/// How many tasks match.
///
/// # Errors
/// Database errors.
pub async fn count_tasks(db: &Db, f: &TaskFilter<'_>) -> Result<i64> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let (cond, args) = filter_sql(f);
    let row: Option<N> = db
        .fetch_optional(
            &format!("SELECT COUNT(*) AS n FROM a2a_tasks WHERE {cond}"),
            &args,
        )
        .await?;
    Ok(row.map_or(0, |r| r.n))
}

/// An idempotency key as stored: whose, at which endpoint (`""` the hub, else the agent's
/// name), and a fingerprint of the request it came with.
#[derive(Debug, Clone, Copy)]
pub struct IdempotencyKey<'a> {
    /// The caller.
    pub owner: &'a str,
    /// The endpoint: `""` for the hub, else the agent's lower-case name.
    pub scope: &'a str,
    /// The key the caller sent.
    pub key: &'a str,
    /// A digest of the request.
    pub fingerprint: &'a str,
}

/// The task an idempotency key started, with the fingerprint of the request that started it
/// (none for keys stored before fingerprints were).
///
/// # Errors
/// Database errors.
pub async fn idempotent_task(
    db: &Db,
    key: &IdempotencyKey<'_>,
) -> Result<Option<(String, Option<String>)>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct T {
        task_id: String,
        fingerprint: Option<String>,
    }
    let row: Option<T> = db
        .fetch_optional(
            "SELECT task_id, fingerprint FROM a2a_idempotency \
             WHERE owner = $1 AND scope = $2 AND key = $3",
            &[
                Arg::Text(key.owner),
                Arg::Text(key.scope),
                Arg::Text(key.key),
            ],
        )
        .await?;
    Ok(row.map(|r| (r.task_id, r.fingerprint)))
}

/// Records that `key` started `task_id`; false when the key was already taken.
///
/// # Errors
/// Database errors.
pub async fn claim_idempotency_key(
    tx: &mut Tx,
    key: &IdempotencyKey<'_>,
    task_id: &str,
    now: i64,
) -> Result<bool> {
    let n = tx
        .execute(
            "INSERT INTO a2a_idempotency (owner, scope, key, fingerprint, task_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                Arg::Text(key.owner),
                Arg::Text(key.scope),
                Arg::Text(key.key),
                Arg::Text(key.fingerprint),
                Arg::Text(task_id),
                Arg::Int(now),
            ],
        )
        .await?;
    Ok(n == 1)
}

/// A stored push notification config.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct PushConfigRow {
    /// Config id.
    pub id: String,
    /// The TaskPushNotificationConfig (1.0 ProtoJSON).
    pub body: String,
    /// The last event delivered to it (events after it go out in order).
    pub delivered_seq: i64,
}

/// Stores a push config whose first notification is the event after `delivered_seq`, or
/// replaces the body of an existing one (its place in the events is kept).
///
/// # Errors
/// Database errors.
pub async fn put_push_config(
    tx: &mut Tx,
    task_id: &str,
    id: &str,
    owner: &str,
    body: &str,
    delivered_seq: i64,
    now: i64,
) -> Result<()> {
    tx.execute(
        "INSERT INTO a2a_push_configs (task_id, id, owner, body, delivered_seq, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (task_id, id) DO UPDATE SET body = excluded.body",
        &[
            Arg::Text(task_id),
            Arg::Text(id),
            Arg::Text(owner),
            Arg::Text(body),
            Arg::Int(delivered_seq),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// Records that the events of `task_id` up to `seq` were delivered to config `id` (never
/// moves back).
///
/// # Errors
/// Database errors.
pub async fn push_delivered(db: &Db, task_id: &str, id: &str, seq: i64) -> Result<()> {
    db.execute(
        "UPDATE a2a_push_configs SET delivered_seq = $3 \
         WHERE task_id = $1 AND id = $2 AND delivered_seq < $3",
        &[Arg::Text(task_id), Arg::Text(id), Arg::Int(seq)],
    )
    .await?;
    Ok(())
}

/// The push configs of a task, oldest first.
///
/// # Errors
/// Database errors.
pub async fn push_configs(db: &Db, task_id: &str) -> Result<Vec<PushConfigRow>> {
    db.fetch_all(
        "SELECT id, body, delivered_seq FROM a2a_push_configs WHERE task_id = $1 \
         ORDER BY created_at, id",
        &[Arg::Text(task_id)],
    )
    .await
}

/// Deletes a push config (nothing when it does not exist).
///
/// # Errors
/// Database errors.
pub async fn delete_push_config(db: &Db, task_id: &str, id: &str) -> Result<()> {
    db.execute(
        "DELETE FROM a2a_push_configs WHERE task_id = $1 AND id = $2",
        &[Arg::Text(task_id), Arg::Text(id)],
    )
    .await?;
    Ok(())
}

/// The `LISTEN` channel task changes travel on between instances.
pub const NOTIFY_CHANNEL: &str = "switchboard_a2a";

/// Tells every instance (PostgreSQL `NOTIFY`, on commit) that `task_id` changed; SQLite has
/// one process, which announces in-process.
///
/// # Errors
/// Database errors.
pub async fn notify_task(tx: &mut Tx, task_id: &str) -> Result<()> {
    if let Tx::Postgres(_) = tx {
        tx.execute(
            "SELECT pg_notify('switchboard_a2a', $1)",
            &[Arg::Text(task_id)],
        )
        .await?;
    }
    Ok(())
}

/// The push config ids of several tasks as `(task id, config id)`, each task's oldest first,
/// read inside the transaction that writes their events.
///
/// # Errors
/// Database errors.
pub async fn push_config_ids(tx: &mut Tx, task_ids: &[&str]) -> Result<Vec<(String, String)>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Ids {
        task_id: String,
        id: String,
    }
    if task_ids.is_empty() {
        return Ok(Vec::new());
    }
    let list = sql::in_list(task_ids.len(), 1);
    let args: Vec<Arg<'_>> = task_ids.iter().map(|t| Arg::Text(t)).collect();
    let rows: Vec<Ids> = tx
        .fetch_all(
            &format!(
                "SELECT task_id, id FROM a2a_push_configs WHERE task_id IN ({list}) \
                 ORDER BY task_id, created_at, id"
            ),
            &args,
        )
        .await?;
    Ok(rows.into_iter().map(|r| (r.task_id, r.id)).collect())
}

/// One push config of a task.
///
/// # Errors
/// Database errors.
pub async fn push_config(db: &Db, task_id: &str, id: &str) -> Result<Option<PushConfigRow>> {
    db.fetch_optional(
        "SELECT id, body, delivered_seq FROM a2a_push_configs WHERE task_id = $1 AND id = $2",
        &[Arg::Text(task_id), Arg::Text(id)],
    )
    .await
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct CardRow {
    modified_at: i64,
}

/// When the card called `name` (`""` for the hub) took the content whose ETag is `etag`: the
/// stored time while the ETag is unchanged, else `now_ms`, recorded. Every instance serving the
/// same card therefore tells the same Last-Modified, across restarts.
///
/// # Errors
/// Database errors.
pub async fn card_modified(db: &Db, name: &str, etag: &str, now_ms: i64) -> Result<i64> {
    db.execute(
        "INSERT INTO a2a_cards (name, etag, modified_at) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO UPDATE SET etag = excluded.etag, modified_at = excluded.modified_at \
         WHERE a2a_cards.etag <> excluded.etag",
        &[Arg::Text(name), Arg::Text(etag), Arg::Int(now_ms)],
    )
    .await?;
    let rows: Vec<CardRow> = db
        .write_fetch_all(
            "SELECT modified_at FROM a2a_cards WHERE name = $1",
            &[Arg::Text(name)],
        )
        .await?;
    Ok(rows.first().map_or(now_ms, |r| r.modified_at))
}

/// Retention: deletes up to `limit` tasks whose status last changed before `before` (unix
/// ms), oldest first, with their events, push configs and idempotency keys, in `tx` (every
/// instance is told, as of any change); returns their ids.
///
/// # Errors
/// Database errors.
pub async fn erase_tasks_before(tx: &mut Tx, before: i64, limit: i64) -> Result<Vec<String>> {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Id {
        id: String,
    }
    let ids: Vec<Id> = tx
        .fetch_all(
            "SELECT id FROM a2a_tasks WHERE status_at < $1 ORDER BY status_at LIMIT $2",
            &[Arg::Int(before), Arg::Int(limit)],
        )
        .await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let args: Vec<Arg<'_>> = ids.iter().map(|r| Arg::Text(&r.id)).collect();
    let list = sql::in_list(ids.len(), 1);
    for table in ["a2a_task_events", "a2a_push_configs", "a2a_idempotency"] {
        tx.execute(
            &format!("DELETE FROM {table} WHERE task_id IN ({list})"),
            &args,
        )
        .await?;
    }
    tx.execute(
        &format!("DELETE FROM a2a_tasks WHERE id IN ({list})"),
        &args,
    )
    .await?;
    for r in &ids {
        notify_task(tx, &r.id).await?;
    }
    Ok(ids.into_iter().map(|r| r.id).collect())
}
