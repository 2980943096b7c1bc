//! The `attestation_jtis` table: the `(iss, jti)` of every forwarded identity assertion
//! accepted, kept until the assertion has expired, so each is used once across instances and
//! restarts.

use super::{Arg, Db};
use crate::error::Result;

/// Records `(iss, jti)` as used until `expires_at` (unix ms); `false` when it is in use
/// already. One statement against the primary key, so of two instances racing on the same
/// pair exactly one wins; a row that has expired is taken over.
///
/// # Errors
/// Database errors.
pub async fn claim(db: &Db, iss: &str, jti: &str, expires_at: i64, now: i64) -> Result<bool> {
    let n = db
        .execute(
            "INSERT INTO attestation_jtis (iss, jti, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (iss, jti) DO UPDATE SET expires_at = excluded.expires_at \
             WHERE attestation_jtis.expires_at <= $4",
            &[
                Arg::Text(iss),
                Arg::Text(jti),
                Arg::Int(expires_at),
                Arg::Int(now),
            ],
        )
        .await?;
    Ok(n == 1)
}

/// Deletes the rows that expired before `now` (unix ms); returns how many.
///
/// # Errors
/// Database errors.
pub async fn purge_expired(db: &Db, now: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM attestation_jtis WHERE expires_at <= $1",
        &[Arg::Int(now)],
    )
    .await
}
