//! A cache of fetched documents (JWKS, DID documents) by URL, over the guarded client: a
//! document is reused for a while, and a caller that finds it wanting (an unknown key id) may
//! ask for a fresh copy, at most once in a short interval.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Mutex;

use super::{HttpClient, HttpRequest};
use crate::error::OutboundError;

#[derive(Debug, Clone)]
struct Cached {
    fetched_at: i64,
    body: Bytes,
}

/// Documents fetched with `GET`, by URL.
#[derive(Debug, Clone)]
pub struct DocumentCache {
    http: HttpClient,
    /// How long a document is used before it is fetched again.
    ttl_ms: i64,
    /// A refresh is honoured only when the copy is at least this old.
    min_refetch_ms: i64,
    docs: Arc<Mutex<HashMap<String, Cached>>>,
}

impl DocumentCache {
    /// A cache fetching through `http`.
    #[must_use]
    pub fn new(http: HttpClient, ttl_ms: i64, min_refetch_ms: i64) -> Self {
        Self {
            http,
            ttl_ms,
            min_refetch_ms,
            docs: Arc::default(),
        }
    }

    /// The body at `url`: the cached copy while it is fresh (and, when `refresh`, only while it
    /// is younger than the minimum refetch interval), else a new `GET` (answered 2xx).
    ///
    /// # Errors
    /// The fetch failed or answered another status.
    pub async fn get(&self, url: &str, refresh: bool) -> Result<Bytes, OutboundError> {
        // The map stays locked across the fetch: requests arriving meanwhile wait for it and
        // then find it recent, so a burst naming unknown keys costs one fetch, not one each.
        let mut docs = self.docs.lock().await;
        let now = self.http.clock.now_ms();
        if let Some(c) = docs.get(url) {
            let age = now - c.fetched_at;
            if (age < self.ttl_ms && !refresh) || age < self.min_refetch_ms {
                return Ok(c.body.clone());
            }
        }
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::GET,
                url,
                headers: reqwest::header::HeaderMap::new(),
                body: None,
                timeout: None,
            })
            .await?;
        self.http.classify_status(&resp)?;
        docs.insert(
            url.to_owned(),
            Cached {
                fetched_at: now,
                body: resp.body.clone(),
            },
        );
        Ok(resp.body)
    }
}
