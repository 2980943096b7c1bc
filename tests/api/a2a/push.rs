//! A2A push notifications: configs set, read, listed and deleted; notifications delivered,
//! signed, to a receiver; a config added to a finished task gets its final state once; a
//! refused notification does not hold back the rest.

use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, HttpResponse, web};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use serde_json::{Value, json};

use super::{AskerAgent, rpc, user_message};
use crate::helpers::{Engine, header, on_both_engines, serve_route, spawn_app, wait_for};

#[derive(Default)]
struct Received {
    calls: usize,
    /// Refuse the first notification for good (400) instead of for now (503).
    refuse_first: bool,
    posts: Vec<(String, String, String, String, Value)>,
}
type Inbox = Arc<Mutex<Received>>;

async fn receive(inbox: web::Data<Inbox>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let mut r = inbox.lock().unwrap();
    r.calls += 1;
    if r.calls == 1 {
        // The first attempt fails: for now (the delivery must be retried) or for good.
        return if r.refuse_first {
            HttpResponse::BadRequest().finish()
        } else {
            HttpResponse::ServiceUnavailable().finish()
        };
    }
    r.posts.push((
        header(&req, "authorization"),
        header(&req, "x-a2a-notification-token"),
        header(&req, "content-type"),
        header(&req, "x-a2a-notification-jwt"),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ));
    HttpResponse::Ok().finish()
}

/// A config created on a finished task is told the task's final state, once.
async fn a_config_on_a_finished_task_gets_its_final_state_once(engine: Engine) {
    let inbox: Inbox = Arc::default();
    let url = serve_route!(inbox.clone(), post, "/webhook", receive);
    let t = spawn_app(engine, |_, _| {}).await;
    let r = rpc(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("done at once")}),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    let created = rpc(
        &t,
        "/a2a",
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task["id"], "url": url}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    wait_for(10, "the final state", || async {
        (!inbox.lock().unwrap().posts.is_empty()).then_some(())
    })
    .await;
    // Nothing follows it.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let posts = inbox.lock().unwrap().posts.clone();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(
        posts[0].4["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{posts:?}"
    );
    assert_eq!(posts[0].4["statusUpdate"]["taskId"], task["id"]);
}
on_both_engines!(a_config_on_a_finished_task_gets_its_final_state_once);

async fn push_configs_and_delivery(engine: Engine) {
    let inbox: Inbox = Arc::default();
    let url = serve_route!(inbox.clone(), post, "/webhook", receive);
    let t = spawn_app(engine, |_, o| {
        o.agents.push(("echo".into(), Arc::new(AskerAgent)));
    })
    .await;
    let card: Value = t
        .http
        .get(format!("{}/.well-known/agent-card.json", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(card["capabilities"]["pushNotifications"], true);

    // An inline config on a task that asks for input.
    let r = rpc(
        &t,
        "/a2a",
        "SendMessage",
        json!({
            "message": user_message("need input"),
            "configuration": {"taskPushNotificationConfig": {
                "url": url, "token": "tok-1",
                "authentication": {"scheme": "Bearer", "credentials": "push-secret"}}}
        }),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    let task_id = task["id"].as_str().unwrap().to_owned();
    // Every status of the task from `working` on reaches the receiver, though the inline
    // config was stored after the task began working.
    let posts = wait_for(10, "both push notifications", || async {
        let r = inbox.lock().unwrap();
        (r.posts.len() >= 2).then(|| r.posts.clone())
    })
    .await;
    assert!(
        inbox.lock().unwrap().calls >= 3,
        "the failed attempt was retried"
    );
    // In order, each once: the failed first notification held the second back.
    let states: Vec<&str> = posts
        .iter()
        .map(|p| p.4["statusUpdate"]["status"]["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"],
        "{posts:?}"
    );
    // Push jobs finish through the queue like every job, and show in the job metrics.
    wait_for(10, "the push job metrics", || async {
        let text = t.metrics().await;
        (text.contains("switchboard_jobs_total{kind=\"a2a_push\",outcome=\"retry\"}")
            && text.contains("switchboard_jobs_total{kind=\"a2a_push\",outcome=\"done\"}"))
        .then_some(())
    })
    .await;
    let (auth, token, ctype, jwt, body) = posts[0].clone();
    assert_eq!(auth, "Bearer push-secret");
    assert_eq!(token, "tok-1");
    assert_eq!(ctype, "application/a2a+json");
    assert_eq!(body["statusUpdate"]["taskId"], task_id.as_str());

    // The JWT verifies against the published JWKS.
    let jwks: JwkSet = t
        .http
        .get(format!("{}/.well-known/jwks.json", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kid = jsonwebtoken::decode_header(&jwt).unwrap().kid.unwrap();
    let key = DecodingKey::from_jwk(jwks.find(&kid).unwrap()).unwrap();
    let mut v = Validation::new(Algorithm::EdDSA);
    v.set_audience(&[url.as_str()]);
    v.set_issuer(&[t.base.as_str()]);
    let claims = jsonwebtoken::decode::<Value>(&jwt, &key, &v)
        .unwrap()
        .claims;
    assert_eq!(claims["taskId"], task_id.as_str());

    // CRUD.
    let created = rpc(
        &t,
        "/a2a",
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task_id, "url": url}),
    )
    .await;
    let cid = created["result"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["result"]["taskId"], task_id.as_str());
    let got = rpc(
        &t,
        "/a2a",
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": cid}),
    )
    .await;
    assert_eq!(got["result"]["url"], url.as_str());
    let listed = rpc(
        &t,
        "/a2a",
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task_id}),
    )
    .await;
    assert_eq!(listed["result"]["configs"].as_array().unwrap().len(), 2);
    let first_id = listed["result"]["configs"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..2 {
        let d = rpc(
            &t,
            "/a2a",
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task_id, "id": first_id}),
        )
        .await;
        assert!(d.get("error").is_none(), "{d}");
        assert_eq!(d["result"], Value::Null);
    }
    let gone = rpc(
        &t,
        "/a2a",
        "GetTaskPushNotificationConfig",
        json!({"taskId": task_id, "id": first_id}),
    )
    .await;
    assert!(gone.get("error").is_some());
    let unknown = rpc(
        &t,
        "/a2a",
        "CreateTaskPushNotificationConfig",
        json!({"taskId": "nope", "url": url}),
    )
    .await;
    assert_eq!(unknown["error"]["code"], -32001);
    let bad = rpc(
        &t,
        "/a2a",
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task_id, "url": "not a url"}),
    )
    .await;
    assert_eq!(bad["error"]["code"], -32602);

    // The follow-up completes the task: the remaining config (no credentials of its own)
    // gets the events with the JWT as its bearer token.
    let mut follow = user_message("the answer");
    follow["taskId"] = json!(task_id);
    let r = rpc(&t, "/a2a", "SendMessage", json!({"message": follow})).await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{r}"
    );
    let done = wait_for(10, "the completion push", || async {
        inbox
            .lock()
            .unwrap()
            .posts
            .iter()
            .find(|p| p.4["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
            .cloned()
    })
    .await;
    assert!(done.0.starts_with("Bearer ey"), "{}", done.0);
    assert_eq!(done.0, format!("Bearer {}", done.3));
    {
        let posts = &inbox.lock().unwrap().posts;
        // The config created while the task waited gets the events from then on, in order.
        let later: Vec<&str> = posts
            .iter()
            .filter(|p| p.0.starts_with("Bearer ey"))
            .filter_map(|p| p.4["statusUpdate"]["status"]["state"].as_str())
            .collect();
        assert_eq!(
            later,
            ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
            "{posts:?}"
        );
        assert!(
            posts.iter().all(|p| p.0 != "Bearer push-secret"
                || p.4["statusUpdate"]["status"]["state"] != "TASK_STATE_COMPLETED"),
            "the deleted config got nothing after its deletion"
        );
    }

    // The a2a-sdk client registers a config; its task's completion reaches the receiver.
    if let Some((python, _)) = super::peers() {
        let mut cmd = tokio::process::Command::new(&python);
        cmd.arg(super::peer_dir().join("client.py"))
            .arg("push")
            .arg(&t.base)
            .arg(&url);
        let out = super::run_peer(cmd).await;
        assert_eq!(out["final"], "TASK_STATE_COMPLETED", "{out}");
        assert_eq!(out["config"]["url"], url.as_str());
        let sdk_task = out["task_id"].as_str().unwrap().to_owned();
        let got = wait_for(10, "the push for the SDK's task", || async {
            inbox
                .lock()
                .unwrap()
                .posts
                .iter()
                .find(|p| {
                    p.4["statusUpdate"]["taskId"] == sdk_task.as_str()
                        && p.4["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
                })
                .cloned()
        })
        .await;
        assert_eq!(got.0, "Bearer sdk-secret");
        assert_eq!(got.1, "sdk-token");
    }
}
on_both_engines!(push_configs_and_delivery);

/// An event the receiver refuses for good is skipped: its job is dead, the later events
/// still arrive.
async fn a_refused_notification_does_not_hold_back_the_rest(engine: Engine) {
    let inbox: Inbox = Arc::new(Mutex::new(Received {
        refuse_first: true,
        ..Received::default()
    }));
    let url = serve_route!(inbox.clone(), post, "/webhook", receive);
    let t = spawn_app(engine, |_, o| {
        o.agents.push(("echo".into(), Arc::new(AskerAgent)));
    })
    .await;
    let r = rpc(
        &t,
        "/a2a",
        "SendMessage",
        json!({
            "message": user_message("need input"),
            "configuration": {"taskPushNotificationConfig": {"url": url}}
        }),
    )
    .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{r}"
    );
    let db = t.open_db().await;
    let dead = wait_for(10, "the refused notification's job to die", || async {
        let dead = switchboard::store::jobs::list(&db, Some("dead"), Some("a2a_push"), 10)
            .await
            .unwrap();
        (!dead.is_empty()).then_some(dead)
    })
    .await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].id.ends_with(":1"), "the working status: {dead:?}");
    let posts = wait_for(10, "the input-required notification", || async {
        let r = inbox.lock().unwrap();
        (!r.posts.is_empty()).then(|| r.posts.clone())
    })
    .await;
    assert_eq!(
        posts[0].4["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{posts:?}"
    );
}
on_both_engines!(a_refused_notification_does_not_hold_back_the_rest);
