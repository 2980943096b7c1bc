//! A2A bearer tokens: an agent that requires a JWT from a trusted issuer (keys served as a
//! JWKS) admits a good token and refuses every kind of bad one with the right code.

use std::sync::{Arc, Mutex};

use actix_web::{HttpResponse, web};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use switchboard::config::{
    A2aAuthConfig, AgentA2aConfig, AgentConfig, BackendConfig, DatabaseConfig, JwtIssuerConfig,
    Secret, StaticKeyConfig,
};

use super::{rpc_with, user_message};
use crate::helpers::{Engine, RecordingAgent, fresh_db, on_both_engines, serve_route, spawn_app};

const ED_ISS: &str = "https://idp.example";
const RSA_ISS: &str = "https://rsa-idp.example";
const AUD: &str = "https://switchboard.test/agents/secure";

type Jwks = Arc<Mutex<Value>>;

async fn jwks(data: web::Data<Jwks>) -> HttpResponse {
    HttpResponse::Ok().json(data.lock().unwrap().clone())
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn claims(iss: &str, sub: &str, aud: &str, exp_in: i64, nbf_in: i64) -> Value {
    use switchboard::clock::Clock as _;
    let now = switchboard::clock::SystemClock.now_ms() / 1000;
    json!({"iss": iss, "sub": sub, "aud": aud, "iat": now, "exp": now + exp_in, "nbf": now + nbf_in, "jti": uuid::Uuid::now_v7().to_string()})
}

async fn jwt_agent_refuses_bad_tokens(engine: Engine) {
    // Keys: an Ed25519 key published in a JWKS, an RSA key configured as a static PEM.
    let keydb = fresh_db(Engine::Sqlite).await;
    let db = switchboard::store::Db::open(&DatabaseConfig {
        url: Secret::new(&keydb.url),
        ..DatabaseConfig::default()
    })
    .await
    .unwrap();
    let keys = switchboard::keys::Keys::new(db, Arc::new(switchboard::clock::SystemClock));
    let ed = keys.ed25519("test:idp").await.unwrap();
    let ed2 = keys.ed25519("test:idp-rotated").await.unwrap();
    let rsa = keys.rsa("test:rsa-idp").await.unwrap();
    let published: Jwks = Arc::new(Mutex::new(json!({"keys": [
        {"kty":"OKP","crv":"Ed25519","x": b64url(&ed.public_key_raw()),"kid":"k1","alg":"EdDSA","use":"sig"}
    ]})));
    let jwks_url = serve_route!(published.clone(), get, "/jwks.json", jwks);
    let recorder = Arc::new(RecordingAgent::default());
    let rec = recorder.clone();
    let rsa_pem = rsa.public_key_pem();
    let vault_jwks = jwks_url.clone();
    let t = spawn_app(engine, move |c, o| {
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "secure".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Echo,
            email: None,
            a2a: Some(AgentA2aConfig {
                skills: vec![],
                extended_skills: vec![],
                auth: A2aAuthConfig::Jwt {
                    issuers: vec![
                        JwtIssuerConfig {
                            issuer: ED_ISS.into(),
                            audiences: vec![AUD.into()],
                            jwks_url: Some(jwks_url),
                            keys: vec![],
                            algorithms: vec!["EdDSA".into()],
                            assurance: None,
                        },
                        JwtIssuerConfig {
                            issuer: RSA_ISS.into(),
                            audiences: vec![AUD.into()],
                            jwks_url: None,
                            keys: vec![StaticKeyConfig {
                                kid: None,
                                pem: rsa_pem,
                            }],
                            algorithms: vec!["RS256".into()],
                            assurance: Some("oauth".into()),
                        },
                    ],
                    leeway_seconds: 5,
                },
            }),
            notify: Vec::new(),
        });
        // Trusts the same issuer for another audience.
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "vault".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Echo,
            email: None,
            a2a: Some(AgentA2aConfig {
                skills: vec![],
                extended_skills: vec![],
                auth: A2aAuthConfig::Jwt {
                    issuers: vec![JwtIssuerConfig {
                        issuer: ED_ISS.into(),
                        audiences: vec!["https://vault.example/agents/vault".into()],
                        jwks_url: Some(vault_jwks),
                        keys: vec![],
                        algorithms: vec!["EdDSA".into()],
                        assurance: None,
                    }],
                    leeway_seconds: 5,
                },
            }),
            notify: Vec::new(),
        });
        o.agents.push(("secure".into(), rec));
        c.a2a.default_agent = Some("secure".into());
    })
    .await;
    let ed_key = EncodingKey::from_ed_der(ed.private_key_pkcs8_der());
    let ed_token = |c: &Value, kid: &str, key: &EncodingKey| {
        let mut h = Header::new(Algorithm::EdDSA);
        h.kid = Some(kid.into());
        encode(&h, c, key).unwrap()
    };
    let rsa_key = EncodingKey::from_rsa_pem(
        switchboard::keys::pem("PRIVATE KEY", rsa.private_key_pkcs8_der()).as_bytes(),
    )
    .unwrap();

    let call = |token: Option<String>, path: &'static str, text: &'static str| {
        let t = &t;
        async move {
            let mut r = t
                .http
                .post(format!("{}{path}", t.base))
                .header("A2A-Version", "1.0")
                .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage",
                    "params":{"message": user_message(text)}}));
            if let Some(tok) = token {
                r = r.bearer_auth(tok);
            }
            let resp = r.send().await.unwrap();
            let status = resp.status().as_u16();
            let www = resp
                .headers()
                .get("www-authenticate")
                .map(|v| v.to_str().unwrap().to_owned());
            (
                status,
                www,
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    // The card says how to authenticate.
    let card: Value = t
        .http
        .get(format!("{}/agents/secure/agent-card.json", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["securitySchemes"]["jwt"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(card["securityRequirements"][0]["schemes"]["jwt"], json!({}));

    // Missing token: 401 with a challenge, at the agent's endpoint and through the hub.
    let (status, www, _) = call(None, "/agents/secure/a2a", "hi").await;
    assert_eq!(status, 401);
    assert!(www.unwrap().starts_with("Bearer"));
    let (status, _, _) = call(None, "/a2a", "@secure hi").await;
    assert_eq!(status, 401);

    // Bad tokens.
    let now_claims = claims(ED_ISS, "agent-7", AUD, 300, 0);
    let bad = [
        (
            "expired",
            ed_token(&claims(ED_ISS, "agent-7", AUD, -3600, -7200), "k1", &ed_key),
        ),
        (
            "not yet valid",
            ed_token(&claims(ED_ISS, "agent-7", AUD, 7200, 3600), "k1", &ed_key),
        ),
        (
            "other audience",
            ed_token(
                &claims(ED_ISS, "agent-7", "https://elsewhere", 300, 0),
                "k1",
                &ed_key,
            ),
        ),
        (
            "untrusted issuer",
            ed_token(
                &claims("https://evil.example", "agent-7", AUD, 300, 0),
                "k1",
                &ed_key,
            ),
        ),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64url(br#"{"alg":"none","typ":"JWT"}"#),
                b64url(now_claims.to_string().as_bytes())
            ),
        ),
        (
            "HS256 keyed with the public key",
            encode(
                &Header::new(Algorithm::HS256),
                &claims(RSA_ISS, "agent-7", AUD, 300, 0),
                &EncodingKey::from_secret(rsa.public_key_pem().as_bytes()),
            )
            .unwrap(),
        ),
        (
            "signed by another key",
            ed_token(
                &now_claims,
                "k1",
                &EncodingKey::from_ed_der(ed2.private_key_pkcs8_der()),
            ),
        ),
        ("garbage", "not-a-token".into()),
    ];
    for (what, token) in bad {
        let (status, www, _) = call(Some(token), "/agents/secure/a2a", "hi").await;
        assert_eq!(status, 401, "{what} must be refused");
        assert!(www.unwrap().contains("invalid_token"), "{what}");
    }
    assert!(
        recorder.seen.lock().unwrap().is_empty(),
        "nothing reached the agent"
    );

    // Valid tokens: EdDSA from the JWKS, RS256 from the static key.
    let (status, _, body) = call(
        Some(ed_token(&now_claims, "k1", &ed_key)),
        "/agents/secure/a2a",
        "hello",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    let task_id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let rs = encode(
        &Header::new(Algorithm::RS256),
        &claims(RSA_ISS, "bot", AUD, 300, 0),
        &rsa_key,
    )
    .unwrap();
    let (status, _, body) = call(Some(rs.clone()), "/a2a", "@secure via hub").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // A token for `secure` does not open `vault` through the hub, though both trust its
    // issuer: the addressed agent's own audiences decide.
    let (status, _, body) = call(
        Some(ed_token(&now_claims, "k1", &ed_key)),
        "/a2a",
        "@vault let me in",
    )
    .await;
    assert_eq!(status, 401, "{body}");

    let seen = recorder.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let s = &seen[0].sender;
    assert_eq!(s.auth_method.as_str(), "a2a-jwt");
    assert!(s.verified);
    assert_eq!(s.address, "@agent-7@idp.example");
    assert_eq!(s.key_id.as_deref(), Some("k1"));
    let ev = &s.identities.as_ref().unwrap()[0];
    assert_eq!(
        (ev.subject.as_str(), ev.issuer.as_str()),
        ("agent-7", ED_ISS)
    );
    assert_eq!(ev.method.as_str(), "a2a-jwt");
    assert_eq!(ev.assurance.as_str(), "agent");
    let ev2 = &seen[1].sender.identities.as_ref().unwrap()[0];
    assert_eq!(ev2.assurance.as_str(), "oauth");

    // Tasks are visible only to the principal that created them.
    let get = |tok: Option<String>| {
        let id = task_id.clone();
        let t = &t;
        async move {
            let mut headers = vec![("A2A-Version".to_owned(), "1.0".to_owned())];
            if let Some(tok) = tok {
                headers.push(("Authorization".into(), format!("Bearer {tok}")));
            }
            let h: Vec<(&str, &str)> = headers
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            rpc_with(t, "/a2a", "GetTask", json!({"id": id}), &h).await
        }
    };
    assert_eq!(
        get(Some(ed_token(&now_claims, "k1", &ed_key))).await["result"]["id"],
        task_id.as_str()
    );
    assert_eq!(get(None).await["error"]["code"], -32001);
    assert_eq!(get(Some(rs)).await["error"]["code"], -32001);

    // Key rotation: a token naming a new kid makes switchboard refetch the JWKS.
    published.lock().unwrap()["keys"].as_array_mut().unwrap().push(
        json!({"kty":"OKP","crv":"Ed25519","x": b64url(&ed2.public_key_raw()),"kid":"k2","alg":"EdDSA"}),
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let rotated = ed_token(
        &now_claims,
        "k2",
        &EncodingKey::from_ed_der(ed2.private_key_pkcs8_der()),
    );
    let (status, _, body) = call(Some(rotated), "/agents/secure/a2a", "rotated").await;
    assert_eq!(status, 200, "{body}");

    // The SDK clients: refused without a token and with a forged one, served with a valid one.
    if let Some((python, node_modules)) = super::peers() {
        let valid = ed_token(&now_claims, "k1", &ed_key);
        let forged = ed_token(
            &now_claims,
            "k1",
            &EncodingKey::from_ed_der(ed2.private_key_pkcs8_der()),
        );
        let script = node_modules.parent().unwrap().join("client.mjs");
        std::fs::copy(super::peer_dir().join("client.mjs"), &script).unwrap();
        for token in [None, Some(forged), Some(valid)] {
            let mut py = tokio::process::Command::new(&python);
            py.arg(super::peer_dir().join("client.py"))
                .arg("auth")
                .arg(&t.base);
            let mut js = tokio::process::Command::new("node");
            js.arg(&script).arg("auth").arg(&t.base);
            if let Some(tok) = &token {
                py.arg(tok);
                js.arg(tok);
            }
            for (who, cmd) in [("a2a-sdk", py), ("@a2a-js/sdk", js)] {
                let out = super::run_peer(cmd).await;
                match (&token, out.get("state")) {
                    (Some(tok), Some(state)) => {
                        assert_eq!(state, "TASK_STATE_COMPLETED", "{who}: {out}");
                        assert_eq!(
                            tok,
                            &ed_token(&now_claims, "k1", &ed_key),
                            "{who} was served with a bad token"
                        );
                    }
                    (_, None) => {
                        let err = out["error"].as_str().unwrap_or_default();
                        assert!(
                            err.contains("401") || err.to_lowercase().contains("unauth"),
                            "{who}: {out}"
                        );
                        assert!(
                            token
                                .as_ref()
                                .is_none_or(|tok| tok != &ed_token(&now_claims, "k1", &ed_key)),
                            "{who} refused a valid token: {out}"
                        );
                    }
                    (None, Some(_)) => panic!("{who} was served without a token: {out}"),
                }
            }
        }
    }
}
on_both_engines!(jwt_agent_refuses_bad_tokens);
