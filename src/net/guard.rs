//! Address classification for the SSRF guard and the DNS resolver that applies it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Marker text of every refusal, so errors from deep inside the HTTP stack can be recognised.
pub const REFUSED: &str = "refused by the SSRF guard";

/// Whether `ip` is anything but a public unicast address.
#[must_use]
pub fn is_forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_v4(v4),
        IpAddr::V6(v6) => is_forbidden_v6(v6),
    }
}

fn is_forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16, the cloud metadata range
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

fn is_forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_forbidden_v4(v4);
    }
    let seg = ip.segments();
    // NAT64 (64:ff9b::/96) and IPv4-compatible (::/96) embed an IPv4 address.
    if (seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0, 0, 0, 0])
        || seg[..6] == [0, 0, 0, 0, 0, 0]
    {
        let v4 = Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            (seg[6] & 0xff) as u8,
            (seg[7] >> 8) as u8,
            (seg[7] & 0xff) as u8,
        );
        return ip.is_unspecified() || ip.is_loopback() || is_forbidden_v4(v4);
    }
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local, incl. fd00:ec2::254 metadata
        || (seg[0] & 0xffc0) == 0xfe80 // link-local
        || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
        || (seg[0] == 0x2001 && seg[1] < 0x0200) // IETF protocol assignments, Teredo
        || seg[0] == 0x2002 // 6to4 may tunnel to anything
        || (seg[0] == 0x0100 && seg[1..4] == [0, 0, 0]) // discard-only
}

/// Checks a URL's scheme and, for IP literals, its address (names are checked at DNS time).
///
/// # Errors
/// Why the URL is refused.
pub fn check_url(url: &url::Url, allow_private: bool) -> Result<(), String> {
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return Err(format!("{REFUSED}: plain http:// is not allowed")),
        other => return Err(format!("{REFUSED}: scheme {other:?}")),
    }
    if allow_private {
        return Ok(());
    }
    match url.host() {
        Some(url::Host::Ipv4(ip)) if is_forbidden_ip(IpAddr::V4(ip)) => {
            Err(format!("{REFUSED}: {ip}"))
        }
        Some(url::Host::Ipv6(ip)) if is_forbidden_ip(IpAddr::V6(ip)) => {
            Err(format!("{REFUSED}: {ip}"))
        }
        Some(url::Host::Domain(d))
            if d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost") =>
        {
            Err(format!("{REFUSED}: {d}"))
        }
        Some(_) => Ok(()),
        None => Err(format!("{REFUSED}: no host")),
    }
}

/// The refusal of a name that resolves only to forbidden addresses, as it may be told to a
/// remote party: it names the host the party gave, never what it resolved to.
fn refused_name(host: &str) -> String {
    format!("{REFUSED}: {host} is not a public destination")
}

/// How long [`check_target`] waits for a name to resolve before it lets the URL through (the
/// guard checks it again when it is used).
const TARGET_LOOKUP: std::time::Duration = std::time::Duration::from_secs(2);

/// Checks a URL a caller asks switchboard to call later (an A2A push config) as the guard would
/// when it is used: [`check_url`], then, for a name, its addresses, refused when all of them are
/// forbidden. A name that does not resolve in time, or at all, passes (it may by then; the
/// guard checks it again). The error text never names the resolved addresses.
///
/// # Errors
/// Why the URL is refused.
pub async fn check_target(url: &url::Url, allow_private: bool) -> Result<(), String> {
    check_url(url, allow_private)?;
    if allow_private {
        return Ok(());
    }
    let Some(url::Host::Domain(host)) = url.host() else {
        return Ok(());
    };
    let lookup = tokio::net::lookup_host((host, 0));
    let addrs: Vec<SocketAddr> = match tokio::time::timeout(TARGET_LOOKUP, lookup).await {
        Ok(Ok(addrs)) => addrs.collect(),
        Ok(Err(_)) | Err(_) => return Ok(()),
    };
    if !addrs.is_empty() && addrs.iter().all(|a| is_forbidden_ip(a.ip())) {
        tracing::warn!(
            host,
            addresses = ?addrs.iter().map(SocketAddr::ip).collect::<Vec<_>>(),
            "SSRF guard: the name resolves only to non-public addresses; refused"
        );
        return Err(refused_name(host));
    }
    Ok(())
}

/// Resolves names with the system resolver and drops forbidden addresses; a name with only
/// forbidden addresses fails.
#[derive(Debug)]
pub struct GuardedResolver {
    /// Whether private and loopback addresses are allowed (`net.allow_private_addresses`).
    pub allow_private: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| allow_private || !is_forbidden_ip(a.ip()))
                .collect();
            if allowed.is_empty() {
                // What the name resolved to is logged for the operator, never put in the error:
                // its text may reach a remote party (a 401's reason, a JSON-RPC error).
                tracing::warn!(
                    host = %host,
                    addresses = ?addrs.iter().map(SocketAddr::ip).collect::<Vec<_>>(),
                    "SSRF guard: the name resolves only to non-public addresses; refused"
                );
                return Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    refused_name(&host),
                ))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            let it: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(it)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(u: &str) -> bool {
        check_url(&url::Url::parse(u).unwrap(), false).is_err()
    }

    #[test]
    fn odd_spellings_of_private_addresses_are_refused() {
        for u in [
            "https://127.0.0.1/",
            "https://127.1/",
            "https://0x7f.0.0.1/",
            "https://0177.0.0.1/",
            "https://2130706433/",
            "https://0/",
            "https://0.0.0.0/",
            "https://10.0.0.1/",
            "https://172.16.5.4/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:a9fe:a9fe]/",
            "https://[fd00:ec2::254]/",
            "https://[fe80::1]/",
            "https://[64:ff9b::7f00:1]/",
            "https://[::127.0.0.1]/",
            "https://localhost/",
            "https://api.localhost/",
            "https://224.0.0.1/",
            "https://255.255.255.255/",
            "http://example.com/",
            "file:///etc/passwd",
            "gopher://example.com/",
        ] {
            assert!(refused(u), "{u} must be refused");
        }
    }

    #[tokio::test]
    async fn the_resolver_drops_private_answers() {
        use reqwest::dns::Resolve;
        let name = || "localhost".parse::<reqwest::dns::Name>().unwrap();
        let err = GuardedResolver {
            allow_private: false,
        }
        .resolve(name())
        .await
        .err()
        .unwrap();
        // Refused by the guard, naming the host; what it resolved to is logged, not told.
        let text = err.to_string();
        assert!(
            text.contains(REFUSED) && text.contains("localhost"),
            "{err}"
        );
        assert!(
            !text.contains("127.0.0.1") && !text.contains("::1"),
            "the refusal names no resolved address: {err}"
        );
        let addrs: Vec<_> = GuardedResolver {
            allow_private: true,
        }
        .resolve(name())
        .await
        .unwrap()
        .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }

    #[tokio::test]
    async fn a_target_is_checked_as_the_guard_would_use_it() {
        let check = |u: &str, allow: bool| {
            let u = url::Url::parse(u).unwrap();
            async move { check_target(&u, allow).await }
        };
        for u in [
            "https://127.0.0.1/hook",
            "https://169.254.169.254/latest",
            "https://[::1]/hook",
            "https://10.1.2.3/hook",
            "https://localhost/hook",
            "http://example.com/hook",
        ] {
            let err = check(u, false).await.expect_err(u);
            assert!(err.contains(REFUSED), "{u}: {err}");
        }
        // The development switch lets loopback and plain http through, as it does at delivery.
        check("http://127.0.0.1:9/hook", true).await.unwrap();
        check("http://localhost:9/hook", true).await.unwrap();
        check("https://93.184.215.14/hook", false).await.unwrap();
    }

    #[test]
    fn public_addresses_pass() {
        for u in [
            "https://93.184.215.14/",
            "https://[2606:4700::1111]/",
            "https://example.com/x",
        ] {
            assert!(!refused(u), "{u} must pass");
        }
        assert!(check_url(&url::Url::parse("http://127.0.0.1:9/").unwrap(), true).is_ok());
    }
}
