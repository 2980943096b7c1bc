//! The pipeline end to end: ingest → dispatch → agent → delivery through the test transport.

use std::sync::Arc;

use switchboard::error::ErrorKind;
use switchboard::message::{Part, Role};
use switchboard::store::jobs;

use crate::helpers::{
    Engine, RecordingAgent, job_states, message, on_both_engines, spawn_app, spawn_on, wait_for,
};

pub(crate) fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.content.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("|")
}

async fn echo_round_trip_and_dedupe(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let msg = message(&t.agent("echo"), "wire-thread-1", "hello there");
    let msg_id = msg.id.clone();
    let first = t.ingest("wire-1", msg.clone()).await;
    assert!(!first.duplicate);
    assert_eq!(first.message_id, msg_id);
    assert_ne!(
        first.thread_id, "wire-thread-1",
        "the wire thread key maps to switchboard's own thread id"
    );

    let delivered = wait_for(20, "the echo reply", || async {
        let d = t.transport.delivered();
        (!d.is_empty()).then_some(d)
    })
    .await;
    let d = &delivered[0];
    assert_eq!(d.response.in_reply_to, msg_id);
    assert_eq!(d.response.agent, t.agent("echo"));
    assert_eq!(d.response.thread_id, first.thread_id);
    assert_eq!(text_of(&d.response.parts), "hello there");
    assert_eq!(d.original.id, msg_id);
    assert_eq!(d.job_id, format!("deliver:{}", d.response.id));

    // The same wire message again, even with a new switchboard id: a duplicate, nothing queued.
    let mut again = msg.clone();
    again.id = uuid::Uuid::now_v7().to_string();
    let dup = t.ingest("wire-1", again).await;
    assert!(dup.duplicate);
    assert_eq!(dup.message_id, msg_id);
    assert_eq!(dup.thread_id, first.thread_id);
    // The same external id on another transport is a different message.
    let other = t
        .app()
        .pipeline()
        .ingest("api", "wire-1", message(&t.agent("echo"), "k", "x"))
        .await
        .unwrap();
    assert!(!other.duplicate);

    let db = t.open_db().await;
    wait_for(20, "all jobs done", || async {
        let s = job_states(&db).await;
        (s.get("done") == Some(&4) && s.len() == 1).then_some(())
    })
    .await;
    assert_eq!(t.transport.count(), 1, "the duplicate was never dispatched");
    t.stop().await;
}
on_both_engines!(echo_round_trip_and_dedupe);

async fn history_follows_the_thread(engine: Engine) {
    let agent = Arc::new(RecordingAgent::default());
    let a2 = agent.clone();
    let mut t = spawn_app(engine, move |c, o| {
        c.history.keep_head = 1;
        c.history.window = 2;
        o.agents.push(("rec".into(), a2));
    })
    .await;
    let to = t.agent("rec");
    for (i, text) in ["one", "two", "three", "four"].iter().enumerate() {
        t.ingest(&format!("h-{i}"), message(&to, "thread-h", text))
            .await;
        wait_for(20, "reply", || async {
            (t.transport.count() == i as u64 + 1).then_some(())
        })
        .await;
    }
    let seen = agent.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    assert!(seen[0].history.is_none(), "the opening post has no history");
    let h1 = seen[1].history.as_ref().unwrap();
    assert_eq!(
        h1.iter().map(|h| h.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant]
    );
    assert_eq!(text_of(&h1[0].parts), "one");
    assert_eq!(seen[1].history_cache_breakpoint_after, Some(0));
    // Fourth turn: head "one", then the window of the 2 newest turns (user "three", reply
    // "three"); "three" is a user turn after the user head and is dropped so the head stays.
    let h3 = seen[3].history.as_ref().unwrap();
    let texts: Vec<String> = h3.iter().map(|h| text_of(&h.parts)).collect();
    assert_eq!(texts, ["one", "three"]);
    assert_eq!(
        h3.iter().map(|h| h.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant]
    );
    // Other threads do not leak in.
    t.ingest("h-other", message(&to, "thread-other", "elsewhere"))
        .await;
    wait_for(20, "reply", || async {
        (t.transport.count() == 5).then_some(())
    })
    .await;
    assert!(agent.seen.lock().unwrap()[4].history.is_none());
    t.stop().await;
}
on_both_engines!(history_follows_the_thread);

/// Sends `text` to the agent `rec` in one thread and waits for the `n`th delivery of `t`.
async fn say(t: &crate::helpers::TestApp, n: u64, text: &str) {
    t.ingest(
        &format!("e-{text}"),
        message(&t.agent("rec"), "thread-elsewhere", text),
    )
    .await;
    wait_for(20, "reply", || async {
        (t.transport.count() == n).then_some(())
    })
    .await;
}

/// History holds parsed turns in memory, but which turns it shows is read from the database:
/// turns another instance wrote (PostgreSQL) and turns written before a restart are there, in
/// order, none twice.
async fn history_sees_turns_written_elsewhere(engine: Engine) {
    let a = Arc::new(RecordingAgent::default());
    let a2 = a.clone();
    let mut t = spawn_app(engine, move |_, o| o.agents.push(("rec".into(), a2))).await;
    say(&t, 1, "one").await;
    say(&t, 2, "two").await;
    // Another writer of the same thread: a second instance on PostgreSQL; on SQLite (one
    // instance per file) the same one after a restart, its memory gone.
    let url = t.db.url.clone();
    let b = Arc::new(RecordingAgent::default());
    let b2 = b.clone();
    let mut other = if engine == Engine::Postgres {
        Some(
            spawn_on(
                crate::helpers::TestDb::url_only(url.clone()),
                move |_, o| {
                    o.agents.push(("rec".into(), b2));
                },
            )
            .await,
        )
    } else {
        None
    };
    if let Some(o) = &other {
        say(o, 1, "three").await;
    }
    say(&t, 3, "four").await;
    t.stop().await;
    let c = Arc::new(RecordingAgent::default());
    let c2 = c.clone();
    let again = spawn_on(crate::helpers::TestDb::url_only(url), move |_, o| {
        o.agents.push(("rec".into(), c2));
    })
    .await;
    say(&again, 1, "five").await;

    let texts = |m: &switchboard::message::NormalizedMessage| {
        m.history
            .iter()
            .flatten()
            .map(|h| text_of(&h.parts))
            .collect::<Vec<_>>()
    };
    let last_of = |agent: &RecordingAgent| agent.seen.lock().unwrap().last().cloned().unwrap();
    let expected_four: &[&str] = if engine == Engine::Postgres {
        &["one", "one", "two", "two", "three", "three"]
    } else {
        &["one", "one", "two", "two"]
    };
    assert_eq!(texts(&last_of(&a)), expected_four);
    let mut expected_five = expected_four.to_vec();
    expected_five.extend(["four", "four"]);
    assert_eq!(texts(&last_of(&c)), expected_five);
    if let Some(o) = &mut other {
        assert_eq!(
            texts(&last_of(&b)),
            ["one", "one", "two", "two"],
            "the second instance read what the first wrote"
        );
        o.stop().await;
    }
    let mut again = again;
    again.stop().await;
}
on_both_engines!(history_sees_turns_written_elsewhere);

/// The windows of many turns read at once (one statement on PostgreSQL) are exactly those read
/// one by one: short threads (head and tail overlap), long ones (turns left out between), a
/// turn before the first, and a thread with no turns.
async fn thread_windows_are_those_read_one_by_one(engine: Engine) {
    use switchboard::store::messages::{self, NewMessage};
    let mut t = spawn_app(engine, |_, _| {}).await;
    let db = t.open_db().await;
    let mut tx = db.begin().await.unwrap();
    let keys = [("api", "w-short", "t-short"), ("api", "w-long", "t-long")];
    let threads = messages::upsert_threads(&mut tx, &keys, 1).await.unwrap();
    let (short, long) = (
        threads[&("api".to_owned(), "w-short".to_owned())].clone(),
        threads[&("api".to_owned(), "w-long".to_owned())].clone(),
    );
    // Interleaved, so that neither thread's seqs are consecutive.
    let ids: Vec<(String, &str)> = (0..40)
        .map(|i| {
            let thread = if i % 8 == 0 { &short } else { &long };
            (uuid::Uuid::now_v7().to_string(), thread.as_str())
        })
        .collect();
    let rows: Vec<NewMessage<'_>> = ids
        .iter()
        .map(|(id, thread)| NewMessage {
            id,
            thread_id: thread,
            direction: "in",
            agent: "echo",
            transport: "api",
            answers: None,
            body: "{}",
        })
        .collect();
    let stored = messages::insert_many(&mut tx, &rows, 1).await.unwrap();
    tx.commit().await.unwrap();
    let seq_of = |i: usize| stored[i].seq;
    let asked: Vec<(&str, i64)> = vec![
        (&long, seq_of(39)),
        (&short, seq_of(32)),
        (&long, seq_of(1)),
        (&long, seq_of(20) + 1),
        (&short, i64::MAX),
        ("no-such-thread", i64::MAX),
    ];
    let (head, tail) = (2, 5);
    let together = messages::thread_windows(&db, &asked, head, tail)
        .await
        .unwrap();
    assert_eq!(together.len(), asked.len());
    for ((thread, before), window) in asked.iter().zip(&together) {
        let alone = messages::thread_turn_seqs(&db, thread, *before, head, tail)
            .await
            .unwrap();
        assert_eq!(window, &alone, "{thread} before {before}");
    }
    assert_eq!(
        together[0].len(),
        head + tail,
        "a long thread: head and tail"
    );
    assert_eq!(
        together[1].len(),
        4,
        "a short thread: every earlier turn, once"
    );
    assert!(together[2].is_empty(), "nothing before the first turn");
    assert!(together[5].is_empty());
    t.stop().await;
}
on_both_engines!(thread_windows_are_those_read_one_by_one);

async fn messages_arriving_together_on_a_new_thread_see_each_other(engine: Engine) {
    let agent = Arc::new(RecordingAgent::default());
    let a2 = agent.clone();
    let mut t = spawn_app(engine, move |_, o| o.agents.push(("rec".into(), a2))).await;
    let to = t.agent("rec");
    let p = t.app().pipeline().clone();
    // Concurrent ingests are committed together: one of them opens the thread.
    let all = (0..20).map(|i| {
        let (p, m) = (p.clone(), message(&to, "together", &format!("m{i}")));
        async move { p.ingest("test", &format!("tog-{i}"), m).await.unwrap() }
    });
    let outcomes = futures_util::future::join_all(all).await;
    assert!(
        outcomes
            .windows(2)
            .all(|w| w[0].thread_id == w[1].thread_id),
        "one thread"
    );
    wait_for(20, "all replies", || async {
        (t.transport.count() == 20).then_some(())
    })
    .await;
    let seen = agent.seen.lock().unwrap().clone();
    let without = seen.iter().filter(|m| m.history.is_none()).count();
    assert_eq!(without, 1, "only the opening message lacks history");
    t.stop().await;
}
on_both_engines!(messages_arriving_together_on_a_new_thread_see_each_other);

async fn bad_input_is_refused_before_storage(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let p = t.app().pipeline().clone();
    let mut empty = message(&t.agent("echo"), "k", "x");
    empty.parts.clear();
    assert_eq!(
        p.ingest("test", "e1", empty).await.unwrap_err().kind(),
        ErrorKind::Invalid
    );
    let unknown = message(&t.agent("nobody"), "k", "x");
    assert_eq!(
        p.ingest("test", "e2", unknown).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let elsewhere = message("@echo@elsewhere.example", "k", "x");
    assert_eq!(
        p.ingest("test", "e3", elsewhere).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let mut bad_sender = message(&t.agent("echo"), "k", "x");
    bad_sender.sender.address = "not-an-address".into();
    assert_eq!(
        p.ingest("test", "e4", bad_sender).await.unwrap_err().kind(),
        ErrorKind::Invalid
    );
    assert_eq!(
        p.ingest("test", "", message(&t.agent("echo"), "k", "x"))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Invalid
    );
    let db = t.open_db().await;
    assert!(
        job_states(&db).await.is_empty(),
        "nothing was stored or queued"
    );
    t.stop().await;
}
on_both_engines!(bad_input_is_refused_before_storage);

async fn failed_deliveries_are_retried_then_recorded(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    t.transport.fail_next(2);
    let out = t
        .ingest("r-1", message(&t.agent("echo"), "k", "retry me"))
        .await;
    wait_for(20, "delivery after two failures", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    let db = t.open_db().await;
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Rec {
        outcome: String,
        attempts: i64,
    }
    let rec: Rec = wait_for(10, "delivery record", || async {
        db.fetch_optional::<Rec>("SELECT outcome, attempts FROM deliveries", &[])
            .await
            .unwrap()
    })
    .await;
    assert_eq!((rec.outcome.as_str(), rec.attempts), ("delivered", 3));
    assert_eq!(t.transport.delivered()[0].attempt, 3);
    assert_eq!(t.transport.delivered()[0].original.id, out.message_id);
    t.stop().await;
}
on_both_engines!(failed_deliveries_are_retried_then_recorded);

async fn undeliverable_responses_end_dead_and_can_be_retried(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    // Ingested under a transport that is not registered: the delivery can never succeed.
    t.app()
        .pipeline()
        .ingest("ghost", "g-1", message(&t.agent("echo"), "k", "boo"))
        .await
        .unwrap();
    let db = t.open_db().await;
    let dead = wait_for(20, "a dead delivery job", || async {
        let d = jobs::list(&db, Some("dead"), None, 10).await.unwrap();
        (!d.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(dead[0].kind, "deliver");
    assert_eq!(dead[0].attempts, 1, "a permanent failure is not retried");
    assert!(
        dead[0]
            .last_error
            .as_deref()
            .unwrap()
            .contains("no transport named \"ghost\"")
    );
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Rec {
        outcome: String,
    }
    let rec: Vec<Rec> = db
        .fetch_all("SELECT outcome FROM deliveries", &[])
        .await
        .unwrap();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].outcome, "failed");
    assert_eq!(jobs::retry_dead(&db, None, 0).await.unwrap(), 1);
    wait_for(20, "the retried job dead again", || async {
        let d = jobs::list(&db, Some("dead"), None, 10).await.unwrap();
        (d.len() == 1 && d[0].attempts == 1).then_some(())
    })
    .await;
    assert_eq!(jobs::purge(&db, "dead").await.unwrap(), 1);
    assert!(
        jobs::purge(&db, "ready").await.is_err(),
        "live jobs are never purged"
    );
    t.stop().await;
}
on_both_engines!(undeliverable_responses_end_dead_and_can_be_retried);

async fn an_agent_never_answers_itself(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let mut m = message(&t.agent("echo"), "k", "loop?");
    m.sender.address = t.agent("echo");
    t.ingest("self-1", m).await;
    let db = t.open_db().await;
    wait_for(20, "dispatch done", || async {
        (job_states(&db).await.get("done") == Some(&1)).then_some(())
    })
    .await;
    assert_eq!(t.transport.count(), 0);
    t.stop().await;
}
on_both_engines!(an_agent_never_answers_itself);

async fn leases_are_released_or_reaped(engine: Engine) {
    // No workers: the test plays the worker.
    let mut t = spawn_app(engine, |_, o| o.workers = false).await;
    for i in 0..3 {
        t.ingest(&format!("l-{i}"), message(&t.agent("echo"), "k", "x"))
            .await;
    }
    let db = t.open_db().await;
    let now = 4_000_000_000_000; // far after the jobs' run_at
    let claimed = jobs::claim(&db, "dispatch", "worker-a", now, now + 1_000, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(
        jobs::claim(&db, "dispatch", "worker-b", now, now + 1_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "leased jobs are not claimed twice"
    );
    // A failed batch hands its jobs back at once; another owner cannot release them.
    assert_eq!(
        jobs::release_many(&db, &claimed[..1], "worker-b", now + 500)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        jobs::release_many(&db, &claimed[..1], "worker-a", now + 500)
            .await
            .unwrap(),
        1
    );
    // An expired lease comes back through the reaper, only once it has expired.
    assert_eq!(
        jobs::reap_expired(&db, "dispatch", now + 999)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        jobs::reap_expired(&db, "dispatch", now + 1_001)
            .await
            .unwrap(),
        2
    );
    let again = jobs::claim(&db, "dispatch", "worker-b", now + 1_001, now + 2_000, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 3);
    assert!(
        again.iter().all(|j| j.attempts == 2),
        "the lost attempt counts"
    );
    t.stop().await;
}
on_both_engines!(leases_are_released_or_reaped);

on_both_engines!(no_reply_from_an_agent_sends_nothing);

/// An agent that answers `NO_REPLY` (the echo agent, echoing it) has nothing to say: nothing is
/// delivered, the message's status is `no_reply`, and an A2A task still completes, without an
/// artifact. Text around the token, or anything beside it, is an answer like any other.
async fn no_reply_from_an_agent_sends_nothing(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    let echo = t.agent("echo");
    let silent = message(&echo, "quiet", "  NO_REPLY \n");
    let silent_id = silent.id.clone();
    t.ingest("q1", silent).await;
    t.ingest("q2", message(&echo, "loud", "NO_REPLY, but more"))
        .await;
    let d = wait_for(20, "the one answer", || async {
        let d = t.transport.delivered();
        (!d.is_empty()).then_some(d)
    })
    .await;
    assert_eq!(text_of(&d[0].response.parts), "NO_REPLY, but more");
    let status: serde_json::Value = wait_for(20, "the silent message's status", || async {
        let v: serde_json::Value = t
            .http
            .get(format!("{}/api/v1/messages/{silent_id}", t.base))
            .bearer_auth("test-token")
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (v["status"] == "no_reply").then_some(v)
    })
    .await;
    assert_eq!(status["status"], "no_reply");
    assert_eq!(
        t.transport.delivered().len(),
        1,
        "nothing went out for NO_REPLY"
    );

    let (_, _, sent) = crate::helpers::a2a_send(&t, "echo", None, "NO_REPLY").await;
    let id = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    let task = crate::helpers::a2a_task_ended(&t, "echo", &id).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert!(
        task["artifacts"].as_array().is_none_or(Vec::is_empty),
        "{task}"
    );
}
