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

    let (s, block) = api(
        &t,
        reqwest::Method::POST,
        "/api/v1/blocks",
        Some(json!({"kind": "domain", "pattern": "spam.example", "reason": "noise"})),
    )
    .await;
    assert_eq!(s, 201, "{block}");
    let block_id = block["id"].as_str().unwrap().to_owned();
    // Refused actions are not recorded.
    let (s, _) = api(
        &t,
        reqwest::Method::POST,
        "/api/v1/blocks",
        Some(json!({"kind": "domain", "pattern": "x.example", "agent": "nobody"})),
    )
    .await;
    assert_eq!(s, 400);
    let (s, _) = api(
        &t,
        reqwest::Method::DELETE,
        "/api/v1/blocks/no-such-block",
        None,
    )
    .await;
    assert_eq!(s, 404);
    let wrong = t
        .http
        .post(format!("{}/api/v1/blocks", t.base))
        .bearer_auth("wrong")
        .json(&json!({"kind": "domain", "pattern": "y.example"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    let (s, _) = api(
        &t,
        reqwest::Method::DELETE,
        &format!("/api/v1/blocks/{block_id}"),
        None,
    )
    .await;
    assert_eq!(s, 204);
    let (s, sent) = api(
        &t,
        reqwest::Method::POST,
        "/api/v1/messages",
        Some(message_body(&t, "audit-1")),
    )
    .await;
    assert_eq!(s, 202, "{sent}");
    let message_id = sent["id"].as_str().unwrap().to_owned();
    // The same message again is a duplicate: nothing stored, nothing recorded.
    let (s, again) = api(
        &t,
        reqwest::Method::POST,
        "/api/v1/messages",
        Some(message_body(&t, "audit-1")),
    )
    .await;
    assert_eq!((s, &again["duplicate"]), (202, &json!(true)), "{again}");

    let rows = records(&db).await;
    let seen: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.action.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("block.add", block_id.as_str()),
            ("block.remove", block_id.as_str()),
            ("message.send", message_id.as_str()),
        ]
    );
    for r in &rows {
        assert_eq!(r.credential, credential, "{r:?}");
        assert_eq!(r.client.as_deref(), Some("127.0.0.1"), "{r:?}");
        assert!(!r.credential.contains(TOKEN));
    }
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
    let (s, page) = api(&t, reqwest::Method::GET, "/api/v1/audit", None).await;
    assert_eq!(s, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["message.send", "block.remove", "block.add"]);
    assert_eq!(entries[2]["target"], json!(block_id));
    assert_eq!(entries[2]["credential"], json!(credential));
    assert_eq!(entries[2]["client"], json!("127.0.0.1"));
    assert_eq!(entries[2]["detail"]["pattern"], json!("spam.example"));
    assert!(entries[2]["at"].as_str().unwrap().ends_with('Z'));
    assert!(page["next_cursor"].is_null(), "{page}");

    // Filtered by action, and by time.
    let (_, page) = api(
        &t,
        reqwest::Method::GET,
        "/api/v1/audit?action=block.add",
        None,
    )
    .await;
    let only: Vec<&Value> = page["entries"].as_array().unwrap().iter().collect();
    assert_eq!(only.len(), 1, "{page}");
    assert_eq!(only[0]["action"], json!("block.add"));
    let (_, page) = api(
        &t,
        reqwest::Method::GET,
        "/api/v1/audit?since=2999-01-01T00:00:00Z",
        None,
    )
    .await;
    assert_eq!(page["entries"], json!([]), "{page}");
    let (_, page) = api(
        &t,
        reqwest::Method::GET,
        "/api/v1/audit?since=2000-01-01T00:00:00Z",
        None,
    )
    .await;
    assert_eq!(page["entries"].as_array().unwrap().len(), 3, "{page}");
    let (s, _) = api(
        &t,
        reqwest::Method::GET,
        "/api/v1/audit?since=yesterday",
        None,
    )
    .await;
    assert_eq!(s, 400);

    // In pages of one.
    let mut cursor: Option<String> = None;
    let mut paged = Vec::new();
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/audit?limit=1&cursor={c}"),
            None => "/api/v1/audit?limit=1".to_owned(),
        };
        let (s, page) = api(&t, reqwest::Method::GET, &path, None).await;
        assert_eq!(s, 200, "{page}");
        for e in page["entries"].as_array().unwrap() {
            paged.push(e["action"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(paged, ["message.send", "block.remove", "block.add"]);

    // The read API needs the token.
    let r = t
        .http
        .get(format!("{}/api/v1/audit", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
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
    let signed = http
        .post(format!("{console}/login"))
        .form(&[("token", CONSOLE_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
    let session = signed.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let cookie_value = session.split_once('=').unwrap().1.to_owned();
    let credential = format!("console:{}", audit::short_id(&cookie_value));
    let post = |path: &str, form: Vec<(&'static str, String)>| {
        let r = http
            .post(format!("{console}{path}"))
            .header("cookie", &session)
            .form(&form);
        async move {
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 303, "{}", r.text().await.unwrap_or_default());
            r.headers()["location"].to_str().unwrap().to_owned()
        }
    };

    post(
        "/blocks",
        vec![
            ("kind", "sender".into()),
            ("pattern", "eve@mail.example".into()),
            ("reason", "from the console".into()),
        ],
    )
    .await;
    let block_id = records(&db).await[0].target.clone();
    post("/blocks/remove", vec![("id", block_id.clone())]).await;
    dead_job(&db, "audit-job-1").await;
    dead_job(&db, "audit-job-2").await;
    post("/queue/retry", vec![("id", "audit-job-1".into())]).await;
    assert_eq!(
        jobs::get(&db, "audit-job-1").await.unwrap().unwrap().state,
        "ready"
    );
    post("/queue/purge", vec![]).await;
    assert!(jobs::get(&db, "audit-job-2").await.unwrap().is_none());
    let to = post(
        "/send",
        vec![
            ("recipient", t.agent("echo")),
            ("text", "typed in the console".into()),
        ],
    )
    .await;
    let message_id = to.strip_prefix("/console/messages/").unwrap().to_owned();
    // Without a session: refused, and nothing recorded.
    let r = http
        .post(format!("{console}/queue/purge"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let rows = records(&db).await;
    let seen: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.action.as_str(), r.target.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("block.add", block_id.as_str()),
            ("block.remove", block_id.as_str()),
            ("queue.retry", "audit-job-1"),
            ("queue.purge", "dead"),
            ("message.send", message_id.as_str()),
        ]
    );
    for r in &rows {
        assert_eq!(r.credential, credential, "{r:?}");
        assert_eq!(r.client.as_deref(), Some("127.0.0.1"), "{r:?}");
    }
    let jobs_changed =
        |r: &AuditRow| serde_json::from_str::<Value>(&r.detail).unwrap()["jobs"].clone();
    assert_eq!(jobs_changed(&rows[2]), json!(1));
    assert_eq!(jobs_changed(&rows[3]), json!(1));
    let detail: Value = serde_json::from_str(&rows[4].detail).unwrap();
    assert_eq!(detail["sender"], json!("console@localhost"));

    // The console's audit page lists them, and filters by action.
    let page = http
        .get(format!("{console}/audit"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains("href=\"/console/audit\""),
        "the navigation links it"
    );
    for r in &rows {
        assert!(page.contains(&format!("data-audit=\"{}\"", r.id)), "{page}");
    }
    assert_eq!(page.matches(&credential).count(), rows.len(), "{page}");
    assert!(
        page.contains("queue.purge") && page.contains("audit-job-1"),
        "{page}"
    );
    let filtered = http
        .get(format!("{console}/audit?action=queue.retry"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(filtered.matches("data-audit=").count(), 1, "{filtered}");
    assert!(filtered.contains(&format!("data-audit=\"{}\"", rows[2].id)));
    // The page needs the session.
    let r = http.get(format!("{console}/audit")).send().await.unwrap();
    assert_eq!(r.status(), 303);
}

on_both_engines!(console_actions_are_recorded_and_shown);

/// An action whose record cannot be written does not happen: the record is written in the
/// action's own transaction.
async fn an_action_is_never_without_its_record(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    let db = t.open_db().await;
    db.execute("DROP TABLE audit_log", &[]).await.unwrap();
    let (s, _) = api(
        &t,
        reqwest::Method::POST,
        "/api/v1/blocks",
        Some(json!({"kind": "domain", "pattern": "spam.example"})),
    )
    .await;
    assert!(s >= 500, "{s}");
    assert!(
        switchboard::store::blocks::list(&db)
            .await
            .unwrap()
            .is_empty()
    );
    let (s, _) = api(
        &t,
        reqwest::Method::POST,
        "/api/v1/messages",
        Some(message_body(&t, "lost-1")),
    )
    .await;
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
            let (s, b) = api(
                t,
                reqwest::Method::POST,
                "/api/v1/blocks",
                Some(json!({"kind": "domain", "pattern": pattern})),
            )
            .await;
            assert_eq!(s, 201, "{b}");
            b["id"].as_str().unwrap().to_owned()
        }
    };
    let old = add("old.example").await;
    clock.advance_ms(2 * DAY_MS);
    let new = add("new.example").await;
    wait_for(30, "the old record pruned", || async {
        let rows = records(&db).await;
        (rows.len() == 1).then_some(rows)
    })
    .await;
    let rows = records(&db).await;
    assert_eq!(rows[0].target, new);
    assert_ne!(rows[0].target, old);
    // Retention prunes the record, not the block it recorded.
    assert_eq!(
        switchboard::store::blocks::list(&db).await.unwrap().len(),
        2
    );
}

on_both_engines!(retention_prunes_old_records);
