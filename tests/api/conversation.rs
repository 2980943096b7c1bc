//! Conversation semantics end to end: the inbound debounce merges a sender's quick texts into
//! one turn, and a thread runs one turn at a time — a message arriving meanwhile follows up,
//! is collected with the others, or interrupts the call in flight. On PostgreSQL the same holds
//! across two instances of one database, and so does an agent's `max_concurrent_calls`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchboard::config::QueueMode;
use switchboard::message::{NormalizedMessage, Part, Role};

use crate::helpers::{Engine, TestApp, message, on_both_engines, spawn_app, wait_for};
use crate::pipeline::text_of;

/// One call an agent got: the message, when it started, and when it finished (never, when it
/// was cancelled).
#[derive(Debug, Clone)]
struct Call {
    msg: NormalizedMessage,
    started: Instant,
    finished: Option<Instant>,
}

/// An agent that echoes, taking `SLOW` for a message whose text contains "slow", and records
/// its calls.
#[derive(Debug, Default)]
struct Paced {
    calls: Mutex<Vec<Call>>,
    /// Calls in flight, and the most there ever were at once.
    active: AtomicUsize,
    peak: AtomicUsize,
}

/// Counts a call in flight while it lives (a cancelled call too, until it is dropped).
struct InFlight<'a>(&'a Paced);

impl<'a> InFlight<'a> {
    fn new(paced: &'a Paced) -> Self {
        let now = paced.active.fetch_add(1, Ordering::SeqCst) + 1;
        paced.peak.fetch_max(now, Ordering::SeqCst);
        Self(paced)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

const SLOW: Duration = Duration::from_millis(1500);

impl Paced {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    async fn wait_calls(&self, n: usize) -> Vec<Call> {
        wait_for(30, &format!("{n} agent calls"), || async {
            let c = self.calls();
            (c.len() >= n).then_some(c)
        })
        .await
    }
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for Paced {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<switchboard::message::NormalizedResponse>, switchboard::error::OutboundError>
    {
        let _in_flight = InFlight::new(self);
        let i = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Call {
                msg: msg.clone(),
                started: Instant::now(),
                finished: None,
            });
            calls.len() - 1
        };
        if text_of(&msg.parts).contains("slow") {
            tokio::time::sleep(SLOW).await;
        }
        self.calls.lock().unwrap()[i].finished = Some(Instant::now());
        switchboard::agents::AgentBackend::respond(&switchboard::agents::EchoAgent, msg).await
    }
}

async fn app(engine: Engine, debounce_ms: u64, queue: QueueMode) -> (TestApp, Arc<Paced>) {
    let agent = Arc::new(Paced::default());
    let a2 = agent.clone();
    let t = spawn_app(engine, move |c, o| {
        c.conversation.debounce_ms = debounce_ms;
        c.conversation.queue = queue;
        o.agents.push(("paced".into(), a2));
    })
    .await;
    (t, agent)
}

fn from(sender: &str, to: &str, thread: &str, text: &str) -> NormalizedMessage {
    let mut m = message(to, thread, text);
    m.sender.address = sender.into();
    m
}

const ALICE: &str = "@alice@remote.example";
const BOB: &str = "@bob@remote.example";

/// A message's status from the read API.
async fn status(t: &TestApp, id: &str) -> String {
    let v: serde_json::Value = t
        .http
        .get(format!("{}/api/v1/messages/{id}", t.base))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["status"].as_str().unwrap_or_default().to_owned()
}

/// Waits until every message has a final status, and returns them in order.
async fn final_statuses(t: &TestApp, ids: &[String]) -> Vec<String> {
    wait_for(30, "every message to end", || async {
        let mut all = Vec::new();
        for id in ids {
            let s = status(t, id).await;
            if !matches!(
                s.as_str(),
                "delivered" | "merged" | "interrupted" | "no_reply" | "failed"
            ) {
                return None;
            }
            all.push(s);
        }
        Some(all)
    })
    .await
}

async fn debounce_merges_a_senders_quick_texts(engine: Engine) {
    let (mut t, agent) = app(engine, 500, QueueMode::Followup).await;
    let to = t.agent("paced");
    let mut ids = Vec::new();
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        let m = from(ALICE, &to, "quick", text);
        ids.push(m.id.clone());
        t.ingest(&format!("q-{i}"), m).await;
    }
    let bob = from(BOB, &to, "quick", "hi from bob");
    ids.push(bob.id.clone());
    t.ingest("q-bob", bob).await;
    let statuses = final_statuses(&t, &ids).await;
    assert_eq!(statuses, ["merged", "merged", "delivered", "delivered"]);
    let calls = agent.calls();
    assert_eq!(calls.len(), 2, "one turn for alice, one for bob: {calls:?}");
    let alice = calls
        .iter()
        .find(|c| c.msg.sender.address == ALICE)
        .unwrap();
    assert_eq!(text_of(&alice.msg.parts), "one|two|three");
    assert_eq!(alice.msg.id, ids[2], "the latest message carries the turn");
    let history: Vec<String> = alice
        .msg
        .history
        .iter()
        .flatten()
        .map(|h| text_of(&h.parts))
        .collect();
    assert!(
        !history.iter().any(|h| h == "one" || h == "two"),
        "merged messages are not repeated in the history: {history:?}"
    );
    let bob = calls.iter().find(|c| c.msg.sender.address == BOB).unwrap();
    assert_eq!(
        text_of(&bob.msg.parts),
        "hi from bob",
        "bob's is not merged"
    );
    assert_eq!(t.transport.count(), 2);

    let metrics = t.metrics().await;
    assert!(
        metrics.contains("switchboard_turns_total{outcome=\"merged\"} 2"),
        "{metrics}"
    );
    t.stop().await;
}
on_both_engines!(debounce_merges_a_senders_quick_texts);

async fn a_link_flushes_the_waiting_text_at_once(engine: Engine) {
    let (mut t, agent) = app(engine, 5_000, QueueMode::Followup).await;
    let to = t.agent("paced");
    let text = from(ALICE, &to, "flush", "look at this");
    let text_id = text.id.clone();
    let mut link = from(ALICE, &to, "flush", "and");
    link.parts.push(
        serde_json::from_value::<Part>(
            serde_json::json!({"kind": "link", "url": "https://example.com/a"}),
        )
        .unwrap(),
    );
    t.ingest("f-1", text).await;
    let sent = Instant::now();
    t.ingest("f-2", link).await;
    let calls = agent.wait_calls(1).await;
    assert!(
        calls[0].started.duration_since(sent) < Duration::from_millis(4_000),
        "the link did not wait for the debounce"
    );
    assert_eq!(text_of(&calls[0].msg.parts), "look at this|and");
    assert!(matches!(calls[0].msg.parts.last(), Some(Part::Link(_))));
    // Marked by the commit of the batch that answered the link, which follows the call: well
    // before the text's own debounce (5 s from its arrival) would have run it.
    wait_for(4, "the text marked merged at once", || async {
        (status(&t, &text_id).await == "merged").then_some(())
    })
    .await;
    // The text's own job runs when its debounce is over, and finds nothing left to do.
    let db = t.open_db().await;
    wait_for(30, "the merged text's own job", || async {
        let job = switchboard::store::jobs::get(&db, &format!("dispatch:{text_id}"))
            .await
            .unwrap()?;
        (job.state == "done").then_some(())
    })
    .await;
    assert_eq!(
        agent.calls().len(),
        1,
        "the merged text is not answered again"
    );
    assert_eq!(t.transport.count(), 1);
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("switchboard_turns_total{outcome=\"merged\"} 1"),
        "{metrics}"
    );
    t.stop().await;
}
on_both_engines!(a_link_flushes_the_waiting_text_at_once);

async fn without_a_debounce_every_message_is_a_turn(engine: Engine) {
    let (mut t, agent) = app(engine, 0, QueueMode::Followup).await;
    let to = t.agent("paced");
    // The first is slow: the others arrive while it runs, and its answer is stored after them.
    for (i, text) in ["slow one", "two", "three"].iter().enumerate() {
        t.ingest(&format!("n-{i}"), from(ALICE, &to, "plain", text))
            .await;
    }
    let calls = agent.wait_calls(3).await;
    let texts: Vec<String> = calls.iter().map(|c| text_of(&c.msg.parts)).collect();
    assert_eq!(
        texts,
        ["slow one", "two", "three"],
        "in order, one call each"
    );
    // Followup: each saw the answers before it, each right after its question.
    let last = calls[2].msg.history.as_ref().unwrap();
    assert_eq!(
        last.iter().map(|h| h.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    assert_eq!(
        last.iter().map(|h| text_of(&h.parts)).collect::<Vec<_>>(),
        ["slow one", "slow one", "two", "two"]
    );
    assert!(calls[1].started >= calls[0].finished.unwrap());
    assert!(calls[2].started >= calls[1].finished.unwrap());
    t.stop().await;
}
on_both_engines!(without_a_debounce_every_message_is_a_turn);

async fn a_followup_runs_after_the_answer_and_other_threads_do_not_wait(engine: Engine) {
    let (mut t, agent) = app(engine, 0, QueueMode::Followup).await;
    let to = t.agent("paced");
    t.ingest("s-1", from(ALICE, &to, "busy", "slow first"))
        .await;
    agent.wait_calls(1).await;
    t.ingest("s-2", from(ALICE, &to, "busy", "second")).await;
    t.ingest("s-3", from(BOB, &to, "elsewhere", "other thread"))
        .await;
    let calls = agent.wait_calls(3).await;
    let first = &calls[0];
    let other = calls
        .iter()
        .find(|c| text_of(&c.msg.parts) == "other thread")
        .unwrap();
    assert!(
        other.started < first.finished.unwrap(),
        "another thread ran while the slow call was in flight"
    );
    let second = calls
        .iter()
        .find(|c| text_of(&c.msg.parts) == "second")
        .unwrap();
    assert!(second.started >= first.finished.unwrap());
    let history = second.msg.history.as_ref().unwrap();
    assert_eq!(
        history.iter().map(|h| h.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant],
        "the follow-up sees the first answer"
    );
    assert_eq!(text_of(&history[1].parts), "slow first");
    assert_eq!(calls.len(), 3);
    t.stop().await;
}
on_both_engines!(a_followup_runs_after_the_answer_and_other_threads_do_not_wait);

async fn slow_calls_on_every_worker_do_not_hold_back_another_thread(engine: Engine) {
    // Two threads' slow calls, one on each of the two dispatch workers, and then a third
    // thread's message: it is answered while both still run.
    let (mut t, agent) = app(engine, 0, QueueMode::Followup).await;
    let to = t.agent("paced");
    t.ingest("w-1", from(ALICE, &to, "first", "slow one")).await;
    agent.wait_calls(1).await;
    t.ingest("w-2", from(BOB, &to, "second", "slow two")).await;
    agent.wait_calls(2).await;
    t.ingest("w-3", from(ALICE, &to, "third", "quick")).await;
    let calls = agent.wait_calls(3).await;
    let quick = calls
        .iter()
        .find(|c| text_of(&c.msg.parts) == "quick")
        .unwrap();
    assert!(
        calls
            .iter()
            .filter(|c| text_of(&c.msg.parts).starts_with("slow"))
            .all(|c| c.finished.is_none_or(|done| quick.started < done)),
        "the third thread's call started before either slow call finished"
    );
    assert_eq!(calls.len(), 3);
    t.stop().await;
}
on_both_engines!(slow_calls_on_every_worker_do_not_hold_back_another_thread);

async fn collect_runs_only_the_latest_of_what_waited(engine: Engine) {
    let (mut t, agent) = app(engine, 0, QueueMode::Collect).await;
    let to = t.agent("paced");
    let first = from(ALICE, &to, "busy", "slow first");
    let mut ids = vec![first.id.clone()];
    t.ingest("c-0", first).await;
    agent.wait_calls(1).await;
    for (i, text) in ["a", "b", "c"].iter().enumerate() {
        let m = from(ALICE, &to, "busy", text);
        ids.push(m.id.clone());
        t.ingest(&format!("c-{}", i + 1), m).await;
    }
    let statuses = final_statuses(&t, &ids).await;
    assert_eq!(statuses, ["delivered", "merged", "merged", "delivered"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = agent.calls();
    assert_eq!(calls.len(), 2, "exactly one more call: {calls:?}");
    assert_eq!(text_of(&calls[1].msg.parts), "a|b|c");
    assert!(calls[1].started >= calls[0].finished.unwrap());
    let history = calls[1].msg.history.as_ref().unwrap();
    assert_eq!(history.len(), 2, "the first turn and its answer only");
    assert_eq!(t.transport.count(), 2);
    t.stop().await;
}
on_both_engines!(collect_runs_only_the_latest_of_what_waited);

async fn interrupt_cancels_the_call_in_flight(engine: Engine) {
    let (mut t, agent) = app(engine, 0, QueueMode::Interrupt).await;
    let to = t.agent("paced");
    let first = from(ALICE, &to, "busy", "slow first");
    let first_id = first.id.clone();
    t.ingest("i-0", first).await;
    agent.wait_calls(1).await;
    let second = from(ALICE, &to, "busy", "never mind");
    let second_id = second.id.clone();
    t.ingest("i-1", second).await;
    let statuses = final_statuses(&t, &[first_id, second_id]).await;
    assert_eq!(statuses, ["interrupted", "delivered"]);
    let calls = agent.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].finished.is_none(), "the first call was cancelled");
    let history = calls[1].msg.history.as_ref().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].role, Role::User);
    assert_eq!(text_of(&history[0].parts), "slow first");
    tokio::time::sleep(SLOW).await;
    assert_eq!(t.transport.count(), 1, "exactly one response");
    assert_eq!(
        text_of(&t.transport.delivered()[0].response.parts),
        "never mind"
    );
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("switchboard_turns_total{outcome=\"interrupted\"} 1"),
        "{metrics}"
    );
    t.stop().await;
}
on_both_engines!(interrupt_cancels_the_call_in_flight);

/// An A2A send of `text` to `agent`, returning at once: its task id and context id. Without
/// `context` it opens a conversation (the server names its context: an anonymous caller
/// continues only a context the server gave it), with one it continues that conversation.
async fn a2a_in_context(
    t: &TestApp,
    agent: &str,
    context: Option<&str>,
    text: &str,
) -> (String, String) {
    let mut message = serde_json::json!({"messageId": uuid::Uuid::now_v7().to_string(),
        "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(c) = context {
        message["contextId"] = serde_json::json!(c);
    }
    let sent: serde_json::Value = t
        .http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": message, "configuration": {"returnImmediately": true}}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = &sent["result"]["task"];
    let id = task["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {sent}"));
    (
        id.to_owned(),
        task["contextId"].as_str().unwrap().to_owned(),
    )
}

/// The A2A task `id`, once it has completed.
async fn completed_task(t: &TestApp, agent: &str, id: &str) -> serde_json::Value {
    let task = crate::helpers::a2a_task_ended(t, agent, id).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task
}

/// Over A2A, an interrupted turn and a merged one still end their tasks, without an artifact;
/// the turn that answers has one.
async fn a2a_tasks_of_merged_and_interrupted_turns_still_end(engine: Engine) {
    let (mut t, agent) = app(engine, 0, QueueMode::Interrupt).await;
    let (first, ctx) = a2a_in_context(&t, "paced", None, "slow first").await;
    agent.wait_calls(1).await;
    let (second, _) = a2a_in_context(&t, "paced", Some(&ctx), "never mind").await;
    let interrupted = completed_task(&t, "paced", &first).await;
    assert!(
        interrupted["artifacts"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{interrupted}"
    );
    let answered = completed_task(&t, "paced", &second).await;
    assert_eq!(
        answered["artifacts"][0]["parts"][0]["text"], "never mind",
        "{answered}"
    );
    assert!(
        agent.calls()[0].finished.is_none(),
        "the first was cancelled"
    );
    t.stop().await;

    let (mut t, agent) = app(engine, 0, QueueMode::Collect).await;
    let (first, ctx) = a2a_in_context(&t, "paced", None, "slow first").await;
    agent.wait_calls(1).await;
    let (merged, _) = a2a_in_context(&t, "paced", Some(&ctx), "a").await;
    let (latest, _) = a2a_in_context(&t, "paced", Some(&ctx), "b").await;
    for (id, answered) in [(first, true), (merged, false), (latest, true)] {
        let task = completed_task(&t, "paced", &id).await;
        let artifacts = task["artifacts"].as_array().map_or(0, Vec::len);
        assert_eq!(artifacts > 0, answered, "{task}");
    }
    let calls = agent.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(text_of(&calls[1].msg.parts), "a|b");
    t.stop().await;
}
on_both_engines!(a2a_tasks_of_merged_and_interrupted_turns_still_end);

/// Two instances of one PostgreSQL database hosting the `paced` agent (one backend, whose calls
/// are counted together), with the debounce, queue mode and `max_concurrent_calls` given; `None`
/// without PostgreSQL.
async fn two_instances(
    debounce_ms: u64,
    queue: QueueMode,
    max_calls: usize,
) -> Option<(TestApp, TestApp, Arc<Paced>)> {
    if crate::helpers::postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: two-instance test skipped");
        return None;
    }
    let db = crate::helpers::fresh_db(Engine::Postgres).await;
    let url = db.url.clone();
    let agent = Arc::new(Paced::default());
    let spawn = |db: crate::helpers::TestDb| {
        let agent = agent.clone();
        crate::helpers::spawn_on(db, move |c, o| {
            c.conversation.debounce_ms = debounce_ms;
            c.conversation.queue = queue;
            c.limits.max_concurrent_calls = Some(max_calls);
            // One service: both instances answer for the same addresses.
            c.server.public_url = Some("https://bridge.example".into());
            o.agents.push(("paced".into(), agent));
        })
    };
    let a = spawn(db).await;
    let b = spawn(crate::helpers::TestDb::url_only(url)).await;
    Some((a, b, agent))
}

/// Responses delivered by either instance.
fn delivered(a: &TestApp, b: &TestApp) -> u64 {
    a.transport.count() + b.transport.count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followups_across_two_instances_run_one_at_a_time_in_order_postgres() {
    let Some((mut a, mut b, agent)) = two_instances(0, QueueMode::Followup, 16).await else {
        return;
    };
    let to = a.agent("paced");
    let first = from(ALICE, &to, "busy", "slow first");
    let mut ids = vec![first.id.clone()];
    a.ingest("f-0", first).await;
    agent.wait_calls(1).await;
    for i in 1..=4 {
        let m = from(ALICE, &to, "busy", &format!("then {i}"));
        ids.push(m.id.clone());
        let on = if i % 2 == 1 { &b } else { &a };
        on.ingest(&format!("f-{i}"), m).await;
    }
    let statuses = final_statuses(&a, &ids).await;
    assert_eq!(statuses, ["delivered"; 5]);
    let calls = agent.calls();
    let texts: Vec<String> = calls.iter().map(|c| text_of(&c.msg.parts)).collect();
    assert_eq!(
        texts,
        ["slow first", "then 1", "then 2", "then 3", "then 4"],
        "one call per message, in the order they were stored"
    );
    assert_eq!(agent.peak.load(Ordering::SeqCst), 1, "never two at once");
    for (i, call) in calls.iter().enumerate() {
        let history = call.msg.history.as_deref().unwrap_or_default();
        assert_eq!(
            history.len(),
            2 * i,
            "turn {i} sees every earlier turn and its answer"
        );
    }
    assert_eq!(delivered(&a, &b), 5, "each answered once");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_across_two_instances_runs_only_the_latest_postgres() {
    let Some((mut a, mut b, agent)) = two_instances(0, QueueMode::Collect, 16).await else {
        return;
    };
    let to = a.agent("paced");
    let first = from(ALICE, &to, "busy", "slow first");
    let mut ids = vec![first.id.clone()];
    a.ingest("c-0", first).await;
    agent.wait_calls(1).await;
    for (i, text) in ["a", "b", "c"].iter().enumerate() {
        let m = from(ALICE, &to, "busy", text);
        ids.push(m.id.clone());
        let on = if i % 2 == 0 { &b } else { &a };
        on.ingest(&format!("c-{}", i + 1), m).await;
    }
    let statuses = final_statuses(&a, &ids).await;
    assert_eq!(statuses, ["delivered", "merged", "merged", "delivered"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = agent.calls();
    assert_eq!(calls.len(), 2, "exactly one more call: {calls:?}");
    assert_eq!(text_of(&calls[1].msg.parts), "a|b|c");
    assert!(calls[1].started >= calls[0].finished.unwrap());
    assert_eq!(agent.peak.load(Ordering::SeqCst), 1);
    assert_eq!(delivered(&a, &b), 2);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_stored_by_one_instance_interrupts_the_run_on_the_other_postgres() {
    let Some((mut a, mut b, agent)) = two_instances(0, QueueMode::Interrupt, 16).await else {
        return;
    };
    let to = a.agent("paced");
    let first = from(ALICE, &to, "busy", "slow first");
    let first_id = first.id.clone();
    a.ingest("i-0", first).await;
    agent.wait_calls(1).await;
    let second = from(ALICE, &to, "busy", "never mind");
    let second_id = second.id.clone();
    b.ingest("i-1", second).await;
    let statuses = final_statuses(&a, &[first_id, second_id]).await;
    assert_eq!(statuses, ["interrupted", "delivered"]);
    let calls = agent.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].finished.is_none(), "the first call was cancelled");
    assert_eq!(agent.peak.load(Ordering::SeqCst), 1);
    tokio::time::sleep(SLOW).await;
    assert_eq!(delivered(&a, &b), 1, "exactly one response");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debounce_across_two_instances_merges_a_senders_quick_texts_postgres() {
    let Some((mut a, mut b, agent)) = two_instances(500, QueueMode::Followup, 16).await else {
        return;
    };
    let to = a.agent("paced");
    let mut ids = Vec::new();
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        let m = from(ALICE, &to, "quick", text);
        ids.push(m.id.clone());
        let on = if i % 2 == 0 { &a } else { &b };
        on.ingest(&format!("q-{i}"), m).await;
    }
    let statuses = final_statuses(&a, &ids).await;
    assert_eq!(statuses, ["merged", "merged", "delivered"]);
    let calls = agent.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(text_of(&calls[0].msg.parts), "one|two|three");
    assert_eq!(delivered(&a, &b), 1);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_calls_holds_across_two_instances_postgres() {
    let Some((mut a, mut b, agent)) = two_instances(0, QueueMode::Followup, 2).await else {
        return;
    };
    let to = a.agent("paced");
    let mut ids = Vec::new();
    for i in 0..6 {
        let m = from(ALICE, &to, &format!("thread-{i}"), "slow");
        ids.push(m.id.clone());
        let on = if i % 2 == 0 { &a } else { &b };
        on.ingest(&format!("m-{i}"), m).await;
    }
    let statuses = final_statuses(&a, &ids).await;
    assert_eq!(statuses, ["delivered"; 6]);
    assert_eq!(agent.calls().len(), 6, "each message called once");
    assert_eq!(
        agent.peak.load(Ordering::SeqCst),
        2,
        "two calls at once across both instances, never more"
    );
    assert_eq!(delivered(&a, &b), 6);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_lease_of_a_dead_instance_expires_postgres() {
    let Some((mut a, mut b, agent)) = two_instances(0, QueueMode::Followup, 16).await else {
        return;
    };
    b.stop().await;
    let to = a.agent("paced");
    let first = from(ALICE, &to, "orphan", "hello");
    let first_id = first.id.clone();
    let thread = a.ingest("d-0", first).await.thread_id;
    assert_eq!(final_statuses(&a, &[first_id]).await, ["delivered"]);
    // An instance that died mid-run left its lease on the thread, for another 1.5 s.
    let now_ms = a.app().pipeline().clock().now_ms();
    let lease_ends = Instant::now() + Duration::from_millis(1500);
    let db = a.open_db().await;
    use switchboard::store::Arg;
    db.execute(
        "INSERT INTO run_leases (thread_id, agent, owner, until_ms) VALUES ($1, 'paced', 'gone', $2)",
        &[Arg::Text(&thread), Arg::Int(now_ms + 1500)],
    )
    .await
    .unwrap();
    let second = from(ALICE, &to, "orphan", "still there?");
    let second_id = second.id.clone();
    a.ingest("d-1", second).await;
    assert_eq!(final_statuses(&a, &[second_id]).await, ["delivered"]);
    let calls = agent.calls();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[1].started >= lease_ends,
        "not run while the dead instance's lease was live"
    );
    a.stop().await;
}
