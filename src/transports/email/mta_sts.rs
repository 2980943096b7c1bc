//! MTA-STS (RFC 8461) for direct MX delivery: a recipient domain that publishes
//! `_mta-sts.{domain} TXT "v=STSv1; id=…"` serves its policy at
//! `https://mta-sts.{domain}/.well-known/mta-sts.txt` (a valid certificate, no redirects). The
//! policy names the MX hosts allowed (`mx: mail.example.com`, `mx: *.example.net`) and a `mode`:
//! under `enforce` mail goes only to a listed MX, over STARTTLS with a certificate valid for its
//! name, or not at all (retried later); under `testing` it goes as usual and the failures are
//! only recorded; `none` turns the policy off. A policy is kept for its `max_age` (in memory,
//! and in the database, `email_mta_sts`, read once per process: for other instances and across
//! restarts) and fetched
//! again when the TXT record's `id` changes; while the TXT record is missing or a fetch fails,
//! the policy kept still holds.
//!
//! Parsing is pure ([`parse_policy`], [`record_id`], [`mx_matches`]); [`Sts`] fetches and keeps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::store::{Arg, Db};

/// The largest policy body read (RFC 8461 §3.3 allows 64 KiB).
const MAX_POLICY_BYTES: usize = 64 * 1024;

/// The longest a policy is kept, whatever its `max_age` says (RFC 8461 §3.2: about a year).
const MAX_AGE_CAP: u64 = 31_557_600;

/// How long a policy fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// A policy's `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Deliver only to a listed MX, over validated TLS.
    Enforce,
    /// Deliver as usual; record what would have failed.
    Testing,
    /// No policy.
    None,
}

impl Mode {
    /// Its name, as the policy and the logs write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Testing => "testing",
            Self::None => "none",
        }
    }
}

/// A domain's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The `id` of the TXT record it was fetched under.
    pub id: String,
    /// What it asks.
    pub mode: Mode,
    /// The MX host patterns allowed, lowercase.
    pub mx: Vec<String>,
    /// How long it may be kept, in seconds.
    pub max_age: u64,
}

impl Policy {
    /// Whether `host` is one of the MX hosts it allows.
    #[must_use]
    pub fn allows(&self, host: &str) -> bool {
        self.mx.iter().any(|p| mx_matches(p, host))
    }
}

/// The `id` of an `_mta-sts` TXT record (`v=STSv1; id=20261129T000000;`), when it is one: the
/// version first, an id of 1 to 32 letters and digits.
#[must_use]
pub fn record_id(txt: &str) -> Option<String> {
    let mut fields = txt.split(';').map(str::trim).filter(|f| !f.is_empty());
    if fields.next()? != "v=STSv1" {
        return None;
    }
    fields
        .find_map(|f| f.strip_prefix("id="))
        .filter(|id| {
            !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric())
        })
        .map(str::to_owned)
}

/// Parses a policy body fetched under the TXT record `id` (RFC 8461 §3.2: `key: value` lines,
/// `version: STSv1`, `mode`, `max_age`, and one `mx` line per pattern unless the mode is
/// `none`; unknown keys are skipped).
///
/// # Errors
/// What makes it no policy.
pub fn parse_policy(id: &str, text: &str) -> Result<Policy, String> {
    let (mut version, mut mode, mut max_age, mut mx) = (None, None, None, Vec::new());
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| format!("a line without a colon: {line:?}"))?;
        let value = value.trim();
        match key.trim() {
            "version" => version = Some(value.to_owned()),
            "mode" => {
                mode = Some(match value {
                    "enforce" => Mode::Enforce,
                    "testing" => Mode::Testing,
                    "none" => Mode::None,
                    other => return Err(format!("unknown mode {other:?}")),
                });
            }
            "max_age" => {
                max_age = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| format!("max_age is not a number: {value:?}"))?,
                );
            }
            "mx" => mx.push(value.trim_end_matches('.').to_ascii_lowercase()),
            _ => {}
        }
    }
    if version.as_deref() != Some("STSv1") {
        return Err("no version: STSv1".into());
    }
    let mode = mode.ok_or("no mode")?;
    let max_age = max_age.ok_or("no max_age")?.min(MAX_AGE_CAP);
    if mx.is_empty() && mode != Mode::None {
        return Err("no mx".into());
    }
    Ok(Policy {
        id: id.to_owned(),
        mode,
        mx,
        max_age,
    })
}

/// Whether the MX `host` matches `pattern`: the same name, or for `*.example.com` a name of one
/// more label under `example.com` (RFC 8461 §4.1).
#[must_use]
pub fn mx_matches(pattern: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => host == pattern,
    }
}

/// What was kept of a domain.
#[derive(Debug, Clone)]
struct Kept {
    policy: Policy,
    /// Until when (unix ms).
    until: i64,
}

/// A policy kept in the database.
#[derive(sqlx::FromRow, serde::Deserialize)]
struct KeptRow {
    domain: String,
    policy_id: String,
    body: String,
    expires_at: i64,
}

/// Fetches and keeps the policies of recipient domains.
pub struct Sts {
    db: Db,
    http: reqwest::Client,
    port: u16,
    /// `_mta-sts.{domain}` records known without DNS (`email.dns_records`).
    records: HashMap<String, String>,
    /// Whether names missing from `records` do not exist (`email.dns = "offline"`).
    offline: bool,
    kept: Mutex<HashMap<String, Kept>>,
    /// Whether the policies kept in the database were read ([`Sts::load`]).
    loaded: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for Sts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sts")
            .field("port", &self.port)
            .field("offline", &self.offline)
            .finish_non_exhaustive()
    }
}

impl Sts {
    /// A fetcher over `http` (no redirects, the roots trusted for direct delivery), asking
    /// policy hosts on `port`, with the TXT `records` known without DNS, keeping policies in
    /// `db` too.
    #[must_use]
    pub fn new(
        db: Db,
        http: reqwest::Client,
        port: u16,
        records: HashMap<String, String>,
        offline: bool,
    ) -> Self {
        Self {
            db,
            http,
            port,
            records,
            offline,
            kept: Mutex::new(HashMap::new()),
            loaded: tokio::sync::OnceCell::new(),
        }
    }

    /// The policy of `domain` that holds at `now` (unix ms), if it has one (`None` also for
    /// `mode: none`). Fetch problems are logged; they leave the policy kept, if any, in force.
    pub async fn policy(
        &self,
        domain: &str,
        dns: &mail_auth::MessageAuthenticator,
        now: i64,
    ) -> Option<Arc<Policy>> {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        self.loaded.get_or_init(|| self.load(now)).await;
        let kept = self.kept_in_memory(&domain, now);
        let id = self
            .record(&domain, dns)
            .await
            .as_deref()
            .and_then(record_id);
        let policy = match (id, kept) {
            // No record: a policy kept still holds (RFC 8461 §5.1).
            (None, kept) => kept.map(|k| k.policy),
            (Some(id), Some(k)) if k.policy.id == id => Some(k.policy),
            (Some(id), kept) => match self.fetch(&domain, &id).await {
                Ok((policy, body)) => {
                    let max_age =
                        i64::try_from(policy.max_age.saturating_mul(1000)).unwrap_or(i64::MAX);
                    let until = now.saturating_add(max_age);
                    self.keep(&domain, &policy, &body, until).await;
                    Some(policy)
                }
                Err(e) => {
                    tracing::warn!(domain, error = %e, "MTA-STS policy not fetched; the one kept, if any, holds");
                    kept.map(|k| k.policy)
                }
            },
        };
        policy.filter(|p| p.mode != Mode::None).map(Arc::new)
    }

    fn kept_in_memory(&self, domain: &str, now: i64) -> Option<Kept> {
        let mut map = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, k| k.until > now);
        map.get(domain).cloned()
    }

    /// Reads into memory the policies kept in the database that hold at `now` (other instances',
    /// and this one's before a restart): once, before the first direct delivery, so that a
    /// delivery asks the database nothing.
    async fn load(&self, now: i64) {
        let rows: Vec<KeptRow> = self
            .db
            .fetch_all(
                "SELECT domain, policy_id, body, expires_at FROM email_mta_sts WHERE expires_at > $1",
                &[Arg::Int(now)],
            )
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "reading the MTA-STS policies kept failed");
                Vec::new()
            });
        let mut map = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        for row in rows {
            if let Ok(policy) = parse_policy(&row.policy_id, &row.body) {
                map.entry(row.domain).or_insert(Kept {
                    policy,
                    until: row.expires_at,
                });
            }
        }
    }

    /// Keeps `policy` (fetched as `body`) for `domain` until `until`, here and in the database.
    async fn keep(&self, domain: &str, policy: &Policy, body: &str, until: i64) {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                domain.to_owned(),
                Kept {
                    policy: policy.clone(),
                    until,
                },
            );
        let stored = self
            .db
            .execute(
                "INSERT INTO email_mta_sts (domain, policy_id, body, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (domain) DO UPDATE SET policy_id = excluded.policy_id, body = excluded.body, \
                 expires_at = excluded.expires_at",
                &[
                    Arg::Text(domain),
                    Arg::Text(&policy.id),
                    Arg::Text(body),
                    Arg::Int(until),
                ],
            )
            .await;
        if let Err(e) = stored {
            tracing::warn!(domain, error = %e, "keeping the MTA-STS policy in the database failed");
        }
    }

    /// The text of `_mta-sts.{domain}`, if there is one.
    async fn record(&self, domain: &str, dns: &mail_auth::MessageAuthenticator) -> Option<String> {
        let name = format!("_mta-sts.{domain}");
        if let Some(r) = self.records.get(&name) {
            return Some(r.clone());
        }
        if self.offline {
            return None;
        }
        let raw = dns.txt_raw_lookup(name.as_str()).await.ok()?;
        Some(String::from_utf8_lossy(&raw).into_owned())
    }

    /// Fetches the policy of `domain` announced under `id`; with the body it was read from.
    async fn fetch(&self, domain: &str, id: &str) -> Result<(Policy, String), String> {
        let port = if self.port == 443 {
            String::new()
        } else {
            format!(":{}", self.port)
        };
        let url = format!("https://mta-sts.{domain}{port}/.well-known/mta-sts.txt");
        let mut resp = self
            .http
            .get(&url)
            .timeout(FETCH_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status()));
        }
        let text_plain = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("text/plain"));
        if !text_plain {
            return Err(format!("{url}: not text/plain"));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_POLICY_BYTES {
                return Err(format!("{url}: over {MAX_POLICY_BYTES} bytes"));
            }
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        let policy = parse_policy(id, &body).map_err(|e| format!("{url}: {e}"))?;
        Ok((policy, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_read_as_rfc_8461_writes_it() {
        let p = parse_policy(
            "abc1",
            "version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\nmx: *.example.net\r\nmax_age: 604800\r\n",
        )
        .unwrap();
        assert_eq!(p.mode, Mode::Enforce);
        assert_eq!(p.mx, ["mail.example.com", "*.example.net"]);
        assert_eq!(p.max_age, 604_800);
        assert!(p.allows("MAIL.example.com."));
        assert!(p.allows("mx1.example.net"));
        assert!(!p.allows("a.b.example.net"), "one label only");
        assert!(!p.allows("example.net"));
        assert!(!p.allows("evil-mail.example.com"));
        let capped = parse_policy(
            "x",
            "version: STSv1\nmode: testing\nmx: a\nmax_age: 99999999999\n",
        );
        assert_eq!(capped.unwrap().max_age, MAX_AGE_CAP);
        assert_eq!(
            parse_policy("x", "version: STSv1\nmode: none\nmax_age: 1\n").map(|p| p.mode),
            Ok(Mode::None)
        );
        for bad in [
            "mode: enforce\nmx: a\nmax_age: 1\n",
            "version: STSv1\nmode: strict\nmx: a\nmax_age: 1\n",
            "version: STSv1\nmode: enforce\nmax_age: 1\n",
            "version: STSv1\nmode: enforce\nmx: a\n",
            "version: STSv1\nmode: enforce\nmx: a\nmax_age: soon\n",
            "<html>not a policy</html>",
        ] {
            assert!(parse_policy("x", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_versioned_record_with_an_id_announces_a_policy() {
        assert_eq!(
            record_id("v=STSv1; id=20261129T1;").as_deref(),
            Some("20261129T1")
        );
        assert_eq!(record_id("v=STSv1;id=a1").as_deref(), Some("a1"));
        assert_eq!(record_id("v=spf1 -all"), None);
        assert_eq!(record_id("v=STSv1;"), None);
        assert_eq!(record_id("v=STSv1; id=has-dash"), None);
    }
}
