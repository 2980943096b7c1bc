//! What the operator is told: each agent's three addresses, the listeners and transports that
//! are on, and the checks `check-config` makes beyond the configuration's own values (files it
//! names exist, outbound URLs pass the network policy, queue kinds are known).

use std::fmt::Write as _;
use std::net::SocketAddr;

use crate::config::{A2aAuthConfig, Config, ImageSource, read_image_file};
use crate::error::Result;
use crate::net::check_url;
use crate::site::Site;

/// A kind of address a transport gives every agent (declared by the transport, in its
/// descriptor): the agents table, the console and the start-up lines show one per kind.
#[derive(Debug, Clone, Copy)]
pub struct AddressKind {
    /// What it is called: the start-up line's key, and how callers ask for it
    /// ([`AgentAddresses::get`]).
    pub key: &'static str,
    /// What it is called in the console (`Fediverse`); the agents table's column is the same
    /// in capitals.
    pub label: &'static str,
    /// Where its column stands (smaller first).
    pub rank: u8,
    /// The address of the agent named by the last argument, or `None` when the transport is
    /// off.
    pub of: fn(&Config, &Site, &str) -> Option<String>,
}

impl PartialEq for AddressKind {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for AddressKind {}

/// Where one agent can be reached, and what answers for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentAddresses {
    /// The local name.
    pub name: String,
    /// One address per kind, in column order: `None` where its transport is off.
    pub addresses: Vec<(AddressKind, Option<String>)>,
    /// The kind of its backend (`echo`, `webhook`, `a2a`, `openai`, `conformance`).
    pub backend: &'static str,
}

impl AgentAddresses {
    /// The address of kind `key` (`fediverse`, `email`, `a2a_card`), when its transport is on.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.addresses
            .iter()
            .find(|(k, _)| k.key == key)
            .and_then(|(_, a)| a.as_deref())
    }
}

/// Every configured agent's addresses of each of `kinds`, derived from the public URL and the
/// mail domain.
///
/// # Errors
/// [`crate::Error::Config`] when the public URL is unusable.
pub fn agent_addresses(config: &Config, kinds: &[AddressKind]) -> Result<Vec<AgentAddresses>> {
    let site = Site::from_config(config)?;
    let mut kinds = kinds.to_vec();
    kinds.sort_by_key(|k| k.rank);
    Ok(config
        .agents
        .iter()
        .map(|a| AgentAddresses {
            name: a.name.clone(),
            addresses: kinds
                .iter()
                .map(|k| (*k, (k.of)(config, &site, &a.name)))
                .collect(),
            backend: a.backend.kind(),
        })
        .collect())
}

/// The agents as a plain-text table with a header row, columns padded to their widest cell;
/// `-` where a transport is off.
#[must_use]
pub fn agents_table(agents: &[AgentAddresses]) -> String {
    let mut header = vec!["NAME".to_owned()];
    if let Some(first) = agents.first() {
        header.extend(first.addresses.iter().map(|(k, _)| k.label.to_uppercase()));
    }
    header.push("BACKEND".to_owned());
    let mut rows = vec![header];
    for a in agents {
        let mut row = vec![a.name.clone()];
        row.extend(
            a.addresses
                .iter()
                .map(|(_, addr)| addr.clone().unwrap_or_else(|| "-".into())),
        );
        row.push(a.backend.to_owned());
        rows.push(row);
    }
    let mut widths = vec![0usize; rows.iter().map(Vec::len).max().unwrap_or(0)];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Logs one line per agent with its addresses, and one line saying which listeners and
/// transports are on (`smtp` is the bound SMTP address, when the listener runs). The addresses
/// of the built-in transports keep fields of their own (`fediverse`, `email`, `a2a_card`: log
/// processing reads them); any other kind is listed in `more` as `key=address`.
pub fn log_startup(config: &Config, kinds: &[AddressKind], smtp: Option<SocketAddr>) {
    const OWN_FIELDS: [&str; 3] = ["fediverse", "email", "a2a_card"];
    match agent_addresses(config, kinds) {
        Ok(agents) => {
            for a in agents {
                let mut more = String::new();
                for (k, addr) in a
                    .addresses
                    .iter()
                    .filter(|(k, _)| !OWN_FIELDS.contains(&k.key))
                {
                    let _ = write!(more, "{}={} ", k.key, addr.as_deref().unwrap_or("off"));
                }
                tracing::info!(
                    agent = %a.name,
                    fediverse = a.get("fediverse").unwrap_or("off"),
                    email = a.get("email").unwrap_or("off"),
                    a2a_card = a.get("a2a_card").unwrap_or("off"),
                    more = more.trim_end(),
                    backend = a.backend,
                    "agent"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "agent addresses unknown"),
    }
    let on = |b: bool| if b { "on" } else { "off" };
    let smtp_addr = smtp.map_or_else(|| "off".to_owned(), |a| a.to_string());
    let starttls = smtp.is_some() && config.email.tls_cert_file.is_some();
    tracing::info!(
        api = on(config.api.token.is_some()),
        smtp = %smtp_addr,
        starttls = on(starttls),
        activitypub = on(config.activitypub.enabled),
        a2a = on(config.a2a.enabled),
        email = on(config.email.enabled),
        "listeners and transports"
    );
}

/// What `check-config` checks beyond the configuration's own values, all problems together:
/// the files it names exist (profile images: readable images within `media.max_bytes`), every
/// outbound URL passes the network policy in effect
/// (`net.allow_private_addresses`; names are resolved only when used), and every
/// `[queue.kinds.X]` is one of `known_kinds`.
#[must_use]
pub fn check_environment(config: &Config, known_kinds: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, file) in [
        ("email.tls_cert_file", &config.email.tls_cert_file),
        ("email.tls_key_file", &config.email.tls_key_file),
    ] {
        if let Some(path) = file {
            match std::fs::metadata(path) {
                Ok(m) if m.is_file() => {}
                Ok(_) => problems.push(format!("{key} {path:?}: not a file")),
                Err(e) => problems.push(format!("{key} {path:?}: {e}")),
            }
        }
    }
    for (i, agent) in config.agents.iter().enumerate() {
        for (key, value) in agent.activitypub.iter().flat_map(|p| p.images()) {
            if let Ok(ImageSource::File(path)) = ImageSource::parse(value)
                && let Err(why) = read_image_file(path, config.media.max_bytes)
            {
                problems.push(format!("agents[{i}].activitypub.{key} {path:?}: {why}"));
            }
        }
    }
    let allow = config.net.allow_private_addresses;
    for (key, raw) in outbound_urls(config) {
        match url::Url::parse(&raw) {
            Ok(url) => {
                if let Err(why) = check_url(&url, allow) {
                    let hint = if allow {
                        String::new()
                    } else {
                        " (net.allow_private_addresses is off)".to_owned()
                    };
                    problems.push(format!("{key} {raw:?}: {why}{hint}"));
                }
            }
            Err(e) => problems.push(format!("{key} {raw:?}: {e}")),
        }
    }
    for kind in config.queue.kinds.keys() {
        if !known_kinds.contains(&kind.as_str()) {
            problems.push(format!(
                "queue.kinds.{kind}: unknown job kind (known: {})",
                known_kinds.join(", ")
            ));
        }
    }
    problems
}

/// Every URL the server fetches or posts to, by its configuration key.
fn outbound_urls(config: &Config) -> Vec<(String, String)> {
    let mut urls = Vec::new();
    for (i, a) in config.agents.iter().enumerate() {
        let at = format!("agents[{i}]");
        for (key, url) in a.backend.outbound_urls() {
            urls.push((format!("{at}.backend.{key}"), url.to_owned()));
        }
        let (issuers, introspection) = match a.a2a.as_ref().map(|c| &c.auth) {
            Some(A2aAuthConfig::Jwt { issuers, .. }) => (issuers.as_slice(), None),
            Some(A2aAuthConfig::Oauth {
                issuers,
                introspection,
                ..
            }) => (issuers.as_slice(), introspection.as_ref()),
            Some(A2aAuthConfig::Public) | None => (&[][..], None),
        };
        for (j, iss) in issuers.iter().enumerate() {
            if let Some(u) = &iss.jwks_url {
                urls.push((format!("{at}.a2a.auth.issuers[{j}].jwks_url"), u.clone()));
            }
        }
        if let Some(intro) = introspection {
            urls.push((
                format!("{at}.a2a.auth.introspection.url"),
                intro.url.clone(),
            ));
        }
    }
    if let Some(cb) = &config.api.callback_url {
        urls.push(("api.callback_url".into(), cb.clone()));
    }
    for (i, iss) in config.trust.issuers.iter().enumerate() {
        if let Some(u) = &iss.jwks_url {
            urls.push((format!("trust.issuers[{i}].jwks_url"), u.clone()));
        }
    }
    urls
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{AgentConfig, BackendConfig, Secret};

    /// An agent `hook` with a webhook backend at `url`.
    pub(crate) fn webhook(url: &str) -> AgentConfig {
        AgentConfig {
            activitypub: None,
            name: "hook".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Webhook {
                url: url.into(),
                secret: Secret::new("s"),
                timeout_ms: 1000,
                assembled: false,
            },
            email: None,
            a2a: None,
            access: None,
            notify: Vec::new(),
        }
    }

    #[test]
    fn environment_problems_are_all_reported() {
        let mut c = Config::default();
        c.agents.push(webhook("http://hook.example/x"));
        c.api.callback_url = Some("https://127.0.0.1:9/cb".into());
        c.email.tls_cert_file = Some("/nonexistent/cert.pem".into());
        c.email.tls_key_file = Some("/nonexistent/key.pem".into());
        c.queue.kinds.insert("dispatc".into(), Default::default());
        let p = check_environment(&c, &["dispatch", "deliver"]);
        assert_eq!(p.len(), 5, "{p:#?}");
        assert!(p[0].starts_with("email.tls_cert_file"), "{p:#?}");
        assert!(p[2].contains("agents[1].backend.url") && p[2].contains("http://"));
        assert!(p[3].contains("api.callback_url") && p[3].contains("127.0.0.1"));
        assert!(p[4].contains("queue.kinds.dispatc"));
        c.net.allow_private_addresses = true;
        c.email.tls_cert_file = None;
        c.email.tls_key_file = None;
        c.queue.kinds.remove("dispatc");
        assert!(check_environment(&c, &["dispatch", "deliver"]).is_empty());
    }
}
