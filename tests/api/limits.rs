//! Rate limits and backend concurrency (`[limits]`, `[agents.access.limits]`): a sender over
//! its rate is refused natively (HTTP 429 with `Retry-After`), the count is shared by two
//! instances on one PostgreSQL database, and an agent never takes more backend calls at once
//! than its cap.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde_json::json;
use switchboard::config::{AgentConfig, BackendConfig, LimitsConfig, Rate, Secret};

use crate::helpers::{
    Engine, TestDb, a2a_send, fresh_db, on_both_engines, serve_route, spawn_on, wait_for,
};

fn per_sender(requests: u32) -> impl Fn(&mut switchboard::Config, &mut switchboard::app::Options) {
    move |c, _| {
        c.limits.per_sender = Some(Rate {
            requests,
            per_seconds: 3600,
        });
    }
}

async fn post(t: &crate::helpers::TestApp, from: &str, n: usize) -> (u16, Option<String>) {
    let r = t
        .http
        .post(format!("{}/api/v1/messages", t.base))
        .bearer_auth("test-token")
        .json(&json!({
            "external_id": format!("limit-{from}-{n}"),
            "message": {
                "sender": {"address": from, "auth_method": "none", "verified": false},
                "recipient": format!("@echo@{}", t.domain()),
                "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}]
            }
        }))
        .send()
        .await
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), retry)
}

/// Three messages an hour per sender: the fourth is refused with 429 and `Retry-After`, another
/// sender is unaffected; on PostgreSQL the two instances count together.
async fn a_sender_over_its_rate_is_refused_on_every_instance(engine: Engine) {
    let mut db: TestDb = fresh_db(engine).await;
    let url = db.url.clone();
    let a = spawn_on(db.take(), per_sender(3)).await;
    let b = match engine {
        Engine::Postgres => Some(spawn_on(TestDb::url_only(url), per_sender(3)).await),
        Engine::Sqlite => None,
    };
    let second = b.as_ref().unwrap_or(&a);
    for (i, t) in [&a, second, &a].into_iter().enumerate() {
        assert_eq!(post(t, "busy@example.com", i).await.0, 202);
    }
    let (status, retry) = post(second, "busy@example.com", 3).await;
    assert_eq!(status, 429);
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    assert_eq!(post(&a, "calm@example.com", 0).await.0, 202);
    let metrics = second.metrics().await;
    let line =
        "switchboard_refused_total{agent=\"echo\",transport=\"api\",reason=\"rate_limited\"} 1";
    assert!(metrics.contains(line), "{line} in {metrics}");
}
on_both_engines!(a_sender_over_its_rate_is_refused_on_every_instance);

/// Over A2A the refusal is HTTP 429 with `Retry-After` and a JSON-RPC error body.
async fn an_a2a_caller_over_the_agent_rate_gets_429(engine: Engine) {
    let t = spawn_on(fresh_db(engine).await, |c, _| {
        c.limits.per_agent = Some(Rate {
            requests: 1,
            per_seconds: 600,
        });
    })
    .await;
    let call = || async {
        let (status, headers, body) = a2a_send(&t, "echo", None, "hello").await;
        let retry = headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, retry, body)
    };
    let (status, _, body) = call().await;
    assert_eq!(status, 200, "{body}");
    let (status, retry, body) = call().await;
    assert_eq!(status, 429, "{body}");
    assert!(retry.unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(body["error"]["code"], -32600, "{body}");
}
on_both_engines!(an_a2a_caller_over_the_agent_rate_gets_429);

/// A slow webhook agent: counts calls in flight and the most seen at once.
#[derive(Default)]
struct Slow {
    now: Mutex<usize>,
    most: Mutex<usize>,
    done: Mutex<usize>,
}

async fn slow(s: web::Data<Arc<Slow>>) -> HttpResponse {
    {
        let mut now = s.now.lock().unwrap();
        *now += 1;
        let mut most = s.most.lock().unwrap();
        *most = (*most).max(*now);
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    *s.now.lock().unwrap() -= 1;
    *s.done.lock().unwrap() += 1;
    HttpResponse::NoContent().finish()
}

/// Forty messages at once to an agent capped at three calls: never more than three in flight,
/// and every message is answered.
async fn an_agent_takes_at_most_its_concurrent_calls(engine: Engine) {
    let s = Arc::new(Slow::default());
    let url = serve_route!(s.clone(), post, "/hook", slow);
    let t = spawn_on(fresh_db(engine).await, move |c, _| {
        c.agents.push(AgentConfig {
            activitypub: None,
            name: "slow".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Webhook {
                url,
                secret: Secret::new("s"),
                timeout_ms: 5_000,
                assembled: false,
            },
            email: None,
            a2a: None,
            access: Some(switchboard::config::AccessConfig {
                limits: LimitsConfig {
                    max_concurrent_calls: Some(3),
                    ..LimitsConfig::default()
                },
                ..switchboard::config::AccessConfig::default()
            }),
            notify: Vec::new(),
        });
    })
    .await;
    let posts = (0..40).map(|i| {
        let t = &t;
        async move {
            t.http
                .post(format!("{}/api/v1/messages", t.base))
                .bearer_auth("test-token")
                .json(&json!({
                    "external_id": format!("slow-{i}"),
                    "message": {
                        "thread_id": format!("slow-thread-{i}"),
                        "sender": {"address": "many@example.com", "auth_method": "none", "verified": false},
                        "recipient": format!("@slow@{}", t.domain()),
                        "parts": [{"kind": "text", "mime": "text/plain", "content": "wait"}]
                    }
                }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(posts).await;
    assert!(statuses.iter().all(|s| *s == 202), "{statuses:?}");
    wait_for(60, "every call", || async {
        (*s.done.lock().unwrap() == 40).then_some(())
    })
    .await;
    let most = *s.most.lock().unwrap();
    assert!(most <= 3, "{most} calls at once");
    assert!(most >= 2, "calls did run side by side ({most})");
}
on_both_engines!(an_agent_takes_at_most_its_concurrent_calls);
