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
//!
//! With a key-encryption key ([`Kek`], `server.kek` or `server.kek_file`) every private key
//! written is sealed with AES-256-GCM (ring), a random nonce per record, the key's name and
//! algorithm bound in as associated data, and the KEK's id stored beside it; a plain record
//! (written before there was a KEK) is still read, and [`encrypt_plain`] seals those,
//! [`rotate`] re-seals every record under a new KEK. [`check_kek`] refuses at start-up a
//! database whose records were sealed under another KEK, or with none configured.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use der::Decode as _;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{self, Ed25519KeyPair, KeyPair as _, RsaKeyPair, UnparsedPublicKey};

use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::store::keys::KeyRow;
use crate::store::{self, Db};

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

    /// A new random key pair (not stored: [`Keys::ed25519`] keeps the server's keys).
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the system's random source fails.
    pub fn generate() -> Result<Self> {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| Error::Unavailable)?
            .as_ref()
            .to_vec();
        Self::from_der(pkcs8)
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

/// The length of a key-encryption key: AES-256.
pub use crate::config::KEK_BYTES;

/// A key-encryption key: seals the private keys stored in the `keys` table (AES-256-GCM).
pub struct Kek {
    key: LessSafeKey,
    id: String,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kek({})", self.id)
    }
}

impl Kek {
    /// A KEK from its text: 32 bytes as 64 hex digits or as base64 (standard or URL-safe,
    /// padded or not); surrounding whitespace is ignored.
    ///
    /// # Errors
    /// [`Error::Config`] saying what is wrong, never the value.
    pub fn parse(text: &str) -> Result<Self> {
        Self::from_bytes(&crate::config::kek_bytes(text)?)
    }

    /// The KEK `server.kek` (or `kek_file`) sets, if any.
    ///
    /// # Errors
    /// [`Error::Config`] naming `server.kek` when it is not 32 bytes of hex or base64.
    pub fn configured(server: &crate::config::ServerConfig) -> Result<Option<Arc<Self>>> {
        server
            .kek_bytes()?
            .map(|b| Self::from_bytes(&b).map(Arc::new))
            .transpose()
    }

    /// A KEK from its 32 bytes.
    ///
    /// # Errors
    /// [`Error::Config`] when `bytes` is not 32 bytes long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let key = UnboundKey::new(&AES_256_GCM, bytes)
            .map_err(|_| Error::Config(format!("a KEK is {KEK_BYTES} bytes")))?;
        // The id names the KEK without revealing it: a digest of a domain tag and the key.
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"switchboard kek id\0");
        ctx.update(bytes);
        let id = hex::encode(&ctx.finish().as_ref()[..8]);
        Ok(Self {
            key: LessSafeKey::new(key),
            id,
        })
    }

    /// The KEK's id, stored with each record it seals (16 hex digits of a digest of it).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the key `name` of `algorithm` is bound to: a record moved to another name fails to
    /// open.
    fn aad(name: &str, algorithm: &str) -> Vec<u8> {
        format!("switchboard key\0{name}\0{algorithm}").into_bytes()
    }

    /// `plain` sealed: a random nonce, then the ciphertext and its tag.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the system's random source or ring fails.
    pub fn seal(&self, name: &str, algorithm: &str, plain: &[u8]) -> Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| Error::Unavailable)?;
        let mut sealed = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::aad(name, algorithm)),
                &mut sealed,
            )
            .map_err(|_| Error::Unavailable)?;
        let mut out = nonce.to_vec();
        out.append(&mut sealed);
        Ok(out)
    }

    /// The private key inside a record [`Kek::seal`] wrote for `name`.
    ///
    /// # Errors
    /// [`Error::Startup`] when the record does not open with this KEK (another KEK, or
    /// altered).
    pub fn open(&self, name: &str, algorithm: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        let refused =
            || Error::Startup(format!("key {name}: does not decrypt with KEK {}", self.id));
        if sealed.len() < NONCE_LEN {
            return Err(refused());
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| refused())?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(Self::aad(name, algorithm)), &mut body)
            .map_err(|_| refused())?;
        Ok(plain.to_vec())
    }
}

/// The private key of a stored row, opened with `kek` when the row is sealed.
///
/// # Errors
/// [`Error::Startup`] naming the key and the KEK when the row is sealed under another KEK or
/// none is given.
fn unseal(
    name: &str,
    algorithm: &str,
    kek_id: Option<&str>,
    private: &[u8],
    kek: Option<&Kek>,
) -> Result<Vec<u8>> {
    match (kek_id, kek) {
        (None, _) => Ok(private.to_vec()),
        (Some(id), Some(kek)) if id == kek.id() => kek.open(name, algorithm, private),
        (Some(id), Some(kek)) => Err(Error::Startup(format!(
            "key {name} is encrypted under KEK {id}, not under the KEK given (KEK {}): the \
             wrong KEK",
            kek.id()
        ))),
        (Some(id), None) => Err(Error::Startup(format!(
            "key {name} is encrypted under KEK {id}; set server.kek_file (or server.kek)"
        ))),
    }
}

/// Refuses a database whose private keys this server cannot read: a record sealed under
/// another KEK than `kek`, or any sealed one when there is no KEK. Each KEK id found is tried
/// on one of its records, so a KEK whose id matches but whose key differs is refused too.
/// Returns how many records are still plain.
///
/// # Errors
/// [`Error::Startup`] naming the KEK ids; database errors.
pub async fn check_kek(db: &Db, kek: Option<&Kek>) -> Result<usize> {
    let rows = store::keys::all(db).await?;
    let mut tried = std::collections::HashSet::new();
    for row in &rows {
        if let Some(id) = row.kek_id.as_deref()
            && tried.insert(id)
        {
            unseal(&row.name, &row.algorithm, Some(id), &row.private_der, kek)?;
        }
    }
    Ok(rows.iter().filter(|r| r.kek_id.is_none()).count())
}

/// Seals every plain record under `kek`; records already sealed under it are left alone.
/// Returns how many were sealed.
///
/// # Errors
/// As [`check_kek`]; database errors.
pub async fn encrypt_plain(db: &Db, kek: &Kek) -> Result<usize> {
    check_kek(db, Some(kek)).await?;
    let mut sealed = 0;
    for row in store::keys::all(db).await? {
        if row.kek_id.is_some() {
            continue;
        }
        let record = kek.seal(&row.name, &row.algorithm, &row.private_der)?;
        sealed += store::keys::reseal(db, &row.name, None, &record, kek.id()).await?;
    }
    Ok(usize::try_from(sealed).unwrap_or(usize::MAX))
}

/// Re-seals every record sealed under `old` (and every plain one) under `new`. Returns how
/// many were written.
///
/// # Errors
/// [`Error::Startup`] when a record is sealed under neither KEK or does not open; database
/// errors.
pub async fn rotate(db: &Db, old: &Kek, new: &Kek) -> Result<usize> {
    let rows = store::keys::all(db).await?;
    // Every record must open before any is rewritten.
    let mut plain = Vec::with_capacity(rows.len());
    for row in &rows {
        let was = row.kek_id.as_deref();
        if was == Some(new.id()) {
            continue;
        }
        let kek = was.map(|_| old);
        plain.push((
            row,
            unseal(&row.name, &row.algorithm, was, &row.private_der, kek)?,
        ));
    }
    let mut written = 0;
    for (row, private) in plain {
        let record = new.seal(&row.name, &row.algorithm, &private)?;
        let was = row.kek_id.as_deref();
        written += store::keys::reseal(db, &row.name, was, &record, new.id()).await?;
    }
    Ok(usize::try_from(written).unwrap_or(usize::MAX))
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
    /// Seals the private keys written, opens the sealed ones read.
    kek: Option<Arc<Kek>>,
    cache: Arc<Mutex<Cache>>,
    /// Held while a key missing from the cache is loaded or generated, so that many callers
    /// asking at once (the first burst of deliveries) wait for one key instead of each
    /// generating its own.
    loading: Arc<tokio::sync::Mutex<()>>,
}

impl Keys {
    /// A key store over `db`.
    #[must_use]
    pub fn new(db: Db, clock: SharedClock) -> Self {
        Self {
            db,
            clock,
            kek: None,
            cache: Arc::default(),
            loading: Arc::default(),
        }
    }

    /// The same store, sealing the keys it writes with `kek` and opening those sealed with it.
    #[must_use]
    pub fn with_kek(mut self, kek: Option<Arc<Kek>>) -> Self {
        self.kek = kek;
        self
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
        let row = match store::keys::load(&self.db, name).await? {
            Some(row) => row,
            None => {
                let (private_der, public_der) = tokio::task::spawn_blocking(generate_rsa)
                    .await
                    .map_err(|_| Error::Unavailable)??;
                self.store(name, RSA, private_der, public_der).await?
            }
        };
        let private = self.private_of(name, RSA, &row)?;
        let key = Arc::new(RsaKey::from_der(private, row.public_der)?);
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
        let row = match store::keys::load(&self.db, name).await? {
            Some(row) => row,
            None => {
                let fresh = Ed25519Key::generate()?;
                let public = fresh.public_key_raw().to_vec();
                self.store(name, ED25519, fresh.pkcs8, public).await?
            }
        };
        let private = self.private_of(name, ED25519, &row)?;
        let key = Arc::new(Ed25519Key::from_der(private)?);
        self.lock().ed25519.insert(name.to_owned(), key.clone());
        Ok(key)
    }

    /// The private key in `row`, stored as `name`, which must hold a key of `algorithm`.
    fn private_of(&self, name: &str, algorithm: &str, row: &KeyRow) -> Result<Vec<u8>> {
        if row.algorithm != algorithm {
            return Err(Error::Invalid(format!("key {name} is {}", row.algorithm)));
        }
        unseal(
            name,
            algorithm,
            row.kek_id.as_deref(),
            &row.private_der,
            self.kek.as_deref(),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores a freshly generated key unless another instance got there first, and returns
    /// the row that is stored either way.
    async fn store(
        &self,
        name: &str,
        algorithm: &str,
        private_der: Vec<u8>,
        public_der: Vec<u8>,
    ) -> Result<KeyRow> {
        let now = self.clock.now_ms();
        let (record, kek_id) = match &self.kek {
            Some(kek) => (kek.seal(name, algorithm, &private_der)?, Some(kek.id())),
            None => (private_der, None),
        };
        let row = store::keys::insert_or_keep(
            &self.db,
            name,
            algorithm,
            &record,
            &public_der,
            kek_id,
            now,
        )
        .await?;
        tracing::info!(key = name, algorithm, "generated signing key");
        Ok(row)
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

/// A PEM document (RFC 7468) with `label` around `der`: base64 in lines of 64 characters, each
/// line ending in `\n`. A label RFC 7468 does not allow (only printable ASCII, no leading,
/// trailing or doubled spaces and hyphens) gives an empty string and an error log; every
/// caller passes a constant one.
#[must_use]
pub fn pem(label: &str, der: &[u8]) -> String {
    pem_rfc7468::encode_string(label, pem_rfc7468::LineEnding::LF, der).unwrap_or_else(|e| {
        tracing::error!(label, error = %e, "cannot write a PEM document");
        String::new()
    })
}

/// The DER inside the first PEM block of `pem` (any label, `PUBLIC KEY` and PKCS#1
/// `RSA PUBLIC KEY` alike), or `None` if there is none.
///
/// A strict RFC 7468 document is read as such. Failing that, the first block is read the lax
/// way RFC 7468 §3 describes, as published keys are found in the wild: text around it, lines
/// of any length, spaces and CRLF in the base64 text, and an END label that does not match.
#[must_use]
pub fn spki_der_from_pem(pem: &str) -> Option<Vec<u8>> {
    match pem_rfc7468::decode_vec(pem.as_bytes()) {
        Ok((_, der)) => Some(der),
        Err(_) => lax_pem_block(pem),
    }
}

/// The lax reading of [`spki_der_from_pem`]: the first block's base64 text, whitespace
/// removed, decoded as one line between the BEGIN label's boundaries.
fn lax_pem_block(pem: &str) -> Option<Vec<u8>> {
    const BEGIN: &str = "-----BEGIN ";
    const END: &str = "-----END ";
    let after_begin = &pem[pem.find(BEGIN)? + BEGIN.len()..];
    let (label, rest) = after_begin.split_once("-----")?;
    let text = &rest[..rest.find(END)?];
    let base64: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let strict = format!("{BEGIN}{label}-----\n{base64}\n{END}{label}-----\n");
    let mut decoder = pem_rfc7468::Decoder::new_wrapped(strict.as_bytes(), base64.len()).ok()?;
    let mut der = Vec::new();
    decoder.decode_to_end(&mut der).ok()?;
    Some(der)
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
/// `der` does not start with one (a truncated one included). Bytes after it are ignored.
#[must_use]
pub fn spki_subject_key(der: &[u8]) -> Option<&[u8]> {
    let mut reader = der::SliceReader::new(der).ok()?;
    let spki = spki::SubjectPublicKeyInfoRef::decode(&mut reader).ok()?;
    spki.subject_public_key.as_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// An Ed25519 `SubjectPublicKeyInfo` (RFC 8410) around the key `[7; 32]`.
    fn ed25519_spki() -> Vec<u8> {
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(&[7; 32]);
        der
    }

    #[test]
    fn der_walk_rejects_truncation() {
        assert!(spki_subject_key(&[0x30, 0x05, 0x30]).is_none());
        assert!(spki_subject_key(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
        assert!(spki_subject_key(&[]).is_none());
        let spki = ed25519_spki();
        for len in 0..spki.len() {
            assert!(spki_subject_key(&spki[..len]).is_none(), "cut at {len}");
        }
    }

    #[test]
    fn spki_subject_key_is_the_bit_string() {
        let spki = ed25519_spki();
        assert_eq!(spki_subject_key(&spki), Some(&[7u8; 32][..]));
        // What follows the structure is not looked at.
        let mut longer = spki.clone();
        longer.extend_from_slice(b"trailer");
        assert_eq!(spki_subject_key(&longer), Some(&[7u8; 32][..]));
        // Unused bits in the BIT STRING: not a key.
        let mut odd = spki.clone();
        odd[11] = 1;
        assert!(spki_subject_key(&odd).is_none());
        // A bare PKCS#1 `RSAPublicKey` (SEQUENCE of two INTEGERs) is not an SPKI.
        let pkcs1 = [0x30, 0x06, 0x02, 0x01, 0x05, 0x02, 0x01, 0x03];
        assert!(spki_subject_key(&pkcs1).is_none());
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

    #[test]
    fn pem_layout_is_unchanged() {
        let der = (0u8..=100).collect::<Vec<_>>();
        assert_eq!(
            pem("PUBLIC KEY", &der),
            "-----BEGIN PUBLIC KEY-----\n\
             AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v\n\
             MDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5f\n\
             YGFiY2Q=\n\
             -----END PUBLIC KEY-----\n"
        );
        let exact = (0u8..48).collect::<Vec<_>>();
        let doc = pem("PRIVATE KEY", &exact);
        assert_eq!(doc.lines().count(), 3, "{doc}");
        assert!(doc.ends_with("\n-----END PRIVATE KEY-----\n"));
        assert_eq!(pem("BAD--LABEL", &der), "");
    }

    #[test]
    fn pem_is_read_laxly_as_published() {
        let der = (0u8..=100).collect::<Vec<_>>();
        let strict = pem("PUBLIC KEY", &der);
        let b64 = strict
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<String>();
        for doc in [
            // PKCS#1, as some servers publish it.
            strict.replace("PUBLIC KEY", "RSA PUBLIC KEY"),
            // CRLF line ends.
            strict.replace('\n', "\r\n"),
            // One long line, and 76-character lines.
            format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----"),
            format!(
                "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----\n",
                &b64[..76],
                &b64[76..]
            ),
            // Text around the block, blank lines, indentation.
            format!("key:\n{strict}\ntrailing words\n"),
            format!("-----BEGIN PUBLIC KEY-----\n\n  {b64}  \n\n-----END PUBLIC KEY-----\n\n"),
            // The first of two blocks.
            format!("{strict}{}", pem("PUBLIC KEY", b"other")),
        ] {
            assert_eq!(spki_der_from_pem(&doc).as_deref(), Some(&der[..]), "{doc}");
        }
        for bad in [
            "-----BEGIN PUBLIC KEY-----\nAAEC!wQF\n-----END PUBLIC KEY-----\n",
            "-----BEGIN PUBLIC KEY-----\nAAECAwQ\n-----END PUBLIC KEY-----\n",
            "-----BEGIN PUBLIC KEY-----\nAAECAwQF\n",
            "AAECAwQF",
        ] {
            assert!(spki_der_from_pem(bad).is_none(), "{bad}");
        }
    }
}
