//! SQL of the blob store: content-addressed bytes keyed by their sha256.

use super::{Arg, Db, Tx};
use crate::error::Result;

/// A stored blob.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct BlobRow {
    /// Media type given when it was stored.
    pub mime: String,
    /// The bytes.
    pub data: Vec<u8>,
}

const PUT: &str = "INSERT INTO blobs (digest, mime, size, data, created_at) VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT DO NOTHING";

/// Stores `data` under `digest` in `tx`, unless it is already there (same digest, same bytes).
///
/// # Errors
/// Database errors.
pub async fn put_in(tx: &mut Tx, digest: &str, mime: &str, data: &[u8], now: i64) -> Result<()> {
    let size = i64::try_from(data.len()).unwrap_or(i64::MAX);
    tx.execute(
        PUT,
        &[
            Arg::Text(digest),
            Arg::Text(mime),
            Arg::Int(size),
            Arg::Bytes(data),
            Arg::Int(now),
        ],
    )
    .await?;
    Ok(())
}

/// The blob stored under `digest`.
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, digest: &str) -> Result<Option<BlobRow>> {
    db.fetch_optional(
        "SELECT mime, data FROM blobs WHERE digest = $1",
        &[Arg::Text(digest)],
    )
    .await
}
