//! An A2A task always reaches a terminal state: when the agent has nothing to say (a webhook
//! answering 204) the task completes without artifacts, and when its dispatch fails for good (a
//! webhook answering 400) the task fails with a status message that tells nothing internal.
//! Blocking sends, GetTask and streams all see it.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use switchboard::config::{AgentConfig, BackendConfig, Secret};

use crate::helpers::{Engine, TestApp, on_both_engines, serve_route, spawn_app};

/// The agent behind the webhook: 204 to `silent`, 400 to `broken`.
async fn hook(req: HttpRequest, _body: web::Bytes) -> HttpResponse {
    match req.match_info().get("mode") {
        Some("silent") => HttpResponse::NoContent().finish(),
        _ => HttpResponse::BadRequest().body("no such thing"),
    }
}

async fn send(t: &TestApp, agent: &str, method: &str) -> reqwest::Response {
    t.http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
            "messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
            "parts": [{"text": "hello?"}]}}}),
        )
        .send()
        .await
        .unwrap()
}

async fn unanswered_tasks_still_end(engine: Engine) {
    let url = serve_route!((), post, "/{mode}", hook);
    let base = url.trim_end_matches("/{mode}").to_owned();
    let t = spawn_app(engine, move |c, _| {
        for name in ["silent", "broken"] {
            c.agents.push(AgentConfig {
                name: name.into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Webhook {
                    url: format!("{base}/{name}"),
                    secret: Secret::new("s"),
                    timeout_ms: 2_000,
                },
                a2a: None,
                email: None,
            });
        }
    })
    .await;

    // Nothing to say: the blocking send returns the task completed, with no artifact.
    let r: Value = send(&t, "silent", "SendMessage")
        .await
        .json()
        .await
        .unwrap();
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert!(
        task.get("artifacts")
            .is_none_or(|a| a.as_array().unwrap().is_empty()),
        "{r}"
    );

    // A permanent failure: the task fails and says only that the agent could not answer.
    let r: Value = send(&t, "broken", "SendMessage")
        .await
        .json()
        .await
        .unwrap();
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{r}");
    let said = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(said.contains("could not answer"), "{said}");
    assert!(
        !r.to_string().contains("no such thing"),
        "nothing internal leaks: {r}"
    );
    let id = task["id"].as_str().unwrap().to_owned();
    let got: Value = t
        .http
        .post(format!("{}/agents/broken/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_FAILED",
        "{got}"
    );

    // A stream ends with the final status.
    let body = send(&t, "silent", "SendStreamingMessage")
        .await
        .text()
        .await
        .unwrap();
    let last = body
        .split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .last()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .unwrap();
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
}

on_both_engines!(unanswered_tasks_still_end);
