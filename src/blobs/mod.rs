//! Content-addressed attachments and the signed, expiring URLs agents fetch them by
//! (`/media/{sha256}?exp=…&sig=…`, spec §3).
//!
//! Storage keeps the digest, never a signed URL; a fresh URL is minted whenever a message is
//! handed to an agent.

use sha2::{Digest, Sha256};

use crate::clock::SharedClock;
use crate::config::{MediaConfig, Secret};
use crate::error::{Error, Result};
use crate::message::{BytesRef, ContentAddressedBytes, Part};
use crate::net::{constant_time_eq, hmac_hex};
use crate::store::{Db, blobs};

/// The blob store.
#[derive(Debug, Clone)]
pub struct BlobStore {
    db: Db,
    clock: SharedClock,
    key: Secret,
    base: String,
    ttl_ms: i64,
    max_bytes: usize,
}

/// What a `/media` request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaAccess {
    /// Signature valid and not expired.
    Granted,
    /// Signature wrong, or the URL expired.
    Refused,
}

impl BlobStore {
    /// A store whose URLs start at `public_url` (no trailing slash).
    #[must_use]
    pub fn new(db: Db, clock: SharedClock, cfg: &MediaConfig, public_url: &str) -> Self {
        let key = cfg.secret.clone().unwrap_or_else(|| {
            tracing::warn!("media.secret is not set: media URLs are signed with a key that changes at every start");
            Secret::new(hex::encode(rand::random::<[u8; 32]>()))
        });
        Self {
            db,
            clock,
            key,
            base: public_url.trim_end_matches('/').to_owned(),
            ttl_ms: i64::try_from(cfg.url_ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX),
            max_bytes: cfg.max_bytes,
        }
    }

    /// Stores `data` and returns its reference with a fresh URL.
    ///
    /// # Errors
    /// [`Error::TooLarge`] over `media.max_bytes`; database errors.
    pub async fn put(&self, data: &[u8], mime: &str) -> Result<ContentAddressedBytes> {
        let digest = self.digest(data)?;
        let mut tx = self.db.begin().await?;
        blobs::put_in(&mut tx, &digest, mime, data, self.clock.now_ms()).await?;
        tx.commit().await?;
        Ok(ContentAddressedBytes {
            algo: "sha256".into(),
            url: Some(self.url(&digest)),
            digest,
        })
    }

    /// `data`, named by its digest, to be stored in the transaction that stores what refers to
    /// it ([`NewBlob::store_in`]).
    ///
    /// # Errors
    /// [`Error::TooLarge`] over `media.max_bytes`.
    pub fn prepare(&self, data: &[u8], mime: &str) -> Result<NewBlob> {
        Ok(NewBlob {
            digest: self.digest(data)?,
            mime: mime.to_owned(),
            data: data.to_vec(),
        })
    }

    fn digest(&self, data: &[u8]) -> Result<String> {
        if data.len() > self.max_bytes {
            return Err(Error::TooLarge(format!(
                "attachment over {} bytes",
                self.max_bytes
            )));
        }
        Ok(hex::encode(Sha256::digest(data)))
    }

    /// The blob's media type and bytes.
    ///
    /// # Errors
    /// Database errors.
    pub async fn get(&self, digest: &str) -> Result<Option<(String, Vec<u8>)>> {
        Ok(blobs::get(&self.db, digest)
            .await?
            .map(|b| (b.mime, b.data)))
    }

    fn sign(&self, digest: &str, exp: i64) -> String {
        hmac_hex(
            self.key.expose().as_bytes(),
            digest.as_bytes(),
            exp.to_string().as_bytes(),
        )
    }

    /// A URL for `digest` valid for `media.url_ttl_seconds`.
    #[must_use]
    pub fn url(&self, digest: &str) -> String {
        let exp = (self.clock.now_ms().saturating_add(self.ttl_ms)) / 1000;
        format!(
            "{}/media/{digest}?exp={exp}&sig={}",
            self.base,
            self.sign(digest, exp)
        )
    }

    /// Checks a `/media` request's expiry (unix seconds) and signature.
    #[must_use]
    pub fn check(&self, digest: &str, exp: i64, sig: &str) -> MediaAccess {
        let same = constant_time_eq(self.sign(digest, exp).as_bytes(), sig.as_bytes());
        if same && exp.saturating_mul(1000) >= self.clock.now_ms() {
            MediaAccess::Granted
        } else {
            MediaAccess::Refused
        }
    }

    /// Replaces the URL of every content-addressed reference in `parts` with a fresh one.
    pub fn refresh_urls(&self, parts: &mut [Part]) {
        for_each_content_ref(parts, |c| c.url = Some(self.url(&c.digest)));
    }

    /// As [`BlobStore::refresh_urls`], for parts shared with others (a history turn's, or a
    /// message held in the caches): copied only when they refer to stored bytes.
    pub fn refresh_shared_urls<T: HasParts + Clone>(&self, shared: &mut std::sync::Arc<T>) {
        let refers = shared.parts().iter().any(|p| match p {
            Part::File(_) => true,
            Part::Artifact(a) => a.bytes_ref.is_some(),
            _ => false,
        });
        if refers {
            self.refresh_urls(std::sync::Arc::make_mut(shared).parts_mut());
        }
    }
}

/// What carries parts whose URLs [`BlobStore::refresh_shared_urls`] refreshes.
pub trait HasParts {
    /// The parts.
    fn parts(&self) -> &[Part];
    /// The parts, to change.
    fn parts_mut(&mut self) -> &mut [Part];
}

impl HasParts for Vec<Part> {
    fn parts(&self) -> &[Part] {
        self
    }
    fn parts_mut(&mut self) -> &mut [Part] {
        self
    }
}

impl HasParts for crate::message::NormalizedMessage {
    fn parts(&self) -> &[Part] {
        &self.parts
    }
    fn parts_mut(&mut self) -> &mut [Part] {
        &mut self.parts
    }
}

/// Bytes checked and named, waiting to be stored with what refers to them.
#[derive(Debug, Clone)]
pub struct NewBlob {
    /// Lower-case hex sha256 of `data`.
    pub digest: String,
    /// Media type.
    pub mime: String,
    /// The bytes.
    pub data: Vec<u8>,
}

impl NewBlob {
    /// Stores the bytes in `tx` (nothing when the same bytes are stored already).
    ///
    /// # Errors
    /// Database errors.
    pub async fn store_in(&self, tx: &mut crate::store::Tx, now: i64) -> Result<()> {
        blobs::put_in(tx, &self.digest, &self.mime, &self.data, now).await
    }
}

/// Drops the URLs of content-addressed references: storage keeps the digest only.
pub fn strip_urls(parts: &mut [Part]) {
    for_each_content_ref(parts, |c| c.url = None);
}

fn for_each_content_ref(parts: &mut [Part], mut f: impl FnMut(&mut ContentAddressedBytes)) {
    for part in parts {
        let bytes_ref = match part {
            Part::File(file) => Some(&mut file.bytes_ref),
            Part::Artifact(a) => a.bytes_ref.as_mut(),
            _ => None,
        };
        if let Some(BytesRef::ContentAddressed(c)) = bytes_ref
            && c.algo == "sha256"
        {
            f(c);
        }
    }
}

/// Whether `s` looks like a lower-case hex sha256.
#[must_use]
pub fn is_digest(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
