//! The pipeline's caches against the database as the oracle: one scripted conversation (three
//! threads, a window shorter than the threads, an erased message, a restart, and on PostgreSQL
//! a second instance taking turns with the first) gives every dispatch the same history with
//! the caches on as with them off.

use std::sync::Arc;

use switchboard::message::{NormalizedMessage, Part};

use crate::helpers::{
    Engine, RecordingAgent, TestApp, TestDb, fresh_db, message, on_both_engines, spawn_on, wait_for,
};

/// What a dispatch showed its agent: the turn's text, then each history turn as role, sender
/// and text (ids and the responses' time stamps differ from run to run; the rest may not).
fn shown(m: &NormalizedMessage) -> String {
    let text = |parts: &[Part]| {
        parts
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!("turn {}", text(&m.parts));
    for h in m.history.iter().flatten() {
        out.push_str(&format!(
            "\n  {:?} {} {}",
            h.role,
            h.sender.address,
            text(&h.parts)
        ));
    }
    out
}

struct Run {
    agent: Arc<RecordingAgent>,
    caches: bool,
}

impl Run {
    async fn spawn(&self, db: TestDb) -> TestApp {
        let (agent, caches) = (self.agent.clone(), self.caches);
        spawn_on(db, move |c, o| {
            // One name across restarts and instances: the agent's own turns stay its own.
            c.server.public_url = Some("https://switchboard.example".into());
            // Threads longer than head + window: history is trimmed.
            c.history.keep_head = 1;
            c.history.window = 4;
            o.caches = caches;
            o.agents.push(("echo".into(), agent));
        })
        .await
    }

    /// Sends step `i` into thread `i % 3` through `via`, and waits for its answer to be
    /// delivered by whichever of the running instances (the next step's history must hold it).
    /// Returns the stored message's id.
    async fn send(&mut self, via: &TestApp, others: &[&TestApp], i: usize) -> String {
        let delivered =
            || via.transport.count() + others.iter().map(|o| o.transport.count()).sum::<u64>();
        let want = delivered() + 1;
        let to = via.agent("echo");
        let m = message(&to, &format!("thread-{}", i % 3), &format!("step {i}"));
        let stored = via.ingest(&format!("e{i}"), m).await;
        wait_for(30, "the step's answer delivered", || async {
            (delivered() >= want).then_some(())
        })
        .await;
        stored.message_id
    }
}

/// The histories one whole conversation showed, in order.
async fn conversation(engine: Engine, caches: bool) -> Vec<String> {
    let mut run = Run {
        agent: Arc::new(RecordingAgent::default()),
        caches,
    };
    let mut db = fresh_db(engine).await;
    let url = db.url.clone();
    let mut a = run.spawn(db.take()).await;
    let mut erased = String::new();
    for i in 0..12 {
        let id = run.send(&a, &[], i).await;
        if i == 10 {
            erased = id;
        }
    }
    // The author deletes step 10 (thread 1, in the window of its next turns): later turns no
    // longer show it.
    let n = a
        .app()
        .pipeline()
        .erase(std::slice::from_ref(&erased), None)
        .await
        .unwrap();
    assert_eq!(n, 1);
    for i in 12..18 {
        run.send(&a, &[], i).await;
    }
    // A restart: what was held is gone, the database is not.
    a.stop().await;
    let mut a = run.spawn(TestDb::url_only(url.clone())).await;
    for i in 18..24 {
        run.send(&a, &[], i).await;
    }
    // A second instance on the same PostgreSQL database: the two take turns, each dispatching
    // whatever it claims, each holding only what it stored itself.
    if engine == Engine::Postgres {
        let mut b = run.spawn(TestDb::url_only(url)).await;
        for i in 24..36 {
            if i % 2 == 0 {
                run.send(&a, &[&b], i).await;
            } else {
                run.send(&b, &[&a], i).await;
            }
        }
        b.stop().await;
    }
    a.stop().await;
    drop(db);
    let seen = run.agent.seen.lock().unwrap();
    seen.iter().map(shown).collect()
}

async fn the_caches_change_no_history(engine: Engine) {
    let on = conversation(engine, true).await;
    let off = conversation(engine, false).await;
    let steps = if engine == Engine::Postgres { 36 } else { 24 };
    assert_eq!(off.len(), steps, "every step reached the agent once");
    // The oracle shows what a conversation should: thread 0's step 12 sees the head (step 0)
    // and the latest turns (step 9 and its answer), not what lies between (step 3); a restart
    // changes nothing of that (step 21 sees step 18's answer as the agent's own).
    let has = |h: &str, step: usize, role: &str| {
        h.lines()
            .any(|l| l.contains(role) && l.ends_with(&format!("\"step {step}\"}}")))
    };
    assert!(
        has(&off[12], 0, "User") && has(&off[12], 9, "User"),
        "{}",
        off[12]
    );
    assert!(
        has(&off[12], 9, "Assistant") && !has(&off[12], 3, "User"),
        "{}",
        off[12]
    );
    assert!(has(&off[21], 18, "Assistant"), "{}", off[21]);
    assert!(
        has(&off[13], 10, "Assistant"),
        "only the erased message goes: {}",
        off[13]
    );
    assert!(
        off[12..].iter().all(|h| !has(h, 10, "User")),
        "the erased step is shown to no later turn"
    );
    for (i, (with, without)) in on.iter().zip(&off).enumerate() {
        assert_eq!(
            with, without,
            "step {i}: history with the caches on differs"
        );
    }
    assert_eq!(on.len(), off.len());
}

on_both_engines!(the_caches_change_no_history);
