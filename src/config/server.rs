//! `[server]`: the HTTP listeners and the public URL everything else is named under.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::secret::Secret;
use crate::message::is_domain;
use crate::net::client_addr::TrustedProxies;

/// HTTP serving.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the public HTTP listener.
    pub bind: SocketAddr,
    /// Public base URL with scheme; defaults to `http://{bind}`.
    pub public_url: Option<String>,
    /// The domain in agents' fediverse handles when it is not the public URL's host: agents are
    /// `@name@{handle_domain}` while their actors stay under `public_url`. That domain's
    /// `/.well-known/webfinger` must redirect (or proxy) to this server.
    pub handle_domain: Option<String>,
    /// Address of the Prometheus metrics listener.
    pub metrics_bind: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// How long shutdown waits for in-flight work before releasing it: one period for the
    /// whole shutdown, HTTP, SMTP and job workers together.
    pub shutdown_grace_seconds: u64,
    /// Most open connections on the public listener; 0 derives it from the open-file limit
    /// (the limit less 256 descriptors kept for the rest, at most 25,000).
    pub max_connections: usize,
    /// Most open connections from one peer (an IPv4 address or an IPv6 /64).
    pub max_connections_per_peer: usize,
    /// How long a client may take to send a request's headers.
    pub header_timeout_ms: u64,
    /// How long a client may take to send a request's whole body, counted from its headers;
    /// later, the request is answered 408 and the connection closed.
    pub body_timeout_ms: u64,
    /// How long a request may take from its headers to the response's head (a streamed body
    /// may go on after); later, it is answered 503 and the connection closed. At least
    /// `body_timeout_ms` plus the longer of `a2a.blocking_timeout_ms` and
    /// `activitypub.processing_timeout_ms`.
    pub request_timeout_ms: u64,
    /// How long an idle keep-alive connection stays open.
    pub keep_alive_ms: u64,
    /// Reverse proxies and load balancers in front (CIDR blocks: `"127.0.0.1/32"`,
    /// `"10.0.0.0/8"`). Only on a connection from one of them are `Forwarded` and
    /// `X-Forwarded-For` read for the client's address (the rightmost hop that is not a trusted
    /// proxy), which admission, logs and every per-address decision then use; such a connection
    /// is not capped per peer, its clients are, each for the time of its request. Empty (the
    /// default): nobody is trusted and the headers are ignored.
    pub trusted_proxies: Vec<String>,
    /// Every connection to the public listener starts with a PROXY protocol header (v1 or v2,
    /// from HAProxy or a cloud load balancer in TCP mode) naming the client; one without a
    /// valid header is closed. With `trusted_proxies` set, only those peers may name a client
    /// in it; empty, anyone may.
    pub proxy_protocol: bool,
    /// The key-encryption key sealing the private keys stored in the database (AES-256-GCM):
    /// 32 bytes as 64 hex digits or base64. Usually given by `kek_file` or
    /// `SWITCHBOARD__SERVER__KEK`; unset, private keys are stored plain (`doctor` warns).
    pub kek: Option<Secret>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            handle_domain: None,
            metrics_bind: SocketAddr::from(([127, 0, 0, 1], 9464)),
            workers: 2,
            max_body_bytes: 1024 * 1024,
            shutdown_grace_seconds: 30,
            max_connections: 0,
            max_connections_per_peer: 256,
            header_timeout_ms: 5_000,
            body_timeout_ms: 15_000,
            request_timeout_ms: 60_000,
            keep_alive_ms: 5_000,
            trusted_proxies: Vec::new(),
            proxy_protocol: false,
            kek: None,
        }
    }
}

impl ServerConfig {
    /// The public base URL: `public_url`, else `http://{bind}`.
    pub(super) fn public_url(&self) -> Result<url::Url, String> {
        let raw = self
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.bind));
        let url = url::Url::parse(&raw).map_err(|e| format!("server.public_url {raw:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "server.public_url {raw:?}: needs http(s) and a host"
            ));
        }
        Ok(url)
    }

    /// The key-encryption key's bytes, when one is set (`keys::Kek::configured` makes the key).
    ///
    /// # Errors
    /// [`crate::Error::Config`] naming `server.kek` when it is not 32 bytes of hex or base64.
    pub fn kek_bytes(&self) -> Result<Option<Vec<u8>>, crate::Error> {
        self.kek
            .as_ref()
            .map(|k| {
                kek_bytes(k.expose()).map_err(|e| match e {
                    crate::Error::Config(m) => crate::Error::Config(format!("server.kek: {m}")),
                    other => other,
                })
            })
            .transpose()
    }

    /// The public host, with the port when it is not the scheme's default.
    pub(super) fn domain(&self) -> Option<String> {
        let url = self.public_url().ok()?;
        let host = url.host_str()?.to_owned();
        Some(match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host,
        })
    }

    /// The public URL must be usable and name a host agents can be addressed at; plain http is
    /// expected only where private addresses are allowed (`net.allow_private_addresses`).
    pub(super) fn check(&self, allow_private_addresses: bool, problems: &mut Vec<String>) {
        match self.kek_bytes() {
            Err(crate::Error::Config(m)) => problems.push(m),
            Err(e) => problems.push(format!("server.kek: {e}")),
            Ok(_) => {}
        }
        for (key, ms) in [
            ("header_timeout_ms", self.header_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            if ms == 0 {
                problems.push(format!("server.{key}: must be above 0"));
            }
        }
        if self.max_connections_per_peer == 0 {
            problems.push("server.max_connections_per_peer: must be above 0".into());
        }
        if let Err(bad) = TrustedProxies::parse(&self.trusted_proxies) {
            problems.extend(bad);
        }
        match self.public_url() {
            Ok(url) => {
                if url.scheme() == "http" && !allow_private_addresses {
                    tracing::debug!("public_url is plain http; fine for local use only");
                }
                if self.domain().is_none_or(|d| !is_domain(&d)) {
                    problems.push(format!("server.public_url {url}: no usable host"));
                }
            }
            Err(e) => problems.push(e),
        }
        if let Some(d) = &self.handle_domain
            && !is_domain(d)
        {
            problems.push(format!(
                "server.handle_domain {d:?}: a host name (with an optional port), without a \
                 scheme or path"
            ));
        }
    }

    /// The proxies of `trusted_proxies`.
    ///
    /// # Errors
    /// An entry that is not a CIDR block (the configuration check says so first).
    pub fn trusted(&self) -> Result<TrustedProxies, crate::error::Error> {
        TrustedProxies::parse(&self.trusted_proxies)
            .map_err(|problems| crate::error::Error::Config(problems.join("\n")))
    }

    /// The domain of agents' fediverse handles: `handle_domain`, else the public host (with
    /// its port when not the default), lowercased.
    pub(super) fn handle_domain(&self) -> Option<String> {
        match &self.handle_domain {
            Some(d) => Some(d.to_lowercase()),
            None => self.domain(),
        }
    }
}

/// The length of a key-encryption key: AES-256.
pub const KEK_BYTES: usize = 32;

/// A key-encryption key's bytes from its text: 32 bytes as 64 hex digits or as base64 (standard
/// or URL-safe, padded or not); surrounding whitespace is ignored.
///
/// # Errors
/// [`crate::Error::Config`] saying what is wrong, never the value.
pub fn kek_bytes(text: &str) -> Result<Vec<u8>, crate::Error> {
    use base64::Engine as _;
    let text = text.trim();
    let bytes = if text.len() == 2 * KEK_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(text).ok()
    } else {
        let unpadded = text.trim_end_matches('=');
        base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(unpadded)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(unpadded))
            .ok()
    };
    match bytes {
        Some(b) if b.len() == KEK_BYTES => Ok(b),
        _ => Err(crate::Error::Config(format!(
            "must be {KEK_BYTES} bytes as 64 hex digits or base64 (`openssl rand -hex 32`)"
        ))),
    }
}
