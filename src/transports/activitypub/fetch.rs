//! Signed fetches of remote objects (GET signed by the instance actor, through the SSRF-guarded
//! client), and the actor/key cache: memory first, then the `ap_actors` table, then the network.
//! A verification failure forces one refetch (key rotation).

use std::sync::Arc;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::mapping::{self, str_of};
use super::sig::{self, PublicKey};
use super::wire::{self, FromJson as _, Loose};
use super::{Inner, store};
use crate::error::OutboundError;
use crate::net::HttpRequest;

/// `Accept` of every ActivityPub fetch.
pub(super) const ACCEPT: &str = "application/activity+json, application/ld+json; profile=\"https://www.w3.org/ns/activitystreams\"";

/// A remote actor as far as the transport needs it.
#[derive(Debug, Clone)]
pub struct RemoteActor {
    /// Actor IRI.
    pub id: String,
    /// `@user@host`.
    pub address: String,
    /// Personal inbox.
    pub inbox: Option<String>,
    /// `endpoints.sharedInbox`.
    pub shared_inbox: Option<String>,
    /// Followers collection.
    pub followers: Option<String>,
    /// Published keys: `publicKey` (RSA) and `assertionMethod` Multikeys (Ed25519).
    pub keys: Vec<(String, PublicKey)>,
    /// The document.
    pub doc: Value,
}

impl RemoteActor {
    /// Parses an actor document ([`wire::Actor`]): its id and `@user@host` are required; keys
    /// of another shape than expected are left out.
    #[must_use]
    pub fn parse(doc: Value) -> Option<Self> {
        let actor = wire::Actor::from_json(&doc);
        let id = actor.id.as_str()?.to_owned();
        let address = mapping::address_of(&actor)?;
        let mut keys = Vec::new();
        for k in actor.public_key.each().filter_map(Loose::get) {
            if let (Some(kid), Some(pem)) = (k.id.as_str(), k.public_key_pem.as_str())
                && let Some(der) = crate::keys::spki_der_from_pem(pem)
            {
                keys.push((kid.to_owned(), PublicKey::Rsa(der)));
            }
        }
        for k in actor.assertion_method.each().filter_map(Loose::get) {
            if k.kind.as_str() == Some("Multikey")
                && let (Some(kid), Some(mb)) = (k.id.as_str(), k.public_key_multibase.as_str())
                && let Some(raw) = super::proof::parse_ed25519_multikey(mb)
            {
                keys.push((kid.to_owned(), PublicKey::Ed25519(raw)));
            }
        }
        Some(Self {
            address,
            inbox: actor.inbox.as_str().map(str::to_owned),
            shared_inbox: actor.shared_inbox().map(str::to_owned),
            followers: actor.followers.as_str().map(str::to_owned),
            keys,
            id,
            doc,
        })
    }

    /// Where to deliver: the shared inbox when there is one.
    #[must_use]
    pub fn delivery_inbox(&self) -> Option<&str> {
        self.shared_inbox.as_deref().or(self.inbox.as_deref())
    }

    /// The key published under `key_id`.
    #[must_use]
    pub fn key(&self, key_id: &str) -> Option<&PublicKey> {
        self.keys.iter().find(|(k, _)| k == key_id).map(|(_, k)| k)
    }
}

/// Why a fetch failed.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum FetchError {
    /// 404 or 410: the object is gone.
    #[error("gone")]
    Gone,
    /// A refused target, an unusable answer: will not work on retry.
    #[error("{0}")]
    Permanent(String),
    /// Network trouble, 5xx: may work later.
    #[error("{0}")]
    Temporary(String),
}

impl From<OutboundError> for FetchError {
    fn from(e: OutboundError) -> Self {
        match e {
            OutboundError::Permanent { reason, .. } => Self::Permanent(reason),
            OutboundError::Temporary { reason, .. } => Self::Temporary(reason),
        }
    }
}

fn strip_fragment(iri: &str) -> &str {
    iri.split_once('#').map_or(iri, |(a, _)| a)
}

impl Inner {
    /// Signs an outbound request as `key_owner` (an agent name, or `None` for the instance
    /// actor) and returns the headers.
    pub(super) async fn sign_headers(
        &self,
        key_owner: Option<&str>,
        method: &str,
        url: &url::Url,
        body: Option<&[u8]>,
        rfc9421: bool,
    ) -> Result<HeaderMap, OutboundError> {
        let (key_name, key_id) = match key_owner {
            Some(agent) => (
                Self::rsa_key_name(agent),
                format!("{}#main-key", self.actor_url(agent)),
            ),
            None => (
                "ap:instance".to_owned(),
                format!("{}#main-key", self.instance_actor()),
            ),
        };
        let key = self
            .keys
            .rsa(&key_name)
            .await
            .map_err(|e| OutboundError::temporary(format!("signing key: {e}")))?;
        let now_s = self.clock.now_s();
        let sign = |m: &[u8]| {
            key.sign_pkcs1_sha256(m)
                .map_err(|e| OutboundError::permanent(format!("signing failed: {e}")))
        };
        let pairs = if rfc9421 {
            sig::sign_rfc9421(method, url, body, &key_id, "rsa-v1_5-sha256", now_s, sign)?
        } else {
            sig::sign_cavage(method, url, body, &key_id, now_s, sign)?
        };
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            let v = HeaderValue::from_str(&value)
                .map_err(|_| OutboundError::permanent("unrepresentable signature header"))?;
            headers.insert(HeaderName::from_static(name), v);
        }
        Ok(headers)
    }

    /// GETs an ActivityPub object, signed by the instance actor. The answer must be
    /// ActivityStreams JSON whose `id` is the fetched IRI.
    pub(super) async fn fetch_object(&self, iri: &str) -> Result<Value, FetchError> {
        let doc = self.fetch_document(iri).await?;
        if str_of(&doc, "id") != Some(strip_fragment(iri)) {
            return Err(FetchError::Permanent("id does not match the URL".into()));
        }
        Ok(doc)
    }

    /// GETs an ActivityPub document without requiring its `id` to be the URL (key documents:
    /// GoToSocial answers its `…/main-key` URL with a stub of the actor).
    async fn fetch_document(&self, iri: &str) -> Result<Value, FetchError> {
        let target = strip_fragment(iri);
        let url = url::Url::parse(target).map_err(|e| FetchError::Permanent(e.to_string()))?;
        let mut headers = self.sign_headers(None, "GET", &url, None, false).await?;
        headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static(ACCEPT));
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::GET,
                url: target,
                headers,
                body: None,
                timeout: Some(std::time::Duration::from_millis(self.cfg.fetch_timeout_ms)),
            })
            .await?;
        let status = resp.status.as_u16();
        if status == 404 || status == 410 {
            return Err(FetchError::Gone);
        }
        if !resp.status.is_success() {
            return Err(if resp.status.is_server_error() || status == 429 {
                FetchError::Temporary(format!("HTTP {status}"))
            } else {
                FetchError::Permanent(format!("HTTP {status}"))
            });
        }
        let mt = resp.media_type();
        if !(mt == "application/activity+json"
            || mt == "application/ld+json"
            || mt == "application/json")
        {
            return Err(FetchError::Permanent(format!("content type {mt}")));
        }
        serde_json::from_slice(&resp.body)
            .map_err(|e| FetchError::Permanent(format!("not JSON: {e}")))
    }

    /// GETs raw bytes (attachments) through the guarded client, unsigned.
    pub(super) async fn fetch_bytes(
        &self,
        url: &str,
    ) -> Result<(Option<String>, Bytes), FetchError> {
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::GET,
                url,
                headers: HeaderMap::new(),
                body: None,
                timeout: Some(std::time::Duration::from_millis(self.cfg.fetch_timeout_ms)),
            })
            .await?;
        if !resp.status.is_success() {
            return Err(FetchError::Permanent(format!("HTTP {}", resp.status)));
        }
        let mt = Some(resp.media_type()).filter(|m| !m.is_empty());
        Ok((mt, resp.body))
    }

    fn cached(&self, key: &str) -> Option<Arc<RemoteActor>> {
        let now = self.clock.now_ms();
        let ttl =
            i64::try_from(self.cfg.actor_cache_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let map = match self.actors.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.get(key)
            .filter(|(_, at)| now - at < ttl)
            .map(|(a, _)| Arc::clone(a))
    }

    fn remember(&self, actor: &Arc<RemoteActor>, also: Option<&str>) {
        let now = self.clock.now_ms();
        let mut map = match self.actors.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if map.len() > 50_000 {
            map.clear();
        }
        map.insert(actor.id.clone(), (Arc::clone(actor), now));
        // Key ids are the actor's own claims: index only those it plausibly controls (its own
        // document or host), so one actor cannot claim another's IRI as a cache key.
        let host = mapping::host_of(&actor.id);
        let owned = |kid: &str| {
            strip_fragment(kid) == actor.id || (host.is_some() && mapping::host_of(kid) == host)
        };
        for (kid, _) in &actor.keys {
            if owned(kid) {
                map.insert(kid.clone(), (Arc::clone(actor), now));
            }
        }
        if let Some(k) = also.filter(|k| owned(k)) {
            map.insert(k.to_owned(), (Arc::clone(actor), now));
        }
    }

    /// Forgets an actor (after a Delete of it).
    pub(super) fn forget(&self, actor: &str) {
        let mut map = match self.actors.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        map.retain(|_, (a, _)| a.id != actor);
    }

    /// The actor at `iri`: cached unless `force`.
    pub(super) async fn actor(
        &self,
        iri: &str,
        force: bool,
    ) -> Result<Arc<RemoteActor>, FetchError> {
        let iri = strip_fragment(iri);
        if !force {
            // The cache also holds entries under key ids: only the actor whose id is `iri`
            // answers for `iri`.
            if let Some(a) = self.cached(iri).filter(|a| a.id == iri) {
                return Ok(a);
            }
            if let Ok(Some(row)) = store::actor(&self.db, iri).await {
                let ttl = i64::try_from(self.cfg.actor_cache_seconds.saturating_mul(1000))
                    .unwrap_or(i64::MAX);
                if self.clock.now_ms() - row.fetched_at < ttl
                    && let Some(a) = serde_json::from_str(&row.doc)
                        .ok()
                        .and_then(RemoteActor::parse)
                {
                    let a = Arc::new(a);
                    self.remember(&a, None);
                    return Ok(a);
                }
            }
        }
        let doc = self.fetch_object(iri).await?;
        let text = doc.to_string();
        let actor = Arc::new(
            RemoteActor::parse(doc).ok_or_else(|| FetchError::Permanent("not an actor".into()))?,
        );
        if let Err(e) = store::put_actor(&self.db, &actor.id, &text, self.clock.now_ms()).await {
            tracing::warn!(error = %e, "caching an actor failed");
        }
        self.remember(&actor, None);
        Ok(actor)
    }

    /// The actor that publishes `key_id` (the key IRI itself may be a fragment of the actor, or
    /// a separate key document whose `owner` is the actor), cached unless `force`.
    pub(super) async fn key_owner(
        &self,
        key_id: &str,
        force: bool,
    ) -> Result<Arc<RemoteActor>, FetchError> {
        if !force && let Some(a) = self.cached(key_id) {
            return Ok(a);
        }
        let doc_iri = strip_fragment(key_id);
        let mut force = force;
        let actor = loop {
            let actor = if key_id.contains('#') {
                self.actor(doc_iri, force).await?
            } else {
                // A key document (GoToSocial's `…/main-key`) or the actor itself.
                let doc = self.fetch_document(doc_iri).await?;
                match key_document_owner(&doc, key_id) {
                    Some(owner) if owner != doc_iri => {
                        // The key document only points at its owner, which must live on the
                        // same host; the owner's own document is then fetched by its id and
                        // must publish this key (checked below).
                        if mapping::host_of(owner) != mapping::host_of(doc_iri) {
                            return Err(FetchError::Permanent("key owner on another host".into()));
                        }
                        self.actor(owner, force).await?
                    }
                    _ => {
                        if str_of(&doc, "id") != Some(doc_iri) {
                            return Err(FetchError::Permanent("id does not match the URL".into()));
                        }
                        let text = doc.to_string();
                        let a = Arc::new(
                            RemoteActor::parse(doc)
                                .ok_or_else(|| FetchError::Permanent("not an actor".into()))?,
                        );
                        let _ = store::put_actor(&self.db, &a.id, &text, self.clock.now_ms()).await;
                        a
                    }
                }
            };
            if actor.key(key_id).is_some() {
                break actor;
            }
            if force {
                return Err(FetchError::Permanent(
                    "the actor does not publish this key".into(),
                ));
            }
            // A key we have not seen on a cached actor: it may have rotated.
            force = true;
        };
        self.remember(&actor, Some(key_id));
        Ok(actor)
    }
}

/// The owner a fragment-less key document names: its `owner`/`controller`, the `owner` of its
/// `publicKey` entry for `key_id`, or the `id` of the actor stub it is.
fn key_document_owner<'a>(doc: &'a Value, key_id: &str) -> Option<&'a str> {
    if let Some(owner) = str_of(doc, "owner").or_else(|| str_of(doc, "controller")) {
        return Some(owner);
    }
    let keys = match doc.get("publicKey") {
        Some(Value::Array(a)) => a.iter().collect::<Vec<_>>(),
        Some(k) => vec![k],
        None => vec![],
    };
    keys.into_iter()
        .find(|k| str_of(k, "id") == Some(key_id))
        .and_then(|k| str_of(k, "owner"))
        .or_else(|| str_of(doc, "id"))
}
