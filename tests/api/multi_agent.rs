//! Multi-agent conversations: an agent's answer that mentions another local agent wakes it in
//! the same thread, with the hop limit and the no-revisit rule, and every transport renders it
//! in its own terms (A2A: one combined answer).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use switchboard::error::OutboundError;
use switchboard::message::{NormalizedMessage, NormalizedResponse, Part};

use crate::helpers::{Engine, TestApp, job_states, message, on_both_engines, spawn_app, wait_for};
use crate::pipeline::text_of;

/// An agent that answers "{name} says hi" and mentions the agents it is told to: in
/// `response.mentions`, or written inline in its text.
#[derive(Debug, Default)]
pub struct MentionAgent {
    pub name: String,
    /// Addresses to mention on every answer.
    pub mentions: Mutex<Vec<String>>,
    /// Write them in the text instead of `mentions`.
    pub inline: bool,
    pub calls: AtomicUsize,
    pub seen: Mutex<Vec<NormalizedMessage>>,
}

impl MentionAgent {
    pub fn new(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            ..Self::default()
        })
    }

    /// One that writes its mentions in its text.
    pub fn inline(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            inline: true,
            ..Self::default()
        })
    }

    /// From now on, mentions `addresses` (known once the server runs: they name its domain).
    pub fn mention(&self, addresses: &[&String]) {
        *self.mentions.lock().unwrap() = addresses.iter().map(|a| (*a).clone()).collect();
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<NormalizedMessage> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for MentionAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, OutboundError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen.lock().unwrap().push(msg.clone());
        let mentions = self.mentions.lock().unwrap().clone();
        let mut text = format!("{} says hi", self.name);
        if self.inline {
            for m in &mentions {
                text.push_str(&format!(" {m}"));
            }
        }
        let mut r = NormalizedResponse::reply_to(msg, vec![Part::text(text)]);
        if !self.inline && !mentions.is_empty() {
            r.mentions = Some(mentions);
        }
        Ok(Some(r))
    }
}

/// A server whose agents are `agents` (name, backend), with `max_hops` as every agent's limit.
async fn spawn_with(
    engine: Engine,
    max_hops: Option<u32>,
    agents: &[(&str, Arc<MentionAgent>)],
) -> TestApp {
    let agents: Vec<(String, Arc<dyn switchboard::agents::AgentBackend>)> = agents
        .iter()
        .map(|(n, a)| {
            (
                (*n).to_owned(),
                a.clone() as Arc<dyn switchboard::agents::AgentBackend>,
            )
        })
        .collect();
    spawn_app(engine, move |c, o| {
        c.limits.max_hops = max_hops;
        o.agents.extend(agents);
    })
    .await
}

/// A server with three mention agents, `a`, `b` and `c`.
async fn trio(
    engine: Engine,
    max_hops: Option<u32>,
) -> (
    TestApp,
    Arc<MentionAgent>,
    Arc<MentionAgent>,
    Arc<MentionAgent>,
) {
    let (a, b, c) = (
        MentionAgent::new("a"),
        MentionAgent::new("b"),
        MentionAgent::new("c"),
    );
    let t = spawn_with(
        engine,
        max_hops,
        &[("a", a.clone()), ("b", b.clone()), ("c", c.clone())],
    )
    .await;
    (t, a, b, c)
}

/// Waits until no job is ready or running, twice in a row a little apart (a chain's next turn
/// is enqueued by the commit of the one before).
async fn settle(t: &TestApp) {
    let db = t.open_db().await;
    wait_for(20, "the queue to settle", || async {
        let idle = |s: &std::collections::BTreeMap<String, i64>| {
            s.get("ready").copied().unwrap_or(0) == 0 && s.get("running").copied().unwrap_or(0) == 0
        };
        if !idle(&job_states(&db).await) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        idle(&job_states(&db).await).then_some(())
    })
    .await;
}

/// A2A 1.0 `SendMessage` of `message` (returning at once) to the JSON-RPC endpoint at `path`;
/// the id of the task it starts.
async fn a2a_start(t: &TestApp, path: &str, message: Value) -> String {
    let body: Value = t
        .http
        .post(format!("{}{path}", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": message, "configuration": {"returnImmediately": true}}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {body}"))
        .to_owned()
}

async fn two_agents_mentioning_each_other_stop_at_max_hops(engine: Engine) {
    // Three agents in a ring (a → b → c → a): only the hop limit stops it.
    let (t, a, b, c) = trio(engine, Some(3)).await;
    // The mentions need the domain, known only once the server runs.
    let (ra, rb, rc) = (t.agent("a"), t.agent("b"), t.agent("c"));
    a.mention(&[&rb]);
    b.mention(&[&rc]);
    c.mention(&[&ra]);
    let out = t.ingest("ring-1", message(&ra, "ring", "hello a")).await;
    settle(&t).await;
    assert_eq!((a.calls(), b.calls(), c.calls()), (1, 1, 1));
    let chain = |m: &NormalizedMessage| m.recipient_capabilities.agent_chain;
    assert_eq!(chain(&a.seen()[0]), None, "a person's turn is no agent's");
    let bc = chain(&b.seen()[0]).unwrap();
    assert_eq!((bc.hop, bc.max_hops, bc.is_final), (2, 3, false));
    let cc = chain(&c.seen()[0]).unwrap();
    assert_eq!((cc.hop, cc.max_hops, cc.is_final), (3, 3, true));
    // Each relayed turn is from the mentioning agent, in the same thread, answering its reply.
    let to_b = &b.seen()[0];
    assert_eq!(to_b.sender.address, ra);
    assert_eq!(to_b.recipient, rb);
    assert_eq!(to_b.thread_id, out.thread_id);
    assert_eq!(text_of(&to_b.parts), "a says hi");
    assert_eq!(
        to_b.sender.extra["on_behalf_of"],
        json!(["@alice@remote.example"])
    );
    // c sees the whole conversation: the person, a's reply; b's words are its own turn.
    let to_c = &c.seen()[0];
    let history: Vec<(String, String)> = to_c
        .history
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|h| (h.sender.address.clone(), text_of(&h.parts)))
        .collect();
    assert_eq!(
        history,
        vec![
            ("@alice@remote.example".to_owned(), "hello a".to_owned()),
            (ra.clone(), "a says hi".to_owned()),
        ]
    );
    assert_eq!(text_of(&to_c.parts), "b says hi");
    assert_eq!(to_c.sender.address, rb);
    // Every answer went out by the transport the thread came in on.
    let delivered = t.transport.delivered();
    assert_eq!(delivered.len(), 3);
    let continues: Vec<(String, bool)> = delivered
        .iter()
        .map(|d| (d.response.agent.clone(), d.continues))
        .collect();
    for (agent, expected) in [(&ra, true), (&rb, true), (&rc, false)] {
        assert!(
            continues.contains(&(agent.clone(), expected)),
            "{continues:?}"
        );
    }

    // A limit of 1: the first answer wakes nobody.
    let a1 = MentionAgent::new("a");
    let b1 = MentionAgent::new("b");
    let t1 = spawn_with(engine, Some(1), &[("a", a1.clone()), ("b", b1.clone())]).await;
    let rb1 = t1.agent("b");
    a1.mention(&[&rb1]);
    t1.ingest("one-1", message(&t1.agent("a"), "one", "hello"))
        .await;
    settle(&t1).await;
    assert_eq!((a1.calls(), b1.calls()), (1, 0));
}
on_both_engines!(two_agents_mentioning_each_other_stop_at_max_hops);

async fn an_agent_is_never_woken_twice_in_one_chain(engine: Engine) {
    // a and b keep mentioning each other, far under the limit: a → b, and b → a is refused.
    let a = MentionAgent::new("a");
    let b = MentionAgent::new("b");
    let t = spawn_with(engine, Some(10), &[("a", a.clone()), ("b", b.clone())]).await;
    let (ra, rb) = (t.agent("a"), t.agent("b"));
    a.mention(&[&rb]);
    b.mention(&[&ra, &ra]);
    t.ingest("pingpong-1", message(&ra, "pingpong", "start"))
        .await;
    settle(&t).await;
    assert_eq!((a.calls(), b.calls()), (1, 1));
    assert_eq!(
        b.seen()[0].recipient_capabilities.agent_chain.unwrap().hop,
        2
    );
    // A new message from the person starts a new chain: a answers again, and b once more.
    t.ingest("pingpong-2", message(&ra, "pingpong", "again"))
        .await;
    settle(&t).await;
    assert_eq!((a.calls(), b.calls()), (2, 2));
    // a's second turn sees b's earlier reply in its history (same thread).
    let history = a.seen()[1].history.clone().unwrap_or_default();
    assert!(
        history
            .iter()
            .any(|h| h.sender.address == rb && text_of(&h.parts) == "b says hi"),
        "{history:?}"
    );
}
on_both_engines!(an_agent_is_never_woken_twice_in_one_chain);

async fn a2a_caller_gets_one_combined_answer(engine: Engine) {
    let a = MentionAgent::new("a");
    let b = MentionAgent::new("b");
    let t = spawn_with(engine, None, &[("a", a.clone()), ("b", b.clone())]).await;
    let (ra, rb) = (t.agent("a"), t.agent("b"));
    a.mention(&[&rb]);
    let (status, _, body) = crate::helpers::a2a_send(&t, "a", None, "hello both").await;
    assert_eq!(status, 200, "{body}");
    let task_id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let done = crate::helpers::a2a_task_ended(&t, "a", &task_id).await;
    settle(&t).await;
    assert_eq!((a.calls(), b.calls()), (1, 1));
    let task = &done;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let artifacts = task["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1, "one combined answer: {task}");
    assert_eq!(
        artifacts[0]["parts"],
        json!([
            {"text": "a says hi", "metadata": {"mentionable": {"agent": ra}}},
            {"text": "b says hi", "metadata": {"mentionable": {"agent": rb}}},
        ])
    );
    // b was told where it stands, and that it works for the A2A caller.
    let to_b = &b.seen()[0];
    let c = to_b.recipient_capabilities.agent_chain.unwrap();
    assert_eq!((c.hop, c.max_hops, c.is_final), (2, 3, false));
}
on_both_engines!(a2a_caller_gets_one_combined_answer);

async fn an_a2a_callers_chain_is_continued(engine: Engine) {
    // A caller at hop 2 of 3: our agent answers as hop 2 and may wake one sibling, the last.
    let (t, a, b, c) = trio(engine, Some(5)).await;
    let (rb, rc) = (t.agent("b"), t.agent("c"));
    a.mention(&[&rb]);
    b.mention(&[&rc]);
    let task_id = a2a_start(
        &t,
        "/agents/a/a2a",
        json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
               "parts": [{"text": "from another agent"}],
               "metadata": {"mentionable": {
                   "agent_chain": {"hop": 2, "max_hops": 3, "is_final": false}}}}),
    )
    .await;
    crate::helpers::a2a_task_ended(&t, "a", &task_id).await;
    settle(&t).await;
    assert_eq!((a.calls(), b.calls(), c.calls()), (1, 1, 0));
    let cb = b.seen()[0].recipient_capabilities.agent_chain.unwrap();
    assert_eq!((cb.hop, cb.max_hops, cb.is_final), (3, 3, true));
}
on_both_engines!(an_a2a_callers_chain_is_continued);

async fn a2a_hub_message_to_several_agents_reaches_each_once(engine: Engine) {
    // "@a @b …" at the hub: a answers, then b (seeing a's reply), and the caller gets both
    // in one answer. Neither mentions anyone.
    let (t, a, b, c) = trio(engine, None).await;
    let (ra, rb) = (t.agent("a"), t.agent("b"));
    let task_id = a2a_start(
        &t,
        "/a2a",
        json!({"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
               "parts": [{"text": format!("@a {rb} @a plan a trip, not @c")}]}),
    )
    .await;
    let done = crate::helpers::a2a_task_ended(&t, "a", &task_id).await;
    settle(&t).await;
    assert_eq!((a.calls(), b.calls(), c.calls()), (1, 1, 0));
    let to_b = &b.seen()[0];
    assert_eq!(to_b.sender.address, ra);
    assert_eq!(to_b.recipient_capabilities.agent_chain.unwrap().hop, 2);
    assert!(to_b.extra.get("also_addressed").is_none(), "{to_b:?}");
    // b sees the caller's message in its history; a's reply is the turn itself.
    let history = to_b.history.clone().unwrap_or_default();
    assert_eq!(history.len(), 1, "{history:?}");
    assert!(text_of(&history[0].parts).contains("plan a trip"));
    let artifacts = done["artifacts"].as_array().unwrap();
    assert_eq!(artifacts.len(), 1, "{done}");
    let texts: Vec<&str> = artifacts[0]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["a says hi", "b says hi"]);
}
on_both_engines!(a2a_hub_message_to_several_agents_reaches_each_once);

async fn an_outbound_a2a_call_carries_the_chain_and_whom_it_serves(engine: Engine) {
    // Another switchboard hosts `far` and `near`; here `a` mentions `proxy`, whose backend is
    // `far` over A2A. far answers as the chain's hop 2 and wakes near, the final hop 3.
    let far = MentionAgent::new("far");
    let near = MentionAgent::new("near");
    let remote = spawn_with(
        engine,
        None,
        &[("far", far.clone()), ("near", near.clone())],
    )
    .await;
    far.mention(&[&remote.agent("near")]);
    let card = format!("{}/agents/far/agent-card.json", remote.base);
    let a = MentionAgent::new("a");
    let a_backend = a.clone();
    let t = spawn_app(engine, move |c, o| {
        c.agents.push(switchboard::config::AgentConfig {
            activitypub: None,
            access: None,
            name: "proxy".into(),
            display_name: None,
            summary: None,
            backend: switchboard::config::BackendConfig::A2a {
                card,
                token: None,
                timeout_ms: 5_000,
                streaming: false,
                require_signed_card: false,
                card_keys: vec![],
            },
            a2a: None,
            email: None,
            notify: Vec::new(),
        });
        o.agents.push(("a".into(), a_backend));
    })
    .await;
    a.mention(&[&t.agent("proxy")]);
    t.ingest("far-1", message(&t.agent("a"), "far", "ask around"))
        .await;
    settle(&t).await;
    settle(&remote).await;
    assert_eq!((a.calls(), far.calls(), near.calls()), (1, 1, 1));
    let to_far = &far.seen()[0];
    let chain = to_far.recipient_capabilities.agent_chain.unwrap();
    assert_eq!((chain.hop, chain.max_hops, chain.is_final), (2, 3, false));
    assert_eq!(
        to_far.raw["message"]["metadata"]["mentionable"]["on_behalf_of"],
        json!(["@alice@remote.example"]),
        "{}",
        to_far.raw
    );
    let to_near = &near.seen()[0];
    let chain = to_near.recipient_capabilities.agent_chain.unwrap();
    assert_eq!((chain.hop, chain.max_hops, chain.is_final), (3, 3, true));
    // proxy's answer here is far's combined one: far's words, then near's.
    let delivered = t.transport.delivered();
    let from_proxy = delivered
        .iter()
        .find(|d| d.response.agent == t.agent("proxy"))
        .expect("proxy answered");
    let text = text_of(&from_proxy.response.parts);
    assert!(
        text.contains("far says hi") && text.contains("near says hi"),
        "{text}"
    );
}
on_both_engines!(an_outbound_a2a_call_carries_the_chain_and_whom_it_serves);
