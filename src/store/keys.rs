//! The `keys` table: the server's signing keys, shared by every instance. A key is inserted by
//! whichever instance generates it first; the others read that one back. A private key is
//! stored as is (`kek_id` NULL) or sealed under the key-encryption key `kek_id` names
//! ([`crate::keys::Kek`]).

use super::{Arg, Db};
use crate::error::{Error, Result};

/// One stored key.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct KeyRow {
    /// `rsa-2048` or `ed25519`.
    pub algorithm: String,
    /// The private key, PKCS#8 DER; sealed (nonce, ciphertext, tag) when `kek_id` is set.
    pub private_der: Vec<u8>,
    /// The public key, SPKI DER (raw for Ed25519).
    pub public_der: Vec<u8>,
    /// The id of the key-encryption key that sealed `private_der`; `None`: stored plain.
    pub kek_id: Option<String>,
}

/// A stored key with its name: what the commands that rewrite every key read.
#[derive(Debug, sqlx::FromRow, serde::Deserialize)]
pub struct NamedKeyRow {
    /// The key's name (`ap:actor:{agent}`, `dkim:{selector}`…).
    pub name: String,
    /// As [`KeyRow::algorithm`].
    pub algorithm: String,
    /// As [`KeyRow::private_der`].
    pub private_der: Vec<u8>,
    /// As [`KeyRow::kek_id`].
    pub kek_id: Option<String>,
}

/// The key called `name`, if one is stored.
///
/// # Errors
/// Database errors.
pub async fn load(db: &Db, name: &str) -> Result<Option<KeyRow>> {
    db.fetch_optional(
        "SELECT algorithm, private_der, public_der, kek_id FROM keys WHERE name = $1",
        &[Arg::Text(name)],
    )
    .await
}

/// Every stored key, by name (read through the writer's view, for the commands that rewrite
/// them).
///
/// # Errors
/// Database errors.
pub async fn all(db: &Db) -> Result<Vec<NamedKeyRow>> {
    db.write_fetch_all(
        "SELECT name, algorithm, private_der, kek_id FROM keys ORDER BY name",
        &[],
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
    kek_id: Option<&str>,
    now_ms: i64,
) -> Result<KeyRow> {
    db.execute(
        "INSERT INTO keys (name, algorithm, private_der, public_der, kek_id, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        &[
            Arg::Text(name),
            Arg::Text(algorithm),
            Arg::Bytes(private_der),
            Arg::Bytes(public_der),
            Arg::OptText(kek_id),
            Arg::Int(now_ms),
        ],
    )
    .await?;
    let rows: Vec<KeyRow> = db
        .write_fetch_all(
            "SELECT algorithm, private_der, public_der, kek_id FROM keys WHERE name = $1",
            &[Arg::Text(name)],
        )
        .await?;
    rows.into_iter()
        .next()
        .ok_or_else(|| Error::NotFound(format!("key {name}")))
}

/// Replaces the private key of `name` with `record` sealed under `kek_id`, if it is still as
/// read (`was`: the KEK it was sealed under, `None` for plain). Returns the rows written (0 when
/// another writer changed it first).
///
/// # Errors
/// Database errors.
pub async fn reseal(
    db: &Db,
    name: &str,
    was: Option<&str>,
    record: &[u8],
    kek_id: &str,
) -> Result<u64> {
    match was {
        None => {
            db.execute(
                "UPDATE keys SET private_der = $1, kek_id = $2 WHERE name = $3 AND kek_id IS NULL",
                &[Arg::Bytes(record), Arg::Text(kek_id), Arg::Text(name)],
            )
            .await
        }
        Some(old) => {
            db.execute(
                "UPDATE keys SET private_der = $1, kek_id = $2 WHERE name = $3 AND kek_id = $4",
                &[
                    Arg::Bytes(record),
                    Arg::Text(kek_id),
                    Arg::Text(name),
                    Arg::Text(old),
                ],
            )
            .await
        }
    }
}
