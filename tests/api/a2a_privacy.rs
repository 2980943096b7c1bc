//! Callers see only their own A2A conversations: two clients without credentials, from two
//! addresses and from one, over JSON-RPC and HTTP+JSON, at an agent's endpoint and at the hub,
//! cannot list, read or join each other's tasks and contexts, and the webhook agent never gets
//! one caller's words in another's `history`.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};
use switchboard::config::BackendConfig;

use crate::helpers::{Engine, TestApp, on_both_engines, serve_route, wait_for};

/// What the first caller says, which nobody else may ever see.
const SECRET: &str = "my account number is 1234-SECRET";

/// The webhook agent: records every body it is sent and answers 204 once the test lets it.
struct Hook {
    gate: tokio::sync::Semaphore,
    bodies: Mutex<Vec<Value>>,
}

impl Hook {
    /// Lets `permits` calls through (more are added by the test).
    fn new(permits: usize) -> Self {
        Self {
            gate: tokio::sync::Semaphore::new(permits),
            bodies: Mutex::default(),
        }
    }

    fn calls(&self) -> usize {
        self.bodies.lock().unwrap().len()
    }

    /// Every body sent for a turn whose own words are not the first caller's.
    fn others(&self) -> Vec<String> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| !b["parts"].to_string().contains("SECRET"))
            .map(Value::to_string)
            .collect()
    }
}

async fn hook(hook: web::Data<Arc<Hook>>, body: web::Bytes) -> HttpResponse {
    hook.bodies
        .lock()
        .unwrap()
        .push(serde_json::from_slice(&body).unwrap());
    hook.gate.acquire().await.unwrap().forget();
    HttpResponse::NoContent().finish()
}

/// The server with the `hook` webhook agent (beside the built-in `echo`), its calls let
/// through `permits` at a time (more are added by the test).
async fn app(engine: Engine, permits: usize) -> (TestApp, Arc<Hook>) {
    let h = Arc::new(Hook::new(permits));
    let url = serve_route!(h.clone(), post, "/hook", hook);
    let t = crate::webhook::with_hook(engine, &url, |c| {
        // A held call must not time out and be sent again.
        c.queue.lease_seconds = 60;
        for a in &mut c.agents {
            if let BackendConfig::Webhook { timeout_ms, .. } = &mut a.backend {
                *timeout_ms = 30_000;
            }
        }
    })
    .await;
    (t, h)
}

/// An HTTP client whose connections come from `ip` (any 127.0.0.0/8 address is loopback).
fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

fn message(text: &str, message_id: &str, context: Option<&str>) -> Value {
    let mut m = json!({"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(c) = context {
        m["contextId"] = json!(c);
    }
    m
}

fn fresh_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// One JSON-RPC call from client `c` to `path`, with an `Idempotency-Key` when given.
async fn rpc(
    c: &reqwest::Client,
    t: &TestApp,
    path: &str,
    method: &str,
    params: Value,
    key: Option<&str>,
) -> Value {
    let mut r = c
        .post(format!("{}{path}", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let resp = r.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// A send that returns at once: the JSON-RPC answer.
async fn send(c: &reqwest::Client, t: &TestApp, path: &str, m: Value) -> Value {
    rpc(
        c,
        t,
        path,
        "SendMessage",
        json!({"message": m, "configuration": {"returnImmediately": true}}),
        None,
    )
    .await
}

/// One HTTP+JSON request from client `c`: its status and JSON body.
async fn rest(
    c: &reqwest::Client,
    t: &TestApp,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = c
        .request(method, format!("{}{path}", t.base))
        .header("A2A-Version", "1.0");
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// An HTTP+JSON `GET` from client `c`: its status and JSON body.
async fn get(c: &reqwest::Client, t: &TestApp, path: &str) -> (u16, Value) {
    rest(c, t, reqwest::Method::GET, path, None).await
}

fn task_of(answer: &Value) -> (String, String) {
    let field = |k: &str| answer["result"]["task"][k].as_str().map(str::to_owned);
    match (field("id"), field("contextId")) {
        (Some(id), Some(ctx)) => (id, ctx),
        _ => panic!("no task: {answer}"),
    }
}

/// Opens a conversation (in `context`, when given) with `text`: its task and context ids.
async fn open(
    c: &reqwest::Client,
    t: &TestApp,
    path: &str,
    text: &str,
    context: Option<&str>,
) -> (String, String) {
    task_of(&send(c, t, path, message(text, &fresh_id(), context)).await)
}

/// Asserts a ListTasks result (JSON-RPC `result` or HTTP+JSON body) shows nothing.
fn assert_lists_nothing(listed: &Value, what: &str) {
    assert_eq!(listed["tasks"], json!([]), "{what}: {listed}");
    assert_eq!(listed["totalSize"], 0, "{what}: {listed}");
    assert!(!listed.to_string().contains("SECRET"), "{what}: {listed}");
}

/// The first caller's conversation at the `hook` agent: reachable by it through the ids it was
/// given, and by nobody else — not from another address, nor from its own.
async fn anonymous_callers_see_only_their_own(engine: Engine) {
    let (t, hook) = app(engine, 1_000).await;
    let first = client_from("127.0.0.1");
    let conversations = "/agents/hook/a2a";

    // The first caller opens a conversation and continues it.
    let (task, ctx) = open(&first, &t, conversations, SECRET, None).await;
    for id in [&task, &ctx] {
        let u = uuid::Uuid::parse_str(id).unwrap();
        assert_eq!(
            u.get_version_num(),
            7,
            "a time-ordered id with 74 random bits (scope::mint_id): {id}"
        );
    }
    crate::helpers::a2a_task_ended(&t, "hook", &task).await;
    let more = "and my PIN is 42-SECRET";
    let (second, same_ctx) = open(&first, &t, conversations, more, Some(&ctx)).await;
    assert_eq!(same_ctx, ctx);
    crate::helpers::a2a_task_ended(&t, "hook", &second).await;
    let continued = hook.bodies.lock().unwrap()[1].to_string();
    assert!(
        continued.contains("1234-SECRET"),
        "the holder of the context continues its thread: {continued}"
    );
    let own = rpc(
        &first,
        &t,
        conversations,
        "ListTasks",
        json!({"contextId": ctx}),
        None,
    )
    .await;
    assert_eq!(own["result"]["totalSize"], 2, "{own}");
    // A contextId the caller chooses itself starts a conversation under that name, bound to
    // the caller's address since a guessable name proves nothing.
    let named = send(
        &first,
        &t,
        conversations,
        message(SECRET, &fresh_id(), Some("team-room")),
    )
    .await;
    let (named_task, named_ctx) = task_of(&named);
    assert_eq!(
        named_ctx, "team-room",
        "the client's contextId is kept: {named}"
    );
    crate::helpers::a2a_task_ended(&t, "hook", &named_task).await;
    let own = rpc(
        &first,
        &t,
        conversations,
        "ListTasks",
        json!({"contextId": "team-room"}),
        None,
    )
    .await;
    assert_eq!(own["result"]["totalSize"], 1, "{own}");
    // From another address that name is not joinable nor listed, over either binding, at the
    // agent's endpoint or at the hub.
    let stranger = client_from("127.0.0.2");
    let guess = message("what did they say?", &fresh_id(), Some("team-room"));
    for path in [conversations, "/a2a"] {
        let listed = rpc(
            &stranger,
            &t,
            path,
            "ListTasks",
            json!({"contextId": "team-room"}),
            None,
        )
        .await;
        assert_lists_nothing(&listed["result"], &format!("team-room at {path}"));
        let joined = send(&stranger, &t, path, guess.clone()).await;
        assert_eq!(joined["error"]["code"], -32602, "at {path}: {joined}");
        assert!(
            joined["error"]["message"]
                .as_str()
                .unwrap()
                .contains("message.contextId"),
            "{joined}"
        );
        let (status, joined) = rest(
            &stranger,
            &t,
            reqwest::Method::POST,
            &format!("{path}/message:send"),
            Some(json!({"message": guess})),
        )
        .await;
        assert_eq!(status, 400, "at {path}: {joined}");
        assert!(!joined.to_string().contains("SECRET"), "{joined}");
    }

    // Another client from another address, and another from the same address.
    for (who, other) in [
        ("another address", client_from("127.0.0.2")),
        ("the same address", client_from("127.0.0.1")),
    ] {
        for path in [conversations, "/a2a"] {
            for params in [json!({}), json!({"pageSize": 10})] {
                let listed = rpc(&other, &t, path, "ListTasks", params, None).await;
                assert_lists_nothing(&listed["result"], &format!("{who}, ListTasks at {path}"));
            }
            let (status, listed) = get(&other, &t, &format!("{path}/tasks")).await;
            assert_eq!(status, 200, "{listed}");
            assert_lists_nothing(&listed, &format!("{who}, GET {path}/tasks"));
        }
        // A conversation of its own, over JSON-RPC and over HTTP+JSON: the agent is told
        // nothing of the first caller's.
        let (mine, _) = open(&other, &t, conversations, "hello from elsewhere", None).await;
        assert_ne!(mine, task);
        let ended = crate::helpers::a2a_task_ended(&t, "hook", &mine).await;
        assert!(!ended.to_string().contains("SECRET"), "{ended}");
        let (status, sent) = rest(
            &other,
            &t,
            reqwest::Method::POST,
            &format!("{conversations}/message:send"),
            Some(json!({"message": message("hello again", &fresh_id(), None)})),
        )
        .await;
        assert_eq!(status, 200, "{sent}");
        assert_ne!(sent["task"]["contextId"], ctx.as_str(), "{sent}");
        let id = sent["task"]["id"].as_str().unwrap().to_owned();
        crate::helpers::a2a_task_ended(&t, "hook", &id).await;
    }
    // At the hub, a message without a context goes to the default agent, not to the agent the
    // first caller's conversation is with.
    let calls = hook.calls();
    let other = client_from("127.0.0.2");
    let (at_hub, _) = open(&other, &t, "/a2a", "hi hub", None).await;
    crate::helpers::a2a_task_ended(&t, "echo", &at_hub).await;
    assert_eq!(
        hook.calls(),
        calls,
        "the hub routed a stranger to the hook agent"
    );

    let others = hook.others();
    assert_eq!(others.len(), 4, "{others:?}");
    for body in others {
        assert!(
            !body.contains("SECRET"),
            "the webhook agent was told the first caller's words in another conversation: {body}"
        );
    }
    // The first caller still reads its own task by its id (the capability it holds).
    let got = rpc(&first, &t, "/a2a", "GetTask", json!({"id": task}), None).await;
    assert_eq!(got["result"]["id"], task.as_str(), "{got}");
}
on_both_engines!(anonymous_callers_see_only_their_own);

/// A resend is a resend only of the same message from the same address, and an idempotency key
/// is the caller's own: neither hands another client the first caller's task.
async fn resends_and_keys_stay_with_their_caller(engine: Engine) {
    // The agent holds every call until the end, so the first task keeps running.
    let (t, hook) = app(engine, 0).await;
    let first = client_from("127.0.0.1");
    let path = "/agents/hook/a2a";
    let m = message(SECRET, "m-1", None);
    let (task, _) = task_of(&send(&first, &t, path, m.clone()).await);
    wait_for(10, "the agent to be called", || async {
        (hook.calls() == 1).then_some(())
    })
    .await;

    // The same messageId with other words, from the same address: a task of its own.
    let same_address = client_from("127.0.0.1");
    let other = send(&same_address, &t, path, message("hello", "m-1", None)).await;
    let (theirs, _) = task_of(&other);
    assert_ne!(theirs, task, "{other}");
    assert!(!other.to_string().contains("SECRET"), "{other}");
    // The very same message from another address: a task of its own too.
    let elsewhere = client_from("127.0.0.2");
    let (copied, _) = task_of(&send(&elsewhere, &t, path, m.clone()).await);
    assert_ne!(copied, task);
    // The first caller's own resend still joins its task.
    let (again, _) = task_of(&send(&first, &t, path, m.clone()).await);
    assert_eq!(again, task);

    // An idempotency key: the same key and request from another address start another task.
    let params = json!({"message": message("keyed", "m-2", None),
                        "configuration": {"returnImmediately": true}});
    let keyed = rpc(&first, &t, path, "SendMessage", params.clone(), Some("k-1")).await;
    let (keyed, _) = task_of(&keyed);
    let retried = rpc(&first, &t, path, "SendMessage", params.clone(), Some("k-1")).await;
    assert_eq!(task_of(&retried).0, keyed, "{retried}");
    let foreign = rpc(&elsewhere, &t, path, "SendMessage", params, Some("k-1")).await;
    let (foreign, _) = task_of(&foreign);
    assert_ne!(foreign, keyed);

    hook.gate.add_permits(1_000);
    for id in [&task, &theirs, &copied, &keyed, &foreign] {
        crate::helpers::a2a_task_ended(&t, "hook", id).await;
    }
    // Five tasks, each its own conversation: no call's history holds another's words.
    for body in hook.bodies.lock().unwrap().iter() {
        let history = body["history"].to_string();
        let own = body["parts"].to_string();
        assert!(
            own.contains("SECRET") || !history.contains("SECRET"),
            "{body}"
        );
    }
}
on_both_engines!(resends_and_keys_stay_with_their_caller);

/// The authorization server of `identified_and_anonymous_tasks_answer_as_unknown`: one active
/// token, for `client-7`.
async fn introspect(form: web::Form<Vec<(String, String)>>) -> HttpResponse {
    let active = form.iter().any(|(k, v)| k == "token" && v == "token-7");
    HttpResponse::Ok().json(if active {
        json!({"active": true, "sub": "client-7", "aud": "privacy-test"})
    } else {
        json!({"active": false})
    })
}

/// Someone else's task, whoever the two callers are, answers every method exactly as an id
/// that never existed: no method tells that it exists.
async fn others_tasks_answer_as_unknown(engine: Engine) {
    let url = serve_route!(Arc::new(()), post, "/introspect", introspect);
    // An agent whose callers present an introspected bearer token.
    let guarded: switchboard::config::AgentConfig = toml::from_str(&format!(
        r#"
        name = "guarded"
        backend = {{ kind = "echo" }}
        [a2a.auth]
        kind = "oauth"
        [a2a.auth.introspection]
        url = "{url}"
        client_id = "switchboard"
        client_secret = "s3cret"
        audience = "privacy-test"
        "#
    ))
    .unwrap();
    let t = crate::helpers::spawn_app(engine, move |c, _| c.agents.push(guarded)).await;
    let anonymous = client_from("127.0.0.2");
    let identified = reqwest::Client::builder()
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                "Bearer token-7".parse().unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .unwrap();
    let (their_task, their_ctx) = open(&identified, &t, "/agents/guarded/a2a", SECRET, None).await;
    let (anon_task, _) = open(&anonymous, &t, "/agents/echo/a2a", "hi", None).await;
    crate::helpers::a2a_task_ended(&t, "echo", &anon_task).await;

    // Each method on the other's task and on an id that never existed, at the hub.
    let calls = |id: &str| {
        let id = json!(id);
        vec![
            ("GetTask", json!({"id": id})),
            ("CancelTask", json!({"id": id})),
            ("SubscribeToTask", json!({"id": id})),
            ("ListTaskPushNotificationConfigs", json!({"taskId": id})),
            (
                "GetTaskPushNotificationConfig",
                json!({"taskId": id, "id": "c-1"}),
            ),
            (
                "DeleteTaskPushNotificationConfig",
                json!({"taskId": id, "id": "c-1"}),
            ),
            (
                "CreateTaskPushNotificationConfig",
                json!({"taskId": id, "url": "https://hooks.example/a2a"}),
            ),
            (
                "SendMessage",
                json!({"message": {"messageId": "m-9", "role": "ROLE_USER", "taskId": id,
                                   "parts": [{"text": "let me in"}]}}),
            ),
        ]
    };
    for (who, caller, task) in [
        ("anonymous", &anonymous, &their_task),
        ("identified", &identified, &anon_task),
    ] {
        let unknown = calls("0190aaaa-0000-4000-8000-000000000000");
        for ((method, params), (_, unknown_params)) in calls(task).into_iter().zip(unknown) {
            let answer = rpc(caller, &t, "/a2a", method, params, None).await;
            let expected = rpc(caller, &t, "/a2a", method, unknown_params, None).await;
            if method != "CreateTaskPushNotificationConfig" {
                // (A config's URL may be refused before its task is looked up: the same answer
                // for both ids is what matters.)
                assert_eq!(answer["error"]["code"], -32001, "{who} {method}: {answer}");
            }
            assert!(answer.get("error").is_some(), "{who} {method}: {answer}");
            assert_eq!(answer["error"], expected["error"], "{who} {method}");
        }
        let (status, body) = get(caller, &t, &format!("/a2a/tasks/{task}")).await;
        assert_eq!(status, 404, "{who}: {body}");
    }
    // The identified caller's context is not the anonymous caller's to join, nor to route by:
    // naming it starts the anonymous caller's own conversation at the hub's default agent,
    // exactly as a name nobody used does.
    for ctx in [their_ctx.as_str(), "never-was"] {
        let sent = send(
            &anonymous,
            &t,
            "/a2a",
            message("and me?", &fresh_id(), Some(ctx)),
        )
        .await;
        let (task, same) = task_of(&sent);
        assert_eq!(same, ctx, "{sent}");
        let ended = crate::helpers::a2a_task_ended(&t, "echo", &task).await;
        assert!(!ended.to_string().contains("SECRET"), "{ended}");
        let listed = rpc(
            &anonymous,
            &t,
            "/a2a",
            "ListTasks",
            json!({"contextId": ctx}),
            None,
        )
        .await;
        assert_eq!(listed["result"]["totalSize"], 1, "{listed}");
        assert_eq!(
            listed["result"]["tasks"][0]["id"],
            task.as_str(),
            "{listed}"
        );
        assert!(!listed.to_string().contains("SECRET"), "{listed}");
    }
    let theirs = rpc(
        &identified,
        &t,
        "/agents/guarded/a2a",
        "ListTasks",
        json!({"contextId": their_ctx}),
        None,
    )
    .await;
    assert_eq!(theirs["result"]["totalSize"], 1, "{theirs}");
    assert_eq!(
        theirs["result"]["tasks"][0]["id"],
        their_task.as_str(),
        "{theirs}"
    );
    // The owner still has its task.
    let by_id = json!({"id": their_task});
    let own = rpc(&identified, &t, "/a2a", "GetTask", by_id, None).await;
    assert_eq!(own["result"]["id"], their_task.as_str(), "{own}");
}
on_both_engines!(others_tasks_answer_as_unknown);
