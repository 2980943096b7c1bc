//! The PolicyPart round trip: an agent asks (consent, sign-in, a kind nobody knows),
//! switchboard mints a single-use state bound to the agent, the thread and the sender, renders
//! the part per transport, and a later turn presenting the state reaches the agent as a
//! verified `policy_resolution` — once. Here through the landing page of a link (as email and
//! the fediverse carry it) and over A2A JSON-RPC, on both engines and across two instances;
//! the email (swaks) and ActivityPub (Fedify) legs are with those transports' suites, the
//! a2a-sdk leg with the A2A interop suite.

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard::clock::ManualClock;
use switchboard::message::Part;

use crate::helpers::{
    Engine, PolicyAgent, TestApp, message, on_both_engines, spawn_app, spawn_on, wait_for,
};

const DAY_MS: i64 = 86_400_000;

fn now_ms() -> i64 {
    use switchboard::clock::Clock as _;
    switchboard::clock::SystemClock.now_ms()
}

/// The landing link of the `n`th delivery of the memory transport (1-based), once delivered.
async fn landing_link(t: &TestApp, n: usize) -> (Vec<Part>, String) {
    let d = wait_for(30, &format!("delivery {n}"), || async {
        t.transport.delivered().get(n - 1).cloned()
    })
    .await;
    let link = d
        .response
        .parts
        .iter()
        .find_map(|p| match p {
            Part::Link(l) => Some(l.url.clone()),
            _ => None,
        })
        .expect("a landing link");
    (d.response.parts, link)
}

/// `method` on the landing page of `state`.
async fn landing(t: &TestApp, method: reqwest::Method, state: &str) -> reqwest::Response {
    t.http
        .request(method, format!("{}/policy/{state}", t.base))
        .send()
        .await
        .unwrap()
}

fn metric(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

on_both_engines!(a_link_resolves_once_and_only_when_its_button_is_pressed);
async fn a_link_resolves_once_and_only_when_its_button_is_pressed(engine: Engine) {
    let agent = Arc::new(PolicyAgent::default());
    let clock = ManualClock::new(now_ms());
    let (a, c) = (agent.clone(), clock.clone());
    let t = spawn_app(engine, move |cfg, o| {
        cfg.server.public_url = Some("https://sb.example".into());
        o.clock = c;
        o.agents.push(("bot".into(), a));
    })
    .await;
    let bot = t.agent("bot");

    // The agent asks for consent: the transport gets its text and a link, never the raw part.
    t.ingest("m1", message(&bot, "thread-1", "need consent please"))
        .await;
    let (parts, link) = landing_link(&t, 1).await;
    assert!(
        parts.iter().all(|p| !matches!(p, Part::Policy(_))),
        "{parts:?}"
    );
    assert!(
        matches!(&parts[0], Part::Text(x) if x.content == "Consent needed\n\nMay I keep your address to write back later?"),
        "{parts:?}"
    );
    let state = link
        .strip_prefix("https://sb.example/policy/")
        .expect("the link is on the public URL")
        .to_owned();
    assert_eq!(state.len(), 43);
    assert_ne!(state, "chosen-by-the-agent");
    let stored = t.transport.delivered()[0].clone();
    assert_eq!(
        stored.response.state.as_ref().map(|s| s.as_str()),
        Some("input_required"),
        "a policy part is never success"
    );
    use reqwest::Method;

    // Fetching the page (as a mail scanner would) shows the request and resolves nothing.
    for _ in 0..2 {
        let r = landing(&t, Method::GET, &state).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["referrer-policy"], "no-referrer");
        assert_eq!(r.headers()["cache-control"], "no-store");
        let html = r.text().await.unwrap();
        assert!(html.contains("May I keep your address"), "{html}");
        assert!(html.contains("<form method=\"post\">"), "{html}");
        assert!(html.contains("Review and consent"), "{html}");
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(agent.seen().len(), 1, "GET resolved nothing");

    // Pressing the button stores a turn of the same thread, which the agent gets verified.
    let r = landing(&t, Method::POST, &state).await;
    assert_eq!(r.status(), 200);
    let resolved = agent.nth(2).await;
    let first = &agent.seen()[0];
    let res = resolved.policy_resolution.as_ref().expect("a resolution");
    assert!(res.verified);
    assert_eq!(res.kind.as_str(), "consent_required");
    assert_eq!(res.in_reply_to_state, state);
    assert_eq!(resolved.thread_id, first.thread_id, "the same thread");
    assert_eq!(
        resolved.sender, first.sender,
        "from the sender it was sent to"
    );
    assert!(
        resolved.history.as_ref().is_some_and(|h| h.len() >= 2),
        "the agent sees the conversation so far"
    );
    let (parts, _) = wait_for(30, "the answer to the resolution", || async {
        t.transport
            .delivered()
            .get(1)
            .map(|d| (d.response.parts.clone(), ()))
    })
    .await;
    assert!(
        matches!(&parts[0], Part::Text(x) if x.content == "resolved consent_required verified=true")
    );

    // Pressing it again stores nothing more; the page says it is done.
    let r = landing(&t, Method::POST, &state).await;
    assert_eq!(r.status(), 200);
    let r = landing(&t, Method::GET, &state).await;
    assert!(r.text().await.unwrap().contains("has been recorded"));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(agent.seen().len(), 2, "one resolution per state");

    // Unknown and tampered states are not found.
    for bad in [
        "A".repeat(43),
        format!("{}x", &state[..42]),
        "short".into(),
        "../../etc".into(),
    ] {
        let r = landing(&t, Method::POST, &bad).await;
        assert_eq!(r.status(), 404, "{bad}");
    }

    // A state past its lifetime is gone, on the page and on the button.
    t.ingest("m3", message(&bot, "thread-2", "need approval"))
        .await;
    let (_, link) = landing_link(&t, 3).await;
    let expired = link.rsplit('/').next().unwrap().to_owned();
    clock.advance_ms(DAY_MS + 1);
    for method in [Method::GET, Method::POST] {
        let r = landing(&t, method, &expired).await;
        assert_eq!(r.status(), 410);
        assert!(r.text().await.unwrap().contains("expired"));
    }
    // Once finished jobs would be deleted too, the expired state is purged: unknown now.
    clock.advance_ms(DAY_MS + 60_000);
    wait_for(30, "the expired state to be purged", || async {
        let r = landing(&t, Method::GET, &expired).await;
        (r.status() == 404).then_some(())
    })
    .await;
    // Terminal kinds get no state, so no link.
    t.ingest("m4", message(&bot, "thread-3", "not allowed"))
        .await;
    let d = wait_for(30, "delivery 4", || async {
        t.transport.delivered().get(3).cloned()
    })
    .await;
    assert!(
        d.response.parts.iter().all(|p| !matches!(p, Part::Link(_))),
        "{:?}",
        d.response.parts
    );
    assert_eq!(
        d.response.state.as_ref().map(|s| s.as_str()),
        Some("rejected")
    );
    assert_eq!(agent.seen().len(), 4);

    let m = t.metrics().await;
    assert_eq!(
        metric(&m, "switchboard_policy_states_total{outcome=\"minted\"}"),
        2.0
    );
    assert_eq!(
        metric(&m, "switchboard_policy_states_total{outcome=\"resolved\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "switchboard_policy_states_total{outcome=\"expired\"}"),
        1.0,
        "{m}"
    );
}

/// A JSON-RPC call to `agent`'s A2A endpoint on `t`.
async fn rpc(t: &TestApp, agent: &str, method: &str, params: Value) -> Value {
    t.http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Sends `text` (in task `task` when given, presenting `state` when given) and waits for the
/// task to stop working; returns the JSON-RPC answer when it is an error, else the task.
async fn turn(t: &TestApp, task: Option<(&str, &str)>, text: &str, state: Option<&str>) -> Value {
    let mut m = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                       "parts": [{"text": text}]});
    if let Some((id, ctx)) = task {
        m["taskId"] = json!(id);
        m["contextId"] = json!(ctx);
    }
    if let Some(s) = state {
        m["metadata"] = json!({ switchboard::policy::POLICY_EXTENSION: {"state": s} });
    }
    let r = rpc(t, "bot", "SendMessage", json!({"message": m})).await;
    if r.get("error").is_some() {
        return r;
    }
    r["result"]["task"].clone()
}

fn policy_part(task: &Value) -> Value {
    task["status"]["message"]["parts"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["data"]["type"] == "policy"))
        .map(|p| p["data"]["policy"].clone())
        .unwrap_or(Value::Null)
}

on_both_engines!(a2a_tasks_wait_on_a_policy_and_resume_with_its_state_once);
async fn a2a_tasks_wait_on_a_policy_and_resume_with_its_state_once(engine: Engine) {
    let agent = Arc::new(PolicyAgent::default());
    let a = agent.clone();
    let mut t = spawn_app(engine, move |_, o| {
        o.agents.push(("bot".into(), a));
    })
    .await;

    // The card advertises the extension.
    let card: Value = t
        .http
        .get(format!("{}/agents/bot/agent-card.json", t.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let exts = card["capabilities"]["extensions"].as_array().unwrap();
    assert!(
        exts.iter()
            .any(|e| e["uri"] == switchboard::policy::POLICY_EXTENSION),
        "{card}"
    );

    // Consent: the task waits for input with the policy data part and a fresh state.
    let asking = turn(&t, None, "need consent", None).await;
    assert_eq!(
        asking["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asking}"
    );
    let p = policy_part(&asking);
    assert_eq!(p["kind"], "consent_required");
    let state = p["state"].as_str().unwrap().to_owned();
    assert_ne!(state, "chosen-by-the-agent");
    let (id, ctx) = (
        asking["id"].as_str().unwrap().to_owned(),
        asking["contextId"].as_str().unwrap().to_owned(),
    );

    // Sign-in waits in auth-required; a kind nobody knows is never success; forbidden ends.
    let signin = turn(&t, None, "need sign-in", None).await;
    assert_eq!(
        signin["status"]["state"], "TASK_STATE_AUTH_REQUIRED",
        "{signin}"
    );
    let approval = turn(&t, None, "need approval", None).await;
    assert_eq!(approval["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(policy_part(&approval)["kind"], "x-approval");
    let refused = turn(&t, None, "not allowed", None).await;
    assert_eq!(
        refused["status"]["state"], "TASK_STATE_REJECTED",
        "{refused}"
    );
    assert!(policy_part(&refused).get("state").is_none(), "{refused}");

    // A state from another task (another thread) is foreign; an unknown one is refused; a
    // malformed extension value is a bad request. The task keeps waiting each time.
    let other_state = policy_part(&signin)["state"].as_str().unwrap().to_owned();
    for (bad, why) in [
        (json!({"state": other_state}), "foreign"),
        (json!({"state": "A".repeat(43)}), "unknown"),
    ] {
        let mut m = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                           "taskId": id, "contextId": ctx, "parts": [{"text": "ok"}]});
        m["metadata"] = json!({ switchboard::policy::POLICY_EXTENSION: bad });
        let r = rpc(&t, "bot", "SendMessage", json!({"message": m})).await;
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(why), "{r}");
    }
    let mut m = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                       "taskId": id, "contextId": ctx, "parts": [{"text": "ok"}]});
    m["metadata"] = json!({ switchboard::policy::POLICY_EXTENSION: "just a string" });
    let r = rpc(&t, "bot", "SendMessage", json!({"message": m})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let still: Value = rpc(&t, "bot", "GetTask", json!({"id": id})).await["result"].clone();
    assert_eq!(still["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(agent.seen().len(), 4, "no refused state reached the agent");

    // The right state resumes the task; the agent gets the resolution verified.
    let done = turn(&t, Some((&id, &ctx)), "yes, I agree", Some(&state)).await;
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    let got = agent.seen().last().cloned().unwrap();
    let res = got.policy_resolution.expect("a resolution");
    assert!(res.verified);
    assert_eq!(res.kind.as_str(), "consent_required");
    assert_eq!(res.in_reply_to_state, state);

    // The same state again, on a new task of the same context (the same thread) that asks
    // again: replayed — on a second instance sharing the database, and on this one.
    let m = json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                   "contextId": ctx, "parts": [{"text": "need consent again"}]});
    let again =
        rpc(&t, "bot", "SendMessage", json!({"message": m})).await["result"]["task"].clone();
    let again = wait_for(30, "the second task to ask", || async {
        let got = rpc(&t, "bot", "GetTask", json!({"id": again["id"]})).await["result"].clone();
        (got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED").then_some(got)
    })
    .await;
    assert_eq!(again["contextId"], ctx.as_str());
    let seen_before = agent.seen().len();
    let again_id = again["id"].as_str().unwrap().to_owned();
    let mut instances = vec![];
    if engine == Engine::Postgres {
        let b = Arc::new(PolicyAgent::default());
        let b2 = b.clone();
        let url = t.db.url.clone();
        let second = spawn_on(crate::helpers::TestDb::url_only(url), move |_, o| {
            o.agents.push(("bot".into(), b2));
        })
        .await;
        instances.push((second, Some(b)));
    }
    for (inst, _) in &instances {
        let r = turn(inst, Some((&again_id, &ctx)), "again", Some(&state)).await;
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("replayed"),
            "{r}"
        );
    }
    let r = turn(&t, Some((&again_id, &ctx)), "again", Some(&state)).await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("replayed"),
        "{r}"
    );
    assert_eq!(agent.seen().len(), seen_before);
    for (_, b) in &instances {
        assert!(b.as_ref().unwrap().seen().is_empty());
    }
    // Its own fresh state still works.
    let fresh = policy_part(&again)["state"].as_str().unwrap().to_owned();
    let done = turn(&t, Some((&again_id, &ctx)), "fine", Some(&fresh)).await;
    let done = wait_for(30, "the second task to complete", || async {
        let got = rpc(&t, "bot", "GetTask", json!({"id": done["id"]})).await["result"].clone();
        (got["status"]["state"] == "TASK_STATE_COMPLETED").then_some(got)
    })
    .await;
    assert_eq!(done["id"], again_id.as_str());
    let m = t.metrics().await;
    assert!(
        metric(&m, "switchboard_policy_states_total{outcome=\"replayed\"}") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "switchboard_policy_states_total{outcome=\"foreign\"}") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "switchboard_policy_states_total{outcome=\"unknown\"}") >= 1.0,
        "{m}"
    );
    t.stop().await;
}
