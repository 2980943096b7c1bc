//! The A2A transport over real HTTP: cards, JSON-RPC 1.0 and 0.3, durable tasks, streams with
//! replay, bad input, and interop with the a2a-sdk (Python) and @a2a-js/sdk clients.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app, wait_for};

/// Posts one JSON-RPC call with `A2A-Version: 1.0` and returns the parsed response body.
async fn rpc(t: &TestApp, path: &str, method: &str, params: Value) -> Value {
    rpc_with(t, path, method, params, &[("A2A-Version", "1.0")]).await
}

async fn rpc_with(
    t: &TestApp,
    path: &str,
    method: &str,
    params: Value,
    headers: &[(&str, &str)],
) -> Value {
    let mut r = t
        .http
        .post(format!("{}{path}", t.base))
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

fn user_message(text: &str) -> Value {
    json!({
        "messageId": uuid::Uuid::now_v7().to_string(),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    })
}

fn texts(task: &Value) -> Vec<String> {
    task["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

/// Reads an SSE body into `(id, data)` pairs.
fn sse_events(body: &str) -> Vec<(Option<i64>, Value)> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let mut id = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                assert!(data.is_none(), "one data line per event");
                data = Some(serde_json::from_str::<Value>(v).unwrap());
            }
        }
        if let Some(d) = data {
            out.push((id, d));
        }
    }
    out
}

async fn cards_have_fields_and_validators(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    let r = t
        .http
        .get(format!("{}/.well-known/agent-card.json", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cache = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(cache.contains("max-age="), "{cache}");
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert!(r.headers().contains_key("last-modified"));
    let card: Value = r.json().await.unwrap();
    for field in [
        "name",
        "description",
        "supportedInterfaces",
        "version",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ] {
        assert!(card.get(field).is_some(), "hub card lacks {field}");
    }
    let iface = &card["supportedInterfaces"][0];
    assert_eq!(iface["protocolBinding"], "JSONRPC");
    assert_eq!(iface["protocolVersion"], "1.0");
    assert_eq!(iface["url"], format!("{}/a2a", t.base));
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["skills"][0]["id"], "echo");

    let again = t
        .http
        .get(format!("{}/.well-known/agent-card.json", t.base))
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    for path in [
        "/agents/echo/agent-card.json",
        "/.well-known/agent-card/echo",
    ] {
        let card: Value = t
            .http
            .get(format!("{}{path}", t.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            card["supportedInterfaces"][0]["url"],
            format!("{}/agents/echo/a2a", t.base)
        );
        assert!(!card["skills"].as_array().unwrap().is_empty());
    }
    let missing = t
        .http
        .get(format!("{}/agents/nobody/agent-card.json", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
on_both_engines!(cards_have_fields_and_validators);

/// Cards answer HEAD, refuse other methods with 405 and `Allow`, compare entity tags weakly,
/// honour `If-Modified-Since`, and date their content: `Last-Modified` is when the content
/// first appeared, the same across restarts, and moves only when the card changes.
async fn cards_are_cacheable_http_resources(engine: Engine) {
    use switchboard::clock::ManualClock;
    let day = 86_400_000;
    let start = |db, clock: std::sync::Arc<ManualClock>, summary: &'static str| {
        crate::helpers::spawn_on(db, move |c, o| {
            c.server.public_url = Some("http://cards.test".into());
            c.agents[0].summary = Some(summary.into());
            o.clock = clock;
        })
    };
    let first = 1_780_000_000_000;
    let mut t = start(
        crate::helpers::fresh_db(engine).await,
        ManualClock::new(first),
        "Echoes.",
    )
    .await;
    let url = format!("{}/agents/echo/agent-card.json", t.base);
    let get = |t: &TestApp, h: Option<(&'static str, String)>| {
        let mut r = t.http.get(&url);
        if let Some((k, v)) = h {
            r = r.header(k, v);
        }
        r.send()
    };
    let r = get(&t, None).await.unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let modified = r.headers()["last-modified"].to_str().unwrap().to_owned();
    assert_eq!(modified, "Thu, 28 May 2026 20:26:40 GMT");
    let length = r.headers()["content-length"].to_str().unwrap().to_owned();

    let head = t.http.head(&url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["etag"].to_str().unwrap(), etag);
    assert_eq!(head.headers()["content-length"].to_str().unwrap(), length);
    assert!(head.bytes().await.unwrap().is_empty(), "HEAD has no body");

    for method in [
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let r = t.http.request(method.clone(), &url).send().await.unwrap();
        assert_eq!(r.status(), 405, "{method}");
        assert_eq!(r.headers()["allow"].to_str().unwrap(), "GET, HEAD");
    }

    let weak = format!("W/{etag}");
    let r = get(&t, Some(("If-None-Match", weak))).await.unwrap();
    assert_eq!(r.status(), 304, "a weak tag matches its strong twin");
    let r = get(&t, Some(("If-None-Match", "\"other\"".into())))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = get(&t, Some(("If-Modified-Since", modified.clone())))
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    let r = get(
        &t,
        Some(("If-Modified-Since", "Fri, 01 May 2026 00:00:00 GMT".into())),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);

    // A day later, the same card: the same date. Another summary: a new date and tag.
    t.stop().await;
    let db = t.db.take();
    let mut t = start(db, ManualClock::new(first + day), "Echoes.").await;
    let url = format!("{}/agents/echo/agent-card.json", t.base);
    let r = t.http.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["last-modified"].to_str().unwrap(), modified);
    assert_eq!(r.headers()["etag"].to_str().unwrap(), etag);
    t.stop().await;
    let db = t.db.take();
    let mut t = start(db, ManualClock::new(first + 2 * day), "Says it back.").await;
    let url = format!("{}/agents/echo/agent-card.json", t.base);
    let r = t.http.get(&url).send().await.unwrap();
    assert_eq!(
        r.headers()["last-modified"].to_str().unwrap(),
        "Sat, 30 May 2026 20:26:40 GMT"
    );
    assert_ne!(r.headers()["etag"].to_str().unwrap(), etag);
    t.stop().await;
}

on_both_engines!(cards_are_cacheable_http_resources);

async fn send_get_list_cancel(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    // Blocking send: the echo agent's answer is an artifact of the completed task.
    let r = rpc(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("hello there")}),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
    assert_eq!(texts(task), ["hello there"]);
    let ts = task["status"]["timestamp"].as_str().unwrap();
    assert!(ts.ends_with('Z') && ts.len() == 24, "{ts}");
    let (id, ctx) = (
        task["id"].as_str().unwrap(),
        task["contextId"].as_str().unwrap(),
    );
    assert_eq!(task["history"][0]["role"], "ROLE_USER");

    // GetTask, with and without history.
    let got = rpc(
        &t,
        "/a2a/",
        "GetTask",
        json!({"id": id, "historyLength": 0}),
    )
    .await;
    assert_eq!(got["result"]["id"], id);
    assert!(got["result"].get("history").is_none());
    let unknown = rpc(&t, "/a2a", "GetTask", json!({"id": "nope"})).await;
    assert_eq!(unknown["error"]["code"], -32001);
    assert_eq!(unknown["error"]["data"][0]["reason"], "TASK_NOT_FOUND");

    // A second task in the same context, returned immediately.
    let mut m = user_message("second");
    m["contextId"] = json!(ctx);
    let r2 = rpc(
        &t,
        "/agents/echo/a2a",
        "SendMessage",
        json!({"message": m, "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id2 = r2["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(r2["result"]["task"]["contextId"], ctx);
    wait_for(10, "the second task to complete", || async {
        let g = rpc(&t, "/a2a", "GetTask", json!({"id": id2})).await;
        (g["result"]["status"]["state"] == "TASK_STATE_COMPLETED").then_some(())
    })
    .await;

    // ListTasks: newest first, paginated, artifacts omitted unless asked. An anonymous caller
    // lists the context it holds.
    let page1 = rpc(
        &t,
        "/a2a",
        "ListTasks",
        json!({"pageSize": 1, "contextId": ctx}),
    )
    .await;
    let p = &page1["result"];
    assert_eq!(p["totalSize"], 2);
    assert_eq!(p["tasks"][0]["id"], id2.as_str());
    assert!(p["tasks"][0].get("artifacts").is_none());
    let token = p["nextPageToken"].as_str().unwrap();
    assert!(!token.is_empty());
    let page2 = rpc(
        &t,
        "/a2a",
        "ListTasks",
        json!({"pageSize": 1, "pageToken": token, "includeArtifacts": true, "contextId": ctx}),
    )
    .await;
    assert_eq!(page2["result"]["tasks"][0]["id"], id);
    assert_eq!(page2["result"]["nextPageToken"], "");
    assert_eq!(texts(&page2["result"]["tasks"][0]), ["hello there"]);
    let filtered = rpc(&t, "/a2a", "ListTasks", json!({"contextId": "other"})).await;
    assert_eq!(filtered["result"]["totalSize"], 0);

    // Cancel: a completed task cannot be canceled; a follow-up to it is refused.
    let c = rpc(&t, "/a2a", "CancelTask", json!({"id": id})).await;
    assert_eq!(c["error"]["code"], -32002);
    let mut follow = user_message("more");
    follow["taskId"] = json!(id);
    let f = rpc(&t, "/a2a", "SendMessage", json!({"message": follow})).await;
    assert_eq!(f["error"]["code"], -32004);
    let mut unknown_task = user_message("more");
    unknown_task["taskId"] = json!("no-such-task");
    let f = rpc(&t, "/a2a", "SendMessage", json!({"message": unknown_task})).await;
    assert_eq!(f["error"]["code"], -32001);
}
on_both_engines!(send_get_list_cancel);

async fn streams_replay_and_survive_restart(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let resp = t
        .http
        .post(format!("{}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc":"2.0","id":"s1","method":"SendStreamingMessage",
            "params":{"message": user_message("stream me")}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let events = sse_events(&resp.text().await.unwrap());
    let kinds: Vec<&str> = events
        .iter()
        .map(|(_, e)| {
            let r = e["result"].as_object().unwrap();
            r.keys().next().unwrap().as_str()
        })
        .collect();
    assert_eq!(
        kinds,
        ["task", "statusUpdate", "artifactUpdate", "statusUpdate"],
        "{events:?}"
    );
    assert_eq!(events[0].1["id"], "s1");
    assert_eq!(
        events[1].1["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(
        events[3].1["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let seqs: Vec<i64> = events.iter().map(|(id, _)| id.unwrap()).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    let task_id = events[0].1["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Subscribing to a finished task is refused, but a reconnect with Last-Event-ID replays
    // what was missed.
    let sub = rpc(&t, "/a2a", "SubscribeToTask", json!({"id": task_id})).await;
    assert_eq!(sub["error"]["code"], -32004);
    let replay = t
        .http
        .post(format!("{}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .header("Last-Event-ID", "1")
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"SubscribeToTask","params":{"id": task_id}}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let replayed = sse_events(&replay);
    assert_eq!(replayed.len(), 2, "{replay}");
    assert_eq!(replayed[0].0, Some(2));
    assert!(replayed[0].1["result"]["artifactUpdate"].is_object());

    // The task outlives a restart.
    let db = t.db.take();
    t.stop().await;
    let t2 = crate::helpers::spawn_on(db, |_, _| {}).await;
    let got = rpc(&t2, "/a2a", "GetTask", json!({"id": task_id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(texts(&got["result"]), ["stream me"]);
}
on_both_engines!(streams_replay_and_survive_restart);

async fn legacy_03_and_versions(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    // 0.3: slash names, kind discriminators, lowercase states, bare results.
    let r = rpc_with(
        &t,
        "/a2a",
        "message/send",
        json!({"message": {"kind":"message","role":"user","messageId":"old-1",
            "parts":[{"kind":"text","text":"from 0.3"}]}}),
        &[],
    )
    .await;
    let task = &r["result"];
    assert_eq!(task["kind"], "task", "{r}");
    assert_eq!(task["status"]["state"], "completed");
    assert_eq!(
        task["artifacts"][0]["parts"][0],
        json!({"kind":"text","text":"from 0.3"})
    );
    let got = rpc_with(&t, "/a2a", "tasks/get", json!({"id": task["id"]}), &[]).await;
    assert_eq!(got["result"]["kind"], "task");

    // No version header means 0.3, which has no SendMessage; an unknown version is refused.
    let r = rpc_with(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("x")}),
        &[],
    )
    .await;
    assert_eq!(r["error"]["code"], -32009);
    let r = rpc_with(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("x")}),
        &[("A2A-Version", "99.0")],
    )
    .await;
    assert_eq!(r["error"]["code"], -32009);
    assert_eq!(r["error"]["data"][0]["reason"], "VERSION_NOT_SUPPORTED");
    // Asking for 0.3 by name is the same as asking for nothing: no SendMessage there.
    let r = rpc_with(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("x")}),
        &[("A2A-Version", "0.3")],
    )
    .await;
    assert_eq!(r["error"]["code"], -32009, "{r}");
    // A 1.0 client may still call a legacy method name, answered in 0.3's shape.
    let r = rpc_with(
        &t,
        "/a2a",
        "message/send",
        json!({"message": {"kind": "message", "messageId": uuid::Uuid::now_v7().to_string(),
            "role": "user", "parts": [{"kind": "text", "text": "x"}]}}),
        &[("A2A-Version", "1.0")],
    )
    .await;
    assert_eq!(r["result"]["kind"], "task", "{r}");
    // Extensions are accepted.
    let r = rpc_with(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("x")}),
        &[
            ("A2A-Version", "1.0"),
            ("A2A-Extensions", "https://example.com/ext/v1"),
        ],
    )
    .await;
    assert_eq!(
        r["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}
on_both_engines!(legacy_03_and_versions);

async fn bad_input_gets_the_right_codes(engine: Engine) {
    let t = spawn_app(engine, |c, _| c.server.max_body_bytes = 64 * 1024).await;
    let raw = |body: String| {
        t.http
            .post(format!("{}/a2a", t.base))
            .header("A2A-Version", "1.0")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let code = |v: Value| v["error"]["code"].as_i64().unwrap();
    let parse: Value = raw("{not json".into()).await.unwrap().json().await.unwrap();
    assert_eq!(code(parse), -32700);
    for bad in [
        json!([]),
        json!({"jsonrpc":"1.0","id":1,"method":"GetTask"}),
        json!({"jsonrpc":"2.0","id":1}),
        json!({"jsonrpc":"2.0","id":{"x":1},"method":"GetTask"}),
        json!({"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}),
    ] {
        let v: Value = raw(bad.to_string()).await.unwrap().json().await.unwrap();
        assert_eq!(code(v), -32600, "{bad}");
    }
    let v = rpc(&t, "/a2a", "message.send", json!({})).await;
    assert_eq!(code(v), -32601);
    let v = rpc(&t, "/a2a", "SendMessage", json!({})).await;
    assert_eq!(code(v.clone()), -32602);
    assert_eq!(
        v["error"]["data"][1]["fieldViolations"][0]["field"],
        "message"
    );
    let mut no_id = user_message("x");
    no_id.as_object_mut().unwrap().remove("messageId");
    let v = rpc(&t, "/a2a", "SendMessage", json!({"message": no_id})).await;
    assert_eq!(
        v["error"]["data"][1]["fieldViolations"][0]["field"],
        "message.messageId"
    );
    let mut bad_b64 = user_message("x");
    bad_b64["parts"] = json!([{"raw": "@@not base64@@"}]);
    let v = rpc(&t, "/a2a", "SendMessage", json!({"message": bad_b64})).await;
    assert_eq!(
        v["error"]["data"][1]["fieldViolations"][0]["field"],
        "message.parts[0].raw"
    );
    let mut many = user_message("x");
    many["parts"] = json!(vec![json!({"text": "p"}); 65]);
    let v = rpc(&t, "/a2a", "SendMessage", json!({"message": many})).await;
    assert_eq!(code(v), -32602);
    let mut two = user_message("x");
    two["parts"] = json!([{"text": "a", "data": {}}]);
    let v = rpc(&t, "/a2a", "SendMessage", json!({"message": two})).await;
    assert_eq!(code(v), -32602);
    let v = rpc(&t, "/a2a", "ListTasks", json!({"pageSize": 0})).await;
    assert_eq!(code(v), -32602);
    let v = rpc(&t, "/a2a", "ListTasks", json!({"pageToken": "garbage!"})).await;
    assert_eq!(code(v), -32602);
    // Oversized body and a huge part.
    let huge = json!({"jsonrpc":"2.0","id":1,"method":"SendMessage",
        "params":{"message": user_message(&"y".repeat(70 * 1024))}});
    let v: Value = raw(huge.to_string()).await.unwrap().json().await.unwrap();
    assert_eq!(code(v), -32602);
    // No task was created by any of it.
    let v = rpc(&t, "/a2a", "ListTasks", json!({})).await;
    assert_eq!(v["result"]["totalSize"], 0);
}
on_both_engines!(bad_input_gets_the_right_codes);

async fn hub_routes_by_handle_and_context(engine: Engine) {
    let t = spawn_app(engine, |_, o| {
        o.agents.push((
            "other".into(),
            std::sync::Arc::new(crate::helpers::RecordingAgent::default()),
        ));
    })
    .await;
    let r = rpc(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("@other hi")}),
    )
    .await;
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    let ctx = task["contextId"].clone();
    // The task is visible at the hub and at its agent's endpoint, not at another agent's.
    let id = task["id"].clone();
    let at_other = rpc(&t, "/agents/other/a2a", "GetTask", json!({"id": id})).await;
    assert_eq!(at_other["result"]["id"], id);
    let at_echo = rpc(&t, "/agents/echo/a2a", "GetTask", json!({"id": id})).await;
    assert_eq!(at_echo["error"]["code"], -32001);
    // A follow-up in the same context stays with that agent.
    let mut m = user_message("again");
    m["contextId"] = ctx;
    let r = rpc(&t, "/a2a", "SendMessage", json!({"message": m})).await;
    let id2 = r["result"]["task"]["id"].clone();
    let at_other = rpc(&t, "/agents/other/a2a", "GetTask", json!({"id": id2})).await;
    assert_eq!(at_other["result"]["id"], id2);
}
on_both_engines!(hub_routes_by_handle_and_context);

/// With `server.handle_domain`, a lead `@name@domain` names the agent under the handle domain
/// and under the server's own host alike; another domain falls to the default agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_routes_a_handle_on_either_domain() {
    let t = spawn_app(Engine::Sqlite, |c, o| {
        c.server.handle_domain = Some("example.com".into());
        o.agents.push((
            "other".into(),
            std::sync::Arc::new(crate::helpers::RecordingAgent::default()),
        ));
    })
    .await;
    let host = t.domain();
    for (lead, agent) in [
        ("@other@example.com".to_owned(), "other"),
        (format!("@other@{host}"), "other"),
        ("@other@elsewhere.example".to_owned(), "echo"),
    ] {
        let r = rpc(
            &t,
            "/a2a",
            "SendMessage",
            json!({"message": user_message(&format!("{lead} hi"))}),
        )
        .await;
        let id = r["result"]["task"]["id"].clone();
        assert!(id.is_string(), "{r}");
        let at = rpc(
            &t,
            &format!("/agents/{agent}/a2a"),
            "GetTask",
            json!({"id": id}),
        )
        .await;
        assert_eq!(at["result"]["id"], id, "{lead} went to {agent}");
    }
}

async fn idempotency_key_and_resend(engine: Engine) {
    let t = spawn_app(engine, |_, o| {
        o.agents.push((
            "other".into(),
            std::sync::Arc::new(crate::helpers::RecordingAgent::default()),
        ));
    })
    .await;
    let m = user_message("once");
    let headers = [("A2A-Version", "1.0"), ("Idempotency-Key", "k-1")];
    let a = rpc_with(&t, "/a2a", "SendMessage", json!({"message": m}), &headers).await;
    // A retry (the same request with the same key) gets the task the first one started.
    let b = rpc_with(&t, "/a2a", "SendMessage", json!({"message": m}), &headers).await;
    assert_eq!(a["result"]["task"]["id"], b["result"]["task"]["id"]);
    // The same key with another request is an error, and starts nothing.
    let other = rpc_with(
        &t,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("twice")}),
        &headers,
    )
    .await;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    let ctx = a["result"]["task"]["contextId"].clone();
    let listed = rpc(&t, "/a2a", "ListTasks", json!({"contextId": ctx})).await;
    assert_eq!(listed["result"]["totalSize"], 1, "{listed}");
    // Keys are scoped per endpoint: the same key at another agent's endpoint is another key.
    let elsewhere = rpc_with(
        &t,
        "/agents/other/a2a",
        "SendMessage",
        json!({"message": user_message("twice")}),
        &headers,
    )
    .await;
    assert!(elsewhere["result"]["task"]["id"].is_string(), "{elsewhere}");
    assert_ne!(elsewhere["result"]["task"]["id"], a["result"]["task"]["id"]);
    // Without a key, the same messageId after the task finished starts a new task (the
    // conformance kit relies on this).
    let c = rpc(&t, "/a2a", "SendMessage", json!({"message": m})).await;
    assert_ne!(a["result"]["task"]["id"], c["result"]["task"]["id"]);
    let _ = Duration::from_millis(1);
}
on_both_engines!(idempotency_key_and_resend);

/// Answers like echo once the test opens its gate.
#[derive(Debug)]
pub struct GatedAgent {
    open: tokio::sync::Semaphore,
    seen: std::sync::atomic::AtomicUsize,
}

impl Default for GatedAgent {
    fn default() -> Self {
        Self {
            open: tokio::sync::Semaphore::new(0),
            seen: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for GatedAgent {
    async fn respond(
        &self,
        msg: &switchboard::message::NormalizedMessage,
    ) -> Result<Option<switchboard::message::NormalizedResponse>, switchboard::error::OutboundError>
    {
        self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.open.acquire().await.unwrap().forget();
        switchboard::agents::AgentBackend::respond(&switchboard::agents::EchoAgent, msg).await
    }
}

async fn a_resend_while_running_joins_its_task(engine: Engine) {
    let gate = std::sync::Arc::new(GatedAgent::default());
    let agent = std::sync::Arc::clone(&gate);
    let t = spawn_app(engine, move |_, o| o.agents.push(("slow".into(), agent))).await;
    let m = user_message("once");
    let send = || {
        rpc(
            &t,
            "/agents/slow/a2a",
            "SendMessage",
            json!({"message": m, "configuration": {"returnImmediately": true}}),
        )
    };
    // Two at once (one batch or two), then one more while the task still works.
    let (a, b) = tokio::join!(send(), send());
    let id = a["result"]["task"]["id"].clone();
    assert!(id.is_string(), "{a}");
    assert_eq!(b["result"]["task"]["id"], id, "{b}");
    let c = send().await;
    assert_eq!(c["result"]["task"]["id"], id, "{c}");
    gate.open.add_permits(8);
    wait_for(10, "the task to complete", || async {
        let g = rpc(&t, "/a2a", "GetTask", json!({"id": id})).await;
        (g["result"]["status"]["state"] == "TASK_STATE_COMPLETED").then_some(())
    })
    .await;
    let by_context = json!({"contextId": a["result"]["task"]["contextId"]});
    let all = rpc(&t, "/agents/slow/a2a", "ListTasks", by_context).await;
    assert_eq!(all["result"]["totalSize"], 1, "{all}");
    assert_eq!(gate.seen.load(std::sync::atomic::Ordering::SeqCst), 1);
}
on_both_engines!(a_resend_while_running_joins_its_task);

/// Many blocking sends at once, answered on several threads: each returns its completed task.
/// (The ordering rule this leans on, that a task remembered in memory is never replaced by an
/// older version, is unit-tested in `transports::a2a::tasks`: the race it guards against is too
/// narrow to show up here reliably.)
async fn concurrent_blocking_sends_all_complete(engine: Engine) {
    // 200 at once from one anonymous caller: past the built-in per-sender limit, which this
    // operator removes.
    let t = spawn_app(engine, |c, _| {
        c.a2a.blocking_timeout_ms = 5_000;
        c.limits.per_sender = Some(switchboard::config::Rate::OFF);
    })
    .await;
    let sends = (0..200).map(|i| {
        let t = &t;
        async move {
            let r = rpc(
                t,
                "/a2a",
                "SendMessage",
                json!({"message": user_message(&format!("n{i}"))}),
            )
            .await;
            (i, r)
        }
    });
    for (i, r) in futures_util::future::join_all(sends).await {
        let task = &r["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        assert_eq!(texts(task), vec![format!("n{i}")], "{r}");
    }
}
on_both_engines!(concurrent_blocking_sends_all_complete);

/// Answers like echo, but asks for input when a message contains "need input".
#[derive(Debug, Default)]
pub struct AskerAgent;

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for AskerAgent {
    async fn respond(
        &self,
        msg: &switchboard::message::NormalizedMessage,
    ) -> Result<Option<switchboard::message::NormalizedResponse>, switchboard::error::OutboundError>
    {
        let asks = msg.parts.iter().any(|p| {
            matches!(p, switchboard::message::Part::Text(t) if t.content.contains("need input"))
        });
        let mut resp =
            switchboard::agents::AgentBackend::respond(&switchboard::agents::EchoAgent, msg)
                .await?
                .unwrap();
        if asks {
            resp.parts = vec![switchboard::message::Part::text("what else?")];
            resp.state = Some(switchboard::message::ResponseState::InputRequired);
        }
        Ok(Some(resp))
    }
}

/// The interop peers, or `None` (with a note) when interop tests are off. With
/// `SWITCHBOARD_INTEROP=1` a missing peer is a failure.
fn peers() -> Option<(String, std::path::PathBuf)> {
    if !crate::helpers::interop("A2A") {
        return None;
    }
    let python = std::env::var("SWITCHBOARD_A2A_PYTHON")
        .expect("SWITCHBOARD_A2A_PYTHON (set by scripts/peers/a2a.sh)");
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing"
    );
    let nm = std::path::PathBuf::from(
        std::env::var("SWITCHBOARD_A2A_NODE_MODULES")
            .expect("SWITCHBOARD_A2A_NODE_MODULES (set by scripts/peers/a2a.sh)"),
    );
    assert!(
        nm.join("@a2a-js/sdk").exists(),
        "{} lacks @a2a-js/sdk",
        nm.display()
    );
    Some((python, nm))
}

fn peer_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/a2a")
}

/// Runs a peer script and parses the one JSON object it prints.
async fn run_peer(mut cmd: tokio::process::Command) -> Value {
    let what = format!("{:?}", cmd.as_std());
    cmd.kill_on_drop(true)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("peer starts");
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("peer finished within 120 s: {what}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "peer failed: {}: {what}\n{stdout}\n{stderr}",
        out.status,
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        panic!("peer printed no JSON ({e}): {what}\nstdout: {stdout}\nstderr: {stderr}")
    })
}

mod interop;
mod jwt;
mod push;

/// Two instances on one PostgreSQL database: a stream held by one instance receives the events
/// the other instance's workers write (LISTEN/NOTIFY, with the periodic re-read as a backstop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_follow_events_written_by_another_instance() {
    if crate::helpers::postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: A2A scale-out test skipped");
        return;
    }
    // A holds the client's connection and runs no workers; B does the work.
    let mut a = spawn_app(Engine::Postgres, |_, o| {
        o.workers = false;
        o.agents
            .push(("echo".into(), std::sync::Arc::new(AskerAgent)));
    })
    .await;
    let url = a.db.url.clone();
    let mut b = crate::helpers::spawn_on(crate::helpers::TestDb::url_only(url), |_, o| {
        o.agents
            .push(("echo".into(), std::sync::Arc::new(AskerAgent)));
    })
    .await;
    let resp = a
        .http
        .post(format!("{}/a2a", a.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage",
            "params":{"message": user_message("across instances")}}),
        )
        .send()
        .await
        .unwrap();
    let events = sse_events(&resp.text().await.unwrap());
    let last = &events.last().unwrap().1["result"];
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(_, e)| e["result"]["artifactUpdate"].is_object())
    );

    // A subscription on A ends when B cancels the task.
    let r = rpc(
        &a,
        "/a2a",
        "SendMessage",
        json!({"message": user_message("need input")}),
    )
    .await;
    let task_id = r["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        r["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    let sub = a
        .http
        .post(format!("{}/a2a", a.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"SubscribeToTask","params":{"id": task_id}}))
        .send()
        .await
        .unwrap();
    let c = rpc(&b, "/a2a", "CancelTask", json!({"id": task_id})).await;
    assert_eq!(c["result"]["status"]["state"], "TASK_STATE_CANCELED", "{c}");
    let events = sse_events(&sub.text().await.unwrap());
    assert!(events[0].1["result"]["task"].is_object());
    assert_eq!(
        events.last().unwrap().1["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    a.stop().await;
    b.stop().await;
}
