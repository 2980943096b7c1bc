//! The public keys an issuer may sign assertions with, without I/O: a JWK is used only when it
//! holds public members alone and is a usable Ed25519 or P-256 key, whatever it came from (a DID
//! document's `publicKeyJwk`, a JWKS, the configuration's static keys).

use base64::Engine as _;
use jsonwebtoken::jwk::Jwk;
use serde_json::{Map, Value};

/// The members of a JWK that hold private or symmetric key material (RFC 7518 §6.2.2, §6.3.2,
/// §6.4.1; RFC 8037 §2): a key that carries any of them is never used.
pub const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// Why a JWK is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    /// Not a JSON object.
    #[error("the JWK is not an object")]
    NotAnObject,
    /// It carries private (or symmetric) key material.
    #[error("the JWK carries the private member {0:?}")]
    Private(&'static str),
    /// It is not an Ed25519 (`OKP`) or P-256 (`EC`) key.
    #[error("the JWK is not an Ed25519 or P-256 key")]
    UnsupportedType,
    /// It is marked for another use than signatures (`use` other than `sig`).
    #[error("the JWK is not for signatures")]
    NotForSignatures,
    /// A coordinate is missing, is not base64url, or is not 32 bytes.
    #[error("the JWK's {0} is not a 32-byte base64url value")]
    BadCoordinate(&'static str),
    /// The key could not be read otherwise.
    #[error("the JWK could not be read")]
    Unreadable,
}

/// The key `value` describes, when it is a public Ed25519 or P-256 JWK with every coordinate
/// well formed.
///
/// # Errors
/// The first reason it is not used.
pub fn public_key(value: &Value) -> Result<Jwk, JwkError> {
    let obj = value.as_object().ok_or(JwkError::NotAnObject)?;
    if let Some(member) = PRIVATE_MEMBERS.into_iter().find(|m| obj.contains_key(*m)) {
        return Err(JwkError::Private(member));
    }
    if obj.get("use").is_some_and(|u| u.as_str() != Some("sig")) {
        return Err(JwkError::NotForSignatures);
    }
    let member = |name: &str| obj.get(name).and_then(Value::as_str);
    let coordinates: &[&'static str] = match (member("kty"), member("crv")) {
        (Some("OKP"), Some("Ed25519")) => &["x"],
        (Some("EC"), Some("P-256")) => &["x", "y"],
        _ => return Err(JwkError::UnsupportedType),
    };
    for &name in coordinates {
        coordinate(obj, name)?;
    }
    serde_json::from_value(value.clone()).map_err(|_| JwkError::Unreadable)
}

/// Checks that `obj[name]` is 32 bytes in unpadded base64url.
fn coordinate(obj: &Map<String, Value>, name: &'static str) -> Result<(), JwkError> {
    let text = obj
        .get(name)
        .and_then(Value::as_str)
        .ok_or(JwkError::BadCoordinate(name))?;
    match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text) {
        Ok(bytes) if bytes.len() == 32 => Ok(()),
        _ => Err(JwkError::BadCoordinate(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    #[test]
    fn public_ed25519_and_p256_keys_are_used() {
        assert!(public_key(&json!({"kty": "OKP", "crv": "Ed25519", "x": X})).is_ok());
        assert!(
            public_key(&json!({"kty": "OKP", "crv": "Ed25519", "x": X, "use": "sig", "kid": "a"}))
                .is_ok()
        );
        assert!(public_key(&json!({"kty": "EC", "crv": "P-256", "x": X, "y": X})).is_ok());
    }

    #[test]
    fn private_members_unusable_keys_and_other_types_are_not() {
        for member in PRIVATE_MEMBERS {
            let mut k = json!({"kty": "OKP", "crv": "Ed25519", "x": X});
            k[member] = json!(X);
            assert_eq!(public_key(&k), Err(JwkError::Private(member)), "{member}");
        }
        for (k, why) in [
            (json!("a string"), JwkError::NotAnObject),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": ""}),
                JwkError::BadCoordinate("x"),
            ),
            (
                json!({"kty": "OKP", "crv": "Ed25519"}),
                JwkError::BadCoordinate("x"),
            ),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": format!("{X}=")}),
                JwkError::BadCoordinate("x"),
            ),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": &X[..42]}),
                JwkError::BadCoordinate("x"),
            ),
            (
                json!({"kty": "EC", "crv": "P-256", "x": X}),
                JwkError::BadCoordinate("y"),
            ),
            (
                json!({"kty": "OKP", "crv": "X25519", "x": X}),
                JwkError::UnsupportedType,
            ),
            (
                json!({"kty": "EC", "crv": "P-384", "x": X, "y": X}),
                JwkError::UnsupportedType,
            ),
            (
                json!({"kty": "RSA", "n": X, "e": "AQAB"}),
                JwkError::UnsupportedType,
            ),
            (json!({"kty": "oct", "k": X}), JwkError::Private("k")),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": X, "use": "enc"}),
                JwkError::NotForSignatures,
            ),
        ] {
            assert_eq!(public_key(&k), Err(why), "{k}");
        }
    }
}
