//! Authentication of inbound mail with `mail-auth`: DKIM (RSA-SHA1 and RSA keys under 1024 bits
//! count as failures), SPF for MAIL FROM and HELO, DMARC alignment and ARC, summarised as an
//! `Authentication-Results` header and as the identity evidence of spec §2.
//!
//! DNS answers come from a local table first (`email.dns_records`), so tests and air-gapped
//! installs can pre-load the records; in `offline` mode nothing else exists.
//!
//! mail-auth ≤ 0.14 computes the relaxed body hash without ignoring whitespace-only lines at
//! the end of the body (fixed in 0.15, which needs a newer Rust). A `c=…/relaxed` signature that
//! fails only on its body hash is verified again over the body with those lines removed, which is
//! the RFC 6376 §3.4.4 canonical form; a pass there counts as a pass, for DMARC alignment too.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use mail_auth::common::crypto::Algorithm;
use mail_auth::common::parse::TxtRecordParser;
use mail_auth::common::verify::DomainKey;
use mail_auth::dkim::Canonicalization;
use mail_auth::dmarc::Dmarc;
use mail_auth::dmarc::verify::DmarcParameters;
use mail_auth::hickory_resolver::config::{ResolverConfig, ResolverOpts};
use mail_auth::hickory_resolver::proto::op::ResponseCode;
use mail_auth::spf::Spf;
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{
    AuthenticatedMessage, AuthenticationResults, DkimOutput, DkimResult, DmarcResult, DnsError,
    DnssecStatus, MX, MessageAuthenticator, Parameters, RecordSet, ResolverCache, SpfResult, Txt,
};

use crate::config::DnsMode;
use crate::error::{Error, Result};

/// TXT answers known without DNS.
#[derive(Clone, Default)]
pub struct StaticTxt {
    records: HashMap<Box<str>, Txt>,
    offline: bool,
}

impl std::fmt::Debug for StaticTxt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticTxt")
            .field("names", &self.records.keys().collect::<Vec<_>>())
            .field("offline", &self.offline)
            .finish()
    }
}

fn fqdn(name: &str) -> Box<str> {
    let name = name.trim().to_ascii_lowercase();
    if name.ends_with('.') {
        name.into()
    } else {
        format!("{name}.").into()
    }
}

impl StaticTxt {
    /// Parses `name → record` pairs; the record kind follows the name (`…._domainkey.…` DKIM key,
    /// `_dmarc.…` DMARC policy) or the text (`v=spf1` SPF).
    ///
    /// # Errors
    /// [`Error::Config`] naming a record that does not parse.
    pub fn new<'a>(
        records: impl IntoIterator<Item = (&'a String, &'a String)>,
        offline: bool,
    ) -> Result<Self> {
        let mut out = HashMap::new();
        for (name, value) in records {
            let key = fqdn(name);
            if key.starts_with("_mta-sts.") {
                // Read as text by MTA-STS (`super::mta_sts`), never by mail-auth.
                continue;
            }
            let bytes = value.as_bytes();
            let parsed = if key.contains("._domainkey.") {
                DomainKey::parse(bytes).map(|k| Txt::DomainKey(Arc::new(k)))
            } else if key.starts_with("_dmarc.") {
                Dmarc::parse(bytes).map(|d| Txt::Dmarc(Arc::new(d)))
            } else {
                Spf::parse(bytes).map(|s| Txt::Spf(Arc::new(s)))
            };
            let txt =
                parsed.map_err(|e| Error::Config(format!("email.dns_records.{name:?}: {e}")))?;
            out.insert(key, txt);
        }
        Ok(Self {
            records: out,
            offline,
        })
    }
}

impl ResolverCache<Box<str>, Txt> for StaticTxt {
    fn get<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        match self.records.get(name) {
            Some(t) => Some(t.clone()),
            None if self.offline => Some(Txt::Error(mail_auth::Error::Dns(
                DnsError::RecordNotFound(ResponseCode::NXDomain),
            ))),
            None => None,
        }
    }

    fn remove<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.get(name)
    }

    fn insert(&self, _key: Box<str>, _value: Txt, _valid_until: std::time::Instant) {}
}

/// MX answers known without DNS.
#[derive(Clone, Default, Debug)]
pub struct StaticMx {
    records: HashMap<Box<str>, RecordSet<MX>>,
    offline: bool,
}

impl StaticMx {
    /// `domain → exchanges` (most preferred first).
    #[must_use]
    pub fn new<'a>(
        records: impl IntoIterator<Item = (&'a String, &'a Vec<String>)>,
        offline: bool,
    ) -> Self {
        let records = records
            .into_iter()
            .map(|(domain, hosts)| {
                let mx: Vec<MX> = hosts
                    .iter()
                    .zip(0u16..)
                    .map(|(h, i)| MX {
                        exchanges: vec![h.clone().into_boxed_str()].into_boxed_slice(),
                        preference: i.saturating_mul(10),
                    })
                    .collect();
                (
                    fqdn(domain),
                    RecordSet {
                        rrset: mx.into(),
                        dnssec_status: DnssecStatus::default(),
                    },
                )
            })
            .collect();
        Self { records, offline }
    }

    /// Whether names missing here do not exist.
    #[must_use]
    pub fn offline(&self) -> bool {
        self.offline
    }
}

impl ResolverCache<Box<str>, RecordSet<MX>> for StaticMx {
    fn get<Q>(&self, name: &Q) -> Option<RecordSet<MX>>
    where
        Box<str>: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.records.get(name).cloned()
    }

    fn remove<Q>(&self, name: &Q) -> Option<RecordSet<MX>>
    where
        Box<str>: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.get(name)
    }

    fn insert(&self, _key: Box<str>, _value: RecordSet<MX>, _valid_until: std::time::Instant) {}
}

/// Builds the resolver for `mode`.
///
/// # Errors
/// [`Error::Startup`] when the system resolver configuration cannot be read.
pub fn authenticator(mode: DnsMode) -> Result<MessageAuthenticator> {
    match mode {
        DnsMode::System => MessageAuthenticator::new_system_conf(),
        DnsMode::Offline => MessageAuthenticator::new(
            ResolverConfig::from_parts(None, vec![], vec![]),
            ResolverOpts::default(),
        ),
    }
    .map_err(|e| Error::Startup(format!("DNS resolver: {e}")))
}

/// Verifies inbound mail.
#[derive(Clone)]
pub struct Verifier {
    auth: MessageAuthenticator,
    txt: StaticTxt,
    hostname: String,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("txt", &self.txt)
            .field("hostname", &self.hostname)
            .finish_non_exhaustive()
    }
}

/// The SMTP envelope of a message.
#[derive(Debug, Clone)]
pub struct Envelope<'a> {
    /// The client's address.
    pub ip: IpAddr,
    /// The HELO/EHLO name.
    pub helo: &'a str,
    /// MAIL FROM (empty for the null sender).
    pub mail_from: &'a str,
}

/// What authentication found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthOutcome {
    /// The `Authentication-Results` header value.
    pub results: String,
    /// `d=` and `s=` of the first passing DKIM signature that is not weak.
    pub dkim_pass: Option<(String, String)>,
    /// DMARC passed (aligned DKIM or SPF) for the From domain.
    pub dmarc_pass: bool,
    /// DMARC passed through SPF only.
    pub dmarc_via_spf: bool,
    /// The DKIM pass is aligned with the From domain.
    pub dkim_aligned: bool,
    /// The SPF result for MAIL FROM (HELO for the null sender), as text.
    pub spf: String,
    /// The SPF result for the HELO name, as text.
    pub spf_helo: String,
    /// The DMARC result, as text.
    pub dmarc: String,
    /// The ARC chain result, as text.
    pub arc: String,
    /// The From domain mail-auth read.
    pub from_domain: String,
}

/// A signature that must not count: RSA-SHA1, or an RSA signature under 1024 bits.
fn weak(o: &DkimOutput<'_>) -> bool {
    o.signature().is_some_and(|s| {
        s.a == Algorithm::RsaSha1 || (s.a == Algorithm::RsaSha256 && s.b.len() < 128)
    })
}

/// Relaxed alignment (RFC 7489 §3.1.1), approximated without the public suffix list: the
/// domains are equal or one is a subdomain of the other.
#[must_use]
pub fn aligned(a: &str, b: &str) -> bool {
    let (a, b) = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
    !a.is_empty()
        && !b.is_empty()
        && (a == b || a.ends_with(&format!(".{b}")) || b.ends_with(&format!(".{a}")))
}

/// `raw` with the whitespace-only lines at the end of the body removed.
fn trim_body_tail(raw: &[u8]) -> Option<Vec<u8>> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let (head, body) = raw.split_at(split);
    let mut end = body.len();
    loop {
        let text = &body[..end];
        let line_start = text
            .strip_suffix(b"\r\n")
            .map(|t| t.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1));
        match line_start {
            Some(start)
                if body[start..end - 2]
                    .iter()
                    .all(|b| *b == b' ' || *b == b'\t') =>
            {
                end = start;
                if end == 0 {
                    break;
                }
            }
            _ => break,
        }
    }
    (end != body.len()).then(|| [head, &body[..end]].concat())
}

fn dkim_text(r: &DkimResult) -> &'static str {
    match r {
        DkimResult::Pass => "pass",
        DkimResult::Neutral(_) => "neutral",
        DkimResult::Fail(_) => "fail",
        DkimResult::PermError(_) => "permerror",
        DkimResult::TempError(_) => "temperror",
        DkimResult::None => "none",
    }
}

fn dmarc_text(r: &DmarcResult) -> &'static str {
    match r {
        DmarcResult::Pass => "pass",
        DmarcResult::Fail(_) => "fail",
        DmarcResult::TempError(_) => "temperror",
        DmarcResult::PermError(_) => "permerror",
        DmarcResult::None => "none",
    }
}

fn spf_text(r: SpfResult) -> &'static str {
    match r {
        SpfResult::Pass => "pass",
        SpfResult::Fail => "fail",
        SpfResult::SoftFail => "softfail",
        SpfResult::Neutral => "neutral",
        SpfResult::TempError => "temperror",
        SpfResult::PermError => "permerror",
        SpfResult::None => "none",
    }
}

impl Verifier {
    /// A verifier answering from `txt` first, then (unless offline) the system resolver.
    ///
    /// # Errors
    /// [`Error::Startup`] when the system resolver configuration cannot be read.
    pub fn new(mode: DnsMode, txt: StaticTxt, hostname: &str) -> Result<Self> {
        let auth = authenticator(mode)?;
        Ok(Self {
            auth,
            txt,
            hostname: hostname.to_owned(),
        })
    }

    /// Runs DKIM, SPF (MAIL FROM and HELO), ARC and DMARC over `raw`, as `parsed` (the parse
    /// the message is routed by).
    pub async fn verify(
        &self,
        raw: &[u8],
        parsed: &mail_parser::Message<'_>,
        env: &Envelope<'_>,
    ) -> AuthOutcome {
        let msg = AuthenticatedMessage::from_parsed(parsed, raw, true);
        let from = msg.from().to_owned();
        let from_domain = from
            .rsplit_once('@')
            .map(|(_, d)| d.to_ascii_lowercase())
            .unwrap_or_default();
        let all = self
            .auth
            .verify_dkim(Parameters::new(&msg).with_txt_cache(&self.txt))
            .await;
        let (weak_sigs, mut dkim): (Vec<DkimOutput<'_>>, Vec<DkimOutput<'_>>) =
            all.into_iter().partition(weak);
        // Work around the relaxed-body defect (see the module docs).
        let retry = dkim.iter().any(|o| {
            matches!(
                o.result(),
                DkimResult::Neutral(mail_auth::Error::Dkim(
                    mail_auth::dkim::DkimError::FailedBodyHashMatch
                )) | DkimResult::Fail(mail_auth::Error::Dkim(
                    mail_auth::dkim::DkimError::FailedBodyHashMatch
                ))
            ) && o
                .signature()
                .is_some_and(|s| s.cb == Canonicalization::Relaxed)
        });
        let trimmed = if retry { trim_body_tail(raw) } else { None };
        let tmsg = trimmed.as_deref().and_then(AuthenticatedMessage::parse);
        let mut repaired = Vec::new();
        // The passes over the repaired body, which DMARC counts like any other pass.
        let mut repaired_passes = Vec::new();
        if let Some(tmsg) = &tmsg {
            let again = self
                .auth
                .verify_dkim(Parameters::new(tmsg).with_txt_cache(&self.txt))
                .await;
            for o in again {
                if o.result() == &DkimResult::Pass
                    && !weak(&o)
                    && let Some(s) = o.signature()
                    && s.cb == Canonicalization::Relaxed
                {
                    repaired.push((s.d.clone(), s.s.clone()));
                    repaired_passes.push(o);
                }
            }
        }
        if !repaired.is_empty() {
            dkim.retain(|o| {
                !o.signature()
                    .is_some_and(|s| repaired.iter().any(|(d, sel)| *d == s.d && *sel == s.s))
            });
        }
        let mut dkim_pass = dkim
            .iter()
            .filter(|o| o.result() == &DkimResult::Pass)
            .filter_map(|o| o.signature())
            .map(|s| (s.d.to_ascii_lowercase(), s.s.clone()))
            .collect::<Vec<_>>();
        dkim_pass.extend(
            repaired
                .iter()
                .map(|(d, s)| (d.to_ascii_lowercase(), s.clone())),
        );
        // Prefer an aligned signature.
        dkim_pass.sort_by_key(|(d, _)| !aligned(d, &from_domain));

        let helo = if env.helo.is_empty() {
            "unknown"
        } else {
            env.helo
        };
        // SPF for the HELO identity always, and for MAIL FROM unless it is the null sender
        // (then the HELO result stands for it, RFC 7208 §2.4).
        let spf_helo = self
            .auth
            .verify_spf(
                Parameters::new(SpfParameters::verify_ehlo(env.ip, helo, &self.hostname))
                    .with_txt_cache(&self.txt),
            )
            .await;
        let spf = if env.mail_from.is_empty() {
            spf_helo.clone()
        } else {
            self.auth
                .verify_spf(
                    Parameters::new(SpfParameters::verify_mail_from(
                        env.ip,
                        helo,
                        &self.hostname,
                        env.mail_from,
                    ))
                    .with_txt_cache(&self.txt),
                )
                .await
        };
        let mail_from_domain = env
            .mail_from
            .rsplit_once('@')
            .map_or(helo, |(_, d)| d)
            .to_ascii_lowercase();
        let arc = self
            .auth
            .verify_arc(Parameters::new(&msg).with_txt_cache(&self.txt))
            .await;
        let mut dmarc_dkim = dkim.clone();
        dmarc_dkim.extend(repaired_passes);
        let dmarc = self
            .auth
            .verify_dmarc(
                Parameters::new(DmarcParameters::new(
                    &msg,
                    &dmarc_dkim,
                    &mail_from_domain,
                    &spf,
                ))
                .with_txt_cache(&self.txt),
            )
            .await;

        let mut ar = AuthenticationResults::new(&self.hostname)
            .with_dkim_results(&dkim, &from)
            .with_arc_result(&arc, env.ip)
            .with_dmarc_result(&dmarc);
        ar = ar.with_spf_ehlo_result(&spf_helo, env.ip, helo);
        if !env.mail_from.is_empty() {
            ar = ar.with_spf_mailfrom_result(&spf, env.ip, env.mail_from, helo);
        }
        let mut results = ar.to_string();
        for (d, s) in &repaired {
            results.push_str(&format!(
                "; dkim=pass (relaxed body, trailing blank lines ignored) header.d={d} header.s={s}"
            ));
        }
        for w in &weak_sigs {
            if let Some(s) = w.signature() {
                results.push_str(&format!(
                    "; dkim=policy (weak signature: {}) header.d={} header.s={}",
                    if s.a == Algorithm::RsaSha1 {
                        "rsa-sha1"
                    } else {
                        "rsa key under 1024 bits"
                    },
                    s.d,
                    s.s
                ));
            }
        }

        let dkim_aligned = dkim_pass
            .first()
            .is_some_and(|(d, _)| aligned(d, &from_domain));
        let spf_aligned =
            spf.result() == SpfResult::Pass && aligned(&mail_from_domain, &from_domain);
        let dmarc_result = dmarc.result();
        let dmarc_pass = match dmarc_result {
            DmarcResult::Pass => true,
            // No DMARC record: apply the alignment rule ourselves.
            DmarcResult::None => dkim_aligned || spf_aligned,
            _ => false,
        };
        AuthOutcome {
            results: results.replace(['\r', '\n'], " "),
            dkim_pass: dkim_pass.into_iter().next(),
            dmarc_pass,
            dmarc_via_spf: dmarc_pass && !dkim_aligned,
            dkim_aligned,
            spf: spf_text(spf.result()).into(),
            spf_helo: spf_text(spf_helo.result()).into(),
            dmarc: dmarc_text(&dmarc_result).into(),
            arc: dkim_text(arc.result()).into(),
            from_domain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_relaxed() {
        assert!(aligned("example.com", "example.com"));
        assert!(aligned("mail.example.com", "example.com"));
        assert!(aligned("example.com", "news.example.com"));
        assert!(!aligned("example.net", "example.com"));
        assert!(!aligned("badexample.com", "example.com"));
        assert!(!aligned("", "example.com"));
    }

    #[test]
    fn body_tail_trimming_removes_only_whitespace_lines() {
        let raw = b"A: b\r\n\r\nHello!\r\n  \r\n\r\n";
        assert_eq!(trim_body_tail(raw).unwrap(), b"A: b\r\n\r\nHello!\r\n");
        assert!(trim_body_tail(b"A: b\r\n\r\nHello!\r\n").is_none());
        assert_eq!(
            trim_body_tail(b"A: b\r\n\r\n \r\n").unwrap(),
            b"A: b\r\n\r\n"
        );
    }
}
