//! The OpenAI-compatible agent against a real OpenAI-compatible server: the LiteLLM proxy
//! (`scripts/peers/llm.sh`), serving models that answer with fixed text
//! (`tests/peers/llm/config.yaml`) and requiring its master key as the bearer token. Streamed and
//! whole answers, tool calls, and a refusal (an unknown model) that ends the job with the
//! error class only. Runs with `SWITCHBOARD_INTEROP=1` (scripts/test).

use serde_json::{Value, json};
use switchboard::config::{AgentConfig, BackendConfig, Secret};
use switchboard::message::Part;
use switchboard::store::jobs;

use crate::helpers::{Engine, a2a_stream_artifacts, message, on_both_engines, spawn_app, wait_for};

const MASTER_KEY: &str = "sk-interop-master-key";

/// A running LiteLLM proxy, stopped when dropped.
struct Proxy {
    child: tokio::process::Child,
    base_url: String,
}

impl Proxy {
    async fn start() -> Option<Proxy> {
        if !crate::helpers::interop("OpenAI-compatible (LiteLLM)") {
            return None;
        }
        let litellm = std::env::var("SWITCHBOARD_LLM_LITELLM")
            .expect("SWITCHBOARD_LLM_LITELLM (set by scripts/peers/llm.sh)");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/llm/config.yaml");
        let child = tokio::process::Command::new(&litellm)
            .args(["--config", config, "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            // The cost map ships with the package: no fetch from the network.
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("LITELLM_LOG", "ERROR")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the LiteLLM proxy starts");
        let base_url = format!("http://127.0.0.1:{port}/v1");
        let http = reqwest::Client::new();
        let health = format!("http://127.0.0.1:{port}/health/liveliness");
        wait_for(120, "the LiteLLM proxy up", || async {
            let r = http.get(&health).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
        Some(Proxy { child, base_url })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn agent(name: &str, base_url: &str, model: &str, stream: bool) -> AgentConfig {
    AgentConfig {
        activitypub: None,
        access: None,
        name: name.into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::Openai {
            base_url: base_url.to_owned(),
            model: model.into(),
            api_key_env: Some("LITELLM_MASTER_KEY".into()),
            system_prompt: Some("You are a test agent.".into()),
            stream,
            max_tokens: Some(100),
            temperature: Some(0.0),
            timeout_ms: 8_000,
            api_key: Some(Secret::new(MASTER_KEY)),
        },
        a2a: None,
        email: None,
        notify: Vec::new(),
    }
}

fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.content.as_str()),
            _ => None,
        })
        .collect()
}

async fn litellm_proxy_answers(engine: Engine) {
    let Some(proxy) = Proxy::start().await else {
        return;
    };
    let base = proxy.base_url.clone();
    let mut t = spawn_app(engine, move |c, _| {
        c.agents.push(agent("streamer", &base, "mock-model", true));
        c.agents.push(agent("whole", &base, "mock-model", false));
        c.agents.push(agent("tools", &base, "mock-tools", false));
        c.agents
            .push(agent("unknown", &base, "no-such-model", true));
        // A wrong key is refused by the proxy: the key really is what authenticates.
        let mut wrong = agent("wrongkey", &base, "mock-model", false);
        if let BackendConfig::Openai { api_key, .. } = &mut wrong.backend {
            *api_key = Some(Secret::new("sk-not-the-key"));
        }
        c.agents.push(wrong);
    })
    .await;

    // Streamed to an A2A caller: the deltas as artifact chunks, then the whole text.
    let (body, updates) = a2a_stream_artifacts(&t, "streamer", "hello?").await;
    let text = |u: &Value| {
        u["artifact"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (last, deltas) = updates.split_last().expect("artifact updates");
    assert!(deltas.len() > 1, "the answer arrived in pieces: {body}");
    assert_eq!(
        deltas.iter().map(text).collect::<String>(),
        "Hello from the mock server"
    );
    assert_eq!(text(last), "Hello from the mock server");

    // Whole answers, and a tool call passed on as a part.
    t.ingest("w-1", message(&t.agent("whole"), "k1", "hi"))
        .await;
    t.ingest(
        "t-1",
        message(&t.agent("tools"), "k2", "weather in Lisbon?"),
    )
    .await;
    wait_for(60, "two deliveries", || async {
        (t.transport.count() == 2).then_some(())
    })
    .await;
    let delivered = t.transport.delivered();
    let by_agent = |name: &str| {
        delivered
            .iter()
            .find(|d| d.response.agent == t.agent(name))
            .unwrap()
            .response
            .parts
            .clone()
    };
    assert_eq!(text_of(&by_agent("whole")), "Hello from the mock server");
    let tools = by_agent("tools");
    let call = tools
        .iter()
        .find_map(|p| match p {
            Part::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .expect("a tool_call part");
    assert_eq!(call.name, "lookup");
    assert_eq!(call.args, json!({"city": "Lisbon"}));
    assert!(call.result.is_none(), "not executed");

    // Refusals end the job at once, with the status and the class, not the proxy's text.
    t.ingest("u-1", message(&t.agent("unknown"), "k3", "hi"))
        .await;
    t.ingest("x-1", message(&t.agent("wrongkey"), "k4", "hi"))
        .await;
    let db = t.open_db().await;
    let dead = wait_for(60, "two dead jobs", || async {
        let d = jobs::list(&db, Some("dead"), Some("dispatch"), 10)
            .await
            .unwrap();
        (d.len() == 2).then_some(d)
    })
    .await;
    let errors: Vec<String> = dead
        .iter()
        .map(|j| {
            assert_eq!(j.attempts, 1, "{j:?}");
            j.last_error.clone().unwrap()
        })
        .collect();
    for err in &errors {
        // "permanent failure: HTTP 4xx" and at most one identifier: nothing the proxy wrote.
        let (_, tail) = err.split_once("HTTP 4").unwrap_or_else(|| panic!("{err}"));
        let words: Vec<&str> = tail.split(' ').collect();
        assert!(words.len() <= 2, "no provider text: {err}");
        assert!(!err.contains(MASTER_KEY), "{err}");
    }
    assert!(
        errors
            .iter()
            .any(|e| e.ends_with("HTTP 400 invalid_request_error")),
        "the unknown model: {errors:?}"
    );
    t.stop().await;
    drop(proxy);
}
on_both_engines!(litellm_proxy_answers);
