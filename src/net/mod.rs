//! The one outbound HTTP client. Every fetch of an attacker-influenced URL (webhooks, callbacks,
//! and later actor keys, push notifications, A2A calls) goes through it.
//!
//! The SSRF guard refuses loopback, private, link-local, shared, multicast, reserved and
//! metadata addresses, checked on the addresses DNS returns (so a name cannot smuggle one in),
//! on IP literals, and on every redirect hop. `net.allow_private_addresses` is the explicit,
//! loudly logged development switch that turns the guard off.
//!
//! Inbound, [`client_addr`] tells whose connection or request it is behind a reverse proxy and
//! [`proxy_protocol`] reads the PROXY protocol header of a load balancer in TCP mode.

mod cache;
pub mod client_addr;
pub mod date;
pub mod gates;
mod guard;
mod hmac;
pub mod pem;
pub mod probe;
pub mod proxy_protocol;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, StatusCode, header::HeaderMap};

pub use cache::DocumentCache;
pub use guard::{GuardedResolver, REFUSED, check_target, check_url, is_forbidden_ip};
pub use hmac::{
    SIGNATURE_HEADER, TIMESTAMP_HEADER, constant_time_eq, hmac_hex, sign, signed_headers,
};

use crate::clock::SharedClock;
use crate::config::NetConfig;
use crate::error::{OutboundError, PeerStatus};

/// The outbound HTTP client.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    cfg: Arc<NetConfig>,
    clock: SharedClock,
}

/// A fully read response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// The body, at most the configured cap.
    pub body: Bytes,
}

impl HttpResponse {
    /// The media type without parameters, lower-cased.
    #[must_use]
    pub fn media_type(&self) -> String {
        self.headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default()
    }
}

/// An outbound request.
#[derive(Debug, Clone)]
pub struct HttpRequest<'a> {
    /// Method.
    pub method: Method,
    /// Target.
    pub url: &'a str,
    /// Extra headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Option<Bytes>,
    /// Whole-request timeout; the configured default when `None`.
    pub timeout: Option<Duration>,
}

impl HttpClient {
    /// Builds the client.
    ///
    /// # Errors
    /// When the TLS stack cannot be initialised.
    pub fn new(cfg: NetConfig, clock: SharedClock) -> Result<Self, reqwest::Error> {
        if cfg.allow_private_addresses {
            tracing::warn!(
                "net.allow_private_addresses is ON: outbound requests may reach loopback and private networks. Development only."
            );
        }
        let allow_private = cfg.allow_private_addresses;
        let max_redirects = cfg.max_redirects;
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error("too many redirects");
            }
            match check_url(attempt.url(), allow_private) {
                Ok(()) => attempt.follow(),
                Err(reason) => attempt.error(reason),
            }
        });
        let client = reqwest::Client::builder()
            .user_agent(cfg.user_agent.clone())
            .connect_timeout(Duration::from_millis(cfg.connect_timeout_ms))
            .timeout(Duration::from_millis(cfg.timeout_ms))
            .redirect(policy)
            .dns_resolver(Arc::new(guard::GuardedResolver { allow_private }))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            client,
            cfg: Arc::new(cfg),
            clock,
        })
    }

    /// Sends a request and reads the body up to the cap. Transport-level problems are
    /// classified; the status is left to the caller (see [`classify_status`]).
    ///
    /// # Errors
    /// A refused target (permanent), timeouts and connection errors (temporary), a body over the
    /// cap (permanent).
    pub async fn send(&self, req: HttpRequest<'_>) -> Result<HttpResponse, OutboundError> {
        self.send_observed(req, &mut |_, _| {}).await
    }

    /// [`HttpClient::send`], showing `observe` the headers and each piece of the body as it
    /// arrives (for reading a stream while it is written).
    ///
    /// # Errors
    /// As [`HttpClient::send`].
    pub async fn send_observed(
        &self,
        req: HttpRequest<'_>,
        observe: &mut (dyn FnMut(&HeaderMap, &[u8]) + Send),
    ) -> Result<HttpResponse, OutboundError> {
        let url = url::Url::parse(req.url)
            .map_err(|e| OutboundError::permanent(format!("bad URL: {e}")))?;
        check_url(&url, self.cfg.allow_private_addresses).map_err(OutboundError::permanent)?;
        let mut builder = self.client.request(req.method, url).headers(req.headers);
        if let Some(t) = req.timeout {
            builder = builder.timeout(t);
        }
        if let Some(body) = req.body {
            builder = builder.body(body);
        }
        let mut resp = builder.send().await.map_err(classify_reqwest)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let cap = self.cfg.max_body_bytes;
        if resp.content_length().is_some_and(|n| n > cap as u64) {
            return Err(OutboundError::permanent(format!(
                "response body over {cap} bytes"
            )));
        }
        let mut body = bytes::BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(classify_reqwest)? {
            if body.len() + chunk.len() > cap {
                return Err(OutboundError::permanent(format!(
                    "response body over {cap} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
            observe(&headers, &chunk);
        }
        Ok(HttpResponse {
            status,
            headers,
            body: body.freeze(),
        })
    }

    /// POSTs `body` to `url` and, when the answer is a `text/event-stream`, hands each of its
    /// events to `on_event` as soon as the event is complete, while the rest is still arriving
    /// (the whole body is also returned, as by [`HttpClient::send`]).
    ///
    /// # Errors
    /// As [`HttpClient::send`].
    pub async fn post_streamed(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        timeout: Duration,
        on_event: &mut (dyn FnMut(&sse::SseEvent) + Send),
    ) -> Result<HttpResponse, OutboundError> {
        let mut reader = sse::SseReader::new();
        let mut observe = |headers: &HeaderMap, chunk: &[u8]| {
            if !sse::is_event_stream(headers) {
                return;
            }
            for event in reader.feed(chunk) {
                on_event(&event);
            }
        };
        self.send_observed(
            HttpRequest {
                method: Method::POST,
                url,
                headers,
                body: Some(Bytes::from(body)),
                timeout: Some(timeout),
            },
            &mut observe,
        )
        .await
    }

    /// Classifies a response status the way Mastodon's delivery does: 2xx is success; 408, 429
    /// and 5xx are temporary (with `Retry-After` honoured); any other status is permanent.
    ///
    /// # Errors
    /// The classified failure.
    pub fn classify_status(&self, resp: &HttpResponse) -> Result<(), OutboundError> {
        classify_status(resp, self.clock.now_ms())
    }
}

/// See [`HttpClient::classify_status`]; `now_ms` resolves an HTTP-date `Retry-After`.
///
/// # Errors
/// The classified failure.
pub fn classify_status(resp: &HttpResponse, now_ms: i64) -> Result<(), OutboundError> {
    let s = resp.status;
    if s.is_success() {
        return Ok(());
    }
    if s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
    {
        return Err(OutboundError::Temporary {
            reason: format!("HTTP {}", s.as_u16()),
            retry_after: retry_after(&resp.headers, now_ms),
            status: Some(PeerStatus::Http(s.as_u16())),
        });
    }
    Err(OutboundError::permanent(format!("HTTP {}", s.as_u16()))
        .with_status(PeerStatus::Http(s.as_u16())))
}

/// Parses `Retry-After`: delay seconds, or an HTTP date whose distance from `now_ms` is the
/// wait (zero for a date already past).
#[must_use]
pub fn retry_after(headers: &HeaderMap, now_ms: i64) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at_ms = date::parse_unix_s(v)?.saturating_mul(1000);
    Some(Duration::from_millis(
        u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0),
    ))
}

fn classify_reqwest(e: reqwest::Error) -> OutboundError {
    // Walk the source chain: a refusal by the guard surfaces from the resolver or redirect policy.
    let mut chain = String::new();
    let mut src: Option<&dyn std::error::Error> = Some(&e);
    while let Some(s) = src {
        if !chain.is_empty() {
            chain.push_str(": ");
        }
        chain.push_str(&s.to_string());
        src = s.source();
    }
    if chain.contains(guard::REFUSED) {
        return OutboundError::permanent(chain);
    }
    if e.is_redirect() {
        return OutboundError::permanent(chain);
    }
    if e.is_timeout() {
        return OutboundError::temporary(format!("timeout: {chain}"));
    }
    OutboundError::temporary(chain)
}
