//! Direct delivery to the recipient domain's MX hosts, when no relay is set: the MX hosts and
//! their addresses (DNS, or the tables known without it), opportunistic STARTTLS (RFC 7435), and
//! the domain's MTA-STS policy ([`super::mta_sts`]) where it has one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lettre::transport::smtp::client::Tls;
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::{auth, mta_sts, outbound};
use crate::config::Config;
use crate::error::{OutboundError, Result};
use crate::store::Db;

/// Direct delivery to the recipient domain's MX hosts (when no relay is set), under their
/// MTA-STS policies ([`mta_sts`]).
pub(super) struct Direct {
    dns: mail_auth::MessageAuthenticator,
    mx: auth::StaticMx,
    /// Addresses known without DNS (`email.dns_hosts`).
    known: HashMap<String, Vec<std::net::IpAddr>>,
    port: u16,
    /// Our host name (HELO, trace lines).
    pub(super) hostname: String,
    timeout: Duration,
    allow_private: bool,
    /// The policies, unless `email.mta_sts` is off.
    sts: Option<mta_sts::Sts>,
    /// Certificate authorities trusted besides the public ones (`email.tls_roots_file`).
    roots: Vec<lettre::transport::smtp::client::Certificate>,
    metrics: Arc<crate::metrics::Metrics>,
}

/// How one connection to an MX host does TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// STARTTLS when offered, any certificate (RFC 7435).
    Opportunistic,
    /// STARTTLS required, with a certificate valid for the host's name (MTA-STS).
    Required,
}

impl Direct {
    /// The hosts to try, most preferred first: the MX records, else the domain itself
    /// (RFC 5321 §5.1). A null MX (RFC 7505) means the domain takes no mail.
    async fn hosts(&self, domain: &str) -> std::result::Result<Vec<String>, OutboundError> {
        match self.dns.mx_lookup(domain, Some(&self.mx)).await {
            Ok(set) => {
                let mut mx: Vec<_> = set.rrset.iter().collect();
                mx.sort_by_key(|m| m.preference);
                let hosts: Vec<String> = mx
                    .iter()
                    .flat_map(|m| m.exchanges.iter())
                    .map(|h| h.trim_end_matches('.').to_owned())
                    .collect();
                if hosts.iter().all(String::is_empty) {
                    return Err(OutboundError::permanent(format!(
                        "{domain} accepts no mail (null MX)"
                    )));
                }
                Ok(hosts)
            }
            Err(mail_auth::Error::Dns(mail_auth::DnsError::RecordNotFound(_))) => {
                Ok(vec![domain.to_owned()])
            }
            Err(_) if self.mx.offline() => Ok(vec![domain.to_owned()]),
            Err(e) => Err(OutboundError::temporary(format!(
                "MX lookup for {domain}: {e}"
            ))),
        }
    }

    async fn addresses(&self, host: &str) -> Vec<std::net::IpAddr> {
        if let Ok(ip) = host.parse() {
            return vec![ip];
        }
        if let Some(ips) = self.known.get(&host.to_ascii_lowercase()) {
            return ips.clone();
        }
        type NoV4 =
            mail_auth::common::cache::NoCache<Box<str>, mail_auth::RecordSet<std::net::Ipv4Addr>>;
        type NoV6 =
            mail_auth::common::cache::NoCache<Box<str>, mail_auth::RecordSet<std::net::Ipv6Addr>>;
        self.dns
            .ip_lookup(
                host,
                mail_auth::IpLookupStrategy::Ipv4thenIpv6,
                4,
                None::<&NoV4>,
                None::<&NoV6>,
            )
            .await
            .unwrap_or_default()
    }

    /// Sends to the first MX host that takes the message; a 5xx from any of them ends it. Under
    /// an MTA-STS policy only the hosts it lists are tried, each over STARTTLS with a certificate
    /// valid for its name; in `testing` mode a host that falls short is recorded and used as
    /// without a policy, in `enforce` mode it is skipped (nothing left: retried later).
    pub(super) async fn send(
        &self,
        domain: &str,
        envelope: &lettre::address::Envelope,
        bytes: &[u8],
        now: i64,
    ) -> std::result::Result<(), OutboundError> {
        let policy = match &self.sts {
            Some(sts) => sts.policy(domain, &self.dns, now).await,
            None => None,
        };
        let enforce = policy
            .as_ref()
            .is_some_and(|p| p.mode == mta_sts::Mode::Enforce);
        let mut last = OutboundError::temporary(format!("no MX host of {domain} answered"));
        for host in self.hosts(domain).await? {
            // The policy this host is held to: none where a testing policy does not list it.
            let mut held = policy.as_deref();
            if let Some(p) = held.filter(|p| !p.allows(&host)) {
                let why = format!(
                    "MTA-STS ({}): MX {host} is not in {domain}'s policy",
                    p.mode.as_str()
                );
                self.short_of(p.mode, "mx_mismatch", &why);
                if enforce {
                    last = OutboundError::temporary(why);
                    continue;
                }
                held = None;
            }
            for ip in self.addresses(&host).await {
                if !self.allow_private && crate::net::is_forbidden_ip(ip) {
                    last = OutboundError::permanent(format!("MX {host} is a private address"));
                    continue;
                }
                let how = held.map_or(Checked::Opportunistic, |_| Checked::Required);
                let mut sent = self.attempt(&host, ip, how, envelope, bytes).await;
                // Not a reply of the server's: no STARTTLS, or a certificate refused.
                if let (Some(p), Err(e)) = (held, &sent)
                    && (e.is_tls() || e.is_client())
                {
                    let why = format!(
                        "MTA-STS ({}): TLS with MX {host} failed: {e}",
                        p.mode.as_str()
                    );
                    self.short_of(p.mode, "tls_failed", &why);
                    if enforce {
                        last = OutboundError::temporary(why);
                        continue;
                    }
                    sent = self
                        .attempt(&host, ip, Checked::Opportunistic, envelope, bytes)
                        .await;
                }
                match sent {
                    Ok(()) => return Ok(()),
                    Err(e) if e.is_permanent() => return Err(outbound::classify(&e)),
                    Err(e) => last = outbound::classify(&e),
                }
            }
        }
        Err(last)
    }

    /// One delivery attempt to `host` at `ip`, doing TLS as `how` says.
    async fn attempt(
        &self,
        host: &str,
        ip: std::net::IpAddr,
        how: Checked,
        envelope: &lettre::address::Envelope,
        bytes: &[u8],
    ) -> std::result::Result<(), lettre::transport::smtp::Error> {
        let mut params = lettre::transport::smtp::client::TlsParameters::builder(host.to_owned());
        let tls: fn(lettre::transport::smtp::client::TlsParameters) -> Tls = match how {
            Checked::Opportunistic => {
                params = params.dangerous_accept_invalid_certs(true);
                Tls::Opportunistic
            }
            Checked::Required => {
                for root in &self.roots {
                    params = params.add_root_certificate(root.clone());
                }
                Tls::Required
            }
        };
        let transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(ip.to_string())
            .port(self.port)
            .hello_name(ClientId::Domain(self.hostname.clone()))
            .timeout(Some(self.timeout))
            .tls(tls(params.build()?))
            .build();
        transport.send_raw(envelope, bytes).await.map(|_| ())
    }

    /// Records a delivery that fell short of a policy in `mode`.
    fn short_of(&self, mode: mta_sts::Mode, failed: &str, why: &str) {
        tracing::warn!(mode = mode.as_str(), failed, "{why}");
        self.metrics.mta_sts_failure(mode.as_str(), failed);
    }
}

/// Direct delivery as `config` sets it up: the MX and address tables known without DNS, the
/// certificate authorities trusted besides the public ones, and the MTA-STS fetcher (its own
/// HTTP client: no redirects, those authorities, policy hosts of `email.dns_hosts` resolved
/// from there, others only to public addresses unless `net.allow_private_addresses`).
pub(super) fn direct(
    config: &Config,
    db: &Db,
    hostname: String,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<Direct> {
    let email = &config.email;
    let offline = email.dns == crate::config::DnsMode::Offline;
    let roots = match &email.tls_roots_file {
        Some(file) => crate::net::pem::certificates(file)
            .map_err(|e| crate::Error::Config(format!("email.tls_roots_file {file}: {e}")))?,
        None => Vec::new(),
    };
    let known: HashMap<String, Vec<std::net::IpAddr>> = email
        .dns_hosts
        .iter()
        .map(|(h, ips)| (h.trim_end_matches('.').to_ascii_lowercase(), ips.clone()))
        .collect();
    let sts = if email.mta_sts {
        let mut http = reqwest::Client::builder()
            .user_agent(config.net.user_agent.clone())
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .dns_resolver(Arc::new(crate::net::GuardedResolver {
                allow_private: config.net.allow_private_addresses,
            }));
        for der in &roots {
            let cert = reqwest::Certificate::from_der(der)
                .map_err(|e| crate::Error::Config(format!("email.tls_roots_file: {e}")))?;
            http = http.add_root_certificate(cert);
        }
        for (host, ips) in known.iter().filter(|(h, _)| h.starts_with("mta-sts.")) {
            let addrs: Vec<std::net::SocketAddr> = ips
                .iter()
                .map(|ip| std::net::SocketAddr::new(*ip, email.mta_sts_port))
                .collect();
            http = http.resolve_to_addrs(host, &addrs);
        }
        let http = http
            .build()
            .map_err(|e| crate::Error::Startup(format!("MTA-STS HTTP client: {e}")))?;
        let records = email
            .dns_records
            .iter()
            .filter(|(name, _)| name.to_ascii_lowercase().starts_with("_mta-sts."))
            .map(|(name, text)| {
                (
                    name.trim_end_matches('.').to_ascii_lowercase(),
                    text.clone(),
                )
            })
            .collect();
        Some(mta_sts::Sts::new(
            db.clone(),
            http,
            email.mta_sts_port,
            records,
            offline,
        ))
    } else {
        None
    };
    Ok(Direct {
        dns: auth::authenticator(email.dns)?,
        mx: auth::StaticMx::new(&email.dns_mx, offline),
        known,
        port: email.direct_port,
        hostname,
        timeout: Duration::from_secs(email.relay_timeout_seconds),
        allow_private: config.net.allow_private_addresses,
        sts,
        roots: roots
            .iter()
            .map(|der| lettre::transport::smtp::client::Certificate::from_der(der.to_vec()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| crate::Error::Config(format!("email.tls_roots_file: {e}")))?,
        metrics,
    })
}
