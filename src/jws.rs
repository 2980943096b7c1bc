//! Detached JSON Web Signatures (RFC 7515, appendix F) over the RFC 8785 canonical form of a
//! JSON document: how A2A agent cards are signed (`signatures`) and checked.
//!
//! A signature entry is `{"protected": b64url(header), "signature": b64url(sig)}`; the signed
//! bytes are `protected || "." || b64url(JCS(document without "signatures"))`, so a verifier
//! with any JSON library reproduces them. switchboard signs with EdDSA (Ed25519); it verifies
//! EdDSA, ECDSA (ES256, ES384) and RSA (RS*, PS*) signatures, never an HMAC or `none`.

use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::{Value, json};

use crate::keys::Ed25519Key;

/// The member of a document that holds its signatures.
pub const SIGNATURES: &str = "signatures";

/// Why a document's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    /// The document carries no signature.
    #[error("the document is not signed")]
    Unsigned,
    /// A signature entry or its header is not what RFC 7515 describes.
    #[error("malformed signature: {0}")]
    Malformed(String),
    /// The algorithm is one this server never accepts (`none`, HMAC) or does not know.
    #[error("signature algorithm {0:?} is not accepted")]
    Algorithm(String),
    /// No key of the signer's matches the signature's `kid`.
    #[error("no key for the signature (kid {0:?})")]
    NoKey(Option<String>),
    /// The signer's key set could not be had (for now).
    #[error("the signer's key set is unavailable: {0}")]
    KeysUnavailable(String),
    /// No signature verifies with the signer's keys.
    #[error("the signature does not verify")]
    Invalid,
}

/// Base64url without padding, as JOSE writes every binary member.
#[must_use]
pub fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// `doc` without its signatures, in RFC 8785 canonical form, base64url-encoded: the JWS
/// payload.
fn payload(doc: &Value) -> Result<String, JwsError> {
    let mut unsigned = doc.clone();
    if let Some(o) = unsigned.as_object_mut() {
        o.remove(SIGNATURES);
    }
    let canonical = serde_json_canonicalizer::to_string(&unsigned)
        .map_err(|e| JwsError::Malformed(format!("not canonicalisable: {e}")))?;
    Ok(b64url(canonical.as_bytes()))
}

/// The signature entry for `doc` (its own `signatures` left out), made with `key`: a protected
/// header `{"alg": "EdDSA", "typ": "JOSE", "kid": kid, "jku": jku}`.
///
/// # Errors
/// [`JwsError::Malformed`] when `doc` holds a number JCS cannot write (never a parsed one).
pub fn sign(doc: &Value, key: &Ed25519Key, kid: &str, jku: &str) -> Result<Value, JwsError> {
    let header = json!({"alg": "EdDSA", "typ": "JOSE", "kid": kid, "jku": jku});
    let protected = b64url(header.to_string().as_bytes());
    let input = format!("{protected}.{}", payload(doc)?);
    Ok(json!({
        "protected": protected,
        "signature": b64url(&key.sign(input.as_bytes())),
    }))
}

/// The protected header of one signature entry, as far as a verifier needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The algorithm.
    pub alg: Algorithm,
    /// The key id, if named.
    pub kid: Option<String>,
    /// Where the signer's key set is, if named.
    pub jku: Option<String>,
}

/// The signature entries of `doc`.
///
/// # Errors
/// [`JwsError::Unsigned`] when it carries none; [`JwsError::Malformed`] when `signatures` is
/// not a list.
pub fn entries(doc: &Value) -> Result<&[Value], JwsError> {
    match doc.get(SIGNATURES) {
        None | Some(Value::Null) => Err(JwsError::Unsigned),
        Some(Value::Array(a)) if a.is_empty() => Err(JwsError::Unsigned),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(JwsError::Malformed("signatures is not a list".into())),
    }
}

/// The protected header of `entry`.
///
/// # Errors
/// [`JwsError::Malformed`] when it is not base64url JSON with an `alg`;
/// [`JwsError::Algorithm`] for `none`, an HMAC or an unknown algorithm; a `crit` header is
/// refused as malformed (no extension is understood).
pub fn header(entry: &Value) -> Result<Header, JwsError> {
    let protected = entry
        .get("protected")
        .and_then(Value::as_str)
        .ok_or_else(|| JwsError::Malformed("no protected header".into()))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(protected)
        .map_err(|_| JwsError::Malformed("protected header is not base64url".into()))?;
    let h: Value = serde_json::from_slice(&bytes)
        .map_err(|_| JwsError::Malformed("protected header is not JSON".into()))?;
    if h.get("crit").is_some() {
        return Err(JwsError::Malformed(
            "crit extensions are not understood".into(),
        ));
    }
    let alg_name = h
        .get("alg")
        .and_then(Value::as_str)
        .ok_or_else(|| JwsError::Malformed("protected header names no alg".into()))?;
    let alg: Algorithm = alg_name
        .parse()
        .map_err(|_| JwsError::Algorithm(alg_name.to_owned()))?;
    if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(JwsError::Algorithm(alg_name.to_owned()));
    }
    let text = |k: &str| h.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok(Header {
        alg,
        kid: text("kid"),
        jku: text("jku"),
    })
}

/// Whether `entry` is a signature, by `key` under `header`, of the document whose JWS payload
/// is `payload`.
fn verifies(payload: &str, entry: &Value, header: &Header, key: &Jwk) -> Result<bool, JwsError> {
    let protected = entry
        .get("protected")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let signature = entry
        .get("signature")
        .and_then(Value::as_str)
        .ok_or_else(|| JwsError::Malformed("no signature".into()))?;
    let Ok(decoding) = DecodingKey::from_jwk(key) else {
        return Ok(false);
    };
    let input = format!("{protected}.{payload}");
    Ok(
        jsonwebtoken::crypto::verify(signature, input.as_bytes(), &decoding, header.alg)
            .unwrap_or(false),
    )
}

/// Checks `doc`'s signatures: `Ok` when one of them verifies with a key `keys_for` gives for
/// its header (the keys of the signer: pinned ones, or the set its `jku` names).
///
/// # Errors
/// The first entry's reason when none verifies ([`JwsError::Unsigned`] when there is none).
pub async fn verify<F, Fut>(doc: &Value, mut keys_for: F) -> Result<(), JwsError>
where
    F: FnMut(Header) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Jwk>, JwsError>>,
{
    let mut first = None;
    let entries = entries(doc)?;
    let payload = payload(doc)?;
    for entry in entries {
        let outcome = async {
            let h = header(entry)?;
            let keys = keys_for(h.clone()).await?;
            let candidates: Vec<&Jwk> = keys
                .iter()
                .filter(|k| match (&h.kid, &k.common.key_id) {
                    (Some(want), Some(have)) => want == have,
                    _ => true,
                })
                .collect();
            if candidates.is_empty() {
                return Err(JwsError::NoKey(h.kid));
            }
            for k in candidates {
                if verifies(&payload, entry, &h, k)? {
                    return Ok(());
                }
            }
            Err(JwsError::Invalid)
        }
        .await;
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or(JwsError::Unsigned))
}

/// The public JWK of an Ed25519 key, with its `kid`.
#[must_use]
pub fn ed25519_jwk(public_raw: &[u8; 32], kid: &str) -> Value {
    json!({
        "kty": "OKP", "crv": "Ed25519", "x": b64url(public_raw),
        "kid": kid, "alg": "EdDSA", "use": "sig",
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn key() -> Ed25519Key {
        Ed25519Key::generate().unwrap()
    }

    fn jwk(k: &Ed25519Key, kid: &str) -> Jwk {
        serde_json::from_value(ed25519_jwk(&k.public_key_raw(), kid)).unwrap()
    }

    async fn check(doc: &Value, keys: Vec<Jwk>) -> Result<(), JwsError> {
        verify(doc, |_| {
            let keys = keys.clone();
            async move { Ok(keys) }
        })
        .await
    }

    #[tokio::test]
    async fn a_signed_document_verifies_in_any_member_order_and_not_once_changed() {
        let k = key();
        let mut doc = json!({"name": "a", "skills": [{"id": "x"}], "n": 1.0});
        let sig = sign(&doc, &k, "k1", "https://h.example/jwks").unwrap();
        doc[SIGNATURES] = json!([sig]);
        check(&doc, vec![jwk(&k, "k1")]).await.unwrap();
        // The same members in another order, the number written differently: same JCS form.
        let reordered: Value = serde_json::from_str(&format!(
            r#"{{"signatures": {}, "n": 1, "skills": [{{"id": "x"}}], "name": "a"}}"#,
            doc[SIGNATURES]
        ))
        .unwrap();
        check(&reordered, vec![jwk(&k, "k1")]).await.unwrap();
        let h = header(&doc[SIGNATURES][0]).unwrap();
        assert_eq!(h.alg, Algorithm::EdDSA);
        assert_eq!(h.kid.as_deref(), Some("k1"));
        assert_eq!(h.jku.as_deref(), Some("https://h.example/jwks"));
        let mut changed = doc.clone();
        changed["name"] = json!("b");
        assert_eq!(
            check(&changed, vec![jwk(&k, "k1")]).await,
            Err(JwsError::Invalid)
        );
    }

    #[tokio::test]
    async fn unsigned_wrong_key_unknown_kid_and_hmac_are_refused() {
        let k = key();
        let other = key();
        let mut doc = json!({"name": "a"});
        assert_eq!(
            check(&doc, vec![jwk(&k, "k1")]).await,
            Err(JwsError::Unsigned)
        );
        doc[SIGNATURES] = json!([]);
        assert_eq!(
            check(&doc, vec![jwk(&k, "k1")]).await,
            Err(JwsError::Unsigned)
        );
        doc[SIGNATURES] = json!([sign(&doc, &k, "k1", "https://h/j").unwrap()]);
        assert_eq!(
            check(&doc, vec![jwk(&other, "k1")]).await,
            Err(JwsError::Invalid)
        );
        assert_eq!(
            check(&doc, vec![jwk(&k, "k2")]).await,
            Err(JwsError::NoKey(Some("k1".into())))
        );
        let hs = b64url(br#"{"alg":"HS256"}"#);
        doc[SIGNATURES] = json!([{"protected": hs, "signature": "AA"}]);
        assert_eq!(
            check(&doc, vec![jwk(&k, "k1")]).await,
            Err(JwsError::Algorithm("HS256".into()))
        );
        doc[SIGNATURES] = json!([{"protected": "%%%", "signature": "AA"}]);
        assert!(matches!(
            check(&doc, vec![jwk(&k, "k1")]).await,
            Err(JwsError::Malformed(_))
        ));
    }
}
