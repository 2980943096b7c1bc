//! HTTP signatures, both generations: draft-cavage-http-signatures-12 (`Signature` header,
//! RSA-SHA256 and hs2019, `Digest`) and RFC 9421 HTTP message signatures (`Signature-Input` +
//! `Signature`, `rsa-v1_5-sha256` and `ed25519`, RFC 9530 `Content-Digest`).
//!
//! Pure code: parsing, signing-string construction, window and coverage rules as Mastodon applies
//! them, and digest checks. The key lookup and the cryptographic check are the caller's (through
//! [`VerifyKey`]), so this module does no I/O.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::{Digest as _, Sha256, Sha512};

use crate::net::date;

/// Why a signature was refused. Every variant is an authentication failure (401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    /// No signature header at all.
    #[error("the request is not signed")]
    Missing,
    /// The header could not be parsed.
    #[error("malformed signature: {0}")]
    Malformed(String),
    /// A rule about covered components was broken.
    #[error("signature does not cover {0}")]
    Coverage(&'static str),
    /// Outside the validity window.
    #[error("signature is {0}")]
    Window(&'static str),
    /// The body digest is missing or wrong.
    #[error("digest: {0}")]
    Digest(&'static str),
    /// An algorithm we do not accept.
    #[error("unsupported algorithm {0}")]
    Algorithm(String),
    /// The cryptographic check failed.
    #[error("signature does not verify")]
    Invalid,
}

/// The request as the signature sees it.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a, H: Fn(&str) -> Option<String>> {
    /// Upper-case method.
    pub method: &'a str,
    /// Path and query as received (`/inbox?x=1`).
    pub path_and_query: &'a str,
    /// The full target URI (`https://host/inbox`), for RFC 9421 `@target-uri`.
    pub target_uri: &'a str,
    /// Header lookup by lower-case name; several values joined with `", "`.
    pub header: &'a H,
}

/// A public key as published by an actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// RSA, as SubjectPublicKeyInfo DER.
    Rsa(Vec<u8>),
    /// Ed25519, the raw 32 bytes.
    Ed25519([u8; 32]),
}

impl PublicKey {
    /// Verifies `sig` over `msg` (RSASSA-PKCS1-v1_5 SHA-256 or Ed25519).
    #[must_use]
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        match self {
            Self::Rsa(spki) => crate::keys::verify_rsa_pkcs1_sha256(spki, msg, sig),
            Self::Ed25519(raw) => crate::keys::verify_ed25519(raw, msg, sig),
        }
    }
}

/// Something that can verify a signature made with a given key id.
pub trait VerifyKey {
    /// Whether `sig` over `msg` verifies under the key (RSA keys with RSA-SHA256, Ed25519 keys
    /// with Ed25519; `alg` restricts which is acceptable when the signature names one).
    fn verify(&self, alg: Alg, msg: &[u8], sig: &[u8]) -> bool;
}

impl VerifyKey for PublicKey {
    fn verify(&self, alg: Alg, msg: &[u8], sig: &[u8]) -> bool {
        match (alg, self) {
            (Alg::RsaSha256, Self::Ed25519(_)) | (Alg::Ed25519, Self::Rsa(_)) => false,
            _ => PublicKey::verify(self, msg, sig),
        }
    }
}

/// The algorithm a signature declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// Whatever the key is (`hs2019`, or no `alg`).
    FromKey,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RsaSha256,
    /// Ed25519.
    Ed25519,
}

/// Which signature scheme a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// draft-cavage-http-signatures-12.
    Cavage,
    /// RFC 9421.
    Rfc9421,
}

/// A parsed signature, ready to verify once its key is known.
#[derive(Debug, Clone)]
pub struct ParsedSignature {
    /// The scheme.
    pub scheme: Scheme,
    /// The key URL.
    pub key_id: String,
    /// The declared algorithm.
    pub alg: Alg,
    /// The signature bytes.
    pub signature: Vec<u8>,
    /// The signing strings to try (cavage: with and without the query string).
    pub candidates: Vec<String>,
}

impl ParsedSignature {
    /// Verifies against `key`.
    #[must_use]
    pub fn verify(&self, key: &impl VerifyKey) -> bool {
        self.candidates
            .iter()
            .any(|c| key.verify(self.alg, c.as_bytes(), &self.signature))
    }
}

/// Mastodon's window: expiry defaults to created + 5 min, is capped at created + 12 h, and both
/// ends get an hour of clock skew.
const DEFAULT_VALIDITY_S: i64 = 300;
const MAX_VALIDITY_S: i64 = 12 * 3600;
const SKEW_S: i64 = 3600;

fn check_window(created: i64, expires: Option<i64>, now: i64) -> Result<(), SigError> {
    if created > now + SKEW_S {
        return Err(SigError::Window("dated in the future"));
    }
    let expires = expires
        .unwrap_or(created + DEFAULT_VALIDITY_S)
        .min(created + MAX_VALIDITY_S);
    if now > expires + SKEW_S {
        return Err(SigError::Window("expired"));
    }
    Ok(())
}

/// `SHA-256=<base64>` for a `Digest` header.
#[must_use]
pub fn digest_header(body: &[u8]) -> String {
    format!("SHA-256={}", B64.encode(Sha256::digest(body)))
}

/// `sha-256=:<base64>:` for a `Content-Digest` header.
#[must_use]
pub fn content_digest_header(body: &[u8]) -> String {
    format!("sha-256=:{}:", B64.encode(Sha256::digest(body)))
}

/// Checks a cavage `Digest` header: a `SHA-256=` (or `SHA-512=`) entry must match the body.
///
/// # Errors
/// [`SigError::Digest`] when no supported entry is present or one mismatches.
pub fn check_digest(header: &str, body: &[u8]) -> Result<(), SigError> {
    let mut matched = false;
    for entry in header.split(',') {
        let Some((alg, value)) = entry.trim().split_once('=') else {
            continue;
        };
        let value = value.trim();
        let expected = match alg.trim().to_ascii_lowercase().as_str() {
            "sha-256" => B64.encode(Sha256::digest(body)),
            "sha-512" => B64.encode(Sha512::digest(body)),
            _ => continue,
        };
        if value != expected {
            return Err(SigError::Digest("does not match the body"));
        }
        matched = true;
    }
    if matched {
        Ok(())
    } else {
        Err(SigError::Digest("no SHA-256 digest"))
    }
}

/// Checks an RFC 9530 `Content-Digest` header (`sha-256=:…:` or `sha-512=:…:`).
///
/// # Errors
/// [`SigError::Digest`] when no supported entry is present or one mismatches.
pub fn check_content_digest(header: &str, body: &[u8]) -> Result<(), SigError> {
    let mut matched = false;
    for entry in split_top_level(header, ',') {
        let Some((alg, value)) = entry.trim().split_once('=') else {
            continue;
        };
        let Some(b64) = value
            .trim()
            .strip_prefix(':')
            .and_then(|v| v.strip_suffix(':'))
        else {
            return Err(SigError::Digest("malformed Content-Digest"));
        };
        let given = B64
            .decode(b64)
            .map_err(|_| SigError::Digest("malformed Content-Digest"))?;
        let ok = match alg.trim() {
            "sha-256" => given == Sha256::digest(body).as_slice(),
            "sha-512" => given == Sha512::digest(body).as_slice(),
            _ => continue,
        };
        if !ok {
            return Err(SigError::Digest("does not match the body"));
        }
        matched = true;
    }
    if matched {
        Ok(())
    } else {
        Err(SigError::Digest("no sha-256 Content-Digest"))
    }
}

/// Splits on `sep` outside double quotes and parentheses.
fn split_top_level(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0i32, false, false, 0);
    for (i, c) in s.char_indices() {
        if quoted {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses `k="v",k2=v2` (cavage parameters).
fn cavage_params(s: &str) -> Result<Vec<(String, String)>, SigError> {
    let mut out = Vec::new();
    for item in split_top_level(s, ',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| SigError::Malformed(format!("parameter {item:?}")))?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        out.push((k.trim().to_ascii_lowercase(), v.to_owned()));
    }
    Ok(out)
}

/// Parses and checks a draft-cavage signature (from `Signature`, or `Authorization: Signature`).
/// The body digest is checked here too when the request has a body.
///
/// # Errors
/// Any [`SigError`].
pub fn parse_cavage<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    body: Option<&[u8]>,
    now: i64,
) -> Result<ParsedSignature, SigError> {
    let raw = match (req.header)("signature") {
        Some(s) => s,
        None => (req.header)("authorization")
            .and_then(|a| a.strip_prefix("Signature ").map(str::to_owned))
            .ok_or(SigError::Missing)?,
    };
    let params = cavage_params(&raw)?;
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let key_id = get("keyid").ok_or_else(|| SigError::Malformed("no keyId".into()))?;
    let sig_b64 = get("signature").ok_or_else(|| SigError::Malformed("no signature".into()))?;
    let signature = B64
        .decode(sig_b64)
        .map_err(|_| SigError::Malformed("signature is not base64".into()))?;
    let alg = match get("algorithm").map(str::to_ascii_lowercase).as_deref() {
        None | Some("hs2019") => Alg::FromKey,
        Some("rsa-sha256") => Alg::RsaSha256,
        Some("ed25519") => Alg::Ed25519,
        Some(other) => return Err(SigError::Algorithm(other.to_owned())),
    };
    let headers: Vec<String> = get("headers")
        .unwrap_or("(created)")
        .split_ascii_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let covers = |h: &str| headers.iter().any(|x| x == h);
    let parse_num = |k: &str| -> Result<Option<i64>, SigError> {
        get(k)
            .map(|v| {
                v.split('.')
                    .next()
                    .unwrap_or(v)
                    .parse::<i64>()
                    .map_err(|_| SigError::Malformed(format!("{k} is not a number")))
            })
            .transpose()
    };
    let created_param = parse_num("created")?;
    let expires_param = parse_num("expires")?;

    // Coverage rules (Mastodon's SignatureVerification).
    if !(covers("date") || covers("(created)")) {
        return Err(SigError::Coverage("date or (created)"));
    }
    if !(covers("digest") || covers("(request-target)")) {
        return Err(SigError::Coverage("digest or (request-target)"));
    }
    let is_post = req.method.eq_ignore_ascii_case("POST");
    if is_post && !covers("digest") {
        return Err(SigError::Coverage("digest"));
    }
    if req.method.eq_ignore_ascii_case("GET") && !covers("host") {
        return Err(SigError::Coverage("host"));
    }
    if is_post || covers("digest") {
        let d = (req.header)("digest").ok_or(SigError::Digest("missing Digest header"))?;
        check_digest(&d, body.unwrap_or_default())?;
    }

    // Window.
    let created = if covers("(created)") {
        created_param.ok_or_else(|| SigError::Malformed("(created) without created".into()))?
    } else {
        let d = (req.header)("date").ok_or_else(|| SigError::Malformed("no Date".into()))?;
        date::parse_unix_s(&d).ok_or_else(|| SigError::Malformed("unparseable Date".into()))?
    };
    let expires = if covers("(expires)") {
        Some(expires_param.ok_or_else(|| SigError::Malformed("(expires) without expires".into()))?)
    } else {
        None
    };
    check_window(created, expires, now)?;

    // Signing strings: with the query, and without it (legacy senders).
    let path_only = req
        .path_and_query
        .split_once('?')
        .map_or(req.path_and_query, |(p, _)| p);
    let mut targets = vec![req.path_and_query];
    if path_only != req.path_and_query {
        targets.push(path_only);
    }
    let mut candidates = Vec::new();
    for target in targets {
        let mut lines = Vec::with_capacity(headers.len());
        for h in &headers {
            let line = match h.as_str() {
                "(request-target)" => {
                    format!(
                        "(request-target): {} {target}",
                        req.method.to_ascii_lowercase()
                    )
                }
                "(created)" => format!("(created): {}", get("created").unwrap_or_default()),
                "(expires)" => format!("(expires): {}", get("expires").unwrap_or_default()),
                name => {
                    let v = (req.header)(name).ok_or_else(|| {
                        SigError::Malformed(format!("signed header {name} is absent"))
                    })?;
                    format!("{name}: {}", v.trim())
                }
            };
            lines.push(line);
        }
        candidates.push(lines.join("\n"));
    }
    Ok(ParsedSignature {
        scheme: Scheme::Cavage,
        key_id: key_id.to_owned(),
        alg,
        signature,
        candidates,
    })
}

/// One member of an RFC 9421 `Signature-Input` dictionary.
#[derive(Debug, Clone)]
struct SigInput<'a> {
    /// The serialized inner list with parameters, exactly as received (`@signature-params`).
    raw: &'a str,
    components: Vec<String>,
    params: Vec<(String, String)>,
}

fn parse_sig_input(member: &str) -> Result<SigInput<'_>, SigError> {
    let raw = member.trim();
    let rest = raw
        .strip_prefix('(')
        .ok_or_else(|| SigError::Malformed("Signature-Input is not an inner list".into()))?;
    let close = rest
        .find(')')
        .ok_or_else(|| SigError::Malformed("unterminated inner list".into()))?;
    let components = rest[..close]
        .split_ascii_whitespace()
        .map(|c| c.trim_matches('"').to_ascii_lowercase())
        .collect();
    let mut params = Vec::new();
    for p in split_top_level(&rest[close + 1..], ';') {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        let (k, v) = p.split_once('=').unwrap_or((p, "?1"));
        params.push((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()));
    }
    Ok(SigInput {
        raw,
        components,
        params,
    })
}

/// Parses and checks an RFC 9421 signature (the first member of `Signature-Input`; Mastodon
/// requires exactly one). `Content-Digest` is checked against the body on requests with one.
///
/// # Errors
/// Any [`SigError`].
pub fn parse_rfc9421<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    body: Option<&[u8]>,
    now: i64,
) -> Result<ParsedSignature, SigError> {
    let input_header = (req.header)("signature-input").ok_or(SigError::Missing)?;
    let sig_header = (req.header)("signature").ok_or(SigError::Missing)?;
    let members: Vec<&str> = split_top_level(&input_header, ',')
        .into_iter()
        .filter(|m| !m.trim().is_empty())
        .collect();
    let [member] = members.as_slice() else {
        return Err(SigError::Malformed("expected exactly one signature".into()));
    };
    let (label, value) = member
        .split_once('=')
        .ok_or_else(|| SigError::Malformed("Signature-Input member".into()))?;
    let label = label.trim();
    let input = parse_sig_input(value)?;
    let signature = split_top_level(&sig_header, ',')
        .into_iter()
        .filter_map(|m| m.split_once('='))
        .find(|(l, _)| l.trim() == label)
        .and_then(|(_, v)| v.trim().strip_prefix(':').and_then(|v| v.strip_suffix(':')))
        .ok_or_else(|| SigError::Malformed(format!("no Signature for {label}")))?;
    let signature = B64
        .decode(signature)
        .map_err(|_| SigError::Malformed("signature is not base64".into()))?;
    let param = |k: &str| {
        input
            .params
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    let key_id = param("keyid").ok_or_else(|| SigError::Malformed("no keyid".into()))?;
    let alg = match param("alg") {
        None => Alg::FromKey,
        Some("rsa-v1_5-sha256") => Alg::RsaSha256,
        Some("ed25519") => Alg::Ed25519,
        Some(other) => return Err(SigError::Algorithm(other.to_owned())),
    };
    let num = |k: &str| -> Result<Option<i64>, SigError> {
        param(k)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| SigError::Malformed(format!("{k} is not a number")))
            })
            .transpose()
    };
    let created = num("created")?.ok_or(SigError::Coverage("created"))?;
    check_window(created, num("expires")?, now)?;
    let covers = |c: &str| input.components.iter().any(|x| x == c);
    if !covers("@method") {
        return Err(SigError::Coverage("@method"));
    }
    if !(covers("@target-uri") || (covers("@authority") && covers("@path"))) {
        return Err(SigError::Coverage("@target-uri"));
    }
    let is_post = req.method.eq_ignore_ascii_case("POST");
    if is_post && !covers("content-digest") {
        return Err(SigError::Coverage("content-digest"));
    }
    if is_post || covers("content-digest") {
        let d = (req.header)("content-digest")
            .ok_or(SigError::Digest("missing Content-Digest header"))?;
        check_content_digest(&d, body.unwrap_or_default())?;
    }
    let uri =
        url::Url::parse(req.target_uri).map_err(|_| SigError::Malformed("target URI".into()))?;
    let mut base = String::new();
    for c in &input.components {
        let v = match c.as_str() {
            "@method" => req.method.to_ascii_uppercase(),
            "@target-uri" => req.target_uri.to_owned(),
            "@authority" => match uri.port() {
                Some(p) => format!("{}:{p}", uri.host_str().unwrap_or_default()),
                None => uri.host_str().unwrap_or_default().to_owned(),
            }
            .to_ascii_lowercase(),
            "@scheme" => uri.scheme().to_owned(),
            "@path" => uri.path().to_owned(),
            "@query" => format!("?{}", uri.query().unwrap_or_default()),
            "@request-target" => req.path_and_query.to_owned(),
            name if name.starts_with('@') => {
                return Err(SigError::Malformed(format!("component {name}")));
            }
            name => (req.header)(name)
                .ok_or_else(|| SigError::Malformed(format!("signed header {name} is absent")))?
                .trim()
                .to_owned(),
        };
        base.push_str(&format!("\"{c}\": {v}\n"));
    }
    base.push_str(&format!("\"@signature-params\": {}", input.raw));
    Ok(ParsedSignature {
        scheme: Scheme::Rfc9421,
        key_id: key_id.to_owned(),
        alg,
        signature,
        candidates: vec![base],
    })
}

/// Parses whichever signature the request carries (RFC 9421 when `Signature-Input` is present).
///
/// # Errors
/// Any [`SigError`].
pub fn parse_any<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    body: Option<&[u8]>,
    now: i64,
) -> Result<ParsedSignature, SigError> {
    if (req.header)("signature-input").is_some() {
        parse_rfc9421(req, body, now)
    } else {
        parse_cavage(req, body, now)
    }
}

/// Headers to add to an outbound request.
pub type SignedHeaders = Vec<(&'static str, String)>;

/// Signs a request draft-cavage style (`rsa-sha256`, `(request-target) host date [digest]`),
/// which every fediverse server verifies, Pleroma included. Returns the headers to send
/// (`Date`, `Digest` for a body, `Signature`).
///
/// # Errors
/// When `sign` fails.
pub fn sign_cavage<E>(
    method: &str,
    url: &url::Url,
    body: Option<&[u8]>,
    key_id: &str,
    now: i64,
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<SignedHeaders, E> {
    let host = authority(url);
    let date = date::format_unix_s(now);
    let target = request_target(url);
    let mut names = vec!["(request-target)", "host", "date"];
    let mut lines = vec![
        format!("(request-target): {} {target}", method.to_ascii_lowercase()),
        format!("host: {host}"),
        format!("date: {date}"),
    ];
    let mut out = vec![("date", date)];
    if let Some(body) = body {
        let d = digest_header(body);
        names.push("digest");
        lines.push(format!("digest: {d}"));
        out.push(("digest", d));
    }
    let sig = sign(lines.join("\n").as_bytes())?;
    out.push((
        "signature",
        format!(
            "keyId=\"{key_id}\",algorithm=\"rsa-sha256\",headers=\"{}\",signature=\"{}\"",
            names.join(" "),
            B64.encode(sig)
        ),
    ));
    Ok(out)
}

/// Signs a request RFC 9421 style (`@method @target-uri [content-digest]`, `created`, `keyid`,
/// `alg`). Returns the headers to send.
///
/// # Errors
/// When `sign` fails.
pub fn sign_rfc9421<E>(
    method: &str,
    url: &url::Url,
    body: Option<&[u8]>,
    key_id: &str,
    alg: &str,
    now: i64,
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<SignedHeaders, E> {
    let mut comps = vec!["\"@method\"", "\"@target-uri\""];
    let mut base = format!(
        "\"@method\": {}\n\"@target-uri\": {}\n",
        method.to_ascii_uppercase(),
        url.as_str()
    );
    let mut out = Vec::new();
    if let Some(body) = body {
        let d = content_digest_header(body);
        comps.push("\"content-digest\"");
        base.push_str(&format!("\"content-digest\": {d}\n"));
        out.push(("content-digest", d));
    }
    let params = format!(
        "({});created={now};keyid=\"{key_id}\";alg=\"{alg}\"",
        comps.join(" ")
    );
    base.push_str(&format!("\"@signature-params\": {params}"));
    let sig = sign(base.as_bytes())?;
    out.push(("signature-input", format!("sig1={params}")));
    out.push(("signature", format!("sig1=:{}:", B64.encode(sig))));
    Ok(out)
}

/// `host[:port]` of a URL, the way `Host` carries it.
#[must_use]
pub fn authority(url: &url::Url) -> String {
    match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_owned(),
    }
}

fn request_target(url: &url::Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Always;
    impl VerifyKey for Always {
        fn verify(&self, _: Alg, _: &[u8], _: &[u8]) -> bool {
            true
        }
    }

    fn lookup<'a>(h: &'a HashMap<&str, String>) -> impl Fn(&str) -> Option<String> + 'a {
        move |n: &str| h.get(n).cloned()
    }

    #[test]
    fn cavage_round_trip_builds_the_same_string() {
        let url = url::Url::parse("https://a.example/inbox?x=1").unwrap();
        let mut captured = String::new();
        let hs = sign_cavage::<()>("POST", &url, Some(b"{}"), "k#1", 1_000_000, |m| {
            captured = String::from_utf8(m.to_vec()).unwrap();
            Ok(vec![1, 2, 3])
        })
        .unwrap();
        let mut h: HashMap<&str, String> = hs.into_iter().collect();
        h.insert("host", "a.example".into());
        let f = lookup(&h);
        let view = RequestView {
            method: "POST",
            path_and_query: "/inbox?x=1",
            target_uri: "https://a.example/inbox?x=1",
            header: &f,
        };
        let p = parse_cavage(&view, Some(b"{}"), 1_000_010).unwrap();
        assert_eq!(p.candidates[0], captured);
        assert_eq!(p.candidates.len(), 2);
        assert_eq!(p.signature, vec![1, 2, 3]);
        assert!(p.verify(&Always));
        // Body tampering is a digest failure.
        assert_eq!(
            parse_cavage(&view, Some(b"{ }"), 1_000_010).unwrap_err(),
            SigError::Digest("does not match the body")
        );
        // Window: 2 h late and 2 h early both fail.
        assert!(matches!(
            parse_cavage(&view, Some(b"{}"), 1_000_000 + 7_300).unwrap_err(),
            SigError::Window(_)
        ));
        assert!(matches!(
            parse_cavage(&view, Some(b"{}"), 1_000_000 - 7_300).unwrap_err(),
            SigError::Window(_)
        ));
    }

    #[test]
    fn cavage_post_must_cover_digest() {
        let mut h = HashMap::new();
        h.insert(
            "signature",
            "keyId=\"k\",algorithm=\"rsa-sha256\",headers=\"(request-target) host date\",signature=\"AAAA\"".to_owned(),
        );
        h.insert("date", date::format_unix_s(100));
        h.insert("host", "a".into());
        let f = lookup(&h);
        let view = RequestView {
            method: "POST",
            path_and_query: "/inbox",
            target_uri: "https://a/inbox",
            header: &f,
        };
        assert_eq!(
            parse_cavage(&view, Some(b"x"), 100).unwrap_err(),
            SigError::Coverage("digest")
        );
    }

    #[test]
    fn rfc9421_round_trip() {
        let url = url::Url::parse("http://127.0.0.1:8080/agents/echo/inbox").unwrap();
        let mut captured = String::new();
        let hs = sign_rfc9421::<()>(
            "POST",
            &url,
            Some(b"{\"a\":1}"),
            "http://x/k",
            "ed25519",
            500,
            |m| {
                captured = String::from_utf8(m.to_vec()).unwrap();
                Ok(vec![9; 64])
            },
        )
        .unwrap();
        let h: HashMap<&str, String> = hs.into_iter().collect();
        let f = lookup(&h);
        let view = RequestView {
            method: "POST",
            path_and_query: "/agents/echo/inbox",
            target_uri: url.as_str(),
            header: &f,
        };
        let p = parse_rfc9421(&view, Some(b"{\"a\":1}"), 600).unwrap();
        assert_eq!(p.candidates[0], captured);
        assert_eq!(p.alg, Alg::Ed25519);
        assert_eq!(p.key_id, "http://x/k");
        assert!(matches!(
            parse_rfc9421(&view, Some(b"{}"), 600).unwrap_err(),
            SigError::Digest(_)
        ));
    }

    #[test]
    fn http_dates_round_trip() {
        assert_eq!(
            date::parse_unix_s(&date::format_unix_s(1_700_000_000)),
            Some(1_700_000_000)
        );
        assert_eq!(
            date::parse_unix_s("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
    }
}
