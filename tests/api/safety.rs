//! Safety among bots and bad actors, across transports: a turn relayed by one agent passes the
//! woken agent's own access rules and rate limits, the built-in rate limits hold with no
//! `[limits]` at all, and two switchboards whose agents call each other over A2A stop by
//! themselves.

use std::sync::Arc;

use switchboard::config::{AgentConfig, BackendConfig, Rate};
use switchboard::store::Arg;

use crate::helpers::{
    Engine, TestApp, a2a_send, a2a_task_ended, message, on_both_engines, spawn_app, wait_for,
};
use crate::multi_agent::MentionAgent;

/// The `n` of the one row `sql` returns.
async fn count(t: &TestApp, sql: &str, args: &[Arg<'_>]) -> i64 {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let n: Option<N> = t
        .app()
        .pipeline()
        .db()
        .fetch_optional(sql, args)
        .await
        .unwrap();
    n.map_or(0, |n| n.n)
}

/// Messages to `agent` held for `reason`.
async fn held(t: &TestApp, agent: &str, reason: &str) -> i64 {
    count(
        t,
        "SELECT COUNT(*) AS n FROM messages WHERE agent = $1 AND outcome = 'held' AND error_class = $2",
        &[Arg::Text(agent), Arg::Text(reason)],
    )
    .await
}

/// Messages that came in for `agent`.
async fn inbound(t: &TestApp, agent: &str) -> i64 {
    count(
        t,
        "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in' AND agent = $1",
        &[Arg::Text(agent)],
    )
    .await
}

/// An agent from its TOML.
fn agent(toml: &str) -> AgentConfig {
    toml::from_str(toml).unwrap()
}

on_both_engines!(a_relayed_turn_passes_the_woken_agents_own_gate);
async fn a_relayed_turn_passes_the_woken_agents_own_gate(engine: Engine) {
    // `public` mentions `private` (deny by default) and `busy` (one message a minute per
    // sender) on every answer.
    let public = MentionAgent::new("public");
    let private = MentionAgent::new("private");
    let busy = MentionAgent::new("busy");
    let backends: Vec<(String, Arc<dyn switchboard::agents::AgentBackend>)> = vec![
        ("public".into(), public.clone()),
        ("private".into(), private.clone()),
        ("busy".into(), busy.clone()),
    ];
    let t = spawn_app(engine, move |c, o| {
        c.agents.push(agent(
            "name = \"private\"\nbackend = { kind = \"echo\" }\n[access]\ndefault = \"deny\"\n",
        ));
        c.agents.push(agent(
            "name = \"busy\"\nbackend = { kind = \"echo\" }\n\
             [access.limits]\nper_sender = { requests = 1, per_seconds = 60 }\n",
        ));
        c.limits.max_hops = Some(5);
        o.agents.extend(backends);
    })
    .await;
    public.mention(&[&t.agent("private"), &t.agent("busy")]);
    t.ingest("gate-1", message(&t.agent("public"), "gate", "hello"))
        .await;
    wait_for(20, "private's turn to be held", || async {
        (held(&t, "private", "refused").await == 1 && busy.calls() == 1).then_some(())
    })
    .await;
    assert_eq!(
        private.calls(),
        0,
        "a public agent cannot reach a private one"
    );
    // The second person's message: busy is past its rate for that person, relayed or not.
    t.ingest("gate-2", message(&t.agent("public"), "gate", "again"))
        .await;
    wait_for(20, "busy's second turn to be held", || async {
        (held(&t, "busy", "rate-limited").await == 1).then_some(())
    })
    .await;
    assert_eq!((public.calls(), private.calls(), busy.calls()), (2, 0, 1));
    assert_eq!(held(&t, "private", "refused").await, 2);
    // The refused turns stay in the thread, shown as held.
    let thread: String = {
        #[derive(sqlx::FromRow, serde::Deserialize)]
        struct T {
            thread_id: String,
        }
        let row: Option<T> = t
            .app()
            .pipeline()
            .db()
            .fetch_optional(
                "SELECT thread_id FROM messages WHERE agent = 'private' LIMIT 1",
                &[],
            )
            .await
            .unwrap();
        row.unwrap().thread_id
    };
    assert_eq!(
        count(
            &t,
            "SELECT COUNT(*) AS n FROM messages WHERE thread_id = $1 AND outcome = 'held'",
            &[Arg::Text(&thread)],
        )
        .await,
        3
    );
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("switchboard_refused_total{agent=\"private\",transport=\"test\",reason=\"not_allowed\"} 2"),
        "{metrics}"
    );
}

on_both_engines!(the_built_in_rate_limits_hold_without_a_limits_section);
async fn the_built_in_rate_limits_hold_without_a_limits_section(engine: Engine) {
    let t = spawn_app(engine, |_, _| {}).await;
    // An anonymous A2A caller: 60 messages a minute to one agent, then 429.
    for i in 0..60 {
        let (status, _, body) = a2a_send(&t, "echo", None, &format!("m{i}")).await;
        assert_eq!(status, 200, "{i}: {body}");
    }
    let (status, headers, _) = a2a_send(&t, "echo", None, "one too many").await;
    assert_eq!(status, 429);
    assert!(headers.contains_key("retry-after"));
    // Anonymous callers are told apart by their address: another client still gets through.
    let mut t = t;
    t.http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let (status, _, body) = a2a_send(&t, "echo", None, "from another client").await;
    assert_eq!(status, 200, "{body}");
    // The operator can remove the default.
    let t = spawn_app(engine, |c, _| {
        c.limits.per_sender = Some(Rate::OFF);
    })
    .await;
    for i in 0..61 {
        let (status, _, body) = a2a_send(&t, "echo", None, &format!("m{i}")).await;
        assert_eq!(status, 200, "{i}: {body}");
    }
}

/// The agent `name` whose backend is the A2A agent `remote` at `base`.
fn a2a_agent(name: &str, base: &str, remote: &str) -> AgentConfig {
    AgentConfig {
        activitypub: None,
        access: None,
        name: name.into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::A2a {
            card: format!("{base}/agents/{remote}/agent-card.json"),
            token: None,
            timeout_ms: 8_000,
            streaming: false,
            require_signed_card: false,
            card_keys: vec![],
        },
        a2a: None,
        email: None,
        notify: Vec::new(),
    }
}

on_both_engines!(two_switchboards_calling_each_other_over_a2a_stop);
async fn two_switchboards_calling_each_other_over_a2a_stop(engine: Engine) {
    // x's backend is y on the other instance, and y's is x: every call to one is a call to the
    // other. The chain travels with each call, so the budget each agent gives another agent (5
    // in 10 minutes) ends it. Each nested call holds a dispatch worker while it waits.
    let workers = |c: &mut switchboard::Config| {
        if let Some(k) = c.queue.kinds.get_mut("dispatch") {
            k.workers = 8;
        }
    };
    let port = |l: std::net::TcpListener| l.local_addr().unwrap().port();
    let (pa, pb) = (
        port(std::net::TcpListener::bind("127.0.0.1:0").unwrap()),
        port(std::net::TcpListener::bind("127.0.0.1:0").unwrap()),
    );
    let (base_a, base_b) = (
        format!("http://127.0.0.1:{pa}"),
        format!("http://127.0.0.1:{pb}"),
    );
    let b = {
        let base_a = base_a.clone();
        spawn_app(engine, move |c, _| {
            c.server.bind = format!("127.0.0.1:{pb}").parse().unwrap();
            c.agents.push(a2a_agent("y", &base_a, "x"));
            workers(c);
        })
        .await
    };
    let a = spawn_app(engine, move |c, _| {
        c.server.bind = format!("127.0.0.1:{pa}").parse().unwrap();
        c.agents.push(a2a_agent("x", &base_b, "y"));
        workers(c);
    })
    .await;
    let (status, _, body) = a2a_send(&a, "x", None, "ask your friend").await;
    assert_eq!(status, 200, "{body}");
    let task_id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let done = a2a_task_ended(&a, "x", &task_id).await;
    // It ends: the held call completes with nothing, which the `a2a` backend calling it takes
    // for a failed answer, and so on back to the person's task.
    assert_eq!(done["status"]["state"], "TASK_STATE_FAILED", "{done}");
    // The person's call, then five calls each way; y holds the sixth.
    assert_eq!((inbound(&a, "x").await, inbound(&b, "y").await), (6, 6));
    assert_eq!(
        (
            held(&a, "x", "bot-loop").await,
            held(&b, "y", "bot-loop").await
        ),
        (0, 1)
    );
    assert!(b.metrics().await.contains(
        "switchboard_refused_total{agent=\"y\",transport=\"a2a\",reason=\"bot-loop\"} 1"
    ));
}

/// A block added through one instance's operator API is stored in the shared database: the
/// instance that took it refuses the sender at once, another within the refresh interval, and
/// the refusal is `Error::Blocked` before anything is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_added_on_one_instance_holds_on_every_instance() {
    use crate::helpers::{TestDb, fresh_db, postgres_url, spawn_on};
    if postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: shared-blocks test skipped");
        return;
    }
    let mut db = fresh_db(Engine::Postgres).await;
    let url = db.url.clone();
    let a = spawn_on(db.take(), |_, _| {}).await;
    let b = spawn_on(TestDb::url_only(url), |_, _| {}).await;
    let send = |t: &TestApp, n: u32| {
        let p = t.app().pipeline().clone();
        let m = message(&t.agent("echo"), &format!("t{n}"), "hello");
        async move { p.ingest("test", &format!("e{n}"), m).await }
    };
    assert!(send(&b, 1).await.is_ok());
    let r = a
        .http
        .post(format!("{}/api/v1/blocks", a.base))
        .bearer_auth("test-token")
        .json(&serde_json::json!({"kind": "domain", "pattern": "remote.example"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert!(matches!(
        send(&a, 2).await,
        Err(switchboard::Error::Blocked)
    ));
    let mut n = 10;
    wait_for(15, "the other instance to refuse", || {
        n += 1;
        let attempt = send(&b, n);
        async move { matches!(attempt.await, Err(switchboard::Error::Blocked)).then_some(()) }
    })
    .await;
    let stored = count(
        &a,
        "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in'",
        &[],
    )
    .await;
    // The first message, and those b took before it read the block.
    assert_eq!(
        stored,
        1 + i64::from(n - 11),
        "a refused message was stored"
    );
}
