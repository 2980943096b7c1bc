//! HTTP assembly: the public app's own routes (health, readiness, media, the landing pages of
//! policy states), the one rendering of
//! core errors as HTTP responses, request metrics, and the metrics app on its own listener.
//! Transports mount their routes beside these; this module imports none of them. [`limits`]
//! keeps one client from holding the listener; [`client`] tells who the client is behind a
//! proxy.

pub mod client;
pub mod limits;
pub mod policy;

pub use client::{ClientAddr, client_addr};

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError, web};
use serde_json::json;
use tracing::Instrument as _;

use crate::error::{Error, ErrorKind};
use crate::pipeline::Front;
use crate::store::jobs;

/// The HTTP status of an error class: the one mapping every HTTP-facing transport renders with
/// (docs/architecture.md, "Errors").
#[must_use]
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Temporary | ErrorKind::Permanent => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The `Retry-After` (seconds) of a `503` for a temporary failure (the database does not
/// answer, the server is shutting down).
const TEMPORARY_RETRY_AFTER_S: u64 = 5;

/// A core error as an HTTP response: the class's status, a JSON body with the error's
/// displayable text; internal detail stays in the logs.
impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        status_of(self.kind())
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() {
            tracing::error!(error = ?self, "request failed");
        }
        let mut resp = HttpResponse::build(status);
        if status == StatusCode::UNAUTHORIZED {
            resp.insert_header(("WWW-Authenticate", "Bearer"));
        }
        match self {
            Self::RateLimited { retry_after_s } => {
                resp.insert_header(("Retry-After", retry_after_s.to_string()));
            }
            // A database that does not answer, a server shutting down: worth trying again soon.
            _ if self.kind() == crate::error::ErrorKind::Temporary => {
                resp.insert_header(("Retry-After", TEMPORARY_RETRY_AFTER_S.to_string()));
            }
            _ => {}
        }
        resp.json(json!({ "error": self.public_text() }))
    }
}

/// Renders a core error as an HTTP response ([`ResponseError`] for [`Error`]).
#[must_use]
pub fn error_response(e: &Error) -> HttpResponse {
    ResponseError::error_response(e)
}

/// Shared state of the public app.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The pipeline.
    pub pipeline: Front,
}

/// Configures the public app's own routes (health, readiness, media, policy landing pages) and
/// limits.
pub fn configure(cfg: &mut web::ServiceConfig, state: AppState, max_body: usize) {
    cfg.app_data(web::Data::new(state))
        .app_data(web::PayloadConfig::new(max_body))
        .route("/healthz", web::get().to(healthz))
        .route("/healthz/host", web::get().to(seen_host))
        .route("/readyz", web::get().to(readyz))
        .route("/media/{digest}", web::get().to(media))
        .configure(policy::routes);
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok")
}

/// The `Host` this request arrived with, so `switchboard doctor` can tell whether a proxy in
/// front passes the public one (inbound HTTP signatures cover it).
async fn seen_host(req: actix_web::HttpRequest) -> HttpResponse {
    let host = req
        .headers()
        .get(actix_web::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    HttpResponse::Ok()
        .content_type("text/plain")
        .insert_header(("Cache-Control", "no-store"))
        .body(host)
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    readiness(&state, false).await
}

/// Readiness on the private listener: a failure names the database and its cause.
async fn readyz_private(state: web::Data<AppState>) -> HttpResponse {
    readiness(&state, true).await
}

/// Whether the database answers and every migration is applied; `detail` adds, to a failure,
/// the engine, where it is and the cause (the public listener says only what failed).
async fn readiness(state: &AppState, detail: bool) -> HttpResponse {
    let checked = state
        .pipeline
        .run(|p| async move {
            let db = p.db();
            Ok((db.target().to_owned(), db.ready().await))
        })
        .await;
    let (target, ready) = checked.unwrap_or_else(|e| ("the main runtime".to_owned(), Err(e)));
    match ready {
        Ok(true) => HttpResponse::Ok().content_type("text/plain").body("ready"),
        Ok(false) => HttpResponse::ServiceUnavailable()
            .content_type("text/plain")
            .insert_header(("Retry-After", TEMPORARY_RETRY_AFTER_S.to_string()))
            .body("migrations pending"),
        Err(e) => {
            tracing::warn!(database = %target, error = %e, "readiness check failed");
            let body = if detail {
                format!("database unavailable: {target}: {e}")
            } else {
                "database unavailable".to_owned()
            };
            HttpResponse::ServiceUnavailable()
                .content_type("text/plain")
                .insert_header(("Retry-After", TEMPORARY_RETRY_AFTER_S.to_string()))
                .body(body)
        }
    }
}

/// `exp` and `sig` of a media URL.
#[derive(Debug, serde::Deserialize)]
struct MediaQuery {
    exp: i64,
    sig: String,
}

async fn media(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: Option<web::Query<MediaQuery>>,
) -> HttpResponse {
    let digest = path.into_inner();
    if !crate::blobs::is_digest(&digest) {
        return error_response(&Error::NotFound("no such media".into()));
    }
    let Some(web::Query(q)) = query else {
        return error_response(&Error::Forbidden);
    };
    let found = state
        .pipeline
        .run(move |p| async move {
            let blobs = p.blobs();
            if blobs.check(&digest, q.exp, &q.sig) != crate::blobs::MediaAccess::Granted {
                return Err(Error::Forbidden);
            }
            blobs.get(&digest).await
        })
        .await;
    match found {
        Ok(Some((mime, data))) => HttpResponse::Ok()
            .content_type(mime)
            .insert_header(("Cache-Control", "private, max-age=300"))
            .insert_header(("X-Content-Type-Options", "nosniff"))
            // Served from our origin: never let a stored document run script there.
            .insert_header(("Content-Security-Policy", "default-src 'none'; sandbox"))
            .body(data),
        Ok(None) => error_response(&Error::NotFound("no such media".into())),
        Err(e) => error_response(&e),
    }
}

/// Middleware counting requests by method, route pattern and status.
///
/// # Errors
/// Whatever the wrapped service returns.
pub async fn track(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let started = Instant::now();
    let method = req.method().to_string();
    let route = req.match_pattern().unwrap_or_else(|| "unmatched".into());
    let metrics = req
        .app_data::<web::Data<AppState>>()
        .map(|s| s.pipeline.metrics().clone());
    // The request's span, a child of the caller's `traceparent` when it sent one (its fields
    // are only evaluated when the span is on: when traces are exported, or logged at debug).
    let span = tracing::debug_span!(
        "request",
        otel.kind = "server",
        otel.name = %format_args!("{method} {route}"),
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let caller = req
            .headers()
            .get(crate::telemetry::TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        crate::telemetry::set_parent(&span, caller);
    }
    let res = next.call(req).instrument(span.clone()).await;
    if let Some(m) = metrics {
        let status = match &res {
            Ok(r) => r.status().as_u16(),
            Err(e) => e.as_response_error().status_code().as_u16(),
        };
        m.http(&method, &route, status, started.elapsed());
        span.record("http.response.status_code", status);
    }
    res
}

/// The private app's own routes: `GET /metrics` (queue depth refreshed at scrape time), and
/// `/healthz` and `/readyz` as on the public listener, for probes that a flood of the public one
/// cannot starve.
pub fn configure_metrics(cfg: &mut web::ServiceConfig, state: AppState) {
    cfg.app_data(web::Data::new(state))
        .route("/metrics", web::get().to(metrics))
        .route("/healthz", web::get().to(healthz))
        .route("/readyz", web::get().to(readyz_private));
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let m = state.pipeline.metrics();
    match state
        .pipeline
        .run(|p| async move { jobs::depth(p.db()).await })
        .await
    {
        Ok(counts) => {
            let rows: Vec<_> = counts.into_iter().map(|c| (c.kind, c.state, c.n)).collect();
            m.set_queue_depth(&rows);
        }
        Err(e) => tracing::warn!(error = %e, "queue depth unavailable"),
    }
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(m.render())
}
