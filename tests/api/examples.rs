//! The runnable examples in `examples/` do what docs/webhook.md says: the Python and the
//! TypeScript webhook agents verify switchboard's signature, refuse a forged one, answer a
//! message (the TypeScript one as a stream a streaming A2A caller sees in pieces) and say
//! nothing to an empty one; the example configurations pass the configuration check.

use std::process::{Child, Command, Stdio};

use crate::helpers::{Engine, a2a_stream_artifacts, message, wait_for};
use crate::webhook::{SECRET, with_hook};

struct Example(Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn example(program: &str, file: &str) -> (Example, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(file);
    let mut child = Command::new(program)
        .arg(&path)
        .env("WEBHOOK_SECRET", SECRET)
        .env("PORT", port.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} {file}: {e}"));
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("listening"), "{file}: {line}");
    (Example(child), port)
}

/// A forged signature is refused by the example itself.
async fn refuses_a_forged_signature(port: u16) {
    let r = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/"))
        .header("X-Switchboard-Timestamp", "1700000000")
        .header("X-Switchboard-Signature", "v1=00")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_webhook_example_answers_signed_messages() {
    if !crate::helpers::interop("examples") {
        return;
    }
    let (_agent, port) = example("python3", "webhook_agent.py");
    refuses_a_forged_signature(port).await;
    let t = with_hook(Engine::Sqlite, &format!("http://127.0.0.1:{port}/"), |_| {}).await;
    t.ingest("e1", message(&t.agent("hook"), "k1", "hi there"))
        .await;
    wait_for(30, "the first answer", || async {
        (!t.transport.delivered().is_empty()).then_some(())
    })
    .await;
    t.ingest("e2", message(&t.agent("hook"), "k1", "and again"))
        .await;
    t.ingest("e3", message(&t.agent("hook"), "k2", "   ")).await;
    let d = wait_for(30, "two answers", || async {
        let d = t.transport.delivered();
        (d.len() >= 2).then_some(d)
    })
    .await;
    let text = |i: usize| serde_json::to_value(&d[i].response.parts).unwrap()[0]["content"].clone();
    assert_eq!(
        text(0),
        "Hello @alice@remote.example, you said: hi there\n\n(earlier turns I can see: 0)"
    );
    assert_eq!(
        text(1),
        "Hello @alice@remote.example, you said: and again\n\n(earlier turns I can see: 2)"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        t.transport.delivered().len(),
        2,
        "the empty message got no reply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_webhook_example_streams_its_answer() {
    if !crate::helpers::interop("examples") {
        return;
    }
    let node = std::env::var("SWITCHBOARD_AP_NODE")
        .expect("SWITCHBOARD_AP_NODE: Node 22 (source scripts/peers/activitypub.sh)");
    let (_agent, port) = example(&node, "webhook_agent.ts");
    refuses_a_forged_signature(port).await;
    let t = with_hook(Engine::Sqlite, &format!("http://127.0.0.1:{port}/"), |_| {}).await;
    let (body, updates) = a2a_stream_artifacts(&t, "hook", "stream this please").await;
    assert!(updates.len() >= 4, "the answer came in pieces: {body}");
    let text: String = updates
        .iter()
        .map(|u| {
            u["artifact"]["parts"][0]["text"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert!(
        text.contains("you said: stream this please"),
        "{text} in {body}"
    );
}

/// Every configuration in `examples/` loads and passes the configuration check, with the
/// environment variables its header names.
#[test]
fn the_example_configurations_pass_check_config() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let env = vec![("OPENAI_API_KEY".to_owned(), "sk-example".to_owned())];
        let config = switchboard::Config::load(Some(&path), env)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!config.agents.is_empty(), "{}", path.display());
        checked += 1;
    }
    assert_eq!(checked, 3, "ollama, a2a_bridge, two_agents");
}
