//! Two instances on one PostgreSQL database drain a shared queue: no job twice, none left.

use std::collections::HashSet;
use std::sync::Arc;

use switchboard::app::Options;

use crate::helpers::{
    Engine, RecordingAgent, fresh_db, job_states, message, postgres_url, spawn_on, wait_for,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_drain_one_queue_exactly_once() {
    if postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: scale-out test skipped");
        return;
    }
    const N: usize = 1000;
    // Fill the queue with an instance that runs no workers.
    let mut loader = spawn_on(fresh_db(Engine::Postgres).await, |_, o: &mut Options| {
        o.workers = false
    })
    .await;
    let to = loader.agent("echo");
    let pipeline = loader.app().pipeline().clone();
    let ingests = (0..N).map(|i| {
        let p = pipeline.clone();
        let m = message(&to, &format!("t{i}"), &format!("n{i}"));
        async move { p.ingest("test", &format!("e{i}"), m).await.unwrap() }
    });
    futures_util::future::join_all(ingests).await;
    let url = loader.db.url.clone();
    loader.stop().await;

    let spawn = |agent: Arc<RecordingAgent>| {
        spawn_on(
            crate::helpers::TestDb::url_only(url.clone()),
            move |c, o| {
                c.queue.kinds.get_mut("dispatch").unwrap().batch_size = 8;
                c.queue.kinds.get_mut("deliver").unwrap().batch_size = 8;
                o.agents.push(("echo".into(), agent));
            },
        )
    };
    let (agent_a, agent_b) = (
        Arc::new(RecordingAgent::default()),
        Arc::new(RecordingAgent::default()),
    );
    let (mut a, mut b) = tokio::join!(spawn(agent_a.clone()), spawn(agent_b.clone()));
    wait_for(120, "every response delivered", || async {
        (a.transport.count() + b.transport.count() >= N as u64).then_some(())
    })
    .await;
    a.stop().await;
    b.stop().await;

    let calls: Vec<String> = agent_a
        .seen
        .lock()
        .unwrap()
        .iter()
        .chain(agent_b.seen.lock().unwrap().iter())
        .map(|m| m.id.clone())
        .collect();
    let unique: HashSet<&String> = calls.iter().collect();
    assert_eq!(calls.len(), N, "each message reached an agent once");
    assert_eq!(unique.len(), N);
    let delivered: Vec<String> = a
        .transport
        .delivered()
        .into_iter()
        .chain(b.transport.delivered())
        .map(|d| d.original.id.clone())
        .collect();
    assert_eq!(delivered.len(), N, "each response was delivered once");
    assert_eq!(delivered.iter().collect::<HashSet<_>>().len(), N);
    let (na, nb) = (
        agent_a.seen.lock().unwrap().len(),
        agent_b.seen.lock().unwrap().len(),
    );
    eprintln!("instance A dispatched {na}, instance B {nb}");
    assert!(na > 0 && nb > 0, "both instances took part: A {na}, B {nb}");
    let states = job_states(&a.open_db().await).await;
    assert_eq!(states.get("done"), Some(&(2 * N as i64)), "{states:?}");
    assert_eq!(
        states.len(),
        1,
        "nothing ready, running or dead: {states:?}"
    );
}

/// With polling effectively off, work is picked up only if wakeups arrive: in-process after a
/// local commit, and through LISTEN/NOTIFY from another instance on PostgreSQL.
async fn wakeups_not_polling_move_the_work(engine: Engine) {
    let slow_poll = |c: &mut switchboard::Config| c.queue.poll_interval_ms = 600_000;
    // Same instance: ingest wakes dispatch, dispatch wakes delivery.
    let mut t = crate::helpers::spawn_app(engine, move |c, _| slow_poll(c)).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await; // workers are idle now
    t.ingest("w-1", message(&t.agent("echo"), "k", "wake up"))
        .await;
    wait_for(10, "delivery without polling", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    t.stop().await;
    if engine == Engine::Sqlite {
        return;
    }
    // Another instance: B only learns of A's jobs through NOTIFY.
    let mut b = spawn_on(fresh_db(Engine::Postgres).await, move |c, _| slow_poll(c)).await;
    let url = b.db.url.clone();
    let mut a = spawn_on(
        crate::helpers::TestDb::url_only(url),
        |_, o: &mut Options| o.workers = false,
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    a.ingest("w-2", message(&a.agent("echo"), "k2", "over there"))
        .await;
    wait_for(10, "delivery by the other instance", || async {
        (b.transport.count() == 1).then_some(())
    })
    .await;
    a.stop().await;
    b.stop().await;
}
crate::helpers::on_both_engines!(wakeups_not_polling_move_the_work);

/// Two dispatch batches on PostgreSQL, P ending a thread's run and Q putting back the thread's
/// next message to wait for it, in every order of their commits and looks once P's end of the
/// run has begun before Q records its waiter (the order that once lost the wake-up: Q looked for
/// a free thread before P committed, and P's end saw no waiter). Each side looks after its own
/// commit, as the dispatch handler does, so that whichever looks second sees the other's write:
/// the waiting message is due at once, not when its wait runs out (seconds per turn: the stall
/// of the 500-thread benchmark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_run_wakes_a_waiter_recorded_while_it_commits() {
    use switchboard::store::{jobs, runs};
    if postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: run wake-up test skipped");
        return;
    }
    let mut t = spawn_on(fresh_db(Engine::Postgres).await, |_, o: &mut Options| {
        o.workers = false
    })
    .await;
    let db = t.open_db().await;
    let now = 1_000_000;
    let later = now + 5_000;
    let lease = now + 60_000;
    // The four steps after P's end began and Q recorded its waiter, each side's commit first.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        PCommit,
        PLooks,
        QCommit,
        QLooks,
    }
    use Step::*;
    let orders = [
        [PCommit, PLooks, QCommit, QLooks],
        [PCommit, QCommit, PLooks, QLooks],
        [PCommit, QCommit, QLooks, PLooks],
        [QCommit, PCommit, PLooks, QLooks],
        [QCommit, PCommit, QLooks, PLooks],
        [QCommit, QLooks, PCommit, PLooks],
    ];
    for (n, order) in orders.iter().enumerate() {
        let thread = format!("thread-{n}");
        let (a, b) = (format!("a-{n}"), format!("b-{n}"));
        let key = [(thread.as_str(), "echo")];
        // Message a (seq 1) runs on P; message b (seq 2) of the same thread is claimed by Q.
        let mut tx = db.begin().await.unwrap();
        let new = |id, owner| jobs::NewJob {
            id,
            kind: "dispatch",
            payload: "{}",
            max_attempts: 5,
            run_at: now,
            lease: Some((owner, lease)),
        };
        jobs::enqueue_many(&mut tx, &[new(&a, "p"), new(&b, "q")], now)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let ask = |seq, job_id, tries| runs::Ask {
            thread_id: &thread,
            agent: "echo",
            seq,
            job_id,
            tries,
            cap: None,
        };
        let took = runs::take(&db, "p", &[ask(1, &a, true)], now, lease)
            .await
            .unwrap();
        assert!(took[0].taken, "P runs the thread: {took:?}");

        // P begins to end its run.
        let mut p = Some(db.begin().await.unwrap());
        let tx = p.as_mut().unwrap();
        jobs::finish_many(tx, &[a.as_str()], "p", &jobs::Finish::Done, now)
            .await
            .unwrap();
        runs::release(tx, "p", &key).await.unwrap();
        // Meanwhile Q finds the thread running, records b as waiting and puts it back.
        let waits = runs::take(&db, "q", &[ask(2, &b, true)], now, lease)
            .await
            .unwrap();
        assert!(
            !waits[0].taken,
            "the run is P's until it commits: {waits:?}"
        );
        let mut q = Some(db.begin().await.unwrap());
        jobs::finish_many(
            q.as_mut().unwrap(),
            &[b.as_str()],
            "q",
            &jobs::Finish::Waiting { run_at: later },
            now,
        )
        .await
        .unwrap();
        for step in order {
            match step {
                PCommit => p.take().unwrap().commit().await.unwrap(),
                QCommit => q.take().unwrap().commit().await.unwrap(),
                PLooks => drop(runs::wake_next(&db, &key, now).await.unwrap()),
                QLooks => drop(runs::wake_free(&db, &[b.as_str()], now).await.unwrap()),
            }
        }

        let job = jobs::get(&db, &b).await.unwrap().unwrap();
        assert_eq!(job.state, "ready", "{order:?}");
        assert!(
            job.run_at <= now,
            "{order:?}: the waiter is due once the run has ended, not at the end of its wait \
             ({} ms later)",
            job.run_at - now
        );
    }
    t.stop().await;
}
