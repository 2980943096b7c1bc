//! The `keys` table: the server's signing keys, shared by every instance. A key is inserted by
//! whichever instance generates it first; the others read that one back.

use super::{Arg, Db};
use crate::error::{Error, Result};

/// One stored key.
#[derive(Debug, sqlx::FromRow, serde::Deserialize)]
pub struct KeyRow {
    /// `rsa-2048` or `ed25519`.
    pub algorithm: String,
    /// The private key, PKCS#8 DER.
    pub private_der: Vec<u8>,
    /// The public key, SPKI DER (raw for Ed25519).
    pub public_der: Vec<u8>,
}

/// The key called `name`, if one is stored.
///
/// # Errors
/// Database errors.
pub async fn load(db: &Db, name: &str) -> Result<Option<KeyRow>> {
    db.fetch_optional(
        "SELECT algorithm, private_der, public_der FROM keys WHERE name = $1",
        &[Arg::Text(name)],
    )
    .await
}

/// Inserts a key unless one called `name` exists already, and returns the row stored either
/// way (read back through the writer's view: it may be another instance's).
///
/// # Errors
/// Database errors.
pub async fn insert_or_keep(
    db: &Db,
    name: &str,
    algorithm: &str,
    private_der: &[u8],
    public_der: &[u8],
    now_ms: i64,
) -> Result<KeyRow> {
    db.execute(
        "INSERT INTO keys (name, algorithm, private_der, public_der, created_at) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        &[
            Arg::Text(name),
            Arg::Text(algorithm),
            Arg::Bytes(private_der),
            Arg::Bytes(public_der),
            Arg::Int(now_ms),
        ],
    )
    .await?;
    let rows: Vec<KeyRow> = db
        .write_fetch_all(
            "SELECT algorithm, private_der, public_der FROM keys WHERE name = $1",
            &[Arg::Text(name)],
        )
        .await?;
    rows.into_iter()
        .next()
        .ok_or_else(|| Error::NotFound(format!("key {name}")))
}
