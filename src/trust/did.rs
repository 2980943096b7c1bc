//! `did:web` without I/O: where a DID's document lives, and which key of a fetched document
//! an assertion's `kid` names under `assertionMethod`.

use jsonwebtoken::jwk::Jwk;
use serde_json::Value;

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

/// Why a DID document could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The document is not `did`'s.
    #[error("the document's id is not the issuer's DID")]
    WrongId,
    /// The key is listed but has no usable `publicKeyJwk`.
    #[error("the key has no usable publicKeyJwk")]
    NoJwk,
}

/// The public JWK of `kid` (absolute) when `doc` lists it under `assertionMethod`; `None` when
/// it does not.
///
/// # Errors
/// The document is another DID's, or the key listed has no JWK.
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
    let jwk = method
        .and_then(|m| m.get("publicKeyJwk"))
        .and_then(|j| serde_json::from_value::<Jwk>(j.clone()).ok())
        .ok_or(DocumentError::NoJwk)?;
    Ok(Some(jwk))
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
                {"id": "#signing", "type": "JsonWebKey2020", "controller": "did:web:c.example", "publicKeyJwk": jwk},
                {"id": "did:web:c.example#auth", "type": "JsonWebKey2020", "controller": "did:web:c.example", "publicKeyJwk": jwk},
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
}
