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
    cmd.kill_on_drop(true)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().expect("peer starts");
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("peer finished within 120 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "peer failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("peer printed no JSON ({e}): {stdout}"))
}

fn first_text(v: &Value) -> &str {
    v["parts"][0]["text"].as_str().unwrap_or_default()
}

async fn interop_python_and_js_clients(engine: Engine) {
    interop_clients(engine, None).await;
}
on_both_engines!(interop_python_and_js_clients);

/// The same conversation as `interop_python_and_js_clients`, each SDK told to pick the card's
/// HTTP+JSON interface.
#[tokio::test]
async fn interop_python_and_js_clients_over_http_json() {
    interop_clients(Engine::Sqlite, Some("HTTP+JSON")).await;
}

/// The SDK clients against switchboard, over the binding they prefer or over `binding`.
async fn interop_clients(engine: Engine, binding: Option<&str>) {
    let Some((python, node_modules)) = peers() else {
        return;
    };
    let t = spawn_app(engine, |_, o| {
        o.agents
            .push(("echo".into(), std::sync::Arc::new(AskerAgent)));
    })
    .await;

    // a2a-sdk 1.3.0 (Python).
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(peer_dir().join("client.py")).arg(&t.base);
    if let Some(b) = binding {
        cmd.env("A2A_BINDING", b);
    }
    let py = run_peer(cmd).await;
    let transport = if binding.is_some() {
        "RestTransport"
    } else {
        "JsonRpcTransport"
    };
    assert_eq!(py["transport"], transport, "{py}");
    assert_eq!(py["card"]["streaming"], true);
    assert_eq!(py["card"]["url"], format!("{}/a2a", t.base));
    assert_eq!(py["send"], json!(["task"]));
    assert_eq!(py["send_task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        first_text(&py["send_task"]["artifacts"][0]),
        "hello from python"
    );
    assert_eq!(
        py["stream"],
        json!(["task", "status_update", "artifact_update", "status_update"]),
        "{py}"
    );
    assert_eq!(
        py["stream_events"][3]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(py["get"]["id"], py["send_task"]["id"]);
    assert!(py["list"]["tasks"].as_array().unwrap().len() >= 2, "{py}");
    assert_eq!(py["asking"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(first_text(&py["asking"]["status"]["message"]), "what else?");
    assert_eq!(py["answered"]["id"], py["asking"]["id"]);
    assert_eq!(py["answered"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        first_text(&py["answered"]["artifacts"][0]),
        "here is the answer"
    );
    assert_eq!(
        py["subscribe_first"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    assert_eq!(py["cancel"]["status"]["state"], "TASK_STATE_CANCELED");
    let resub = py["resubscribed"].as_array().unwrap();
    assert!(resub[0].get("task").is_some(), "{py}");
    assert_eq!(
        resub.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert!(
        py["cancel_again"]
            .as_str()
            .unwrap()
            .contains("NotCancelable"),
        "{py}"
    );
    assert!(
        py["get_unknown"].as_str().unwrap().contains("NotFound"),
        "{py}"
    );

    // @a2a-js/sdk 1.3.0: ESM resolves packages from the script's directory, so the script runs
    // from beside the installed node_modules.
    let script = node_modules.parent().unwrap().join("client.mjs");
    std::fs::copy(peer_dir().join("client.mjs"), &script).unwrap();
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(&script).arg(&t.base);
    if let Some(b) = binding {
        cmd.env("A2A_BINDING", b);
    }
    let js = run_peer(cmd).await;
    // The bundled SDK's class names may carry a leading underscore.
    assert_eq!(
        js["transport"].as_str().map(|n| n.trim_start_matches('_')),
        Some(transport),
        "{js}"
    );
    assert_eq!(js["card"]["streaming"], true);
    assert_eq!(js["send"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(first_text(&js["send"]["artifacts"][0]), "hello from node");
    let kinds: Vec<String> = js["stream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_object().unwrap().keys().next().unwrap().clone())
        .collect();
    assert_eq!(
        kinds,
        ["task", "statusUpdate", "artifactUpdate", "statusUpdate"],
        "{js}"
    );
    assert_eq!(js["get"]["id"], js["send"]["id"]);
    assert!(js["list"]["ids"].as_array().unwrap().len() >= 2);
    assert_eq!(js["asking"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(js["answered"]["id"], js["asking"]["id"]);
    assert_eq!(js["answered"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(js["cancel"]["status"]["state"], "TASK_STATE_CANCELED");
    let resub = js["resubscribed"].as_array().unwrap();
    assert!(resub[0].get("task").is_some(), "{js}");
    assert_eq!(
        resub.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert!(
        js["get_unknown"].as_str().unwrap().contains("ot found"),
        "{js}"
    );
}

/// The a2a-sdk client resolves a consent request with the state the task carried, and the
/// same state presented again (in a new task of the same context) is refused.
async fn a2a_sdk_resolves_a_policy_part_with_its_state(engine: Engine) {
    let Some((python, _)) = peers() else {
        return;
    };
    let agent = std::sync::Arc::new(crate::helpers::PolicyAgent::default());
    let a = agent.clone();
    let t = spawn_app(engine, move |_, o| {
        o.agents.push(("echo".into(), a));
    })
    .await;
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(peer_dir().join("client.py"))
        .arg("policy")
        .arg(&t.base)
        .arg(switchboard::policy::POLICY_EXTENSION);
    let py = run_peer(cmd).await;
    assert!(
        py["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!(switchboard::policy::POLICY_EXTENSION)),
        "{py}"
    );
    assert_eq!(py["asking"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(py["policy"]["kind"], "consent_required", "{py}");
    assert_eq!(py["policy"]["state"].as_str().unwrap().len(), 43);
    assert_eq!(
        py["done"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{py}"
    );
    assert_eq!(
        first_text(&py["done"]["artifacts"][0]),
        "resolved consent_required verified=true"
    );
    assert!(
        py["replay"]
            .as_str()
            .is_some_and(|e| e.contains("replayed")),
        "{py}"
    );
    let resolved: Vec<_> = agent
        .seen()
        .into_iter()
        .filter_map(|m| m.policy_resolution)
        .collect();
    assert_eq!(resolved.len(), 1, "one resolution reached the agent");
    assert!(resolved[0].verified);
}

on_both_engines!(a2a_sdk_resolves_a_policy_part_with_its_state);

mod jwt {
    use std::sync::{Arc, Mutex};

    use actix_web::{HttpResponse, web};
    use base64::Engine as _;
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use serde_json::{Value, json};
    use switchboard::config::{
        A2aAuthConfig, AgentA2aConfig, AgentConfig, BackendConfig, DatabaseConfig, JwtIssuerConfig,
        Secret, StaticKeyConfig,
    };

    use super::{rpc_with, user_message};
    use crate::helpers::{
        Engine, RecordingAgent, fresh_db, on_both_engines, serve_route, spawn_app,
    };

    const ED_ISS: &str = "https://idp.example";
    const RSA_ISS: &str = "https://rsa-idp.example";
    const AUD: &str = "https://switchboard.test/agents/secure";

    type Jwks = Arc<Mutex<Value>>;

    async fn jwks(data: web::Data<Jwks>) -> HttpResponse {
        HttpResponse::Ok().json(data.lock().unwrap().clone())
    }

    fn b64url(b: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }

    fn claims(iss: &str, sub: &str, aud: &str, exp_in: i64, nbf_in: i64) -> Value {
        use switchboard::clock::Clock as _;
        let now = switchboard::clock::SystemClock.now_ms() / 1000;
        json!({"iss": iss, "sub": sub, "aud": aud, "iat": now, "exp": now + exp_in, "nbf": now + nbf_in, "jti": uuid::Uuid::now_v7().to_string()})
    }

    async fn jwt_agent_refuses_bad_tokens(engine: Engine) {
        // Keys: an Ed25519 key published in a JWKS, an RSA key configured as a static PEM.
        let keydb = fresh_db(Engine::Sqlite).await;
        let db = switchboard::store::Db::open(&DatabaseConfig {
            url: Secret::new(&keydb.url),
            ..DatabaseConfig::default()
        })
        .await
        .unwrap();
        let keys = switchboard::keys::Keys::new(db, Arc::new(switchboard::clock::SystemClock));
        let ed = keys.ed25519("test:idp").await.unwrap();
        let ed2 = keys.ed25519("test:idp-rotated").await.unwrap();
        let rsa = keys.rsa("test:rsa-idp").await.unwrap();
        let published: Jwks = Arc::new(Mutex::new(json!({"keys": [
            {"kty":"OKP","crv":"Ed25519","x": b64url(&ed.public_key_raw()),"kid":"k1","alg":"EdDSA","use":"sig"}
        ]})));
        let jwks_url = serve_route!(published.clone(), get, "/jwks.json", jwks);
        let recorder = Arc::new(RecordingAgent::default());
        let rec = recorder.clone();
        let rsa_pem = rsa.public_key_pem();
        let vault_jwks = jwks_url.clone();
        let t = spawn_app(engine, move |c, o| {
            c.agents.push(AgentConfig {
                activitypub: None,
                access: None,
                name: "secure".into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Echo,
                email: None,
                a2a: Some(AgentA2aConfig {
                    skills: vec![],
                    extended_skills: vec![],
                    auth: A2aAuthConfig::Jwt {
                        issuers: vec![
                            JwtIssuerConfig {
                                issuer: ED_ISS.into(),
                                audiences: vec![AUD.into()],
                                jwks_url: Some(jwks_url),
                                keys: vec![],
                                algorithms: vec!["EdDSA".into()],
                                assurance: None,
                            },
                            JwtIssuerConfig {
                                issuer: RSA_ISS.into(),
                                audiences: vec![AUD.into()],
                                jwks_url: None,
                                keys: vec![StaticKeyConfig {
                                    kid: None,
                                    pem: rsa_pem,
                                }],
                                algorithms: vec!["RS256".into()],
                                assurance: Some("oauth".into()),
                            },
                        ],
                        leeway_seconds: 5,
                    },
                }),
                notify: Vec::new(),
            });
            // Trusts the same issuer for another audience.
            c.agents.push(AgentConfig {
                activitypub: None,
                access: None,
                name: "vault".into(),
                display_name: None,
                summary: None,
                backend: BackendConfig::Echo,
                email: None,
                a2a: Some(AgentA2aConfig {
                    skills: vec![],
                    extended_skills: vec![],
                    auth: A2aAuthConfig::Jwt {
                        issuers: vec![JwtIssuerConfig {
                            issuer: ED_ISS.into(),
                            audiences: vec!["https://vault.example/agents/vault".into()],
                            jwks_url: Some(vault_jwks),
                            keys: vec![],
                            algorithms: vec!["EdDSA".into()],
                            assurance: None,
                        }],
                        leeway_seconds: 5,
                    },
                }),
                notify: Vec::new(),
            });
            o.agents.push(("secure".into(), rec));
            c.a2a.default_agent = Some("secure".into());
        })
        .await;
        let ed_key = EncodingKey::from_ed_der(ed.private_key_pkcs8_der());
        let ed_token = |c: &Value, kid: &str, key: &EncodingKey| {
            let mut h = Header::new(Algorithm::EdDSA);
            h.kid = Some(kid.into());
            encode(&h, c, key).unwrap()
        };
        let rsa_key = EncodingKey::from_rsa_pem(
            switchboard::keys::pem("PRIVATE KEY", rsa.private_key_pkcs8_der()).as_bytes(),
        )
        .unwrap();

        let call = |token: Option<String>, path: &'static str, text: &'static str| {
            let t = &t;
            async move {
                let mut r = t
                    .http
                    .post(format!("{}{path}", t.base))
                    .header("A2A-Version", "1.0")
                    .json(&json!({"jsonrpc":"2.0","id":1,"method":"SendMessage",
                        "params":{"message": user_message(text)}}));
                if let Some(tok) = token {
                    r = r.bearer_auth(tok);
                }
                let resp = r.send().await.unwrap();
                let status = resp.status().as_u16();
                let www = resp
                    .headers()
                    .get("www-authenticate")
                    .map(|v| v.to_str().unwrap().to_owned());
                (
                    status,
                    www,
                    resp.json::<Value>().await.unwrap_or(Value::Null),
                )
            }
        };

        // The card says how to authenticate.
        let card: Value = t
            .http
            .get(format!("{}/agents/secure/agent-card.json", t.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            card["securitySchemes"]["jwt"]["httpAuthSecurityScheme"]["scheme"],
            "Bearer"
        );
        assert_eq!(card["securityRequirements"][0]["schemes"]["jwt"], json!({}));

        // Missing token: 401 with a challenge, at the agent's endpoint and through the hub.
        let (status, www, _) = call(None, "/agents/secure/a2a", "hi").await;
        assert_eq!(status, 401);
        assert!(www.unwrap().starts_with("Bearer"));
        let (status, _, _) = call(None, "/a2a", "@secure hi").await;
        assert_eq!(status, 401);

        // Bad tokens.
        let now_claims = claims(ED_ISS, "agent-7", AUD, 300, 0);
        let bad = [
            (
                "expired",
                ed_token(&claims(ED_ISS, "agent-7", AUD, -3600, -7200), "k1", &ed_key),
            ),
            (
                "not yet valid",
                ed_token(&claims(ED_ISS, "agent-7", AUD, 7200, 3600), "k1", &ed_key),
            ),
            (
                "other audience",
                ed_token(
                    &claims(ED_ISS, "agent-7", "https://elsewhere", 300, 0),
                    "k1",
                    &ed_key,
                ),
            ),
            (
                "untrusted issuer",
                ed_token(
                    &claims("https://evil.example", "agent-7", AUD, 300, 0),
                    "k1",
                    &ed_key,
                ),
            ),
            (
                "alg none",
                format!(
                    "{}.{}.",
                    b64url(br#"{"alg":"none","typ":"JWT"}"#),
                    b64url(now_claims.to_string().as_bytes())
                ),
            ),
            (
                "HS256 keyed with the public key",
                encode(
                    &Header::new(Algorithm::HS256),
                    &claims(RSA_ISS, "agent-7", AUD, 300, 0),
                    &EncodingKey::from_secret(rsa.public_key_pem().as_bytes()),
                )
                .unwrap(),
            ),
            (
                "signed by another key",
                ed_token(
                    &now_claims,
                    "k1",
                    &EncodingKey::from_ed_der(ed2.private_key_pkcs8_der()),
                ),
            ),
            ("garbage", "not-a-token".into()),
        ];
        for (what, token) in bad {
            let (status, www, _) = call(Some(token), "/agents/secure/a2a", "hi").await;
            assert_eq!(status, 401, "{what} must be refused");
            assert!(www.unwrap().contains("invalid_token"), "{what}");
        }
        assert!(
            recorder.seen.lock().unwrap().is_empty(),
            "nothing reached the agent"
        );

        // Valid tokens: EdDSA from the JWKS, RS256 from the static key.
        let (status, _, body) = call(
            Some(ed_token(&now_claims, "k1", &ed_key)),
            "/agents/secure/a2a",
            "hello",
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{body}"
        );
        let task_id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
        let rs = encode(
            &Header::new(Algorithm::RS256),
            &claims(RSA_ISS, "bot", AUD, 300, 0),
            &rsa_key,
        )
        .unwrap();
        let (status, _, body) = call(Some(rs.clone()), "/a2a", "@secure via hub").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["result"]["task"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        // A token for `secure` does not open `vault` through the hub, though both trust its
        // issuer: the addressed agent's own audiences decide.
        let (status, _, body) = call(
            Some(ed_token(&now_claims, "k1", &ed_key)),
            "/a2a",
            "@vault let me in",
        )
        .await;
        assert_eq!(status, 401, "{body}");

        let seen = recorder.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let s = &seen[0].sender;
        assert_eq!(s.auth_method.as_str(), "a2a-jwt");
        assert!(s.verified);
        assert_eq!(s.address, "@agent-7@idp.example");
        assert_eq!(s.key_id.as_deref(), Some("k1"));
        let ev = &s.identities.as_ref().unwrap()[0];
        assert_eq!(
            (ev.subject.as_str(), ev.issuer.as_str()),
            ("agent-7", ED_ISS)
        );
        assert_eq!(ev.method.as_str(), "a2a-jwt");
        assert_eq!(ev.assurance.as_str(), "agent");
        let ev2 = &seen[1].sender.identities.as_ref().unwrap()[0];
        assert_eq!(ev2.assurance.as_str(), "oauth");

        // Tasks are visible only to the principal that created them.
        let get = |tok: Option<String>| {
            let id = task_id.clone();
            let t = &t;
            async move {
                let mut headers = vec![("A2A-Version".to_owned(), "1.0".to_owned())];
                if let Some(tok) = tok {
                    headers.push(("Authorization".into(), format!("Bearer {tok}")));
                }
                let h: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(a, b)| (a.as_str(), b.as_str()))
                    .collect();
                rpc_with(t, "/a2a", "GetTask", json!({"id": id}), &h).await
            }
        };
        assert_eq!(
            get(Some(ed_token(&now_claims, "k1", &ed_key))).await["result"]["id"],
            task_id.as_str()
        );
        assert_eq!(get(None).await["error"]["code"], -32001);
        assert_eq!(get(Some(rs)).await["error"]["code"], -32001);

        // Key rotation: a token naming a new kid makes switchboard refetch the JWKS.
        published.lock().unwrap()["keys"].as_array_mut().unwrap().push(
            json!({"kty":"OKP","crv":"Ed25519","x": b64url(&ed2.public_key_raw()),"kid":"k2","alg":"EdDSA"}),
        );
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let rotated = ed_token(
            &now_claims,
            "k2",
            &EncodingKey::from_ed_der(ed2.private_key_pkcs8_der()),
        );
        let (status, _, body) = call(Some(rotated), "/agents/secure/a2a", "rotated").await;
        assert_eq!(status, 200, "{body}");

        // The SDK clients: refused without a token and with a forged one, served with a valid one.
        if let Some((python, node_modules)) = super::peers() {
            let valid = ed_token(&now_claims, "k1", &ed_key);
            let forged = ed_token(
                &now_claims,
                "k1",
                &EncodingKey::from_ed_der(ed2.private_key_pkcs8_der()),
            );
            let script = node_modules.parent().unwrap().join("client.mjs");
            std::fs::copy(super::peer_dir().join("client.mjs"), &script).unwrap();
            for token in [None, Some(forged), Some(valid)] {
                let mut py = tokio::process::Command::new(&python);
                py.arg(super::peer_dir().join("client.py"))
                    .arg("auth")
                    .arg(&t.base);
                let mut js = tokio::process::Command::new("node");
                js.arg(&script).arg("auth").arg(&t.base);
                if let Some(tok) = &token {
                    py.arg(tok);
                    js.arg(tok);
                }
                for (who, cmd) in [("a2a-sdk", py), ("@a2a-js/sdk", js)] {
                    let out = super::run_peer(cmd).await;
                    match (&token, out.get("state")) {
                        (Some(tok), Some(state)) => {
                            assert_eq!(state, "TASK_STATE_COMPLETED", "{who}: {out}");
                            assert_eq!(
                                tok,
                                &ed_token(&now_claims, "k1", &ed_key),
                                "{who} was served with a bad token"
                            );
                        }
                        (_, None) => {
                            let err = out["error"].as_str().unwrap_or_default();
                            assert!(
                                err.contains("401") || err.to_lowercase().contains("unauth"),
                                "{who}: {out}"
                            );
                            assert!(
                                token
                                    .as_ref()
                                    .is_none_or(|tok| tok != &ed_token(&now_claims, "k1", &ed_key)),
                                "{who} refused a valid token: {out}"
                            );
                        }
                        (None, Some(_)) => panic!("{who} was served without a token: {out}"),
                    }
                }
            }
        }
    }
    on_both_engines!(jwt_agent_refuses_bad_tokens);
}

mod push {
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
}

/// Starts the a2a-sdk 1.3.0 echo server (`tests/peers/a2a/server.py`) on a free loopback port;
/// the child is killed when the handle drops.
async fn start_python_server(python: &str) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(python)
        .arg(peer_dir().join("server.py"))
        .arg(port.to_string())
        .kill_on_drop(true)
        .spawn()
        .expect("the a2a-sdk server starts");
    let base = format!("http://127.0.0.1:{port}");
    let card = format!("{base}/.well-known/agent-card.json");
    let http = reqwest::Client::new();
    wait_for(30, "the a2a-sdk server", || async {
        http.get(&card)
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    })
    .await;
    (child, card)
}

async fn client_backend_talks_to_a2a_sdk_server(engine: Engine) {
    let Some((python, _)) = peers() else {
        return;
    };
    let (_server, card) = start_python_server(&python).await;
    for streaming in [true, false] {
        let with_remote = |card: String| {
            move |c: &mut switchboard::Config, _: &mut switchboard::app::Options| {
                c.agents.push(switchboard::config::AgentConfig {
                    activitypub: None,
                    access: None,
                    name: "remote".into(),
                    display_name: None,
                    summary: None,
                    backend: switchboard::config::BackendConfig::A2a {
                        card,
                        token: None,
                        timeout_ms: 5_000,
                        streaming,
                        require_signed_card: false,
                        card_keys: vec![],
                    },
                    email: None,
                    a2a: None,
                    notify: Vec::new(),
                });
            }
        };
        let mut t = spawn_app(engine, with_remote(card.clone())).await;
        let r = rpc(
            &t,
            "/agents/remote/a2a",
            "SendMessage",
            json!({"message": user_message("hi")}),
        )
        .await;
        let task = &r["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        let text = texts(task).join("");
        assert!(text.starts_with("echo: hi [ctx="), "{text}");
        let remote_ctx = text
            .split("[ctx=")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap()
            .to_owned();

        // The same switchboard context stays in one remote context; an input-required turn is
        // continued in the same remote task.
        let mut m = user_message("need input");
        m["contextId"] = task["contextId"].clone();
        let r = rpc(
            &t,
            "/agents/remote/a2a",
            "SendMessage",
            json!({"message": m}),
        )
        .await;
        let asking = &r["result"]["task"];
        assert_eq!(
            asking["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{r}"
        );
        let q = asking["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap();
        let prefix = format!("what else? [ctx={remote_ctx}] [task=");
        assert!(q.starts_with(&prefix), "{q}");
        let remote_task = q
            .trim_start_matches(&prefix)
            .trim_end_matches(']')
            .to_owned();
        // Which remote task waits is stored: a restart between the turns continues it.
        t.stop().await;
        let t = crate::helpers::spawn_on(t.db.take(), with_remote(card.clone())).await;
        let mut follow = user_message("the answer");
        follow["taskId"] = asking["id"].clone();
        let r = rpc(
            &t,
            "/agents/remote/a2a",
            "SendMessage",
            json!({"message": follow}),
        )
        .await;
        let done = &r["result"]["task"];
        assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        let text = texts(done).join("");
        assert_eq!(
            text,
            format!("echo: the answer [ctx={remote_ctx}] [task={remote_task}]"),
            "the remote task continued"
        );
    }
}
on_both_engines!(client_backend_talks_to_a2a_sdk_server);

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
