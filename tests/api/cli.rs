//! The `switchboard` command itself: check-config, the queue commands, `agents`,
//! `healthcheck`, what start-up logs, and the errors of a database that is not there.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::helpers::{
    Binary, Engine, create_db, fresh_db, job_states, message, on_both_engines, spawn_app, wait_for,
};

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

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/email")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn commands_other_than_serve_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("switchboard.db");
    for args in [
        &["queue", "list"][..],
        &["queue", "retry", "--all"],
        &["queue", "purge", "--state", "dead"],
        &["dkim"],
    ] {
        let (ok, _, stderr) = run(switchboard().args(args).current_dir(dir.path()));
        assert!(!ok, "{args:?} succeeded without a database");
        assert!(
            stderr.contains(&db.display().to_string()) && stderr.contains("--config"),
            "{args:?}: {stderr}"
        );
        assert!(!db.exists(), "{args:?} created {}", db.display());
    }
}

/// A PostgreSQL server that refuses the connection is named, with its cause, at once; the
/// password is not.
#[test]
fn an_unreachable_database_is_named_with_its_cause() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://sb:hunter2@127.0.0.1:{port}/sb");
    let dir = tempfile::tempdir().unwrap();
    for args in [&["queue", "list"][..], &["serve"]] {
        let (ok, _, stderr) = run(switchboard()
            .args(args)
            .current_dir(dir.path())
            .env("SWITCHBOARD__DATABASE__URL", &url)
            .env("SWITCHBOARD__SERVER__BIND", "127.0.0.1:0")
            .env("SWITCHBOARD__SERVER__METRICS_BIND", "127.0.0.1:0")
            .env("SWITCHBOARD__EMAIL__BIND", "127.0.0.1:0"));
        assert!(!ok, "{args:?}");
        assert!(
            stderr.contains(&format!("PostgreSQL at 127.0.0.1:{port}"))
                && stderr.to_lowercase().contains("connection refused"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(!stderr.contains("timed out"), "{stderr}");
    }
}

async fn queue_commands_refuse_what_does_not_exist(engine: Engine) {
    let db = fresh_db(engine).await;
    // A database that exists, with its tables.
    create_db(&db.url).await;
    let run = |args: &[&str]| {
        run(switchboard()
            .args(args)
            .env("SWITCHBOARD__DATABASE__URL", &db.url))
    };
    let (ok, out, err) = run(&["queue", "list", "--state", "all"]);
    assert!(ok && out.is_empty(), "{err}");
    let (ok, out, err) = run(&["queue", "list", "--state", "bogus"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("bogus") && err.contains("dead"), "{err}");
    let (ok, _, err) = run(&["queue", "list", "--kind", "dispach"]);
    assert!(!ok && err.contains("unknown job kind \"dispach\""), "{err}");
    assert!(
        err.contains("ap_deliver"),
        "the known kinds are listed: {err}"
    );
    let (ok, _, err) = run(&["queue", "list", "--kind", "email_role"]);
    assert!(ok, "a transport's kind is known: {err}");
    let (ok, out, err) = run(&["queue", "retry", "nonexistent"]);
    assert!(!ok && out.is_empty(), "{out}");
    assert!(err.contains("no job with id \"nonexistent\""), "{err}");
    let (ok, out, _) = run(&["queue", "retry", "--all"]);
    assert!(ok && out.trim() == "0 job(s) back in the queue", "{out}");
}
on_both_engines!(queue_commands_refuse_what_does_not_exist);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_live_job_says_it_is_not_dead() {
    let mut t = spawn_app(Engine::Sqlite, |_, o| o.workers = false).await;
    t.app()
        .pipeline()
        .ingest("test", "live-1", message(&t.agent("echo"), "k", "x"))
        .await
        .unwrap();
    let db = t.open_db().await;
    let job = switchboard::store::jobs::list(&db, Some("ready"), None, 1)
        .await
        .unwrap()
        .pop()
        .unwrap();
    t.stop().await;
    let (ok, _, err) = run(switchboard()
        .args(["queue", "retry", &job.id])
        .env("SWITCHBOARD__DATABASE__URL", &t.db.url));
    assert!(
        !ok && err.contains("is ready; only dead jobs are retried"),
        "{err}"
    );
}

#[test]
fn agents_prints_a_table_of_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sb.toml");
    std::fs::write(
        &path,
        r#"[server]
public_url = "https://sb.example"
[[agents]]
name = "echo"
backend = { kind = "echo" }
[[agents]]
name = "helper"
backend = { kind = "webhook", url = "https://agent.example/hook", secret = "hook-secret" }
"#,
    )
    .unwrap();
    let (ok, out, err) = run(switchboard().args(["--config", path.to_str().unwrap(), "agents"]));
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["NAME", "FEDIVERSE", "EMAIL", "A2A", "CARD", "BACKEND"],
            vec![
                "echo",
                "@echo@sb.example",
                "echo@sb.example",
                "https://sb.example/agents/echo/agent-card.json",
                "echo"
            ],
            vec![
                "helper",
                "@helper@sb.example",
                "helper@sb.example",
                "https://sb.example/agents/helper/agent-card.json",
                "webhook"
            ],
        ],
        "{out}"
    );
    assert!(
        !out.contains("hook-secret") && !out.contains("Secret"),
        "{out}"
    );
    // The columns line up.
    let col = |l: &str| l.find("https://").unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(col(lines[1]), col(lines[2]), "{out}");
}

#[test]
fn check_config_checks_files_urls_and_queue_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sb.toml");
    let write = |cert: &str, key: &str, hook: &str, callback: &str, kind: &str| {
        std::fs::write(
            &path,
            format!(
                r#"[email]
tls_cert_file = "{cert}"
tls_key_file = "{key}"
[api]
callback_url = "{callback}"
[queue.kinds.{kind}]
workers = 1
[[agents]]
name = "helper"
backend = {{ kind = "webhook", url = "{hook}", secret = "a-webhook-secret-long-enough" }}
"#
            ),
        )
        .unwrap();
    };
    let missing = dir.path().join("missing.crt").display().to_string();
    write(
        &missing,
        &fixture("tls.key"),
        "http://agent.example/hook",
        "https://127.0.0.1:9/cb",
        "dispach",
    );
    let (ok, _, err) = run(switchboard().args(["check-config", path.to_str().unwrap()]));
    assert!(!ok, "{err}");
    for needle in [
        "email.tls_cert_file",
        &missing,
        "agents[0].backend.url \"http://agent.example/hook\"",
        "plain http",
        "api.callback_url \"https://127.0.0.1:9/cb\"",
        "queue.kinds.dispach: unknown job kind",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    assert!(!err.contains("tls_key_file"), "the key file exists: {err}");
    // Loopback passes only where the development switch allows it.
    write(
        &fixture("tls.crt"),
        &fixture("tls.key"),
        "https://agent.example/hook",
        "https://localhost/cb",
        "ap_deliver",
    );
    let (ok, _, err) = run(switchboard().args(["check-config", path.to_str().unwrap()]));
    assert!(
        !ok && err.contains("api.callback_url") && err.contains("localhost"),
        "{err}"
    );
    assert!(
        !err.contains("agents[0]") && !err.contains("queue.kinds"),
        "{err}"
    );
    let (ok, _, err) = run(switchboard()
        .args(["check-config", path.to_str().unwrap()])
        .env("SWITCHBOARD__NET__ALLOW_PRIVATE_ADDRESSES", "true"));
    assert!(ok, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_answers_for_the_server_on_this_host() {
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let bind = t.app().http_addr().to_string();
    let private = t.app().metrics_addr().to_string();
    let check = |extra: &[&str]| {
        run(switchboard()
            .arg("healthcheck")
            .args(extra)
            .env("SWITCHBOARD__SERVER__BIND", &bind)
            .env("SWITCHBOARD__SERVER__METRICS_BIND", &private))
    };
    // The private listener answers by default; the public one when asked.
    let (ok, out, err) = check(&[]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("{private}/healthz")), "{out}");
    let (ok, out, err) = check(&["--ready"]);
    assert!(ok && out.contains(&format!("{private}/readyz")), "{err}");
    let (ok, out, err) = check(&["--public", "--ready"]);
    assert!(ok && out.contains(&format!("{bind}/readyz")), "{err}");
    // Bound to every interface, it is probed on loopback.
    let port = t.app().metrics_addr().port();
    let (ok, _, err) = run(switchboard()
        .arg("healthcheck")
        .env(
            "SWITCHBOARD__SERVER__METRICS_BIND",
            format!("0.0.0.0:{port}"),
        )
        .env("SWITCHBOARD__CONSOLE__ENABLED", "false"));
    assert!(ok, "{err}");
    t.stop().await;
    let (ok, _, err) = check(&[]);
    assert!(!ok, "the server is down");
    assert!(err.contains("unhealthy") && err.contains(&private), "{err}");
    let (ok, _, err) = check(&["--public"]);
    assert!(!ok && err.contains(&bind), "{err}");
}

/// The configuration of a real server on port 0 with email (and STARTTLS) on.
fn serving_config(dir: &Path, db_url: &str, format: &str) -> std::path::PathBuf {
    let path = dir.join("switchboard.toml");
    std::fs::write(
        &path,
        format!(
            r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
public_url = "https://sb.example"
[database]
url = "{db_url}"
[log]
format = "{format}"
[email]
bind = "127.0.0.1:0"
tls_cert_file = "{}"
tls_key_file = "{}"
[activitypub]
enabled = false
[[agents]]
name = "echo"
backend = {{ kind = "echo" }}
[[agents]]
name = "helper"
backend = {{ kind = "echo" }}
"#,
            fixture("tls.crt"),
            fixture("tls.key"),
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_logs_each_agents_addresses_and_what_is_on() {
    let db = fresh_db(Engine::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Binary::start(&serving_config(dir.path(), &db.url, "json"), None);
    wait_for(20, "the start-up summary", || async {
        (!server.logged("listeners and transports").is_empty()).then_some(())
    })
    .await;
    let lines: Vec<Value> = server
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let agents: Vec<&Value> = lines.iter().filter(|l| l["message"] == "agent").collect();
    assert_eq!(agents.len(), 2, "{lines:#?}");
    let helper = agents.iter().find(|l| l["agent"] == "helper").unwrap();
    assert_eq!(helper["fediverse"], "@helper@sb.example");
    assert_eq!(helper["email"], "helper@sb.example");
    assert_eq!(
        helper["a2a_card"],
        "https://sb.example/agents/helper/agent-card.json"
    );
    assert_eq!(helper["backend"], "echo");
    let on = lines
        .iter()
        .find(|l| l["message"] == "listeners and transports")
        .unwrap();
    assert_eq!(on["smtp"], server.smtp.unwrap().to_string());
    assert_eq!(on["starttls"], "on");
    assert_eq!(on["api"], "off", "no token");
    assert_eq!(on["activitypub"], "off");
    assert_eq!(on["a2a"], "on");
    assert_eq!(on["email"], "on");
}

#[test]
fn logs_have_no_colour_codes_when_not_on_a_terminal() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = rt.block_on(fresh_db(Engine::Sqlite));
    let dir = tempfile::tempdir().unwrap();
    let mut child = switchboard()
        .args(["--config"])
        .arg(serving_config(dir.path(), &db.url, "pretty"))
        .arg("serve")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        let done = line.contains("listeners and transports");
        seen.push(line);
        if done {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.iter().any(|l| l.contains("switchboard is up")),
        "{seen:#?}"
    );
    assert!(
        seen.iter().all(|l| !l.contains('\u{1b}')),
        "colour codes in a piped log: {seen:#?}"
    );
}

/// Writes `text` to the file `name` in `dir`, and gives its path.
fn config_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// An empty webhook secret, a one-character API token and a short console token are refused by
/// `check-config` and `serve`, each named by its key; `--allow-weak` accepts them.
#[test]
fn weak_secrets_are_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let config = &config_file(
        dir.path(),
        "weak.toml",
        r#"[server]
bind = "127.0.0.1:0"
metrics_bind = "127.0.0.1:0"
[api]
token = "x"
[console]
token = "short-console"
[[agents]]
name = "helper"
backend = { kind = "webhook", url = "https://agent.example/hook", secret = "" }
"#,
    );
    let (ok, _, err) = run(switchboard().args(["check-config", config]));
    assert!(!ok, "weak secrets passed check-config");
    let named = [
        "agents[0].backend.secret: empty",
        "api.token: 1 bytes is too short",
        "console.token: 13 bytes is too short",
    ];
    assert!(named.iter().all(|n| err.contains(n)), "{err}");
    assert!(
        !err.contains("short-console"),
        "a secret was printed: {err}"
    );
    let (ok, _, err) = run(switchboard().args(["check-config", config, "--allow-weak"]));
    assert!(ok, "{err}");

    // `serve` refuses to start (before it opens a database or a listener).
    let (ok, _, err) = run(switchboard()
        .args(["--config", config, "serve"])
        .current_dir(dir.path()));
    assert!(!ok, "serve started with weak secrets");
    assert!(
        err.contains("api.token: 1 bytes") && err.contains("--allow-weak"),
        "{err}"
    );
    assert!(
        !dir.path().join("switchboard.db").exists(),
        "serve opened a database"
    );
}

/// Secrets come from files: absolute paths, and names in systemd's `$CREDENTIALS_DIRECTORY`;
/// a secret given both ways is refused.
#[test]
fn check_config_reads_secrets_from_files_and_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("creds");
    std::fs::create_dir(&creds).unwrap();
    let hook = dir.path().join("webhook.secret");
    std::fs::write(&hook, "webhook-secret-from-a-file-0123\n").unwrap();
    std::fs::write(creds.join("api-token"), "api-token-from-a-credential\n").unwrap();
    let config = &config_file(
        dir.path(),
        "files.toml",
        &format!(
            r#"[api]
token_file = "api-token"
[[agents]]
name = "helper"
backend = {{ kind = "webhook", url = "https://agent.example/hook", secret_file = "{}" }}
"#,
            hook.display()
        ),
    );
    let (ok, out, err) = run(switchboard()
        .args(["check-config", config])
        .env("CREDENTIALS_DIRECTORY", &creds));
    assert!(ok, "{err}");
    assert!(
        !out.contains("from-a-file") && !out.contains("from-a-credential"),
        "{out}"
    );
    assert!(out.contains("secret = \"********\""), "{out}");

    // Outside the unit the credential is not there: the key and the path are named.
    let (ok, _, err) = run(switchboard()
        .args(["check-config", config])
        .current_dir(dir.path()));
    assert!(!ok && err.contains("api.token_file: api-token"), "{err}");

    let (ok, _, err) = run(switchboard()
        .args(["check-config", config])
        .env("CREDENTIALS_DIRECTORY", &creds)
        .env(
            "SWITCHBOARD__AGENTS__0__BACKEND__SECRET",
            "and-a-value-too-0123",
        ));
    assert!(
        !ok && err.contains("agents[0].backend.secret: set both"),
        "{err}"
    );
}

/// `keys encrypt` seals the stored private keys under the configured KEK, `keys rotate` moves
/// them to a new one; `dkim` reads them under the KEK; `doctor` warns while there is no KEK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_commands_encrypt_and_rotate_and_doctor_warns_without_a_kek() {
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    t.app()
        .pipeline()
        .keys()
        .rsa("dkim:switchboard")
        .await
        .unwrap();
    t.stop().await;
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old.kek"), dir.path().join("new.kek"));
    std::fs::write(&old, format!("{}\n", "11".repeat(32))).unwrap();
    std::fs::write(&new, "22".repeat(32)).unwrap();
    let run_with = |args: &[&str], kek: Option<&Path>| {
        let mut c = switchboard();
        c.args(args)
            .env("SWITCHBOARD__DATABASE__URL", &t.db.url)
            .env("SWITCHBOARD__EMAIL__DOMAIN", "sb.example");
        if let Some(kek) = kek {
            c.env("SWITCHBOARD__SERVER__KEK_FILE", kek);
        }
        run(&mut c)
    };
    let doctor_kek = |kek: Option<&Path>| {
        let (_, out, err) = run_with(&["doctor"], kek);
        out.lines()
            .find(|l| l.contains(" kek "))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no kek check: {out}{err}"))
    };
    assert!(doctor_kek(None).starts_with("warn"), "{}", doctor_kek(None));

    let (ok, _, err) = run_with(&["keys", "encrypt"], None);
    assert!(!ok && err.contains("server.kek_file"), "{err}");
    let (ok, out, err) = run_with(&["keys", "encrypt"], Some(&old));
    assert!(ok, "{err}");
    assert!(out.contains("key(s) encrypted under KEK"), "{out}");
    assert!(!out.starts_with("0 "), "{out}");
    assert!(doctor_kek(Some(&old)).starts_with("pass"));
    let (ok, record, err) = run_with(&["dkim"], Some(&old));
    assert!(ok && record.contains("v=DKIM1"), "{err}");
    // Without the KEK the key cannot be read, and the command says why.
    let (ok, _, err) = run_with(&["dkim"], None);
    assert!(!ok && err.contains("encrypted under KEK"), "{err}");

    let old_arg = old.to_str().unwrap();
    let (ok, out, err) = run_with(&["keys", "rotate", "--old-kek-file", old_arg], Some(&new));
    assert!(ok && out.contains("re-encrypted"), "{out}{err}");
    let (ok, again, err) = run_with(&["dkim"], Some(&new));
    assert!(ok, "{err}");
    assert_eq!(again, record, "the same key under the new KEK");
    let (ok, _, err) = run_with(&["keys", "encrypt"], Some(&old));
    assert!(!ok && err.contains("wrong KEK"), "{err}");
}
