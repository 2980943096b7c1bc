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
            access: None,
            name: "opaque".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Echo,
            email: None,
            a2a: Some(AgentA2aConfig {
                skills: vec![],
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
                access,
                name: name.into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Echo,
                email: None,
                a2a,
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
