//! Health, readiness, metrics and graceful shutdown.

use crate::helpers::{Engine, job_states, message, on_both_engines, spawn_app, wait_for};

async fn health_readiness_and_metrics(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let r = t
        .http
        .get(format!("{}/healthz", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap().as_str()),
        (200, "ok")
    );
    let r = t
        .http
        .get(format!("{}/readyz", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap().as_str()),
        (200, "ready")
    );
    t.ingest("m-1", message(&t.agent("echo"), "k", "count me"))
        .await;
    wait_for(20, "delivery", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    wait_for(20, "delivery metrics", || async {
        let text = t.metrics().await;
        text.contains("switchboard_deliveries_total{transport=\"test\",outcome=\"delivered\"} 1")
            .then_some(())
    })
    .await;
    // A scrape that began before the delivery committed can read the job as running and still
    // render the counter recorded meanwhile: judge a scrape begun after it.
    let text = t.metrics().await;
    for needle in [
        "switchboard_http_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"} 1",
        "switchboard_inbound_messages_total{transport=\"test\",outcome=\"accepted\"} 1",
        "switchboard_jobs_total{kind=\"dispatch\",outcome=\"done\"} 1",
        "switchboard_agent_call_duration_seconds_count{agent=\"echo\",result=\"ok\"} 1",
        "switchboard_end_to_end_seconds_count 1",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    // Finished jobs are not queue depth: nothing waits any more.
    assert!(
        !text.contains("switchboard_queue_depth{"),
        "a finished job counted as waiting:\n{text}"
    );
    assert_eq!(
        t.http
            .get(format!("{}/metrics", t.base))
            .send()
            .await
            .unwrap()
            .status(),
        404,
        "metrics are not public"
    );
    t.stop().await;
}
on_both_engines!(health_readiness_and_metrics);

/// Queue depth counts the jobs that wait, per kind and state.
async fn queue_depth_counts_waiting_jobs(engine: Engine) {
    // No workers: the message's dispatch job stays ready.
    let mut t = spawn_app(engine, |_, o| o.workers = false).await;
    t.ingest("m-1", message(&t.agent("echo"), "k", "wait"))
        .await;
    let text = t.metrics().await;
    assert!(
        text.contains("switchboard_queue_depth{kind=\"dispatch\",state=\"ready\"} 1"),
        "{text}"
    );
    t.stop().await;
}
on_both_engines!(queue_depth_counts_waiting_jobs);

async fn shutdown_leaves_no_job_leased(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    for i in 0..200 {
        t.ingest(
            &format!("s-{i}"),
            message(&t.agent("echo"), &format!("k{i}"), "bye"),
        )
        .await;
    }
    t.stop().await;
    let db = t.open_db().await;
    let states = job_states(&db).await;
    assert!(
        !states.contains_key("running"),
        "leased jobs were finished or released: {states:?}"
    );
    // A restart on the same database finishes whatever was left.
    let mut again = crate::helpers::spawn_on(t.db.take(), |_, _| {}).await;
    wait_for(30, "everything done", || async {
        let s = job_states(&db).await;
        (s.len() == 1 && s.get("done") == Some(&400)).then_some(())
    })
    .await;
    again.stop().await;
}
on_both_engines!(shutdown_leaves_no_job_leased);

/// A database gone from under a running instance (PostgreSQL: its database dropped): inbound is
/// refused with `503` and `Retry-After` and a body that names no internal detail; readiness is
/// false on both listeners, and on the private one it names the engine, where it is and the
/// cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_gone_after_start_is_named_in_readiness_and_refused_retryably() {
    let Some(admin_url) = crate::helpers::postgres_url() else {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: skipped");
        return;
    };
    let mut t = spawn_app(Engine::Postgres, |_, _| {}).await;
    let name = url::Url::parse(&t.db.url)
        .unwrap()
        .path()
        .trim_start_matches('/')
        .to_owned();
    let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
    sqlx::query(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(&admin)
        .await
        .unwrap();

    let to = t.agent("echo");
    let r = t
        .http
        .post(format!("{}/api/v1/messages", t.base))
        .bearer_auth("test-token")
        .json(&serde_json::json!({
            "external_id": "gone-1",
            "message": {
                "sender": {"address": "ops@example.com", "auth_method": "none", "verified": false},
                "recipient": to,
                "parts": [{"kind": "text", "mime": "text/plain", "content": "hello"}]
            }
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"), "{:?}", r.headers());
    let body = r.text().await.unwrap();
    assert!(
        !body.contains(&name) && !body.contains("PostgreSQL"),
        "no internal detail outside: {body}"
    );

    let public = t
        .http
        .get(format!("{}/readyz", t.base))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 503);
    assert_eq!(public.text().await.unwrap(), "database unavailable");
    let private = t
        .http
        .get(format!("http://{}/readyz", t.app().metrics_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(private.status(), 503);
    assert!(private.headers().contains_key("retry-after"));
    let text = private.text().await.unwrap();
    assert!(
        text.starts_with("database unavailable: PostgreSQL at ") && text.contains(&name),
        "the engine, where it is and the cause: {text}"
    );
    // Shutting down cannot hand leases back to a database that is gone: it says so.
    let app = t.app.take().unwrap();
    assert!(app.shutdown().await.is_err());
}

/// The real binary as a daemon: SIGHUP (a `systemctl reload`, a log-rotation hook) is logged
/// and leaves it serving; SIGTERM is logged with the drain and ends it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_keeps_the_server_up_and_sigterm_drains_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
[database]
url = "sqlite://{}"
[log]
format = "json"
filter = "info"
"#,
            dir.path().join("sb.db").display()
        ),
    )
    .unwrap();
    let mut server = crate::helpers::Binary::start(&config, None);
    let health = format!("http://{}/healthz", server.http);
    let http = reqwest::Client::new();

    for round in 1..=2 {
        server.signal("HUP");
        wait_for(20, "the SIGHUP to be logged", || async {
            (server.logged("\"SIGHUP\"").len() == round).then_some(())
        })
        .await;
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "SIGHUP ended the server"
        );
        let r = http.get(&health).send().await.unwrap();
        assert_eq!(r.status(), 200, "health after SIGHUP {round}");
    }
    let hup = server.logged("\"SIGHUP\"").join("\n");
    assert!(hup.contains("WARN") && hup.contains("restart"), "{hup}");

    server.terminate();
    let status = wait_for(30, "exit after SIGTERM", || {
        let exited = server.child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert!(status.success(), "a clean exit: {status:?}");
    let drain = server.logged("shutting down").join("\n");
    assert!(
        drain.contains("\"SIGTERM\""),
        "the drain names its signal: {drain}"
    );
    assert_eq!(
        server.logged("\"stopped\"").len(),
        1,
        "the end of the drain is logged"
    );
}
