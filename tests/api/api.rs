//! The operator message API over real HTTP: authentication, malformed, oversized, unknown and
//! duplicate input, polling for the response, and signed callbacks.

use std::sync::{Arc, Mutex};

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use crate::helpers::{
    Engine, header, on_both_engines, serve_route, signed_with, spawn_app, wait_for,
};

fn body(recipient: &str, external_id: &str, text: &str) -> Value {
    json!({
        "external_id": external_id,
        "message": {
            "sender": {"address": "ops@example.com", "auth_method": "none", "verified": false},
            "recipient": recipient,
            "parts": [{"kind": "text", "mime": "text/plain", "content": text}]
        }
    })
}

async fn api_accepts_dedupes_and_refuses(engine: Engine) {
    let mut t = spawn_app(engine, |c, _| c.server.max_body_bytes = 2048).await;
    let url = format!("{}/api/v1/messages", t.base);
    let to = t.agent("echo");
    let post = |b: Value, token: Option<&str>| {
        let mut r = t.http.post(&url).json(&b);
        if let Some(tok) = token {
            r = r.bearer_auth(tok);
        }
        r.send()
    };

    let r = post(body(&to, "x1", "hi"), None).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(
        post(body(&to, "x1", "hi"), Some("wrong"))
            .await
            .unwrap()
            .status(),
        401
    );

    let bad = t
        .http
        .post(&url)
        .bearer_auth("test-token")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let mut no_id = body(&to, "x", "hi");
    no_id.as_object_mut().unwrap().remove("external_id");
    assert_eq!(post(no_id, Some("test-token")).await.unwrap().status(), 400);
    let mut empty = body(&to, "x2", "hi");
    empty["message"]["parts"] = json!([]);
    let r = post(empty, Some("test-token")).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("parts is empty"));
    let mut wrong_type = body(&to, "x3", "hi");
    wrong_type["message"]["sender"]["verified"] = json!("yes");
    let r = post(wrong_type, Some("test-token")).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("message.sender.verified"));
    assert_eq!(
        post(body(&t.agent("nobody"), "x4", "hi"), Some("test-token"))
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        post(body(&to, "x5", &"y".repeat(4096)), Some("test-token"))
            .await
            .unwrap()
            .status(),
        413
    );

    let r = post(body(&to, "x1", "hello api"), Some("test-token"))
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let first: Value = r.json().await.unwrap();
    assert_eq!(first["duplicate"], false);
    let r = post(body(&to, "x1", "hello again"), Some("test-token"))
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let second: Value = r.json().await.unwrap();
    assert_eq!(second["duplicate"], true);
    assert_eq!(second["id"], first["id"]);

    let resp_url = format!("{url}/{}/response", first["id"].as_str().unwrap());
    let got: Value = wait_for(20, "the stored response", || async {
        let r = t
            .http
            .get(&resp_url)
            .bearer_auth("test-token")
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            Some(r.json().await.unwrap())
        } else {
            assert_eq!(r.status(), 404);
            None
        }
    })
    .await;
    assert_eq!(got["in_reply_to"], first["id"]);
    assert_eq!(got["parts"][0]["content"], "hello api");
    assert_eq!(t.http.get(&resp_url).send().await.unwrap().status(), 401);
    t.stop().await;
}
on_both_engines!(api_accepts_dedupes_and_refuses);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_is_off_without_a_token() {
    let mut t = spawn_app(Engine::Sqlite, |c, _| c.api.token = None).await;
    let r = t
        .http
        .post(format!("{}/api/v1/messages", t.base))
        .bearer_auth("")
        .json(&body(&t.agent("echo"), "x", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    t.stop().await;
}

type Seen = Arc<Mutex<Vec<(String, bool, Value)>>>;

async fn callback(seen: web::Data<Seen>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    seen.lock().unwrap().push((
        header(&req, "idempotency-key"),
        signed_with(&req, &body, b"cb-secret"),
        serde_json::from_slice(&body).unwrap(),
    ));
    HttpResponse::Ok().finish()
}

async fn api_responses_reach_the_callback_signed(engine: Engine) {
    let seen: Seen = Arc::default();
    let cb = serve_route!(seen.clone(), post, "/cb", callback);
    let mut t = spawn_app(engine, move |c, _| {
        c.api.callback_url = Some(cb);
        c.api.callback_secret = Some(switchboard::config::Secret::new("cb-secret"));
    })
    .await;
    let r = t
        .http
        .post(format!("{}/api/v1/messages", t.base))
        .bearer_auth("test-token")
        .json(&body(&t.agent("echo"), "cb-1", "call me back"))
        .send()
        .await
        .unwrap();
    let accepted: Value = r.json().await.unwrap();
    let got = wait_for(20, "the callback", || async {
        seen.lock().unwrap().first().cloned()
    })
    .await;
    let (key, signed, resp) = got;
    assert!(signed, "the callback carries a valid signature");
    assert_eq!(
        key,
        resp["id"].as_str().unwrap(),
        "Idempotency-Key is the response id"
    );
    assert_eq!(resp["in_reply_to"], accepted["id"]);
    assert_eq!(resp["parts"][0]["content"], "call me back");
    t.stop().await;
}
on_both_engines!(api_responses_reach_the_callback_signed);
