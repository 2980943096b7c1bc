//! HMAC-SHA256 as switchboard uses it: request signing for every webhook-style POST (agent
//! webhooks, API callbacks: `X-Switchboard-Signature: v1=<hex HMAC(secret, ts + "." + body)>`),
//! the signatures of `/media` URLs, and constant-time comparison of secrets.

use hmac::{Hmac, Mac};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::config::Secret;

/// Header carrying the unix-seconds timestamp that is signed.
pub const TIMESTAMP_HEADER: &str = "x-switchboard-timestamp";
/// Header carrying `v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>`.
pub const SIGNATURE_HEADER: &str = "x-switchboard-signature";

/// Hex HMAC-SHA256 of `head + "." + tail` under `key`.
#[must_use]
pub fn hmac_hex(key: &[u8], head: &[u8], tail: &[u8]) -> String {
    // HMAC takes keys of any length, so `new_from_slice` cannot fail here.
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(head);
    mac.update(b".");
    mac.update(tail);
    hex::encode(mac.finalize().into_bytes())
}

/// Compares two secrets (tokens, signatures) in time independent of where they differ (the
/// lengths are not secret: unequal lengths answer at once).
#[must_use]
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// `v1=<hex>` for `body` signed at `timestamp` with `secret`.
#[must_use]
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!(
        "v1={}",
        hmac_hex(secret, timestamp.to_string().as_bytes(), body)
    )
}

/// Signed headers for a webhook-style POST of `body`.
#[must_use]
pub fn signed_headers(secret: &Secret, now_ms: i64, body: &[u8]) -> HeaderMap {
    let ts = now_ms / 1000;
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(&ts.to_string()) {
        h.insert(TIMESTAMP_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&sign(secret.expose().as_bytes(), ts, body)) {
        h.insert(SIGNATURE_HEADER, v);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_reference_hmac() {
        // printf '1700000000.{}' | openssl dgst -sha256 -hmac secret
        assert_eq!(
            sign(b"secret", 1_700_000_000, b"{}"),
            "v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
