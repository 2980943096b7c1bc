//! `switchboard doctor`: what federation and mail need, checked from the outside in — the
//! public URL's documents as a remote server fetches them, the mail domain's DNS records, the
//! SMTP certificate a sending server sees, then the database and the media secret. Each check
//! ends as pass, warn or fail with the fix; any fail makes the command exit non-zero.
//!
//! DNS answers come from the system resolver, or, with `email.dns = "offline"`, only from
//! `email.dns_records` (TXT) and `email.dns_mx` (MX), as the email transport reads them.

mod cert;
mod mail;

pub use cert::not_after;
use mail::mail_checks;

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

/// Whether `base` names a local development setup: its host is loopback, a private or
/// link-local address, or `localhost` — nothing a remote server could reach.
fn is_local(base: &str) -> bool {
    let Ok(url) = url::Url::parse(base) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Ipv4(ip)) => crate::net::is_forbidden_ip(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => crate::net::is_forbidden_ip(IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        None => false,
    }
}

/// The fix for a public URL the doctor could not fetch. On a local development setup (public
/// URL on loopback or a private address) the SSRF guard refuses it unless the development
/// switch is on, and otherwise nothing listens there: DNS and the proxy have nothing to do with
/// it. A public one is reached through DNS and the proxy in front.
fn unreachable_fix(local: bool, refused: bool, base: &str) -> String {
    match (local, refused) {
        (true, true) => format!(
            "{base} is a local development address, which the SSRF guard refuses: for              development set net.allow_private_addresses = true (never in production); for a              public deployment set server.public_url to its public https:// URL"
        ),
        (true, false) => format!(
            "nothing answers at {base}: start the server (`switchboard serve`) with this              configuration, and make server.bind the address server.public_url names"
        ),
        (false, true) => format!(
            "{base} resolves to a non-public address, which the SSRF guard refuses: publish              the public host's address in DNS, or set server.public_url to the URL clients use"
        ),
        (false, false) => "check DNS for the public host and the proxy in front".to_owned(),
    }
}

async fn web_checks(config: &Config, site: &Site, http: &HttpClient, report: &mut Report) {
    let base = site.base_url();
    let local = is_local(base);
    if base.starts_with("https://") {
        report.pass("https", format!("{base} is served over HTTPS"));
    } else if local && !config.net.allow_private_addresses {
        report.warn(
            "https",
            format!("{base} is plain http on a local address: a development setup"),
            "nothing to do for development (set net.allow_private_addresses = true to let the              doctor reach it); to federate and receive mail, serve a public https:// URL and              set server.public_url to it",
        );
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
        Err(e) => {
            let refused = e.contains(crate::net::REFUSED);
            let fix = unreachable_fix(local, refused, base);
            if local && refused {
                // A development setup as such: the rest is fetched from the same place.
                report.warn(
                    "host",
                    format!("{base} is not checked: the SSRF guard refuses local addresses"),
                    fix,
                );
                return;
            }
            report.fail(
                "host",
                format!("{e}: {base} does not reach this server"),
                fix,
            );
            if local {
                return;
            }
        }
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
    // Private keys at rest: sealed under the key-encryption key, or readable by any backup.
    let kek = crate::keys::Kek::configured(&config.server).ok().flatten();
    match (
        kek.is_some(),
        crate::keys::check_kek(&db, kek.as_deref()).await,
    ) {
        (_, Err(e)) => report.fail(
            "kek",
            e.to_string(),
            "set server.kek_file to the KEK the keys were encrypted with",
        ),
        (false, Ok(_)) => report.warn(
            "kek",
            "no key-encryption key: private keys are stored unencrypted in the database and in \
             every backup of it",
            "set server.kek_file to 32 random bytes (`openssl rand -hex 32`), restart, then run \
             `switchboard keys encrypt`",
        ),
        (true, Ok(0)) => report.pass("kek", "every private key is encrypted"),
        (true, Ok(n)) => report.warn(
            "kek",
            format!("{n} private key(s) stored unencrypted"),
            "run `switchboard keys encrypt`",
        ),
    }
    Some(db)
}
