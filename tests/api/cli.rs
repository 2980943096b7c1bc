//! The `switchboard` command itself: check-config and the queue commands.

use std::process::Command;

use crate::helpers::{Engine, job_states, message, spawn_app, wait_for};

fn switchboard() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    c.env_remove("SWITCHBOARD_CONFIG");
    for (k, _) in std::env::vars() {
        if k.starts_with("SWITCHBOARD__") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs the command: (succeeded, stdout, stderr).
fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_masks_secrets() {
    let (ok, stdout, stderr) = run(switchboard()
        .args(["check-config"])
        .env(
            "SWITCHBOARD__DATABASE__URL",
            "postgres://u:hunter2@db.example/sb",
        )
        .env("SWITCHBOARD__API__TOKEN", "tok-secret-value"));
    assert!(ok, "{stderr}");
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("tok-secret-value"),
        "{stdout}"
    );
    assert!(stdout.contains("url = \"********\""), "{stdout}");
    assert!(
        stdout.contains("name = \"echo\""),
        "the default agent is shown"
    );
}

#[test]
fn check_config_names_the_unknown_key_and_loads_the_example() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[queue]\nlease_secs = 3\n").unwrap();
    let (ok, _, stderr) = run(switchboard().args(["check-config", path.to_str().unwrap()]));
    assert!(!ok);
    assert!(
        stderr.contains("queue") && stderr.contains("lease_secs"),
        "{stderr}"
    );

    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/switchboard.example.toml"
    );
    let (ok, _, stderr) = run(switchboard().args(["--config", example, "check-config"]));
    assert!(ok, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_list_retry_purge() {
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    t.app()
        .pipeline()
        .ingest("ghost", "q-1", message(&t.agent("echo"), "k", "x"))
        .await
        .unwrap();
    let db = t.open_db().await;
    wait_for(20, "a dead job", || async {
        job_states(&db).await.contains_key("dead").then_some(())
    })
    .await;
    t.stop().await;
    let run = |args: &[&str]| {
        run(switchboard()
            .args(args)
            .env("SWITCHBOARD__DATABASE__URL", &t.db.url))
    };
    let (ok, out, _) = run(&["queue", "list"]);
    assert!(ok);
    let job: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(job["state"], "dead");
    assert_eq!(job["kind"], "deliver");
    assert!(job["last_error"].as_str().unwrap().contains("ghost"));
    let (ok, out, _) = run(&["queue", "retry", job["id"].as_str().unwrap()]);
    assert!(ok);
    assert_eq!(out.trim(), "1 job(s) back in the queue");
    let (_, out, _) = run(&["queue", "list", "--state", "ready"]);
    assert_eq!(out.lines().count(), 1);
    let (ok, _, err) = run(&["queue", "purge", "--state", "ready"]);
    assert!(!ok && err.contains("only dead or done"), "{err}");
    let (ok, out, _) = run(&["queue", "purge", "--state", "done"]);
    assert!(ok);
    assert_eq!(out.trim(), "1 job(s) deleted", "the finished dispatch job");
    let (ok, _, err) = run(&["queue", "retry"]);
    assert!(!ok && err.contains("--all"), "{err}");
}
