//! What keeps one client from holding the public listener: connections over the caps are
//! refused as they are accepted (a 503 written straight to the socket, then closed), a request
//! body must arrive whole within `server.body_timeout_ms` of its headers (else 408), and the
//! response head must be ready within `server.request_timeout_ms` (else 503). Both answers
//! close the connection. Header reads are bounded by actix's client request timeout, set from
//! `server.header_timeout_ms` where the server is built.

use std::any::Any;
use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{Extensions, Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, ResponseError, web};
use bytes::Bytes;
use futures_util::Stream;
use tokio::time::{Instant, Sleep};

use crate::admission::{Admission, Refusal};
use crate::metrics::Metrics;
use crate::net::client_addr::{ClientAddr, TrustedProxies};

/// The answer written to a connection refused at accept, before anything is read from it.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\n\
Retry-After: 5\r\n\
Connection: close\r\n\
Content-Length: 36\r\n\
\r\n\
too many connections; retry shortly\n";

/// Connection data: the connection comes from a trusted proxy and carries other clients.
#[derive(Debug, Clone, Copy)]
pub struct Proxied;

/// Admits or refuses a connection the public listener just accepted: the slot rides in the
/// connection's extensions and is given back when the connection ends. A connection from a
/// trusted proxy (`server.trusted_proxies`) takes a place in all only and is marked
/// [`Proxied`]: its clients are admitted one by one, each for the time of its request (the
/// `client` middleware).
pub fn on_connect(
    admission: &Admission,
    trusted: &TrustedProxies,
    metrics: &Metrics,
    conn: &dyn Any,
    ext: &mut Extensions,
) {
    let Some(stream) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() else {
        return;
    };
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    let proxied = trusted.contains(peer.ip());
    let admitted = if proxied {
        admission.admit_connection()
    } else {
        admission.admit(peer.ip())
    };
    match admitted {
        Ok(slot) => {
            ext.insert(slot);
            if proxied {
                ext.insert(Proxied);
            }
        }
        Err(refusal) => {
            metrics.connection_refused("http", refusal.label());
            if refusal == Refusal::Full {
                tracing::debug!(%peer, "connection refused: the listener is full");
            }
            refuse(stream);
        }
    }
}

/// Writes the refusal straight to the socket (the runtime's own write would wait for a
/// readiness event the fresh socket has not had yet): its send buffer is empty, so the short
/// answer goes out whole. Then the socket is shut, and whoever holds it closes it when its
/// first read sees the end.
pub(super) fn refuse(stream: &actix_web::rt::net::TcpStream) {
    let socket = socket2::SockRef::from(stream);
    let _ = socket.send(REFUSED);
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

/// The body and request deadlines, as app data of the public app.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// From the request's headers to the last byte of its body.
    pub body: Duration,
    /// From the request's headers to the response's head.
    pub request: Duration,
}

/// A request body that fails once its deadline passes, and says so.
struct TimedBody {
    inner: Payload,
    deadline: Pin<Box<Sleep>>,
    finished: bool,
    expired: Rc<Cell<bool>>,
}

impl Stream for TimedBody {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.finished {
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.finished = true;
            self.expired.set(true);
            return Poll::Ready(Some(Err(PayloadError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "request body not received in time",
            )))));
        }
        let next = Pin::new(&mut self.inner).poll_next(cx);
        if matches!(next, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.finished = true;
        }
        next
    }
}

/// A deadline that passed, as the answer it gets.
#[derive(Debug, thiserror::Error)]
enum Late {
    #[error("request body not received in time")]
    Body,
    #[error("request took too long")]
    Request,
}

impl ResponseError for Late {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::Body => StatusCode::REQUEST_TIMEOUT,
            Self::Request => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status_code());
        resp.force_close().content_type("text/plain");
        if let Self::Request = self {
            resp.insert_header(("Retry-After", "5"));
        }
        resp.body(format!("{self}\n"))
    }
}

/// Middleware applying [`Deadlines`]: the body is cut at its deadline (answered 408) and the
/// handler at the request deadline (answered 503); both close the connection.
///
/// # Errors
/// Whatever the wrapped service returns, or the deadline that passed.
pub async fn deadlines(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let Some(limits) = req.app_data::<web::Data<Deadlines>>().map(|d| *d.get_ref()) else {
        return next.call(req).await;
    };
    let started = Instant::now();
    let expired = Rc::new(Cell::new(false));
    let body = TimedBody {
        inner: req.take_payload(),
        deadline: Box::pin(tokio::time::sleep_until(started + limits.body)),
        finished: false,
        expired: Rc::clone(&expired),
    };
    req.set_payload(Payload::Stream {
        payload: Box::pin(body),
    });
    let path = req.path().to_owned();
    let client = req.extensions().get::<ClientAddr>().map(|c| c.0);
    match tokio::time::timeout_at(started + limits.request, next.call(req)).await {
        Ok(_) if expired.get() => {
            tracing::debug!(%path, ?client, "request body not received within server.body_timeout_ms");
            Err(Late::Body.into())
        }
        Ok(res) => res,
        Err(_) => {
            tracing::warn!(%path, ?client, "request not answered within server.request_timeout_ms");
            Err(Late::Request.into())
        }
    }
}
