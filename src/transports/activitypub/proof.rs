//! FEP-8b32 object integrity proofs (`DataIntegrityProof`, cryptosuite `eddsa-jcs-2022`) and the
//! FEP-521a `Multikey` encoding they rely on: RFC 8785 JSON canonicalisation, multibase
//! base58btc, and the Ed25519 multicodec prefix. Pure code; the key lookup is the caller's.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

const B58: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
/// Multicodec prefix of an Ed25519 public key (`0xed 0x01`).
const ED25519_PUB: [u8; 2] = [0xed, 0x01];

/// Base58 (Bitcoin alphabet) encoding.
#[must_use]
pub fn base58_encode(data: &[u8]) -> String {
    let zeros = data.iter().take_while(|&&b| b == 0).count();
    let mut digits: Vec<u8> = Vec::with_capacity(data.len() * 138 / 100 + 1);
    for &byte in &data[zeros..] {
        let mut carry = u32::from(byte);
        for d in &mut digits {
            carry += u32::from(*d) << 8;
            *d = (carry % 58) as u8;
            carry /= 58;
        }
        while carry > 0 {
            digits.push((carry % 58) as u8);
            carry /= 58;
        }
    }
    let mut out = String::with_capacity(zeros + digits.len());
    out.extend(std::iter::repeat_n('1', zeros));
    out.extend(
        digits
            .iter()
            .rev()
            .map(|&d| char::from(B58[usize::from(d)])),
    );
    out
}

/// Longest base58 input decoded: decoding is quadratic and inputs come from
/// unauthenticated peers, while a 64-byte signature needs at most 88 characters.
const BASE58_MAX_LEN: usize = 128;

/// Base58 decoding; `None` on a character outside the alphabet or an input
/// longer than 128 characters.
#[must_use]
pub fn base58_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() > BASE58_MAX_LEN {
        return None;
    }
    let zeros = s.bytes().take_while(|&b| b == b'1').count();
    let mut bytes: Vec<u8> = Vec::with_capacity(s.len());
    for c in s.bytes().skip(zeros) {
        let mut carry = u32::try_from(B58.iter().position(|&x| x == c)?).ok()?;
        for b in &mut bytes {
            carry += u32::from(*b) * 58;
            *b = (carry & 0xff) as u8;
            carry >>= 8;
        }
        while carry > 0 {
            bytes.push((carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    let mut out = vec![0u8; zeros];
    out.extend(bytes.iter().rev());
    Some(out)
}

/// `z…` multibase of an Ed25519 public key (FEP-521a `publicKeyMultibase`).
#[must_use]
pub fn ed25519_multikey(raw: &[u8; 32]) -> String {
    let mut b = ED25519_PUB.to_vec();
    b.extend_from_slice(raw);
    format!("z{}", base58_encode(&b))
}

/// The raw Ed25519 key of a `z…` multibase Multikey.
#[must_use]
pub fn parse_ed25519_multikey(s: &str) -> Option<[u8; 32]> {
    let bytes = base58_decode(s.strip_prefix('z')?)?;
    let raw = bytes.strip_prefix(&ED25519_PUB[..])?;
    raw.try_into().ok()
}

/// RFC 8785 canonical JSON (JCS) of `v`: object members sorted by the UTF-16 code units of
/// their names, no whitespace, strings with the minimal JSON escapes, and every number written
/// as the IEEE 754 double it denotes, the way ECMAScript's `Number.prototype.toString` writes
/// it (`1.0` as `1`, `1e21` as `1e+21`, `-0` as `0`, integers past 2^53 rounded to a double).
///
/// # Errors
/// [`ProofError::Malformed`] if `v` holds a number JCS cannot write (NaN or an infinity),
/// which a parsed JSON document never does.
pub fn jcs(v: &Value) -> Result<String, ProofError> {
    serde_json_canonicalizer::to_string(v).map_err(|e| {
        tracing::debug!(error = %e, "JSON canonicalisation failed");
        ProofError::Malformed("not canonicalisable JSON")
    })
}

/// Why a proof was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The proof object is not an `eddsa-jcs-2022` assertion proof.
    #[error("unsupported proof: {0}")]
    Unsupported(&'static str),
    /// A required member is missing or malformed.
    #[error("malformed proof: {0}")]
    Malformed(&'static str),
    /// The signature does not verify.
    #[error("proof does not verify")]
    Invalid,
    /// Made too long ago, dated in the future, or past its `expires`.
    #[error("proof is not current: {0}")]
    Stale(&'static str),
}

/// The proof `doc` carries (the first, when it carries a set), if any.
fn proof_of(doc: &Value) -> Result<Option<&Value>, ProofError> {
    match doc.get("proof") {
        None => Ok(None),
        Some(Value::Array(a)) => a
            .first()
            .map(Some)
            .ok_or(ProofError::Malformed("empty proof")),
        Some(p) => Ok(Some(p)),
    }
}

/// Clock skew allowed on a proof's `created` and `expires`, as on HTTP signatures.
const PROOF_SKEW_MS: i64 = 3_600_000;

/// A proof authenticates what it signs only for a while: it must say when it was made
/// (`created`, an XSD dateTime), not be dated in the future (beyond the skew), be younger
/// than `max_age_ms`, and not be past its `expires`, if it has one. Without this, a captured
/// activity could be replayed, proof and all, once its id is forgotten; `max_age_ms` is kept
/// shorter than the memory of seen activity ids.
///
/// # Errors
/// [`ProofError::Malformed`] without a readable `created`; [`ProofError::Stale`] otherwise.
pub fn check_current(doc: &Value, now_ms: i64, max_age_ms: i64) -> Result<(), ProofError> {
    let Some(proof) = proof_of(doc)? else {
        return Ok(());
    };
    let when = |key: &str| {
        proof
            .get(key)
            .and_then(Value::as_str)
            .and_then(|v| chrono::DateTime::parse_from_rfc3339(v).ok())
            .map(|d| d.timestamp_millis())
    };
    let created = when("created").ok_or(ProofError::Malformed("no readable created"))?;
    if created > now_ms + PROOF_SKEW_MS {
        return Err(ProofError::Stale("created in the future"));
    }
    if now_ms - created > max_age_ms {
        return Err(ProofError::Stale("too old"));
    }
    if proof.get("expires").is_some() {
        let expires = when("expires").ok_or(ProofError::Malformed("unreadable expires"))?;
        if now_ms > expires + PROOF_SKEW_MS {
            return Err(ProofError::Stale("expired"));
        }
    }
    Ok(())
}

/// The fields of a proof the verifier needs.
#[derive(Debug, Clone)]
pub struct ProofInfo {
    /// The key URL (`verificationMethod`).
    pub verification_method: String,
    /// The signature.
    signature: Vec<u8>,
    /// `SHA-256(JCS(proof config)) || SHA-256(JCS(document))`, one per accepted proof-config
    /// form (as sent, and with the document's `@context`).
    hash_data: Vec<Vec<u8>>,
}

impl ProofInfo {
    /// Whether the proof verifies under the Ed25519 key `raw`.
    #[must_use]
    pub fn verify(&self, raw: &[u8; 32]) -> bool {
        self.hash_data
            .iter()
            .any(|h| crate::keys::verify_ed25519(raw, h, &self.signature))
    }
}

fn hash_data(config: &Value, doc: &Value) -> Result<Vec<u8>, ProofError> {
    let mut out = Sha256::digest(jcs(config)?.as_bytes()).to_vec();
    out.extend_from_slice(&Sha256::digest(jcs(doc)?.as_bytes()));
    Ok(out)
}

/// Reads the `proof` of `doc` (a single proof; the first of several) and prepares its check.
/// `Ok(None)` when the document has no proof.
///
/// # Errors
/// [`ProofError`] for a proof of another kind or a malformed one.
pub fn prepare(doc: &Value) -> Result<Option<ProofInfo>, ProofError> {
    let Some(proof) = proof_of(doc)? else {
        return Ok(None);
    };
    if proof.get("type").and_then(Value::as_str) != Some("DataIntegrityProof")
        || proof.get("cryptosuite").and_then(Value::as_str) != Some("eddsa-jcs-2022")
    {
        return Err(ProofError::Unsupported(
            "not DataIntegrityProof/eddsa-jcs-2022",
        ));
    }
    if proof.get("proofPurpose").and_then(Value::as_str) != Some("assertionMethod") {
        return Err(ProofError::Unsupported(
            "proofPurpose is not assertionMethod",
        ));
    }
    let verification_method = proof
        .get("verificationMethod")
        .and_then(Value::as_str)
        .ok_or(ProofError::Malformed("no verificationMethod"))?
        .to_owned();
    let value = proof
        .get("proofValue")
        .and_then(Value::as_str)
        .and_then(|v| v.strip_prefix('z'))
        .and_then(base58_decode)
        .ok_or(ProofError::Malformed("proofValue is not base58btc"))?;
    let mut unsecured = doc.clone();
    if let Some(m) = unsecured.as_object_mut() {
        m.remove("proof");
        // FEP-8b32: LD signatures are stripped before verifying.
        m.remove("signature");
    }
    let mut config = proof.clone();
    if let Some(m) = config.as_object_mut() {
        m.remove("proofValue");
    }
    let mut hashes = vec![hash_data(&config, &unsecured)?];
    if let (Some(ctx), Some(m)) = (unsecured.get("@context"), config.as_object_mut())
        && m.get("@context") != Some(ctx)
    {
        m.insert("@context".into(), ctx.clone());
        hashes.push(hash_data(&config, &unsecured)?);
    }
    Ok(Some(ProofInfo {
        verification_method,
        signature: value,
        hash_data: hashes,
    }))
}

/// Adds an `eddsa-jcs-2022` proof to `doc`, made with `sign` under `verification_method`.
pub fn attach(
    doc: &mut Value,
    verification_method: &str,
    created: &str,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) {
    let mut config = serde_json::json!({
        "type": "DataIntegrityProof",
        "cryptosuite": "eddsa-jcs-2022",
        "verificationMethod": verification_method,
        "proofPurpose": "assertionMethod",
        "created": created,
    });
    if let (Some(ctx), Some(m)) = (doc.get("@context"), config.as_object_mut()) {
        m.insert("@context".into(), ctx.clone());
    }
    let proof = sign_config(doc, config, sign);
    if let Some(m) = doc.as_object_mut() {
        m.insert("proof".into(), proof);
    }
}

/// The proof of `doc` under the proof configuration `config` (every member but `proofValue`):
/// `config` with the `proofValue` `sign` makes over the hash data. Should `doc` or `config`
/// hold a number JSON cannot carry (see [`jcs`]), nothing is signed and the proof is returned
/// without `proofValue`, which every verifier refuses.
pub fn sign_config(doc: &Value, mut config: Value, sign: impl FnOnce(&[u8]) -> Vec<u8>) -> Value {
    let hash = match hash_data(&config, doc) {
        Ok(hash) => hash,
        Err(e) => {
            tracing::error!(error = %e, "cannot sign an object integrity proof");
            return config;
        }
    };
    let sig = sign(&hash);
    if let Some(m) = config.as_object_mut() {
        m.insert(
            "proofValue".into(),
            format!("z{}", base58_encode(&sig)).into(),
        );
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base58_matches_known_vectors() {
        assert_eq!(base58_encode(b"hello world"), "StV1DL6CwTryKyV");
        assert_eq!(base58_encode(&[0, 0, 1]), "112");
        assert_eq!(base58_decode("StV1DL6CwTryKyV").unwrap(), b"hello world");
        assert_eq!(base58_decode("112").unwrap(), vec![0, 0, 1]);
        assert!(base58_decode("0OIl").is_none());
    }

    #[test]
    fn oversized_base58_is_rejected_without_decoding() {
        let long = "z".repeat(10_000);
        let start = std::time::Instant::now();
        assert!(base58_decode(&long).is_none());
        let doc = json!({"type": "Note", "proof": {
            "type": "DataIntegrityProof", "cryptosuite": "eddsa-jcs-2022",
            "proofPurpose": "assertionMethod", "verificationMethod": "https://a/u#ed",
            "proofValue": format!("z{long}")}});
        assert!(matches!(prepare(&doc), Err(ProofError::Malformed(_))));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn multikey_round_trips() {
        let raw = [7u8; 32];
        let mk = ed25519_multikey(&raw);
        assert!(mk.starts_with("z6Mk"), "{mk}");
        assert_eq!(parse_ed25519_multikey(&mk), Some(raw));
    }

    #[test]
    fn jcs_sorts_by_utf16_and_escapes_minimally() {
        let v = json!({"b": [1, "x\u{1}"], "a": {"\u{e000}": 1, "\u{1f600}": 2}, "c": null});
        assert_eq!(
            jcs(&v).unwrap(),
            "{\"a\":{\"\u{1f600}\":2,\"\u{e000}\":1},\"b\":[1,\"x\\u0001\"],\"c\":null}"
        );
    }

    /// JCS of one number, given as the IEEE 754 bits of the double.
    fn jcs_bits(bits: u64) -> String {
        jcs(&json!(f64::from_bits(bits))).unwrap()
    }

    /// JCS of a JSON text, parsed as a receiver parses it.
    fn jcs_text(text: &str) -> String {
        jcs(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn jcs_writes_numbers_as_rfc_8785_appendix_b() {
        // RFC 8785 Appendix B: IEEE 754 double → canonical text.
        for (bits, text) in [
            (0x0000_0000_0000_0000, "0"),
            (0x8000_0000_0000_0000, "0"),
            (0x0000_0000_0000_0001, "5e-324"),
            (0x8000_0000_0000_0001, "-5e-324"),
            (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
            (0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308"),
            (0x4340_0000_0000_0000, "9007199254740992"),
            (0xc340_0000_0000_0000, "-9007199254740992"),
            (0x4430_0000_0000_0000, "295147905179352830000"),
            (0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22"),
            (0x44b5_2d02_c7e1_4af6, "1e+23"),
            (0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23"),
            (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"),
            (0x444b_1ae4_d6e2_ef4f, "999999999999999900000"),
            (0x444b_1ae4_d6e2_ef50, "1e+21"),
            (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
            (0x3eb0_c6f7_a0b5_ed8d, "0.000001"),
            (0x41b3_de43_5555_5553, "333333333.3333332"),
            (0x41b3_de43_5555_5554, "333333333.33333325"),
            (0x41b3_de43_5555_5555, "333333333.3333333"),
            (0x41b3_de43_5555_5556, "333333333.3333334"),
            (0x41b3_de43_5555_5557, "333333333.33333343"),
            (0xbecb_f647_612f_3696, "-0.0000033333333333333333"),
            (0x4314_3ff3_c1cb_0959, "1424953923781206.2"),
        ] {
            assert_eq!(jcs_bits(bits), text, "{bits:#018x}");
        }
        // NaN and the infinities have no JSON form, so a `Value` cannot hold them.
        assert!(serde_json::Number::from_f64(f64::NAN).is_none());
        assert!(serde_json::Number::from_f64(f64::INFINITY).is_none());
    }

    #[test]
    fn jcs_rewrites_numbers_as_received() {
        for (received, canonical) in [
            ("1.0", "1"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("1e21", "1e+21"),
            ("1E30", "1e+30"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("0.000000000000000000000000001", "1e-27"),
            ("333333333.33333329", "333333333.3333333"),
            ("100", "100"),
            ("-17", "-17"),
            // Integers are doubles too: past 2^53 they round.
            ("9007199254740993", "9007199254740992"),
            ("18446744073709551615", "18446744073709552000"),
        ] {
            assert_eq!(jcs_text(received), canonical, "{received}");
        }
    }

    #[test]
    fn jcs_matches_rfc_8785_examples() {
        // RFC 8785 §3.2.2: the sample input and its canonical form.
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        assert_eq!(
            jcs_text(input),
            "{\"literals\":[null,true,false],\
             \"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
             \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
        // RFC 8785 §3.2.3: members sorted by UTF-16 code units, not by code points.
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        assert_eq!(
            jcs_text(input),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    #[test]
    fn jcs_escapes_control_characters_in_lower_case_hex() {
        let v = json!({"s": "\u{8}\u{9}\u{a}\u{c}\u{d}\u{1f}\u{7f}/"});
        assert_eq!(
            jcs(&v).unwrap(),
            "{\"s\":\"\\b\\t\\n\\f\\r\\u001f\u{7f}/\"}"
        );
    }

    #[test]
    fn proofs_round_trip_and_detect_tampering() {
        let doc = json!({"@context": "https://www.w3.org/ns/activitystreams", "type": "Note", "content": "hi"});
        let mut signed = doc.clone();
        attach(&mut signed, "https://a/u#ed", "2026-01-01T00:00:00Z", |m| {
            m.to_vec()
        });
        let p = prepare(&signed).unwrap().unwrap();
        assert_eq!(p.verification_method, "https://a/u#ed");
        // The fake signer "signs" with the identity, so the signature equals one hash form.
        assert!(p.hash_data.contains(&p.signature));
        signed["content"] = json!("bye");
        let p = prepare(&signed).unwrap().unwrap();
        assert!(!p.hash_data.contains(&p.signature));
        assert!(prepare(&doc).unwrap().is_none());
    }
}
