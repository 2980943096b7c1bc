//! The console against other websites: a page of another origin that auto-submits each of the
//! console's forms in headless Chromium is refused and changes nothing (with and without a
//! console token); forms need the session's anti-forgery token and a same-origin `Origin` or
//! `Sec-Fetch-Site`; the session cookie is random per sign-in, revocable and scoped; sign-in is
//! throttled per address and each refusal logged; the private listener refuses a `Host` it is
//! not configured for (DNS rebinding) on every route.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};
use switchboard::config::Secret;
use switchboard::store::{jobs, messages};

use crate::console::{Browser, TOKEN, broken, post_message, with_broken_agent};
use crate::helpers::{
    Binary, Engine, TestApp, fresh_db, interop, serve_route, spawn_app, wait_for,
};

/// A client that does not follow redirects (the console answers forms with 303).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `name=value` of a response's session cookie.
fn session_of(r: &reqwest::Response) -> Option<String> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("switchboard_console="))
        .map(|c| c.split(';').next().unwrap().to_owned())
}

/// The anti-forgery token rendered into a page's forms.
pub(crate) fn csrf_in(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no anti-forgery field: {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// A fresh browser session from the page at `url`: its cookie and its forms' token.
pub(crate) async fn form_session(http: &reqwest::Client, url: &str) -> (String, String) {
    let r = http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    let cookie = session_of(&r).expect("a session cookie");
    (cookie, csrf_in(&r.text().await.unwrap()))
}

/// The page at `url` for the session `cookie`.
async fn page_text(http: &reqwest::Client, url: &str, cookie: &str) -> String {
    let r = http.get(url).header("cookie", cookie).send().await.unwrap();
    r.text().await.unwrap()
}

/// The `Set-Cookie` of a response.
fn set_cookie(r: &reqwest::Response) -> &str {
    r.headers()["set-cookie"].to_str().unwrap()
}

/// The sign-in form sent with `token`, from the session `pre` with its anti-forgery token.
async fn post_sign_in(
    http: &reqwest::Client,
    console: &str,
    (pre, csrf): (&str, &str),
    token: &str,
) -> reqwest::Response {
    let form = [("token", token), ("csrf", csrf)];
    let r = http.post(format!("{console}/login")).header("cookie", pre);
    r.form(&form).send().await.unwrap()
}

/// Signs in with the token: the signed-in session's cookie.
async fn sign_in(http: &reqwest::Client, console: &str) -> String {
    let (pre, csrf) = form_session(http, &format!("{console}/login")).await;
    let r = post_sign_in(http, console, (&pre, &csrf), TOKEN).await;
    assert_eq!(r.status(), 303);
    session_of(&r).unwrap()
}

/// An app whose console has the token.
pub(crate) async fn app_with_token() -> TestApp {
    spawn_app(Engine::Sqlite, |c, _| {
        c.console.token = Some(Secret::new(TOKEN));
    })
    .await
}

/// The page served from another origin: one console form (`action`, its fields and a guessed
/// anti-forgery token) that submits itself as soon as it loads.
async fn attack_page(q: web::Query<Vec<(String, String)>>) -> HttpResponse {
    let mut action = String::new();
    let mut fields = String::new();
    for (k, v) in q.into_inner() {
        if k == "action" {
            action = v;
        } else {
            fields.push_str(&format!(
                "<input type=\"hidden\" name=\"{k}\" value=\"{v}\">"
            ));
        }
    }
    HttpResponse::Ok().content_type("text/html").body(format!(
        "<!doctype html><title>free prizes</title><form method=\"post\" action=\"{action}\">{fields}\
         <input type=\"hidden\" name=\"csrf\" value=\"00000000\"></form>\
         <script>document.forms[0].submit()</script>"
    ))
}

/// An app whose `broken` agent's webhook fails (one attempt, so its job goes dead at once).
async fn app_with_a_dead_job(token: bool, calls: &Arc<AtomicUsize>) -> (TestApp, String) {
    let hook = serve_route!(calls.clone(), post, "/hook", broken);
    let t = spawn_app(Engine::Sqlite, move |c, _| {
        if token {
            c.console.token = Some(Secret::new(TOKEN));
        }
        with_broken_agent(c, hook);
    })
    .await;
    let (id, _) = post_message(&t, &t.agent("broken"), "dead-1", "fail please").await;
    let job = format!("dispatch:{id}");
    let db = t.open_db().await;
    wait_for(20, "the dead job", || async {
        let j = jobs::get(&db, &job).await.unwrap()?;
        (j.state == "dead").then_some(())
    })
    .await;
    (t, job)
}

/// The ids of the blocks in force.
fn blocks(t: &TestApp) -> Vec<String> {
    let list = t.app().pipeline().blocks().list();
    list.iter().map(|b| b.id.clone()).collect()
}

/// Has Chromium, signed in to the console at `console` (or just visiting it, without a
/// token), load a page of `attacker` for each console form; each is refused and nothing
/// changes. Then the console's own Retry button still works.
async fn each_form_from_another_site(
    t: &TestApp,
    b: &Browser,
    console: &str,
    attacker: &str,
    job: &str,
    calls: &Arc<AtomicUsize>,
) {
    let r = t
        .http
        .post(format!("{}/api/v1/blocks", t.base))
        .bearer_auth("test-token")
        .json(&json!({"kind": "domain", "pattern": "kept.example"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let block: Value = r.json().await.unwrap();
    let block_id = block["id"].as_str().unwrap().to_owned();
    let db = t.open_db().await;
    let sent_before = messages::counts(&db).await.unwrap();
    let blocks_before = blocks(t);
    let echo = t.agent("echo");
    let forms: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "send",
            vec![("recipient", &echo), ("text", "forged by another site")],
        ),
        (
            "blocks",
            vec![("kind", "sender"), ("pattern", "*"), ("reason", "forged")],
        ),
        ("blocks/remove", vec![("id", &block_id)]),
        ("queue/retry", vec![("id", job)]),
        ("queue/purge", vec![]),
        ("logout", vec![]),
    ];
    for (i, (path, fields)) in forms.iter().enumerate() {
        let mut q = vec![("action".to_owned(), format!("{console}/{path}"))];
        q.extend(
            fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        // From another port of the same address (same-site, so a SameSite=Strict cookie is
        // sent) and from another name (cross-site), in turn.
        let base = if i % 2 == 0 {
            attacker.to_owned()
        } else {
            attacker.replace("127.0.0.1", "localhost")
        };
        let url = reqwest::Url::parse_with_params(&format!("{base}/attack"), &q).unwrap();
        b.go(url.as_str()).await;
        let page = b.source_with("Nothing was changed").await;
        assert!(page.contains("another website"), "{path}: {page}");
    }
    // Nothing changed: no message, the same blocks, the dead job still dead and untried.
    assert_eq!(
        messages::counts(&db).await.unwrap().len(),
        sent_before.len()
    );
    for (a, b) in messages::counts(&db)
        .await
        .unwrap()
        .iter()
        .zip(&sent_before)
    {
        assert_eq!((&a.direction, a.n), (&b.direction, b.n));
    }
    assert_eq!(blocks(t), blocks_before);
    assert_eq!(jobs::get(&db, job).await.unwrap().unwrap().state, "dead");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Still signed in (the forged sign-out did nothing), and the console's own form works.
    b.go(&format!("{console}/queue")).await;
    let page = b.source_with("Dead jobs").await;
    assert!(page.contains(job), "{page}");
    b.click(&format!("tr[data-job='{job}'] button")).await;
    wait_for(20, "the retried call", || async {
        (calls.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_forms_from_another_website_are_refused_in_chromium() {
    if !interop("console") {
        return;
    }
    let attacker = serve_route!((), get, "/attack", attack_page);
    let attacker = attacker.trim_end_matches("/attack").to_owned();
    let b = Browser::start().await;
    for token in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let (mut t, job) = app_with_a_dead_job(token, &calls).await;
        let console = format!("http://{}/console", t.app().metrics_addr());
        // The browser has the console's cookie (signed in when there is a token).
        b.go(&console).await;
        if token {
            b.type_into("#token", TOKEN).await;
            b.click("button[type=submit]").await;
        }
        b.source_with("Last answer").await;
        each_form_from_another_site(&t, &b, &console, &attacker, &job, &calls).await;
        t.stop().await;
    }
    b.call(reqwest::Method::DELETE, "", None).await;
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_forms_need_the_anti_forgery_token_and_the_same_origin() {
    for token in [false, true] {
        let mut t = spawn_app(Engine::Sqlite, |c, _| {
            if token {
                c.console.token = Some(Secret::new(TOKEN));
            }
        })
        .await;
        let origin = format!("http://{}", t.app().metrics_addr());
        let console = format!("{origin}/console");
        let http = client();
        let cookie = if token {
            sign_in(&http, &console).await
        } else {
            form_session(&http, &format!("{console}/blocks")).await.0
        };
        let page = page_text(&http, &format!("{console}/blocks"), &cookie).await;
        let csrf = csrf_in(&page);
        assert_eq!(csrf.len(), 64, "{csrf}");
        assert!(
            page.matches(&format!("name=\"csrf\" value=\"{csrf}\""))
                .count()
                >= page.matches("<form").count(),
            "every form carries it: {page}"
        );
        let other = if token {
            sign_in(&http, &console).await
        } else {
            form_session(&http, &format!("{console}/blocks")).await.0
        };
        let other_csrf = csrf_in(&page_text(&http, &format!("{console}/blocks"), &other).await);
        let block = |csrf: String, headers: Vec<(&'static str, String)>, pattern: &'static str| {
            let (http, console, cookie) = (&http, &console, &cookie);
            async move {
                let mut r = http
                    .post(format!("{console}/blocks"))
                    .header("cookie", cookie)
                    .form(&[("kind", "sender"), ("pattern", pattern), ("csrf", &csrf)]);
                for (k, v) in headers {
                    r = r.header(k, v);
                }
                r.send().await.unwrap().status().as_u16()
            }
        };
        let own = || vec![("origin", origin.clone())];
        for (wrong, why) in [(String::new(), "none"), ("0".repeat(64), "a wrong one")] {
            assert_eq!(block(wrong, own(), "*").await, 403, "token: {why}");
        }
        assert_eq!(
            block(other_csrf, own(), "*").await,
            403,
            "another session's"
        );
        let localhost = origin.replace("127.0.0.1", "localhost");
        for (name, value) in [
            ("origin", "https://evil.example"),
            ("origin", "null"),
            ("origin", localhost.as_str()),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            let headers = vec![(name, value.to_owned())];
            assert_eq!(
                block(csrf.clone(), headers, "*").await,
                403,
                "{name}: {value}"
            );
        }
        // A foreign Origin wins over Sec-Fetch-Site.
        let both = vec![
            ("origin", "https://evil.example".to_owned()),
            ("sec-fetch-site", "same-origin".to_owned()),
        ];
        assert_eq!(block(csrf.clone(), both, "*").await, 403);
        assert!(blocks(&t).is_empty(), "nothing was blocked");
        // The session's token from its own origin: done.
        assert_eq!(
            block(csrf.clone(), vec![("origin", origin.clone())], "a.example").await,
            303
        );
        assert_eq!(
            block(
                csrf.clone(),
                vec![("sec-fetch-site", "same-origin".into())],
                "b.example"
            )
            .await,
            303
        );
        assert_eq!(blocks(&t).len(), 2);
        // Without a session cookie at all.
        let r = http
            .post(format!("{console}/queue/purge"))
            .header("origin", &origin)
            .form(&[("csrf", &csrf)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), if token { 401 } else { 403 });
        t.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_sessions_are_random_per_sign_in_scoped_and_revocable() {
    let mut t = app_with_token().await;
    let origin = format!("http://{}", t.app().metrics_addr());
    let console = format!("{origin}/console");
    let http = client();
    // The sign-in form's own session is replaced by a new one on signing in.
    let r = http.get(format!("{console}/login")).send().await.unwrap();
    let set = set_cookie(&r).to_owned();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Secure"), "plain http: {set}");
    let pre = session_of(&r).unwrap();
    let csrf = csrf_in(&r.text().await.unwrap());
    let r = post_sign_in(&http, &console, (&pre, &csrf), TOKEN).await;
    let first = session_of(&r).unwrap();
    assert_ne!(first, pre, "a new session on signing in");
    let second = sign_in(&http, &console).await;
    assert_ne!(first, second, "random per sign-in");
    let id = first.trim_start_matches("switchboard_console=");
    assert!(
        id.len() >= 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert!(!first.contains(TOKEN));
    let page = |cookie: String| {
        let (http, console) = (&http, &console);
        async move {
            http.get(console)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(
        page(pre.clone()).await.status(),
        303,
        "the signed-out one is gone"
    );
    assert_eq!(page(first.clone()).await.status(), 200);
    assert_eq!(page(second.clone()).await.status(), 200);
    // Over https (as a proxy says), the cookie is Secure.
    let r = http
        .get(format!("{console}/login"))
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    assert!(set_cookie(&r).contains("; Secure"));
    // Signing out revokes that session only.
    let r = page(first.clone()).await;
    let csrf = csrf_in(&r.text().await.unwrap());
    let out = http
        .post(format!("{console}/logout"))
        .header("cookie", &first)
        .header("origin", &origin)
        .form(&[("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert!(set_cookie(&out).contains("Max-Age=0"));
    let r = page(first.clone()).await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/console/login");
    assert_eq!(page(second).await.status(), 200);
    t.stop().await;
}

/// The real binary: five wrong tokens a minute from one address, then 429 with Retry-After
/// (even for the right token); each refusal logged at WARN with the client's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_sign_in_is_throttled_and_refusals_logged() {
    let db = fresh_db(Engine::Sqlite).await;
    let text = format!(
        "[server]\nbind = \"127.0.0.1:0\"\nmetrics_bind = \"127.0.0.1:0\"\n\
         [database]\nurl = \"{}\"\n[log]\nformat = \"json\"\n[email]\nenabled = false\n\
         [console]\ntoken = \"{TOKEN}\"\n",
        db.url
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, text).unwrap();
    let server = Binary::start(&config, None);
    let console = format!("http://{}/console", server.metrics_addr());
    let http = client();
    let (pre, csrf) = form_session(&http, &format!("{console}/login")).await;
    let try_token = |token: &'static str| post_sign_in(&http, &console, (&pre, &csrf), token);
    for _ in 0..5 {
        assert_eq!(try_token("guess").await.status(), 401);
    }
    let r = try_token(TOKEN).await;
    assert_eq!(r.status(), 429);
    let wait: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let lines = wait_for(10, "the refusals in the log", || async {
        let lines = server.logged("console sign-in refused");
        (lines.len() == 6).then_some(lines)
    })
    .await;
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["level"], "WARN", "{l}");
        assert_eq!(v["client"], "127.0.0.1", "{l}");
    }
    assert!(lines[5].contains("too many"), "{}", lines[5]);
}

/// DNS rebinding: a request naming another host is refused on every route of the private
/// listener; the loopback names, the configured ones and the listener's own address are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_listener_refuses_hosts_it_does_not_serve() {
    let mut t = spawn_app(Engine::Sqlite, |c, _| {
        c.console.hostnames = vec!["console.internal".into()];
    })
    .await;
    let addr = t.app().metrics_addr();
    let port = addr.port();
    let http = client();
    let get = |path: &'static str, host: String| {
        let http = &http;
        async move {
            http.get(format!("http://{addr}{path}"))
                .header("host", host)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    for path in [
        "/console",
        "/console/counters.json",
        "/metrics",
        "/healthz",
        "/readyz",
    ] {
        for host in [
            "attacker.example".to_owned(),
            format!("attacker.example:{port}"),
            format!("localhost.attacker.example:{port}"),
            format!("console.internal.attacker.example:{port}"),
        ] {
            assert_eq!(get(path, host.clone()).await, 421, "{path} for {host}");
        }
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            "localhost".to_owned(),
            format!("[::1]:{port}"),
            format!("console.internal:{port}"),
            format!("CONSOLE.internal:{port}"),
        ] {
            assert_eq!(get(path, host.clone()).await, 200, "{path} for {host}");
        }
    }
    let r = http
        .post(format!("http://{addr}/console/queue/purge"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421);
    t.stop().await;
}
