//! `switchboard doctor`: what federation and mail need, checked from the outside in — the
//! public URL's documents as a remote server fetches them, the mail domain's DNS records, the
//! SMTP certificate a sending server sees, then the database and the media secret. Each check
//! ends as pass, warn or fail with the fix; any fail makes the command exit non-zero.
//!
//! DNS answers come from the system resolver, or, with `email.dns = "offline"`, only from
//! `email.dns_records` (TXT) and `email.dns_mx` (MX), as the email transport reads them.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::clock::SharedClock;
use crate::config::{Config, DnsMode};
use crate::keys::Keys;
use crate::net::{HttpClient, HttpRequest};
use crate::site::Site;
use crate::store::{Backend, Db};

/// A certificate expiring within this many days is a warning.
pub const CERT_WARN_DAYS: i64 = 14;

/// How long one network step of a check may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// As it should be.
    Pass,
    /// Works, but not as it should in production.
    Warn,
    /// Broken: federation or mail will not work.
    Fail,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
        })
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Short name (`webfinger`, `dkim`, …).
    pub name: &'static str,
    /// Its outcome.
    pub level: Level,
    /// What was found.
    pub detail: String,
    /// What to do about it (for warn and fail).
    pub fix: Option<String>,
}

/// Every check's result, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
}

impl Report {
    fn pass(&mut self, name: &'static str, detail: impl Into<String>) {
        self.push(name, Level::Pass, detail, None::<String>);
    }

    fn warn(&mut self, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) {
        self.push(name, Level::Warn, detail, Some(fix));
    }

    fn fail(&mut self, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) {
        self.push(name, Level::Fail, detail, Some(fix));
    }

    fn push(
        &mut self,
        name: &'static str,
        level: Level,
        detail: impl Into<String>,
        fix: Option<impl Into<String>>,
    ) {
        self.checks.push(Check {
            name,
            level,
            detail: detail.into(),
            fix: fix.map(Into::into),
        });
    }

    /// Whether any check failed.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.level == Level::Fail)
    }

    /// The check called `name`, if it ran.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.checks {
            writeln!(f, "{:<4}  {:<16} {}", c.level, c.name, c.detail)?;
            if let Some(fix) = &c.fix {
                writeln!(f, "{:<22} fix: {fix}", "")?;
            }
        }
        let count = |l| self.checks.iter().filter(|c| c.level == l).count();
        writeln!(
            f,
            "{} passed, {} warnings, {} failed",
            count(Level::Pass),
            count(Level::Warn),
            count(Level::Fail)
        )
    }
}

/// What the doctor is told besides the configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to reach the SMTP listener as sending servers do; `{email hostname}:25` when
    /// `None`.
    pub smtp: Option<SocketAddr>,
    /// The time certificates are judged at (unix seconds).
    pub now_unix_s: i64,
}

/// Runs every check that applies to `config`.
pub async fn run(config: &Config, clock: SharedClock, opts: &Options) -> Report {
    let mut report = Report::default();
    let site = match Site::from_config(config) {
        Ok(s) => s,
        Err(e) => {
            report.fail(
                "public-url",
                e.to_string(),
                "set server.public_url to https://your.host",
            );
            return report;
        }
    };
    let http = match HttpClient::new(config.net.clone(), clock.clone()) {
        Ok(h) => h,
        Err(e) => {
            report.fail("http-client", e.to_string(), "check the [net] settings");
            return report;
        }
    };
    web_checks(config, &site, &http, &mut report).await;
    let db = database_checks(config, &mut report).await;
    if config.email.enabled {
        mail_checks(config, db.as_ref(), clock, opts, &mut report).await;
    }
    if let Some(db) = db {
        db.close().await;
    }
    report
}

/// GET `url` through the guarded client; a non-2xx status is an error.
async fn get(
    http: &HttpClient,
    url: &str,
    accept: Option<&'static str>,
) -> Result<crate::net::HttpResponse, String> {
    let mut headers = HeaderMap::new();
    if let Some(a) = accept {
        headers.insert(ACCEPT, HeaderValue::from_static(a));
    }
    let r = http
        .send(HttpRequest {
            method: Method::GET,
            url,
            headers,
            body: None,
            timeout: Some(STEP_TIMEOUT),
        })
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if !r.status.is_success() {
        return Err(format!("GET {url}: HTTP {}", r.status.as_u16()));
    }
    Ok(r)
}

/// GET `url` as JSON.
async fn get_json(http: &HttpClient, url: &str, accept: &'static str) -> Result<Value, String> {
    let r = get(http, url, Some(accept)).await?;
    serde_json::from_slice(&r.body).map_err(|e| format!("GET {url}: not JSON ({e})"))
}

/// GET `url` as text, trimmed.
async fn get_text(http: &HttpClient, url: &str) -> Result<String, String> {
    let r = get(http, url, None).await?;
    Ok(String::from_utf8_lossy(&r.body).trim().to_owned())
}

/// The `self` link of a JRD.
fn jrd_self(jrd: &Value) -> Option<&str> {
    jrd.get("links")?.as_array()?.iter().find_map(|l| {
        (l.get("rel")?.as_str()? == "self")
            .then(|| l.get("href")?.as_str())
            .flatten()
    })
}

const HOST_FIX: &str = "the reverse proxy must pass the client's Host header (nginx: \
     proxy_set_header Host $host; Caddy does by default), and server.public_url must be the \
     URL clients use";

async fn web_checks(config: &Config, site: &Site, http: &HttpClient, report: &mut Report) {
    let base = site.base_url();
    if base.starts_with("https://") {
        report.pass("https", format!("{base} is served over HTTPS"));
    } else if config.net.allow_private_addresses {
        report.warn(
            "https",
            format!("{base} is plain http (allowed by net.allow_private_addresses)"),
            "fediverse servers and mail senders expect https: put a TLS proxy in front and \
             set server.public_url to its https:// URL",
        );
    } else {
        report.fail(
            "https",
            format!("{base} is plain http"),
            "put a TLS proxy in front and set server.public_url to its https:// URL",
        );
    }

    // The Host the server sees: inbound HTTP signatures cover it, so it must be the public one.
    match get_text(http, &site.url("/healthz/host")).await {
        Ok(seen) if seen.eq_ignore_ascii_case(site.domain()) => report.pass(
            "host",
            format!("requests to {base} reach us with Host: {seen}"),
        ),
        Ok(seen) => report.fail(
            "host",
            format!(
                "requests to {base} reach us with Host: {seen}, not {}: signatures on \
                 inbound activities will not verify",
                site.domain()
            ),
            HOST_FIX,
        ),
        Err(e) => report.fail(
            "host",
            format!("{e}: {base} does not reach this server"),
            "check DNS for the public host and the proxy in front",
        ),
    }

    let Some(agent) = config.agents.first().map(|a| a.name.clone()) else {
        report.warn(
            "agents",
            "no agent configured: nothing to look up",
            "add an [[agents]] table",
        );
        return;
    };
    let actor = site.url(&format!("/agents/{agent}"));
    if config.activitypub.enabled {
        let acct = format!("acct:{agent}@{}", site.handle_domain());
        let mut lookups = vec![(
            "webfinger",
            site.url(&format!("/.well-known/webfinger?resource={acct}")),
        )];
        if site.handle_domain() != site.domain() {
            let scheme = base.split("://").next().unwrap_or("https");
            lookups.push((
                "handle-domain",
                format!(
                    "{scheme}://{}/.well-known/webfinger?resource={acct}",
                    site.handle_domain()
                ),
            ));
        }
        for (name, url) in lookups {
            match get_json(http, &url, "application/jrd+json").await {
                Ok(jrd) if jrd_self(&jrd) == Some(actor.as_str()) => {
                    report.pass(name, format!("{url} leads to {actor}"));
                }
                Ok(jrd) => report.fail(
                    name,
                    format!(
                        "{url} names {} as the actor, not {actor}",
                        jrd_self(&jrd).unwrap_or("nothing")
                    ),
                    if name == "handle-domain" {
                        format!(
                            "redirect /.well-known/webfinger on {} to {base} (see \
                             docs/protocols/activitypub.md)",
                            site.handle_domain()
                        )
                    } else {
                        HOST_FIX.to_owned()
                    },
                ),
                Err(e) => report.fail(
                    name,
                    e,
                    if name == "handle-domain" {
                        format!(
                            "redirect (or proxy) /.well-known/webfinger on {} to {base}",
                            site.handle_domain()
                        )
                    } else {
                        "check that the proxy forwards /.well-known/ to switchboard".to_owned()
                    },
                ),
            }
        }
        match get_json(http, &actor, "application/activity+json").await {
            Ok(doc)
                if doc["id"] == actor.as_str()
                    && doc["inbox"].as_str().is_some_and(|i| i.starts_with(base)) =>
            {
                report.pass("actor", format!("{actor} is the actor, inbox on {base}"));
            }
            Ok(doc) => report.fail(
                "actor",
                format!("{actor} answers with id {}, not itself", doc["id"]),
                HOST_FIX,
            ),
            Err(e) => report.fail("actor", e, "check that the proxy forwards /agents/"),
        }
        let nodeinfo = site.url("/nodeinfo/2.1");
        let links = get_json(http, &site.url("/.well-known/nodeinfo"), "application/json").await;
        match links {
            Ok(l) if l["links"][0]["href"] == nodeinfo.as_str() => {
                match get_json(http, &nodeinfo, "application/json").await {
                    Ok(n) if n["version"] == "2.1" => {
                        report.pass("nodeinfo", format!("{nodeinfo} is NodeInfo 2.1"));
                    }
                    Ok(_) => report.fail(
                        "nodeinfo",
                        format!("{nodeinfo} is not NodeInfo 2.1"),
                        HOST_FIX,
                    ),
                    Err(e) => report.fail("nodeinfo", e, "check the proxy forwards /nodeinfo/"),
                }
            }
            Ok(l) => report.fail(
                "nodeinfo",
                format!("/.well-known/nodeinfo points at {}", l["links"][0]["href"]),
                HOST_FIX,
            ),
            Err(e) => report.fail("nodeinfo", e, "check the proxy forwards /.well-known/"),
        }
    }
    if config.a2a.enabled {
        let card_url = format!("{actor}/agent-card.json");
        match get_json(http, &card_url, "application/json").await {
            Ok(card) => {
                let mut urls = Vec::new();
                collect_urls(&card, &mut urls);
                match urls.iter().find(|u| !u.starts_with(base)) {
                    None if !urls.is_empty() => report.pass(
                        "agent-card",
                        format!("{card_url}: its endpoints are under {base}"),
                    ),
                    None => report.fail(
                        "agent-card",
                        format!("{card_url} names no endpoint"),
                        HOST_FIX,
                    ),
                    Some(u) => report.fail(
                        "agent-card",
                        format!("{card_url} names {u}, outside {base}"),
                        HOST_FIX,
                    ),
                }
            }
            Err(e) => report.fail("agent-card", e, "check the proxy forwards /agents/"),
        }
    }
}

/// Every `url` value in an agent card (its endpoints).
fn collect_urls(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("url", Value::String(s)) if s.starts_with("http") => out.push(s.clone()),
                    // The provider's own site is not ours to serve.
                    ("provider", _) => {}
                    _ => collect_urls(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_urls(v, out)),
        _ => {}
    }
}

async fn database_checks(config: &Config, report: &mut Report) -> Option<Db> {
    let db = match Db::open_existing(&config.database).await {
        Ok(db) => db,
        Err(e) => {
            report.fail(
                "database",
                format!("cannot open the database: {e}"),
                "check database.url and that the server has started once (it creates the schema)",
            );
            return None;
        }
    };
    match db.ready().await {
        Ok(true) => report.pass("database", "reachable, every migration applied"),
        Ok(false) => report.fail(
            "database",
            "migrations pending",
            "start the new version once (`switchboard serve` applies them)",
        ),
        Err(e) => report.fail("database", e.to_string(), "check database.url"),
    }
    match (&config.media.secret, db.backend()) {
        (Some(_), _) => report.pass("media-secret", "media.secret is set"),
        (None, Backend::Postgres) => report.warn(
            "media-secret",
            "media.secret is unset on PostgreSQL: each instance makes its own, so a media URL \
             minted by one is refused by the others",
            "set media.secret (the same on every instance)",
        ),
        (None, Backend::Sqlite) => report.pass(
            "media-secret",
            "media.secret is unset (one instance on SQLite: a key per start is enough)",
        ),
    }
    Some(db)
}

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

async fn mail_checks(
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
        let keys = Keys::new(db.clone(), clock);
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

/// Accepts any certificate, keeping the end-entity one: the doctor inspects it itself.
#[derive(Debug)]
struct Capture {
    seen: Mutex<Option<Vec<u8>>>,
    algs: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if let Ok(mut s) = self.seen.lock() {
            *s = Some(end_entity.to_vec());
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// One SMTP reply (its lines joined), or why there was none.
async fn smtp_reply<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<String, String> {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed".into());
        }
        all.push_str(&line);
        if line.as_bytes().get(3) != Some(&b'-') {
            return Ok(all);
        }
    }
}

/// The end-entity certificate the SMTP server at `addr` presents after STARTTLS (DER).
async fn smtp_certificate(addr: &str) -> Result<Vec<u8>, String> {
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let mut io = BufReader::new(tcp);
        let greeting = smtp_reply(&mut io).await?;
        if !greeting.starts_with("220") {
            return Err(format!("greeting {:?}", greeting.trim()));
        }
        io.get_mut()
            .write_all(b"EHLO doctor.invalid\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let ehlo = smtp_reply(&mut io).await?;
        if !ehlo.to_ascii_uppercase().contains("STARTTLS") {
            return Err("STARTTLS is not offered".into());
        }
        io.get_mut()
            .write_all(b"STARTTLS\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let go = smtp_reply(&mut io).await?;
        if !go.starts_with("220") {
            return Err(format!("STARTTLS answered {:?}", go.trim()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let capture = Arc::new(Capture {
            seen: Mutex::new(None),
            algs: provider.signature_verification_algorithms,
        });
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(capture.clone())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        // SNI is the host name when the address is one; any name does for an IP.
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        let name =
            rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
        let mut tls = connector
            .connect(name, io.into_inner())
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let _ = tls.write_all(b"QUIT\r\n").await;
        let seen = capture.seen.lock().map_err(|e| e.to_string())?.clone();
        seen.ok_or_else(|| "no certificate presented".to_owned())
    };
    tokio::time::timeout(STEP_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {STEP_TIMEOUT:?}")))
}

fn cert_checks(der: &[u8], hostname: &str, addr: &str, now: i64, report: &mut Report) {
    let cert = rustls::pki_types::CertificateDer::from(der);
    let names_ok = rustls::server::ParsedCertificate::try_from(&cert)
        .map_err(|e| e.to_string())
        .and_then(|parsed| {
            let name = rustls::pki_types::ServerName::try_from(hostname.to_owned())
                .map_err(|e| e.to_string())?;
            rustls::client::verify_server_name(&parsed, &name).map_err(|e| e.to_string())
        });
    let renew = format!("a certificate for {hostname} in email.tls_cert_file");
    match names_ok {
        Ok(()) => report.pass(
            "smtp-cert-name",
            format!("the certificate at {addr} covers {hostname}"),
        ),
        Err(e) => report.fail(
            "smtp-cert-name",
            format!("the certificate at {addr} does not cover {hostname}: {e}"),
            format!("install {renew}"),
        ),
    }
    match not_after(der) {
        None => report.fail(
            "smtp-cert-expiry",
            format!("the certificate at {addr} has no readable validity"),
            format!("install {renew}"),
        ),
        Some(end) if end <= now => report.fail(
            "smtp-cert-expiry",
            format!("the certificate at {addr} expired on {}", date(end)),
            format!("renew it: install {renew}"),
        ),
        Some(end) if end - now < CERT_WARN_DAYS * 86_400 => report.warn(
            "smtp-cert-expiry",
            format!(
                "the certificate at {addr} expires on {}, within {CERT_WARN_DAYS} days",
                date(end)
            ),
            format!("renew it: install {renew}"),
        ),
        Some(end) => report.pass(
            "smtp-cert-expiry",
            format!("the certificate at {addr} is valid until {}", date(end)),
        ),
    }
}

fn date(unix_s: i64) -> String {
    chrono::DateTime::from_timestamp(unix_s, 0)
        .map_or_else(|| unix_s.to_string(), |d| d.format("%Y-%m-%d").to_string())
}

/// The `notAfter` of an X.509 certificate (DER), in unix seconds.
#[must_use]
pub fn not_after(der: &[u8]) -> Option<i64> {
    use der::{Decode, Reader, Tag, Tagged, asn1::AnyRef};
    fn rest<'a, R: Reader<'a>>(r: &mut R) -> der::Result<()> {
        while !r.is_finished() {
            AnyRef::decode(r)?;
        }
        Ok(())
    }
    let mut r = der::SliceReader::new(der).ok()?;
    let end = r
        .sequence(|cert| {
            let end = cert.sequence(|tbs| {
                // The optional [0] version, then serial, signature, issuer, validity.
                if AnyRef::decode(tbs)?.tag() != Tag::Integer {
                    AnyRef::decode(tbs)?;
                }
                AnyRef::decode(tbs)?;
                AnyRef::decode(tbs)?;
                let end = tbs.sequence(|validity| {
                    AnyRef::decode(validity)?;
                    let t = AnyRef::decode(validity)?;
                    Ok(match t.tag() {
                        Tag::UtcTime => der::asn1::UtcTime::try_from(t)?.to_unix_duration(),
                        _ => der::asn1::GeneralizedTime::try_from(t)?.to_unix_duration(),
                    })
                })?;
                rest(tbs)?;
                Ok(end)
            })?;
            rest(cert)?;
            Ok(end)
        })
        .ok()?;
    i64::try_from(end.as_secs()).ok()
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
    fn certificate_ends_in_both_time_forms() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let end = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/email")
                .join(name);
            not_after(&CertificateDer::from_pem_file(path).unwrap())
        };
        // GeneralizedTime (after 2049) and UTCTime.
        assert_eq!(end("tls.crt"), Some(4_948_930_300));
        assert_eq!(end("utc-time.crt"), Some(2_111_004_891));
        assert_eq!(not_after(b"\x30\x03\x02\x01\x01"), None);
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
