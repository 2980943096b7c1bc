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

/// The blob digests a stored body names: every `"digest":"…"` holding a lower-case hex sha256
/// (a content-addressed reference in its parts, or the raw form's, like an email's bytes),
/// each once. A false match only keeps a blob longer.
#[must_use]
pub fn digests_in(body: &str) -> Vec<&str> {
    const NEEDLE: &[u8] = b"\"digest\":\"";
    let mut found: Vec<&str> = Vec::new();
    for at in memchr::memmem::find_iter(body.as_bytes(), NEEDLE) {
        let from = at + NEEDLE.len();
        let Some(d) = body.get(from..from + 64) else {
            continue;
        };
        if body.as_bytes().get(from + 64) == Some(&b'"')
            && d.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && !found.contains(&d)
        {
            found.push(d);
        }
    }
    found
}

/// Records that the messages `refs` (`(digest, message id)`) refer to those blobs, in the
/// transaction that stores them.
///
/// # Errors
/// Database errors.
pub async fn add_refs(tx: &mut Tx, refs: &[(&str, &str)]) -> Result<()> {
    if refs.is_empty() {
        return Ok(());
    }
    let (values, args) = super::rows(refs, |(digest, id)| [Arg::Text(digest), Arg::Text(id)]);
    tx.execute(
        &format!(
            "INSERT INTO blob_refs (digest, message_id) VALUES {values} ON CONFLICT DO NOTHING"
        ),
        &args,
    )
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct DigestRow {
    digest: String,
}

/// Forgets what the messages `ids` refer to, and erases the blobs no other message refers to
/// any more; returns how many blobs were erased.
///
/// # Errors
/// Database errors.
pub async fn release(tx: &mut Tx, ids: &[&str]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let args: Vec<Arg<'_>> = ids.iter().map(|id| Arg::Text(id)).collect();
    let list = super::in_list(ids.len(), 1);
    let referred: Vec<DigestRow> = tx
        .fetch_all(
            &format!("SELECT DISTINCT digest FROM blob_refs WHERE message_id IN ({list})"),
            &args,
        )
        .await?;
    if referred.is_empty() {
        return Ok(0);
    }
    tx.execute(
        &format!("DELETE FROM blob_refs WHERE message_id IN ({list})"),
        &args,
    )
    .await?;
    let digests: Vec<Arg<'_>> = referred.iter().map(|r| Arg::Text(&r.digest)).collect();
    tx.execute(
        &format!(
            "DELETE FROM blobs WHERE digest IN ({}) \
             AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.digest = blobs.digest)",
            super::in_list(digests.len(), 1)
        ),
        &digests,
    )
    .await
}

/// Retention: erases up to `limit` blobs stored before `before` (unix ms) that no message
/// refers to, oldest first; returns how many.
///
/// # Errors
/// Database errors.
pub async fn erase_unreferenced_before(db: &Db, before: i64, limit: i64) -> Result<u64> {
    db.execute(
        "DELETE FROM blobs WHERE digest IN (SELECT b.digest FROM blobs b WHERE b.created_at < $1 \
         AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.digest = b.digest) \
         ORDER BY b.created_at LIMIT $2)",
        &[Arg::Int(before), Arg::Int(limit)],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::digests_in;

    #[test]
    fn digests_are_found_once_and_only_whole() {
        let d = "a".repeat(64);
        let e = "0123456789abcdef".repeat(4);
        let body = format!(
            r#"{{"parts":[{{"bytes_ref":{{"digest":"{d}"}}}},{{"bytes_ref":{{"digest":"{d}"}}}}],"raw":{{"body":{{"digest":"{e}"}}}},"x":{{"digest":"{d}0"}},"y":{{"digest":"ABC"}}}}"#
        );
        assert_eq!(digests_in(&body), vec![d.as_str(), e.as_str()]);
        assert!(digests_in("{}").is_empty());
        assert!(digests_in(r#"{"digest":""#).is_empty());
    }
}
