//! Whose request it is on the public listener: the client address ([`ClientAddr`], in every
//! request's extensions) and, behind a trusted proxy, per-client admission.
//!
//! A connection from a proxy in `server.trusted_proxies` carries many clients, so it is not
//! capped per peer (`limits::on_connect`); instead [`client`] reads the client from
//! its forwarding headers ([`crate::net::client_addr`]) and takes one of that client's
//! per-peer places (`server.max_connections_per_peer`) for as long as the request is served,
//! its response body included. A client over its cap is answered 503 with `Retry-After`, and
//! counted as a connection refused with `peer_full`, as it would be had it connected directly.
//!
//! With `server.proxy_protocol` the listener is assembled from actix's parts ([`serve_proxied`])
//! so that each connection's PROXY protocol header is read before HTTP; the client it names is
//! the connection's peer from then on. Without it, actix-web's own server is used unchanged.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_http::{HttpService, Protocol, Request, Response};
use actix_service::{IntoServiceFactory, ServiceFactoryExt, fn_service, map_config};
use actix_web::body::{BodySize, EitherBody, MessageBody};
use actix_web::dev::{
    AppConfig, Extensions, Server, Service, ServiceFactory, ServiceRequest, ServiceResponse,
};
use actix_web::http::StatusCode;
use actix_web::http::header::HeaderValue;
use actix_web::middleware::Next;
use actix_web::rt::net::TcpStream;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError, web};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::limits::{Proxied, refuse};
use crate::admission::{Admission, Slot};
use crate::metrics::Metrics;
pub use crate::net::client_addr::ClientAddr;
use crate::net::client_addr::{self, TrustedProxies};
use crate::net::proxy_protocol;

/// What [`client`] needs, as app data of the public app.
#[derive(Debug, Clone)]
pub struct Clients {
    /// The proxies whose forwarding headers are read.
    pub trusted: Arc<TrustedProxies>,
    /// The public listener's caps.
    pub admission: Admission,
    /// Where refusals are counted.
    pub metrics: Arc<Metrics>,
}

/// The client address of a request on the public listener.
#[must_use]
pub fn client_addr(req: &HttpRequest) -> Option<IpAddr> {
    req.extensions().get::<ClientAddr>().map(|c| c.0)
}

/// The answer of a request whose client holds as many places as one peer may.
#[derive(Debug, thiserror::Error)]
#[error("too many requests from your address at once; retry shortly")]
struct ClientFull;

impl ResponseError for ClientFull {
    fn status_code(&self) -> StatusCode {
        StatusCode::SERVICE_UNAVAILABLE
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::ServiceUnavailable()
            .content_type("text/plain")
            .insert_header(("Retry-After", "5"))
            .body(format!("{self}\n"))
    }
}

/// Middleware: sets [`ClientAddr`] on the request and, on a connection from a trusted proxy,
/// holds one of the client's per-peer places until the response body ends.
///
/// # Errors
/// Whatever the wrapped service returns, or 503 when the client is over its cap.
pub async fn client<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B, Held<B>>>, actix_web::Error> {
    let Some(peer) = req.peer_addr().map(|p| p.ip().to_canonical()) else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    };
    let ctx = match req.conn_data::<Proxied>() {
        Some(_) => req.app_data::<web::Data<Clients>>().cloned(),
        None => None,
    };
    let Some(ctx) = ctx else {
        req.extensions_mut().insert(ClientAddr(peer));
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    };
    let client = {
        let headers = req.headers();
        let forwarded: Vec<&[u8]> = headers
            .get_all("forwarded")
            .map(HeaderValue::as_bytes)
            .collect();
        let xff: Vec<&[u8]> = headers
            .get_all("x-forwarded-for")
            .map(HeaderValue::as_bytes)
            .collect();
        client_addr::resolve(peer, &ctx.trusted, &forwarded, &xff)
    };
    req.extensions_mut().insert(ClientAddr(client));
    let slot = match ctx.admission.admit_client(client) {
        Ok(slot) => slot,
        Err(refusal) => {
            ctx.metrics.connection_refused("http", refusal.label());
            tracing::debug!(%client, path = %req.path(), "request refused: the client holds as many places as one peer may");
            return Err(ClientFull.into());
        }
    };
    let res = next.call(req).await?;
    Ok(res.map_body(|_, body| {
        EitherBody::right(Held {
            body: Box::pin(body),
            _slot: slot,
        })
    }))
}

/// A response body that holds its client's place until it ends.
pub struct Held<B> {
    body: Pin<Box<B>>,
    _slot: Slot,
}

impl<B: MessageBody> MessageBody for Held<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        self.get_mut().body.as_mut().poll_next(cx)
    }
}

/// A connection of the PROXY protocol listener, its header read: the stream, whether the
/// client it named is a trusted proxy, and its places (in all, and the client's own).
pub struct ProxiedStream {
    io: TcpStream,
    proxied: bool,
    _slots: (Slot, Option<Slot>),
}

impl AsyncRead for ProxiedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for ProxiedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// How the PROXY protocol listener is run: what actix-web's server would be told.
#[derive(Debug, Clone)]
pub struct ProxiedListener {
    /// The public listener's caps.
    pub admission: Admission,
    /// The proxies that may name a client (empty: anyone may).
    pub trusted: Arc<TrustedProxies>,
    /// Where refusals are counted.
    pub metrics: Arc<Metrics>,
    /// Worker threads.
    pub workers: usize,
    /// actix's own cap on connections per worker.
    pub max_per_worker: usize,
    /// Time for a request's headers.
    pub client_request_timeout: Duration,
    /// Time for a closing client to go.
    pub client_disconnect_timeout: Duration,
    /// Idle keep-alive.
    pub keep_alive: Duration,
    /// Shutdown grace, in seconds.
    pub shutdown_grace_seconds: u64,
}

/// The public listener with the PROXY protocol: every connection's header is read (within
/// [`proxy_protocol::HEADER_TIMEOUT`]) before HTTP starts, and the client it names is the
/// connection's peer for admission, [`ClientAddr`] and `peer_addr`. `factory` makes the app, as
/// for actix-web's `HttpServer::new`.
///
/// # Errors
/// When the listener cannot be used.
pub fn serve_proxied<F, I, S, B>(
    listener: std::net::TcpListener,
    settings: ProxiedListener,
    factory: F,
) -> io::Result<Server>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: std::fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let addr = listener.local_addr()?;
    let builder = actix_server::ServerBuilder::new()
        .workers(settings.workers.max(1))
        .max_concurrent_connections(settings.max_per_worker)
        .disable_signals()
        .shutdown_timeout(settings.shutdown_grace_seconds);
    let shutdown = builder.graceful_shutdown_signal();
    let settings = Arc::new(settings);
    let server = builder.listen("switchboard-http-proxied", listener, move || {
        let (settings, shutdown) = (Arc::clone(&settings), shutdown.clone());
        let app = factory()
            .into_factory()
            .map_err(|e| e.into().error_response());
        let http = HttpService::build()
            .graceful_shutdown_signal(move || {
                let shutdown = shutdown.clone();
                async move { shutdown.notified().await }
            })
            .keep_alive(settings.keep_alive)
            .client_request_timeout(settings.client_request_timeout)
            .client_disconnect_timeout(settings.client_disconnect_timeout)
            .local_addr(addr)
            .on_connect_ext(|io: &ProxiedStream, ext: &mut Extensions| {
                if io.proxied {
                    ext.insert(Proxied);
                }
            })
            .finish(map_config(app, |()| AppConfig::default()));
        fn_service(move |io: TcpStream| accept(io, Arc::clone(&settings))).and_then(http)
    })?;
    Ok(server.run())
}

/// Admits a connection of the PROXY protocol listener and reads its header.
async fn accept(
    mut io: TcpStream,
    settings: Arc<ProxiedListener>,
) -> Result<(ProxiedStream, Protocol, Option<SocketAddr>), actix_http::error::DispatchError> {
    use actix_http::error::DispatchError;
    let refused = |why: &str| DispatchError::Io(io::Error::other(why.to_owned()));
    let _ = io.set_nodelay(true);
    let peer = io.peer_addr()?;
    let connection = match settings.admission.admit_connection() {
        Ok(slot) => slot,
        Err(refusal) => {
            settings.metrics.connection_refused("http", refusal.label());
            refuse(&io);
            return Err(refused("full"));
        }
    };
    let source = match proxy_protocol::read_client(&mut io, peer, &settings.trusted).await {
        Ok(source) => source,
        Err(e) => {
            settings
                .metrics
                .connection_refused("http", "proxy_protocol");
            tracing::debug!(%peer, error = %e, "connection closed");
            return Err(refused("header"));
        }
    };
    let proxied = settings.trusted.contains(source.ip());
    let client = if proxied {
        None
    } else {
        match settings.admission.admit_client(source.ip()) {
            Ok(slot) => Some(slot),
            Err(refusal) => {
                settings.metrics.connection_refused("http", refusal.label());
                refuse(&io);
                return Err(refused("peer full"));
            }
        }
    };
    let stream = ProxiedStream {
        io,
        proxied,
        _slots: (connection, client),
    };
    Ok((stream, Protocol::Http1, Some(source)))
}
