//! TEMPORARY stand-in for the lead's shared key module (same API); replaced by main's
//! `src/keys.rs` at the next merge. Keys live in memory only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use ring::signature::{self, KeyPair as _};

use crate::error::{Error, Result};

/// An RSA-2048 key pair.
#[derive(Debug)]
pub struct RsaKey {
    pair: signature::RsaKeyPair,
    spki: Vec<u8>,
    pkcs8: Vec<u8>,
}

impl RsaKey {
    /// RSASSA-PKCS1-v1_5 SHA-256 signature.
    ///
    /// # Errors
    /// When ring fails.
    pub fn sign_pkcs1_sha256(&self, msg: &[u8]) -> Result<Vec<u8>> {
        let rng = ring::rand::SystemRandom::new();
        let mut sig = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(&signature::RSA_PKCS1_SHA256, &rng, msg, &mut sig)
            .map_err(|_| Error::Invalid("rsa sign".into()))?;
        Ok(sig)
    }
    /// SPKI DER.
    #[must_use]
    pub fn public_key_spki_der(&self) -> &[u8] {
        &self.spki
    }
    /// SPKI PEM.
    #[must_use]
    pub fn public_key_pem(&self) -> String {
        let b = base64::engine::general_purpose::STANDARD.encode(&self.spki);
        let lines: Vec<&str> = b
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap_or_default())
            .collect();
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            lines.join("\n")
        )
    }
    /// PKCS#8 DER.
    #[must_use]
    pub fn private_key_pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }
}

/// An Ed25519 key pair.
#[derive(Debug)]
pub struct Ed25519Key {
    pair: signature::Ed25519KeyPair,
    pkcs8: Vec<u8>,
}

impl Ed25519Key {
    /// Signs.
    #[must_use]
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        self.pair.sign(msg).as_ref().to_vec()
    }
    /// Raw public key.
    #[must_use]
    pub fn public_key_raw(&self) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(self.pair.public_key().as_ref());
        out
    }
    /// PKCS#8 v2.
    #[must_use]
    pub fn private_key_pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }
}

/// Key store.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    rsa: Arc<Mutex<HashMap<String, Arc<RsaKey>>>>,
    ed: Arc<Mutex<HashMap<String, Arc<Ed25519Key>>>>,
}

impl Keys {
    /// RSA key `name`.
    ///
    /// # Errors
    /// Generation failure.
    pub async fn rsa(&self, name: &str) -> Result<Arc<RsaKey>> {
        if let Some(k) = self.rsa.lock().map_err(|_| Error::Unavailable)?.get(name) {
            return Ok(Arc::clone(k));
        }
        let k = tokio::task::spawn_blocking(|| -> Result<RsaKey> {
            use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey};
            let mut rng = rand::thread_rng();
            let key = rsa::RsaPrivateKey::new(&mut rng, 2048)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            let pkcs8 = key
                .to_pkcs8_der()
                .map_err(|e| Error::Invalid(e.to_string()))?
                .as_bytes()
                .to_vec();
            let spki = key
                .to_public_key()
                .to_public_key_der()
                .map_err(|e| Error::Invalid(e.to_string()))?
                .as_bytes()
                .to_vec();
            let pair = signature::RsaKeyPair::from_pkcs8(&pkcs8)
                .map_err(|e| Error::Invalid(e.to_string()))?;
            Ok(RsaKey { pair, spki, pkcs8 })
        })
        .await
        .map_err(|_| Error::Unavailable)??;
        let k = Arc::new(k);
        let mut m = self.rsa.lock().map_err(|_| Error::Unavailable)?;
        Ok(Arc::clone(m.entry(name.to_owned()).or_insert(k)))
    }

    /// Ed25519 key `name`.
    ///
    /// # Errors
    /// Generation failure.
    pub async fn ed25519(&self, name: &str) -> Result<Arc<Ed25519Key>> {
        let mut m = self.ed.lock().map_err(|_| Error::Unavailable)?;
        if let Some(k) = m.get(name) {
            return Ok(Arc::clone(k));
        }
        let rng = ring::rand::SystemRandom::new();
        let doc =
            signature::Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| Error::Unavailable)?;
        let pkcs8 = doc.as_ref().to_vec();
        let pair = signature::Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| Error::Unavailable)?;
        let k = Arc::new(Ed25519Key { pair, pkcs8 });
        m.insert(name.to_owned(), Arc::clone(&k));
        Ok(k)
    }
}

/// RSA verify.
#[must_use]
pub fn verify_rsa_pkcs1_sha256(spki_der: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    // ring wants the RSAPublicKey inside the SPKI.
    let Some(inner) = spki_inner(spki_der) else {
        return false;
    };
    signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, inner)
        .verify(msg, sig)
        .is_ok()
}

fn spki_inner(der: &[u8]) -> Option<&[u8]> {
    // SEQUENCE { SEQUENCE alg, BIT STRING key }
    fn len(b: &[u8]) -> Option<(usize, usize)> {
        let first = *b.first()?;
        if first < 0x80 {
            return Some((usize::from(first), 1));
        }
        let n = usize::from(first & 0x7f);
        let mut l = 0usize;
        for i in 0..n {
            l = (l << 8) | usize::from(*b.get(1 + i)?);
        }
        Some((l, 1 + n))
    }
    let b = der.strip_prefix(&[0x30])?;
    let (_, h) = len(b)?;
    let b = &b[h..];
    let b2 = b.strip_prefix(&[0x30])?;
    let (l, h) = len(b2)?;
    let b = b2.get(h + l..)?;
    let b = b.strip_prefix(&[0x03])?;
    let (l, h) = len(b)?;
    b.get(h + 1..h + l)
}

/// Ed25519 verify.
#[must_use]
pub fn verify_ed25519(raw_pub32: &[u8; 32], msg: &[u8], sig: &[u8]) -> bool {
    signature::UnparsedPublicKey::new(&signature::ED25519, raw_pub32)
        .verify(msg, sig)
        .is_ok()
}

/// PEM → DER.
#[must_use]
pub fn spki_der_from_pem(pem: &str) -> Option<Vec<u8>> {
    let b: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    base64::engine::general_purpose::STANDARD.decode(b).ok()
}
