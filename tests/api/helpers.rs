//! `spawn_app` and the helpers every suite shares.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard::app::Options;
use switchboard::config::{DatabaseConfig, Secret};
use switchboard::message::NormalizedMessage;
use switchboard::store::Db;
use switchboard::transports::memory::MemoryTransport;
use switchboard::{Application, Config};

/// The database engines a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// The PostgreSQL server tests create databases on, if any.
pub fn postgres_url() -> Option<String> {
    std::env::var("SWITCHBOARD_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// A fresh, empty database of `engine`; the guard keeps a SQLite file alive.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// Another handle on the same database (the first keeps any file alive).
    pub fn url_only(url: String) -> TestDb {
        TestDb { url, _dir: None }
    }

    /// Moves the database (and the guard of its file) out, leaving the URL behind.
    pub fn take(&mut self) -> TestDb {
        TestDb {
            url: self.url.clone(),
            _dir: self._dir.take(),
        }
    }
}

pub async fn fresh_db(engine: Engine) -> TestDb {
    match engine {
        Engine::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("switchboard.db").display());
            TestDb {
                url,
                _dir: Some(dir),
            }
        }
        Engine::Postgres => {
            let base = postgres_url().expect("SWITCHBOARD_TEST_POSTGRES_URL");
            // scripts/test gives each run its own prefix and drops only that run's databases.
            let prefix = std::env::var("SWITCHBOARD_TEST_DB_PREFIX")
                .ok()
                .filter(|p| {
                    !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
                .unwrap_or_else(|| "sb_test_".into());
            let name = format!("{prefix}{}", uuid::Uuid::now_v7().simple());
            let admin = sqlx::PgPool::connect(&base).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&admin)
                .await
                .unwrap();
            admin.close().await;
            let mut url = url::Url::parse(&base).unwrap();
            url.set_path(&format!("/{name}"));
            TestDb {
                url: url.to_string(),
                _dir: None,
            }
        }
    }
}

/// Creates the database at `url` with its tables, as `switchboard serve` does on its first
/// start (the other commands only open an existing one).
pub async fn create_db(url: &str) {
    Db::open(&DatabaseConfig {
        url: Secret::new(url),
        ..DatabaseConfig::default()
    })
    .await
    .unwrap()
    .close()
    .await;
}

/// A configuration for tests: port 0, fast polling and retries, the development switch on.
pub fn test_config(db_url: &str) -> Config {
    let mut c = Config::default();
    c.server.bind = "127.0.0.1:0".parse().unwrap();
    c.server.metrics_bind = "127.0.0.1:0".parse().unwrap();
    c.email.bind = "127.0.0.1:0".parse().unwrap();
    c.server.shutdown_grace_seconds = 5;
    // Tests run side by side on one PostgreSQL server (100 connections by default), some with
    // two instances each: a small pool per instance keeps the whole suite under its cap.
    c.database = DatabaseConfig {
        url: Secret::new(db_url),
        max_connections: 4,
        ..DatabaseConfig::default()
    };
    c.net.allow_private_addresses = true;
    c.queue.poll_interval_ms = 50;
    c.queue.backoff_base_ms = 50;
    c.queue.backoff_max_ms = 500;
    c.queue.lease_seconds = 10;
    c.api.token = Some(Secret::new("test-token"));
    c
}

/// A running server with a recording transport named `test`.
pub struct TestApp {
    pub app: Option<Application>,
    pub transport: Arc<MemoryTransport>,
    pub base: String,
    pub http: reqwest::Client,
    pub db: TestDb,
}

pub async fn spawn_app(engine: Engine, tweak: impl FnOnce(&mut Config, &mut Options)) -> TestApp {
    let db = fresh_db(engine).await;
    spawn_on(db, tweak).await
}

pub async fn spawn_on(db: TestDb, tweak: impl FnOnce(&mut Config, &mut Options)) -> TestApp {
    let transport = Arc::new(MemoryTransport::new("test"));
    let mut config = test_config(&db.url);
    let mut opts = Options {
        transports: vec![transport.clone()],
        ..Options::default()
    };
    tweak(&mut config, &mut opts);
    let app = Application::build_with(config, opts).await.unwrap();
    let base = format!("http://{}", app.http_addr());
    TestApp {
        app: Some(app),
        transport,
        base,
        http: reqwest::Client::new(),
        db,
    }
}

impl TestApp {
    pub fn app(&self) -> &Application {
        self.app.as_ref().unwrap()
    }

    /// The metrics listener's exposition text.
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("http://{}/metrics", self.app().metrics_addr()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub fn domain(&self) -> String {
        self.app().config().domain().unwrap()
    }

    pub fn agent(&self, name: &str) -> String {
        format!("@{name}@{}", self.domain())
    }

    pub async fn ingest(
        &self,
        external_id: &str,
        msg: NormalizedMessage,
    ) -> switchboard::pipeline::IngestOutcome {
        self.app()
            .pipeline()
            .ingest("test", external_id, msg)
            .await
            .unwrap()
    }

    pub async fn open_db(&self) -> Db {
        Db::connect(&DatabaseConfig {
            url: Secret::new(&self.db.url),
            ..DatabaseConfig::default()
        })
        .await
        .unwrap()
    }

    pub async fn stop(&mut self) {
        if let Some(app) = self.app.take() {
            app.shutdown().await.unwrap();
        }
    }
}

/// A test that ends without [`TestApp::stop`] still shuts its server down: a pool merely dropped
/// with its runtime can outlive it (a connection handed back while the runtime shuts down), and
/// the whole suite then runs out of PostgreSQL connections.
impl Drop for TestApp {
    fn drop(&mut self) {
        let Some(app) = self.app.take() else { return };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        tokio::task::block_in_place(|| {
            if let Err(e) = handle.block_on(app.shutdown()) {
                eprintln!("shutting the test's server down: {e}");
            }
        });
    }
}

/// A valid inbound message to `recipient`.
pub fn message(recipient: &str, thread_key: &str, text: &str) -> NormalizedMessage {
    serde_json::from_value(json!({
        "id": uuid::Uuid::now_v7().to_string(),
        "thread_id": thread_key,
        "sender": {"address": "@alice@remote.example", "auth_method": "ap-http-signature", "verified": true},
        "recipient": recipient,
        "parts": [{"kind": "text", "mime": "text/plain", "content": text}],
        "recipient_capabilities": {"mention_relay": {"kind": "none"}, "formats": ["text/plain"], "attachments": false, "streaming": false},
        "received_via": "activitypub",
        "received_at": "2026-01-02T03:04:05.678Z",
        "raw": {"id": thread_key}
    }))
    .unwrap()
}

/// Polls `check` until it returns `Some`, for at most `secs` seconds (a bound on waiting, not a
/// performance assertion).
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A request header as a string ("" when absent).
pub fn header(req: &actix_web::HttpRequest, name: &str) -> String {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// Whether a received POST carries a valid switchboard signature of `body` under `secret`.
pub fn signed_with(req: &actix_web::HttpRequest, body: &[u8], secret: &[u8]) -> bool {
    let ts: i64 = header(req, "x-switchboard-timestamp").parse().unwrap_or(0);
    header(req, "x-switchboard-signature") == switchboard::net::sign(secret, ts, body)
}

/// Starts a one-route HTTP server on a loopback port with `data` as its app data; returns the
/// route's URL.
macro_rules! serve_route {
    ($data:expr, $method:ident, $path:literal, $handler:expr) => {{
        let data = $data;
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(actix_web::web::Data::new(data.clone()))
                .route($path, actix_web::web::$method().to($handler))
        })
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
        let url = format!("http://{}{}", server.addrs()[0], $path);
        tokio::spawn(server.run());
        url
    }};
}
pub(crate) use serve_route;

/// Runs a test body on SQLite, and on PostgreSQL when it is configured.
macro_rules! on_both_engines {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(crate::helpers::Engine::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if crate::helpers::postgres_url().is_none() {
                    eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: PostgreSQL leg skipped");
                    return;
                }
                super::$name(crate::helpers::Engine::Postgres).await;
            }
        }
    };
}
pub(crate) use on_both_engines;

/// Job state counts straight from the database.
pub async fn job_states(db: &Db) -> std::collections::BTreeMap<String, i64> {
    switchboard::store::jobs::counts(db)
        .await
        .unwrap()
        .into_iter()
        .fold(Default::default(), |mut m, c| {
            *m.entry(c.state).or_insert(0) += c.n;
            m
        })
}

/// An agent backend that records what it is given and answers like echo.
#[derive(Debug, Default)]
pub struct RecordingAgent {
    pub seen: std::sync::Mutex<Vec<NormalizedMessage>>,
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for RecordingAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<switchboard::message::NormalizedResponse>, switchboard::error::OutboundError>
    {
        self.seen.lock().unwrap().push(msg.clone());
        switchboard::agents::AgentBackend::respond(&switchboard::agents::EchoAgent, msg).await
    }
}

/// Whether the interop suites against real peers run: `SWITCHBOARD_INTEROP=1`, which
/// `scripts/test` sets after installing the peers. A bare `cargo test` skips them with a note;
/// with the switch on, a missing peer is a failure of the test that needs it.
pub fn interop(what: &str) -> bool {
    let on = std::env::var("SWITCHBOARD_INTEROP").as_deref() == Ok("1");
    if !on {
        eprintln!(
            "SWITCHBOARD_INTEROP is not 1: {what} interop test skipped (scripts/test runs it)"
        );
    }
    on
}

/// The real `switchboard` binary serving a configuration file, its JSON log collected. It is
/// killed when dropped.
pub struct Binary {
    pub child: std::process::Child,
    /// The public HTTP address.
    pub http: std::net::SocketAddr,
    /// The SMTP address, when email is on.
    pub smtp: Option<std::net::SocketAddr>,
    /// Every log line so far, as written.
    pub lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Binary {
    /// Starts `switchboard --config {config} serve --allow-weak` (the configuration must log
    /// JSON; tests' tokens may be short) and waits until it is up; with `open_files`, under
    /// that open-file limit (`ulimit -n`).
    pub fn start(config: &std::path::Path, open_files: Option<u64>) -> Binary {
        Self::launch(config, open_files, &[])
    }

    /// [`Binary::start`] with these variables added to its environment.
    pub fn start_with_env(config: &std::path::Path, env: &[(&str, &str)]) -> Binary {
        Self::launch(config, None, env)
    }

    fn launch(config: &std::path::Path, open_files: Option<u64>, env: &[(&str, &str)]) -> Binary {
        use std::io::BufRead;
        let bin = env!("CARGO_BIN_EXE_switchboard");
        let args = [
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--allow-weak",
        ];
        let mut cmd = match open_files {
            Some(n) => {
                let mut c = std::process::Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin)
                    .args(args);
                c
            }
            None => {
                let mut c = std::process::Command::new(bin);
                c.args(args);
                c
            }
        };
        cmd.envs(env.iter().copied());
        let mut child = cmd
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let sink = Arc::clone(&lines);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Keep draining the log so the child never blocks on a full pipe.
            let mut smtp = None;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let parsed = serde_json::from_str::<serde_json::Value>(&line).ok();
                sink.lock().unwrap().push(line);
                if let Some(v) = parsed {
                    if v["message"] == "SMTP listener is up" {
                        smtp = v["addr"].as_str().map(str::to_owned);
                    }
                    if let Some(addr) = v["http_addr"].as_str() {
                        let _ = tx.send((addr.to_owned(), smtp.clone()));
                    }
                }
            }
        });
        let (http, smtp) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the server did not come up: {:?}", lines.lock().unwrap()));
        Binary {
            child,
            http: http.parse().unwrap(),
            smtp: smtp.map(|a| a.parse().unwrap()),
            lines,
        }
    }

    /// The log lines that contain `needle`.
    pub fn logged(&self, needle: &str) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }

    /// The private (metrics) listener's address, from the start-up line.
    pub fn metrics_addr(&self) -> String {
        let up = self.logged("switchboard is up").join("");
        let v: serde_json::Value = serde_json::from_str(&up).unwrap();
        v["metrics_addr"].as_str().unwrap().to_owned()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends the signal `name` (`TERM`, `HUP`, ...) with `kill`.
    pub fn signal(&self, name: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking-free A2A 1.0 `SendMessage` of `text` to `agent`'s endpoint, with a bearer token
/// when given: the status, the response headers and the JSON body (null when there is none).
pub async fn a2a_send(
    t: &TestApp,
    agent: &str,
    token: Option<&str>,
    text: &str,
) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
    let mut r = t
        .http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": uuid::Uuid::now_v7().to_string(), "role": "ROLE_USER",
                        "parts": [{"text": text}]},
            "configuration": {"returnImmediately": true}}}),
        );
    if let Some(tok) = token {
        r = r.bearer_auth(tok);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (
        status,
        headers,
        resp.json().await.unwrap_or(serde_json::Value::Null),
    )
}

/// The A2A task `id` of `agent` once it has ended (completed or failed): its `result`.
pub async fn a2a_task_ended(t: &TestApp, agent: &str, id: &str) -> serde_json::Value {
    wait_for(30, "the task to end", || async {
        let r: serde_json::Value = t
            .http
            .post(format!("{}/agents/{agent}/a2a", t.base))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id}}))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let state = r["result"]["status"]["state"].as_str().unwrap_or("");
        (state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_FAILED")
            .then(|| r["result"].clone())
    })
    .await
}

/// An agent backend that asks on cue and says what resolution it got, recording every message:
/// a turn carrying `policy_resolution` is answered "resolved {kind} verified={verified}";
/// "need consent" gets a `consent_required` part, "need sign-in" an `unauthorized` one, "need
/// approval" one of a kind nobody knows (`x-approval`), "not allowed" a `forbidden` one;
/// anything else is echoed.
#[derive(Debug, Default)]
pub struct PolicyAgent {
    pub seen: std::sync::Mutex<Vec<NormalizedMessage>>,
}

impl PolicyAgent {
    pub fn seen(&self) -> Vec<NormalizedMessage> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits for the `n`th message (1-based).
    pub async fn nth(&self, n: usize) -> NormalizedMessage {
        wait_for(30, &format!("message {n} at the policy agent"), || async {
            self.seen().get(n - 1).cloned()
        })
        .await
    }
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for PolicyAgent {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<switchboard::message::NormalizedResponse>, switchboard::error::OutboundError>
    {
        self.seen.lock().unwrap().push(msg.clone());
        let text = serde_json::to_value(&msg.parts).unwrap()[0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let part = |kind: &str, title: &str, message: &str| {
            serde_json::from_value::<switchboard::message::Part>(json!({
                "kind": "policy",
                "policy": {"kind": kind, "title": title, "message": message,
                           "state": "chosen-by-the-agent"}
            }))
            .unwrap()
        };
        let parts = if let Some(r) = &msg.policy_resolution {
            vec![switchboard::message::Part::text(format!(
                "resolved {} verified={}",
                r.kind.as_str(),
                r.verified
            ))]
        } else if text.contains("need consent") {
            vec![part(
                "consent_required",
                "Consent needed",
                "May I keep your address to write back later?",
            )]
        } else if text.contains("need sign-in") {
            vec![part("unauthorized", "Sign in", "Please sign in first.")]
        } else if text.contains("need approval") {
            vec![part(
                "x-approval",
                "Approval",
                "A manager has to approve this.",
            )]
        } else if text.contains("not allowed") {
            vec![part("forbidden", "No", "This is not something I do.")]
        } else {
            return switchboard::agents::AgentBackend::respond(
                &switchboard::agents::EchoAgent,
                msg,
            )
            .await;
        };
        Ok(Some(switchboard::message::NormalizedResponse::reply_to(
            msg, parts,
        )))
    }
}

/// An A2A 1.0 `SendStreamingMessage` of `text` to `agent`'s endpoint: the body, and the
/// `artifactUpdate` of each event that has one, in order.
pub async fn a2a_stream_artifacts(
    t: &TestApp,
    agent: &str,
    text: &str,
) -> (String, Vec<serde_json::Value>) {
    let body = t
        .http
        .post(format!("{}/agents/{agent}/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": uuid::Uuid::now_v7().to_string(),
                "role": "ROLE_USER", "parts": [{"text": text}]}}}),
        )
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let updates = body
        .split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<serde_json::Value>(d).unwrap())
        .map(|e| e["result"]["artifactUpdate"].clone())
        .filter(serde_json::Value::is_object)
        .collect();
    (body, updates)
}

/// A bare SMTP exchange: writes `line` and reads one reply (within 30 s: a server whose
/// database does not answer takes its pool's acquire timeout to say so).
pub async fn smtp(s: &mut tokio::net::TcpStream, line: &str) -> String {
    if !line.is_empty() {
        tokio::io::AsyncWriteExt::write_all(s, format!("{line}\r\n").as_bytes())
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tokio::io::AsyncReadExt::read(s, &mut buf),
        )
        .await
        .expect("a reply within 30 s")
        .unwrap_or(0);
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        let done = text
            .lines()
            .last()
            .is_some_and(|l| l.len() >= 4 && l.as_bytes()[3] == b' ');
        if n == 0 || (done && text.ends_with("\r\n")) {
            return text.into_owned();
        }
    }
}
