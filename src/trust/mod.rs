//! Trusted connector issuers: a connector on another platform that verified its user forwards
//! that identity as a compact JWS subject assertion, and this module turns an assertion from
//! an issuer of `[[trust.issuers]]` into `signed-attestation` evidence (spec §2), or drops it
//! with a reason. Independent of any transport: a transport extracts the assertions from its
//! wire (A2A message metadata under [`IDENTITY_EXTENSION`]) and appends what
//! [`TrustVerifier::verify_all`] returns to `sender.identities`.
//!
//! The order of the checks is fixed, and nothing is fetched for an issuer that is not trusted:
//! the JWS's form, `typ`, `alg`, the issuer, the `kid`'s shape (for a DID, a fragment of it in
//! RFC 3986 syntax), the keys (the DID document of a `did:web` issuer, a JWKS or static keys;
//! `kid` must be listed, under `assertionMethod` for a DID, by a verification method the
//! identity profile allows: controlled by the issuer, of type `JsonWebKey`, with a public
//! Ed25519 or P-256 JWK as its only key material), the signature, the claims present, `aud`, the
//! lifetime and time window, method, subject and assurance against the issuer's allowances (a
//! continuation's are those of the subject assertion that opened its task), a continuation's
//! task, and last the single use of `(iss, jti)` in the database.

pub mod did;
pub mod jwk;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::clock::SharedClock;
use crate::config::{TrustConfig, TrustedIssuerConfig};
use crate::message::{
    Assurance, Audience, AuthMethod, EvidenceSource, Extra, IdentityEvidence, Proof,
    SignedAttestationProof, Timestamp,
};
use crate::metrics::Metrics;
use crate::net::{DocumentCache, HttpClient};
use crate::store::{Db, attestations};

/// The identity extension's URI: advertised on agent cards and the key of forwarded
/// assertions in message metadata.
pub const IDENTITY_EXTENSION: &str = "https://mentionable.dev/ns/identity/v0.1";
/// The extension's legacy URI, accepted on input only.
pub const LEGACY_IDENTITY_EXTENSION: &str = "https://mentionable.dev/spec/identity/v0.1";
/// `typ` of a subject assertion.
pub const SUBJECT_TYP: &str = "mentionable-subject-assertion+jwt";
/// `typ` of an assertion for a later turn of a task (carries `mentionable_task_id`).
pub const CONTINUATION_TYP: &str = "mentionable-task-continuation-assertion+jwt";
/// Longest lifetime (`exp - iat`) accepted, in seconds.
pub const MAX_LIFETIME_S: i64 = 600;
/// Clock skew allowed on `iat`, `nbf` and `exp`, in seconds.
pub const SKEW_S: i64 = 60;
/// Most assertions read from one message; the rest are dropped.
pub const MAX_ASSERTIONS: usize = 8;
/// Longest `jti` kept.
const MAX_JTI_LEN: usize = 255;
/// How long a fetched DID document or JWKS is used.
const DOCUMENT_TTL_MS: i64 = 300_000;
/// An unknown `kid` refetches an issuer's keys at most this often.
const DOCUMENT_MIN_REFETCH_MS: i64 = 1_000;
/// Expired `(iss, jti)` rows are deleted at most this often per instance.
const PURGE_INTERVAL_MS: i64 = 60_000;

/// Why an assertion was dropped (the metric and log label is [`Reject::label`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// Not a compact JWS with a JSON header and payload, or a claim of the wrong form.
    #[error("malformed")]
    Malformed,
    /// `typ` is neither assertion type (or a continuation where none can be).
    #[error("wrong-typ")]
    WrongTyp,
    /// `alg` is not `EdDSA` or `ES256`.
    #[error("wrong-alg")]
    WrongAlg,
    /// `iss` is not a configured issuer.
    #[error("untrusted-issuer")]
    UntrustedIssuer,
    /// `kid` is missing, not the issuer's, not among its assertion keys, or names a key the
    /// identity profile does not allow (a verification method of another controller or type,
    /// with other key material, or a JWK that is private or unusable).
    #[error("kid-not-authorized")]
    KidNotAuthorized,
    /// The issuer's keys could not be fetched or read.
    #[error("key-fetch-failed")]
    KeyFetchFailed,
    /// The signature does not verify.
    #[error("invalid-signature")]
    InvalidSignature,
    /// A required claim is absent.
    #[error("missing-claim")]
    MissingClaim,
    /// `aud` is not the endpoint the assertion was sent to.
    #[error("wrong-audience")]
    WrongAudience,
    /// `exp` is not after `iat`.
    #[error("invalid-lifetime")]
    InvalidLifetime,
    /// `exp - iat` is over [`MAX_LIFETIME_S`].
    #[error("ttl-exceeded")]
    TtlExceeded,
    /// `iat` or `nbf` is in the future beyond the skew.
    #[error("not-yet-valid")]
    NotYetValid,
    /// `exp` has passed beyond the skew.
    #[error("expired")]
    Expired,
    /// The issuer may not assert this `mentionable_method`.
    #[error("invalid-method")]
    InvalidMethod,
    /// The issuer may not vouch for this subject (`subject_prefixes`).
    #[error("invalid-subject")]
    InvalidSubject,
    /// The issuer may not assert this `mentionable_assurance`.
    #[error("invalid-assurance")]
    InvalidAssurance,
    /// A continuation names another task.
    #[error("wrong-task")]
    WrongTask,
    /// `(iss, jti)` was used before.
    #[error("replayed")]
    Replayed,
    /// The single-use check could not be made (database unavailable).
    #[error("replay-store-unavailable")]
    ReplayStoreUnavailable,
}

impl Reject {
    /// The metric and log label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::WrongTyp => "wrong-typ",
            Self::WrongAlg => "wrong-alg",
            Self::UntrustedIssuer => "untrusted-issuer",
            Self::KidNotAuthorized => "kid-not-authorized",
            Self::KeyFetchFailed => "key-fetch-failed",
            Self::InvalidSignature => "invalid-signature",
            Self::MissingClaim => "missing-claim",
            Self::WrongAudience => "wrong-audience",
            Self::InvalidLifetime => "invalid-lifetime",
            Self::TtlExceeded => "ttl-exceeded",
            Self::NotYetValid => "not-yet-valid",
            Self::Expired => "expired",
            Self::InvalidMethod => "invalid-method",
            Self::InvalidSubject => "invalid-subject",
            Self::InvalidAssurance => "invalid-assurance",
            Self::WrongTask => "wrong-task",
            Self::Replayed => "replayed",
            Self::ReplayStoreUnavailable => "replay-store-unavailable",
        }
    }
}

/// What the receiving side expects of an assertion.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The endpoints the message was sent to: `aud` must be one of them.
    pub audiences: &'a [String],
    /// The task a later turn continues; `None` for a first turn (no continuation accepted).
    pub task_id: Option<&'a str>,
    /// The evidence of the turn that opened that task: a continuation assertion vouches for the
    /// subject of a `signed-attestation` in it, from the same issuer (empty on a first turn).
    pub opening: &'a [IdentityEvidence],
    /// The transport the assertion came over (the evidence's `source.transport`).
    pub transport: &'a str,
}

/// An issuer with its static keys read.
#[derive(Debug)]
struct Issuer {
    cfg: TrustedIssuerConfig,
    statics: JwkSet,
}

/// Verifies forwarded subject assertions; cheap to clone.
#[derive(Debug, Clone)]
pub struct TrustVerifier {
    issuers: Arc<Vec<Issuer>>,
    docs: DocumentCache,
    clock: SharedClock,
    db: Db,
    metrics: Arc<Metrics>,
    allow_http_loopback: bool,
    last_purge_ms: Arc<AtomicI64>,
}

/// The issuer's signing-key algorithm for a JWS `alg`.
fn accepted_alg(alg: &str) -> Option<Algorithm> {
    match alg {
        "EdDSA" => Some(Algorithm::EdDSA),
        "ES256" => Some(Algorithm::ES256),
        _ => None,
    }
}

fn b64_json(part: &str) -> Result<Map<String, Value>, Reject> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| Reject::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| Reject::Malformed)
}

fn str_claim<'a>(claims: &'a Map<String, Value>, name: &str) -> Result<&'a str, Reject> {
    match claims.get(name) {
        None | Some(Value::Null) => Err(Reject::MissingClaim),
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(Reject::MissingClaim),
        Some(_) => Err(Reject::Malformed),
    }
}

fn int_claim(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, Reject> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or(Reject::Malformed),
    }
}

impl TrustVerifier {
    /// A verifier for the issuers of `cfg`, fetching keys through `http`;
    /// `allow_http_loopback` (the development switch `net.allow_private_addresses`) lets a
    /// `did:web` DID on a loopback host resolve over plain `http`.
    #[must_use]
    pub fn new(
        cfg: &TrustConfig,
        allow_http_loopback: bool,
        http: HttpClient,
        clock: SharedClock,
        db: Db,
        metrics: Arc<Metrics>,
    ) -> Self {
        let issuers = cfg
            .issuers
            .iter()
            .map(|c| {
                let keys: Vec<Jwk> = c
                    .keys
                    .iter()
                    .filter_map(|k| {
                        let v = serde_json::to_value(k).ok()?;
                        match jwk::public_key(&v) {
                            Ok(jwk) => Some(jwk),
                            Err(e) => {
                                tracing::warn!(issuer = %c.issuer, error = %e, "trust.issuers: an unusable static key is ignored");
                                None
                            }
                        }
                    })
                    .collect();
                Issuer {
                    cfg: c.clone(),
                    statics: JwkSet { keys },
                }
            })
            .collect();
        Self {
            issuers: Arc::new(issuers),
            docs: DocumentCache::new(http, DOCUMENT_TTL_MS, DOCUMENT_MIN_REFETCH_MS),
            clock,
            db,
            metrics,
            allow_http_loopback,
            last_purge_ms: Arc::new(AtomicI64::new(0)),
        }
    }

    /// Whether any issuer is trusted (nothing to verify otherwise).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// Verifies each of `assertions` (at most [`MAX_ASSERTIONS`]) and returns the evidence of
    /// those that pass; every other one is dropped, logged with its reason and counted in
    /// `switchboard_attestations_total{outcome}`.
    pub async fn verify_all(
        &self,
        assertions: &[String],
        expected: &Expected<'_>,
    ) -> Vec<IdentityEvidence> {
        let mut out = Vec::new();
        for (i, jws) in assertions.iter().enumerate() {
            if i >= MAX_ASSERTIONS {
                tracing::info!(
                    dropped = assertions.len() - MAX_ASSERTIONS,
                    "identity assertions over the limit dropped"
                );
                break;
            }
            match self.verify(jws, expected).await {
                Ok(ev) => {
                    self.metrics.attestation("verified");
                    tracing::debug!(issuer = %ev.issuer, subject = %ev.subject, method = %ev.method, "identity assertion verified");
                    out.push(ev);
                }
                Err(reason) => {
                    self.metrics.attestation(reason.label());
                    let iss = jws
                        .split('.')
                        .nth(1)
                        .and_then(|p| b64_json(p).ok())
                        .and_then(|c| c.get("iss").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_default();
                    let iss: String = iss.chars().take(200).collect();
                    tracing::info!(reason = reason.label(), issuer = %iss, "identity assertion dropped");
                }
            }
        }
        out
    }

    /// Verifies one compact JWS subject assertion.
    ///
    /// # Errors
    /// The [`Reject`] reason of the first check that fails.
    pub async fn verify(
        &self,
        jws: &str,
        expected: &Expected<'_>,
    ) -> Result<IdentityEvidence, Reject> {
        let parts: Vec<&str> = jws.split('.').collect();
        let [header_b64, payload_b64, _] = parts.as_slice() else {
            return Err(Reject::Malformed);
        };
        let header = b64_json(header_b64)?;
        let unverified = b64_json(payload_b64)?;
        let continuation = match header.get("typ").and_then(Value::as_str) {
            Some(SUBJECT_TYP) => false,
            Some(CONTINUATION_TYP) if expected.task_id.is_some() => true,
            _ => return Err(Reject::WrongTyp),
        };
        let alg_name = header
            .get("alg")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let alg = accepted_alg(alg_name).ok_or(Reject::WrongAlg)?;
        if header.contains_key("crit") {
            // No critical extension is understood, so none may be required.
            return Err(Reject::Malformed);
        }
        // Trust before any fetch: an unknown issuer never causes a request.
        let iss = str_claim(&unverified, "iss")?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.cfg.issuer == iss)
            .ok_or(Reject::UntrustedIssuer)?;
        let kid = header
            .get("kid")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
            .ok_or(Reject::KidNotAuthorized)?;
        let is_did = issuer.cfg.issuer.starts_with("did:web:");
        let kid = if is_did {
            let abs = did::absolute_kid(&issuer.cfg.issuer, kid);
            let fragment = abs
                .strip_prefix(&issuer.cfg.issuer)
                .and_then(|r| r.strip_prefix('#'));
            if !fragment.is_some_and(did::is_fragment) {
                return Err(Reject::KidNotAuthorized);
            }
            abs
        } else {
            kid.to_owned()
        };
        let jwk = self.key(issuer, &kid).await?;
        // Checked as a public key already (`jwk::public_key`); one the JWT library still cannot
        // read is no more usable.
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| Reject::KidNotAuthorized)?;
        let mut v = Validation::new(alg);
        v.validate_exp = false;
        v.validate_nbf = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let claims = jsonwebtoken::decode::<Map<String, Value>>(jws, &key, &v)
            .map_err(|_| Reject::InvalidSignature)?
            .claims;
        let checked = self.check_claims(issuer, &claims, expected, continuation)?;
        Verified { checked, claims }
            .finish(self, issuer, alg_name, &kid, jws, expected)
            .await
    }

    /// The issuer's key named `kid`: from its DID document (listed under `assertionMethod` by a
    /// verification method the profile allows), else its static keys, else its JWKS (a public
    /// key the profile allows); refetched once when `kid` is not found.
    async fn key(&self, issuer: &Issuer, kid: &str) -> Result<Jwk, Reject> {
        let iss = &issuer.cfg.issuer;
        if iss.starts_with("did:web:") {
            let url =
                did::document_url(iss, self.allow_http_loopback).ok_or(Reject::KeyFetchFailed)?;
            for refresh in [false, true] {
                let body = self.docs.get(&url, refresh).await.map_err(|e| {
                    tracing::info!(issuer = %iss, error = %e, "DID document fetch failed");
                    Reject::KeyFetchFailed
                })?;
                let doc: Value =
                    serde_json::from_slice(&body).map_err(|_| Reject::KeyFetchFailed)?;
                match did::assertion_key(&doc, iss, kid) {
                    Ok(Some(jwk)) => return Ok(jwk),
                    Ok(None) => {}
                    Err(did::DocumentError::Method(e)) => {
                        tracing::info!(issuer = %iss, kid, error = %e, "verification method not allowed");
                        return Err(Reject::KidNotAuthorized);
                    }
                    Err(e) => {
                        tracing::info!(issuer = %iss, error = %e, "DID document unusable");
                        return Err(Reject::KeyFetchFailed);
                    }
                }
            }
            return Err(Reject::KidNotAuthorized);
        }
        if let Some(jwk) = issuer.statics.find(kid) {
            return Ok(jwk.clone());
        }
        if let Some(url) = &issuer.cfg.jwks_url {
            for refresh in [false, true] {
                let body = self.docs.get(url, refresh).await.map_err(|e| {
                    tracing::info!(issuer = %iss, error = %e, "JWKS fetch failed");
                    Reject::KeyFetchFailed
                })?;
                let set: Value =
                    serde_json::from_slice(&body).map_err(|_| Reject::KeyFetchFailed)?;
                let keys = set
                    .get("keys")
                    .and_then(Value::as_array)
                    .ok_or(Reject::KeyFetchFailed)?;
                if let Some(key) = keys
                    .iter()
                    .find(|k| k.get("kid").and_then(Value::as_str) == Some(kid))
                {
                    return jwk::public_key(key).map_err(|e| {
                        tracing::info!(issuer = %iss, kid, error = %e, "JWKS key not allowed");
                        Reject::KidNotAuthorized
                    });
                }
            }
        }
        Err(Reject::KidNotAuthorized)
    }

    /// The claim checks after the signature, in order: presence, audience, lifetime, time
    /// window, the issuer's allowances (for a continuation, after finding the subject assertion
    /// that opened its task, whose method and assurance it carries on), a continuation's task.
    fn check_claims(
        &self,
        issuer: &Issuer,
        claims: &Map<String, Value>,
        expected: &Expected<'_>,
        continuation: bool,
    ) -> Result<Checked, Reject> {
        let sub = str_claim(claims, "sub")?.to_owned();
        let jti = str_claim(claims, "jti")?.to_owned();
        // A continuation never needs one: its method is that of the task's opening assertion.
        let method_claim = if continuation {
            match claims.get("mentionable_method") {
                None | Some(Value::Null) => None,
                Some(Value::String(m)) => Some(m.as_str()),
                Some(_) => return Err(Reject::Malformed),
            }
        } else {
            Some(str_claim(claims, "mentionable_method")?)
        };
        let iat = int_claim(claims, "iat")?.ok_or(Reject::MissingClaim)?;
        let exp = int_claim(claims, "exp")?.ok_or(Reject::MissingClaim)?;
        let nbf = int_claim(claims, "nbf")?;
        let audience = match claims.get("aud") {
            Some(Value::String(s)) => Audience::One(s.clone()),
            Some(Value::Array(a)) => Audience::Many(
                a.iter()
                    .map(|v| v.as_str().map(str::to_owned).ok_or(Reject::Malformed))
                    .collect::<Result<_, _>>()?,
            ),
            None | Some(Value::Null) => return Err(Reject::MissingClaim),
            Some(_) => return Err(Reject::Malformed),
        };
        let task = if continuation {
            Some(str_claim(claims, "mentionable_task_id")?.to_owned())
        } else {
            None
        };
        if jti.len() > MAX_JTI_LEN {
            return Err(Reject::Malformed);
        }
        let for_us = match &audience {
            Audience::One(a) => expected.audiences.contains(a),
            Audience::Many(list) => list.iter().any(|a| expected.audiences.contains(a)),
        };
        if !for_us {
            return Err(Reject::WrongAudience);
        }
        let lifetime = exp.saturating_sub(iat);
        if lifetime <= 0 {
            return Err(Reject::InvalidLifetime);
        }
        if lifetime > MAX_LIFETIME_S {
            return Err(Reject::TtlExceeded);
        }
        let now = self.clock.now_s();
        if iat > now.saturating_add(SKEW_S) || nbf.is_some_and(|n| n > now.saturating_add(SKEW_S)) {
            return Err(Reject::NotYetValid);
        }
        if now > exp.saturating_add(SKEW_S) {
            return Err(Reject::Expired);
        }
        // A continuation vouches for the subject its task was opened for, by the same issuer:
        // its method and assurance are that subject assertion's.
        let opening = if continuation {
            let opening = expected
                .opening
                .iter()
                .find(|e| {
                    matches!(e.proof, Proof::SignedAttestation(_))
                        && e.issuer == issuer.cfg.issuer
                        && e.subject == sub
                })
                .ok_or(Reject::InvalidSubject)?;
            Some((opening.method.as_str(), opening.assurance.as_str()))
        } else {
            None
        };
        let method = match (opening, method_claim) {
            (Some((opened, _)), Some(m)) if m != opened => return Err(Reject::InvalidMethod),
            (Some((opened, _)), _) => opened.to_owned(),
            (None, Some(m)) => m.to_owned(),
            (None, None) => return Err(Reject::MissingClaim),
        };
        if !issuer.cfg.methods.contains(&method) {
            return Err(Reject::InvalidMethod);
        }
        if !issuer.cfg.subject_prefixes.is_empty()
            && !issuer
                .cfg
                .subject_prefixes
                .iter()
                .any(|p| sub.starts_with(p.as_str()))
        {
            return Err(Reject::InvalidSubject);
        }
        let opened = opening.map(|(_, a)| a);
        let assurance = match claims.get("mentionable_assurance") {
            None | Some(Value::Null) => match opened {
                Some(a) => a.to_owned(),
                None => issuer
                    .cfg
                    .assurance
                    .first()
                    .cloned()
                    .ok_or(Reject::InvalidAssurance)?,
            },
            Some(Value::String(a)) if opened.is_none_or(|o| o == a) => a.clone(),
            Some(_) => return Err(Reject::InvalidAssurance),
        };
        if !issuer.cfg.assurance.contains(&assurance) {
            return Err(Reject::InvalidAssurance);
        }
        if let (Some(task), Some(want)) = (&task, expected.task_id)
            && task != want
        {
            return Err(Reject::WrongTask);
        }
        Ok(Checked {
            sub,
            jti,
            method,
            assurance,
            audience,
            iat,
            exp,
            nbf,
            task,
        })
    }

    /// Records `(iss, jti)` as used; deletes expired records now and then.
    async fn claim_once(&self, iss: &str, jti: &str, exp: i64) -> Result<(), Reject> {
        let now = self.clock.now_ms();
        let until = exp.saturating_add(SKEW_S).saturating_mul(1000);
        let fresh = attestations::claim(&self.db, iss, jti, until, now)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "the attestation replay store is unavailable");
                Reject::ReplayStoreUnavailable
            })?;
        let last = self.last_purge_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= PURGE_INTERVAL_MS
            && self
                .last_purge_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            && let Err(e) = attestations::purge_expired(&self.db, now).await
        {
            tracing::warn!(error = %e, "expired attestation records not deleted");
        }
        if fresh { Ok(()) } else { Err(Reject::Replayed) }
    }
}

/// The claims of an assertion once checked.
#[derive(Debug)]
struct Checked {
    sub: String,
    jti: String,
    method: String,
    assurance: String,
    audience: Audience,
    iat: i64,
    exp: i64,
    nbf: Option<i64>,
    task: Option<String>,
}

/// A signature-checked assertion whose claims passed.
#[derive(Debug)]
struct Verified {
    checked: Checked,
    claims: Map<String, Value>,
}

impl Verified {
    /// Uses the assertion up (single use) and mints its evidence.
    async fn finish(
        self,
        verifier: &TrustVerifier,
        issuer: &Issuer,
        alg: &str,
        kid: &str,
        jws: &str,
        expected: &Expected<'_>,
    ) -> Result<IdentityEvidence, Reject> {
        let c = self.checked;
        verifier
            .claim_once(&issuer.cfg.issuer, &c.jti, c.exp)
            .await?;
        let mut kept = Map::new();
        if let Some(task) = &c.task {
            kept.insert("mentionable_task_id".into(), Value::String(task.clone()));
        }
        if let Some(act) = self.claims.get("act") {
            kept.insert("act".into(), act.clone());
        }
        let ts = |s: i64| Timestamp::from_unix_millis(s.saturating_mul(1000));
        Ok(IdentityEvidence {
            id: Some(c.jti),
            subject: c.sub,
            issuer: issuer.cfg.issuer.clone(),
            method: AuthMethod::from(c.method.as_str()),
            assurance: Assurance::from(c.assurance.as_str()),
            audience: c.audience,
            issued_at: ts(c.iat),
            not_before: c.nbf.map(ts),
            expires_at: Some(ts(c.exp)),
            on_behalf_of: None,
            claims: (!kept.is_empty()).then_some(kept),
            source: Some(EvidenceSource {
                transport: Some(expected.transport.to_owned()),
                connector: Some(issuer.cfg.issuer.clone()),
                ..EvidenceSource::default()
            }),
            proof: Proof::SignedAttestation(SignedAttestationProof {
                alg: alg.to_owned(),
                kid: kid.to_owned(),
                value: jws.to_owned(),
                canonicalization: None,
            }),
            extra: Extra::new(),
        })
    }
}
