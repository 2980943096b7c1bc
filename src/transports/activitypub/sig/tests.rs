//! Tests of the HTTP signature schemes: cavage round trips and coverage rules, RFC 9421
//! bases (the RFC's own examples), structured-field parsing, digests and dates.

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

/// The inner list of a `Signature-Input` member value, as a verifier parses it.
fn inner_list(member: &str) -> InnerList {
    match parse_dictionary(&format!("sig={member}"), "test")
        .unwrap()
        .swap_remove("sig")
    {
        Some(ListEntry::InnerList(list)) => list,
        other => panic!("not an inner list: {other:?}"),
    }
}

fn base_for(
    headers: &HashMap<&str, String>,
    target_uri: &str,
    member: &str,
) -> Result<String, SigError> {
    let f = lookup(headers);
    let uri = url::Url::parse(target_uri).unwrap();
    let view = RequestView {
        method: "POST",
        path_and_query: &target_uri[target_uri.find(uri.path()).unwrap()..],
        target_uri,
        header: &f,
    };
    signature_base(&view, &inner_list(member))
}

const RFC_DIGEST_512: &str = "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:";
const RFC_DIGEST_256: &str = "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:";
/// The body of the RFC 9421 Appendix B.2 test request.
const RFC_BODY: &[u8] = br#"{"hello": "world"}"#;

#[test]
fn rfc9421_base_with_a_query_param_is_the_rfcs() {
    // RFC 9421 Appendix B.2.2: selective covered components of the B.2 test request
    // `POST /foo?param=Value&Pet=dog`.
    let h = HashMap::from([
        ("host", "example.com".to_owned()),
        ("content-digest", RFC_DIGEST_512.to_owned()),
    ]);
    let member = r#"("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example""#;
    assert_eq!(
        base_for(&h, "https://example.com/foo?param=Value&Pet=dog", member).unwrap(),
        format!(
            "\"@authority\": example.com\n\
             \"content-digest\": {RFC_DIGEST_512}\n\
             \"@query-param\";name=\"Pet\": dog\n\
             \"@signature-params\": {member}"
        )
    );
    check_content_digest(RFC_DIGEST_512, RFC_BODY).unwrap();
    check_content_digest(&format!("{RFC_DIGEST_256}, {RFC_DIGEST_512}"), RFC_BODY).unwrap();
}

#[test]
fn rfc9421_query_params_are_decoded_and_re_encoded() {
    // RFC 9421 §2.2.8.
    let h = HashMap::new();
    let member =
        r#"("@query-param";name="baz" "@query-param";name="qux" "@query-param";name="param")"#;
    assert_eq!(
        base_for(
            &h,
            "https://example.com/path?param=value&foo=bar&baz=batman&qux=",
            member
        )
        .unwrap(),
        format!(
            "\"@query-param\";name=\"baz\": batman\n\
             \"@query-param\";name=\"qux\": \n\
             \"@query-param\";name=\"param\": value\n\
             \"@signature-params\": {member}"
        )
    );
    let member = r#"("@query-param";name="var" "@query-param";name="bar" "@query-param";name="fa%C3%A7ade%22%3A%20")"#;
    assert_eq!(
        base_for(
            &h,
            "https://example.com/parameters?var=this%20is%20a%20big%0Amultiline%20value&\
             bar=with+plus+whitespace&fa%C3%A7ade%22%3A%20=something",
            member
        )
        .unwrap(),
        format!(
            "\"@query-param\";name=\"var\": this%20is%20a%20big%0Amultiline%20value\n\
             \"@query-param\";name=\"bar\": with%20plus%20whitespace\n\
             \"@query-param\";name=\"fa%C3%A7ade%22%3A%20\": something\n\
             \"@signature-params\": {member}"
        )
    );
}

#[test]
fn rfc9421_structured_field_components() {
    // RFC 9421 §2.1.1 (`sf`: strict re-serialization) and §2.1.2 (`key`: one member).
    let h = HashMap::from([
        (
            "content-digest",
            format!("{RFC_DIGEST_256},   {RFC_DIGEST_512}"),
        ),
        (
            "example-dict",
            " a=1,    b=2;x=1;y=2,   c=(a   b   c), d".to_owned(),
        ),
    ]);
    let member = r#"("content-digest" "content-digest";sf "content-digest";key="sha-256" "example-dict";key="a" "example-dict";key="b" "example-dict";key="c" "example-dict";key="d");created=1"#;
    assert_eq!(
        base_for(&h, "https://example.com/foo", member).unwrap(),
        format!(
            "\"content-digest\": {RFC_DIGEST_256},   {RFC_DIGEST_512}\n\
             \"content-digest\";sf: {RFC_DIGEST_256}, {RFC_DIGEST_512}\n\
             \"content-digest\";key=\"sha-256\": :X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:\n\
             \"example-dict\";key=\"a\": 1\n\
             \"example-dict\";key=\"b\": 2;x=1;y=2\n\
             \"example-dict\";key=\"c\": (a b c)\n\
             \"example-dict\";key=\"d\": ?1\n\
             \"@signature-params\": {member}"
        )
    );
}

#[test]
fn rfc9421_signature_params_are_the_serialized_inner_list() {
    // Extra whitespace inside the inner list is not part of its serialization.
    let h = HashMap::new();
    let base = base_for(
        &h,
        "https://example.com/foo",
        r#"(  "@method"   "@path" );created=1;keyid="k""#,
    )
    .unwrap();
    assert_eq!(
        base,
        "\"@method\": POST\n\"@path\": /foo\n\
         \"@signature-params\": (\"@method\" \"@path\");created=1;keyid=\"k\""
    );
}

/// Parses a GET of `target` signed with `member` (and `signature` as `Signature`).
fn parse_get(member: &str, signature: &str, target: &str) -> Result<ParsedSignature, SigError> {
    let h = HashMap::from([
        ("signature-input", member.to_owned()),
        ("signature", signature.to_owned()),
        ("content-digest", RFC_DIGEST_512.to_owned()),
        ("example-dict", "a=1".to_owned()),
    ]);
    let f = lookup(&h);
    let uri = url::Url::parse(target).unwrap();
    let path_and_query = match uri.query() {
        Some(q) => format!("{}?{q}", uri.path()),
        None => uri.path().to_owned(),
    };
    let view = RequestView {
        method: "GET",
        path_and_query: &path_and_query,
        target_uri: target,
        header: &f,
    };
    parse_rfc9421(&view, Some(RFC_BODY), 1_010)
}

#[test]
fn rfc9421_rejects_malformed_and_unsupported_inputs() {
    let target = "https://example.com/foo?dup=1&dup=2&one=1";
    let ok = r#"sig1=("@method" "@target-uri");created=1000;keyid="k""#;
    assert!(parse_get(ok, "sig1=:AAAA:", target).is_ok());
    let with =
        |extra: &str| format!(r#"sig1=("@method" "@target-uri" {extra});created=1000;keyid="k""#);
    let malformed = [
        r#"sig1=("@method" "@target-uri""#.to_owned(),
        r#"sig1="@method";created=1000;keyid="k""#.to_owned(),
        format!("{ok}, {}", ok.replace("sig1", "sig2")),
        with("@method"),
        with("method"),
        with("\"@method\""),
        with("\"@query-param\""),
        with("\"@query-param\";name=\"absent\""),
        with("\"@query-param\";name=\"dup\""),
        with("\"@query-param\";name=one"),
        with("\"@signature-params\""),
        with("\"content-digest\";key=\"sha-1\""),
        with("\"content-digest\";sf=?0"),
        with("\"x-absent\""),
        ok.replace("created=1000", "created=\"1000\""),
        ok.replace("keyid=\"k\"", "keyid=k"),
        ok.replace("sig1=(", "sig1=( ")
            .replace("keyid=\"k\"", "keyid"),
    ];
    for member in &malformed {
        let err = parse_get(member, "sig1=:AAAA:", target).unwrap_err();
        assert!(matches!(err, SigError::Malformed(_)), "{member}: {err:?}");
    }
    for component in [
        "\"content-digest\";bs",
        "\"content-digest\";req",
        "\"content-digest\";tr",
        "\"content-digest\";other",
        "\"@method\";req",
        "\"@path\";name=\"x\"",
        "\"@status\"",
        "\"example-dict\";sf",
    ] {
        let err = parse_get(&with(component), "sig1=:AAAA:", target).unwrap_err();
        assert!(
            matches!(err, SigError::Component(_)),
            "{component}: {err:?}"
        );
    }
    for signature in [
        "sig1=\"AAAA\"",
        "sig2=:AAAA:",
        "sig1=:AA!A:",
        "sig1=(:AAAA:)",
        "",
    ] {
        let err = parse_get(ok, signature, target).unwrap_err();
        assert!(
            matches!(err, SigError::Malformed(_)),
            "{signature}: {err:?}"
        );
    }
    // A parameterised content-digest still counts as covering it.
    assert!(parse_get(&with("\"content-digest\";sf"), "sig1=:AAAA:", target).is_ok());
}

#[test]
fn rfc9421_round_trip_with_parameterised_components() {
    use ring::signature::{Ed25519KeyPair, KeyPair as _};
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    let key = PublicKey::Ed25519(pair.public_key().as_ref().try_into().unwrap());
    let input = inner_list(
        r#"("@method" "@authority" "@path" "content-digest";sf "@query-param";name="Pet");created=1000;keyid="https://a.example/actor#ed";alg="ed25519""#,
    );
    let mut h = HashMap::from([
        ("content-digest", content_digest_header(RFC_BODY)),
        (
            "signature-input",
            format!("sig1={}", serialize_inner_list(&input)),
        ),
    ]);
    let signed = "https://example.com/foo?param=Value&Pet=dog";
    let base = base_for(&h, signed, &serialize_inner_list(&input)).unwrap();
    assert!(
        base.contains("\n\"@query-param\";name=\"Pet\": dog\n"),
        "{base}"
    );
    h.insert(
        "signature",
        format!("sig1=:{}:", B64.encode(pair.sign(base.as_bytes()))),
    );
    let f = lookup(&h);
    let parse = |target: &'static str, body: &[u8]| {
        let uri = url::Url::parse(target).unwrap();
        let path_and_query = format!("{}?{}", uri.path(), uri.query().unwrap_or_default());
        let view = RequestView {
            method: "POST",
            path_and_query: &path_and_query,
            target_uri: target,
            header: &f,
        };
        parse_rfc9421(&view, Some(body), 1_010)
    };
    let p = parse(signed, RFC_BODY).unwrap();
    assert_eq!(p.candidates, vec![base]);
    assert_eq!(p.key_id, "https://a.example/actor#ed");
    assert!(p.verify(&key));
    // A query parameter the signature does not cover may change; the covered one may not.
    assert!(
        parse("https://example.com/foo?param=Other&Pet=dog", RFC_BODY)
            .unwrap()
            .verify(&key)
    );
    assert!(
        !parse("https://example.com/foo?param=Value&Pet=cat", RFC_BODY)
            .unwrap()
            .verify(&key)
    );
    assert!(matches!(
        parse(signed, b"{}").unwrap_err(),
        SigError::Digest(_)
    ));
}

#[test]
fn rfc9421_signing_headers_are_structured_fields() {
    let url = url::Url::parse("https://a.example/inbox").unwrap();
    let mut captured = String::new();
    let hs = sign_rfc9421::<()>(
        "post",
        &url,
        None,
        "https://a.example/u\"1\\é#k",
        "ed25519",
        7,
        |m| {
            captured = String::from_utf8(m.to_vec()).unwrap();
            Ok(vec![0xfb; 4])
        },
    )
    .unwrap();
    let h: HashMap<&str, String> = hs.into_iter().collect();
    let input = r#"("@method" "@target-uri");created=7;keyid="https://a.example/u\"1\\%C3%A9#k";alg="ed25519""#;
    assert_eq!(h["signature-input"], format!("sig1={input}"));
    assert_eq!(h["signature"], "sig1=:+/v7+w==:");
    assert_eq!(
        captured,
        format!(
            "\"@method\": POST\n\"@target-uri\": https://a.example/inbox\n\
             \"@signature-params\": {input}"
        )
    );
    let f = lookup(&h);
    let view = RequestView {
        method: "POST",
        path_and_query: "/inbox",
        target_uri: url.as_str(),
        header: &f,
    };
    // A POST must cover the body; the headers still parse as what was signed.
    assert_eq!(
        parse_rfc9421(&view, None, 7).unwrap_err(),
        SigError::Coverage("content-digest")
    );
    let view = RequestView {
        method: "GET",
        ..view
    };
    let p = parse_rfc9421(&view, None, 7).unwrap();
    assert_eq!(p.key_id, "https://a.example/u\"1\\%C3%A9#k");
    assert_eq!(p.signature, vec![0xfb; 4]);
}

/// Found by the `ap_signature` fuzz target: a URL with a fragment was signed with it, and the
/// receiver, which never sees a fragment, could not verify.
#[test]
fn rfc9421_signs_the_target_uri_without_its_fragment() {
    let url = url::Url::parse("https://a.example/inbox?x=1#main-key").unwrap();
    let mut captured = String::new();
    let hs = sign_rfc9421::<()>(
        "GET",
        &url,
        None,
        "https://a.example/k",
        "ed25519",
        7,
        |m| {
            captured = String::from_utf8(m.to_vec()).unwrap();
            Ok(vec![1; 64])
        },
    )
    .unwrap();
    assert!(
        captured.contains("\"@target-uri\": https://a.example/inbox?x=1\n"),
        "{captured}"
    );
    let h: HashMap<&str, String> = hs.into_iter().collect();
    let f = lookup(&h);
    let view = RequestView {
        method: "GET",
        path_and_query: "/inbox?x=1",
        target_uri: "https://a.example/inbox?x=1",
        header: &f,
    };
    assert_eq!(
        parse_rfc9421(&view, None, 7).unwrap().candidates,
        vec![captured]
    );
}
