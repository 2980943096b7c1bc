//! The webhook agent against a real HTTP endpoint: signatures, JSON / SSE / 204 answers, and
//! every failure mode (timeout, 5xx then success, 4xx, oversized, SSRF-refused target).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use switchboard::config::{AgentConfig, BackendConfig, Secret};
use switchboard::message::{NormalizedMessage, Part};
use switchboard::store::jobs;

use crate::helpers::{
    Engine, TestApp, job_states, message, on_both_engines, serve_route, signed_with, spawn_app,
    wait_for,
};

pub(crate) const SECRET: &str = "hook-secret";

/// What the fake agent does for one call.
#[derive(Clone)]
enum Answer {
    Json(serde_json::Value),
    Sse(String),
    Status(u16),
    Slow(Duration),
    Big(usize),
    RetryAfter(u64),
}

#[derive(Default)]
struct Hook {
    script: Mutex<VecDeque<Answer>>,
    calls: Mutex<Vec<(bool, NormalizedMessage)>>,
    /// Each call's `Idempotency-Key` and its body as JSON.
    raw: Mutex<Vec<(Option<String>, serde_json::Value)>>,
}

async fn handle(hook: web::Data<Arc<Hook>>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let signed = signed_with(&req, &body, SECRET.as_bytes());
    let msg: NormalizedMessage = serde_json::from_slice(&body).unwrap();
    hook.calls.lock().unwrap().push((signed, msg));
    let key = req
        .headers()
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_owned());
    hook.raw
        .lock()
        .unwrap()
        .push((key, serde_json::from_slice(&body).unwrap()));
    let answer = hook
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Answer::Status(204));
    match answer {
        Answer::Json(v) => HttpResponse::Ok().json(v),
        Answer::Sse(s) => HttpResponse::Ok().content_type("text/event-stream").body(s),
        Answer::Status(s) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(s).unwrap()).finish()
        }
        Answer::Slow(d) => {
            tokio::time::sleep(d).await;
            HttpResponse::Ok()
                .json(json!({"parts": [{"kind": "text", "mime": "text/plain", "content": "late"}]}))
        }
        Answer::RetryAfter(secs) => HttpResponse::TooManyRequests()
            .insert_header(("Retry-After", secs.to_string()))
            .finish(),
        Answer::Big(n) => HttpResponse::Ok()
            .content_type("application/json")
            .body(format!(
                "{{\"parts\":[{{\"kind\":\"text\",\"mime\":\"text/plain\",\"content\":\"{}\"}}]}}",
                "x".repeat(n)
            )),
    }
}

async fn start_hook(script: Vec<Answer>) -> (Arc<Hook>, String) {
    let hook = Arc::new(Hook {
        script: Mutex::new(script.into()),
        ..Hook::default()
    });
    let url = serve_route!(hook.clone(), post, "/hook", handle);
    (hook, url)
}

pub(crate) async fn with_hook(
    engine: Engine,
    url: &str,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> TestApp {
    let url = url.to_owned();
    spawn_app(engine, move |c, _| {
        c.agents.push(AgentConfig {
            activitypub: None,
            access: None,
            name: "hook".into(),
            display_name: None,
            summary: None,
            backend: BackendConfig::Webhook {
                url,
                secret: Secret::new(SECRET),
                timeout_ms: 400,
                assembled: false,
            },
            a2a: None,
            email: None,
            notify: Vec::new(),
        });
        tweak(c);
    })
    .await
}

fn text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| {
            if let Part::Text(t) = p {
                Some(t.content.clone())
            } else {
                None
            }
        })
        .collect()
}

async fn answers_json_sse_and_204(engine: Engine) {
    let sse = [
        r#"data: {"type":"delta","text":"Hel"}"#,
        "",
        r#"data: {"type":"part","part":{"kind":"tool_call","id":"c1","name":"search","args":{}}}"#,
        "",
        r#"data: {"type":"part","part":{"kind":"tool_call","id":"c1","name":"search","args":{},"result":[1]}}"#,
        "",
        r#"data: {"type":"delta","text":"lo"}"#,
        "",
        r#"data: {"type":"done","response":{"state":"input_required"}}"#,
        "",
        "",
    ]
    .join("\n");
    let (hook, url) = start_hook(vec![
        Answer::Json(json!({"parts": [{"kind": "text", "mime": "text/markdown", "content": "**json**"}], "metadata": {"m": 1}})),
        Answer::Sse(sse),
        Answer::Status(204),
    ])
    .await;
    let mut t = with_hook(engine, &url, |_| {}).await;
    let to = t.agent("hook");
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        t.ingest(key, message(&to, &format!("thread-{key}"), "hi"))
            .await;
        wait_for(20, "webhook call", || async {
            (hook.calls.lock().unwrap().len() == i + 1).then_some(())
        })
        .await;
    }
    wait_for(20, "two deliveries", || async {
        (t.transport.count() == 2).then_some(())
    })
    .await;
    let calls = hook.calls.lock().unwrap().clone();
    assert!(
        calls.iter().all(|(signed, _)| *signed),
        "every call carries a valid HMAC signature"
    );
    let d = t.transport.delivered();
    let by_original = |key: &str| {
        d.iter()
            .find(|x| x.original.raw["id"] == format!("thread-{key}"))
            .unwrap()
            .response
            .clone()
    };
    let a = by_original("a");
    assert_eq!(text(&a.parts), "**json**");
    assert_eq!(a.metadata.unwrap()["m"], 1);
    let b = by_original("b");
    assert_eq!(b.state.unwrap().as_str(), "input_required");
    assert_eq!(
        b.parts.len(),
        3,
        "text, the tool call (updated in place), more text"
    );
    assert_eq!(text(&b.parts[..1]), "Hel");
    assert!(matches!(&b.parts[1], Part::ToolCall(c) if c.result.is_some()));
    let db = t.open_db().await;
    wait_for(20, "jobs done", || async {
        let s = job_states(&db).await;
        (s.get("done") == Some(&5) && s.len() == 1).then_some(())
    })
    .await;
    t.stop().await;
}
on_both_engines!(answers_json_sse_and_204);

/// Runs one failure scenario and returns the final dispatch job and the number of calls.
async fn scenario(engine: Engine, script: Vec<Answer>, state: &str) -> (jobs::JobInfo, usize, u64) {
    let (hook, url) = start_hook(script).await;
    let mut t = with_hook(engine, &url, |c| c.net.max_body_bytes = 4096).await;
    t.ingest("f-1", message(&t.agent("hook"), "k", "hi")).await;
    let db = t.open_db().await;
    let job = wait_for(30, state, || async {
        jobs::list(&db, Some(state), Some("dispatch"), 1)
            .await
            .unwrap()
            .pop()
    })
    .await;
    let calls = hook.calls.lock().unwrap().len();
    if state == "done" {
        wait_for(20, "delivery", || async {
            (t.transport.count() == 1).then_some(())
        })
        .await;
    }
    let delivered = t.transport.count();
    t.stop().await;
    (job, calls, delivered)
}

async fn webhook_timeout_is_retried(engine: Engine) {
    let (job, calls, delivered) = scenario(
        engine,
        vec![
            Answer::Slow(Duration::from_secs(3)),
            Answer::Json(
                json!({"parts": [{"kind": "text", "mime": "text/plain", "content": "ok"}]}),
            ),
        ],
        "done",
    )
    .await;
    assert_eq!((job.attempts, calls, delivered), (2, 2, 1));
}
on_both_engines!(webhook_timeout_is_retried);

async fn webhook_500_then_success(engine: Engine) {
    let (job, calls, delivered) = scenario(
        engine,
        vec![
            Answer::Status(500),
            Answer::Status(503),
            Answer::Json(
                json!({"parts": [{"kind": "text", "mime": "text/plain", "content": "ok"}]}),
            ),
        ],
        "done",
    )
    .await;
    assert_eq!((job.attempts, calls, delivered), (3, 3, 1));
}
on_both_engines!(webhook_500_then_success);

async fn webhook_400_is_permanent(engine: Engine) {
    let (job, calls, delivered) = scenario(engine, vec![Answer::Status(400)], "dead").await;
    assert_eq!((job.attempts, calls, delivered), (1, 1, 0));
    assert!(job.last_error.unwrap().contains("HTTP 400"));
}
on_both_engines!(webhook_400_is_permanent);

async fn webhook_oversized_answer_is_refused(engine: Engine) {
    let (job, calls, delivered) = scenario(engine, vec![Answer::Big(10_000)], "dead").await;
    assert_eq!((job.attempts, calls, delivered), (1, 1, 0));
    assert!(job.last_error.unwrap().contains("over 4096 bytes"));
}
on_both_engines!(webhook_oversized_answer_is_refused);

async fn webhook_malformed_answer_is_permanent(engine: Engine) {
    let (job, _, delivered) =
        scenario(engine, vec![Answer::Json(json!({"parts": "nope"}))], "dead").await;
    assert_eq!(delivered, 0);
    assert!(job.last_error.unwrap().contains("not a NormalizedResponse"));
}
on_both_engines!(webhook_malformed_answer_is_permanent);

async fn webhook_to_a_private_address_is_refused(engine: Engine) {
    let (hook, url) = start_hook(vec![Answer::Json(json!({"parts": []}))]).await;
    // The development switch is off: plain http, a loopback literal and localhost are refused
    // before any connection is made (names resolving to private addresses: see net::guard's
    // resolver test).
    let cases = [
        (url.clone(), "plain http"),
        (url.replace("http://", "https://"), "127.0.0.1"),
        (
            url.replace("http://127.0.0.1", "https://localhost"),
            "localhost",
        ),
        (
            url.replace("http://127.0.0.1", "https://[::ffff:7f00:1]"),
            "::ffff:127.0.0.1",
        ),
    ];
    for (i, (target, why)) in cases.iter().enumerate() {
        let mut t = with_hook(engine, target, |c| c.net.allow_private_addresses = false).await;
        t.ingest(&format!("s-{i}"), message(&t.agent("hook"), "k", "hi"))
            .await;
        let db = t.open_db().await;
        let job = wait_for(20, "dead job", || async {
            jobs::list(&db, Some("dead"), None, 1).await.unwrap().pop()
        })
        .await;
        let err = job.last_error.unwrap();
        assert!(err.contains("SSRF") && err.contains(why), "{target}: {err}");
        assert_eq!(job.attempts, 1, "refusals are permanent");
        t.stop().await;
    }
    assert!(
        hook.calls.lock().unwrap().is_empty(),
        "no request reached the target"
    );
}
on_both_engines!(webhook_to_a_private_address_is_refused);

async fn webhook_retry_after_is_honoured(engine: Engine) {
    let (hook, url) = start_hook(vec![Answer::RetryAfter(3)]).await;
    let mut t = with_hook(engine, &url, |c| c.queue.backoff_max_ms = 60_000).await;
    t.ingest("ra-1", message(&t.agent("hook"), "k", "hi")).await;
    let db = t.open_db().await;
    let job = wait_for(20, "the job back in the queue", || async {
        jobs::list(&db, Some("ready"), Some("dispatch"), 1)
            .await
            .unwrap()
            .pop()
            .filter(|j| j.attempts == 1)
    })
    .await;
    assert!(job.last_error.as_deref().unwrap().contains("HTTP 429"));
    // Backoff alone would retry after 25-75 ms in this configuration; the peer asked for 3 s.
    assert!(
        job.run_at - job.updated_at >= 3_000,
        "run_at {} updated_at {}",
        job.run_at,
        job.updated_at
    );
    assert_eq!(hook.calls.lock().unwrap().len(), 1);
    t.stop().await;
}
on_both_engines!(webhook_retry_after_is_honoured);

/// Every call carries an `Idempotency-Key`: the dispatch job's stable id, the same on the retry
/// after a failed attempt, so the agent can tell a repeat from a new message.
async fn webhook_idempotency_key_is_stable_across_retries(engine: Engine) {
    let (hook, url) = start_hook(vec![
        Answer::Status(503),
        Answer::Json(json!({"parts": [{"kind": "text", "mime": "text/plain", "content": "ok"}]})),
    ])
    .await;
    let mut t = with_hook(engine, &url, |_| {}).await;
    t.ingest("idem-1", message(&t.agent("hook"), "k", "hi"))
        .await;
    let db = t.open_db().await;
    let job = wait_for(20, "the dispatch done", || async {
        jobs::list(&db, Some("done"), Some("dispatch"), 1)
            .await
            .unwrap()
            .pop()
    })
    .await;
    let raw = hook.raw.lock().unwrap().clone();
    assert_eq!(raw.len(), 2, "one failed attempt, one retry");
    let keys: Vec<Option<String>> = raw.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, [Some(job.id.clone()), Some(job.id.clone())]);
    assert_eq!(
        job.id,
        format!("dispatch:{}", raw[0].1["id"].as_str().unwrap())
    );
    assert!(
        raw[0].1.get("messages").is_none(),
        "no assembled prompt unless asked for"
    );
    t.stop().await;
}
on_both_engines!(webhook_idempotency_key_is_stable_across_retries);

/// `assembled = true`: the prompt switchboard assembles goes beside the NormalizedMessage, as
/// an OpenAI-style `messages` array with the sender attributed.
async fn webhook_assembled_prompt(engine: Engine) {
    let (hook, url) = start_hook(vec![Answer::Status(204)]).await;
    let mut t = with_hook(engine, &url, |c| {
        if let Some(BackendConfig::Webhook { assembled, .. }) =
            c.agents.last_mut().map(|a| &mut a.backend)
        {
            *assembled = true;
        }
    })
    .await;
    let msg = message(&t.agent("hook"), "k", "what is the time?");
    let sender = msg.sender.clone();
    t.ingest("asm-1", msg).await;
    wait_for(20, "the call", || async {
        (!hook.raw.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let (_, body) = hook.raw.lock().unwrap()[0].clone();
    let name = sender.display_name.unwrap_or(sender.address);
    let content = body["messages"][0]["content"].as_str().unwrap();
    assert_eq!(body["messages"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["messages"][0]["role"], "user");
    assert!(
        content.starts_with(&format!("[{name}")) && content.ends_with("]: what is the time?"),
        "{content}"
    );
    assert_eq!(
        body["parts"][0]["content"], "what is the time?",
        "the message itself is unchanged"
    );
    let (signed, received) = hook.calls.lock().unwrap()[0].clone();
    assert!(signed, "the signature covers the body with the prompt");
    assert_eq!(
        serde_json::to_value(switchboard::agents::assembly::assemble(&received, None)).unwrap(),
        body["messages"]
    );
    t.stop().await;
}
on_both_engines!(webhook_assembled_prompt);
