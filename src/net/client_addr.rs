//! Whose request it is behind a reverse proxy: `server.trusted_proxies` names the proxies (CIDR
//! blocks), and only on a connection from one of them are `Forwarded` (RFC 7239) and
//! `X-Forwarded-For` read. Their hops are walked from the right, skipping trusted proxies; the
//! first address that is not one is the client. A hop that names no usable address (`unknown`,
//! an obfuscated `_id`, garbage, more hops than [`MAX_HOPS`]) stops the walk at the last trusted
//! hop. A proxy sets one of the two headers; when a request carries both and they lead to
//! different clients, the one the proxy did not write is a client's own invention and neither is
//! believed: the client is the connecting proxy.
//!
//! Everything a client may write sits to the left of what the proxies append, so walking from
//! the right never reaches it while a trusted proxy vouches for the hop before.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Most hops walked from the right before giving up (a chain of real proxies is a handful).
pub const MAX_HOPS: usize = 32;
/// Longest single hop (one `Forwarded` element, one `X-Forwarded-For` entry) read, in bytes.
const MAX_HOP_BYTES: usize = 256;

/// The address of the client a request came from: the TCP peer, or behind a trusted proxy the
/// address its forwarding header names. Set on every request of the public listener (request
/// extensions; [`crate::http::client_addr`] reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// One CIDR block: an address and how many leading bits of it count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` (an IPv4-mapped IPv6 address counting as its IPv4 address) is in the block.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/8`, `2001:db8::/32`, or a bare address (one host).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let net = net.to_canonical();
        let width: u8 = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= width && !p.starts_with('+') => n,
                _ => return Err(format!("prefix /{p}: a number from 0 to {width}")),
            },
        };
        let cidr = Self { net, prefix };
        let base = match net {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        if base != net {
            return Err(format!(
                "bits are set past the /{prefix} prefix (the block is {base}/{prefix})"
            ));
        }
        Ok(cidr)
    }
}

/// The proxies whose forwarding headers (and PROXY protocol headers) are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<Cidr>,
}

impl TrustedProxies {
    /// The blocks of `server.trusted_proxies`.
    ///
    /// # Errors
    /// One line per entry that is not a CIDR block, naming it.
    pub fn parse(list: &[String]) -> Result<Self, Vec<String>> {
        let mut nets = Vec::with_capacity(list.len());
        let mut problems = Vec::new();
        for (i, entry) in list.iter().enumerate() {
            match entry.parse::<Cidr>() {
                Ok(c) => nets.push(c),
                Err(e) => problems.push(format!(
                    "server.trusted_proxies[{i}] {entry:?}: {e}; give CIDR blocks such as \
                     \"10.0.0.0/8\" or \"127.0.0.1/32\""
                )),
            }
        }
        if problems.is_empty() {
            Ok(Self { nets })
        } else {
            Err(problems)
        }
    }

    /// Whether no proxy is trusted (the default: forwarding headers are never read).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|n| n.contains(ip))
    }
}

/// The client of a request that arrived from `peer` with these `Forwarded` and
/// `X-Forwarded-For` header values (each in the order received). From a peer that is not a
/// trusted proxy, the headers are not read: the client is the peer.
#[must_use]
pub fn resolve(
    peer: IpAddr,
    trusted: &TrustedProxies,
    forwarded: &[&[u8]],
    x_forwarded_for: &[&[u8]],
) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        return peer;
    }
    let by_forwarded =
        (!forwarded.is_empty()).then(|| walk(peer, trusted, forwarded_hops(forwarded)));
    let by_xff = (!x_forwarded_for.is_empty())
        .then(|| walk(peer, trusted, x_forwarded_for_hops(x_forwarded_for)));
    match (by_forwarded, by_xff) {
        (Some(a), Some(b)) if a != b => peer,
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => peer,
    }
}

/// Walks `hops` (nearest first) from the trusted `peer`: the first untrusted address, else the
/// last trusted hop.
fn walk(peer: IpAddr, trusted: &TrustedProxies, hops: impl Iterator<Item = Hop>) -> IpAddr {
    let mut last = peer;
    for hop in hops.take(MAX_HOPS) {
        match hop {
            Some(ip) if trusted.contains(ip) => last = ip,
            Some(ip) => return ip,
            None => return last,
        }
    }
    last
}

/// One hop: its address, or `None` when it names none usable.
type Hop = Option<IpAddr>;

/// `X-Forwarded-For` hops, nearest (rightmost) first, across repeated headers.
fn x_forwarded_for_hops<'a>(values: &'a [&'a [u8]]) -> impl Iterator<Item = Hop> + 'a {
    values
        .iter()
        .rev()
        .flat_map(|v| v.rsplit(|b| *b == b','))
        .map(node)
}

/// `Forwarded` hops, nearest (rightmost) first: the `for=` of each element.
fn forwarded_hops<'a>(values: &'a [&'a [u8]]) -> impl Iterator<Item = Hop> + 'a {
    values
        .iter()
        .rev()
        .flat_map(|v| RevSplit::new(v, b','))
        .map(forwarded_for)
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.60;proto=http;by=203.0.113.43`).
fn forwarded_for(element: &[u8]) -> Hop {
    if element.len() > MAX_HOP_BYTES {
        return None;
    }
    let mut pairs: Vec<&[u8]> = RevSplit::new(element, b';').collect();
    pairs.reverse();
    let mut found = None;
    for pair in pairs {
        let pair = trim(pair);
        if pair.is_empty() {
            continue;
        }
        let eq = pair.iter().position(|b| *b == b'=')?;
        let (name, value) = (trim(&pair[..eq]), trim(&pair[eq + 1..]));
        if name.eq_ignore_ascii_case(b"for") {
            if found.is_some() {
                // Two `for` in one element: which one is meant is anyone's guess.
                return None;
            }
            found = Some(value);
        }
    }
    let value = found?;
    let value = match value {
        [b'"', inner @ .., b'"'] => {
            if inner.contains(&b'\\') || inner.contains(&b'"') {
                return None;
            }
            inner
        }
        _ => value,
    };
    node(value)
}

/// A node: `192.0.2.60`, `192.0.2.60:4711`, `[2001:db8::17]`, `[2001:db8::17]:4711`, or a
/// bare IPv6 address (as `X-Forwarded-For` often has it). `unknown`, obfuscated identifiers
/// (`_hidden`) and anything else are `None`.
fn node(raw: &[u8]) -> Hop {
    let raw = trim(raw);
    if raw.is_empty() || raw.len() > 64 {
        return None;
    }
    let s = std::str::from_utf8(raw).ok()?;
    if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return v6
            .parse::<Ipv6Addr>()
            .ok()
            .map(|a| IpAddr::V6(a).to_canonical());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    let (host, port) = s.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

fn trim(b: &[u8]) -> &[u8] {
    let is_space = |c: &u8| *c == b' ' || *c == b'\t';
    let start = b.iter().position(|c| !is_space(c)).unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !is_space(c))
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// Pieces of `text` between separators that are outside double quotes, from the right.
struct RevSplit<'a> {
    rest: Option<&'a [u8]>,
    sep: u8,
}

impl<'a> RevSplit<'a> {
    fn new(text: &'a [u8], sep: u8) -> Self {
        Self {
            rest: Some(text),
            sep,
        }
    }
}

impl<'a> Iterator for RevSplit<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let text = self.rest?;
        let mut quoted = false;
        for i in (0..text.len()).rev() {
            match text[i] {
                b'"' => quoted = !quoted,
                c if c == self.sep && !quoted => {
                    self.rest = Some(&text[..i]);
                    return Some(&text[i + 1..]);
                }
                _ => {}
            }
        }
        self.rest = None;
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted(list: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    fn xff(peer: &str, values: &[&str]) -> IpAddr {
        let t = trusted(&["127.0.0.1/32", "10.0.0.0/8"]);
        let v: Vec<&[u8]> = values.iter().map(|s| s.as_bytes()).collect();
        resolve(ip(peer), &t, &[], &v)
    }

    fn fwd(peer: &str, values: &[&str]) -> IpAddr {
        let t = trusted(&["127.0.0.1/32", "10.0.0.0/8", "2001:db8:ffff::/48"]);
        let v: Vec<&[u8]> = values.iter().map(|s| s.as_bytes()).collect();
        resolve(ip(peer), &t, &v, &[])
    }

    #[test]
    fn cidr_blocks_parse_and_match() {
        let t = trusted(&["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "0.0.0.0/0"]);
        assert!(t.contains(ip("10.200.3.4")));
        assert!(t.contains(ip("::ffff:10.1.1.1")));
        assert!(t.contains(ip("2001:db8:1::9")));
        assert!(!t.contains(ip("2001:db9::1")));
        let only = trusted(&["192.0.2.7"]);
        assert!(only.contains(ip("192.0.2.7")) && !only.contains(ip("192.0.2.8")));
        assert!(trusted(&["::/0"]).contains(ip("2001:db8::1")));
        assert!(!trusted(&["::/0"]).contains(ip("192.0.2.1")));
        assert!(TrustedProxies::default().is_empty());
    }

    #[test]
    fn bad_cidr_blocks_are_named() {
        let list: Vec<String> = [
            "10.0.0.1/8",
            "10.0.0.0/33",
            "example.com",
            "10.0.0.0/x",
            "ok",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let problems = TrustedProxies::parse(&list).unwrap_err();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(
            problems[0].contains("server.trusted_proxies[0]"),
            "{problems:?}"
        );
        assert!(problems[0].contains("10.0.0.0/8"), "{problems:?}");
        assert!(problems[1].contains("0 to 32"), "{problems:?}");
        assert!(problems[2].contains("not an IP address"), "{problems:?}");
    }

    #[test]
    fn x_forwarded_for_is_walked_from_the_right() {
        // One proxy: the address it appended.
        assert_eq!(xff("127.0.0.1", &["203.0.113.5"]), ip("203.0.113.5"));
        // A client's own entries sit to the left of it and are never reached.
        assert_eq!(
            xff("127.0.0.1", &["6.6.6.6, 203.0.113.5"]),
            ip("203.0.113.5")
        );
        // Trusted hops are skipped, across repeated headers.
        assert_eq!(
            xff("127.0.0.1", &["198.51.100.1, 203.0.113.5", "10.1.2.3"]),
            ip("203.0.113.5")
        );
        // Every hop trusted: the last (leftmost) of them.
        assert_eq!(xff("127.0.0.1", &["10.0.0.2,10.0.0.3"]), ip("10.0.0.2"));
        // IPv6, with and without brackets and ports; IPv4 with a port.
        assert_eq!(xff("127.0.0.1", &["2001:db8::1"]), ip("2001:db8::1"));
        assert_eq!(xff("127.0.0.1", &["[2001:db8::1]:443"]), ip("2001:db8::1"));
        assert_eq!(xff("127.0.0.1", &["203.0.113.5:5123"]), ip("203.0.113.5"));
        assert_eq!(xff("127.0.0.1", &["::ffff:203.0.113.5"]), ip("203.0.113.5"));
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        assert_eq!(xff("198.51.100.9", &["203.0.113.5"]), ip("198.51.100.9"));
        assert_eq!(
            fwd("198.51.100.9", &["for=203.0.113.5"]),
            ip("198.51.100.9")
        );
        let none = TrustedProxies::default();
        assert_eq!(
            resolve(ip("127.0.0.1"), &none, &[b"for=1.2.3.4"], &[b"1.2.3.4"]),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn forwarded_follows_rfc_7239() {
        assert_eq!(
            fwd("127.0.0.1", &["for=192.0.2.60;proto=http;by=203.0.113.43"]),
            ip("192.0.2.60")
        );
        assert_eq!(
            fwd("127.0.0.1", &["For=\"[2001:db8:cafe::17]:4711\""]),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(
            fwd("127.0.0.1", &["for=\"192.0.2.43:47011\""]),
            ip("192.0.2.43")
        );
        assert_eq!(
            fwd(
                "127.0.0.1",
                &["for=192.0.2.43, for=198.51.100.17;by=10.0.0.1"]
            ),
            ip("198.51.100.17")
        );
        // Trusted hops skipped, repeated headers in order, the proto param before for=.
        assert_eq!(
            fwd("127.0.0.1", &["for=192.0.2.43", "proto=https;for=10.9.9.9"]),
            ip("192.0.2.43")
        );
        // A quoted comma does not split an element.
        assert_eq!(
            fwd(
                "127.0.0.1",
                &["for=198.51.100.1;ext=\"a,b\", for=192.0.2.43;ext=\"x,y\""]
            ),
            ip("192.0.2.43")
        );
        // An unterminated quote a client wrote on the left cannot swallow the proxy's element.
        assert_eq!(
            fwd("127.0.0.1", &["for=\"1.2.3.4, for=192.0.2.43"]),
            ip("192.0.2.43")
        );
    }

    #[test]
    fn unknown_and_obfuscated_hops_stop_at_the_last_trusted_one() {
        assert_eq!(fwd("127.0.0.1", &["for=unknown"]), ip("127.0.0.1"));
        assert_eq!(
            fwd("127.0.0.1", &["for=192.0.2.1, for=_hidden, for=10.0.0.5"]),
            ip("10.0.0.5")
        );
        assert_eq!(fwd("127.0.0.1", &["for=\"_gazonk\""]), ip("127.0.0.1"));
        assert_eq!(fwd("127.0.0.1", &["proto=https"]), ip("127.0.0.1"));
        assert_eq!(
            fwd("127.0.0.1", &["for=1.2.3.4;for=5.6.7.8"]),
            ip("127.0.0.1")
        );
        assert_eq!(xff("127.0.0.1", &["unknown"]), ip("127.0.0.1"));
        assert_eq!(
            xff("127.0.0.1", &["203.0.113.5, unknown, 10.0.0.8"]),
            ip("10.0.0.8")
        );
    }

    #[test]
    fn garbage_is_never_an_address() {
        for bad in [
            "",
            " ",
            ",",
            "not an address",
            "300.1.1.1",
            "1.2.3.4:99999999",
            "1.2.3.4:",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "[1.2.3.4]",
            "1.2.3.4 5.6.7.8",
            "\u{feff}1.2.3.4",
            "1.2.3.4\0",
        ] {
            assert_eq!(xff("127.0.0.1", &[bad]), ip("127.0.0.1"), "{bad:?}");
            let f = format!("for={bad}");
            assert_eq!(fwd("127.0.0.1", &[&f]), ip("127.0.0.1"), "{f:?}");
        }
        assert_eq!(fwd("127.0.0.1", &["for=\"1.2.3.4\\\"\""]), ip("127.0.0.1"));
        assert_eq!(fwd("127.0.0.1", &["for"]), ip("127.0.0.1"));
        assert_eq!(fwd("127.0.0.1", &["for=\""]), ip("127.0.0.1"));
        // Bytes that are not text.
        let t = trusted(&["127.0.0.1/32"]);
        assert_eq!(
            resolve(ip("127.0.0.1"), &t, &[], &[b"\xff\xfe1.2.3.4"]),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn too_many_hops_and_huge_headers_are_bounded() {
        // More trusted hops than are walked: the walk ends at the last one it saw.
        let chain = vec!["10.0.0.1"; MAX_HOPS + 5].join(", ");
        assert_eq!(
            xff("127.0.0.1", &[&format!("203.0.113.5, {chain}")]),
            ip("10.0.0.1")
        );
        // A huge header a client sent to the left of the proxy's hop does not matter.
        let junk = "x".repeat(1 << 20);
        assert_eq!(
            xff("127.0.0.1", &[&format!("{junk}, 203.0.113.5")]),
            ip("203.0.113.5")
        );
        let many = vec!["1.1.1.1"; 100_000].join(",");
        assert_eq!(
            xff("127.0.0.1", &[&format!("{many},203.0.113.5")]),
            ip("203.0.113.5")
        );
        assert_eq!(
            fwd("127.0.0.1", &[&format!("for={junk}, for=203.0.113.5")]),
            ip("203.0.113.5")
        );
        // A hop that is itself too long names nobody.
        let long = format!("for=192.0.2.1;ext=\"{}\"", "y".repeat(1000));
        assert_eq!(fwd("127.0.0.1", &[&long]), ip("127.0.0.1"));
        assert_eq!(xff("127.0.0.1", &[&junk]), ip("127.0.0.1"));
    }

    #[test]
    fn both_headers_must_agree() {
        let t = trusted(&["127.0.0.1/32"]);
        // nginx appends to X-Forwarded-For and passes a client's own Forwarded through.
        assert_eq!(
            resolve(ip("127.0.0.1"), &t, &[b"for=6.6.6.6"], &[b"203.0.113.5"]),
            ip("127.0.0.1")
        );
        assert_eq!(
            resolve(
                ip("127.0.0.1"),
                &t,
                &[b"for=203.0.113.5"],
                &[b"203.0.113.5"]
            ),
            ip("203.0.113.5")
        );
        // Without either header, the peer.
        assert_eq!(resolve(ip("127.0.0.1"), &t, &[], &[]), ip("127.0.0.1"));
        // An IPv4-mapped peer counts as its IPv4 address.
        assert_eq!(
            resolve(ip("::ffff:127.0.0.1"), &t, &[], &[b"203.0.113.5"]),
            ip("203.0.113.5")
        );
    }
}
