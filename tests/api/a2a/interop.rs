//! A2A interop: the a2a-sdk (Python) and @a2a-js/sdk clients against switchboard over
//! JSON-RPC and HTTP+JSON, a2a-sdk resolving a policy part, and switchboard's own A2A client
//! backend against an a2a-sdk server.

use serde_json::{Value, json};

use super::{AskerAgent, peer_dir, peers, rpc, run_peer, texts, user_message};
use crate::helpers::{Engine, on_both_engines, spawn_app, wait_for};

fn first_text(v: &Value) -> &str {
    v["parts"][0]["text"].as_str().unwrap_or_default()
}

async fn interop_python_and_js_clients(engine: Engine) {
    interop_clients(engine, None).await;
}
on_both_engines!(interop_python_and_js_clients);

/// The same conversation as `interop_python_and_js_clients`, each SDK told to pick the card's
/// HTTP+JSON interface.
#[tokio::test]
async fn interop_python_and_js_clients_over_http_json() {
    interop_clients(Engine::Sqlite, Some("HTTP+JSON")).await;
}

/// The SDK clients against switchboard, over the binding they prefer or over `binding`.
async fn interop_clients(engine: Engine, binding: Option<&str>) {
    let Some((python, node_modules)) = peers() else {
        return;
    };
    let t = spawn_app(engine, |_, o| {
        o.agents
            .push(("echo".into(), std::sync::Arc::new(AskerAgent)));
    })
    .await;

    // a2a-sdk 1.3.0 (Python).
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(peer_dir().join("client.py")).arg(&t.base);
    if let Some(b) = binding {
        cmd.env("A2A_BINDING", b);
    }
    let py = run_peer(cmd).await;
    let transport = if binding.is_some() {
        "RestTransport"
    } else {
        "JsonRpcTransport"
    };
    assert_eq!(py["transport"], transport, "{py}");
    assert_eq!(py["card"]["streaming"], true);
    assert_eq!(py["card"]["url"], format!("{}/a2a", t.base));
    assert_eq!(py["send"], json!(["task"]));
    assert_eq!(py["send_task"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        first_text(&py["send_task"]["artifacts"][0]),
        "hello from python"
    );
    assert_eq!(
        py["stream"],
        json!(["task", "status_update", "artifact_update", "status_update"]),
        "{py}"
    );
    assert_eq!(
        py["stream_events"][3]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(py["get"]["id"], py["send_task"]["id"]);
    assert!(py["list"]["tasks"].as_array().unwrap().len() >= 2, "{py}");
    assert_eq!(py["asking"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(first_text(&py["asking"]["status"]["message"]), "what else?");
    assert_eq!(py["answered"]["id"], py["asking"]["id"]);
    assert_eq!(py["answered"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        first_text(&py["answered"]["artifacts"][0]),
        "here is the answer"
    );
    assert_eq!(
        py["subscribe_first"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    assert_eq!(py["cancel"]["status"]["state"], "TASK_STATE_CANCELED");
    let resub = py["resubscribed"].as_array().unwrap();
    assert!(resub[0].get("task").is_some(), "{py}");
    assert_eq!(
        resub.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert!(
        py["cancel_again"]
            .as_str()
            .unwrap()
            .contains("NotCancelable"),
        "{py}"
    );
    assert!(
        py["get_unknown"].as_str().unwrap().contains("NotFound"),
        "{py}"
    );

    // @a2a-js/sdk 1.3.0: ESM resolves packages from the script's directory, so the script runs
    // from beside the installed node_modules.
    let script = node_modules.parent().unwrap().join("client.mjs");
    std::fs::copy(peer_dir().join("client.mjs"), &script).unwrap();
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(&script).arg(&t.base);
    if let Some(b) = binding {
        cmd.env("A2A_BINDING", b);
    }
    let js = run_peer(cmd).await;
    // The bundled SDK's class names may carry a leading underscore.
    assert_eq!(
        js["transport"].as_str().map(|n| n.trim_start_matches('_')),
        Some(transport),
        "{js}"
    );
    assert_eq!(js["card"]["streaming"], true);
    assert_eq!(js["send"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(first_text(&js["send"]["artifacts"][0]), "hello from node");
    let kinds: Vec<String> = js["stream"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_object().unwrap().keys().next().unwrap().clone())
        .collect();
    assert_eq!(
        kinds,
        ["task", "statusUpdate", "artifactUpdate", "statusUpdate"],
        "{js}"
    );
    assert_eq!(js["get"]["id"], js["send"]["id"]);
    assert!(js["list"]["ids"].as_array().unwrap().len() >= 2);
    assert_eq!(js["asking"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(js["answered"]["id"], js["asking"]["id"]);
    assert_eq!(js["answered"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(js["cancel"]["status"]["state"], "TASK_STATE_CANCELED");
    let resub = js["resubscribed"].as_array().unwrap();
    assert!(resub[0].get("task").is_some(), "{js}");
    assert_eq!(
        resub.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert!(
        js["get_unknown"].as_str().unwrap().contains("ot found"),
        "{js}"
    );
}

/// The a2a-sdk client resolves a consent request with the state the task carried, and the
/// same state presented again (in a new task of the same context) is refused.
async fn a2a_sdk_resolves_a_policy_part_with_its_state(engine: Engine) {
    let Some((python, _)) = peers() else {
        return;
    };
    let agent = std::sync::Arc::new(crate::helpers::PolicyAgent::default());
    let a = agent.clone();
    let t = spawn_app(engine, move |_, o| {
        o.agents.push(("echo".into(), a));
    })
    .await;
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(peer_dir().join("client.py"))
        .arg("policy")
        .arg(&t.base)
        .arg(switchboard::policy::POLICY_EXTENSION);
    let py = run_peer(cmd).await;
    assert!(
        py["extensions"]
            .as_array()
            .unwrap()
            .contains(&json!(switchboard::policy::POLICY_EXTENSION)),
        "{py}"
    );
    assert_eq!(py["asking"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(py["policy"]["kind"], "consent_required", "{py}");
    assert_eq!(py["policy"]["state"].as_str().unwrap().len(), 43);
    assert_eq!(
        py["done"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{py}"
    );
    assert_eq!(
        first_text(&py["done"]["artifacts"][0]),
        "resolved consent_required verified=true"
    );
    assert!(
        py["replay"]
            .as_str()
            .is_some_and(|e| e.contains("replayed")),
        "{py}"
    );
    let resolved: Vec<_> = agent
        .seen()
        .into_iter()
        .filter_map(|m| m.policy_resolution)
        .collect();
    assert_eq!(resolved.len(), 1, "one resolution reached the agent");
    assert!(resolved[0].verified);
}

on_both_engines!(a2a_sdk_resolves_a_policy_part_with_its_state);

/// Starts the a2a-sdk 1.3.0 echo server (`tests/peers/a2a/server.py`) on a free loopback port;
/// the child is killed when the handle drops.
async fn start_python_server(python: &str) -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(python)
        .arg(peer_dir().join("server.py"))
        .arg(port.to_string())
        .kill_on_drop(true)
        .spawn()
        .expect("the a2a-sdk server starts");
    let base = format!("http://127.0.0.1:{port}");
    let card = format!("{base}/.well-known/agent-card.json");
    let http = reqwest::Client::new();
    wait_for(30, "the a2a-sdk server", || async {
        http.get(&card)
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    })
    .await;
    (child, card)
}

async fn client_backend_talks_to_a2a_sdk_server(engine: Engine) {
    let Some((python, _)) = peers() else {
        return;
    };
    let (_server, card) = start_python_server(&python).await;
    for streaming in [true, false] {
        let with_remote = |card: String| {
            move |c: &mut switchboard::Config, _: &mut switchboard::app::Options| {
                c.agents.push(switchboard::config::AgentConfig {
                    activitypub: None,
                    access: None,
                    name: "remote".into(),
                    display_name: None,
                    summary: None,
                    backend: switchboard::config::BackendConfig::A2a {
                        card,
                        token: None,
                        timeout_ms: 5_000,
                        streaming,
                        require_signed_card: false,
                        card_keys: vec![],
                    },
                    email: None,
                    a2a: None,
                    notify: Vec::new(),
                });
            }
        };
        let mut t = spawn_app(engine, with_remote(card.clone())).await;
        let r = rpc(
            &t,
            "/agents/remote/a2a",
            "SendMessage",
            json!({"message": user_message("hi")}),
        )
        .await;
        let task = &r["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        let text = texts(task).join("");
        assert!(text.starts_with("echo: hi [ctx="), "{text}");
        let remote_ctx = text
            .split("[ctx=")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap()
            .to_owned();

        // The same switchboard context stays in one remote context; an input-required turn is
        // continued in the same remote task.
        let mut m = user_message("need input");
        m["contextId"] = task["contextId"].clone();
        let r = rpc(
            &t,
            "/agents/remote/a2a",
            "SendMessage",
            json!({"message": m}),
        )
        .await;
        let asking = &r["result"]["task"];
        assert_eq!(
            asking["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{r}"
        );
        let q = asking["status"]["message"]["parts"][0]["text"]
            .as_str()
            .unwrap();
        let prefix = format!("what else? [ctx={remote_ctx}] [task=");
        assert!(q.starts_with(&prefix), "{q}");
        let remote_task = q
            .trim_start_matches(&prefix)
            .trim_end_matches(']')
            .to_owned();
        // Which remote task waits is stored: a restart between the turns continues it.
        t.stop().await;
        let t = crate::helpers::spawn_on(t.db.take(), with_remote(card.clone())).await;
        let mut follow = user_message("the answer");
        follow["taskId"] = asking["id"].clone();
        let r = rpc(
            &t,
            "/agents/remote/a2a",
            "SendMessage",
            json!({"message": follow}),
        )
        .await;
        let done = &r["result"]["task"];
        assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{r}");
        let text = texts(done).join("");
        assert_eq!(
            text,
            format!("echo: the answer [ctx={remote_ctx}] [task={remote_task}]"),
            "the remote task continued"
        );
    }
}
on_both_engines!(client_backend_talks_to_a2a_sdk_server);
