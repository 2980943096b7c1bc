//! The `blocks` table: the senders refused that the operator added at run time. The rules that
//! use it are in [`crate::moderation`].

use super::{Arg, Db, Tx};
use crate::error::Result;

/// A stored block; an empty `agent` is stored for a server-wide one.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct BlockRow {
    /// Its id.
    pub id: String,
    /// `sender`, `domain` or `issuer`.
    pub kind: String,
    /// The pattern.
    pub pattern: String,
    /// The one agent it applies to.
    pub agent: Option<String>,
    /// Why.
    pub reason: Option<String>,
    /// When it was stored (unix ms).
    pub created_at: i64,
}

const COLUMNS: &str = "id, kind, pattern, NULLIF(agent, '') AS agent, reason, created_at";

/// Every stored block, oldest first.
///
/// # Errors
/// Database errors.
pub async fn list(db: &Db) -> Result<Vec<BlockRow>> {
    db.fetch_all(
        &format!("SELECT {COLUMNS} FROM blocks ORDER BY created_at, id"),
        &[],
    )
    .await
}

/// Stores `row`, unless the same block (kind, pattern, agent) is stored already; returns the
/// stored one either way; in `tx`, so that what the operator did is recorded with it.
///
/// # Errors
/// Database errors.
pub async fn insert(tx: &mut Tx, row: &BlockRow) -> Result<BlockRow> {
    let agent = row.agent.as_deref().unwrap_or_default();
    tx.execute(
        "INSERT INTO blocks (id, kind, pattern, agent, reason, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (kind, pattern, agent) DO NOTHING",
        &[
            Arg::Text(&row.id),
            Arg::Text(&row.kind),
            Arg::Text(&row.pattern),
            Arg::Text(agent),
            Arg::OptText(row.reason.as_deref()),
            Arg::Int(row.created_at),
        ],
    )
    .await?;
    let stored = tx
        .fetch_all::<BlockRow>(
            &format!(
                "SELECT {COLUMNS} FROM blocks WHERE kind = $1 AND pattern = $2 AND agent = $3"
            ),
            &[
                Arg::Text(&row.kind),
                Arg::Text(&row.pattern),
                Arg::Text(agent),
            ],
        )
        .await?;
    stored
        .into_iter()
        .next()
        .ok_or_else(|| crate::Error::corrupt("a block stored is not found"))
}

/// Removes the block `id` in `tx`; `false` when there is none.
///
/// # Errors
/// Database errors.
pub async fn delete(tx: &mut Tx, id: &str) -> Result<bool> {
    Ok(tx
        .execute("DELETE FROM blocks WHERE id = $1", &[Arg::Text(id)])
        .await?
        > 0)
}
