//! `[trust]`: trusted connector issuers (`[[trust.issuers]]`) whose signed subject assertions,
//! forwarded by a connector that verified its user, become `signed-attestation` evidence.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Trusted connector issuers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustConfig {
    /// The issuers whose assertions are verified; an assertion from any other issuer is
    /// dropped without a request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub issuers: Vec<TrustedIssuerConfig>,
}

/// One trusted connector issuer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedIssuerConfig {
    /// The exact `iss`: a `did:web:` DID (keys from its DID document's `assertionMethod`) or an
    /// HTTPS origin (keys from `jwks_url` and/or `keys`).
    pub issuer: String,
    /// JWKS URL of an HTTPS-origin issuer; cached and refetched when an assertion names an
    /// unknown `kid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_url: Option<String>,
    /// Static public JWKs of an HTTPS-origin issuer (`kty`, `crv`, `x`, `y`, `kid`), each with
    /// the `kid` assertions name it by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<BTreeMap<String, String>>,
    /// The `mentionable_method` values this issuer may assert.
    pub methods: Vec<String>,
    /// The assurance levels this issuer may assert; the first is used when an assertion names
    /// none.
    pub assurance: Vec<String>,
    /// Subjects this issuer may vouch for start with one of these; any subject when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_prefixes: Vec<String>,
}

impl TrustConfig {
    /// Each issuer names itself as a `did:web:` DID or an HTTPS origin, has keys to check
    /// with, and allows at least one method and one assurance level.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        for (i, iss) in self.issuers.iter().enumerate() {
            let at = format!("trust.issuers[{i}]");
            if self.issuers[..i].iter().any(|o| o.issuer == iss.issuer) {
                problems.push(format!("{at}.issuer {:?}: listed twice", iss.issuer));
            }
            if iss.issuer.starts_with("did:web:") {
                if iss.issuer.len() == "did:web:".len() || iss.issuer.contains('#') {
                    problems.push(format!("{at}.issuer {:?}: not a did:web DID", iss.issuer));
                }
                if iss.jwks_url.is_some() || !iss.keys.is_empty() {
                    problems.push(format!(
                        "{at}: a did:web issuer's keys come from its DID document; \
                         drop jwks_url and keys"
                    ));
                }
            } else {
                match url::Url::parse(&iss.issuer) {
                    Ok(u)
                        if u.scheme() == "https"
                            && u.host_str().is_some()
                            && u.path() == "/"
                            && u.query().is_none()
                            && !iss.issuer.ends_with('/') => {}
                    _ => problems.push(format!(
                        "{at}.issuer {:?}: a did:web: DID or an HTTPS origin \
                         (https://host, no path)",
                        iss.issuer
                    )),
                }
                if iss.jwks_url.is_none() && iss.keys.is_empty() {
                    problems.push(format!("{at}: needs jwks_url or keys"));
                }
            }
            for (j, k) in iss.keys.iter().enumerate() {
                if k.get("kid").is_none_or(String::is_empty) {
                    problems.push(format!("{at}.keys[{j}]: needs a kid"));
                }
                if !matches!(k.get("kty").map(String::as_str), Some("OKP" | "EC")) {
                    problems.push(format!(
                        "{at}.keys[{j}]: kty must be OKP (Ed25519) or EC (P-256)"
                    ));
                }
            }
            if iss.methods.is_empty() || iss.methods.iter().any(String::is_empty) {
                problems.push(format!("{at}.methods: at least one, none empty"));
            }
            if iss.assurance.is_empty() || iss.assurance.iter().any(String::is_empty) {
                problems.push(format!("{at}.assurance: at least one, none empty"));
            }
            if iss.subject_prefixes.iter().any(String::is_empty) {
                problems.push(format!(
                    "{at}.subject_prefixes: an empty prefix (leave the list empty for any subject)"
                ));
            }
        }
    }
}
