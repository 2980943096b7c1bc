//! Signing keys of this server: RSA-2048 (ActivityPub actors, DKIM) and Ed25519 (object
//! integrity proofs, push-notification JWTs).
//!
//! A key is generated on first use and stored in the `keys` table, so every instance of a
//! cluster signs with the same key and a restart keeps it; it is then cached in memory. Two
//! instances generating the same key at once both insert with `ON CONFLICT DO NOTHING` and
//! both keep whichever row won. RSA keys are *generated* with the RustCrypto `rsa` crate (ring
//! cannot generate them); every signature and verification goes through ring.
//!
//! Key names are namespaced by their user: `ap:actor:{agent}`, `dkim:{selector}`, `a2a:push`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, Ed25519KeyPair, KeyPair as _, RsaKeyPair, UnparsedPublicKey};

use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::store::{Arg, Db};

/// Algorithm tag stored with an RSA key.
const RSA: &str = "rsa-2048";
/// Algorithm tag stored with an Ed25519 key.
const ED25519: &str = "ed25519";

/// An RSA-2048 key pair that signs with RSASSA-PKCS1-v1_5 / SHA-256.
#[derive(Debug)]
pub struct RsaKey {
    pair: RsaKeyPair,
    pkcs8: Vec<u8>,
    spki: Vec<u8>,
}

impl RsaKey {
    fn from_der(pkcs8: Vec<u8>, spki: Vec<u8>) -> Result<Self> {
        let pair = RsaKeyPair::from_pkcs8(&pkcs8)
            .map_err(|e| Error::Startup(format!("stored RSA key unusable: {e}")))?;
        Ok(Self { pair, pkcs8, spki })
    }

    /// Signs `msg` with RSASSA-PKCS1-v1_5 over SHA-256.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if ring refuses (it does not for a valid key).
    pub fn sign_pkcs1_sha256(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let mut sig = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                msg,
                &mut sig,
            )
            .map_err(|_| Error::Unavailable)?;
        Ok(sig)
    }

    /// The public key as DER `SubjectPublicKeyInfo`.
    #[must_use]
    pub fn public_key_spki_der(&self) -> &[u8] {
        &self.spki
    }

    /// The public key as a `-----BEGIN PUBLIC KEY-----` PEM document.
    #[must_use]
    pub fn public_key_pem(&self) -> String {
        pem("PUBLIC KEY", &self.spki)
    }

    /// The private key as DER PKCS#8.
    #[must_use]
    pub fn private_key_pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }
}

/// An Ed25519 key pair.
#[derive(Debug)]
pub struct Ed25519Key {
    pair: Ed25519KeyPair,
    pkcs8: Vec<u8>,
}

impl Ed25519Key {
    fn from_der(pkcs8: Vec<u8>) -> Result<Self> {
        let pair = Ed25519KeyPair::from_pkcs8(&pkcs8)
            .map_err(|e| Error::Startup(format!("stored Ed25519 key unusable: {e}")))?;
        Ok(Self { pair, pkcs8 })
    }

    /// Signs `msg`; the signature is 64 bytes.
    #[must_use]
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        self.pair.sign(msg).as_ref().to_vec()
    }

    /// The raw 32-byte public key.
    #[must_use]
    pub fn public_key_raw(&self) -> [u8; 32] {
        let mut raw = [0; 32];
        raw.copy_from_slice(self.pair.public_key().as_ref());
        raw
    }

    /// The private key as ring's PKCS#8 v2 document.
    #[must_use]
    pub fn private_key_pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }
}

#[derive(Debug, Default)]
struct Cache {
    rsa: HashMap<String, Arc<RsaKey>>,
    ed25519: HashMap<String, Arc<Ed25519Key>>,
}

/// The server's key store: generated on first use, kept in the database, cached in memory.
#[derive(Debug, Clone)]
pub struct Keys {
    db: Db,
    clock: SharedClock,
    cache: Arc<Mutex<Cache>>,
    /// Held while a key missing from the cache is loaded or generated, so that many callers
    /// asking at once (the first burst of deliveries) wait for one key instead of each
    /// generating its own.
    loading: Arc<tokio::sync::Mutex<()>>,
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct KeyRow {
    algorithm: String,
    private_der: Vec<u8>,
    public_der: Vec<u8>,
}

impl Keys {
    /// A key store over `db`.
    #[must_use]
    pub fn new(db: Db, clock: SharedClock) -> Self {
        Self {
            db,
            clock,
            cache: Arc::default(),
            loading: Arc::default(),
        }
    }

    /// The RSA-2048 key called `name`, generated and stored on first use.
    ///
    /// # Errors
    /// Database errors; [`Error::Invalid`] if `name` holds a key of another algorithm.
    pub async fn rsa(&self, name: &str) -> Result<Arc<RsaKey>> {
        if let Some(key) = self.lock().rsa.get(name) {
            return Ok(key.clone());
        }
        let _loading = self.loading.lock().await;
        if let Some(key) = self.lock().rsa.get(name) {
            return Ok(key.clone());
        }
        let row = match self.load(name).await? {
            Some(row) => row,
            None => {
                let (private_der, public_der) = tokio::task::spawn_blocking(generate_rsa)
                    .await
                    .map_err(|_| Error::Unavailable)??;
                self.store(name, RSA, private_der, public_der).await?
            }
        };
        if row.algorithm != RSA {
            return Err(Error::Invalid(format!("key {name} is {}", row.algorithm)));
        }
        let key = Arc::new(RsaKey::from_der(row.private_der, row.public_der)?);
        self.lock().rsa.insert(name.to_owned(), key.clone());
        Ok(key)
    }

    /// The Ed25519 key called `name`, generated and stored on first use.
    ///
    /// # Errors
    /// Database errors; [`Error::Invalid`] if `name` holds a key of another algorithm.
    pub async fn ed25519(&self, name: &str) -> Result<Arc<Ed25519Key>> {
        if let Some(key) = self.lock().ed25519.get(name) {
            return Ok(key.clone());
        }
        let _loading = self.loading.lock().await;
        if let Some(key) = self.lock().ed25519.get(name) {
            return Ok(key.clone());
        }
        let row = match self.load(name).await? {
            Some(row) => row,
            None => {
                let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
                    .map_err(|_| Error::Unavailable)?
                    .as_ref()
                    .to_vec();
                let public = Ed25519KeyPair::from_pkcs8(&pkcs8)
                    .map_err(|_| Error::Unavailable)?
                    .public_key()
                    .as_ref()
                    .to_vec();
                self.store(name, ED25519, pkcs8, public).await?
            }
        };
        if row.algorithm != ED25519 {
            return Err(Error::Invalid(format!("key {name} is {}", row.algorithm)));
        }
        let key = Arc::new(Ed25519Key::from_der(row.private_der)?);
        self.lock().ed25519.insert(name.to_owned(), key.clone());
        Ok(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn load(&self, name: &str) -> Result<Option<KeyRow>> {
        self.db
            .fetch_optional(
                "SELECT algorithm, private_der, public_der FROM keys WHERE name = $1",
                &[Arg::Text(name)],
            )
            .await
    }

    /// Inserts a freshly generated key unless another instance got there first, and returns
    /// the row that is stored either way.
    async fn store(
        &self,
        name: &str,
        algorithm: &str,
        private_der: Vec<u8>,
        public_der: Vec<u8>,
    ) -> Result<KeyRow> {
        let now = self.clock.now_ms();
        self.db
            .execute(
                "INSERT INTO keys (name, algorithm, private_der, public_der, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    Arg::Text(name),
                    Arg::Text(algorithm),
                    Arg::Bytes(&private_der),
                    Arg::Bytes(&public_der),
                    Arg::Int(now),
                ],
            )
            .await?;
        tracing::info!(key = name, algorithm, "generated signing key");
        // Read back through the writer's view: the row may be another instance's.
        let rows: Vec<KeyRow> = self
            .db
            .write_fetch_all(
                "SELECT algorithm, private_der, public_der FROM keys WHERE name = $1",
                &[Arg::Text(name)],
            )
            .await?;
        rows.into_iter()
            .next()
            .ok_or_else(|| Error::NotFound(format!("key {name}")))
    }
}

/// Generates an RSA-2048 key: (PKCS#8 DER private key, SPKI DER public key).
fn generate_rsa() -> Result<(Vec<u8>, Vec<u8>)> {
    use rsa::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _};
    let mut rng = rand::rngs::OsRng;
    let private = rsa::RsaPrivateKey::new(&mut rng, 2048)
        .map_err(|e| Error::Startup(format!("RSA key generation failed: {e}")))?;
    let pkcs8 = private
        .to_pkcs8_der()
        .map_err(|e| Error::Startup(format!("RSA key encoding failed: {e}")))?;
    let spki = private
        .to_public_key()
        .to_public_key_der()
        .map_err(|e| Error::Startup(format!("RSA key encoding failed: {e}")))?;
    Ok((pkcs8.as_bytes().to_vec(), spki.as_bytes().to_vec()))
}

/// A PEM document with `label` around `der`, lines of 64 characters.
#[must_use]
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The DER inside the first PEM block of `pem` (any label), or `None` if there is none.
#[must_use]
pub fn spki_der_from_pem(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN ")?;
    let rest = &pem[start..];
    let body_start = rest.find('\n')? + 1;
    let body_end = rest.find("-----END ")?;
    let body: String = rest
        .get(body_start..body_end)?
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// Verifies an RSASSA-PKCS1-v1_5 / SHA-256 signature (2048 to 8192-bit keys). `public_der` is
/// a `SubjectPublicKeyInfo` or a bare PKCS#1 `RSAPublicKey`.
#[must_use]
pub fn verify_rsa_pkcs1_sha256(public_der: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    let pkcs1 = spki_subject_key(public_der).unwrap_or(public_der);
    UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, pkcs1)
        .verify(msg, sig)
        .is_ok()
}

/// Verifies an Ed25519 signature with a raw 32-byte public key.
#[must_use]
pub fn verify_ed25519(public_raw: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    public_raw.len() == 32
        && UnparsedPublicKey::new(&signature::ED25519, public_raw)
            .verify(msg, sig)
            .is_ok()
}

/// The key bytes inside a DER `SubjectPublicKeyInfo` (the BIT STRING's content), or `None` if
/// `der` is not one.
#[must_use]
pub fn spki_subject_key(der: &[u8]) -> Option<&[u8]> {
    // SEQUENCE { SEQUENCE algorithm, BIT STRING subjectPublicKey }
    let (tag, outer, _) = der_element(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, _, rest) = der_element(outer)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, bits, _) = der_element(rest)?;
    if tag != 0x03 {
        return None;
    }
    match bits.split_first() {
        Some((0, key)) => Some(key),
        _ => None,
    }
}

/// Splits one DER element off `input`: (tag, contents, rest).
fn der_element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn der_walk_rejects_truncation() {
        assert!(spki_subject_key(&[0x30, 0x05, 0x30]).is_none());
        assert!(der_element(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
        assert!(spki_subject_key(&[]).is_none());
    }

    #[test]
    fn pem_round_trip() {
        let der = (0u8..=200).collect::<Vec<_>>();
        let doc = pem("PUBLIC KEY", &der);
        assert!(doc.starts_with("-----BEGIN PUBLIC KEY-----\n"));
        assert!(doc.lines().all(|l| l.len() <= 64));
        assert_eq!(spki_der_from_pem(&doc).unwrap(), der);
        assert!(spki_der_from_pem("no pem here").is_none());
    }
}
