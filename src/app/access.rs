//! The access log (`log.access`): one INFO line per HTTP request on each listener, under the
//! tracing target [`TARGET`], with the client address (behind a trusted proxy, the client it
//! names: [`crate::http::ClientAddr`]), method, path (never the query, which may carry
//! secrets), status, body size when known, duration and user agent.
//!
//! Off by default. Off, the middleware is not in the chain at all: the listeners wrap [`log`] in
//! actix's `Condition`, whose disabled branch hands each request straight to the service it
//! wraps, so a request costs no extra allocation and no extra work beyond that branch.

use std::net::IpAddr;
use std::time::Instant;

use actix_web::HttpMessage as _;
use actix_web::body::{BodySize, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;

use crate::http::ClientAddr;

/// The tracing target of access lines: select them with a filter such as
/// `info,switchboard::access=off`, or route them apart in a JSON log.
pub const TARGET: &str = "switchboard::access";

#[cfg(test)]
static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Logs one line for the request once its answer is ready.
///
/// # Errors
/// Whatever the wrapped service returns (logged with the status its error answers with).
pub(super) async fn log<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    #[cfg(test)]
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    let peer: Option<IpAddr> = req.peer_addr().map(|p| p.ip().to_canonical());
    let method = req.method().clone();
    let path = req.path().to_owned();
    let user_agent = req
        .headers()
        .get(actix_web::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let res = next.call(req).await;
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    let (status, bytes, client) = match &res {
        Ok(r) => {
            let bytes = match r.response().body().size() {
                BodySize::Sized(n) => Some(n),
                BodySize::None => Some(0),
                BodySize::Stream => None,
            };
            let client = r.request().extensions().get::<ClientAddr>().map(|c| c.0);
            (r.status().as_u16(), bytes, client.or(peer))
        }
        Err(e) => (e.as_response_error().status_code().as_u16(), None, peer),
    };
    tracing::info!(
        target: TARGET,
        client = %client.map_or_else(|| "-".to_owned(), |c| c.to_string()),
        method = %method,
        path = %path,
        status,
        bytes,
        duration_ms,
        user_agent = user_agent.as_deref().unwrap_or("-"),
        "request"
    );
    res
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use actix_web::middleware::{Condition, from_fn};
    use actix_web::{App, HttpResponse, test, web};

    use super::*;

    /// Off, the middleware never runs: a request costs only `Condition`'s branch. On, it runs
    /// once per request. (One test, so that no other test's requests touch the counter.)
    #[actix_web::test]
    async fn off_it_never_runs_and_on_it_runs_once_per_request() {
        for (on, expected) in [(false, 0), (true, 3)] {
            let before = CALLS.load(Ordering::Relaxed);
            let app = test::init_service(App::new().wrap(Condition::new(on, from_fn(log))).route(
                "/x",
                web::get().to(|| async { HttpResponse::Ok().body("hi") }),
            ))
            .await;
            for _ in 0..3 {
                let res = test::call_service(
                    &app,
                    test::TestRequest::get().uri("/x?token=s").to_request(),
                )
                .await;
                assert_eq!(res.status(), 200);
            }
            assert_eq!(
                CALLS.load(Ordering::Relaxed) - before,
                expected,
                "access log {on}: runs per request"
            );
        }
    }
}
