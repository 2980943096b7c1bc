//! The operator read API over real HTTP on both engines: agents, threads (filters, pagination,
//! continuation by thread id), one thread, and every status a message goes through, from
//! `queued` to `delivered` with the stages driven by hand, and the ends without a response
//! (`no_reply`, `failed` against a webhook answering 500) with `…/response` answering 409.

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};
use switchboard::agents::AgentBackend;
use switchboard::config::{AgentConfig, BackendConfig, Secret};
use switchboard::error::OutboundError;
use switchboard::message::{NormalizedMessage, NormalizedResponse};
use switchboard::store::jobs;

use crate::helpers::{Engine, TestApp, on_both_engines, serve_route, spawn_app, wait_for};

const TOKEN: &str = "test-token";

/// An agent that never has anything to say.
#[derive(Debug)]
struct Quiet;

#[async_trait::async_trait]
impl AgentBackend for Quiet {
    async fn respond(
        &self,
        _: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        Ok(None)
    }
}

fn body(recipient: &str, external_id: &str, text: &str, thread_id: Option<&str>) -> Value {
    let mut b = json!({
        "external_id": external_id,
        "message": {
            "sender": {"address": "ops@example.com", "auth_method": "none", "verified": false},
            "recipient": recipient,
            "parts": [{"kind": "text", "mime": "text/plain", "content": text}]
        }
    });
    if let Some(t) = thread_id {
        b["message"]["thread_id"] = json!(t);
    }
    b
}

async fn get(t: &TestApp, path: &str) -> (u16, Value) {
    let r = t
        .http
        .get(format!("{}{path}", t.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Posts a message; returns (id, thread_id).
async fn post(t: &TestApp, b: &Value) -> (String, String) {
    let r = t
        .http
        .post(format!("{}/api/v1/messages", t.base))
        .bearer_auth(TOKEN)
        .json(b)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v: Value = r.json().await.unwrap();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["thread_id"].as_str().unwrap().to_owned(),
    )
}

async fn status_of(t: &TestApp, id: &str) -> Value {
    let (code, v) = get(t, &format!("/api/v1/messages/{id}")).await;
    assert_eq!(code, 200, "{v}");
    v
}

/// Waits for the response to `id`.
async fn answered(t: &TestApp, id: &str) -> Value {
    wait_for(20, "the response", || async {
        let (code, v) = get(t, &format!("/api/v1/messages/{id}/response")).await;
        (code == 200).then_some(v)
    })
    .await
}

/// Claims every due job of `kind` and runs its handler, as a worker would.
async fn run_jobs(t: &TestApp, kind: &str) -> usize {
    let db = t.open_db().await;
    let now = 4_000_000_000_000; // after every job's run_at
    let batch = jobs::claim(&db, kind, "by-hand", now, now + 60_000, 50)
        .await
        .unwrap();
    let p = t.app().pipeline();
    let handler = match kind {
        "dispatch" => p.dispatch_handler(),
        "deliver" => p.deliver_handler(),
        _ => unreachable!(),
    };
    handler.handle("by-hand", &batch).await.unwrap();
    batch.len()
}

/// A callback endpoint that refuses (400) responses whose text mentions "refuse".
async fn callback(_: web::Data<()>, body: web::Bytes) -> HttpResponse {
    if String::from_utf8_lossy(&body).contains("refuse") {
        HttpResponse::BadRequest().finish()
    } else {
        HttpResponse::Ok().finish()
    }
}

/// A webhook agent that always fails.
async fn broken(_: web::Data<()>) -> HttpResponse {
    HttpResponse::InternalServerError().body("stack trace the operator API must not relay")
}

async fn every_status_by_hand(engine: Engine) {
    let callback_url = serve_route!((), post, "/callback", callback);
    let hook_url = serve_route!((), post, "/hook", broken);
    let mut t = spawn_app(engine, move |c, o| {
        o.workers = false;
        o.agents.push(("quiet".into(), Arc::new(Quiet)));
        c.api.callback_url = Some(callback_url);
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "broken".into(),
            display_name: Some("Broken Bot".into()),
            summary: None,
            backend: BackendConfig::Webhook {
                url: hook_url,
                secret: Secret::new("hook-secret-value"),
                timeout_ms: 2_000,
                assembled: false,
            },
            a2a: None,
            email: None,
            notify: Vec::new(),
        });
        for kind in ["dispatch", "deliver"] {
            c.queue.kinds.get_mut(kind).unwrap().max_attempts = 2;
        }
    })
    .await;
    let echo = t.agent("echo");

    // queued → dispatching → answered → delivering → delivered
    let (ok, _) = post(&t, &body(&echo, "s-1", "fine", None)).await;
    let (refused, _) = post(&t, &body(&echo, "s-2", "refuse this", None)).await;
    let (quiet, _) = post(&t, &body(&t.agent("quiet"), "s-3", "hello?", None)).await;
    let (failing, failing_thread) = post(&t, &body(&t.agent("broken"), "s-4", "hi", None)).await;
    for id in [&ok, &refused, &quiet, &failing] {
        let v = status_of(&t, id).await;
        assert_eq!(v["status"], "queued", "{v}");
        assert_eq!(v["message"]["id"], json!(id));
        let (code, r) = get(&t, &format!("/api/v1/messages/{id}/response")).await;
        assert_eq!(
            (code, &r["error"]),
            (404, &json!("not found: no response yet"))
        );
    }
    let db = t.open_db().await;
    let now = 4_000_000_000_000;
    let claimed = jobs::claim(&db, "dispatch", "by-hand", now, now + 60_000, 50)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4);
    assert_eq!(status_of(&t, &ok).await["status"], "dispatching");
    t.app()
        .pipeline()
        .dispatch_handler()
        .handle("by-hand", &claimed)
        .await
        .unwrap();
    let v = status_of(&t, &ok).await;
    assert_eq!(v["status"], "answered", "{v}");
    assert_eq!(v["dispatch_attempts"], 1);
    let response_id = v["response_id"].as_str().unwrap().to_owned();
    let (code, r) = get(&t, &format!("/api/v1/messages/{ok}/response")).await;
    assert_eq!((code, &r["id"]), (200, &json!(response_id)));

    // The agent with nothing to say, and the webhook failing once (retried later).
    let v = status_of(&t, &quiet).await;
    assert_eq!(v["status"], "no_reply", "{v}");
    let (code, r) = get(&t, &format!("/api/v1/messages/{quiet}/response")).await;
    assert_eq!((code, r), (409, json!({"status": "no_reply"})));
    assert_eq!(status_of(&t, &failing).await["status"], "dispatching");
    assert_eq!(run_jobs(&t, "dispatch").await, 1);
    let v = status_of(&t, &failing).await;
    assert_eq!(
        (&v["status"], &v["error_class"], &v["dispatch_attempts"]),
        (&json!("failed"), &json!("agent_unavailable"), &json!(2)),
        "{v}"
    );
    let (code, r) = get(&t, &format!("/api/v1/messages/{failing}/response")).await;
    assert_eq!(
        (code, r),
        (
            409,
            json!({"status": "failed", "error_class": "agent_unavailable"})
        ),
        "the class only, never the agent's text"
    );

    let (_, v) = get(&t, &format!("/api/v1/threads/{failing_thread}")).await;
    let entry = &v["entries"][0];
    assert_eq!(
        (&entry["id"], &entry["status"], &entry["error_class"]),
        (
            &json!(failing),
            &json!("failed"),
            &json!("agent_unavailable")
        ),
        "{v}"
    );
    assert_eq!(
        v["entries"].as_array().unwrap().len(),
        1,
        "no response in it"
    );

    let claimed = jobs::claim(&db, "deliver", "by-hand", now, now + 60_000, 50)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(status_of(&t, &ok).await["status"], "delivering");
    t.app()
        .pipeline()
        .deliver_handler()
        .handle("by-hand", &claimed)
        .await
        .unwrap();
    let v = status_of(&t, &ok).await;
    assert_eq!(
        (&v["status"], &v["delivery_attempts"]),
        (&json!("delivered"), &json!(1))
    );
    let v = status_of(&t, &refused).await;
    assert_eq!(v["status"], "delivery_failed", "{v}");

    // The outcomes outlive the jobs.
    jobs::purge(&db, "done").await.unwrap();
    jobs::purge(&db, "dead").await.unwrap();
    assert_eq!(status_of(&t, &quiet).await["status"], "no_reply");
    let v = status_of(&t, &failing).await;
    assert_eq!(
        (&v["status"], &v["error_class"]),
        (&json!("failed"), &json!("agent_unavailable"))
    );
    assert_eq!(status_of(&t, &ok).await["status"], "delivered");
    assert_eq!(status_of(&t, &refused).await["status"], "delivery_failed");

    // The agents, with their addresses and backend kinds, and no secret.
    let (code, v) = get(&t, "/api/v1/agents").await;
    assert_eq!(code, 200);
    let broken = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "broken")
        .unwrap();
    assert_eq!(broken["display_name"], "Broken Bot");
    assert_eq!(broken["handle"], json!(t.agent("broken")));
    assert_eq!(broken["backend"], "webhook");
    assert!(!v.to_string().contains("hook-secret-value"), "{v}");
    t.stop().await;
}
on_both_engines!(every_status_by_hand);

async fn threads_pages_and_continuation(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let echo = t.agent("echo");
    for path in [
        "/api/v1/agents",
        "/api/v1/threads",
        "/api/v1/threads/x",
        "/api/v1/messages/x",
        "/api/v1/messages/x/response",
    ] {
        let r = t
            .http
            .get(format!("{}{path}", t.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path} needs the token");
        let r = t
            .http
            .get(format!("{}{path}", t.base))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path} needs the right token");
    }
    for path in [
        "/api/v1/threads/nope",
        "/api/v1/messages/nope",
        "/api/v1/messages/nope/response",
    ] {
        assert_eq!(get(&t, path).await.0, 404, "{path}");
    }

    // A thread continued by the thread id the API returned, and by the key it opened with.
    // (Each turn waits for the answer to the one before, as a conversation does.)
    let (first, thread) = post(&t, &body(&echo, "c-1", "one", None)).await;
    answered(&t, &first).await;
    let (second, again) = post(&t, &body(&echo, "c-2", "two", Some(&thread))).await;
    assert_eq!(again, thread, "the thread id continues the thread");
    answered(&t, &second).await;
    let key = format!("api:{first}");
    let (_, by_key) = post(&t, &body(&echo, "c-3", "three", Some(&key))).await;
    assert_eq!(by_key, thread, "the opening key still continues it");
    let (other_id, other) = post(&t, &body(&echo, "c-4", "elsewhere", None)).await;
    assert_ne!(other, thread);
    let (_, third) = post(&t, &body(&echo, "c-5", "and more", None)).await;

    let v = wait_for(30, "every message delivered", || async {
        let (_, v) = get(&t, &format!("/api/v1/threads/{thread}")).await;
        let entries = v["entries"].as_array()?;
        (entries.len() == 6
            && entries
                .iter()
                .filter(|e| e["direction"] == "in")
                .all(|e| e["status"] == "delivered"))
        .then_some(v)
    })
    .await;
    assert_eq!(v["id"], json!(thread));
    assert_eq!(
        (&v["transport"], &v["message_count"]),
        (&json!("api"), &json!(6))
    );
    assert_eq!(v["agents"], json!(["echo"]));
    let entries = v["entries"].as_array().unwrap();
    let texts: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| {
            let body = if e["direction"] == "in" {
                &e["message"]
            } else {
                &e["response"]
            };
            (
                e["direction"].as_str().unwrap(),
                body["parts"][0]["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        texts,
        [
            ("in", "one"),
            ("out", "one"),
            ("in", "two"),
            ("out", "two"),
            ("in", "three"),
            ("out", "three")
        ]
    );
    assert_eq!(entries[1]["in_reply_to"], json!(first));
    assert_eq!(entries[3]["response"]["thread_id"], json!(thread));
    // A thread of its own for a message that names none.
    let r = answered(&t, &other_id).await;
    assert_eq!(r["thread_id"], json!(other));

    // Pages, newest thread first, and filters.
    let (code, p1) = get(&t, "/api/v1/threads?limit=2").await;
    assert_eq!(code, 200, "{p1}");
    let ids = |p: &Value| -> Vec<String> {
        p["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&p1), [third.clone(), other.clone()]);
    let cursor = p1["next_cursor"].as_str().unwrap();
    let (_, p2) = get(&t, &format!("/api/v1/threads?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&p2), std::slice::from_ref(&thread));
    assert!(p2["next_cursor"].is_null(), "{p2}");
    let summary = &p2["threads"][0];
    assert_eq!(
        (&summary["message_count"], &summary["agents"]),
        (&json!(6), &json!(["echo"]))
    );
    assert!(summary["last_activity"].as_str().unwrap() >= summary["created_at"].as_str().unwrap());
    let (_, all) = get(&t, "/api/v1/threads?transport=api&agent=echo").await;
    assert_eq!(ids(&all), [third, other, thread]);
    let (_, none) = get(&t, "/api/v1/threads?agent=nobody").await;
    assert_eq!(ids(&none), Vec::<String>::new());
    let (_, none) = get(&t, "/api/v1/threads?transport=email").await;
    assert_eq!(ids(&none), Vec::<String>::new());
    for bad in ["cursor=garbage!", "limit=0", "limit=201"] {
        assert_eq!(
            get(&t, &format!("/api/v1/threads?{bad}")).await.0,
            400,
            "{bad}"
        );
    }
    t.stop().await;
}
on_both_engines!(threads_pages_and_continuation);
