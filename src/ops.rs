//! What the operator is told: each agent's three addresses, the listeners and transports that
//! are on, and the checks `check-config` makes beyond the configuration's own values (files it
//! names exist, outbound URLs pass the network policy, queue kinds are known).

use std::fmt::Write as _;
use std::net::SocketAddr;

use crate::config::{A2aAuthConfig, BackendConfig, Config};
use crate::error::Result;
use crate::net::check_url;
use crate::site::Site;

/// Where one agent can be reached, and what answers for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentAddresses {
    /// The local name.
    pub name: String,
    /// Its fediverse handle, `@name@domain`.
    pub handle: String,
    /// Its email address, when the email transport is on.
    pub email: Option<String>,
    /// The URL of its A2A agent card, when the A2A transport is on.
    pub card_url: Option<String>,
    /// The kind of its backend (`echo`, `webhook`, `a2a`, `conformance`).
    pub backend: &'static str,
}

/// The name of a backend's kind, as written in the configuration.
#[must_use]
pub fn backend_kind(backend: &BackendConfig) -> &'static str {
    match backend {
        BackendConfig::Echo => "echo",
        BackendConfig::Conformance => "conformance",
        BackendConfig::A2a { .. } => "a2a",
        BackendConfig::Webhook { .. } => "webhook",
        BackendConfig::Openai { .. } => "openai",
    }
}

/// Every configured agent's addresses, derived from the public URL and the mail domain.
///
/// # Errors
/// [`crate::Error::Config`] when the public URL is unusable.
pub fn agent_addresses(config: &Config) -> Result<Vec<AgentAddresses>> {
    let site = Site::from_config(config)?;
    Ok(config
        .agents
        .iter()
        .map(|a| AgentAddresses {
            name: a.name.clone(),
            handle: format!("@{}@{}", a.name, site.handle_domain()),
            email: site.mail_domain().map(|d| format!("{}@{d}", a.name)),
            card_url: config
                .a2a
                .enabled
                .then(|| site.url(&format!("/agents/{}/agent-card.json", a.name))),
            backend: backend_kind(&a.backend),
        })
        .collect())
}

/// The agents as a plain-text table with a header row, columns padded to their widest cell;
/// `-` where a transport is off.
#[must_use]
pub fn agents_table(agents: &[AgentAddresses]) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "FEDIVERSE".to_owned(),
        "EMAIL".to_owned(),
        "A2A CARD".to_owned(),
        "BACKEND".to_owned(),
    ]];
    for a in agents {
        rows.push([
            a.name.clone(),
            a.handle.clone(),
            a.email.clone().unwrap_or_else(|| "-".into()),
            a.card_url.clone().unwrap_or_else(|| "-".into()),
            a.backend.to_owned(),
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
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

/// Logs one line per agent with its three addresses, and one line saying which listeners and
/// transports are on (`smtp` is the bound SMTP address, when the listener runs).
pub fn log_startup(config: &Config, smtp: Option<SocketAddr>) {
    match agent_addresses(config) {
        Ok(agents) => {
            for a in agents {
                tracing::info!(
                    agent = %a.name,
                    fediverse = %a.handle,
                    email = a.email.as_deref().unwrap_or("off"),
                    a2a_card = a.card_url.as_deref().unwrap_or("off"),
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
/// the files it names exist, every outbound URL passes the network policy in effect
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
        match &a.backend {
            BackendConfig::Webhook { url, .. } => {
                urls.push((format!("{at}.backend.url"), url.clone()));
            }
            BackendConfig::A2a { card, .. } => {
                urls.push((format!("{at}.backend.card"), card.clone()));
            }
            BackendConfig::Openai { base_url, .. } => {
                urls.push((format!("{at}.backend.base_url"), base_url.clone()));
            }
            BackendConfig::Echo | BackendConfig::Conformance => {}
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
mod tests {
    use super::*;
    use crate::config::{AgentConfig, Secret};

    fn webhook(url: &str) -> AgentConfig {
        AgentConfig {
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
        }
    }

    #[test]
    fn addresses_follow_the_public_url_and_the_transports() {
        let mut c = Config::default();
        c.server.public_url = Some("https://sb.example".into());
        c.agents.push(webhook("https://hook.example/x"));
        let a = agent_addresses(&c).unwrap();
        assert_eq!(a[1].handle, "@hook@sb.example");
        assert_eq!(a[1].email.as_deref(), Some("hook@sb.example"));
        assert_eq!(
            a[1].card_url.as_deref(),
            Some("https://sb.example/agents/hook/agent-card.json")
        );
        assert_eq!(a[1].backend, "webhook");
        c.email.enabled = false;
        c.a2a.enabled = false;
        let a = agent_addresses(&c).unwrap();
        assert_eq!((a[0].email.as_ref(), a[0].card_url.as_ref()), (None, None));
        let table = agents_table(&a);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME  "), "{table}");
        assert!(
            lines[2].starts_with("hook ") && lines[2].ends_with("webhook"),
            "{table}"
        );
        assert!(lines[2].contains(" - "), "{table}");
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
