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
