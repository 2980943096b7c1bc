//! `did:web` without I/O: where a DID's document lives, whether a `kid` is a fragment of the
//! DID, and which key of a fetched document an assertion's `kid` names under `assertionMethod`,
//! if the identity profile allows that verification method.

use jsonwebtoken::jwk::Jwk;
use serde_json::Value;

use super::jwk::{self, JwkError};

/// The URL of `did`'s DID document (did:web method, §3.2): `did:web:host` is
/// `https://host/.well-known/did.json`, `did:web:host:a:b` is `https://host/a/b/did.json`, a
/// port is written `%3A`. Plain `http` only for a loopback host and only when
/// `allow_http_loopback` (the development switch `net.allow_private_addresses`).
#[must_use]
pub fn document_url(did: &str, allow_http_loopback: bool) -> Option<String> {
    let rest = did.strip_prefix("did:web:")?;
    let mut segs = rest.split(':');
    let host = segs.next()?.replace("%3A", ":").replace("%3a", ":");
    let path: Vec<&str> = segs.collect();
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    let path_ok = path.iter().all(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'%'))
    });
    if !host_ok || !path_ok {
        return None;
    }
    let name = host.rsplit_once(':').map_or(host.as_str(), |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host.as_str()
        }
    });
    let loopback = name == "localhost" || name.starts_with("127.") || name == "[::1]";
    let scheme = if allow_http_loopback && loopback {
        "http"
    } else {
        "https"
    };
    let url = if path.is_empty() {
        format!("{scheme}://{host}/.well-known/did.json")
    } else {
        format!("{scheme}://{host}/{}/did.json", path.join("/"))
    };
    url::Url::parse(&url).ok().map(|_| url)
}

/// The absolute DID URL of a key id: `#frag` is relative to `did`.
#[must_use]
pub fn absolute_kid(did: &str, kid: &str) -> String {
    if kid.starts_with('#') {
        format!("{did}{kid}")
    } else {
        kid.to_owned()
    }
}

/// Whether `s` is a non-empty URI fragment (RFC 3986 §3.5): `pchar`, `/` and `?` only, each `%`
/// followed by two hex digits.
#[must_use]
pub fn is_fragment(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
                continue;
            }
            c if c.is_ascii_alphanumeric() => {}
            // unreserved, sub-delims, ":" and "@" (pchar), "/" and "?".
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            | b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?' => {}
            _ => return false,
        }
        i += 1;
    }
    !b.is_empty()
}

/// The one verification method type the identity profile accepts.
pub const METHOD_TYPE: &str = "JsonWebKey";

/// Why a DID document could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The document is not `did`'s.
    #[error("the document's id is not the issuer's DID")]
    WrongId,
    /// The method the `kid` names is listed, but the identity profile does not allow it.
    #[error(transparent)]
    Method(#[from] MethodError),
}

/// Why the verification method an assertion's `kid` names is not used, although the document
/// lists it under `assertionMethod`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    /// `assertionMethod` refers to a method the document does not describe.
    #[error("the method is not described in verificationMethod")]
    Undescribed,
    /// Its `controller` is not the issuer's DID.
    #[error("the method's controller is not the issuer's DID")]
    Controller,
    /// Its `type` is not [`METHOD_TYPE`].
    #[error("the method's type is not JsonWebKey")]
    Type,
    /// It carries key material besides `publicKeyJwk` (this member).
    #[error("the method carries {0:?} besides publicKeyJwk")]
    OtherKeyMaterial(String),
    /// It has no `publicKeyJwk`.
    #[error("the method has no publicKeyJwk")]
    NoJwk,
    /// Its `publicKeyJwk` is not a usable public key.
    #[error(transparent)]
    Jwk(#[from] JwkError),
}

/// Whether a verification method's member holds key material (other than `publicKeyJwk`): the
/// `publicKey…` and `privateKey…` forms of the DID specification registries, and the account
/// forms that stand for a key.
fn is_key_material(member: &str) -> bool {
    member != "publicKeyJwk"
        && (member.starts_with("publicKey")
            || member.starts_with("privateKey")
            || matches!(member, "blockchainAccountId" | "ethereumAddress"))
}

/// The public JWK of `kid` (absolute) when `doc` lists it under `assertionMethod` (`Ok(None)`
/// when it does not), checked against the identity profile's rules for a verification method:
/// `controller` is `did`, `type` is [`METHOD_TYPE`], its only key material is a `publicKeyJwk`,
/// and that is a public Ed25519 or P-256 key ([`super::jwk::public_key`]).
///
/// # Errors
/// [`DocumentError::WrongId`] when the document is another DID's, [`DocumentError::Method`] when
/// the method listed is not one the profile allows.
pub fn assertion_key(doc: &Value, did: &str, kid: &str) -> Result<Option<Jwk>, DocumentError> {
    if doc.get("id").and_then(Value::as_str) != Some(did) {
        return Err(DocumentError::WrongId);
    }
    let id_of = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(absolute_kid(did, s)),
            Value::Object(o) => o
                .get("id")
                .and_then(Value::as_str)
                .map(|s| absolute_kid(did, s)),
            _ => None,
        }
    };
    let listed = doc
        .get("assertionMethod")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|v| id_of(v).as_deref() == Some(kid)));
    let Some(entry) = listed else {
        return Ok(None);
    };
    let method = if entry.is_object() {
        Some(entry)
    } else {
        doc.get("verificationMethod")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|v| id_of(v).as_deref() == Some(kid)))
    };
    let method = method.ok_or(MethodError::Undescribed)?;
    Ok(Some(allowed_method(method, did)?))
}

/// The JWK of verification method `m` when the identity profile allows it for `did`.
fn allowed_method(m: &Value, did: &str) -> Result<Jwk, MethodError> {
    let obj = m.as_object().ok_or(MethodError::Undescribed)?;
    if obj.get("controller").and_then(Value::as_str) != Some(did) {
        return Err(MethodError::Controller);
    }
    if obj.get("type").and_then(Value::as_str) != Some(METHOD_TYPE) {
        return Err(MethodError::Type);
    }
    if let Some(other) = obj.keys().find(|k| is_key_material(k)) {
        return Err(MethodError::OtherKeyMaterial(other.clone()));
    }
    let jwk = obj.get("publicKeyJwk").ok_or(MethodError::NoJwk)?;
    Ok(jwk::public_key(jwk)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn did_web_maps_to_https_and_http_only_on_loopback_in_development() {
        assert_eq!(
            document_url("did:web:connector.example", false).as_deref(),
            Some("https://connector.example/.well-known/did.json")
        );
        assert_eq!(
            document_url("did:web:connector.example:teams:a", true).as_deref(),
            Some("https://connector.example/teams/a/did.json")
        );
        assert_eq!(
            document_url("did:web:127.0.0.1%3A8443", false).as_deref(),
            Some("https://127.0.0.1:8443/.well-known/did.json")
        );
        assert_eq!(
            document_url("did:web:127.0.0.1%3A8443", true).as_deref(),
            Some("http://127.0.0.1:8443/.well-known/did.json")
        );
        assert_eq!(document_url("did:web:evil.example/x", false), None);
        assert_eq!(document_url("did:web:a.example::b", false), None);
        assert_eq!(document_url("did:key:z6Mk", false), None);
    }

    #[test]
    fn only_keys_under_assertion_method_are_returned() {
        let jwk = json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let doc = json!({
            "id": "did:web:c.example",
            "verificationMethod": [
                {"id": "#signing", "type": "JsonWebKey", "controller": "did:web:c.example", "publicKeyJwk": jwk},
                {"id": "did:web:c.example#auth", "type": "JsonWebKey", "controller": "did:web:c.example", "publicKeyJwk": jwk},
            ],
            "assertionMethod": ["did:web:c.example#signing"],
            "authentication": ["#auth"],
        });
        assert!(
            assertion_key(&doc, "did:web:c.example", "did:web:c.example#signing")
                .unwrap()
                .is_some()
        );
        assert_eq!(
            assertion_key(&doc, "did:web:c.example", "did:web:c.example#auth").unwrap(),
            None
        );
        assert_eq!(
            assertion_key(
                &doc,
                "did:web:other.example",
                "did:web:other.example#signing"
            ),
            Err(DocumentError::WrongId)
        );
    }

    #[test]
    fn a_fragment_is_rfc_3986_fragment_syntax() {
        for ok in [
            "assert-1",
            "k%20y",
            "a/b?c",
            "key:1@x",
            "!$&'()*+,;=-._~",
            "%Af",
        ] {
            assert!(is_fragment(ok), "{ok:?}");
        }
        for bad in [
            "", "%zz", "%", "%a", "a%g0", "a#b", "a b", "k[1]", "é", "a\u{0}b", "<k>",
        ] {
            assert!(!is_fragment(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_listed_method_the_profile_does_not_allow_is_refused() {
        let did = "did:web:c.example";
        let kid = "did:web:c.example#k";
        let jwk = json!({"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"});
        let doc = |method: Value| json!({"id": did, "verificationMethod": [method], "assertionMethod": ["#k"]});
        let good =
            json!({"id": "#k", "type": "JsonWebKey", "controller": did, "publicKeyJwk": jwk});
        assert!(
            assertion_key(&doc(good.clone()), did, kid)
                .unwrap()
                .is_some()
        );
        let with = |member: &str, value: Value| {
            let mut m = good.clone();
            m[member] = value;
            m
        };
        let without = |member: &str| {
            let mut m = good.clone();
            m.as_object_mut().unwrap().remove(member);
            m
        };
        let mut private = jwk.clone();
        private["d"] = jwk["x"].clone();
        for (method, why) in [
            (
                with("controller", json!("did:web:other.example")),
                MethodError::Controller,
            ),
            (without("controller"), MethodError::Controller),
            (with("type", json!("JsonWebKey2020")), MethodError::Type),
            (without("type"), MethodError::Type),
            (
                with("publicKeyMultibase", json!("z6Mk")),
                MethodError::OtherKeyMaterial("publicKeyMultibase".into()),
            ),
            (
                with("publicKeyBase58", json!("abc")),
                MethodError::OtherKeyMaterial("publicKeyBase58".into()),
            ),
            (
                with("publicKeyPem", json!("-----BEGIN")),
                MethodError::OtherKeyMaterial("publicKeyPem".into()),
            ),
            (without("publicKeyJwk"), MethodError::NoJwk),
            (
                with("publicKeyJwk", private),
                MethodError::Jwk(JwkError::Private("d")),
            ),
        ] {
            assert_eq!(
                assertion_key(&doc(method.clone()), did, kid),
                Err(DocumentError::Method(why)),
                "{method}"
            );
        }
        // Listed by reference but described nowhere.
        let bare = json!({"id": did, "assertionMethod": ["#k"]});
        assert_eq!(
            assertion_key(&bare, did, kid),
            Err(DocumentError::Method(MethodError::Undescribed))
        );
    }
}
