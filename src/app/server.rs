//! The application's two HTTP servers: the public one (every transport's routes and the
//! operator API behind connection admission, deadlines and the PROXY protocol where configured)
//! and the private one on the metrics listener (metrics, health, and the transports' private
//! routes: the console).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::middleware::{Condition, from_fn};
use actix_web::{App, HttpServer, web};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{self, AppState};
use crate::pipeline::Pipeline;
use crate::transports::Routes;
use crate::transports::api::console::host::{self, AllowedHosts};

/// The connection cap the public server admits under, and the open-file limit it was derived
/// from (for the start-up line).
pub(super) struct Admitted {
    pub(super) max_connections: usize,
    pub(super) open_files: Option<u64>,
}

/// The public server on `listener`, serving `routes` (in order) before the shared ones.
///
/// # Errors
/// [`Error::Startup`] when the server cannot start; an unusable `server.trusted_proxies`.
pub(super) fn public(
    config: &Config,
    listener: TcpListener,
    routes: Vec<Routes>,
    pipeline: &Pipeline,
) -> Result<(actix_web::dev::Server, Admitted)> {
    let state = AppState {
        pipeline: pipeline.front(),
    };
    let metrics = Arc::clone(&pipeline.services().metrics);
    let srv = &config.server;
    let max_body = srv.max_body_bytes;
    let access = config.log.access;
    let grace = srv.shutdown_grace_seconds;
    let deadlines = http::limits::Deadlines {
        body: Duration::from_millis(srv.body_timeout_ms),
        request: Duration::from_millis(srv.request_timeout_ms),
    };
    let open_files = crate::admission::raise_open_file_limit();
    let max_connections = match srv.max_connections {
        0 => crate::admission::auto_max_connections(open_files),
        n => n,
    };
    if let Some(limit) = open_files
        && u64::try_from(max_connections).unwrap_or(u64::MAX)
            > limit.saturating_sub(crate::admission::RESERVED_DESCRIPTORS)
    {
        tracing::warn!(
            max_connections,
            open_file_limit = limit,
            "server.max_connections leaves too few descriptors for the rest; raise the \
             open-file limit (LimitNOFILE) or lower the cap"
        );
    }
    let admission = crate::admission::Admission::new(
        max_connections,
        srv.max_connections_per_peer,
        metrics.connections("http"),
    );
    let workers_n = srv.workers.max(1);
    // actix's own per-worker cap backs ours up: it pauses accepting (leaving connections in the
    // kernel's queue, holding no descriptor) rather than running out of them.
    let per_worker = max_connections.div_ceil(workers_n) + 16;
    let trusted = Arc::new(srv.trusted()?);
    if srv.proxy_protocol && trusted.is_empty() {
        tracing::warn!(
            "server.proxy_protocol is on and server.trusted_proxies is empty: any client that \
             reaches the listener directly can name its own address"
        );
    }
    let clients = http::client::Clients {
        trusted: Arc::clone(&trusted),
        admission: admission.clone(),
        metrics: Arc::clone(&metrics),
    };
    let make_app = move || {
        let s = state.clone();
        let mut app = App::new()
            .app_data(web::Data::new(deadlines))
            .app_data(web::Data::new(clients.clone()))
            .wrap(from_fn(http::limits::deadlines))
            .wrap(from_fn(http::client::client))
            .wrap(from_fn(http::track))
            .wrap(Condition::new(access, from_fn(super::access::log)));
        for r in &routes {
            let r = r.clone();
            app = app.configure(move |c| r(c));
        }
        app.configure(move |c| http::configure(c, s, max_body))
    };
    let admitted = Admitted {
        max_connections,
        open_files,
    };
    if srv.proxy_protocol {
        let settings = http::client::ProxiedListener {
            admission,
            trusted,
            metrics,
            workers: workers_n,
            max_per_worker: per_worker,
            client_request_timeout: Duration::from_millis(srv.header_timeout_ms),
            client_disconnect_timeout: Duration::from_secs(1),
            keep_alive: Duration::from_millis(srv.keep_alive_ms),
            shutdown_grace_seconds: grace,
        };
        let server = http::client::serve_proxied(listener, settings, make_app)
            .map_err(|e| Error::Startup(e.to_string()))?;
        return Ok((server, admitted));
    }
    let server = HttpServer::new(make_app)
        .workers(workers_n)
        .max_connections(per_worker)
        .client_request_timeout(Duration::from_millis(srv.header_timeout_ms))
        .client_disconnect_timeout(Duration::from_secs(1))
        .keep_alive(Duration::from_millis(srv.keep_alive_ms))
        .on_connect(move |conn, ext| {
            http::limits::on_connect(&admission, &trusted, &metrics, conn, ext);
        })
        // Stream events and small answers go out as soon as they are written (`TCP_NODELAY`),
        // never held back for the peer's delayed ACK.
        .tcp_nodelay(true)
        .disable_signals()
        .shutdown_timeout(grace)
        .listen(listener)
        .map_err(|e| Error::Startup(e.to_string()))?
        .run();
    Ok((server, admitted))
}

/// The most connections the private listener holds at once: scrapers, probes and operators,
/// admitted apart from the public listener's clients.
const PRIVATE_MAX_CONNECTIONS: usize = 64;

/// The private server on the metrics listener: metrics, health and readiness, and the
/// transports' private `routes`, with the access log when `log.access` is on. It has its own
/// worker and connection cap, so a flood of the public listener never fails a probe; every route
/// answers only the `Host` names it serves (`console.hostnames` and loopback; 421 otherwise,
/// against DNS rebinding).
///
/// # Errors
/// [`Error::Startup`] when the server cannot start.
pub(super) fn private(
    config: &Config,
    listener: TcpListener,
    routes: Vec<Routes>,
    pipeline: &Pipeline,
) -> Result<actix_web::dev::Server> {
    let state = AppState {
        pipeline: pipeline.front(),
    };
    let access = config.log.access;
    let hosts = AllowedHosts::new(&config.console.hostnames);
    Ok(HttpServer::new(move || {
        let (s, routes) = (state.clone(), routes.clone());
        App::new()
            .app_data(web::Data::new(hosts.clone()))
            .wrap(from_fn(host::guard))
            // Outermost, so that requests the Host check refuses are logged too.
            .wrap(Condition::new(access, from_fn(super::access::log)))
            .configure(move |c| {
                http::configure_metrics(c, s);
                for r in &routes {
                    r(c);
                }
            })
    })
    .on_connect(host::on_connect)
    .workers(1)
    .max_connections(PRIVATE_MAX_CONNECTIONS)
    .client_request_timeout(Duration::from_secs(5))
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)
    .map_err(|e| Error::Startup(e.to_string()))?
    .run())
}
