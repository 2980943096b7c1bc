//! The private listener's `Host` check: it answers only the names it is configured for, so a
//! page whose own name was re-pointed at this machine (DNS rebinding) cannot read the console,
//! its counters or the metrics. Allowed are the loopback literals (`localhost`, `127.0.0.1` and
//! the rest of `127.0.0.0/8`, `[::1]`), the names in `console.hostnames`, and the IP literal
//! of the address the request arrived at (what the kubelet's probes and a Prometheus scraping
//! the pod send); any port. Everything else, a missing `Host` included, gets
//! 421 Misdirected Request on every route of the listener.

use std::any::Any;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::http::{StatusCode, header};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

/// The host names the private listener answers besides the loopback literals.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    names: Arc<Vec<String>>,
}

/// The local address a connection to the private listener arrived at.
#[derive(Debug, Clone, Copy)]
struct LocalAddr(SocketAddr);

impl AllowedHosts {
    /// The loopback literals plus `hostnames` (`console.hostnames`), compared without case or a
    /// trailing dot.
    #[must_use]
    pub fn new(hostnames: &[String]) -> Self {
        Self {
            names: Arc::new(hostnames.iter().map(|h| normalize(h)).collect()),
        }
    }

    /// Whether a request whose `Host` header is `host`, arriving at `local`, is answered.
    #[must_use]
    pub fn allows(&self, host: Option<&str>, local: Option<IpAddr>) -> bool {
        let Some(name) = host.and_then(host_part) else {
            return false;
        };
        let name = normalize(name);
        if name == "localhost" {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            return ip.is_loopback() || Some(ip) == local;
        }
        self.names.contains(&name)
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The name in a `Host` value: `[v6]`'s address, else what precedes a numeric `:port`.
fn host_part(host: &str) -> Option<&str> {
    if let Some(rest) = host.strip_prefix('[') {
        let (ip, after) = rest.split_once(']')?;
        return (after.is_empty() || port_ok(after.strip_prefix(':')?)).then_some(ip);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port_ok(port) && !name.contains(':') => Some(name),
        Some(_) => None,
        None => (!host.is_empty()).then_some(host),
    }
}

fn port_ok(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
}

/// Notes a private connection's local address for [`guard`] (the server's `on_connect`).
pub fn on_connect(conn: &dyn Any, ext: &mut Extensions) {
    if let Some(local) = conn
        .downcast_ref::<actix_web::rt::net::TcpStream>()
        .and_then(|s| s.local_addr().ok())
    {
        ext.insert(LocalAddr(local));
    }
}

/// Middleware of the private listener: 421 for a `Host` it is not configured for. Without
/// [`AllowedHosts`] in the app's data every request is refused.
///
/// # Errors
/// What the wrapped service returns.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    let local = req.conn_data::<LocalAddr>().map(|l| l.0.ip());
    let allowed = req
        .app_data::<web::Data<AllowedHosts>>()
        .is_some_and(|a| a.allows(host.as_deref(), local));
    if allowed {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    }
    let client = req.peer_addr().map(|a| a.ip());
    tracing::warn!(
        host = host.as_deref().unwrap_or(""),
        ?client,
        path = req.path(),
        "private listener: refused a request for a host it does not serve (console.hostnames)"
    );
    let res = HttpResponse::build(StatusCode::MISDIRECTED_REQUEST)
        .content_type("text/plain; charset=utf-8")
        .body("421 this listener does not serve that host name (console.hostnames)\n");
    Ok(req.into_response(res).map_into_right_body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_configured_and_local_names_only() {
        let a = AllowedHosts::new(&["Console.Internal.".into()]);
        let local: IpAddr = "10.1.2.3".parse().unwrap();
        for ok in [
            "localhost",
            "localhost:9464",
            "LOCALHOST.:1",
            "127.0.0.1",
            "127.0.0.1:9464",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:9464",
            "console.internal",
            "console.internal:9464",
            "10.1.2.3:9464",
        ] {
            assert!(a.allows(Some(ok), Some(local)), "{ok}");
        }
        for no in [
            "attacker.example",
            "attacker.example:9464",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "10.1.2.4:9464",
            "[::2]:9464",
            "::1",
            "localhost:http",
            "localhost:",
            "",
        ] {
            assert!(!a.allows(Some(no), Some(local)), "{no}");
        }
        assert!(!a.allows(None, Some(local)), "no Host");
        assert!(!a.allows(Some("10.1.2.3"), None), "local address unknown");
    }
}
