//! `[email]`: the SMTP listener, authentication of inbound mail and delivery of replies, and
//! the per-agent email settings (`agents[].email`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::secret::Secret;
use crate::message::{is_domain, is_handle_name};

/// Email: the SMTP listener, authentication of inbound mail, and delivery of replies.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmailConfig {
    /// Runs the SMTP listener and delivers replies by email.
    pub enabled: bool,
    /// Address of the SMTP listener.
    pub bind: SocketAddr,
    /// Every SMTP connection starts with a PROXY protocol header (v1 or v2, from HAProxy or a
    /// load balancer in TCP mode) naming the client, read before the greeting; one without a
    /// valid header is closed. The client it names is the session's peer: per-peer caps, SPF,
    /// logs. With `server.trusted_proxies` set, only those peers may name a client; empty,
    /// anyone may.
    pub proxy_protocol: bool,
    /// Mail domain: agents are `{name}@{domain}`. Defaults to the host of `server.public_url`.
    pub domain: Option<String>,
    /// Name in the SMTP greeting and `Authentication-Results`. Defaults to the mail domain.
    pub hostname: Option<String>,
    /// Largest message accepted (advertised as SIZE), in bytes.
    pub max_message_bytes: usize,
    /// Most recipients of one message.
    pub max_recipients: usize,
    /// Most concurrent SMTP sessions; further clients get 421.
    pub max_sessions: usize,
    /// Most concurrent SMTP sessions from one peer (an IPv4 address or an IPv6 /64); further
    /// ones get 421.
    pub max_sessions_per_peer: usize,
    /// Memory all sessions together may hold for message bodies being received, in bytes. A
    /// message that would go over it is read to its end without being kept and answered
    /// `452 4.3.1` (the client retries later), so many large messages at once cannot exhaust
    /// memory. At least `max_message_bytes`.
    pub max_data_memory_bytes: usize,
    /// Most commands in one session (floods get 421).
    pub max_commands: usize,
    /// A session is closed when the client stays silent this long.
    pub idle_timeout_seconds: u64,
    /// Longest SMTP session.
    pub session_timeout_seconds: u64,
    /// Deepest multipart nesting accepted.
    pub max_mime_depth: usize,
    /// PEM certificate chain for STARTTLS (not offered without it).
    pub tls_cert_file: Option<String>,
    /// PEM private key for STARTTLS.
    pub tls_key_file: Option<String>,
    /// DKIM selector of outbound mail; `switchboard dkim` prints the TXT record to publish.
    pub dkim_selector: String,
    /// What happens to mail that fails authentication, unless the agent says otherwise.
    pub unauthenticated: UnauthenticatedMail,
    /// `system` (the host's resolver) or `offline` (only `dns_records`; tests, air-gapped use).
    pub dns: DnsMode,
    /// TXT records answered locally before asking DNS: FQDN → record text.
    pub dns_records: BTreeMap<String, String>,
    /// Relay (smarthost) replies are sent through; without one they go straight to the
    /// recipient domain's MX hosts.
    pub relay_host: Option<String>,
    /// Relay port.
    pub relay_port: u16,
    /// `none`, `starttls` or `tls` (implicit TLS).
    pub relay_tls: RelayTls,
    /// Relay user name.
    pub relay_username: Option<String>,
    /// Relay password.
    pub relay_password: Option<Secret>,
    /// Timeout of one relay conversation.
    pub relay_timeout_seconds: u64,
    /// Port of direct MX delivery, used when no relay is set (25; others only for tests).
    pub direct_port: u16,
    /// MX answers known without DNS: domain → exchanges, most preferred first.
    pub dns_mx: BTreeMap<String, Vec<String>>,
    /// Addresses known without DNS: host name → IP addresses (MX hosts and MTA-STS policy hosts
    /// of direct delivery).
    pub dns_hosts: BTreeMap<String, Vec<std::net::IpAddr>>,
    /// Whether direct MX delivery honours the recipient domain's MTA-STS policy (RFC 8461).
    pub mta_sts: bool,
    /// Port of the HTTPS server an MTA-STS policy is fetched from (443; others only for tests).
    pub mta_sts_port: u16,
    /// A PEM file of certificate authorities trusted besides the public ones where direct
    /// delivery checks certificates (MTA-STS policy hosts and MX hosts): a private PKI.
    pub tls_roots_file: Option<String>,
    /// Where mail to the role addresses goes (`postmaster@`, `abuse@` and `dmarc@` of every
    /// served domain, and the bare `<Postmaster>`): an address (`ops@example.net`), to which it
    /// is forwarded, or the name of an agent (`helper`), which receives it ([`Postmaster`]).
    /// Unset, it is accepted and held in the queue (dead `email_role` jobs).
    pub postmaster: Option<String>,
}

/// Where role mail goes (`email.postmaster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Postmaster {
    /// Forwarded, intact, to this address.
    Forward(String),
    /// Handed to this agent (never answered).
    Agent(String),
}

impl Default for EmailConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            bind: SocketAddr::from(([127, 0, 0, 1], 2525)),
            proxy_protocol: false,
            domain: None,
            hostname: None,
            max_message_bytes: 25 * 1024 * 1024,
            max_recipients: 50,
            max_sessions: 256,
            max_sessions_per_peer: 32,
            max_data_memory_bytes: 256 * 1024 * 1024,
            max_commands: 1_000,
            idle_timeout_seconds: 60,
            session_timeout_seconds: 600,
            max_mime_depth: 10,
            tls_cert_file: None,
            tls_key_file: None,
            dkim_selector: "switchboard".into(),
            unauthenticated: UnauthenticatedMail::Accept,
            dns: DnsMode::System,
            dns_records: BTreeMap::new(),
            relay_host: None,
            relay_port: 587,
            relay_tls: RelayTls::Starttls,
            relay_username: None,
            relay_password: None,
            relay_timeout_seconds: 60,
            direct_port: 25,
            dns_mx: BTreeMap::new(),
            dns_hosts: BTreeMap::new(),
            mta_sts: true,
            mta_sts_port: 443,
            tls_roots_file: None,
            postmaster: None,
        }
    }
}

impl EmailConfig {
    /// TLS files come in pairs, limits must admit a message, and names must be valid.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            problems.push("email.tls_cert_file and email.tls_key_file: set both or neither".into());
        }
        if let Some(file) = &self.tls_roots_file
            && let Err(e) = crate::net::pem::certificates(file)
        {
            problems.push(format!("email.tls_roots_file {file}: {e}"));
        }
        if self.mta_sts_port == 0 {
            problems.push("email.mta_sts_port: must not be 0".into());
        }
        if self.max_message_bytes == 0
            || self.max_recipients == 0
            || self.max_sessions == 0
            || self.max_sessions_per_peer == 0
        {
            problems.push(
                "email.max_message_bytes, max_recipients, max_sessions and max_sessions_per_peer \
                 must be > 0"
                    .into(),
            );
        }
        if self.max_data_memory_bytes < self.max_message_bytes {
            problems.push(
                "email.max_data_memory_bytes: must be at least email.max_message_bytes".into(),
            );
        }
        if self.dkim_selector.is_empty()
            || !self
                .dkim_selector
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            problems.push(format!(
                "email.dkim_selector {:?}: use letters, digits, - and .",
                self.dkim_selector
            ));
        }
        if let Some(d) = &self.domain
            && !is_domain(d)
        {
            problems.push(format!("email.domain {d:?}: not a domain name"));
        }
        if let Some(p) = &self.postmaster
            && self.postmaster().is_none()
        {
            problems.push(format!(
                "email.postmaster {p:?}: an address (ops@example.net) or an agent's name"
            ));
        }
    }

    /// Where role mail goes: `email.postmaster` read as an address (it has an `@`) or an
    /// agent's name; `None` when unset or neither.
    #[must_use]
    pub fn postmaster(&self) -> Option<Postmaster> {
        let p = self.postmaster.as_deref()?.trim();
        match p.rsplit_once('@') {
            Some((local, domain)) => {
                let plain = !local.is_empty()
                    && local
                        .chars()
                        .all(|c| c.is_ascii_graphic() && !"<>()[]\\,;:@\"".contains(c));
                (plain && is_domain(domain) && !domain.contains(':'))
                    .then(|| Postmaster::Forward(p.to_owned()))
            }
            None => is_handle_name(p).then(|| Postmaster::Agent(p.to_owned())),
        }
    }
}

/// What happens to mail that fails authentication (no aligned DKIM or DMARC pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnauthenticatedMail {
    /// Stored and dispatched with `verified: false`.
    Accept,
    /// Refused with 550 5.7.1.
    Reject,
}

/// Where DNS answers for DKIM, SPF and DMARC come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DnsMode {
    /// The host's resolver configuration.
    System,
    /// Only `email.dns_records`; everything else does not exist.
    Offline,
}

/// How the relay connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelayTls {
    /// Plain text (loopback relays only).
    None,
    /// STARTTLS, required.
    Starttls,
    /// Implicit TLS (port 465).
    Tls,
}

/// Email settings of one agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentEmailConfig {
    /// Overrides `email.unauthenticated` for this agent.
    pub unauthenticated: Option<UnauthenticatedMail>,
    /// Mail replies to senders whose From address was not authenticated (no aligned DKIM
    /// signature, no DMARC pass), to their From address (never to a Reply-To). Off by default:
    /// a forged From would otherwise turn the agent into a signed reflector aimed at the
    /// address it names.
    pub reply_to_unauthenticated: bool,
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    fn with(key: &str, value: &str) -> Result<Config, crate::error::Error> {
        Config::load(None, vec![(key.to_owned(), value.to_owned())])
    }

    #[test]
    fn postmaster_is_an_address_or_an_agent_name() {
        let c = with("SWITCHBOARD__EMAIL__POSTMASTER", "ops@example.net").unwrap();
        assert_eq!(
            c.email.postmaster(),
            Some(Postmaster::Forward("ops@example.net".into()))
        );
        let c = with("SWITCHBOARD__EMAIL__POSTMASTER", "helper").unwrap();
        assert_eq!(
            c.email.postmaster(),
            Some(Postmaster::Agent("helper".into()))
        );
        assert_eq!(Config::default().email.postmaster(), None);
        for bad in [
            "two words",
            "a@b@example.net",
            "<ops@example.net>",
            "ops@",
            "@x.net",
        ] {
            let e = with("SWITCHBOARD__EMAIL__POSTMASTER", bad).unwrap_err();
            assert!(e.to_string().contains("email.postmaster"), "{bad:?}: {e}");
        }
    }
}
