//! Trusted connector issuers over A2A: a connector forwards its verified user as a signed
//! subject assertion in message metadata; the agent sees `signed-attestation` evidence, an
//! unknown issuer costs no request, access rules can admit on it, an assertion is used once
//! across instances and restarts, and a later turn of a task carries the subject that opened it
//! on with a continuation assertion.

use std::sync::{Arc, Mutex};

use actix_web::{HttpResponse, web};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use serde_json::{Value, json};
use switchboard::config::{
    AccessConfig, AccessDefault, AccessRule, AgentConfig, BackendConfig, Config,
    TrustedIssuerConfig,
};
use switchboard::message::{NormalizedMessage, NormalizedResponse, Part, ResponseState};
use switchboard::trust::{
    CONTINUATION_TYP, IDENTITY_EXTENSION, LEGACY_IDENTITY_EXTENSION, SUBJECT_TYP,
};

use crate::helpers::{
    Engine, RecordingAgent, TestApp, TestDb, on_both_engines, serve_route, spawn_app, spawn_on,
    wait_for,
};

/// A connector's did:web document server: counts requests; the document is set once the
/// port (part of the DID) is known.
#[derive(Default)]
struct DidServer {
    requests: Mutex<usize>,
    doc: Mutex<Value>,
}

async fn did_json(s: web::Data<Arc<DidServer>>) -> HttpResponse {
    *s.requests.lock().unwrap() += 1;
    HttpResponse::Ok().json(s.doc.lock().unwrap().clone())
}

/// The connector: its DID on the local server, and an Ed25519 key from a fixed seed.
struct Connector {
    did: String,
    server: Arc<DidServer>,
    pkcs8: Vec<u8>,
}

fn connector() -> Connector {
    let server = Arc::new(DidServer::default());
    let url = serve_route!(server.clone(), get, "/.well-known/did.json", did_json);
    let host = url
        .strip_prefix("http://")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let did = format!("did:web:{}", host.replace(':', "%3A"));
    let seed = [42u8; 32];
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    *server.doc.lock().unwrap() = json!({
        "@context": ["https://www.w3.org/ns/did/v1"],
        "id": did,
        "verificationMethod": [{
            "id": format!("{did}#assert-1"), "type": "JsonWebKey", "controller": did,
            "publicKeyJwk": {"kty": "OKP", "crv": "Ed25519", "x": x},
        }],
        "assertionMethod": ["#assert-1"],
    });
    let mut pkcs8 = hex::decode("302e020100300506032b657004220420").unwrap();
    pkcs8.extend_from_slice(&seed);
    Connector { did, server, pkcs8 }
}

impl Connector {
    fn requests(&self) -> usize {
        *self.server.requests.lock().unwrap()
    }

    /// A subject assertion for `aud` issued by `iss` (this connector's DID unless another).
    fn assertion(&self, iss: &str, aud: &str, sub: &str) -> String {
        let now = {
            use switchboard::clock::Clock as _;
            switchboard::clock::SystemClock.now_s()
        };
        let mut h = Header::new(Algorithm::EdDSA);
        h.typ = Some(SUBJECT_TYP.into());
        h.kid = Some(format!("{iss}#assert-1"));
        let claims = json!({
            "iss": iss, "sub": sub, "aud": aud, "iat": now, "exp": now + 300,
            "jti": uuid::Uuid::now_v7().to_string(), "mentionable_method": "slack",
        });
        jsonwebtoken::encode(&h, &claims, &EncodingKey::from_ed_der(&self.pkcs8)).unwrap()
    }

    /// A task-continuation assertion for `aud` and `task`, as the profile's connectors write
    /// them: no `mentionable_method`.
    fn continuation(&self, aud: &str, sub: &str, task: &str) -> String {
        let now = {
            use switchboard::clock::Clock as _;
            switchboard::clock::SystemClock.now_s()
        };
        let mut h = Header::new(Algorithm::EdDSA);
        h.typ = Some(CONTINUATION_TYP.into());
        h.kid = Some(format!("{}#assert-1", self.did));
        let claims = json!({
            "iss": self.did, "sub": sub, "aud": aud, "iat": now, "exp": now + 300,
            "jti": uuid::Uuid::now_v7().to_string(), "mentionable_task_id": task,
        });
        jsonwebtoken::encode(&h, &claims, &EncodingKey::from_ed_der(&self.pkcs8)).unwrap()
    }

    fn trusted(&self, c: &mut Config) {
        c.trust.issuers.push(TrustedIssuerConfig {
            issuer: self.did.clone(),
            methods: vec!["slack".into()],
            assurance: vec!["verified".into()],
            subject_prefixes: vec!["slack:T1/".into()],
            ..TrustedIssuerConfig::default()
        });
    }
}

fn agent(name: &str, access: Option<AccessConfig>) -> AgentConfig {
    AgentConfig {
        activitypub: None,
        access,
        name: name.into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::Echo,
        email: None,
        a2a: None,
        notify: Vec::new(),
    }
}

/// Sends one message to `agent` carrying `metadata`; the HTTP status and body.
async fn send(t: &TestApp, agent: &str, metadata: Value) -> (u16, Value) {
    let resp = t
        .http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                        "parts": [{"text": "hello"}], "metadata": metadata},
            "configuration": {"returnImmediately": true}}}),
        )
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn forwarded_assertions_reach_the_agent_as_signed_attestations(engine: Engine) {
    let conn = connector();
    let recorder = Arc::new(RecordingAgent::default());
    let rec = recorder.clone();
    let t = spawn_app(engine, |c, o| {
        conn.trusted(c);
        c.agents.push(agent("helper", None));
        o.agents.push(("helper".into(), rec));
    })
    .await;
    let aud = format!("{}/agents/helper/a2a", t.base);

    // The card advertises the identity extension.
    let card: Value = t
        .http
        .get(format!("{}/agents/helper/agent-card.json", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let uris: Vec<&str> = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["uri"].as_str())
        .collect();
    assert!(uris.contains(&IDENTITY_EXTENSION), "{card}");

    // An issuer nobody trusts: dropped without a single request (its DID would resolve to the
    // same document server).
    let unknown = conn.did.replace("127.0.0.1", "localhost");
    let jws = conn.assertion(&unknown, &aud, "slack:T1/U1");
    let (status, body) = send(
        &t,
        "helper",
        json!({IDENTITY_EXTENSION: {"assertions": [jws]}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A trusted issuer's assertion, under the legacy URI this time: one document fetch.
    let jws = conn.assertion(&conn.did, &aud, "slack:T1/U42");
    let (status, body) = send(
        &t,
        "helper",
        json!({LEGACY_IDENTITY_EXTENSION: [jws.clone()]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(conn.requests(), 1, "the untrusted issuer cost no request");

    let seen = wait_for(10, "2 messages at the agent", || async {
        let seen = recorder.seen.lock().unwrap().clone();
        (seen.len() >= 2).then_some(seen)
    })
    .await;
    assert_eq!(
        seen[0].sender.identities, None,
        "nothing from the unknown issuer"
    );
    let ids = seen[1].sender.identities.clone().unwrap();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let ev = serde_json::to_value(&ids[0]).unwrap();
    assert_eq!(ev["proof"]["type"], "signed-attestation", "{ev}");
    assert_eq!(ev["proof"]["alg"], "EdDSA");
    assert_eq!(ev["proof"]["kid"], format!("{}#assert-1", conn.did));
    assert_eq!(ev["proof"]["value"], jws);
    assert_eq!(ev["issuer"], conn.did);
    assert_eq!(ev["subject"], "slack:T1/U42");
    assert_eq!(ev["method"], "slack");
    assert_eq!(ev["assurance"], "verified");
    assert_eq!(ev["audience"], aud);
    // The wire credential layer is unchanged: the caller itself was anonymous.
    assert_eq!(seen[1].sender.auth_method.as_str(), "none");

    let metrics = t.metrics().await;
    for line in [
        "switchboard_attestations_total{outcome=\"untrusted-issuer\"} 1",
        "switchboard_attestations_total{outcome=\"verified\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

on_both_engines!(forwarded_assertions_reach_the_agent_as_signed_attestations);

/// An `[agents.access]` rule on the connector's issuer, method and assurance lets a sender in
/// on its attestation; the same assertion presented again, to a second instance on the same
/// database (PostgreSQL) or after a restart (SQLite), is a replay and lets nobody in.
async fn an_attestation_admits_a_sender_once_across_instances(engine: Engine) {
    let conn = connector();
    let access = AccessConfig {
        refusal_reply: Default::default(),
        default: AccessDefault::Deny,
        allow: vec![AccessRule {
            issuer: Some(conn.did.clone()),
            method: Some("slack".into()),
            assurance: vec!["verified".into()],
            subject: None,
        }],
        deny: vec![],
        limits: Default::default(),
    };
    // Both instances advertise the same endpoints, as behind one load balancer.
    let public = "https://switchboard.test";
    let setup = |c: &mut Config| {
        conn.trusted(c);
        c.server.public_url = Some(public.into());
        c.agents.push(agent("private", Some(access.clone())));
    };
    let mut a = spawn_app(engine, |c, _| setup(c)).await;
    let aud = format!("{public}/agents/private/a2a");

    let (status, body) = send(&a, "private", json!({})).await;
    assert_eq!(status, 401, "no evidence, not let in: {body}");
    let jws = conn.assertion(&conn.did, &aud, "slack:T1/U42");
    let carried = json!({IDENTITY_EXTENSION: {"assertions": [jws]}});
    let (status, body) = send(&a, "private", carried.clone()).await;
    assert_eq!(status, 200, "let in on the attestation: {body}");
    assert!(body["result"]["task"]["id"].is_string(), "{body}");

    if engine == Engine::Sqlite {
        a.stop().await;
    }
    let b = spawn_on(TestDb::url_only(a.db.url.clone()), |c, _| setup(c)).await;
    let (status, body) = send(&b, "private", carried).await;
    assert_eq!(status, 401, "a replayed assertion is dropped: {body}");
    let metrics = b.metrics().await;
    let line = "switchboard_attestations_total{outcome=\"replayed\"} 1";
    assert!(metrics.contains(line), "{line} in {metrics}");
    // A fresh assertion still works on the second instance.
    let jws = conn.assertion(&conn.did, &aud, "slack:T1/U42");
    let (status, body) = send(&b, "private", json!({IDENTITY_EXTENSION: jws})).await;
    assert_eq!(status, 200, "{body}");
}

on_both_engines!(an_attestation_admits_a_sender_once_across_instances);

/// Records what it is given and asks for more: every task it answers waits for input.
#[derive(Debug, Default)]
struct AskingAgent {
    seen: Mutex<Vec<NormalizedMessage>>,
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for AskingAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, switchboard::error::OutboundError> {
        self.seen.lock().unwrap().push(msg.clone());
        let mut r = NormalizedResponse::reply_to(msg, vec![Part::text("and then?")]);
        r.state = Some(ResponseState::InputRequired);
        Ok(Some(r))
    }
}

/// A later turn of a task carries a continuation assertion without `mentionable_method`: it
/// becomes evidence with the method and assurance of the subject assertion that opened the
/// task; one for another subject is dropped.
async fn a_continuation_carries_the_tasks_subject_on(engine: Engine) {
    let conn = connector();
    let asker = Arc::new(AskingAgent::default());
    let backend = asker.clone();
    let t = spawn_app(engine, |c, o| {
        conn.trusted(c);
        c.agents.push(agent("asker", None));
        o.agents.push(("asker".into(), backend));
    })
    .await;
    let aud = format!("{}/agents/asker/a2a", t.base);
    let jws = conn.assertion(&conn.did, &aud, "slack:T1/U42");
    let (status, body) = send(&t, "asker", json!({IDENTITY_EXTENSION: [jws]})).await;
    assert_eq!(status, 200, "{body}");
    let task = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let context = body["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for(10, "the task to wait for input", || async {
        let got: Value = t
            .http
            .post(format!("{}/agents/asker/a2a", t.base))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (got["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED").then_some(())
    })
    .await;

    let carried = conn.continuation(&aud, "slack:T1/U42", &task);
    let other_subject = conn.continuation(&aud, "slack:T1/U43", &task);
    let resp = t
        .http
        .post(format!("{}/agents/asker/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {
            "message": {"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                        "taskId": task, "contextId": context, "parts": [{"text": "more"}],
                        "metadata": {IDENTITY_EXTENSION: [carried, other_subject]}},
            "configuration": {"returnImmediately": true}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let seen = wait_for(10, "2 turns at the agent", || async {
        let seen = asker.seen.lock().unwrap().clone();
        (seen.len() >= 2).then_some(seen)
    })
    .await;
    let ids = seen[1].sender.identities.clone().unwrap();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let ev = serde_json::to_value(&ids[0]).unwrap();
    assert_eq!(ev["subject"], "slack:T1/U42", "{ev}");
    assert_eq!(ev["issuer"], conn.did);
    assert_eq!(ev["method"], "slack", "the opening assertion's method");
    assert_eq!(ev["assurance"], "verified");
    assert_eq!(ev["claims"]["mentionable_task_id"], task.as_str());
    let metrics = t.metrics().await;
    for line in [
        "switchboard_attestations_total{outcome=\"verified\"} 2",
        "switchboard_attestations_total{outcome=\"invalid-subject\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

on_both_engines!(a_continuation_carries_the_tasks_subject_on);
