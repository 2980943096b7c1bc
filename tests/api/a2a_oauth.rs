//! A2A agents that accept opaque OAuth 2 access tokens checked by RFC 7662 introspection: the
//! client authenticates to the endpoint, active answers mint `a2a-oauth` evidence and are reused
//! for a while, and inactive, foreign-audience, expired or unverifiable tokens get 401.

use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use switchboard::config::{
    A2aAuthConfig, AgentA2aConfig, AgentConfig, BackendConfig, IntrospectionConfig, Secret,
};

use crate::helpers::{
    Engine, RecordingAgent, a2a_send, on_both_engines, serve_route, spawn_app, wait_for,
};

const AUD: &str = "switchboard-test";

/// The authorization server: answers for known tokens, counts calls, checks the client.
#[derive(Default)]
struct Idp {
    calls: Mutex<Vec<String>>,
    down: Mutex<bool>,
}

async fn introspect(
    idp: web::Data<Arc<Idp>>,
    req: HttpRequest,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    use base64::Engine as _;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("switchboard:s3cret")
    );
    if req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        != Some(basic.as_str())
    {
        return HttpResponse::Unauthorized().finish();
    }
    if *idp.down.lock().unwrap() {
        return HttpResponse::ServiceUnavailable().finish();
    }
    let token = form
        .iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    idp.calls.lock().unwrap().push(token.clone());
    let now = {
        use switchboard::clock::Clock as _;
        switchboard::clock::SystemClock.now_ms() / 1000
    };
    let answer = match token.as_str() {
        "opaque-good" => {
            json!({"active": true, "sub": "client-7", "aud": AUD, "exp": now + 600, "scope": "a2a"})
        }
        "opaque-other-audience" => {
            json!({"active": true, "sub": "client-8", "aud": "someone-else", "exp": now + 600})
        }
        "opaque-expired" => json!({"active": true, "sub": "client-9", "aud": AUD, "exp": now - 5}),
        _ => json!({"active": false}),
    };
    HttpResponse::Ok().json(answer)
}

async fn introspected_tokens_are_checked_and_cached(engine: Engine) {
    let idp = Arc::new(Idp::default());
    let url = serve_route!(idp.clone(), post, "/introspect", introspect);
    let recorder = Arc::new(RecordingAgent::default());
    let rec = recorder.clone();
    let t = spawn_app(engine, move |c, o| {
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "opaque".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Echo,
            email: None,
            a2a: Some(AgentA2aConfig {
                skills: vec![],
                extended_skills: vec![],
                auth: A2aAuthConfig::Oauth {
                    issuers: vec![],
                    introspection: Some(IntrospectionConfig {
                        url,
                        client_id: "switchboard".into(),
                        client_secret: Secret::new("s3cret"),
                        audience: Some(AUD.into()),
                        cache_seconds: 60,
                    }),
                    token_url: None,
                    metadata_url: None,
                    leeway_seconds: 5,
                },
            }),
            notify: Vec::new(),
        });
        o.agents.push(("opaque".into(), rec));
    })
    .await;
    let tr = &t;
    let call = |token: Option<&'static str>| async move {
        let (status, headers, body) = a2a_send(tr, "opaque", token, "hello").await;
        let www = headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, www, body)
    };

    // An active token for our audience: accepted, and its answer reused.
    let (status, _, body) = call(Some("opaque-good")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"]["task"]["id"].is_string(), "{body}");
    let (status, _, body) = call(Some("opaque-good")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        idp.calls.lock().unwrap().as_slice(),
        ["opaque-good"],
        "one introspection for two requests"
    );

    // Refusals: 401 with a Bearer challenge, whatever the reason.
    for token in [
        None,
        Some("opaque-revoked"),
        Some("opaque-other-audience"),
        Some("opaque-expired"),
    ] {
        let (status, www, body) = call(token).await;
        assert_eq!(status, 401, "{token:?}: {body}");
        let www = www.unwrap_or_default();
        assert!(www.starts_with("Bearer"), "{token:?}: {www}");
    }
    // Inactive answers are not cached: asking again asks the server again.
    let before = idp.calls.lock().unwrap().len();
    let (status, _, _) = call(Some("opaque-revoked")).await;
    assert_eq!(status, 401);
    assert_eq!(idp.calls.lock().unwrap().len(), before + 1);
    // The endpoint failing refuses new tokens but the cached one still works.
    *idp.down.lock().unwrap() = true;
    let (status, _, _) = call(Some("opaque-new")).await;
    assert_eq!(status, 401);
    let (status, _, body) = call(Some("opaque-good")).await;
    assert_eq!(status, 200, "{body}");

    // What the agent saw: verified a2a-oauth evidence naming the subject and the endpoint.
    let seen = wait_for(10, "3 messages at the agent", || async {
        let seen = recorder.seen.lock().unwrap().clone();
        (seen.len() >= 3).then_some(seen)
    })
    .await;
    assert_eq!(seen.len(), 3, "messages the agent saw");
    let s = &seen[0].sender;
    assert_eq!(s.auth_method.as_str(), "a2a-oauth");
    assert!(s.verified);
    let ev = &s.identities.as_ref().unwrap()[0];
    assert_eq!(ev.subject.as_str(), "client-7");
    assert!(ev.issuer.ends_with("/introspect"), "{}", ev.issuer);
    assert_eq!(ev.method.as_str(), "a2a-oauth");
    assert_eq!(ev.assurance.as_str(), "oauth");
}

on_both_engines!(introspected_tokens_are_checked_and_cached);

/// `[agents.access]` over A2A: a caller whose verified evidence no rule allows gets 403 (its
/// credential is fine, it is just not let in); a caller with no credential gets 401 with a
/// Bearer challenge (presenting one may help); an allowed caller's message reaches the agent.
async fn access_rules_refuse_a2a_callers_by_evidence(engine: Engine) {
    use switchboard::config::{AccessConfig, AccessDefault, AccessRule};
    let idp = Arc::new(Idp::default());
    let url = serve_route!(idp.clone(), post, "/introspect", introspect);
    let recorder = Arc::new(RecordingAgent::default());
    let rec = recorder.clone();
    let oauth = move || {
        Some(AgentA2aConfig {
            skills: vec![],
            extended_skills: vec![],
            auth: A2aAuthConfig::Oauth {
                issuers: vec![],
                introspection: Some(IntrospectionConfig {
                    url: url.clone(),
                    client_id: "switchboard".into(),
                    client_secret: Secret::new("s3cret"),
                    audience: Some(AUD.into()),
                    cache_seconds: 60,
                }),
                token_url: None,
                metadata_url: None,
                leeway_seconds: 5,
            },
        })
    };
    let only = |rule: AccessRule| {
        Some(AccessConfig {
            refusal_reply: Default::default(),
            limits: Default::default(),
            default: AccessDefault::Deny,
            allow: vec![rule],
            deny: vec![],
        })
    };
    let t = spawn_app(engine, move |c, o| {
        for (name, a2a, access) in [
            (
                "allowed",
                oauth(),
                only(AccessRule {
                    method: Some("a2a-oauth".into()),
                    subject: Some("client-7".into()),
                    ..AccessRule::default()
                }),
            ),
            (
                "picky",
                oauth(),
                only(AccessRule {
                    subject: Some("client-99".into()),
                    ..AccessRule::default()
                }),
            ),
            (
                "closed",
                None,
                only(AccessRule {
                    method: Some("a2a-jwt".into()),
                    ..AccessRule::default()
                }),
            ),
        ] {
            c.agents.push(AgentConfig {
                activitypub: None,
                access,
                name: name.into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Echo,
                email: None,
                a2a,
                notify: Vec::new(),
            });
        }
        o.agents.push(("allowed".into(), rec));
    })
    .await;
    let tr = &t;
    let call = |agent: &'static str, token: Option<&'static str>| async move {
        let (status, headers, body) = a2a_send(tr, agent, token, "let me in").await;
        let www = headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, www, body)
    };
    let (status, _, body) = call("allowed", Some("opaque-good")).await;
    assert_eq!(status, 200, "{body}");
    let (status, www, body) = call("picky", Some("opaque-good")).await;
    assert_eq!(status, 403, "{body}");
    assert!(www.is_none());
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let (status, www, body) = call("closed", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(www.unwrap_or_default().starts_with("Bearer"));
    let seen = wait_for(10, "the allowed message", || async {
        let seen = recorder.seen.lock().unwrap().clone();
        (!seen.is_empty()).then_some(seen)
    })
    .await;
    assert_eq!(seen[0].sender.auth_method.as_str(), "a2a-oauth");
    let metrics = t.metrics().await;
    for (agent, n) in [("picky", 1), ("closed", 1)] {
        let line = format!(
            "switchboard_refused_total{{agent=\"{agent}\",transport=\"a2a\",reason=\"not_allowed\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}
on_both_engines!(access_rules_refuse_a2a_callers_by_evidence);

/// Blocks over A2A callers, by their evidence: a block on the caller's subject for one agent
/// answers 403 there (and only there), before the message is stored; one added at run time on
/// the evidence's issuer through the operator API refuses at once, and removing it lets the
/// caller in again. The file's blocks are listed and cannot be removed through the API.
async fn blocks_refuse_a2a_callers_by_subject_and_issuer(engine: Engine) {
    let idp = Arc::new(Idp::default());
    let url = serve_route!(idp.clone(), post, "/introspect", introspect);
    let recorder = Arc::new(RecordingAgent::default());
    let rec = recorder.clone();
    let t = spawn_app(engine, move |c, o| {
        for name in ["open", "guarded"] {
            c.agents.push(AgentConfig {
                activitypub: None,
                access: None,
                name: name.into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Echo,
                email: None,
                a2a: Some(AgentA2aConfig {
                    skills: vec![],
                    extended_skills: vec![],
                    auth: A2aAuthConfig::Oauth {
                        issuers: vec![],
                        introspection: Some(IntrospectionConfig {
                            url: url.clone(),
                            client_id: "switchboard".into(),
                            client_secret: Secret::new("s3cret"),
                            audience: Some(AUD.into()),
                            cache_seconds: 60,
                        }),
                        token_url: None,
                        metadata_url: None,
                        leeway_seconds: 5,
                    },
                }),
                notify: Vec::new(),
            });
        }
        c.moderation.blocks.push(switchboard::config::BlockConfig {
            sender: Some("CLIENT-7".into()),
            agent: Some("guarded".into()),
            reason: Some("abuse".into()),
            ..Default::default()
        });
        o.agents.push(("open".into(), rec));
    })
    .await;
    let stored = || async {
        let db = t.open_db().await;
        switchboard::store::messages::counts(&db)
            .await
            .unwrap()
            .into_iter()
            .filter(|c| c.direction == "in")
            .map(|c| c.n)
            .sum::<i64>()
    };
    let (status, _, body) = a2a_send(&t, "guarded", Some("opaque-good"), "hello").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    let (status, _, body) = a2a_send(&t, "open", Some("opaque-good"), "hello").await;
    assert_eq!(status, 200, "{body}");
    let seen = wait_for(10, "the open agent's message", || async {
        let seen = recorder.seen.lock().unwrap().clone();
        (!seen.is_empty()).then_some(seen)
    })
    .await;
    assert_eq!(stored().await, 1, "the refused message was stored");
    let issuer = seen[0].sender.identities.as_ref().unwrap()[0]
        .issuer
        .clone();

    // The API lists the file's block, refuses to remove it, and adds one on the issuer.
    let api = |path: &str| format!("{}/api/v1/{path}", t.base);
    let listed: serde_json::Value = t
        .http
        .get(api("blocks"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["blocks"][0]["id"], "config-0", "{listed}");
    assert_eq!(listed["blocks"][0]["source"], "config", "{listed}");
    let r = t
        .http
        .delete(api("blocks/config-0"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    for bad in [
        json!({"kind": "nickname", "pattern": "x"}),
        json!({"kind": "issuer", "pattern": "  "}),
        json!({"kind": "issuer", "pattern": "x", "agent": "nobody"}),
    ] {
        let r = t
            .http
            .post(api("blocks"))
            .bearer_auth("test-token")
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    let r = t
        .http
        .post(api("blocks"))
        .json(&json!({"kind": "issuer", "pattern": issuer}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "adding a block needs the token");
    let r = t
        .http
        .post(api("blocks"))
        .bearer_auth("test-token")
        .json(&json!({"kind": "issuer", "pattern": issuer, "reason": "compromised"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let block: serde_json::Value = r.json().await.unwrap();
    assert_eq!(block["source"], "api", "{block}");
    let (status, _, body) = a2a_send(&t, "open", Some("opaque-good"), "again").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(stored().await, 1);

    let r = t
        .http
        .delete(api(&format!("blocks/{}", block["id"].as_str().unwrap())))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (status, _, body) = a2a_send(&t, "open", Some("opaque-good"), "let in").await;
    assert_eq!(status, 200, "{body}");
    let metrics = t.metrics().await;
    for (agent, n) in [("guarded", 1), ("open", 1)] {
        let line = format!(
            "switchboard_refused_total{{agent=\"{agent}\",transport=\"a2a\",reason=\"blocked\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}
on_both_engines!(blocks_refuse_a2a_callers_by_subject_and_issuer);
