//! What software a remote server runs, from its NodeInfo (`/.well-known/nodeinfo`, then the
//! 2.x document it links, `software.name`), fetched through the SSRF-guarded client and cached
//! per host: an answer for as long as actors are, a failure briefly (the software is then
//! unknown). Concurrent first lookups for one host fetch once. From it follows how long one reply note to that server may be
//! (`activitypub.max_reply_chars`).

use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use serde_json::Value;

use super::Inner;
use super::{long_replies, mapping};
use crate::net::HttpRequest;

/// How long a failed lookup stands for "unknown" before the host is asked again.
const FAILURE_TTL_MS: i64 = 10 * 60 * 1000;

/// The longest a lookup may take, both fetches together: it can hold up an inbox request.
const LOOKUP_TIMEOUT_MS: u64 = 3_000;

impl Inner {
    /// The software of the server at `iri`'s host, lower case; `None` when unknown.
    pub(super) async fn software(&self, iri: &str) -> Option<String> {
        let host = mapping::host_of(iri)?;
        let now = self.clock.now_ms();
        let ttl = |known: bool| {
            if known {
                i64::try_from(self.cfg.actor_cache_seconds.saturating_mul(1000)).unwrap_or(i64::MAX)
            } else {
                FAILURE_TTL_MS
            }
        };
        let cached = |now: i64| {
            self.lock_software()
                .get(&host)
                .filter(|(name, at)| now - at < ttl(name.is_some()))
                .map(|(name, _)| name.clone())
        };
        if let Some(name) = cached(now) {
            return name;
        }
        // Lookups for one host at once are one: the others wait for its answer.
        let _passage = self.software_lookups.enter(&host).await;
        if let Some(name) = cached(self.clock.now_ms()) {
            return name;
        }
        let limit = std::time::Duration::from_millis(LOOKUP_TIMEOUT_MS);
        let name = tokio::time::timeout(limit, self.fetch_software(iri))
            .await
            .ok()
            .flatten();
        if name.is_none() {
            tracing::debug!(%host, "the server's software is unknown (no usable NodeInfo)");
        }
        self.lock_software()
            .insert(host, (name.clone(), self.clock.now_ms()));
        name
    }

    fn lock_software(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (Option<String>, i64)>> {
        match self.software.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        }
    }

    async fn fetch_software(&self, iri: &str) -> Option<String> {
        let u = url::Url::parse(iri).ok()?;
        let origin = u.origin().ascii_serialization();
        let links = self
            .get_json(&format!("{origin}/.well-known/nodeinfo"))
            .await?;
        let href = long_replies::nodeinfo_href(&links)?;
        let doc = self.get_json(href).await?;
        long_replies::nodeinfo_software(&doc)
    }

    async fn get_json(&self, url: &str) -> Option<Value> {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::GET,
                url,
                headers,
                body: None,
                timeout: Some(std::time::Duration::from_millis(
                    self.cfg.fetch_timeout_ms.min(LOOKUP_TIMEOUT_MS),
                )),
            })
            .await
            .map_err(|e| tracing::debug!(%url, error = %e, "NodeInfo fetch failed"))
            .ok()?;
        self.http.classify_status(&resp).ok()?;
        serde_json::from_slice(&resp.body).ok()
    }

    /// Characters one reply note to the server of the actor `iri` may have (0: no limit).
    pub(super) async fn reply_limit(&self, iri: &str) -> u64 {
        let software = self.software(iri).await;
        self.cfg.max_reply_chars.for_software(software.as_deref())
    }

    /// The limit for a reply addressed to all of `actors`: the smallest of their servers'
    /// (0, no limit, when none has one).
    pub(super) async fn reply_limit_of(&self, actors: &[&str]) -> u64 {
        let mut by_host = std::collections::BTreeMap::new();
        for a in actors {
            if let Some(h) = mapping::host_of(a) {
                by_host.entry(h).or_insert(*a);
            }
        }
        let mut limit = 0;
        for iri in by_host.into_values() {
            let l = self.reply_limit(iri).await;
            if l > 0 && (limit == 0 || l < limit) {
                limit = l;
            }
        }
        limit
    }
}
