//! Authentication of inbound requests: HTTP signatures (draft-cavage and RFC 9421, the key
//! refetched once when it does not verify) and FEP-8b32 object proofs, and which of them
//! vouches for an activity's actor. What the activity then does is `activities`' business.

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::HttpRequest;
use serde_json::Value;

use super::fetch::FetchError;
use super::mapping::{self, iri, str_of};
use super::reject::Reject;
use super::sig::{self, RequestView, Scheme};
use super::{Inner, RemoteActor, store};

/// The parts of the request the verifier needs, owned so the work can move to the main runtime.
#[derive(Debug, Clone)]
pub(super) struct Incoming {
    pub method: String,
    pub path_and_query: String,
    pub headers: HashMap<String, String>,
}

impl Incoming {
    pub(super) fn from_request(req: &HttpRequest) -> Self {
        let mut headers: HashMap<String, String> = HashMap::new();
        for (name, value) in req.headers() {
            let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
            headers
                .entry(name.as_str().to_ascii_lowercase())
                .and_modify(|e| {
                    e.push_str(", ");
                    e.push_str(&v);
                })
                .or_insert(v);
        }
        Self {
            method: req.method().as_str().to_owned(),
            path_and_query: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.path().to_owned(), |p| p.as_str().to_owned()),
            headers,
        }
    }
}

/// How the activity was authenticated.
#[derive(Debug, Clone)]
pub(super) struct Auth {
    /// `ap-http-signature` or `ap-object-integrity-proof`.
    pub method: crate::message::AuthMethod,
    /// The key.
    pub key_id: String,
    /// The authenticated actor.
    pub actor: Arc<RemoteActor>,
}

/// Verifies the request's HTTP signature; returns the signing actor and key id. A failing
/// verification refetches the key once.
pub(super) async fn verify_http(
    inner: &Inner,
    incoming: &Incoming,
    body: Option<&[u8]>,
) -> Result<(Arc<RemoteActor>, String, Scheme), VerifyError> {
    let lookup = |n: &str| incoming.headers.get(n).cloned();
    let target = format!("{}{}", inner.base, incoming.path_and_query);
    let view = RequestView {
        method: &incoming.method,
        path_and_query: &incoming.path_and_query,
        target_uri: &target,
        header: &lookup,
    };
    let now_s = inner.clock.now_s();
    let parsed = sig::parse_any(&view, body, now_s).map_err(VerifyError::Sig)?;
    let mut force = false;
    loop {
        let actor = inner
            .key_owner(&parsed.key_id, force)
            .await
            .map_err(VerifyError::Key)?;
        if let Some(key) = actor.key(&parsed.key_id)
            && parsed.verify(key)
        {
            return Ok((actor, parsed.key_id.clone(), parsed.scheme));
        }
        if force {
            return Err(VerifyError::Sig(sig::SigError::Invalid));
        }
        force = true;
    }
}

/// Why HTTP-signature verification failed.
#[derive(Debug)]
pub(super) enum VerifyError {
    /// The signature itself.
    Sig(sig::SigError),
    /// The key could not be fetched.
    Key(FetchError),
}

/// How old an object integrity proof may be: a week, well inside the fortnight seen activity
/// ids are remembered.
const PROOF_MAX_AGE_MS: i64 = store::SEEN_RETENTION_MS / 2;

/// Verifies a FEP-8b32 proof on `doc`; returns the controller actor and the key id.
async fn verify_proof(
    inner: &Inner,
    doc: &Value,
) -> Result<Option<(Arc<RemoteActor>, String)>, String> {
    let Some(p) = super::proof::prepare(doc).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    // Younger than the memory of seen ids, so no proof outlives its replay protection.
    super::proof::check_current(doc, inner.clock.now_ms(), PROOF_MAX_AGE_MS)
        .map_err(|e| e.to_string())?;
    let mut force = false;
    loop {
        let actor = inner
            .key_owner(&p.verification_method, force)
            .await
            .map_err(|e| format!("proof key: {e}"))?;
        if let Some(sig::PublicKey::Ed25519(raw)) = actor.key(&p.verification_method)
            && p.verify(raw)
        {
            return Ok(Some((actor, p.verification_method.clone())));
        }
        if force {
            return Err("proof does not verify".into());
        }
        force = true;
    }
}

/// What authentication concluded about an activity.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Its actor signed it (or proved it).
    Authenticated(Auth),
    /// A deleted account's own `Delete`, signed with a key that is gone along with the account
    /// (its actor document answers 404/410): nothing to verify and nothing worth a retry.
    AccountGone,
}

/// Authenticates `activity` (of type `kind`, claiming `actor_iri`) from the request's HTTP
/// signature and the activity's object proof; the proof wins when both name the actor.
///
/// # Errors
/// 401 when neither authenticates the actor, 503 when its key could not be fetched for now.
pub(super) async fn authenticate(
    inner: &Inner,
    incoming: &Incoming,
    body: &[u8],
    activity: &Value,
    kind: &str,
    actor_iri: &str,
) -> Result<Verdict, Reject> {
    let http = verify_http(inner, incoming, Some(body)).await;
    let http = match http {
        Ok(ok) => Some(ok),
        Err(VerifyError::Sig(sig::SigError::Missing)) => None,
        Err(VerifyError::Sig(e)) => return Err(Reject::unauth(e)),
        Err(VerifyError::Key(e)) => {
            // A deleted account signs its own Delete with a key that is gone: nothing to verify
            // and nothing worth a retry. The keyId is the sender's choice, so only the actor
            // document itself answering 404/410 proves the account is gone.
            let self_delete =
                kind == "Delete" && activity.get("object").and_then(iri) == Some(actor_iri);
            if self_delete
                && matches!(e, FetchError::Gone)
                && matches!(inner.actor(actor_iri, true).await, Err(FetchError::Gone))
            {
                return Ok(Verdict::AccountGone);
            }
            return Err(match e {
                FetchError::Temporary(r) => Reject::new(503, format!("key fetch failed: {r}")),
                other => Reject::unauth(format!("key unavailable: {other}")),
            });
        }
    };
    let proof = match verify_proof(inner, activity).await {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, activity = ?str_of(activity, "id"), "object proof not accepted");
            None
        }
    };
    let auth = match (&proof, &http) {
        (Some((a, kid)), _) if a.id == actor_iri => Auth {
            method: crate::message::AuthMethod::ApObjectIntegrityProof,
            key_id: kid.clone(),
            actor: Arc::clone(a),
        },
        (_, Some((a, kid, _))) if a.id == actor_iri => Auth {
            method: crate::message::AuthMethod::ApHttpSignature,
            key_id: kid.clone(),
            actor: Arc::clone(a),
        },
        (None, None) => return Err(Reject::unauth("the request is not signed")),
        _ => return Err(Reject::unauth("the signer is not the activity's actor")),
    };
    // Remember hosts that sign RFC 9421 (a read, and a write only the first time).
    if let Some((a, _, Scheme::Rfc9421)) = &http
        && let Some(h) = mapping::host_of(&a.id)
        && store::host(&inner.db, &h)
            .await
            .is_ok_and(|row| row.rfc9421 == 0)
    {
        let _ = store::set_rfc9421(&inner.db, &h, inner.clock.now_ms()).await;
    }

    Ok(Verdict::Authenticated(auth))
}
