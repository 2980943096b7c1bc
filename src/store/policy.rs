//! The `policy_states` table: the single-use `state` minted for each policy part an agent sends,
//! what it is bound to, and whether (and by which turn) it was consumed. The rules that use it
//! are in [`crate::policy`].

use super::{Arg, Db, Tx, rows};
use crate::error::Result;

/// A state to record with the response that carries it.
#[derive(Debug, Clone)]
pub struct NewState {
    /// The token.
    pub state: String,
    /// The agent's local name.
    pub agent: String,
    /// Switchboard's thread id.
    pub thread_id: String,
    /// The inbound message the policy part answered.
    pub message_id: String,
    /// The response that carries the part.
    pub response_id: String,
    /// The policy kind, as sent.
    pub kind: String,
    /// The digest of the evidence of the sender it was sent to ([`crate::policy::binding`]).
    pub binding: String,
    /// The policy part as sent (JSON).
    pub part: String,
    /// When it stops being accepted (unix ms).
    pub expires_at: i64,
}

/// A recorded state.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct StateRow {
    /// The token.
    pub state: String,
    /// The agent's local name.
    pub agent: String,
    /// Switchboard's thread id.
    pub thread_id: String,
    /// The inbound message the policy part answered.
    pub message_id: String,
    /// The response that carries the part.
    pub response_id: String,
    /// The policy kind, as sent.
    pub kind: String,
    /// The digest of the evidence of the sender it was sent to.
    pub binding: String,
    /// The policy part as sent (JSON).
    pub part: String,
    /// When it was minted (unix ms).
    pub created_at: i64,
    /// When it stops being accepted (unix ms).
    pub expires_at: i64,
    /// When it was consumed (unix ms), if it was.
    pub consumed_at: Option<i64>,
    /// The message that consumed it.
    pub consumed_by: Option<String>,
}

const COLUMNS: &str = "state, agent, thread_id, message_id, response_id, kind, binding, part, \
                       created_at, expires_at, consumed_at, consumed_by";

/// Records `states` in `tx`, the transaction that stores the responses carrying them.
///
/// # Errors
/// Database errors.
pub async fn insert(tx: &mut Tx, states: &[NewState], now: i64) -> Result<()> {
    if states.is_empty() {
        return Ok(());
    }
    let (values, args) = rows(states, |s| {
        [
            Arg::Text(&s.state),
            Arg::Text(&s.agent),
            Arg::Text(&s.thread_id),
            Arg::Text(&s.message_id),
            Arg::Text(&s.response_id),
            Arg::Text(&s.kind),
            Arg::Text(&s.binding),
            Arg::Text(&s.part),
            Arg::Int(now),
            Arg::Int(s.expires_at),
        ]
    });
    let sql = format!(
        "INSERT INTO policy_states (state, agent, thread_id, message_id, response_id, kind, \
         binding, part, created_at, expires_at) VALUES {values}"
    );
    tx.execute(&sql, &args).await?;
    Ok(())
}

/// The state `state`, if one was minted (and not yet purged).
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, state: &str) -> Result<Option<StateRow>> {
    db.fetch_optional(
        &format!("SELECT {COLUMNS} FROM policy_states WHERE state = $1"),
        &[Arg::Text(state)],
    )
    .await
}

/// As [`get`], inside `tx`.
///
/// # Errors
/// Database errors.
pub async fn get_in(tx: &mut Tx, state: &str) -> Result<Option<StateRow>> {
    tx.fetch_optional(
        &format!("SELECT {COLUMNS} FROM policy_states WHERE state = $1"),
        &[Arg::Text(state)],
    )
    .await
}

/// Marks `state` consumed by message `by`; `false` when it was consumed already. One statement
/// guarded by `consumed_at IS NULL`, so of two instances racing on one state exactly one wins.
///
/// # Errors
/// Database errors.
pub async fn consume(tx: &mut Tx, state: &str, by: &str, now: i64) -> Result<bool> {
    let n = tx
        .execute(
            "UPDATE policy_states SET consumed_at = $1, consumed_by = $2 \
             WHERE state = $3 AND consumed_at IS NULL",
            &[Arg::Int(now), Arg::Text(by), Arg::Text(state)],
        )
        .await?;
    Ok(n == 1)
}

/// Gives back `state`, consumed by message `by` in this same transaction, when that message is
/// declined after all (the transport's own write refused it): it was never stored, so the
/// state is still unused.
///
/// # Errors
/// Database errors.
pub async fn release(tx: &mut Tx, state: &str, by: &str) -> Result<()> {
    tx.execute(
        "UPDATE policy_states SET consumed_at = NULL, consumed_by = NULL \
         WHERE state = $1 AND consumed_by = $2",
        &[Arg::Text(state), Arg::Text(by)],
    )
    .await?;
    Ok(())
}

/// Deletes the states that expired before `before` (unix ms); returns how many.
///
/// # Errors
/// Database errors.
pub async fn purge_expired(db: &Db, before: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM policy_states WHERE expires_at <= $1",
        &[Arg::Int(before)],
    )
    .await
}
