//! The audit trail on both engines: each operator action through the operator API (a block
//! added and removed, a message handed in) and the console (the same, a dead job retried,
//! the dead jobs purged, a test message sent) leaves exactly one record with its action,
//! target, detail, credential and client address; a refused action leaves none; a record is
//! written in the action's own transaction (an action whose record cannot be written does not
//! happen); `GET /api/v1/audit` lists the records newest first, filtered by action and time, in
//! pages; the console's audit page shows them; retention prunes the old ones.

use serde_json::{Value, json};
use switchboard::clock::{Clock, ManualClock, SystemClock};
use switchboard::config::Secret;
use switchboard::store::audit::{self, AuditFilter, AuditRow};
use switchboard::store::{Arg, Db, jobs};

use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app, wait_for};

const TOKEN: &str = "test-token";
const CONSOLE_TOKEN: &str = "console-token";
const DAY_MS: i64 = 86_400_000;

/// Every record, oldest first.
async fn records(db: &Db) -> Vec<AuditRow> {
    let mut rows = audit::list(db, AuditFilter::default(), 1_000)
        .await
        .unwrap();
    rows.reverse();
    rows
}

fn message_body(t: &TestApp, external_id: &str) -> Value {
    json!({"external_id": external_id, "message": {
        "sender": {"address": "ops@example.com", "auth_method": "none", "verified": false},
        "recipient": t.agent("echo"),
        "parts": [{"kind": "text", "mime": "text/plain", "content": "hello"}]}})
}

async fn api(
    t: &TestApp,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = t
        .http
        .request(method, format!("{}{path}", t.base))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Hands `echo` a message through the API; its status and answer.
async fn post_message(t: &TestApp, external_id: &str) -> (u16, Value) {
    let body = message_body(t, external_id);
    api(t, reqwest::Method::POST, "/api/v1/messages", Some(body)).await
}

/// Adds a domain block through the API; its status and answer.
async fn add_block(t: &TestApp, block: Value) -> (u16, Value) {
    api(t, reqwest::Method::POST, "/api/v1/blocks", Some(block)).await
}

/// That `rows` are the actions `expected` (action and target, oldest first), each by
/// `credential` from the loopback address.
fn assert_recorded(rows: &[AuditRow], expected: &[(&str, &str)], credential: &str) {
    let seen: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.action.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(seen, expected);
    for r in rows {
        assert_eq!(
            (r.credential.as_str(), r.client.as_deref()),
            (credential, Some("127.0.0.1")),
            "{r:?}"
        );
    }
}

/// A dead job of a kind no worker claims (it stays `ready` once retried).
async fn dead_job(db: &Db, id: &str) {
    db.execute(
        "INSERT INTO jobs (id, kind, payload, state, attempts, max_attempts, run_at, last_error, created_at, updated_at) \
         VALUES ($1, 'audit-test', '{}', 'dead', 3, 3, 0, 'gave up', 0, 0)",
        &[Arg::Text(id)],
    )
    .await
    .unwrap();
}

async fn api_actions_are_recorded_and_listed(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    let db = t.open_db().await;
    let credential = format!("api:{}", audit::short_id(TOKEN));
    let get = |path: String| {
        let t = &t;
        async move { api(t, reqwest::Method::GET, &path, None).await }
    };

    let (s, block) = add_block(
        &t,
        json!({"kind": "domain", "pattern": "spam.example", "reason": "noise"}),
    )
    .await;
    assert_eq!(s, 201, "{block}");
    let block_id = block["id"].as_str().unwrap().to_owned();
    // Refused actions are not recorded: an unknown agent, an unknown block, a wrong token.
    let unknown = json!({"kind": "domain", "pattern": "x.example", "agent": "nobody"});
    assert_eq!(add_block(&t, unknown).await.0, 400);
    let gone = api(&t, reqwest::Method::DELETE, "/api/v1/blocks/none", None).await;
    assert_eq!(gone.0, 404);
    let wrong = t
        .http
        .post(format!("{}/api/v1/blocks", t.base))
        .bearer_auth("wrong");
    let wrong = wrong.json(&json!({"kind": "domain", "pattern": "y.example"}));
    assert_eq!(wrong.send().await.unwrap().status(), 401);

    let removed = format!("/api/v1/blocks/{block_id}");
    let (s, _) = api(&t, reqwest::Method::DELETE, &removed, None).await;
    assert_eq!(s, 204);
    let (s, sent) = post_message(&t, "audit-1").await;
    assert_eq!(s, 202, "{sent}");
    let message_id = sent["id"].as_str().unwrap().to_owned();
    // The same message again is a duplicate: nothing stored, nothing recorded.
    let (s, again) = post_message(&t, "audit-1").await;
    assert_eq!((s, &again["duplicate"]), (202, &json!(true)), "{again}");

    let rows = records(&db).await;
    assert_recorded(
        &rows,
        &[
            ("block.add", &block_id),
            ("block.remove", &block_id),
            ("message.send", &message_id),
        ],
        &credential,
    );
    assert!(!rows[0].credential.contains(TOKEN));
    let detail: Value = serde_json::from_str(&rows[0].detail).unwrap();
    assert_eq!(
        (&detail["kind"], &detail["pattern"], &detail["reason"]),
        (&json!("domain"), &json!("spam.example"), &json!("noise"))
    );
    let detail: Value = serde_json::from_str(&rows[2].detail).unwrap();
    assert_eq!(
        (
            &detail["recipient"],
            &detail["sender"],
            &detail["external_id"]
        ),
        (
            &json!(t.agent("echo")),
            &json!("ops@example.com"),
            &json!("audit-1")
        )
    );

    // The read API: newest first, with the same fields.
    let (s, page) = get("/api/v1/audit".into()).await;
    assert_eq!(s, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["message.send", "block.remove", "block.add"]);
    let first = &entries[2];
    assert_eq!(
        (&first["target"], &first["credential"], &first["client"]),
        (&json!(block_id), &json!(credential), &json!("127.0.0.1"))
    );
    assert_eq!(first["detail"]["pattern"], json!("spam.example"));
    assert!(first["at"].as_str().unwrap().ends_with('Z'));
    assert!(page["next_cursor"].is_null(), "{page}");

    // Filtered by action, and by time.
    let count = |page: &Value| page["entries"].as_array().map_or(0, Vec::len);
    let (_, page) = get("/api/v1/audit?action=block.add".into()).await;
    assert_eq!(count(&page), 1, "{page}");
    assert_eq!(page["entries"][0]["action"], json!("block.add"));
    let (_, page) = get("/api/v1/audit?since=2999-01-01T00:00:00Z".into()).await;
    assert_eq!(count(&page), 0, "{page}");
    let (_, page) = get("/api/v1/audit?since=2000-01-01T00:00:00Z".into()).await;
    assert_eq!(count(&page), 3, "{page}");
    assert_eq!(get("/api/v1/audit?since=yesterday".into()).await.0, 400);

    // In pages of one.
    let mut cursor = String::new();
    let mut paged = Vec::new();
    loop {
        let (s, page) = get(format!("/api/v1/audit?limit=1{cursor}")).await;
        assert_eq!(s, 200, "{page}");
        for e in page["entries"].as_array().unwrap() {
            paged.push(e["action"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(paged, ["message.send", "block.remove", "block.add"]);

    // The read API needs the token.
    let anonymous = t.http.get(format!("{}/api/v1/audit", t.base));
    assert_eq!(anonymous.send().await.unwrap().status(), 401);
}

on_both_engines!(api_actions_are_recorded_and_listed);

async fn console_actions_are_recorded_and_shown(engine: Engine) {
    let t = spawn_app(engine, |c, _| {
        c.console.token = Some(Secret::new(CONSOLE_TOKEN));
    })
    .await;
    let db = t.open_db().await;
    let console = format!("http://{}/console", t.app().metrics_addr());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // The sign-in form's session and anti-forgery token.
    let login = format!("{console}/login");
    let (pre, csrf) = crate::console_csrf::form_session(&http, &login).await;
    let sign_in = http.post(login).header("cookie", pre);
    let signed = sign_in
        .form(&[("token", CONSOLE_TOKEN), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
    let set_cookie = signed.headers()["set-cookie"].to_str().unwrap();
    let session = set_cookie.split(';').next().unwrap().to_owned();
    let (_, cookie_value) = session.split_once('=').unwrap();
    let credential = format!("console:{}", audit::short_id(cookie_value));
    // The signed-in session's anti-forgery token, which every form carries.
    let blocks = http
        .get(format!("{console}/blocks"))
        .header("cookie", &session);
    let csrf = crate::console_csrf::csrf_in(&blocks.send().await.unwrap().text().await.unwrap());
    // A form posted with the session: where it sends the browser.
    let post = |path: &str, mut form: Vec<(&'static str, String)>| {
        form.push(("csrf", csrf.clone()));
        let r = http
            .post(format!("{console}{path}"))
            .header("cookie", &session);
        let r = r.form(&form);
        async move {
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 303, "{}", r.text().await.unwrap_or_default());
            r.headers()["location"].to_str().unwrap().to_owned()
        }
    };
    // A page read with the session.
    let page = |path: &str| {
        let r = http
            .get(format!("{console}{path}"))
            .header("cookie", &session);
        async move {
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }
    };

    let block = vec![
        ("kind", "sender".to_owned()),
        ("pattern", "eve@mail.example".to_owned()),
        ("reason", "from the console".to_owned()),
    ];
    post("/blocks", block).await;
    let block_id = records(&db).await[0].target.clone();
    post("/blocks/remove", vec![("id", block_id.clone())]).await;
    dead_job(&db, "audit-job-1").await;
    dead_job(&db, "audit-job-2").await;
    post("/queue/retry", vec![("id", "audit-job-1".into())]).await;
    let retried = jobs::get(&db, "audit-job-1").await.unwrap().unwrap();
    assert_eq!(retried.state, "ready");
    post("/queue/purge", vec![]).await;
    assert!(jobs::get(&db, "audit-job-2").await.unwrap().is_none());
    let text = ("text", "typed in the console".to_owned());
    let to = post("/send", vec![("recipient", t.agent("echo")), text]).await;
    let message_id = to.strip_prefix("/console/messages/").unwrap().to_owned();
    // Without a session: refused, and nothing recorded.
    let refused = http.post(format!("{console}/queue/purge")).send().await;
    assert_eq!(refused.unwrap().status(), 401);

    let rows = records(&db).await;
    assert_recorded(
        &rows,
        &[
            ("block.add", &block_id),
            ("block.remove", &block_id),
            ("queue.retry", "audit-job-1"),
            ("queue.purge", "dead"),
            ("message.send", &message_id),
        ],
        &credential,
    );
    let detail = |r: &AuditRow| serde_json::from_str::<Value>(&r.detail).unwrap();
    assert_eq!(detail(&rows[2])["jobs"], json!(1));
    assert_eq!(detail(&rows[3])["jobs"], json!(1));
    assert_eq!(detail(&rows[4])["sender"], json!("console@localhost"));

    // The console's audit page lists them, and filters by action.
    let all = page("/audit").await;
    assert!(
        all.contains("href=\"/console/audit\""),
        "the navigation links it"
    );
    for r in &rows {
        assert!(all.contains(&format!("data-audit=\"{}\"", r.id)), "{all}");
    }
    assert_eq!(all.matches(&credential).count(), rows.len(), "{all}");
    assert!(
        all.contains("queue.purge") && all.contains("audit-job-1"),
        "{all}"
    );
    let filtered = page("/audit?action=queue.retry").await;
    assert_eq!(filtered.matches("data-audit=").count(), 1, "{filtered}");
    assert!(filtered.contains(&format!("data-audit=\"{}\"", rows[2].id)));
    // The page needs the session.
    let anonymous = http.get(format!("{console}/audit")).send().await.unwrap();
    assert_eq!(anonymous.status(), 303);
}

on_both_engines!(console_actions_are_recorded_and_shown);

/// An action whose record cannot be written does not happen: the record is written in the
/// action's own transaction.
async fn an_action_is_never_without_its_record(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    let db = t.open_db().await;
    db.execute("DROP TABLE audit_log", &[]).await.unwrap();
    let (s, _) = add_block(&t, json!({"kind": "domain", "pattern": "spam.example"})).await;
    assert!(s >= 500, "{s}");
    let blocks = switchboard::store::blocks::list(&db).await.unwrap();
    assert!(blocks.is_empty(), "{blocks:?}");
    let (s, _) = post_message(&t, "lost-1").await;
    assert!(s >= 500, "{s}");
    let counts = switchboard::store::messages::counts(&db).await.unwrap();
    assert!(counts.iter().all(|c| c.n == 0), "{counts:?}");
}

on_both_engines!(an_action_is_never_without_its_record);

async fn retention_prunes_old_records(engine: Engine) {
    let clock = ManualClock::new(SystemClock.now_ms());
    let c2 = clock.clone();
    let t = spawn_app(engine, move |c, o| {
        c.database.retention_days = 1;
        o.clock = c2;
    })
    .await;
    let db = t.open_db().await;
    let add = |pattern: &'static str| {
        let t = &t;
        async move {
            let (s, b) = add_block(t, json!({"kind": "domain", "pattern": pattern})).await;
            assert_eq!(s, 201, "{b}");
            b["id"].as_str().unwrap().to_owned()
        }
    };
    let old = add("old.example").await;
    clock.advance_ms(2 * DAY_MS);
    let new = add("new.example").await;
    let rows = wait_for(30, "the old record pruned", || async {
        let rows = records(&db).await;
        (rows.len() == 1).then_some(rows)
    })
    .await;
    assert_eq!(rows[0].target, new);
    assert_ne!(rows[0].target, old);
    // Retention prunes the record, not the block it recorded.
    assert_eq!(
        switchboard::store::blocks::list(&db).await.unwrap().len(),
        2
    );
}

on_both_engines!(retention_prunes_old_records);
