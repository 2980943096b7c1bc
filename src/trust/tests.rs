//! Each reject reason, with Ed25519 and P-256 keys derived from fixed seeds; `did:web` issuers'
//! documents come from a small HTTP server on loopback.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _,
};
use serde_json::{Map, Value, json};

use super::*;
use crate::clock::{Clock as _, ManualClock};
use crate::config::{DatabaseConfig, NetConfig, Secret};

const NOW_S: i64 = 1_790_000_000;
const AUD: &str = "https://sb.example/agents/helper/a2a";
const ISS: &str = "https://connector.example";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// A signing key and its public JWK.
struct TestKey {
    alg: Algorithm,
    kid: &'static str,
    signing: EncodingKey,
    jwk: BTreeMap<String, String>,
}

/// Ed25519 from a 32-byte seed (PKCS#8 v1 wraps the seed itself).
fn ed25519(seed: u8, kid: &'static str) -> TestKey {
    let seed = [seed; 32];
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    let mut pkcs8 = hex::decode("302e020100300506032b657004220420").unwrap();
    pkcs8.extend_from_slice(&seed);
    let jwk = BTreeMap::from([
        ("kty".to_owned(), "OKP".to_owned()),
        ("crv".to_owned(), "Ed25519".to_owned()),
        ("x".to_owned(), b64(pair.public_key().as_ref())),
        ("kid".to_owned(), kid.to_owned()),
    ]);
    TestKey {
        alg: Algorithm::EdDSA,
        kid,
        signing: EncodingKey::from_ed_der(&pkcs8),
        jwk,
    }
}

/// P-256 whose private scalar is a fixed seed: ring generates the key from the bytes its
/// random source gives, and its fixed-bytes source makes that the seed.
#[allow(deprecated)]
fn p256(seed: u8, kid: &'static str) -> TestKey {
    let bytes = [seed; 32];
    let fixed = ring::test::rand::FixedSliceRandom { bytes: &bytes };
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &fixed).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(
        &ECDSA_P256_SHA256_FIXED_SIGNING,
        pkcs8.as_ref(),
        &ring::rand::SystemRandom::new(),
    )
    .unwrap();
    let public = pair.public_key().as_ref();
    let jwk = BTreeMap::from([
        ("kty".to_owned(), "EC".to_owned()),
        ("crv".to_owned(), "P-256".to_owned()),
        ("x".to_owned(), b64(&public[1..33])),
        ("y".to_owned(), b64(&public[33..65])),
        ("kid".to_owned(), kid.to_owned()),
    ]);
    TestKey {
        alg: Algorithm::ES256,
        kid,
        signing: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk,
    }
}

fn keys() -> [TestKey; 2] {
    [ed25519(7, "ed-1"), p256(9, "p-1")]
}

fn sign(key: &TestKey, typ: &str, kid: &str, claims: &Map<String, Value>) -> String {
    let mut h = Header::new(key.alg);
    h.typ = Some(typ.to_owned());
    h.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&h, claims, &key.signing).unwrap()
}

fn claims(jti: &str) -> Map<String, Value> {
    json!({
        "iss": ISS, "sub": "slack:T1/U42", "aud": AUD, "iat": NOW_S, "exp": NOW_S + 300,
        "jti": jti, "mentionable_method": "slack",
    })
    .as_object()
    .unwrap()
    .clone()
}

struct Fixture {
    verifier: TrustVerifier,
    clock: Arc<ManualClock>,
    metrics: Arc<Metrics>,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    fixture_with(Vec::new()).await
}

/// [`fixture`] trusting `extra` issuers too.
async fn fixture_with(extra: Vec<TrustedIssuerConfig>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&DatabaseConfig {
        url: Secret::new(format!("sqlite://{}", dir.path().join("t.db").display())),
        ..DatabaseConfig::default()
    })
    .await
    .unwrap();
    let clock = ManualClock::new(NOW_S * 1000);
    let net = NetConfig {
        allow_private_addresses: true,
        connect_timeout_ms: 2_000,
        timeout_ms: 2_000,
        ..NetConfig::default()
    };
    let shared: SharedClock = clock.clone();
    let http = HttpClient::new(net, shared.clone()).unwrap();
    let [ed, p] = keys();
    // A static key that is no key: its x is empty.
    let mut empty_x = ed.jwk.clone();
    empty_x.insert("x".into(), String::new());
    empty_x.insert("kid".into(), "empty-x".into());
    let mut cfg = TrustConfig {
        issuers: vec![
            TrustedIssuerConfig {
                issuer: ISS.into(),
                keys: vec![ed.jwk, p.jwk, empty_x],
                methods: vec!["slack".into()],
                assurance: vec!["verified".into(), "platform".into()],
                subject_prefixes: vec!["slack:T1/".into()],
                ..TrustedIssuerConfig::default()
            },
            TrustedIssuerConfig {
                issuer: "https://unreachable.example".into(),
                // Nothing listens on port 1.
                jwks_url: Some("http://127.0.0.1:1/jwks.json".into()),
                methods: vec!["slack".into()],
                assurance: vec!["verified".into()],
                ..TrustedIssuerConfig::default()
            },
            TrustedIssuerConfig {
                issuer: "did:web:127.0.0.1%3A1".into(),
                methods: vec!["slack".into()],
                assurance: vec!["verified".into()],
                ..TrustedIssuerConfig::default()
            },
        ],
    };
    cfg.issuers.extend(extra);
    let metrics = Arc::new(Metrics::new());
    Fixture {
        verifier: TrustVerifier::new(&cfg, true, http, shared, db, metrics.clone()),
        clock,
        metrics,
        _dir: dir,
    }
}

fn expected() -> Expected<'static> {
    static AUDS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| vec![AUD.into()]);
    Expected {
        audiences: &AUDS,
        task_id: None,
        opening: &[],
        transport: "a2a",
    }
}

/// Signs `claims` (changed by `edit`) with each key and expects `reason` from each.
async fn rejects(reason: Reject, edit: impl Fn(&mut Map<String, Value>)) {
    let f = fixture().await;
    for key in keys() {
        let mut c = claims(&format!("jti-{}", key.kid));
        edit(&mut c);
        let jws = sign(&key, SUBJECT_TYP, key.kid, &c);
        assert_eq!(
            f.verifier.verify(&jws, &expected()).await.map(|_| ()),
            Err(reason),
            "{:?}",
            key.alg
        );
    }
}

#[tokio::test]
async fn a_valid_assertion_becomes_signed_attestation_evidence() {
    let f = fixture().await;
    for key in keys() {
        let jws = sign(&key, SUBJECT_TYP, key.kid, &claims(key.kid));
        let ev = f.verifier.verify(&jws, &expected()).await.unwrap();
        assert_eq!(ev.subject, "slack:T1/U42");
        assert_eq!(ev.issuer, ISS);
        assert_eq!(ev.method.as_str(), "slack");
        assert_eq!(
            ev.assurance.as_str(),
            "verified",
            "the issuer's first level"
        );
        assert_eq!(ev.id.as_deref(), Some(key.kid));
        assert_eq!(ev.expires_at.unwrap().unix_millis(), (NOW_S + 300) * 1000);
        let Proof::SignedAttestation(p) = &ev.proof else {
            panic!("{:?}", ev.proof)
        };
        assert_eq!(
            p.alg,
            if key.alg == Algorithm::EdDSA {
                "EdDSA"
            } else {
                "ES256"
            }
        );
        assert_eq!(p.kid, key.kid);
        assert_eq!(p.value, jws);
        let out = serde_json::to_value(&ev).unwrap();
        assert_eq!(out["proof"]["type"], "signed-attestation");
    }
    // A level the issuer allows may be named; the clock may run behind by the skew.
    let key = ed25519(7, "ed-1");
    let mut c = claims("named-level");
    c.insert("mentionable_assurance".into(), json!("platform"));
    c.insert("iat".into(), json!(NOW_S + 50));
    c.insert("exp".into(), json!(NOW_S + 350));
    let ev = f
        .verifier
        .verify(&sign(&key, SUBJECT_TYP, "ed-1", &c), &expected())
        .await
        .unwrap();
    assert_eq!(ev.assurance.as_str(), "platform");
}

#[tokio::test]
async fn expired() {
    rejects(Reject::Expired, |c| {
        c.insert("iat".into(), json!(NOW_S - 400));
        c.insert("exp".into(), json!(NOW_S - 61));
    })
    .await;
}

#[tokio::test]
async fn expired_within_the_skew_is_still_accepted() {
    let f = fixture().await;
    let key = p256(9, "p-1");
    let mut c = claims("skew");
    c.insert("iat".into(), json!(NOW_S - 359));
    c.insert("exp".into(), json!(NOW_S - 59));
    let jws = sign(&key, SUBJECT_TYP, "p-1", &c);
    assert!(f.verifier.verify(&jws, &expected()).await.is_ok());
}

#[tokio::test]
async fn not_yet_valid() {
    rejects(Reject::NotYetValid, |c| {
        c.insert("iat".into(), json!(NOW_S + 61));
        c.insert("exp".into(), json!(NOW_S + 361));
    })
    .await;
    rejects(Reject::NotYetValid, |c| {
        c.insert("nbf".into(), json!(NOW_S + 120));
    })
    .await;
}

#[tokio::test]
async fn ttl_exceeded() {
    rejects(Reject::TtlExceeded, |c| {
        c.insert("exp".into(), json!(NOW_S + 601));
    })
    .await;
}

/// An assertion that expires when or before it was issued has no lifetime at all: another
/// fault than a lifetime too long.
#[tokio::test]
async fn invalid_lifetime() {
    rejects(Reject::InvalidLifetime, |c| {
        c.insert("exp".into(), json!(NOW_S));
    })
    .await;
    rejects(Reject::InvalidLifetime, |c| {
        c.insert("exp".into(), json!(NOW_S - 1));
    })
    .await;
}

#[tokio::test]
async fn wrong_audience() {
    rejects(Reject::WrongAudience, |c| {
        c.insert("aud".into(), json!("https://sb.example/agents/other/a2a"));
    })
    .await;
    rejects(Reject::WrongAudience, |c| {
        c.insert("aud".into(), json!(["https://elsewhere.example/a2a"]));
    })
    .await;
}

#[tokio::test]
async fn wrong_typ() {
    let f = fixture().await;
    for key in keys() {
        for typ in ["JWT", "at+jwt", CONTINUATION_TYP] {
            let jws = sign(&key, typ, key.kid, &claims(typ));
            assert_eq!(
                f.verifier.verify(&jws, &expected()).await.map(|_| ()),
                Err(Reject::WrongTyp),
                "{typ} on a first turn"
            );
        }
    }
}

#[tokio::test]
async fn wrong_alg() {
    let f = fixture().await;
    let mut h = Header::new(Algorithm::HS256);
    h.typ = Some(SUBJECT_TYP.into());
    h.kid = Some("ed-1".into());
    let jws = jsonwebtoken::encode(&h, &claims("hs"), &EncodingKey::from_secret(b"s")).unwrap();
    assert_eq!(
        f.verifier.verify(&jws, &expected()).await.map(|_| ()),
        Err(Reject::WrongAlg)
    );
    let mut h = Header::new(Algorithm::ES384);
    h.typ = Some(SUBJECT_TYP.into());
    h.kid = Some("p-1".into());
    let [ed, p] = keys();
    let es384 = format!(
        "{}.{}",
        b64(&serde_json::to_vec(&h).unwrap()),
        sign(&p, SUBJECT_TYP, "p-1", &claims("es384"))
            .split_once('.')
            .unwrap()
            .1
    );
    assert_eq!(
        f.verifier.verify(&es384, &expected()).await.map(|_| ()),
        Err(Reject::WrongAlg)
    );
    // An accepted algorithm over the other key type does not verify.
    let jws = sign(&ed, SUBJECT_TYP, "p-1", &claims("cross"));
    assert_eq!(
        f.verifier.verify(&jws, &expected()).await.map(|_| ()),
        Err(Reject::InvalidSignature)
    );
}

#[tokio::test]
async fn invalid_method() {
    rejects(Reject::InvalidMethod, |c| {
        c.insert("mentionable_method".into(), json!("discord"));
    })
    .await;
}

#[tokio::test]
async fn invalid_subject_and_assurance() {
    rejects(Reject::InvalidSubject, |c| {
        c.insert("sub".into(), json!("slack:T2/U42"));
    })
    .await;
    rejects(Reject::InvalidAssurance, |c| {
        c.insert("mentionable_assurance".into(), json!("domain"));
    })
    .await;
}

#[tokio::test]
async fn missing_claim() {
    for claim in ["sub", "aud", "iat", "exp", "jti", "mentionable_method"] {
        rejects(Reject::MissingClaim, |c| {
            c.remove(claim);
        })
        .await;
    }
}

#[tokio::test]
async fn kid_not_authorized() {
    let f = fixture().await;
    for key in keys() {
        // Not one of the issuer's keys.
        let jws = sign(&key, SUBJECT_TYP, "other-kid", &claims(key.kid));
        assert_eq!(
            f.verifier.verify(&jws, &expected()).await.map(|_| ()),
            Err(Reject::KidNotAuthorized)
        );
        // A did:web issuer's kid must be a fragment of that DID: refused before any fetch
        // (nothing listens where the DID points, so a fetch would fail otherwise).
        let mut c = claims("did");
        c.insert("iss".into(), json!("did:web:127.0.0.1%3A1"));
        for kid in [
            "did:web:other.example#k",
            "key-1",
            "did:web:127.0.0.1%3A1#",
            // Not RFC 3986 fragment syntax.
            "#%zz",
            "did:web:127.0.0.1%3A1#%zz",
            "#%4",
            "#a#b",
            "#a b",
            "#k[0]",
        ] {
            let jws = sign(&key, SUBJECT_TYP, kid, &c);
            assert_eq!(
                f.verifier.verify(&jws, &expected()).await.map(|_| ()),
                Err(Reject::KidNotAuthorized),
                "{kid}"
            );
        }
    }
}

#[tokio::test]
async fn invalid_signature() {
    let f = fixture().await;
    for (key, impostor) in keys()
        .into_iter()
        .zip([ed25519(8, "ed-1"), p256(10, "p-1")])
    {
        let jws = sign(&impostor, SUBJECT_TYP, key.kid, &claims(key.kid));
        assert_eq!(
            f.verifier.verify(&jws, &expected()).await.map(|_| ()),
            Err(Reject::InvalidSignature)
        );
        // A payload changed after signing.
        let good = sign(&key, SUBJECT_TYP, key.kid, &claims(key.kid));
        let mut parts: Vec<&str> = good.split('.').collect();
        let mut c = claims(key.kid);
        c.insert("sub".into(), json!("slack:T1/admin"));
        let forged = b64(&serde_json::to_vec(&c).unwrap());
        parts[1] = &forged;
        assert_eq!(
            f.verifier
                .verify(&parts.join("."), &expected())
                .await
                .map(|_| ()),
            Err(Reject::InvalidSignature)
        );
    }
}

#[tokio::test]
async fn untrusted_issuer() {
    rejects(Reject::UntrustedIssuer, |c| {
        c.insert("iss".into(), json!("https://connector.example.evil"));
    })
    .await;
}

#[tokio::test]
async fn key_fetch_failed() {
    rejects(Reject::KeyFetchFailed, |c| {
        c.insert("iss".into(), json!("https://unreachable.example"));
    })
    .await;
    // A did:web issuer whose document cannot be fetched, named by a kid of its own.
    let f = fixture().await;
    for key in keys() {
        let mut c = claims(key.kid);
        c.insert("iss".into(), json!("did:web:127.0.0.1%3A1"));
        let jws = sign(&key, SUBJECT_TYP, "#assert-1", &c);
        assert_eq!(
            f.verifier.verify(&jws, &expected()).await.map(|_| ()),
            Err(Reject::KeyFetchFailed)
        );
    }
}

#[tokio::test]
async fn replayed() {
    let f = fixture().await;
    for key in keys() {
        let jws = sign(&key, SUBJECT_TYP, key.kid, &claims(key.kid));
        assert!(f.verifier.verify(&jws, &expected()).await.is_ok());
        assert_eq!(
            f.verifier.verify(&jws, &expected()).await.map(|_| ()),
            Err(Reject::Replayed)
        );
        // Another assertion reusing the jti is a replay too, even signed anew.
        let mut c = claims(key.kid);
        c.insert("sub".into(), json!("slack:T1/U43"));
        let again = sign(&key, SUBJECT_TYP, key.kid, &c);
        assert_eq!(
            f.verifier.verify(&again, &expected()).await.map(|_| ()),
            Err(Reject::Replayed)
        );
    }
    // Once the first has expired (and could not be accepted anyway) its record is let go.
    f.clock.advance_ms((300 + SKEW_S + 1) * 1000);
    let key = ed25519(7, "ed-1");
    let mut c = claims("ed-1");
    c.insert("iat".into(), json!(f.clock.now_s()));
    c.insert("exp".into(), json!(f.clock.now_s() + 300));
    let jws = sign(&key, SUBJECT_TYP, "ed-1", &c);
    assert!(f.verifier.verify(&jws, &expected()).await.is_ok());
}

#[tokio::test]
async fn continuations_name_their_task() {
    let f = fixture().await;
    let auds = vec![AUD.to_owned()];
    for key in keys() {
        // The subject assertion that opened the task.
        let opened = f
            .verifier
            .verify(
                &sign(
                    &key,
                    SUBJECT_TYP,
                    key.kid,
                    &claims(&format!("open-{}", key.kid)),
                ),
                &expected(),
            )
            .await
            .unwrap();
        let opening = [opened];
        let later = Expected {
            audiences: &auds,
            task_id: Some("task-1"),
            opening: &opening,
            transport: "a2a",
        };
        let mut c = claims(&format!("cont-{}", key.kid));
        c.insert("mentionable_task_id".into(), json!("task-1"));
        let jws = sign(&key, CONTINUATION_TYP, key.kid, &c);
        let ev = f.verifier.verify(&jws, &later).await.unwrap();
        assert_eq!(ev.claims.unwrap()["mentionable_task_id"], "task-1");
        c.insert("jti".into(), json!(format!("other-{}", key.kid)));
        c.insert("mentionable_task_id".into(), json!("task-2"));
        let jws = sign(&key, CONTINUATION_TYP, key.kid, &c);
        assert_eq!(
            f.verifier.verify(&jws, &later).await.map(|_| ()),
            Err(Reject::WrongTask)
        );
        c.remove("mentionable_task_id");
        let jws = sign(&key, CONTINUATION_TYP, key.kid, &c);
        assert_eq!(
            f.verifier.verify(&jws, &later).await.map(|_| ()),
            Err(Reject::MissingClaim)
        );
    }
}

/// The profile's continuations carry no `mentionable_method`: the method and assurance are
/// those of the subject assertion that opened the task, whose issuer and subject the
/// continuation must name.
#[tokio::test]
async fn a_continuation_carries_on_the_subject_that_opened_its_task() {
    let f = fixture().await;
    let auds = vec![AUD.to_owned()];
    for key in keys() {
        let mut first = claims(&format!("open-{}", key.kid));
        first.insert("mentionable_assurance".into(), json!("platform"));
        let opened = f
            .verifier
            .verify(&sign(&key, SUBJECT_TYP, key.kid, &first), &expected())
            .await
            .unwrap();
        let opening = [opened];
        let later = Expected {
            audiences: &auds,
            task_id: Some("task-1"),
            opening: &opening,
            transport: "a2a",
        };
        let continuation = |jti: &str| {
            let mut c = claims(&format!("{jti}-{}", key.kid));
            c.remove("mentionable_method");
            c.insert("mentionable_task_id".into(), json!("task-1"));
            c
        };
        let check = |c: &Map<String, Value>| {
            let jws = sign(&key, CONTINUATION_TYP, key.kid, c);
            let verifier = f.verifier.clone();
            async move { verifier.verify(&jws, &later).await }
        };
        let ev = check(&continuation("plain")).await.unwrap();
        assert_eq!(ev.subject, "slack:T1/U42");
        assert_eq!(ev.issuer, ISS);
        assert_eq!(
            ev.method.as_str(),
            "slack",
            "the opening assertion's method"
        );
        assert_eq!(ev.assurance.as_str(), "platform", "and its assurance");
        // Naming the same method and assurance is fine; naming others is not.
        let mut c = continuation("same");
        c.insert("mentionable_method".into(), json!("slack"));
        c.insert("mentionable_assurance".into(), json!("platform"));
        assert!(check(&c).await.is_ok());
        let mut c = continuation("method");
        c.insert("mentionable_method".into(), json!("discord"));
        assert_eq!(check(&c).await.map(|_| ()), Err(Reject::InvalidMethod));
        let mut c = continuation("assurance");
        c.insert("mentionable_assurance".into(), json!("verified"));
        assert_eq!(check(&c).await.map(|_| ()), Err(Reject::InvalidAssurance));
        // Another subject than the task's.
        let mut c = continuation("sub");
        c.insert("sub".into(), json!("slack:T1/U43"));
        assert_eq!(check(&c).await.map(|_| ()), Err(Reject::InvalidSubject));
        // A task whose first turn carried no assertion of this issuer.
        let mut other = opening[0].clone();
        other.issuer = "https://elsewhere.example".into();
        for opening in [&[][..], &[other][..]] {
            let task = Expected { opening, ..later };
            let jws = sign(&key, CONTINUATION_TYP, key.kid, &continuation("none"));
            assert_eq!(
                f.verifier.verify(&jws, &task).await.map(|_| ()),
                Err(Reject::InvalidSubject)
            );
        }
    }
}

/// A static key that is no usable key is never used: its kid names nothing.
#[tokio::test]
async fn an_unusable_static_key_is_not_authorized() {
    let f = fixture().await;
    for key in keys() {
        let jws = sign(&key, SUBJECT_TYP, "empty-x", &claims(key.kid));
        assert_eq!(
            f.verifier.verify(&jws, &expected()).await.map(|_| ()),
            Err(Reject::KidNotAuthorized),
            "{:?}",
            key.alg
        );
    }
}

/// Serves `doc` (rendered once the DID, which holds the port, is known) at every path, to any
/// number of requests; returns the DID.
async fn did_server(doc: impl FnOnce(&str) -> Value) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let did = format!(
        "did:web:127.0.0.1%3A{}",
        listener.local_addr().unwrap().port()
    );
    let body = doc(&did).to_string();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/did+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(resp.as_bytes()).await;
            });
        }
    });
    did
}

/// The verification methods of a DID document, each `{kind}-{kid}` for each test key: one the
/// identity profile allows (`good`), and one for each way a method can be refused.
fn methods(did: &str) -> (Vec<Value>, Vec<String>) {
    let mut methods = Vec::new();
    let mut refused: Vec<String> = [
        "other-controller",
        "no-controller",
        "json-web-key-2020",
        "no-type",
        "multibase",
        "base58",
        "pem",
        "no-jwk",
        "empty-x",
        "rsa",
    ]
    .map(String::from)
    .into();
    refused.extend(jwk::PRIVATE_MEMBERS.iter().map(|m| format!("private-{m}")));
    for key in keys() {
        let jwk = serde_json::to_value(&key.jwk).unwrap();
        for kind in std::iter::once("good").chain(refused.iter().map(String::as_str)) {
            let mut m = json!({"id": format!("#{kind}-{}", key.kid), "type": "JsonWebKey",
                               "controller": did, "publicKeyJwk": jwk});
            let remove = |m: &mut Value, member: &str| {
                m.as_object_mut().unwrap().remove(member);
            };
            match kind {
                "good" => {}
                "other-controller" => m["controller"] = json!("did:web:other.example"),
                "no-controller" => remove(&mut m, "controller"),
                "json-web-key-2020" => m["type"] = json!("JsonWebKey2020"),
                "no-type" => remove(&mut m, "type"),
                "multibase" => {
                    m["publicKeyMultibase"] =
                        json!("z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK")
                }
                "base58" => {
                    m["publicKeyBase58"] = json!("B12NYF8RrR3h41TDCTJojY59usg3mbtbjnFs7Eud1Y6u")
                }
                "pem" => m["publicKeyPem"] = json!("-----BEGIN PUBLIC KEY-----"),
                "no-jwk" => remove(&mut m, "publicKeyJwk"),
                "empty-x" => m["publicKeyJwk"]["x"] = json!(""),
                "rsa" => m["publicKeyJwk"] = json!({"kty": "RSA", "n": jwk["x"], "e": "AQAB"}),
                // The seed itself is the private key of both test keys.
                private => {
                    let member = private.trim_start_matches("private-");
                    m["publicKeyJwk"][member] = json!(b64(&[7; 32]));
                }
            }
            methods.push(m);
        }
    }
    (methods, refused)
}

/// Each way a `did:web` issuer's verification method departs from the identity profile makes
/// its kid `kid-not-authorized`: another controller or type, other key material, private JWK
/// members, a JWK that is no usable key.
#[tokio::test]
async fn verification_methods_the_profile_does_not_allow_are_not_authorized() {
    let mut refused = Vec::new();
    let did = did_server(|did| {
        let (methods, kinds) = methods(did);
        refused = kinds;
        let ids: Vec<Value> = methods.iter().map(|m| m["id"].clone()).collect();
        json!({"@context": ["https://www.w3.org/ns/did/v1"], "id": did,
               "verificationMethod": methods, "assertionMethod": ids})
    })
    .await;
    let f = fixture_with(vec![TrustedIssuerConfig {
        issuer: did.clone(),
        methods: vec!["slack".into()],
        assurance: vec!["verified".into()],
        ..TrustedIssuerConfig::default()
    }])
    .await;
    for key in keys() {
        let mut c = claims(&format!("good-{}", key.kid));
        c.insert("iss".into(), json!(did));
        let good = sign(&key, SUBJECT_TYP, &format!("#good-{}", key.kid), &c);
        assert!(
            f.verifier.verify(&good, &expected()).await.is_ok(),
            "{:?}",
            key.alg
        );
        for kind in &refused {
            c.insert("jti".into(), json!(format!("{kind}-{}", key.kid)));
            let kid = format!("{did}#{kind}-{}", key.kid);
            let jws = sign(&key, SUBJECT_TYP, &kid, &c);
            assert_eq!(
                f.verifier.verify(&jws, &expected()).await.map(|_| ()),
                Err(Reject::KidNotAuthorized),
                "{kind} {:?}",
                key.alg
            );
        }
    }
}

#[tokio::test]
async fn dropped_assertions_are_counted_by_reason() {
    let f = fixture().await;
    let key = ed25519(7, "ed-1");
    let good = sign(&key, SUBJECT_TYP, "ed-1", &claims("count"));
    let got = f
        .verifier
        .verify_all(&[good.clone(), good, "not a jws".into()], &expected())
        .await;
    assert_eq!(got.len(), 1);
    let text = f.metrics.render();
    for line in [
        "switchboard_attestations_total{outcome=\"verified\"} 1",
        "switchboard_attestations_total{outcome=\"replayed\"} 1",
        "switchboard_attestations_total{outcome=\"malformed\"} 1",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}
