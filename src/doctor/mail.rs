//! The mail checks of `switchboard doctor`: MX, SPF (followed through `include:` and
//! `redirect=`), the DKIM record against our key, DMARC, and the SMTP certificate (through
//! [`super::cert`]), with DNS read as the email transport reads it.

use super::cert::{cert_checks, smtp_certificate};
use super::*;

/// DNS as the doctor reads it.
enum Dns {
    /// Only the configured answers.
    Offline {
        txt: std::collections::BTreeMap<String, String>,
        mx: std::collections::BTreeMap<String, Vec<String>>,
    },
    /// The system resolver.
    System(Box<mail_auth::hickory_resolver::TokioResolver>),
}

fn dns_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Dns {
    fn new(config: &Config) -> Result<Self, String> {
        Ok(match config.email.dns {
            DnsMode::Offline => Self::Offline {
                txt: config
                    .email
                    .dns_records
                    .iter()
                    .map(|(k, v)| (dns_key(k), v.clone()))
                    .collect(),
                mx: config
                    .email
                    .dns_mx
                    .iter()
                    .map(|(k, v)| (dns_key(k), v.clone()))
                    .collect(),
            },
            DnsMode::System => Self::System(Box::new(
                mail_auth::hickory_resolver::TokioResolver::builder_tokio()
                    .and_then(|b| b.build())
                    .map_err(|e| format!("DNS resolver: {e}"))?,
            )),
        })
    }

    /// The TXT records at `name`, each one string.
    async fn txt(&self, name: &str) -> Vec<String> {
        match self {
            Self::Offline { txt, .. } => txt.get(&dns_key(name)).cloned().into_iter().collect(),
            Self::System(r) => {
                let Ok(lookup) = r.txt_lookup(format!("{}.", dns_key(name))).await else {
                    return Vec::new();
                };
                lookup
                    .answers()
                    .iter()
                    .filter_map(|rec| match &rec.data {
                        mail_auth::hickory_resolver::proto::rr::RData::TXT(t) => Some(
                            t.txt_data
                                .iter()
                                .map(|s| String::from_utf8_lossy(s).into_owned())
                                .collect::<String>(),
                        ),
                        _ => None,
                    })
                    .collect()
            }
        }
    }

    /// The MX exchanges of `domain`, most preferred first.
    async fn mx(&self, domain: &str) -> Vec<String> {
        match self {
            Self::Offline { mx, .. } => mx.get(&dns_key(domain)).cloned().unwrap_or_default(),
            Self::System(r) => {
                let Ok(lookup) = r.mx_lookup(format!("{}.", dns_key(domain))).await else {
                    return Vec::new();
                };
                let mut found: Vec<(u16, String)> = lookup
                    .answers()
                    .iter()
                    .filter_map(|rec| match &rec.data {
                        mail_auth::hickory_resolver::proto::rr::RData::MX(m) => {
                            Some((m.preference, dns_key(&m.exchange.to_string())))
                        }
                        _ => None,
                    })
                    .collect();
                found.sort();
                found.into_iter().map(|(_, h)| h).collect()
            }
        }
    }

    /// The addresses of `host` (none offline: names are compared instead).
    async fn ips(&self, host: &str) -> Vec<std::net::IpAddr> {
        match self {
            Self::Offline { .. } => Vec::new(),
            Self::System(r) => r
                .lookup_ip(format!("{}.", dns_key(host)))
                .await
                .map(|l| l.iter().collect())
                .unwrap_or_default(),
        }
    }
}

pub(super) async fn mail_checks(
    config: &Config,
    db: Option<&Db>,
    clock: SharedClock,
    opts: &Options,
    report: &mut Report,
) {
    let (domain, hostname) = match crate::transports::email::names(config) {
        Ok(n) => n,
        Err(e) => {
            report.fail("mail-domain", e.to_string(), "set email.domain");
            return;
        }
    };
    let dns = match Dns::new(config) {
        Ok(d) => d,
        Err(e) => {
            report.fail(
                "dns",
                e,
                "check /etc/resolv.conf, or set email.dns = \"offline\"",
            );
            return;
        }
    };

    // MX: the mail domain's most preferred exchange is our SMTP host.
    let mx = dns.mx(&domain).await;
    let ours = dns.ips(&hostname).await;
    let mut points_at_us = false;
    for m in &mx {
        if m.eq_ignore_ascii_case(&hostname)
            || (!ours.is_empty() && dns.ips(m).await.iter().any(|ip| ours.contains(ip)))
        {
            points_at_us = true;
        }
    }
    let mx_fix = format!("publish `{domain}. IN MX 10 {hostname}.` (email.hostname)");
    match mx.first() {
        None => report.fail("mx", format!("{domain} has no MX record"), mx_fix),
        Some(_) if points_at_us => report.pass(
            "mx",
            format!("{domain} MX {} reaches {hostname}", mx.join(", ")),
        ),
        Some(_) => report.fail(
            "mx",
            format!("{domain} MX {} does not reach {hostname}", mx.join(", ")),
            mx_fix,
        ),
    }

    // SPF: the relay, or our own host, may send for the domain.
    let spf = dns
        .txt(&domain)
        .await
        .into_iter()
        .find(|t| t.to_ascii_lowercase().starts_with("v=spf1"));
    let sender = config.email.relay_host.clone().unwrap_or(hostname.clone());
    let sender_ips = match sender.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => dns.ips(&sender).await,
    };
    match spf {
        None => report.fail(
            "spf",
            format!("{domain} has no SPF record"),
            format!("publish `{domain}. IN TXT \"v=spf1 a:{sender} -all\"`"),
        ),
        Some(s) if spf_allows(&dns, &domain, &s, &sender, &sender_ips, 3).await => {
            report.pass("spf", format!("{domain} SPF \"{s}\" covers {sender}"));
        }
        Some(s) => report.fail(
            "spf",
            format!("{domain} SPF \"{s}\" does not let {sender} send"),
            format!("add `a:{sender}` (or the relay's include:) to the SPF record of {domain}"),
        ),
    }

    // DKIM: the published key is the one we sign with.
    if let Some(db) = db {
        let keys = Keys::new(db.clone(), clock)
            .with_kek(crate::keys::Kek::configured(&config.server).ok().flatten());
        match crate::transports::email::dkim_record(&keys, &config.email.dkim_selector, &domain)
            .await
        {
            Ok((name, value)) => {
                let published = dns.txt(&name).await;
                let want = dkim_key(&value);
                let fix = "publish the record `switchboard dkim` prints".to_owned();
                match published.first() {
                    None => report.fail("dkim", format!("no TXT record at {name}"), fix),
                    Some(p) if want.is_some() && dkim_key(p) == want => {
                        report.pass("dkim", format!("{name} publishes our signing key"));
                    }
                    Some(_) => report.fail(
                        "dkim",
                        format!("{name} publishes another key than the one we sign with"),
                        fix,
                    ),
                }
            }
            Err(e) => report.fail(
                "dkim",
                format!("the signing key: {e}"),
                "check the database",
            ),
        }
    }

    // DMARC: a policy exists.
    let dmarc_name = format!("_dmarc.{domain}");
    match dns
        .txt(&dmarc_name)
        .await
        .into_iter()
        .find(|t| t.to_ascii_lowercase().starts_with("v=dmarc1"))
    {
        Some(d) => report.pass("dmarc", format!("{dmarc_name}: \"{d}\"")),
        None => report.fail(
            "dmarc",
            format!("no DMARC record at {dmarc_name}"),
            format!(
                "publish `{dmarc_name}. IN TXT \"v=DMARC1; p=quarantine; rua=mailto:dmarc@{domain}\"`"
            ),
        ),
    }

    if config.email.tls_cert_file.is_none() {
        report.warn(
            "smtp-tls",
            "no STARTTLS certificate (email.tls_cert_file): mail arrives unencrypted",
            "set email.tls_cert_file and email.tls_key_file",
        );
        return;
    }
    let addr = match opts.smtp {
        Some(a) => a.to_string(),
        None => format!("{hostname}:25"),
    };
    match smtp_certificate(&addr).await {
        Ok(der) => cert_checks(&der, &hostname, &addr, opts.now_unix_s, report),
        Err(e) => report.fail(
            "smtp-tls",
            format!("STARTTLS at {addr}: {e}"),
            "check that port 25 of email.hostname reaches email.bind",
        ),
    }
}

/// The domains an SPF record hands over to: its `include:` terms that authorise (no `-`, `~`
/// or `?`), then its `redirect=`.
fn spf_targets(spf: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut redirect = None;
    for term in spf.split_ascii_whitespace().skip(1) {
        let lower = term.to_ascii_lowercase();
        if let Some(d) = lower
            .strip_prefix("include:")
            .or(lower.strip_prefix("+include:"))
        {
            out.push(d.to_owned());
        } else if let Some(d) = lower.strip_prefix("redirect=") {
            redirect = Some(d.to_owned());
        }
    }
    out.extend(redirect);
    out
}

/// Whether the SPF record of `domain` lets the sender send, following `include:` and
/// `redirect=` up to `depth` levels (each included domain judged with its own addresses and
/// MX hosts).
async fn spf_allows(
    dns: &Dns,
    domain: &str,
    record: &str,
    sender: &str,
    sender_ips: &[IpAddr],
    depth: u8,
) -> bool {
    let facts = SpfFacts {
        sender,
        sender_ips,
        domain,
        domain_ips: &dns.ips(domain).await,
        mx: &dns.mx(domain).await,
    };
    if spf_covers(record, &facts) {
        return true;
    }
    if depth == 0 {
        return false;
    }
    for target in spf_targets(record) {
        let Some(next) = dns
            .txt(&target)
            .await
            .into_iter()
            .find(|t| t.to_ascii_lowercase().starts_with("v=spf1"))
        else {
            continue;
        };
        if Box::pin(spf_allows(
            dns,
            &target,
            &next,
            sender,
            sender_ips,
            depth - 1,
        ))
        .await
        {
            return true;
        }
    }
    false
}

/// What an SPF record is judged against: the host that sends our mail and what DNS says.
struct SpfFacts<'a> {
    /// The sending host (the relay, or our SMTP host).
    sender: &'a str,
    /// Its addresses (none known offline, unless it is an address itself).
    sender_ips: &'a [IpAddr],
    /// The mail domain.
    domain: &'a str,
    /// The mail domain's own addresses.
    domain_ips: &'a [IpAddr],
    /// The mail domain's MX hosts.
    mx: &'a [String],
}

/// Whether an SPF record by itself lets the sender send: `+all`, `a`/`a:`, `mx`/`mx:`,
/// `ip4:`/`ip6:` networks holding one of its addresses ([`spf_allows`] follows `include:` and
/// `redirect=`). Terms qualified `-`, `~` or `?` authorise nothing.
fn spf_covers(spf: &str, f: &SpfFacts<'_>) -> bool {
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    spf.split_ascii_whitespace().skip(1).any(|term| {
        if term.starts_with(['-', '~', '?']) {
            return false;
        }
        let term = term.trim_start_matches('+').to_ascii_lowercase();
        let (mech, arg) = match term.split_once(':') {
            Some((m, a)) => (m, Some(a)),
            None => (term.split('/').next().unwrap_or_default(), None),
        };
        // `a:host/24`: the host, without the prefix length.
        let host = arg.map(|a| a.split('/').next().unwrap_or(a));
        match mech {
            "all" => true,
            "a" => {
                let target = host.unwrap_or(f.domain);
                is(target, f.sender)
                    || (is(target, f.domain)
                        && f.sender_ips.iter().any(|i| f.domain_ips.contains(i)))
            }
            "mx" => is(host.unwrap_or(f.domain), f.domain) && f.mx.iter().any(|m| is(m, f.sender)),
            "ip4" | "ip6" => {
                arg.is_some_and(|net| f.sender_ips.iter().any(|ip| in_network(*ip, net)))
            }
            _ => false,
        }
    })
}

/// Whether `ip` is in `net` (`192.0.2.0/24`, `2001:db8::/32`, or one address).
fn in_network(ip: IpAddr, net: &str) -> bool {
    let (addr, len) = net.split_once('/').unwrap_or((net, ""));
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return false;
    };
    let bits = |ip: IpAddr| -> (u128, u32) {
        match ip {
            IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
            IpAddr::V6(v) => (u128::from(v), 128),
        }
    };
    let ((a, width), (b, other)) = (bits(ip), bits(addr));
    if width != other {
        return false;
    }
    let len = if len.is_empty() {
        width
    } else {
        len.parse().unwrap_or(u32::MAX)
    };
    if len > width {
        return false;
    }
    let shift = width - len;
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

/// The `p=` of a DKIM key record, whitespace removed.
fn dkim_key(record: &str) -> Option<String> {
    record.split(';').find_map(|tag| {
        let (k, v) = tag.split_once('=')?;
        (k.trim() == "p").then(|| v.chars().filter(|c| !c.is_whitespace()).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spf_terms() {
        let ips: Vec<IpAddr> = vec!["192.0.2.25".parse().unwrap()];
        let mx = vec!["mx.example.org".to_owned()];
        let ours = SpfFacts {
            sender: "mx.example.org",
            sender_ips: &ips,
            domain: "example.org",
            domain_ips: &ips,
            mx: &mx,
        };
        let c = |spf| spf_covers(spf, &ours);
        for yes in [
            "v=spf1 a:mx.example.org -all",
            "v=spf1 A:MX.example.org/24 -all",
            "v=spf1 a -all",
            "v=spf1 mx -all",
            "v=spf1 +mx:example.org ~all",
            "v=spf1 ip4:192.0.2.0/24 -all",
            "v=spf1 ip4:192.0.2.25 -all",
            "v=spf1 +all",
        ] {
            assert!(c(yes), "{yes}");
        }
        for no in [
            "v=spf1 a:other.example -all",
            "v=spf1 -all",
            "v=spf1 -a:mx.example.org ~all",
            "v=spf1 ip4:198.51.100.0/24 -all",
            "v=spf1 ip6:2001:db8::/32 -all",
            "v=spf1 ?all",
        ] {
            assert!(!c(no), "{no}");
        }
        let relay = SpfFacts {
            sender: "smtp.relay.example.net",
            sender_ips: &[],
            ..ours
        };
        assert!(!spf_covers("v=spf1 mx -all", &relay));
        assert!(!spf_covers(
            "v=spf1 include:_spf.relay.example.net -all",
            &relay
        ));
        assert_eq!(
            spf_targets(
                "v=spf1 ip4:192.0.2.1 include:_spf.a.test -include:b.test ~include:c.test redirect=_spf.d.test"
            ),
            vec!["_spf.a.test", "_spf.d.test"]
        );
        assert!(in_network("2001:db8::1".parse().unwrap(), "2001:db8::/32"));
        assert!(!in_network("2001:db9::1".parse().unwrap(), "2001:db8::/32"));
        assert!(in_network("10.1.2.3".parse().unwrap(), "0.0.0.0/0"));
    }

    #[test]
    fn dkim_p_tag() {
        assert_eq!(
            dkim_key("v=DKIM1; k=rsa; p=MII BIj"),
            Some("MIIBIj".to_owned())
        );
        assert_eq!(dkim_key("v=DKIM1; k=rsa"), None);
    }
}
