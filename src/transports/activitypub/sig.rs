//! HTTP signatures, both generations: draft-cavage-http-signatures-12 (`Signature` header,
//! RSA-SHA256 and hs2019, `Digest`) and RFC 9421 HTTP message signatures (`Signature-Input` +
//! `Signature`, `rsa-v1_5-sha256` and `ed25519`, RFC 9530 `Content-Digest`).
//!
//! RFC 9421's fields (`Signature-Input`, `Signature`, `Content-Digest`) are RFC 8941 structured
//! fields, read and written with `sfv`. Covered components may carry the parameters `sf` (strict
//! re-serialization of a known structured field), `key` (one dictionary member) and, on
//! `@query-param`, `name`; `bs`, `req` and `tr` are refused with [`SigError::Component`].
//!
//! Pure code: parsing, signing-string construction, window and coverage rules as Mastodon applies
//! them, and digest checks. The key lookup and the cryptographic check are the caller's (through
//! [`VerifyKey`]), so this module does no I/O.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sfv::{
    BareItem, DictSerializer, Dictionary, FieldType as _, InnerList, Item, ItemSerializer, List,
    ListEntry, ListSerializer, Parameters, Parser, StringRef, Version,
};
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
    /// A covered component (or component parameter) this verifier does not support.
    #[error("unsupported covered component {0}")]
    Component(String),
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

fn check_window(created: i64, expires: Option<i64>, now_s: i64) -> Result<(), SigError> {
    if created > now_s + SKEW_S {
        return Err(SigError::Window("dated in the future"));
    }
    let expires = expires
        .unwrap_or(created + DEFAULT_VALIDITY_S)
        .min(created + MAX_VALIDITY_S);
    if now_s > expires + SKEW_S {
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

/// Parses an RFC 8941 dictionary (`Signature-Input`, `Signature`, `Content-Digest`, and
/// dictionary fields a signature covers); `field` names it in the error.
fn parse_dictionary(value: &str, field: &str) -> Result<Dictionary, SigError> {
    Parser::new(value)
        .with_version(Version::Rfc8941)
        .parse()
        .map_err(|e| SigError::Malformed(format!("{field} is not a structured dictionary: {e}")))
}

/// Checks an RFC 9530 `Content-Digest` header, a structured dictionary of byte sequences
/// (`sha-256=:…:, sha-512=:…:`): every `sha-256` and `sha-512` member must match the body.
///
/// # Errors
/// [`SigError::Digest`] when the header is not such a dictionary, when no supported entry is
/// present, or when one mismatches.
pub fn check_content_digest(header: &str, body: &[u8]) -> Result<(), SigError> {
    let digests = parse_dictionary(header, "Content-Digest")
        .map_err(|_| SigError::Digest("malformed Content-Digest"))?;
    let mut matched = false;
    for (alg, entry) in &digests {
        let ListEntry::Item(Item {
            bare_item: BareItem::ByteSequence(given),
            ..
        }) = entry
        else {
            return Err(SigError::Digest("malformed Content-Digest"));
        };
        let ok = match alg.as_str() {
            "sha-256" => given.as_slice() == Sha256::digest(body).as_slice(),
            "sha-512" => given.as_slice() == Sha512::digest(body).as_slice(),
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
    now_s: i64,
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
    check_window(created, expires, now_s)?;

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

/// Fields whose structured type is known, so that a covered `"name";sf` can be re-serialized
/// strictly (RFC 9421 §2.1.1). A field missing here cannot be covered with `;sf`.
fn structured_type(field: &str) -> Option<StructuredType> {
    match field {
        "content-digest"
        | "repr-digest"
        | "want-content-digest"
        | "want-repr-digest"
        | "signature"
        | "signature-input"
        | "accept-signature"
        | "priority" => Some(StructuredType::Dictionary),
        "cache-status" | "proxy-status" => Some(StructuredType::List),
        _ => None,
    }
}

/// The top-level type of a structured field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StructuredType {
    Dictionary,
    List,
}

/// The serialization of an inner list with its parameters (`("@method" "@path");created=1`).
fn serialize_inner_list(list: &InnerList) -> String {
    let mut ser = ListSerializer::new();
    {
        let mut inner = ser.inner_list();
        inner.items(&list.items);
        let _params = inner.finish().parameters(&list.params);
    }
    // A list with one member always serializes.
    ser.finish().unwrap_or_default()
}

/// The value of one covered component (RFC 9421 §2.1 and §2.2), or why it cannot be given.
fn component_value<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    uri: &url::Url,
    component: &Item,
) -> Result<String, SigError> {
    let BareItem::String(name) = &component.bare_item else {
        return Err(SigError::Malformed(
            "a component identifier is not a string".into(),
        ));
    };
    let name = name.as_str().to_ascii_lowercase();
    let value = if name.starts_with('@') {
        derived_value(req, uri, &name, &component.params)?
    } else {
        field_value(req, &name, &component.params)?
    };
    if value.contains(['\r', '\n']) {
        return Err(SigError::Malformed(format!("{name} spans lines")));
    }
    Ok(value)
}

/// A derived component (RFC 9421 §2.2) of a request. `@query-param` takes its `name`; no other
/// parameter is supported (`req` and `tr` concern responses and trailers).
fn derived_value<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    uri: &url::Url,
    name: &str,
    params: &Parameters,
) -> Result<String, SigError> {
    let mut query_name = None;
    for (key, value) in params {
        match (name, key.as_str(), value) {
            ("@query-param", "name", BareItem::String(s)) => query_name = Some(s.as_str()),
            ("@query-param", "name", _) => {
                return Err(SigError::Malformed(
                    "@query-param name is not a string".into(),
                ));
            }
            _ => return Err(SigError::Component(format!("{name} with parameter {key}"))),
        }
    }
    Ok(match name {
        "@method" => req.method.to_ascii_uppercase(),
        "@target-uri" => req.target_uri.to_owned(),
        "@authority" => authority(uri).to_ascii_lowercase(),
        "@scheme" => uri.scheme().to_owned(),
        "@path" => uri.path().to_owned(),
        "@query" => format!("?{}", uri.query().unwrap_or_default()),
        "@request-target" => req.path_and_query.to_owned(),
        "@query-param" => {
            let wanted = query_name
                .ok_or_else(|| SigError::Malformed("@query-param without a name".into()))?;
            query_param(uri, wanted)?
        }
        "@signature-params" => {
            return Err(SigError::Malformed(
                "@signature-params is listed as a component".into(),
            ));
        }
        other => return Err(SigError::Component(other.to_owned())),
    })
}

/// The query parameter whose encoded name is `wanted`, decoded and re-encoded as RFC 9421
/// §2.2.8 says: `application/x-www-form-urlencoded` parsing, then percent-encoding with that
/// set, spaces as `%20`. A parameter that is absent or occurs twice cannot be covered.
fn query_param(uri: &url::Url, wanted: &str) -> Result<String, SigError> {
    let encode = |s: &str| {
        url::form_urlencoded::byte_serialize(s.as_bytes())
            .collect::<String>()
            // The serializer writes a space as `+` and a literal `+` as `%2B`.
            .replace('+', "%20")
    };
    let mut found = None;
    for (name, value) in uri.query_pairs() {
        if encode(&name) == wanted {
            if found.is_some() {
                return Err(SigError::Malformed(format!(
                    "query parameter {wanted} occurs more than once"
                )));
            }
            found = Some(encode(&value));
        }
    }
    found.ok_or_else(|| SigError::Malformed(format!("query parameter {wanted} is absent")))
}

/// An HTTP field component (RFC 9421 §2.1): the field's value, or with `sf` its strict
/// re-serialization, or with `key="…"` the serialization of that dictionary member's value.
/// `bs`, `req` and `tr` are not supported.
fn field_value<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    name: &str,
    params: &Parameters,
) -> Result<String, SigError> {
    let (mut strict, mut member) = (false, None);
    for (key, value) in params {
        match (key.as_str(), value) {
            ("sf", BareItem::Boolean(true)) => strict = true,
            ("key", BareItem::String(s)) => member = Some(s.as_str()),
            ("sf" | "key", _) => {
                return Err(SigError::Malformed(format!(
                    "parameter {key} of {name} has the wrong type"
                )));
            }
            _ => return Err(SigError::Component(format!("{name} with parameter {key}"))),
        }
    }
    let value = (req.header)(name)
        .ok_or_else(|| SigError::Malformed(format!("signed header {name} is absent")))?;
    let value = value.trim();
    if let Some(member) = member {
        let dictionary = parse_dictionary(value, name)?;
        return match dictionary.get(member) {
            Some(ListEntry::Item(item)) => Ok(item.serialize()),
            Some(ListEntry::InnerList(list)) => Ok(serialize_inner_list(list)),
            None => Err(SigError::Malformed(format!(
                "{name} has no member {member}"
            ))),
        };
    }
    if !strict {
        return Ok(value.to_owned());
    }
    let parser = Parser::new(value).with_version(Version::Rfc8941);
    let malformed = |e: sfv::Error| SigError::Malformed(format!("{name} is not structured: {e}"));
    let serialized = match structured_type(name) {
        Some(StructuredType::Dictionary) => {
            parser.parse::<Dictionary>().map_err(malformed)?.serialize()
        }
        Some(StructuredType::List) => parser.parse::<List>().map_err(malformed)?.serialize(),
        None => {
            return Err(SigError::Component(format!(
                "{name};sf (not a known structured field)"
            )));
        }
    };
    Ok(serialized.unwrap_or_default())
}

/// The RFC 9421 signature base (§2.5) of one `Signature-Input` member over a request: one line
/// per covered component, its identifier serialized as received (parameters included), then
/// `"@signature-params"` with the inner list and its parameters serialized.
///
/// # Errors
/// [`SigError::Malformed`] for a component that cannot be given (an absent header, an absent or
/// repeated query parameter, a component listed twice), [`SigError::Component`] for one this
/// module does not support.
pub fn signature_base<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    input: &InnerList,
) -> Result<String, SigError> {
    let uri =
        url::Url::parse(req.target_uri).map_err(|_| SigError::Malformed("target URI".into()))?;
    let mut lines: Vec<(String, String)> = Vec::with_capacity(input.items.len());
    for component in &input.items {
        let identifier = component.serialize();
        if lines.iter().any(|(seen, _)| *seen == identifier) {
            return Err(SigError::Malformed(format!(
                "component {identifier} is listed twice"
            )));
        }
        let value = component_value(req, &uri, component)?;
        lines.push((identifier, value));
    }
    Ok(assemble_base(&lines, &serialize_inner_list(input)))
}

/// Writes a signature base from its (identifier, value) lines and the serialized parameters.
fn assemble_base(lines: &[(String, String)], signature_params: &str) -> String {
    let mut base = String::new();
    for (identifier, value) in lines {
        base.push_str(identifier);
        base.push_str(": ");
        base.push_str(value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(signature_params);
    base
}

/// Parses and checks an RFC 9421 signature (the one member of `Signature-Input`; Mastodon
/// requires exactly one). `Signature-Input` and `Signature` are read as RFC 8941 dictionaries;
/// `Content-Digest` is checked against the body on requests with one.
///
/// # Errors
/// Any [`SigError`].
pub fn parse_rfc9421<H: Fn(&str) -> Option<String>>(
    req: &RequestView<'_, H>,
    body: Option<&[u8]>,
    now_s: i64,
) -> Result<ParsedSignature, SigError> {
    let input_header = (req.header)("signature-input").ok_or(SigError::Missing)?;
    let sig_header = (req.header)("signature").ok_or(SigError::Missing)?;
    let inputs = parse_dictionary(&input_header, "Signature-Input")?;
    let mut members = inputs.iter();
    let (Some((label, entry)), None) = (members.next(), members.next()) else {
        return Err(SigError::Malformed("expected exactly one signature".into()));
    };
    let ListEntry::InnerList(input) = entry else {
        return Err(SigError::Malformed(
            "Signature-Input is not an inner list".into(),
        ));
    };
    let signature = match parse_dictionary(&sig_header, "Signature")?.get(label.as_str()) {
        Some(ListEntry::Item(Item {
            bare_item: BareItem::ByteSequence(bytes),
            ..
        })) => bytes.clone(),
        Some(_) => {
            return Err(SigError::Malformed(format!(
                "Signature {} is not a byte sequence",
                label.as_str()
            )));
        }
        None => {
            return Err(SigError::Malformed(format!(
                "no Signature for {}",
                label.as_str()
            )));
        }
    };
    let string_param = |k: &str| match input.params.get(k) {
        None => Ok(None),
        Some(BareItem::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(SigError::Malformed(format!("{k} is not a string"))),
    };
    let int_param = |k: &str| match input.params.get(k) {
        None => Ok(None),
        Some(BareItem::Integer(n)) => Ok(Some(i64::from(*n))),
        Some(_) => Err(SigError::Malformed(format!("{k} is not a number"))),
    };
    let key_id = string_param("keyid")?.ok_or_else(|| SigError::Malformed("no keyid".into()))?;
    let alg = match string_param("alg")? {
        None => Alg::FromKey,
        Some("rsa-v1_5-sha256") => Alg::RsaSha256,
        Some("ed25519") => Alg::Ed25519,
        Some(other) => return Err(SigError::Algorithm(other.to_owned())),
    };
    let created = int_param("created")?.ok_or(SigError::Coverage("created"))?;
    check_window(created, int_param("expires")?, now_s)?;
    // Coverage goes by component name, whatever its parameters (`"content-digest";sf` covers
    // the digest as well).
    let names: Vec<String> = input
        .items
        .iter()
        .filter_map(|c| c.bare_item.as_string())
        .map(|name| name.as_str().to_ascii_lowercase())
        .collect();
    let covers = |c: &str| names.iter().any(|x| x == c);
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
    let base = signature_base(req, input)?;
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
    now_s: i64,
) -> Result<ParsedSignature, SigError> {
    if (req.header)("signature-input").is_some() {
        parse_rfc9421(req, body, now_s)
    } else {
        parse_cavage(req, body, now_s)
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
    now_s: i64,
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<SignedHeaders, E> {
    let host = authority(url);
    let date = date::format_unix_s(now_s);
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

/// The component identifiers this server signs with.
const METHOD: &StringRef = sfv::string_ref("@method");
const TARGET_URI: &StringRef = sfv::string_ref("@target-uri");
const CONTENT_DIGEST: &StringRef = sfv::string_ref("content-digest");

/// `s` as an sf-string for a signature parameter: what an sf-string cannot hold (controls and
/// non-ASCII characters) is percent-encoded, as it would be in the URL a key id is.
fn sf_string(s: &str) -> sfv::String {
    let mut printable = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) {
            printable.push(char::from(b));
        } else {
            printable.push_str(&format!("%{b:02X}"));
        }
    }
    // Only printable ASCII is left, which every sf-string may hold.
    sfv::String::from_string(printable).unwrap_or_default()
}

/// Signs a request RFC 9421 style (`@method @target-uri [content-digest]`, `created`, `keyid`,
/// `alg`). Returns the headers to send, `Signature-Input` and `Signature` serialized as RFC 8941
/// dictionaries with the one member `sig1`.
///
/// # Errors
/// When `sign` fails.
pub fn sign_rfc9421<E>(
    method: &str,
    url: &url::Url,
    body: Option<&[u8]>,
    key_id: &str,
    alg: &str,
    now_s: i64,
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>, E>,
) -> Result<SignedHeaders, E> {
    // The target URI has no fragment (RFC 9110 §7.1): none is sent, so the receiver has none.
    let mut target = url.clone();
    target.set_fragment(None);
    let mut components = vec![
        (METHOD, method.to_ascii_uppercase()),
        (TARGET_URI, target.as_str().to_owned()),
    ];
    let mut out = Vec::new();
    if let Some(body) = body {
        let d = content_digest_header(body);
        components.push((CONTENT_DIGEST, d.clone()));
        out.push(("content-digest", d));
    }
    let (key_id, alg) = (sf_string(key_id), sf_string(alg));
    // Unix seconds stay far inside the 15 digits of an sf-integer.
    let created = sfv::Integer::try_from(now_s).unwrap_or(sfv::integer(0));
    let mut params = ListSerializer::new();
    {
        let mut inner = params.inner_list();
        for (identifier, _) in &components {
            inner.bare_item(*identifier);
        }
        let _params = inner
            .finish()
            .parameter(sfv::key_ref("created"), created)
            .parameter(sfv::key_ref("keyid"), &*key_id)
            .parameter(sfv::key_ref("alg"), &*alg);
    }
    let params = params.finish().unwrap_or_default();
    let lines: Vec<(String, String)> = components
        .into_iter()
        .map(|(identifier, value)| (ItemSerializer::new().bare_item(identifier).finish(), value))
        .collect();
    let sig = sign(assemble_base(&lines, &params).as_bytes())?;
    let mut signature = DictSerializer::new();
    signature.bare_item(sfv::key_ref("sig1"), sig.as_slice());
    out.push(("signature-input", format!("sig1={params}")));
    out.push(("signature", signature.finish().unwrap_or_default()));
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
mod tests;
