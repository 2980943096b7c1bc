//! The health probe `switchboard healthcheck` makes of a server on this host: one plain
//! HTTP/1.1 `GET` of its own health route over loopback, without the SSRF guard (it only ever
//! talks to the local listener) and without a client library, so a container needs no curl.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The address to probe a listener bound to `bind` at: itself, or loopback of its family when
/// it is bound to every interface (`0.0.0.0`, `[::]`).
#[must_use]
pub fn local_addr(bind: SocketAddr) -> SocketAddr {
    let ip = match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bind.port())
}

/// `GET {path}` of the server at `addr`; succeeds when it answers `200` within `timeout`. With
/// `proxy_protocol` (the listener's `server.proxy_protocol`), a PROXY protocol v2 `LOCAL`
/// header goes first.
///
/// # Errors
/// What went wrong: no connection, no answer in time, or the status it answered.
pub async fn probe(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
    proxy_protocol: bool,
) -> Result<(), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let mut request = if proxy_protocol {
            super::proxy_protocol::v2_header(None)
        } else {
            Vec::new()
        };
        request.extend_from_slice(
            format!(
                "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: switchboard-healthcheck\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        stream
            .write_all(&request)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        // The status line is all that is needed; read until it is complete.
        let mut head = Vec::with_capacity(256);
        let mut buf = [0u8; 256];
        while !head.contains(&b'\n') && head.len() < 4096 {
            let n = stream
                .read(&mut buf)
                .await
                .map_err(|e| format!("{addr}: {e}"))?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&head);
        let status_line = text.lines().next().unwrap_or_default().trim().to_owned();
        match status_line.split_whitespace().nth(1) {
            Some("200") if status_line.starts_with("HTTP/1.") => Ok(()),
            Some(_) => Err(format!("{addr}{path} answered {status_line:?}")),
            None => Err(format!("{addr}{path}: no HTTP answer")),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("{addr}{path}: no answer within {timeout:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_interface_is_probed_on_loopback() {
        let at = |s: &str| local_addr(s.parse().unwrap()).to_string();
        assert_eq!(at("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(at("[::]:8080"), "[::1]:8080");
        assert_eq!(at("10.1.2.3:80"), "10.1.2.3:80");
    }

    #[tokio::test]
    async fn only_a_200_passes() {
        for (answer, ok) in [
            ("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", true),
            ("HTTP/1.1 503 Service Unavailable\r\n\r\n", false),
            ("SSH-2.0-OpenSSH_9.2\r\n", false),
        ] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(answer.as_bytes()).await.unwrap();
            });
            let got = probe(addr, "/healthz", Duration::from_secs(5), false).await;
            assert_eq!(got.is_ok(), ok, "{answer:?}: {got:?}");
            server.await.unwrap();
        }
        // Nothing listening.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = probe(addr, "/healthz", Duration::from_secs(5), false)
            .await
            .unwrap_err();
        assert!(err.contains("cannot connect"), "{err}");
    }
}
