//! A2A caller authentication: bearer JWTs verified with `jsonwebtoken` against configured
//! issuers (static keys or a cached JWKS, refetched on an unknown `kid`), and OAuth 2 opaque
//! tokens checked by RFC 7662 introspection. Success mints `a2a-jwt` / `a2a-oauth` evidence
//! (spec §2); every failure is one opaque "invalid token" to the caller.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::clock::SharedClock;
use crate::config::{A2aAuthConfig, IntrospectionConfig, JwtIssuerConfig};
use crate::message::{
    Address, Assurance, Audience, AuthMethod, BearerTokenProof, EvidenceSource, Extra,
    IdentityEvidence, Proof, Sender, Timestamp, is_handle_name,
};
use crate::net::{DocumentCache, HttpClient, HttpRequest};

/// How long a fetched JWKS is used before it is fetched again.
const JWKS_TTL_MS: i64 = 300_000;
/// An unknown `kid` refetches the JWKS at most this often.
const JWKS_MIN_REFETCH_MS: i64 = 1_000;
/// Most introspection answers kept; past it, expired ones are dropped, then all.
const INTROSPECTION_CACHE_MAX: usize = 10_000;

/// A verified (or anonymous) caller.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The principal tasks are scoped to: `{issuer}#{sub}`, or for an anonymous caller
    /// `anonymous@{client address}` (see [`super::scope`]: that scopes only its idempotency
    /// keys and resends).
    pub owner: String,
    /// The sender record of its messages.
    pub sender: Sender,
    /// The issuer that vouched for it (`None` when anonymous).
    pub issuer: Option<String>,
}

impl Caller {
    /// No credential (from an unknown address, until the call's address is known).
    #[must_use]
    pub fn anonymous() -> Self {
        Self {
            owner: super::scope::anonymous_owner(None),
            sender: Sender {
                address: "@anonymous@a2a.invalid".into(),
                display_name: None,
                profile: None,
                auth_method: AuthMethod::None,
                verified: false,
                key_id: None,
                identities: None,
                automated: true,
                client: None,
                extra: Extra::new(),
            },
            issuer: None,
        }
    }

    /// Whether `policy` admits this caller.
    #[must_use]
    pub fn admitted_by(&self, policy: &A2aAuthConfig) -> bool {
        match policy {
            A2aAuthConfig::Public => true,
            A2aAuthConfig::Jwt { issuers, .. } => {
                self.sender.auth_method == AuthMethod::A2aJwt && self.trusts(issuers)
            }
            A2aAuthConfig::Oauth {
                issuers,
                introspection,
                ..
            } => {
                self.sender.auth_method == AuthMethod::A2aOauth
                    && (self.trusts(issuers)
                        || introspection
                            .as_ref()
                            .is_some_and(|i| self.issuer.as_deref() == Some(i.url.as_str())))
            }
        }
    }

    fn trusts(&self, issuers: &[JwtIssuerConfig]) -> bool {
        issuers
            .iter()
            .any(|i| self.issuer.as_deref() == Some(i.issuer.as_str()))
    }
}

/// Why a credential was refused (logged, never shown in detail).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Active introspection answers: key hash → (used until, unix ms; the caller).
type IntrospectionCache = HashMap<[u8; 32], (i64, Caller)>;

/// Verifies bearer tokens.
#[derive(Debug, Clone)]
pub struct Verifier {
    http: HttpClient,
    clock: SharedClock,
    /// Our own host: the `verified_by` of minted evidence.
    domain: String,
    /// Fetched JWKS documents.
    jwks: DocumentCache,
    /// Active introspection answers by SHA-256 of (endpoint, token), with when they stop
    /// being used (unix ms). Inactive answers are never kept.
    introspected: Arc<std::sync::Mutex<IntrospectionCache>>,
}

fn unverified_claims(token: &str) -> Option<Map<String, Value>> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn ts(secs: Option<i64>) -> Option<Timestamp> {
    secs.map(|s| Timestamp::from_unix_millis(s.saturating_mul(1000)))
}

/// A sender address for a token subject: the subject itself when it is an address on the
/// issuer's own host (an issuer vouches only for its own names), else `@{subject}@{issuer host}`
/// when the subject is a valid name, else a hash of it.
fn sender_address(sub: &str, issuer: &str) -> String {
    let host = url::Url::parse(issuer)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "a2a.invalid".into());
    if Address::parse(sub).is_some_and(|a| a.domain.eq_ignore_ascii_case(&host)) {
        return sub.to_owned();
    }
    let local = if is_handle_name(sub) {
        sub.to_owned()
    } else {
        format!("sub-{}", &hex::encode(Sha256::digest(sub.as_bytes()))[..16])
    };
    format!("@{local}@{host}")
}

impl Verifier {
    /// A verifier fetching JWKS and introspecting through `http`.
    #[must_use]
    pub fn new(http: HttpClient, clock: SharedClock, domain: &str) -> Self {
        Self {
            jwks: DocumentCache::new(http.clone(), JWKS_TTL_MS, JWKS_MIN_REFETCH_MS),
            http,
            clock,
            domain: domain.to_owned(),
            introspected: Arc::default(),
        }
    }

    /// Verifies `token` against the issuers of `policies` (the agents the endpoint serves).
    ///
    /// # Errors
    /// [`Refused`] with the reason, for the log.
    pub async fn verify(
        &self,
        token: &str,
        policies: &[&A2aAuthConfig],
    ) -> Result<Caller, Refused> {
        let looks_like_jwt = token.split('.').count() == 3;
        if looks_like_jwt {
            let claims = unverified_claims(token).ok_or_else(|| Refused("malformed JWT".into()))?;
            let iss = claims
                .get("iss")
                .and_then(Value::as_str)
                .ok_or_else(|| Refused("JWT without iss".into()))?;
            let mut refused = None;
            for policy in policies {
                let (issuers, leeway, method) = match policy {
                    A2aAuthConfig::Jwt {
                        issuers,
                        leeway_seconds,
                    } => (issuers, *leeway_seconds, AuthMethod::A2aJwt),
                    A2aAuthConfig::Oauth {
                        issuers,
                        leeway_seconds,
                        ..
                    } => (issuers, *leeway_seconds, AuthMethod::A2aOauth),
                    A2aAuthConfig::Public => continue,
                };
                // Several agents may trust one issuer with different audiences or keys: the
                // token is good if any of them accepts it (the addressed agent's own policy is
                // checked again before a message reaches it).
                if let Some(cfg) = issuers.iter().find(|i| i.issuer == iss) {
                    match self.verify_jwt(token, cfg, leeway, method).await {
                        Ok(caller) => return Ok(caller),
                        Err(e) => refused = Some(e),
                    }
                }
            }
            return Err(refused.unwrap_or_else(|| Refused(format!("untrusted issuer {iss:?}"))));
        }
        for policy in policies {
            if let A2aAuthConfig::Oauth {
                introspection: Some(intro),
                ..
            } = policy
            {
                return self.introspect(token, intro).await;
            }
        }
        Err(Refused("not a JWT and no introspection configured".into()))
    }

    async fn jwks(&self, url: &str, refresh: bool) -> Result<JwkSet, Refused> {
        let body = self
            .jwks
            .get(url, refresh)
            .await
            .map_err(|e| Refused(format!("JWKS {url}: {e}")))?;
        serde_json::from_slice(&body).map_err(|e| Refused(format!("JWKS {url}: {e}")))
    }

    async fn key_for(
        &self,
        cfg: &JwtIssuerConfig,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<DecodingKey, Refused> {
        for k in &cfg.keys {
            if kid.is_some() && k.kid.is_some() && k.kid.as_deref() != kid {
                continue;
            }
            let pem = k.pem.as_bytes();
            let key = match alg {
                Algorithm::ES256 | Algorithm::ES384 => DecodingKey::from_ec_pem(pem),
                Algorithm::EdDSA => DecodingKey::from_ed_pem(pem),
                _ => DecodingKey::from_rsa_pem(pem),
            };
            if let Ok(key) = key {
                return Ok(key);
            }
        }
        let Some(url) = &cfg.jwks_url else {
            return Err(Refused("no key for this token".into()));
        };
        for refresh in [false, true] {
            let set = self.jwks(url, refresh).await?;
            let found = match kid {
                Some(kid) => set.find(kid),
                None => set.keys.first(),
            };
            if let Some(jwk) = found {
                return DecodingKey::from_jwk(jwk).map_err(|e| Refused(format!("JWK: {e}")));
            }
        }
        Err(Refused(format!("no key with kid {kid:?}")))
    }

    async fn verify_jwt(
        &self,
        token: &str,
        cfg: &JwtIssuerConfig,
        leeway: u64,
        method: AuthMethod,
    ) -> Result<Caller, Refused> {
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| Refused(format!("JWT header: {e}")))?;
        let allowed: Vec<Algorithm> = cfg
            .algorithms
            .iter()
            .filter_map(|a| Algorithm::from_str(a).ok())
            .filter(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
            .collect();
        if !allowed.contains(&header.alg) {
            return Err(Refused(format!(
                "algorithm {:?} is not allowed",
                header.alg
            )));
        }
        let key = self.key_for(cfg, header.alg, header.kid.as_deref()).await?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&cfg.issuer]);
        v.set_audience(&cfg.audiences);
        v.leeway = leeway;
        v.validate_nbf = true;
        v.validate_exp = true;
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v)
            .map_err(|e| Refused(format!("JWT: {e}")))?;
        let claims = data.claims;
        let sub = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let default_assurance = if method == AuthMethod::A2aOauth {
            "oauth"
        } else {
            "agent"
        };
        let assurance = cfg.assurance.as_deref().unwrap_or(default_assurance);
        let audience = match claims.get("aud") {
            Some(Value::Array(a)) => Audience::Many(
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect(),
            ),
            Some(Value::String(s)) => Audience::One(s.clone()),
            _ => Audience::Many(Vec::new()),
        };
        Ok(self.caller(
            &sub,
            &cfg.issuer,
            method,
            assurance,
            audience,
            header.kid,
            &claims,
            token,
        ))
    }

    /// Checks an opaque token at the introspection endpoint; an active answer is reused for
    /// `cache_seconds` (never past the token's `exp`), so a busy client costs one call a
    /// minute, not one per request.
    async fn introspect(&self, token: &str, cfg: &IntrospectionConfig) -> Result<Caller, Refused> {
        let key: [u8; 32] = Sha256::new()
            .chain_update(cfg.url.as_bytes())
            .chain_update([0])
            .chain_update(token.as_bytes())
            .finalize()
            .into();
        let now = self.clock.now_ms();
        {
            let cache = self
                .introspected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some((until, caller)) = cache.get(&key)
                && *until > now
            {
                return Ok(caller.clone());
            }
        }
        let (caller, exp) = self.introspect_now(token, cfg).await?;
        let ttl = i64::try_from(cfg.cache_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let until = exp.map_or(now.saturating_add(ttl), |exp| {
            now.saturating_add(ttl).min(exp.saturating_mul(1000))
        });
        if ttl > 0 && until > now {
            let mut cache = self
                .introspected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if cache.len() >= INTROSPECTION_CACHE_MAX {
                cache.retain(|_, (u, _)| *u > now);
                if cache.len() >= INTROSPECTION_CACHE_MAX {
                    cache.clear();
                }
            }
            cache.insert(key, (until, caller.clone()));
        }
        Ok(caller)
    }

    /// One introspection call: the caller and the token's `exp` (unix seconds), if given.
    async fn introspect_now(
        &self,
        token: &str,
        cfg: &IntrospectionConfig,
    ) -> Result<(Caller, Option<i64>), Refused> {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            cfg.client_id,
            cfg.client_secret.expose()
        ));
        let mut headers = reqwest::header::HeaderMap::new();
        let auth = reqwest::header::HeaderValue::from_str(&format!("Basic {basic}"))
            .map_err(|_| Refused("introspection credentials are not a header value".into()))?;
        headers.insert(reqwest::header::AUTHORIZATION, auth);
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::POST,
                url: &cfg.url,
                headers,
                body: Some(bytes::Bytes::from(body)),
                timeout: None,
            })
            .await
            .map_err(|e| Refused(format!("introspection: {e}")))?;
        if !resp.status.is_success() {
            return Err(Refused(format!("introspection: HTTP {}", resp.status)));
        }
        let claims: Map<String, Value> = serde_json::from_slice(&resp.body)
            .map_err(|e| Refused(format!("introspection answer: {e}")))?;
        if claims.get("active").and_then(Value::as_bool) != Some(true) {
            return Err(Refused("token is not active".into()));
        }
        let now_s = self.clock.now_s();
        if claims
            .get("exp")
            .and_then(Value::as_i64)
            .is_some_and(|exp| exp < now_s)
        {
            return Err(Refused("token expired".into()));
        }
        let audience = match claims.get("aud") {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            Some(Value::String(s)) => vec![s.clone()],
            _ => Vec::new(),
        };
        if let Some(want) = &cfg.audience
            && !audience.contains(want)
        {
            return Err(Refused("token is for another audience".into()));
        }
        let sub = claims
            .get("sub")
            .or_else(|| claims.get("client_id"))
            .and_then(Value::as_str)
            .ok_or_else(|| Refused("introspection names no subject".into()))?
            .to_owned();
        let exp = claims.get("exp").and_then(Value::as_i64);
        let caller = self.caller(
            &sub,
            &cfg.url,
            AuthMethod::A2aOauth,
            "oauth",
            Audience::Many(audience),
            None,
            &claims,
            token,
        );
        Ok((caller, exp))
    }

    #[allow(clippy::too_many_arguments)]
    fn caller(
        &self,
        sub: &str,
        issuer: &str,
        method: AuthMethod,
        assurance: &str,
        audience: Audience,
        kid: Option<String>,
        claims: &Map<String, Value>,
        token: &str,
    ) -> Caller {
        let mut kept = Map::new();
        for k in ["scope", "client_id", "azp", "act"] {
            if let Some(v) = claims.get(k) {
                kept.insert(k.into(), v.clone());
            }
        }
        let evidence = IdentityEvidence {
            id: claims.get("jti").and_then(Value::as_str).map(str::to_owned),
            subject: sub.to_owned(),
            issuer: issuer.to_owned(),
            method: method.clone(),
            assurance: serde_json::from_value(json!(assurance)).unwrap_or(Assurance::Agent),
            audience,
            issued_at: ts(claims.get("iat").and_then(Value::as_i64))
                .unwrap_or_else(|| self.clock.now()),
            not_before: ts(claims.get("nbf").and_then(Value::as_i64)),
            expires_at: ts(claims.get("exp").and_then(Value::as_i64)),
            on_behalf_of: None,
            claims: (!kept.is_empty()).then_some(kept),
            source: Some(EvidenceSource {
                transport: Some(super::NAME.into()),
                ..EvidenceSource::default()
            }),
            proof: Proof::BearerToken(BearerTokenProof {
                verified_by: self.domain.clone(),
                token_hash: Some(hex::encode(Sha256::digest(token.as_bytes()))),
            }),
            extra: Extra::new(),
        };
        Caller {
            owner: format!("{issuer}#{sub}"),
            sender: Sender {
                address: sender_address(sub, issuer),
                display_name: None,
                profile: None,
                auth_method: method,
                verified: true,
                key_id: kid,
                identities: Some(vec![evidence]),
                automated: true,
                client: None,
                extra: Extra::new(),
            },
            issuer: Some(issuer.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_addresses() {
        assert_eq!(
            sender_address("agent-7", "https://idp.example/"),
            "@agent-7@idp.example"
        );
        assert_eq!(
            sender_address("@bot@idp.example", "https://idp.example"),
            "@bot@idp.example"
        );
        // An issuer cannot vouch for an address on someone else's domain.
        let foreign = sender_address("ceo@bank.example", "https://idp.example");
        assert!(foreign.starts_with("@sub-"), "{foreign}");
        assert!(foreign.ends_with("@idp.example"), "{foreign}");
        assert!(sender_address("a b/c", "https://idp.example").starts_with("@sub-"));
    }
}
