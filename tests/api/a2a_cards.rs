//! Signed and extended agent cards: every card carries a detached JWS over its RFC 8785 form
//! that jwcrypto verifies with the published JWKS; the extended card reaches only callers the
//! agent authenticates; the `a2a` backend holds a remote card to its signatures.

use actix_web::{HttpResponse, web};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use switchboard::config::{
    A2aAuthConfig, A2aSkillConfig, AgentA2aConfig, AgentConfig, BackendConfig, JwtIssuerConfig,
};
use switchboard::keys::Ed25519Key;

use crate::helpers::{Engine, TestApp, a2a_task_ended, serve_route, spawn_app};

const ISS: &str = "https://id.example";
const AUD: &str = "https://cards.example/agents/vip";

async fn get_json(t: &TestApp, path: &str) -> Value {
    let resp = t
        .http
        .get(format!("{}{path}", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.json().await.unwrap()
}

fn skill(id: &str) -> A2aSkillConfig {
    serde_json::from_value(json!({"id": id, "name": id, "description": format!("does {id}")}))
        .unwrap()
}

async fn jwks(data: web::Data<Value>) -> HttpResponse {
    HttpResponse::Ok().json(data.get_ref())
}

async fn card_body(data: web::Data<String>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(data.get_ref().clone())
}

/// A switchboard whose agent `vip` takes JWTs from an issuer whose key is `idp`, and lists the
/// skill `secret-sauce` on its extended card only.
async fn with_vip(idp: &Ed25519Key) -> TestApp {
    let jwks_url = serve_route!(
        json!({"keys": [switchboard::jws::ed25519_jwk(&idp.public_key_raw(), "idp")]}),
        get,
        "/jwks.json",
        jwks
    );
    spawn_app(Engine::Sqlite, move |c, _| {
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "vip".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Echo,
            email: None,
            a2a: Some(AgentA2aConfig {
                skills: vec![skill("chat")],
                extended_skills: vec![skill("secret-sauce")],
                auth: A2aAuthConfig::Jwt {
                    issuers: vec![JwtIssuerConfig {
                        issuer: ISS.into(),
                        audiences: vec![AUD.into()],
                        jwks_url: Some(jwks_url),
                        keys: vec![],
                        algorithms: vec!["EdDSA".into()],
                        assurance: None,
                    }],
                    leeway_seconds: 5,
                },
            }),
            notify: Vec::new(),
        });
    })
    .await
}

fn token(idp: &Ed25519Key) -> String {
    let now = {
        use switchboard::clock::Clock as _;
        switchboard::clock::SystemClock.now_ms() / 1000
    };
    let mut h = Header::new(Algorithm::EdDSA);
    h.kid = Some("idp".into());
    encode(
        &h,
        &json!({"iss": ISS, "aud": AUD, "sub": "caller-1", "iat": now, "exp": now + 300}),
        &EncodingKey::from_ed_der(idp.private_key_pkcs8_der()),
    )
    .unwrap()
}

async fn extended_card_call(t: &TestApp, agent: &str, token: Option<&str>) -> (u16, Value) {
    let mut r = t
        .http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "GetExtendedAgentCard", "params": {}}));
    if let Some(tok) = token {
        r = r.bearer_auth(tok);
    }
    let resp = r.send().await.unwrap();
    (
        resp.status().as_u16(),
        resp.json().await.unwrap_or(Value::Null),
    )
}

fn skill_ids(card: &Value) -> Vec<&str> {
    card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect()
}

/// Every card (the hub's, each agent's, the extended one) is signed with the key the JWKS
/// publishes, and jwcrypto verifies it over rfc8785's canonical form; a changed copy does not
/// verify.
#[tokio::test]
async fn cards_carry_a_signature_that_jwcrypto_verifies_with_the_published_key() {
    let idp = Ed25519Key::generate().unwrap();
    let t = with_vip(&idp).await;
    let keyset = get_json(&t, "/.well-known/jwks.json").await;
    let kid = keyset["keys"][0]["kid"].as_str().unwrap().to_owned();
    let mut cards = serde_json::Map::new();
    cards.insert(
        "hub".into(),
        get_json(&t, "/.well-known/agent-card.json").await,
    );
    cards.insert(
        "vip".into(),
        get_json(&t, "/agents/vip/agent-card.json").await,
    );
    let (status, ext) = extended_card_call(&t, "vip", Some(&token(&idp))).await;
    assert_eq!(status, 200, "{ext}");
    cards.insert("extended".into(), ext["result"].clone());
    for (name, card) in &cards {
        let sigs = card["signatures"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: {card}"));
        assert_eq!(sigs.len(), 1, "{name}");
        let header = switchboard::jws::header(&sigs[0]).unwrap();
        assert_eq!(header.alg, Algorithm::EdDSA);
        assert_eq!(header.kid.as_deref(), Some(kid.as_str()), "{name}");
        assert_eq!(
            header.jku.as_deref(),
            Some(format!("{}/.well-known/jwks.json", t.base).as_str())
        );
    }

    let Some(python) = crate::helpers::interop("A2A")
        .then(|| std::env::var("SWITCHBOARD_A2A_PYTHON").expect("set by scripts/peers/a2a.sh"))
    else {
        return;
    };
    let mut child = tokio::process::Command::new(python)
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/peers/a2a/verify_cards.py"),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().unwrap();
        let input = json!({"jwks": keyset, "cards": cards});
        stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in ["hub", "vip", "extended"] {
        assert_eq!(report[name]["card"]["verified"], true, "{name}: {report}");
        assert_eq!(report[name]["card"]["header"]["alg"], "EdDSA");
        assert_eq!(
            report[name]["tampered"]["verified"], false,
            "{name}: {report}"
        );
    }
}

/// The extended card lists the extra skills and goes only to a caller the agent
/// authenticates; the public card says it exists without listing them; an agent without one
/// declares none and refuses the call.
#[tokio::test]
async fn the_extended_card_goes_only_to_authenticated_callers() {
    let idp = Ed25519Key::generate().unwrap();
    let stranger = Ed25519Key::generate().unwrap();
    let t = with_vip(&idp).await;

    let public = get_json(&t, "/agents/vip/agent-card.json").await;
    assert_eq!(public["capabilities"]["extendedAgentCard"], true);
    assert_eq!(skill_ids(&public), ["chat"]);

    let (status, body) = extended_card_call(&t, "vip", Some(&token(&idp))).await;
    assert_eq!(status, 200, "{body}");
    let ext = &body["result"];
    assert_eq!(skill_ids(ext), ["chat", "secret-sauce"], "{body}");
    assert_eq!(ext["capabilities"]["extendedAgentCard"], true);
    assert_eq!(ext["name"], public["name"]);

    for tok in [None, Some(token(&stranger)), Some("not-a-token".to_owned())] {
        let (status, body) = extended_card_call(&t, "vip", tok.as_deref()).await;
        assert_eq!(status, 401, "{tok:?}: {body}");
        assert!(body["result"].is_null(), "{body}");
        assert!(!body.to_string().contains("secret-sauce"), "{body}");
    }

    // Over HTTP+JSON: `GET {endpoint}/extendedAgentCard`, 401 with a challenge without a token.
    let rest_card = |tok: Option<String>| {
        let t = &t;
        async move {
            let mut r = t
                .http
                .get(format!("{}/agents/vip/a2a/extendedAgentCard", t.base))
                .header("A2A-Version", "1.0");
            if let Some(tok) = tok {
                r = r.bearer_auth(tok);
            }
            let resp = r.send().await.unwrap();
            let www = resp.headers().get("www-authenticate").is_some();
            (
                resp.status().as_u16(),
                www,
                resp.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, _, card) = rest_card(Some(token(&idp))).await;
    assert_eq!(status, 200, "{card}");
    assert_eq!(skill_ids(&card), ["chat", "secret-sauce"]);
    let (status, challenged, body) = rest_card(None).await;
    assert_eq!((status, challenged), (401, true), "{body}");
    assert_eq!(body["error"]["status"], "UNAUTHENTICATED", "{body}");
    assert!(!body.to_string().contains("secret-sauce"));

    // The echo agent has no extended card: it says so on its card and refuses the call.
    let echo = get_json(&t, "/agents/echo/agent-card.json").await;
    assert_eq!(echo["capabilities"]["extendedAgentCard"], false);
    let (status, body) = extended_card_call(&t, "echo", None).await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32004, "{body}");
    let hub = get_json(&t, "/.well-known/agent-card.json").await;
    assert_eq!(hub["capabilities"]["extendedAgentCard"], false);
}

/// A local agent `name` whose backend is the remote card at `card`.
fn relay(name: &str, card: &str, require: bool, keys: Vec<Value>) -> AgentConfig {
    AgentConfig {
        activitypub: None,
        access: None,
        name: name.into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::A2a {
            card: card.into(),
            token: None,
            timeout_ms: 5_000,
            streaming: false,
            require_signed_card: require,
            card_keys: keys
                .into_iter()
                .map(|k| serde_json::from_value(k).unwrap())
                .collect(),
        },
        email: None,
        a2a: None,
        notify: Vec::new(),
    }
}

/// The `a2a` backend checks a remote card's signature: a signed card (its JWKS on its own
/// origin, or its key pinned) is used; a changed card, a card signed by another key than the
/// pinned one, an unsigned card where one is required, and a card whose key set lies on
/// another origin are refused, and the turn fails without reaching the remote agent.
#[tokio::test]
async fn the_a2a_backend_holds_remote_cards_to_their_signatures() {
    let remote = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let card_url = format!("{}/agents/echo/agent-card.json", remote.base);
    let card = get_json(&remote, "/agents/echo/agent-card.json").await;
    let remote_key = get_json(&remote, "/.well-known/jwks.json").await["keys"][0].clone();
    let other_key = switchboard::jws::ed25519_jwk(
        &Ed25519Key::generate().unwrap().public_key_raw(),
        remote_key["kid"].as_str().unwrap(),
    );

    let mut changed = card.clone();
    changed["description"] = json!("a description the remote never signed");
    let mut unsigned = card.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    let changed_url = serve_route!(changed.to_string(), get, "/card.json", card_body);
    let unsigned_url = serve_route!(unsigned.to_string(), get, "/card.json", card_body);
    // The signed card, unchanged, served from another origin: its jku names the remote's
    // origin, which is not where the card came from.
    let moved_url = serve_route!(card.to_string(), get, "/card.json", card_body);

    let agents = vec![
        relay("signed", &card_url, true, vec![]),
        relay("pinned", &card_url, true, vec![remote_key.clone()]),
        relay("unsigned-allowed", &unsigned_url, false, vec![]),
        relay("moved-pinned", &moved_url, true, vec![remote_key.clone()]),
        relay("wrong-pin", &card_url, true, vec![other_key]),
        relay("changed", &changed_url, true, vec![remote_key.clone()]),
        relay("changed-unpinned", &changed_url, false, vec![]),
        relay("unsigned-required", &unsigned_url, true, vec![]),
        relay("moved", &moved_url, true, vec![]),
    ];
    let local = spawn_app(Engine::Sqlite, move |c, _| c.agents.extend(agents)).await;
    let outcome = |agent: &'static str| {
        let local = &local;
        async move {
            let (status, _, body) =
                crate::helpers::a2a_send(local, agent, None, "are you who you say?").await;
            assert_eq!(status, 200, "{agent}: {body}");
            let id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
            a2a_task_ended(local, agent, &id).await
        }
    };
    let answer = |task: &Value| {
        task["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .map(str::to_owned)
    };
    for agent in ["signed", "pinned", "unsigned-allowed", "moved-pinned"] {
        let task = outcome(agent).await;
        assert_eq!(
            task["status"]["state"], "TASK_STATE_COMPLETED",
            "{agent}: {task}"
        );
        assert_eq!(
            answer(&task).as_deref(),
            Some("are you who you say?"),
            "{agent}: the remote echoes: {task}"
        );
    }
    for agent in [
        "wrong-pin",
        "changed",
        "changed-unpinned",
        "unsigned-required",
        "moved",
    ] {
        let task = outcome(agent).await;
        assert_eq!(
            task["status"]["state"], "TASK_STATE_FAILED",
            "{agent}: {task}"
        );
        assert_eq!(answer(&task), None, "{agent}: the remote answered: {task}");
    }
}
