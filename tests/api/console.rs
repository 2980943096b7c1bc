//! The web console in real headless Chromium, driven over the WebDriver protocol
//! (chromedriver, from `scripts/peers/console.sh`): sign-in, a message sent through the API
//! shown in its conversation, a dead job retried from the queue page, a test message sent from
//! the form, live counters that change without a reload, and a screenshot of each page
//! (`SWITCHBOARD_CONSOLE_SCREENSHOTS=docs/console` refreshes those of the documentation).
//! Plus, without a browser: the console's sign-in guard and the configuration check that
//! requires a token off loopback.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{HttpResponse, web};
use base64::Engine as _;
use serde_json::{Value, json};
use switchboard::config::{AgentConfig, BackendConfig, Secret};
use switchboard::store::jobs;

use crate::helpers::{Engine, TestApp, interop, serve_route, spawn_app, test_config, wait_for};

pub(crate) const TOKEN: &str = "console-token";
/// The W3C WebDriver element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one headless Chromium session; both end when dropped.
pub(crate) struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
}

impl Browser {
    pub(crate) async fn start() -> Self {
        let exe =
            std::env::var("SWITCHBOARD_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(&exe)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{exe}: {e} (scripts/peers/console.sh installs it)"));
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        wait_for(20, "chromedriver", || async {
            let r = http.get(format!("{base}/status")).send().await.ok()?;
            let v: Value = r.json().await.ok()?;
            (v["value"]["ready"] == true).then_some(())
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,900"]}
        }}});
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"));
        Self {
            driver,
            http,
            session: format!("{base}/session/{id}"),
        }
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let mut r = self.http.request(method, format!("{}{path}", self.session));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let v: Value = r.send().await.unwrap().json().await.unwrap();
        assert!(v["value"]["error"].is_null(), "WebDriver {path}: {v}");
        v["value"].clone()
    }

    pub(crate) async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    pub(crate) async fn source(&self) -> String {
        self.call(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The page's source once it contains `marker` (a click that navigates may return before
    /// the next page is there).
    pub(crate) async fn source_with(&self, marker: &str) -> String {
        wait_for(20, marker, || async {
            let s = self.source().await;
            s.contains(marker).then_some(s)
        })
        .await
    }

    pub(crate) async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().unwrap().to_owned()
    }

    pub(crate) async fn click(&self, css: &str) {
        let el = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{el}/click"),
            Some(json!({})),
        )
        .await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{el}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let el = self.find(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{el}/text"), None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Saves a PNG screenshot of the page as `{name}.png`, once its live counters show numbers:
    /// in the folder `SWITCHBOARD_CONSOLE_SCREENSHOTS` names (`docs/console` refreshes the
    /// documentation's), else in the build's scratch folder, so a test run changes no tracked
    /// file.
    async fn screenshot(&self, name: &str) {
        wait_for(10, "the counters", || async {
            let n = self.text("[data-counter=inbound]").await;
            n.parse::<u64>().ok()
        })
        .await;
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = match std::env::var("SWITCHBOARD_CONSOLE_SCREENSHOTS") {
            Ok(d) => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(d),
            Err(_) => std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console"),
        };
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session quits Chromium: chromedriver killed alone leaves it running.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let end = self.http.delete(&self.session).send();
            tokio::task::block_in_place(|| {
                let _ = handle.block_on(tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    end,
                ));
            });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Adds the agent `broken`, whose webhook at `hook` fails, with one dispatch attempt (so its
/// job goes dead at once).
pub(crate) fn with_broken_agent(c: &mut switchboard::config::Config, hook: String) {
    c.agents.push(AgentConfig {
        activitypub: None,
        access: None,
        name: "broken".into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::Webhook {
            url: hook,
            secret: Secret::new("hook-secret"),
            timeout_ms: 2_000,
            assembled: false,
        },
        a2a: None,
        email: None,
        notify: Vec::new(),
    });
    c.queue.kinds.get_mut("dispatch").unwrap().max_attempts = 1;
}

pub(crate) async fn broken(calls: web::Data<Arc<AtomicUsize>>) -> HttpResponse {
    calls.fetch_add(1, Ordering::SeqCst);
    HttpResponse::InternalServerError().finish()
}

pub(crate) async fn post_message(t: &TestApp, to: &str, key: &str, text: &str) -> (String, String) {
    let r: Value = t
        .http
        .post(format!("{}/api/v1/messages", t.base))
        .bearer_auth("test-token")
        .json(&json!({"external_id": key, "message": {
            "sender": {"address": "ops@example.com", "auth_method": "none", "verified": false},
            "recipient": to,
            "parts": [{"kind": "text", "mime": "text/plain", "content": text}]
        }}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (
        r["id"].as_str().unwrap().to_owned(),
        r["thread_id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_chromium() {
    if !interop("console") {
        return;
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = serve_route!(calls.clone(), post, "/hook", broken);
    let mut t = spawn_app(Engine::Sqlite, move |c, _| {
        c.console.token = Some(Secret::new(TOKEN));
        with_broken_agent(c, hook);
    })
    .await;
    let console = format!("http://{}/console", t.app().metrics_addr());
    let b = Browser::start().await;

    // Signing in.
    b.go(&console).await;
    assert!(
        b.source().await.contains("Console token"),
        "redirected to the sign-in"
    );
    b.type_into("#token", TOKEN).await;
    b.click("button[type=submit]").await;
    let agents = b.source_with("Last answer").await;
    assert!(agents.contains(&t.agent("echo")), "{agents}");
    assert!(agents.contains("webhook") && !agents.contains("hook-secret"));

    // A message sent through the API, in its conversation.
    let (id, thread) = post_message(&t, &t.agent("echo"), "b-1", "hello from the API").await;
    wait_for(20, "the response", || async {
        let r = t
            .http
            .get(format!("{}/api/v1/messages/{id}/response", t.base))
            .bearer_auth("test-token")
            .send()
            .await
            .unwrap();
        (r.status() == 200).then_some(())
    })
    .await;
    b.go(&format!("{console}/threads")).await;
    assert!(b.source().await.contains(&thread));
    b.screenshot("conversations").await;
    b.click(&format!("a[href='/console/threads/{thread}']"))
        .await;
    let page = b.source_with("Conversation ").await;
    assert_eq!(
        page.matches("hello from the API").count(),
        2,
        "message and echo: {page}"
    );
    assert!(
        page.contains(">none<") && page.contains("unverified"),
        "evidence badges"
    );
    b.screenshot("conversation").await;
    b.click(&format!("a[href='/console/messages/{id}']")).await;
    b.source_with("Dispatch and delivery attempts").await;
    assert_eq!(b.text("#status").await, "delivered");
    assert!(
        b.text("#normalized")
            .await
            .contains("\"received_via\": \"api\"")
    );
    assert!(b.source().await.contains(&format!("dispatch:{id}")));
    b.screenshot("message").await;

    // The live counters change without a reload.
    b.go(&console).await;
    let before = wait_for(10, "the counters", || async {
        let n = b.text("[data-counter=inbound]").await;
        n.parse::<u64>().ok()
    })
    .await;
    b.screenshot("agents").await;

    // A dead job, retried from the queue page.
    let (dead_id, _) = post_message(&t, &t.agent("broken"), "b-2", "fail please").await;
    let db = t.open_db().await;
    let job = format!("dispatch:{dead_id}");
    wait_for(20, "the dead job", || async {
        let j = jobs::get(&db, &job).await.unwrap()?;
        (j.state == "dead").then_some(())
    })
    .await;
    wait_for(10, "the counter to move", || async {
        let n: u64 = b.text("[data-counter=inbound]").await.parse().ok()?;
        (n > before).then_some(())
    })
    .await;
    b.go(&format!("{console}/queue")).await;
    assert!(b.source().await.contains(&job));
    b.screenshot("queue").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    b.click(&format!("tr[data-job='{job}'] button")).await;
    wait_for(20, "the retried call", || async {
        (calls.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;

    // A test message from the form.
    b.go(&format!("{console}/send")).await;
    b.screenshot("send").await;
    b.type_into("#text", "typed in the console").await;
    b.click("#send").await;
    let page = b.source_with("Dispatch and delivery attempts").await;
    assert!(page.contains("typed in the console"), "{page}");
    let sent = switchboard::store::messages::counts(&db).await.unwrap();
    assert!(
        sent.iter().any(|c| c.direction == "in" && c.n == 3),
        "{sent:?}"
    );

    b.call(reqwest::Method::DELETE, "", None).await;
    drop(b);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_needs_its_token() {
    let mut t = crate::console_csrf::app_with_token().await;
    let console = format!("http://{}/console", t.app().metrics_addr());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(&console).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/console/login");
    assert_eq!(
        http.get(format!("{console}/counters.json"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        http.post(format!("{console}/queue/purge"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    // The sign-in form's session and anti-forgery token.
    let (pre, csrf) = crate::console_csrf::form_session(&http, &format!("{console}/login")).await;
    let wrong = http
        .post(format!("{console}/login"))
        .header("cookie", &pre)
        .form(&[("token", "nope"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let ok = http
        .post(format!("{console}/login"))
        .header("cookie", &pre)
        .form(&[("token", TOKEN), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 303);
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && !cookie.contains(TOKEN),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let r = http
        .get(format!("{console}/counters.json"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["dead"].as_i64(), v["ready"].as_i64()),
        (Some(0), Some(0))
    );
    let r = http.get(&console).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains(&t.agent("echo")));
    t.stop().await;

    // Off loopback, the console needs a token (or to be off).
    let mut c = test_config("sqlite::memory:");
    c.server.metrics_bind = "0.0.0.0:0".parse().unwrap();
    let e = c.check().unwrap_err().to_string();
    assert!(e.contains("console.token: required"), "{e}");
    c.console.enabled = false;
    c.check().unwrap();
    c.console.enabled = true;
    c.console.token = Some(Secret::new("x"));
    c.check().unwrap();
}

/// The blocks page in Chromium: a block typed into the form refuses its sender at once (the
/// operator API's message from that domain answers 403), is listed beside the file's, and its
/// Unblock button lets the sender in again; the file's block has no button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_from_the_console_in_chromium() {
    if !interop("console") {
        return;
    }
    let t = spawn_app(Engine::Sqlite, |c, _| {
        c.console.token = Some(Secret::new(TOKEN));
        c.moderation.blocks.push(switchboard::config::BlockConfig {
            domain: Some("spam.example".into()),
            reason: Some("from the file".into()),
            ..Default::default()
        });
    })
    .await;
    let console = format!("http://{}/console", t.app().metrics_addr());
    let send = |key: &'static str| {
        let t = &t;
        async move {
            t.http
                .post(format!("{}/api/v1/messages", t.base))
                .bearer_auth("test-token")
                .json(&json!({"external_id": key, "message": {
                    "sender": {"address": "eve@mail.example", "auth_method": "none", "verified": false},
                    "recipient": t.agent("echo"),
                    "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}]}}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(send("c-1").await, 202);
    let b = Browser::start().await;
    b.go(&format!("{console}/blocks")).await;
    b.type_into("#token", TOKEN).await;
    b.click("button[type=submit]").await;
    b.source_with("Last answer").await;
    b.go(&format!("{console}/blocks")).await;
    let page = b.source_with("Block a sender").await;
    assert!(
        page.contains("spam.example") && page.contains("in the file"),
        "{page}"
    );
    b.type_into("#pattern", "mail.example").await;
    b.type_into("#reason", "typed in the console").await;
    b.click("#block").await;
    let page = b.source_with("typed in the console").await;
    assert!(page.contains("Unblock"), "{page}");
    b.screenshot("blocks").await;
    assert_eq!(send("c-2").await, 403);

    b.click("tr[data-block]:not([data-block^=config]) button")
        .await;
    wait_for(10, "the block to go", || async {
        let page = b.source().await;
        (page.contains("Block a sender") && !page.contains("typed in the console")).then_some(())
    })
    .await;
    assert_eq!(send("c-3").await, 202);
}

/// The remote-hosts and reports pages in Chromium: a remote host whose inbox failed a delivery
/// and that had an activity refused is listed with its circuit, failures, last error and the
/// refusal; a report sent by a signed remote actor is shown; `/console/` reaches the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_and_reports_pages_in_chromium() {
    use crate::activitypub::remote::{Remote, note_create, post_signed};
    if !interop("console") {
        return;
    }
    let remote = Remote::start().await;
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let alice = remote.add_actor("alice");
    let host = switchboard::transports::activitypub::mapping::host_of(&alice).unwrap();
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");

    // The reply to alice's mention fails at her server (a 500 each time).
    *remote.post_statuses.lock().unwrap() = vec![500; 50];
    let create = note_create(
        &remote,
        "alice",
        "n1",
        vec![switchboard::transports::activitypub::mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        "<p>@echo hello</p>",
    );
    let body = serde_json::to_vec(&create).unwrap();
    let r = post_signed(&t.http, &inbox, &body, &remote.key_id("alice"), 0).await;
    assert_eq!(r.status(), 202);
    wait_for(20, "the failed delivery", || async {
        (!remote.posts().is_empty()).then_some(())
    })
    .await;
    // An unsigned activity from the same host: refused.
    let unsigned = json!({"id": format!("{}/likes/1", remote.base), "type": "Like", "actor": alice,
        "object": create["object"]["id"]});
    let r = t
        .http
        .post(&inbox)
        .header("content-type", "application/activity+json")
        .json(&unsigned)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A report by alice.
    let flag = json!({"id": format!("{}/flags/1", remote.base), "type": "Flag", "actor": alice,
        "object": [echo], "content": "This agent keeps replying to me."});
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&flag).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);

    let console = format!("http://{}/console", t.app().metrics_addr());
    let b = Browser::start().await;
    b.go(&format!("{console}/")).await;
    b.source_with("Last answer").await;
    b.click("a[href='/console/hosts']").await;
    let row = format!("tr[data-host='{host}']");
    let text = wait_for(20, "the host's failure on the page", || async {
        b.go(&format!("{console}/hosts")).await;
        let text = b.text(&row).await;
        text.contains("HTTP 500").then_some(text)
    })
    .await;
    assert!(text.contains("failing"), "{text}");
    assert!(text.contains("401 authentication failed"), "{text}");
    b.screenshot("hosts").await;
    // Blocked from its row: the host's next activity is refused before anything is fetched,
    // and the refusal is on the page; Unblock lets it in again.
    b.click(&format!("{row} button[data-block]")).await;
    // The page's source, not an element's text: the form's redirect may be loading.
    wait_for(10, "the Unblock button", || async {
        b.source().await.contains("data-unblock").then_some(())
    })
    .await;
    let again = note_create(
        &remote,
        "alice",
        "n2",
        vec![switchboard::transports::activitypub::mapping::PUBLIC.into()],
        vec![echo.clone()],
        &[(&echo, &format!("@echo@{}", t.domain()))],
        "<p>@echo again</p>",
    );
    let again = serde_json::to_vec(&again).unwrap();
    let r = post_signed(&t.http, &inbox, &again, &remote.key_id("alice"), 0).await;
    assert_eq!(r.status(), 403);
    b.go(&format!("{console}/hosts")).await;
    assert!(
        b.text(&row).await.contains("403 this instance is blocked"),
        "the refusal on the page"
    );
    b.click(&format!("{row} button[data-unblock]")).await;
    wait_for(10, "the Block button back", || async {
        let page = b.source().await;
        (page.contains("data-block") && !page.contains("data-unblock")).then_some(())
    })
    .await;
    let r = post_signed(&t.http, &inbox, &again, &remote.key_id("alice"), 0).await;
    assert_eq!(r.status(), 202);
    b.click("a[href='/console/reports']").await;
    let page = b.source_with("This agent keeps replying to me.").await;
    assert!(page.contains(&alice), "{page}");
    b.screenshot("reports").await;

    b.call(reqwest::Method::DELETE, "", None).await;
    drop(b);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_answers_with_a_trailing_slash() {
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http
        .get(format!("http://{}/console/", t.app().metrics_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/console");
    t.stop().await;
}
