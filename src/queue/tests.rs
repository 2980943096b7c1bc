//! Unit tests of the queue against SQLite: job metrics, lost leases, deferred jobs handed back, backoff.

use super::*;
use crate::clock::{Clock as _, SystemClock};
use crate::config::{DatabaseConfig, Secret};

async fn queue() -> (Arc<Queue>, Db, Arc<Metrics>) {
    let db = Db::open(&DatabaseConfig {
        url: Secret::new("sqlite::memory:"),
        ..DatabaseConfig::default()
    })
    .await
    .unwrap();
    let metrics = Arc::new(Metrics::new());
    let q = Queue::new(
        db.clone(),
        Arc::new(SystemClock),
        QueueConfig::default(),
        Arc::clone(&metrics),
    );
    (q, db, metrics)
}

/// Enqueues `n` jobs of `kind` and claims them as `q`'s owner.
async fn claimed(q: &Queue, db: &Db, kind: &'static str, n: usize) -> Vec<JobRow> {
    let now = SystemClock.now_ms();
    let items: Vec<(String, String)> = (0..n)
        .map(|i| (format!("{kind}:{i}"), "{}".into()))
        .collect();
    let mut tx = db.begin().await.unwrap();
    let enqueued = q.enqueue(&mut tx, kind, &items, now).await.unwrap();
    tx.commit().await.unwrap();
    q.hand_over(enqueued);
    let mut rows = jobs::claim(db, kind, q.owner(), now, now + 60_000, n)
        .await
        .unwrap();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

#[tokio::test]
async fn every_job_kind_shows_in_the_job_metrics() {
    let (q, db, metrics) = queue().await;
    let every_kind = [
        kinds::DISPATCH,
        kinds::DELIVER,
        kinds::TURN_END,
        crate::transports::activitypub::JOB_KIND,
        crate::transports::a2a::push::KIND,
    ];
    for kind in every_kind {
        let batch = claimed(&q, &db, kind, 3).await;
        assert_eq!(batch.len(), 3, "{kind}");
        let results: Vec<std::result::Result<(), OutboundError>> = vec![
            Ok(()),
            Err(OutboundError::temporary("try later")),
            Err(OutboundError::permanent("never")),
        ];
        let now = SystemClock.now_ms();
        let mut tx = db.begin().await.unwrap();
        let finished = q
            .finish(&mut tx, q.owner(), &batch, &results, now)
            .await
            .unwrap();
        assert!(finished.done(0));
        assert!(matches!(finished.end(1), Some(Finish::Retry { .. })));
        assert!(matches!(finished.end(2), Some(Finish::Dead { .. })));
        q.commit(tx, finished).await.unwrap();
    }
    let text = metrics.render();
    for kind in every_kind {
        for outcome in ["done", "retry", "dead"] {
            let needle =
                format!("switchboard_jobs_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} 1");
            assert!(text.contains(&needle), "metrics lack {needle}:\n{text}");
        }
    }
}

#[tokio::test]
async fn a_job_whose_lease_was_lost_is_neither_finished_nor_counted() {
    let (q, db, metrics) = queue().await;
    let batch = claimed(&q, &db, kinds::DELIVER, 1).await;
    let now = SystemClock.now_ms();
    let mut tx = db.begin().await.unwrap();
    let results: Vec<std::result::Result<(), OutboundError>> = vec![Ok(())];
    let mut finished = q
        .finish(&mut tx, "another-instance", &batch, &results, now)
        .await
        .unwrap();
    assert!(finished.end(0).is_none());
    finished.count_delivery(0, "test");
    q.commit(tx, finished).await.unwrap();
    let text = metrics.render();
    assert!(!text.contains("switchboard_jobs_total{"), "{text}");
    assert!(!text.contains("switchboard_deliveries_total{"), "{text}");
    let running = jobs::list(&db, Some("running"), None, 10).await.unwrap();
    assert_eq!(running.len(), 1, "the job stays with whoever holds it");
}

#[tokio::test]
async fn a_job_counted_as_a_delivery_attempt_counts_its_outcome() {
    let (q, db, metrics) = queue().await;
    let batch = claimed(&q, &db, kinds::DELIVER, 3).await;
    let results: Vec<std::result::Result<(), OutboundError>> = vec![
        Ok(()),
        Err(OutboundError::temporary("503")),
        Err(OutboundError::permanent("410")),
    ];
    let now = SystemClock.now_ms();
    let mut tx = db.begin().await.unwrap();
    let mut finished = q
        .finish(&mut tx, q.owner(), &batch, &results, now)
        .await
        .unwrap();
    for i in 0..batch.len() {
        finished.count_delivery(i, "test");
    }
    q.commit(tx, finished).await.unwrap();
    let text = metrics.render();
    for outcome in ["delivered", "retry", "failed"] {
        let needle =
            format!("switchboard_deliveries_total{{transport=\"test\",outcome=\"{outcome}\"}} 1");
        assert!(text.contains(&needle), "metrics lack {needle}:\n{text}");
    }
}

/// Jobs that end alike are recorded together, each still as it ended: done, kept leased,
/// waiting until its own time, retried; a job another worker took meanwhile is left as it is.
#[tokio::test]
async fn jobs_that_end_alike_are_recorded_together_each_as_it_ended() {
    enum End {
        Done,
        Kept(i64),
        Waits(i64),
        Fails(OutboundError),
    }
    impl Attempted for End {
        fn error(&self) -> Option<&OutboundError> {
            match self {
                Self::Fails(e) => Some(e),
                _ => None,
            }
        }
        fn deferred_until(&self) -> Option<i64> {
            match self {
                Self::Kept(t) => Some(*t),
                _ => None,
            }
        }
        fn waiting_until(&self) -> Option<i64> {
            match self {
                Self::Waits(t) => Some(*t),
                _ => None,
            }
        }
    }
    #[derive(sqlx::FromRow, serde::Deserialize, Debug, PartialEq)]
    struct Row {
        state: String,
        attempts: i64,
        run_at: i64,
        lease_until: Option<i64>,
        lease_owner: Option<String>,
    }
    let (q, db, _) = queue().await;
    let batch = claimed(&q, &db, kinds::DISPATCH, 8).await;
    let now = SystemClock.now_ms();
    let (kept, soon, later) = (now + 60_000, now + 1_000, now + 2_000);
    let results = vec![
        End::Done,
        End::Kept(kept),
        End::Waits(soon),
        End::Done,
        End::Kept(kept),
        End::Waits(later),
        End::Waits(soon),
        End::Fails(OutboundError::temporary("try later")),
    ];
    // Job 3 was taken by another worker meanwhile.
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        "UPDATE jobs SET lease_owner = 'another' WHERE id = $1",
        &[crate::store::Arg::Text(&batch[3].id)],
    )
    .await
    .unwrap();
    let finished = q
        .finish(&mut tx, q.owner(), &batch, &results, now)
        .await
        .unwrap();
    let ends: Vec<Option<&'static str>> = (0..batch.len())
        .map(|i| finished.end(i).map(Finish::label))
        .collect();
    assert_eq!(
        ends,
        [
            Some("done"),
            Some("deferred"),
            Some("waiting"),
            None,
            Some("deferred"),
            Some("waiting"),
            Some("waiting"),
            Some("retry")
        ]
    );
    q.commit(tx, finished).await.unwrap();
    let mut rows = Vec::new();
    for job in &batch {
        let row: Row = db
            .fetch_optional(
                "SELECT state, attempts, run_at, lease_until, lease_owner FROM jobs WHERE id = $1",
                &[crate::store::Arg::Text(&job.id)],
            )
            .await
            .unwrap()
            .unwrap();
        rows.push(row);
    }
    let me = Some(q.owner().to_owned());
    let row = |state: &str, attempts, run_at, lease_until, lease_owner| Row {
        state: state.into(),
        attempts,
        run_at,
        lease_until,
        lease_owner,
    };
    let claimed_at = rows[3].run_at;
    assert_eq!(rows[0].state, "done");
    assert_eq!(
        rows[1],
        row("running", 1, claimed_at, Some(kept), me.clone())
    );
    assert_eq!(rows[2], row("ready", 0, soon, None, None));
    assert_eq!(
        rows[3].lease_owner.as_deref(),
        Some("another"),
        "left as it is"
    );
    assert_eq!(rows[3].state, "running");
    assert_eq!(rows[4], row("running", 1, claimed_at, Some(kept), me));
    assert_eq!(rows[5], row("ready", 0, later, None, None));
    assert_eq!(rows[6], row("ready", 0, soon, None, None));
    assert_eq!((rows[7].state.as_str(), rows[7].attempts), ("ready", 1));
    assert!(rows[7].run_at > now && rows[7].lease_owner.is_none());
}

/// A deferred job stays leased to this instance, its lease renewed, with the attempt its
/// claim counted; nobody else can claim it, and it goes back to this instance's workers
/// when handed back.
#[tokio::test]
async fn a_deferred_job_stays_leased_until_handed_back() {
    struct Later(i64);
    impl Attempted for Later {
        fn error(&self) -> Option<&OutboundError> {
            None
        }
        fn deferred_until(&self) -> Option<i64> {
            Some(self.0)
        }
    }
    let (q, db, metrics) = queue().await;
    let batch = claimed(&q, &db, kinds::DISPATCH, 1).await;
    let now = SystemClock.now_ms();
    // A whole lease ahead, as the dispatch handler keeps it.
    let until = now + q.lease_ms();
    let mut tx = db.begin().await.unwrap();
    let finished = q
        .finish(&mut tx, q.owner(), &batch, &[Later(until)], now)
        .await
        .unwrap();
    assert_eq!(
        finished.end(0),
        Some(&Finish::Deferred { lease_until: until })
    );
    q.commit(tx, finished).await.unwrap();
    let job = jobs::get(&db, &batch[0].id).await.unwrap().unwrap();
    assert_eq!((job.state.as_str(), job.attempts), ("running", 1));
    let lease = until + 60_000;
    let none = jobs::claim(&db, kinds::DISPATCH, "another", now, lease, 10).await;
    assert!(none.unwrap().is_empty(), "still leased here");
    assert_eq!(
        jobs::reap_expired(&db, kinds::DISPATCH, until - 1)
            .await
            .unwrap(),
        0,
        "the lease was renewed"
    );
    q.hand_back(kinds::DISPATCH, batch[0].clone(), until).await;
    let again = q.take_local(kinds::DISPATCH, 10, now);
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].id.as_str(), again[0].attempts),
        (batch[0].id.as_str(), 1)
    );
    assert!(
        metrics
            .render()
            .contains("switchboard_jobs_total{kind=\"dispatch\",outcome=\"deferred\"} 1")
    );
    // Had the instance gone away, the lease runs out and anyone claims the job again.
    assert_eq!(
        jobs::reap_expired(&db, kinds::DISPATCH, until + 1)
            .await
            .unwrap(),
        1
    );
}

/// A job that waited long (its lease half gone) has its lease renewed when handed back, so
/// its run is covered; one whose lease another worker took is not handed back.
#[tokio::test]
async fn a_job_handed_back_late_gets_a_fresh_lease() {
    let (q, db, _) = queue().await;
    let batch = claimed(&q, &db, kinds::DISPATCH, 1).await;
    let now = SystemClock.now_ms();
    let nearly_over = now + 1_000;
    q.hand_back(kinds::DISPATCH, batch[0].clone(), nearly_over)
        .await;
    assert_eq!(
        jobs::reap_expired(&db, kinds::DISPATCH, nearly_over + 1)
            .await
            .unwrap(),
        0,
        "the lease was renewed"
    );
    assert_eq!(q.take_local(kinds::DISPATCH, 10, now).len(), 1);
    // Lost to another worker: not handed back.
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        "UPDATE jobs SET lease_owner = 'another' WHERE id = $1",
        &[crate::store::Arg::Text(&batch[0].id)],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    q.hand_back(kinds::DISPATCH, batch[0].clone(), nearly_over)
        .await;
    assert!(q.take_local(kinds::DISPATCH, 10, now).is_empty());
}

#[test]
fn backoff_grows_with_jitter_and_is_capped() {
    let cfg = QueueConfig {
        backoff_base_ms: 1000,
        backoff_max_ms: 60_000,
        ..QueueConfig::default()
    };
    let mut rng = rand::thread_rng();
    for _ in 0..100 {
        let b1 = backoff_ms(&cfg, 1, &mut rng);
        assert!((500..=1500).contains(&b1), "{b1}");
        let b4 = backoff_ms(&cfg, 4, &mut rng);
        assert!((4000..=12_000).contains(&b4), "{b4}");
        let b30 = backoff_ms(&cfg, 30, &mut rng);
        assert!((30_000..=60_000).contains(&b30), "{b30}");
    }
}
