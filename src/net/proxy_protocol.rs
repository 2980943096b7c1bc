//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer in TCP mode
//! writes before anything else on a connection, naming the client it accepted. Read on the
//! public HTTP listener with `server.proxy_protocol` and on the SMTP listener with
//! `email.proxy_protocol`.
//!
//! Exactly the header's bytes are read, nothing of the protocol behind it: version 1 is one text
//! line of at most 107 bytes (`PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\n`), version 2 a
//! 16-byte binary header and the length it gives (at most [`MAX_V2_BODY`]). TLVs are skipped.
//! `LOCAL` (version 2) and `UNKNOWN` (version 1) name no client: the connection is the
//! balancer's own (a health check) and counts as the socket's peer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::client_addr::TrustedProxies;

/// How long a connection may take to send its header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest version 2 address block (addresses and TLVs) accepted.
pub const MAX_V2_BODY: usize = 2048;
/// The signature that opens a version 2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest version 1 line, CRLF included.
const V1_MAX: usize = 107;
/// The shortest version 1 line: `PROXY UNKNOWN\r\n`.
const V1_MIN: usize = 15;

/// Why a connection's header was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// No header, or a malformed one.
    #[error("PROXY protocol header: {0}")]
    Malformed(&'static str),
    /// The header did not arrive within [`HEADER_TIMEOUT`].
    #[error("PROXY protocol header not received in time")]
    TimedOut,
    /// The connection failed or ended first.
    #[error("PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
    /// A peer outside a non-empty `server.trusted_proxies` named a client.
    #[error("PROXY protocol header naming a client from a peer not in server.trusted_proxies")]
    Untrusted,
}

/// The client of a connection from `peer` that starts with a PROXY protocol header: the
/// address the header names, or `peer` when it names none (`LOCAL`, `UNKNOWN`). Only a peer in
/// `trusted` may name a client, or anyone when `trusted` is empty. Both listeners admit their
/// connections with it.
///
/// # Errors
/// No valid header in time, or a client named by a peer that may not; the connection is then
/// to be closed.
pub async fn read_client<S: AsyncRead + Unpin>(
    stream: &mut S,
    peer: SocketAddr,
    trusted: &TrustedProxies,
) -> Result<SocketAddr, HeaderError> {
    match read_header(stream).await? {
        Some(_) if !trusted.is_empty() && !trusted.contains(peer.ip()) => {
            Err(HeaderError::Untrusted)
        }
        Some(source) => Ok(SocketAddr::new(source.ip().to_canonical(), source.port())),
        None => Ok(peer),
    }
}

/// Reads a PROXY protocol header within [`HEADER_TIMEOUT`]: the client's address, or `None`
/// when the header names none (`LOCAL`, `UNKNOWN`: the socket's peer stands).
///
/// # Errors
/// No valid header in time; the connection is then to be closed.
pub async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<Option<SocketAddr>, HeaderError> {
    read_header_within(stream, HEADER_TIMEOUT).await
}

async fn read_header_within<S: AsyncRead + Unpin>(
    stream: &mut S,
    timeout: Duration,
) -> Result<Option<SocketAddr>, HeaderError> {
    tokio::time::timeout(timeout, read(stream))
        .await
        .unwrap_or(Err(HeaderError::TimedOut))
}

async fn read<S: AsyncRead + Unpin>(stream: &mut S) -> Result<Option<SocketAddr>, HeaderError> {
    // Both versions are at least 15 bytes long, so these are the header's.
    let mut head = [0u8; V1_MAX];
    stream.read_exact(&mut head[..V1_MIN]).await?;
    if head[..12] == V2_SIGNATURE {
        stream.read_exact(&mut head[V1_MIN..16]).await?;
        let len = usize::from(u16::from_be_bytes([head[14], head[15]]));
        if len > MAX_V2_BODY {
            return Err(HeaderError::Malformed("version 2 address block too long"));
        }
        let mut body = vec![0u8; len];
        stream.read_exact(&mut body).await?;
        return v2(head[12], head[13], &body);
    }
    if !head.starts_with(b"PROXY ") {
        return Err(HeaderError::Malformed("missing"));
    }
    // Version 1: read up to the CRLF and not a byte past it. While the last byte read is not a
    // CR, the line needs at least two more bytes (CR LF); after a CR, at least one.
    let mut n = V1_MIN;
    while !head[..n].ends_with(b"\r\n") {
        let need = if head[n - 1] == b'\r' { 1 } else { 2 };
        if n + need > V1_MAX {
            return Err(HeaderError::Malformed("version 1 line too long"));
        }
        stream.read_exact(&mut head[n..n + need]).await?;
        n += need;
    }
    v1(&head[..n - 2])
}

/// A version 1 line without its CRLF.
fn v1(line: &[u8]) -> Result<Option<SocketAddr>, HeaderError> {
    const BAD: HeaderError = HeaderError::Malformed("malformed version 1 line");
    let line = std::str::from_utf8(line).map_err(|_| BAD)?;
    if line.contains(['\r', '\n']) {
        return Err(BAD);
    }
    let fields: Vec<&str> = line.split(' ').collect();
    match fields.as_slice() {
        ["PROXY", "UNKNOWN", ..] => Ok(None),
        ["PROXY", family @ ("TCP4" | "TCP6"), src, dst, sport, dport] => {
            // The destination is checked for form only: it is this listener (or the balancer's).
            let (src, dst_ok) = if *family == "TCP4" {
                let src = src.parse::<Ipv4Addr>().ok().map(IpAddr::V4);
                (src, dst.parse::<Ipv4Addr>().is_ok())
            } else {
                let src = src.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
                (src, dst.parse::<Ipv6Addr>().is_ok())
            };
            let src = src.filter(|_| dst_ok).ok_or(BAD)?;
            let port = |p: &str| -> Result<u16, HeaderError> {
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(BAD);
                }
                p.parse().map_err(|_| BAD)
            };
            port(dport)?;
            Ok(Some(SocketAddr::new(src.to_canonical(), port(sport)?)))
        }
        _ => Err(BAD),
    }
}

/// A version 2 header from its version-and-command byte, its family byte and its body.
fn v2(ver_cmd: u8, family: u8, body: &[u8]) -> Result<Option<SocketAddr>, HeaderError> {
    if ver_cmd >> 4 != 2 {
        return Err(HeaderError::Malformed("unsupported version"));
    }
    match ver_cmd & 0x0f {
        // LOCAL: the balancer's own connection; the addresses, if any, are to be ignored.
        0 => return Ok(None),
        1 => {}
        _ => return Err(HeaderError::Malformed("unknown version 2 command")),
    }
    match family {
        // TCP over IPv4: source and destination addresses, then ports.
        0x11 => {
            let a = body
                .get(..12)
                .ok_or(HeaderError::Malformed("version 2 IPv4 block too short"))?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            let port = u16::from_be_bytes([a[8], a[9]]);
            Ok(Some(SocketAddr::new(IpAddr::V4(ip), port)))
        }
        // TCP over IPv6.
        0x21 => {
            let a = body
                .get(..36)
                .ok_or(HeaderError::Malformed("version 2 IPv6 block too short"))?;
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&a[..16]);
            let ip = IpAddr::V6(Ipv6Addr::from(octets)).to_canonical();
            let port = u16::from_be_bytes([a[32], a[33]]);
            Ok(Some(SocketAddr::new(ip, port)))
        }
        // UNSPEC, or a UNIX socket: no address to speak of; the socket's peer stands.
        0x00 | 0x31 => Ok(None),
        _ => Err(HeaderError::Malformed("unsupported version 2 family")),
    }
}

/// A version 1 header naming `source` (written by tests and by whatever speaks for a balancer).
#[must_use]
pub fn v1_header(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let family = if source.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        source.ip(),
        destination.ip(),
        source.port(),
        destination.port()
    )
    .into_bytes()
}

/// A version 2 header: `PROXY` naming `source`, or `LOCAL` when `None` (a health check).
#[must_use]
pub fn v2_header(source: Option<(SocketAddr, SocketAddr)>) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    match source {
        None => out.extend_from_slice(&[0x20, 0x00, 0, 0]),
        Some((src, dst)) => match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.extend_from_slice(&[0x21, 0x11, 0, 12]);
                out.extend_from_slice(&s.octets());
                out.extend_from_slice(&d.octets());
                out.extend_from_slice(&src.port().to_be_bytes());
                out.extend_from_slice(&dst.port().to_be_bytes());
            }
            (s, d) => {
                let v6 = |ip: IpAddr| match ip {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                out.extend_from_slice(&[0x21, 0x21, 0, 36]);
                out.extend_from_slice(&v6(s).octets());
                out.extend_from_slice(&v6(d).octets());
                out.extend_from_slice(&src.port().to_be_bytes());
                out.extend_from_slice(&dst.port().to_be_bytes());
            }
        },
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Reads a header from `bytes` and returns it with what is left unread.
    async fn parse(bytes: &[u8]) -> (Result<Option<SocketAddr>, HeaderError>, Vec<u8>) {
        let mut cursor = std::io::Cursor::new(bytes.to_vec());
        let got = read_header(&mut cursor).await;
        let at = usize::try_from(cursor.position()).unwrap();
        (got, bytes[at..].to_vec())
    }

    #[tokio::test]
    async fn version_1_is_read_to_its_crlf_and_no_further() {
        let (got, rest) = parse(b"PROXY TCP4 203.0.113.9 192.0.2.1 51234 25\r\nEHLO x\r\n").await;
        assert_eq!(got.unwrap(), Some(sa("203.0.113.9:51234")));
        assert_eq!(rest, b"EHLO x\r\n");
        let (got, rest) =
            parse(b"PROXY TCP6 2001:db8::9 2001:db8::1 4000 443\r\nGET / HTTP/1.1\r\n").await;
        assert_eq!(got.unwrap(), Some(sa("[2001:db8::9]:4000")));
        assert_eq!(rest, b"GET / HTTP/1.1\r\n");
        let (got, rest) = parse(b"PROXY UNKNOWN\r\nGET").await;
        assert_eq!(got.unwrap(), None);
        assert_eq!(rest, b"GET");
        let (got, rest) = parse(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nX").await;
        assert_eq!(got.unwrap(), None);
        assert_eq!(rest, b"X");
        // The writer's own output reads back.
        let h = v1_header(sa("198.51.100.7:1000"), sa("192.0.2.1:80"));
        assert_eq!(parse(&h).await.0.unwrap(), Some(sa("198.51.100.7:1000")));
    }

    #[tokio::test]
    async fn version_2_reads_its_length_and_skips_tlvs() {
        let mut h = v2_header(Some((sa("203.0.113.9:51234"), sa("192.0.2.1:25"))));
        // A TLV (type 0x04, NOOP) appended: the length grows by it.
        h[15] += 4;
        h.extend_from_slice(&[0x04, 0x00, 0x01, 0x00]);
        h.extend_from_slice(b"EHLO x\r\n");
        let (got, rest) = parse(&h).await;
        assert_eq!(got.unwrap(), Some(sa("203.0.113.9:51234")));
        assert_eq!(rest, b"EHLO x\r\n");
        let h = v2_header(Some((sa("[2001:db8::9]:4000"), sa("[2001:db8::1]:443"))));
        assert_eq!(parse(&h).await.0.unwrap(), Some(sa("[2001:db8::9]:4000")));
        let mut local = v2_header(None);
        local.extend_from_slice(b"GET");
        let (got, rest) = parse(&local).await;
        assert_eq!(got.unwrap(), None);
        assert_eq!(rest, b"GET");
    }

    #[tokio::test]
    async fn malformed_headers_are_refused() {
        let mut cases: Vec<Vec<u8>> = vec![
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            b"EHLO client.example\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.9 192.0.2.1 51234\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.9 192.0.2.1 51234 25 9\r\n".to_vec(),
            b"PROXY TCP4 2001:db8::1 192.0.2.1 1 2\r\n".to_vec(),
            b"PROXY TCP6 203.0.113.9 192.0.2.1 1 2\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.9 192.0.2.1 65536 25\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.9 192.0.2.1 +1 25\r\n".to_vec(),
            b"PROXY TCP4  203.0.113.9 192.0.2.1 1 25\r\n".to_vec(),
            b"PROXY UDP4 203.0.113.9 192.0.2.1 1 25\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.9\r192.0.2.1 1 25\r\n".to_vec(),
            b"PROXY TCP4 203.0.113.9 192.0.2.1 1 25\n".to_vec(),
            format!("PROXY TCP4 {}\r\n", "1".repeat(200)).into_bytes(),
            vec![0xff; 40],
        ];
        // Version 2: a bad version, an unknown command, UDP, a short address block, a length
        // over the bound, a truncated body.
        let good = v2_header(Some((sa("203.0.113.9:1"), sa("192.0.2.1:2"))));
        let mut bad_version = good.clone();
        bad_version[12] = 0x11;
        let mut bad_command = good.clone();
        bad_command[12] = 0x22;
        let mut udp = good.clone();
        udp[13] = 0x12;
        let mut short = good[..16].to_vec();
        short[15] = 4;
        short.extend_from_slice(&[1, 2, 3, 4]);
        let mut huge = good[..16].to_vec();
        huge[14] = 0xff;
        huge[15] = 0xff;
        huge.extend_from_slice(&[0; 64]);
        let truncated = good[..20].to_vec();
        cases.extend([bad_version, bad_command, udp, short, huge, truncated]);
        for case in cases {
            let (got, _) = parse(&case).await;
            assert!(
                got.is_err(),
                "{:?} gave {got:?}",
                String::from_utf8_lossy(&case)
            );
        }
        // Fewer bytes than a header: the connection ended first.
        assert!(matches!(parse(b"PROXY").await.0, Err(HeaderError::Io(_))));
    }

    #[tokio::test]
    async fn only_trusted_peers_may_name_a_client() {
        let header = v1_header(sa("203.0.113.9:1"), sa("192.0.2.1:25"));
        let trusted = TrustedProxies::parse(&["10.0.0.0/8".to_owned()]).unwrap();
        let read = |peer: &str, trusted: TrustedProxies, bytes: Vec<u8>| {
            let peer = sa(peer);
            async move {
                let mut cursor = std::io::Cursor::new(bytes);
                read_client(&mut cursor, peer, &trusted).await
            }
        };
        let got = read("10.1.1.1:5", trusted.clone(), header.clone()).await;
        assert_eq!(got.unwrap(), sa("203.0.113.9:1"));
        let got = read("192.0.2.9:5", trusted.clone(), header.clone()).await;
        assert!(matches!(got, Err(HeaderError::Untrusted)), "{got:?}");
        // Anyone, when no proxy is listed.
        let got = read("192.0.2.9:5", TrustedProxies::default(), header).await;
        assert_eq!(got.unwrap(), sa("203.0.113.9:1"));
        // A header naming nobody names nobody, whoever sends it.
        let got = read("192.0.2.9:5", trusted, v2_header(None)).await;
        assert_eq!(got.unwrap(), sa("192.0.2.9:5"));
    }

    #[tokio::test]
    async fn a_silent_connection_times_out() {
        let (mut ours, mut theirs) = tokio::io::duplex(64);
        // Half a header, then silence.
        tokio::io::AsyncWriteExt::write_all(&mut theirs, b"PROXY TCP4 1.2.3.4 ")
            .await
            .unwrap();
        let got = read_header_within(&mut ours, Duration::from_millis(50)).await;
        assert!(matches!(got, Err(HeaderError::TimedOut)), "{got:?}");
    }
}
