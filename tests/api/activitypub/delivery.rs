//! Outbound deliveries: retried on 503 and 429, dead on a final status, and held back by the
//! breaker for a host that has been failing too long.

use switchboard::store::Arg;
use switchboard::transports::activitypub::mapping;

use super::remote::{note_create, post_signed};
use super::{count, setup};
use crate::helpers::{Engine, on_both_engines, wait_for};

on_both_engines!(deliveries_retry_stop_and_break);

async fn deliveries_retry_stop_and_break(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let d = t.domain();
    let key = remote.key_id("alice");
    let make = |n: &str| {
        note_create(
            remote,
            "alice",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hi</p>",
        )
    };
    let db = t.open_db().await;

    // 503 then 429 (with Retry-After 0) then accepted: retried to success.
    remote.post_statuses.lock().unwrap().extend([503, 429]);
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&make("q1")).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(20, "delivery after retries", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'done'",
            &[],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    assert_eq!(
        remote
            .posts()
            .iter()
            .filter(|p| p.2["type"] == "Create")
            .count(),
        3
    );

    // 400 is final: the job is dead after one attempt.
    remote.post_statuses.lock().unwrap().push(400);
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&make("q2")).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(20, "a dead job", || async {
        (count(&db, "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'dead' AND attempts = 1", &[]).await == 1).then_some(())
    })
    .await;
    assert_eq!(
        remote
            .posts()
            .iter()
            .filter(|p| p.2["type"] == "Create")
            .count(),
        4
    );

    // Every POST is a delivery attempt with its outcome, and every ap_deliver job shows in the
    // job metrics: 503 and 429 were retried, 202 delivered, 400 failed for good.
    let counted = [
        "switchboard_deliveries_total{transport=\"activitypub\",outcome=\"retry\"} 2",
        "switchboard_deliveries_total{transport=\"activitypub\",outcome=\"delivered\"} 1",
        "switchboard_deliveries_total{transport=\"activitypub\",outcome=\"failed\"} 1",
        "switchboard_jobs_total{kind=\"ap_deliver\",outcome=\"retry\"} 2",
        "switchboard_jobs_total{kind=\"ap_deliver\",outcome=\"done\"} 1",
        "switchboard_jobs_total{kind=\"ap_deliver\",outcome=\"dead\"} 1",
    ];
    wait_for(20, "the delivery metrics", || async {
        let text = t.metrics().await;
        counted
            .iter()
            .all(|needle| text.contains(needle))
            .then_some(())
    })
    .await;

    // A host failing for longer than breaker_days gets nothing sent.
    let host = mapping::host_of(&remote.base).unwrap();
    db.execute(
        "UPDATE ap_hosts SET failing_since = $1 WHERE host = $2",
        &[Arg::Int(1), Arg::Text(&host)],
    )
    .await
    .unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_hosts WHERE host = $1",
            &[Arg::Text(&host)]
        )
        .await,
        1
    );
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&make("q3")).unwrap(),
        &key,
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(20, "the breaker", || async {
        (count(&db, "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND state = 'dead' AND last_error LIKE '%failing for more than%'", &[]).await == 1).then_some(())
    })
    .await;
    assert_eq!(
        remote
            .posts()
            .iter()
            .filter(|p| p.2["type"] == "Create")
            .count(),
        4,
        "nothing sent"
    );
}
