//! The operator's web console at `/console` on the private metrics listener: server-rendered
//! pages over the same reads as the operator API (agents, conversations across transports, one
//! message with its attempts, the queue with its dead jobs, remote hosts with their delivery
//! health and recent refusals, reports of abuse), a form that sends a test message, the blocks
//! in force with forms that add and remove them, and live counters polled by a small embedded
//! script. No build step: the stylesheet and the
//! script are embedded in the binary.
//!
//! Every browser gets a session (a random id in an `HttpOnly`, `SameSite=Strict` cookie,
//! `session.rs`) on its first page. When `console.token` is set, the session must have signed in
//! with it (scripts may send the token as a bearer header for pages instead); without one the
//! console is served only on a loopback listener (the configuration check refuses anything
//! else). Every form carries the session's anti-forgery token, and a state-changing request
//! is carried out only with that token and from the console's own origin (`Origin`, or
//! `Sec-Fetch-Site` without it): a page of another website cannot drive the console. The
//! listener answers only the host names it is configured for ([`host`]).

mod audit;
mod blocks;
pub mod host;
mod queue;
mod remotes;
mod session;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use actix_web::http::{Method, header};
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use self::session::{Session, Sessions};
use super::{NAME, parse_request};
use crate::config::{Config, Secret};
use crate::error::{Error, Result};
use crate::markdown::escape_html as esc;
use crate::message::Timestamp;
use crate::net::constant_time_eq;
use crate::pipeline::{Front, Pipeline};
use crate::store::threads::{self, ThreadFilter};
use crate::store::{jobs, messages};

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("console.js");
const COOKIE: &str = "switchboard_console";
/// The anti-forgery token's form field.
const CSRF_FIELD: &str = "csrf";

/// The console as the metrics listener serves it.
#[derive(Debug, Clone)]
pub struct Console {
    pipeline: Front,
    token: Option<Secret>,
    /// Each agent: name, handle, email, card URL, backend kind.
    agents: std::sync::Arc<Vec<crate::ops::AgentAddresses>>,
    trail: audit::Trail,
    sessions: Sessions,
}

/// What a page request found: its session (none for a bearer-token script) and whether the
/// session was made for this response (its cookie is then set).
struct Visit {
    session: Option<Session>,
    fresh: bool,
}

impl Console {
    /// The console for `config`, or `None` when `console.enabled` is off.
    ///
    /// # Errors
    /// [`Error::Config`] when the public URL is unusable.
    pub fn new(
        config: &Config,
        addresses: &[crate::ops::AddressKind],
        pipeline: Pipeline,
    ) -> Result<Option<Self>> {
        if !config.console.enabled {
            return Ok(None);
        }
        Ok(Some(Self {
            pipeline: pipeline.front(),
            token: config.console.token.clone(),
            agents: std::sync::Arc::new(crate::ops::agent_addresses(config, addresses)?),
            trail: audit::Trail::new(config),
            sessions: Sessions::new(config.console.session_idle_minutes),
        }))
    }

    fn now_ms(&self) -> i64 {
        self.pipeline.clock().now_ms()
    }

    /// Whether the request carries the console token as a bearer header.
    fn bearer(&self, req: &HttpRequest) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| constant_time_eq(given.as_bytes(), token.expose().as_bytes()))
    }

    /// The live session the request's cookie names.
    fn session(&self, req: &HttpRequest) -> Option<Session> {
        let now = self.now_ms();
        req.headers()
            .get_all(header::COOKIE)
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .find_map(|id| self.sessions.get(id, now))
    }

    /// The request's session, or a new one (signed in when there is no token to sign in
    /// with); a bearer-token script gets none.
    fn visit(&self, req: &HttpRequest) -> Visit {
        if let Some(session) = self.session(req) {
            return Visit {
                session: Some(session),
                fresh: false,
            };
        }
        if self.bearer(req) {
            return Visit {
                session: None,
                fresh: false,
            };
        }
        Visit {
            session: Some(self.sessions.create(self.token.is_none(), self.now_ms())),
            fresh: true,
        }
    }

    /// Whether the request may read the console.
    fn signed_in(&self, req: &HttpRequest, session: Option<&Session>) -> bool {
        self.token.is_none() || session.is_some_and(|s| s.signed_in) || self.bearer(req)
    }

    /// The checks of a state-changing request: it comes from the console's own origin, from a
    /// session (signed in when a token is set) whose anti-forgery token it carries. The refusal
    /// otherwise: 403 (401 for a session that has not signed in), nothing done.
    #[allow(clippy::result_large_err)]
    fn check_form(
        &self,
        req: &HttpRequest,
        csrf: &str,
    ) -> std::result::Result<Session, HttpResponse> {
        let client = client_addr(req);
        if !same_origin(req) {
            tracing::warn!(
                client = %client_label(client),
                path = req.path(),
                origin = header_str(req, &header::ORIGIN),
                sec_fetch_site = header_str(req, "sec-fetch-site"),
                "console: refused a request from another origin"
            );
            return Err(forbidden("this request came from another website"));
        }
        let session = self.session(req);
        if self.token.is_some() && !session.as_ref().is_some_and(|s| s.signed_in) {
            return Err(HttpResponse::Unauthorized().finish());
        }
        match session {
            Some(s) if s.forms_match(csrf) => Ok(s),
            _ => {
                tracing::warn!(
                    client = %client_label(client),
                    path = req.path(),
                    "console: refused a form without this session's anti-forgery token"
                );
                Err(forbidden(
                    "the form's anti-forgery token is missing or stale; reload the page",
                ))
            }
        }
    }
}

/// The client's address (the private listener trusts no proxy).
fn client_addr(req: &HttpRequest) -> Option<IpAddr> {
    req.peer_addr().map(|a| a.ip())
}

/// The client's address as logs show it.
fn client_label(client: Option<IpAddr>) -> String {
    client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string())
}

fn header_str(req: &HttpRequest, name: impl header::AsHeaderName) -> &str {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Whether a state-changing request comes from the console's own pages: its `Origin` is this
/// server's (scheme and `Host`), or, without an `Origin`, `Sec-Fetch-Site` says `same-origin`
/// or `none` (typed by the user). A request with neither is not a browser's and passes (it
/// still needs the session's anti-forgery token).
fn same_origin(req: &HttpRequest) -> bool {
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let info = req.connection_info();
        let own = format!("{}://{}", info.scheme(), info.host());
        return origin.to_str().is_ok_and(|o| o.eq_ignore_ascii_case(&own));
    }
    match req.headers().get("sec-fetch-site") {
        None => true,
        Some(v) => matches!(v.to_str(), Ok("same-origin" | "none")),
    }
}

fn forbidden(why: &str) -> HttpResponse {
    HttpResponse::Forbidden()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(format!(
            "<!doctype html><title>403 Forbidden</title><p id=\"refused\">Refused: {}. Nothing was changed.</p>\
             <p><a href=\"/console\">Back to the console</a></p>",
            esc(why)
        ))
}

/// The session cookie: `HttpOnly`, `SameSite=Strict`, the console's path only, `Secure` over
/// https; `None` as the id clears it.
fn session_cookie(req: &HttpRequest, id: Option<&str>) -> String {
    let secure = if req.connection_info().scheme() == "https" {
        "; Secure"
    } else {
        ""
    };
    let (value, expiry) = id.map_or(("", "; Max-Age=0"), |id| (id, ""));
    format!("{COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict{secure}{expiry}")
}

/// Mounts the console's routes.
pub fn configure(cfg: &mut web::ServiceConfig, console: Console) {
    cfg.app_data(web::Data::new(console))
        .app_data(web::FormConfig::default().limit(64 * 1024))
        .route("/console", web::get().to(agents_page))
        .route("/console/", web::get().to(console_root))
        .route("/console/login", web::get().to(login_page))
        .route("/console/login", web::post().to(login))
        .route("/console/logout", web::post().to(logout))
        .route("/console/style.css", web::get().to(style))
        .route("/console/console.js", web::get().to(script))
        .route("/console/counters.json", web::get().to(counters))
        .route("/console/threads", web::get().to(threads_page))
        .route("/console/threads/{id}", web::get().to(thread_page))
        .route("/console/messages/{id}", web::get().to(message_page))
        .route("/console/queue", web::get().to(queue::queue_page))
        .route("/console/queue/retry", web::post().to(queue::queue_retry))
        .route("/console/queue/purge", web::post().to(queue::queue_purge))
        .route("/console/hosts", web::get().to(remotes::hosts_page))
        .route("/console/reports", web::get().to(remotes::reports_page))
        .route("/console/send", web::get().to(send_page))
        .route("/console/send", web::post().to(send))
        .route("/console/blocks", web::get().to(blocks::blocks_page))
        .route("/console/blocks", web::post().to(blocks::add_block))
        .route("/console/audit", web::get().to(audit::audit_page))
        .route(
            "/console/blocks/remove",
            web::post().to(blocks::remove_block),
        );
}

/// `/console/`: the console is at `/console`.
async fn console_root() -> HttpResponse {
    see_other("/console")
}

fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to))
        .finish()
}

fn html(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("X-Frame-Options", "DENY"))
        .body(body)
}

/// What a rendered page carries for its session: the anti-forgery token put into each of its
/// forms, and whether it shows a sign-out button.
#[derive(Default)]
struct Chrome {
    csrf: String,
    sign_out: bool,
}

impl Chrome {
    fn of(c: &Console, session: Option<&Session>) -> Self {
        Self {
            csrf: session.map(|s| s.csrf.clone()).unwrap_or_default(),
            sign_out: c.token.is_some() && session.is_some_and(|s| s.signed_in),
        }
    }
}

/// `html` with the anti-forgery token as a hidden field at the start of each of its forms.
fn with_csrf(html: &str, csrf: &str) -> String {
    let field = format!(
        "<input type=\"hidden\" name=\"{CSRF_FIELD}\" value=\"{}\">",
        esc(csrf)
    );
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(at) = rest.find("<form") {
        let Some(end) = rest[at..].find('>') else {
            break;
        };
        let (head, tail) = rest.split_at(at + end + 1);
        out.push_str(head);
        out.push_str(&field);
        rest = tail;
    }
    out.push_str(rest);
    out
}

fn page(active: &str, title: &str, main: &str, chrome: &Chrome) -> HttpResponse {
    let mut nav = String::new();
    for (href, name) in [
        ("/console", "Agents"),
        ("/console/threads", "Conversations"),
        ("/console/queue", "Queue"),
        ("/console/hosts", "Remote hosts"),
        ("/console/reports", "Reports"),
        ("/console/send", "Send a test message"),
        ("/console/blocks", "Blocks"),
        ("/console/audit", "Audit log"),
    ] {
        let on = if name == active { " class=\"on\"" } else { "" };
        let _ = write!(nav, "<a href=\"{href}\"{on}>{name}</a>");
    }
    // The sign-in page (under no navigation entry) has no counters to poll.
    let (counters, script) = if active.is_empty() {
        ("", "")
    } else {
        (
            "<span class=\"counters\">messages <b data-counter=\"inbound\">…</b> · \
             responses <b data-counter=\"responses\">…</b> · queued <b data-counter=\"ready\">…</b> · \
             running <b data-counter=\"running\">…</b> · dead <b data-counter=\"dead\">…</b></span>",
            "<script src=\"/console/console.js\"></script>",
        )
    };
    let sign_out = if chrome.sign_out {
        "<form class=\"inline\" method=\"post\" action=\"/console/logout\">\
         <button type=\"submit\" id=\"sign-out\">Sign out</button></form>"
    } else {
        ""
    };
    html(with_csrf(
        &format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} · switchboard</title>\
             <link rel=\"stylesheet\" href=\"/console/style.css\"></head><body>\
             <header><strong>switchboard</strong>{nav}{counters}{sign_out}</header>\
             <main><h1>{t}</h1>{main}</main>{script}</body></html>",
            t = esc(title)
        ),
        &chrome.csrf,
    ))
}

fn failure(e: &Error) -> HttpResponse {
    let status = crate::http::error_response(e).status();
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .body(format!(
            "<!doctype html><title>{status}</title><p>{}</p><p><a href=\"/console\">Back</a></p>",
            esc(&e.to_string())
        ))
}

/// What a console handler renders (made on the main runtime, so plain data).
enum View {
    /// A page: the navigation entry it is under, its title and its content.
    Page(&'static str, String, String),
    /// A redirect after a form.
    Redirect(String),
}

impl View {
    fn page(active: &'static str, title: &str, main: &str) -> Self {
        Self::Page(active, title.to_owned(), main.to_owned())
    }

    fn render(self, chrome: &Chrome) -> HttpResponse {
        match self {
            Self::Page(active, title, main) => page(active, &title, &main, chrome),
            Self::Redirect(to) => see_other(&to),
        }
    }
}

/// Runs `f` on the main runtime and renders its view, setting the session's cookie when it
/// is new.
async fn run_view<F, Fut>(c: &Console, req: &HttpRequest, visit: Visit, f: F) -> HttpResponse
where
    F: FnOnce(Pipeline) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<View>> + Send + 'static,
{
    let chrome = Chrome::of(c, visit.session.as_ref());
    let mut res = match c.pipeline.run(f).await {
        Ok(v) => v.render(&chrome),
        Err(e) => failure(&e),
    };
    if let (true, Some(s)) = (visit.fresh, &visit.session) {
        set_cookie(&mut res, &session_cookie(req, Some(&s.id)));
    }
    res
}

fn set_cookie(res: &mut HttpResponse, cookie: &str) {
    if let Ok(v) = header::HeaderValue::from_str(cookie) {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// A page: checks the session (to the sign-in without one), then runs `f` on the main
/// runtime and renders its view. Anything but a read is refused here: forms go through
/// [`guarded_form`].
async fn guarded<F, Fut>(c: &Console, req: &HttpRequest, f: F) -> HttpResponse
where
    F: FnOnce(Pipeline) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<View>> + Send + 'static,
{
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return forbidden("a form without its anti-forgery token");
    }
    let visit = c.visit(req);
    if !c.signed_in(req, visit.session.as_ref()) {
        let mut res = see_other("/console/login");
        if let (true, Some(s)) = (visit.fresh, &visit.session) {
            set_cookie(&mut res, &session_cookie(req, Some(&s.id)));
        }
        return res;
    }
    run_view(c, req, visit, f).await
}

/// A form: checks its origin, session and anti-forgery token `csrf` ([`Console::check_form`]),
/// then runs `f` on the main runtime and renders its view.
async fn guarded_form<F, Fut>(c: &Console, req: &HttpRequest, csrf: &str, f: F) -> HttpResponse
where
    F: FnOnce(Pipeline) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<View>> + Send + 'static,
{
    match c.check_form(req, csrf) {
        Ok(session) => {
            let visit = Visit {
                session: Some(session),
                fresh: false,
            };
            run_view(c, req, visit, f).await
        }
        Err(refused) => refused,
    }
}

/// A form that carries nothing but the anti-forgery token (a body that is not a form reads as
/// one without it, so the refusal is the console's).
#[derive(serde::Deserialize)]
struct TokenOnly {
    #[serde(default)]
    csrf: String,
}

fn when(ms: Option<i64>) -> String {
    ms.map_or_else(
        || "—".to_owned(),
        |ms| Timestamp::from_unix_millis(ms).to_string(),
    )
}

async fn style() -> HttpResponse {
    HttpResponse::Ok().content_type("text/css").body(STYLE)
}

async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript")
        .body(SCRIPT)
}

async fn login_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    let visit = c.visit(&req);
    if c.token.is_none() || visit.session.as_ref().is_some_and(|s| s.signed_in) {
        return see_other("/console");
    }
    let mut res = page(
        "",
        "Sign in",
        "<form method=\"post\" action=\"/console/login\"><label for=\"token\">Console token</label>\
         <input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"current-password\">\
         <p><button type=\"submit\">Sign in</button></p></form>",
        &Chrome::of(&c, visit.session.as_ref()),
    );
    if let (true, Some(s)) = (visit.fresh, &visit.session) {
        set_cookie(&mut res, &session_cookie(&req, Some(&s.id)));
    }
    res
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /console/login`: from the console's origin, with the sign-in form's anti-forgery
/// token, at most [`session::MAX_FAILURES`] failures a minute per client address (then 429);
/// a success replaces the session with a new signed-in one.
async fn login(
    c: web::Data<Console>,
    req: HttpRequest,
    form: web::Form<LoginForm>,
) -> HttpResponse {
    let Some(token) = &c.token else {
        return see_other("/console");
    };
    let client = client_addr(&req);
    if !same_origin(&req) {
        tracing::warn!(client = %client_label(client), "console sign-in refused: from another origin");
        return forbidden("this request came from another website");
    }
    let now = c.now_ms();
    if let Some(wait) = client.and_then(|ip| c.sessions.throttled(ip, now)) {
        tracing::warn!(client = %client_label(client), retry_after_s = wait, "console sign-in refused: too many failed attempts");
        return HttpResponse::TooManyRequests()
            .insert_header((header::RETRY_AFTER, wait.to_string()))
            .content_type("text/html; charset=utf-8")
            .body("<!doctype html><p>Too many failed sign-ins from this address; try again later.</p>");
    }
    let Some(old) = c.session(&req).filter(|s| s.forms_match(&form.csrf)) else {
        tracing::warn!(client = %client_label(client), "console sign-in refused: no anti-forgery token of a session");
        return forbidden(
            "the sign-in form's anti-forgery token is missing or stale; reload the page",
        );
    };
    if !constant_time_eq(form.token.as_bytes(), token.expose().as_bytes()) {
        if let Some(ip) = client {
            c.sessions.failed(ip, now);
        }
        tracing::warn!(client = %client_label(client), "console sign-in refused: wrong token");
        return HttpResponse::Unauthorized()
            .content_type("text/html; charset=utf-8")
            .body("<!doctype html><p>Wrong token. <a href=\"/console/login\">Try again</a></p>");
    }
    c.sessions.revoke(&old.id);
    let session = c.sessions.create(true, now);
    tracing::info!(client = %client_label(client), "console: signed in");
    let mut res = see_other("/console");
    set_cookie(&mut res, &session_cookie(&req, Some(&session.id)));
    res
}

/// `POST /console/logout`: ends the session and clears its cookie.
async fn logout(
    c: web::Data<Console>,
    req: HttpRequest,
    form: Option<web::Form<TokenOnly>>,
) -> HttpResponse {
    let csrf = form.map(|f| f.into_inner().csrf).unwrap_or_default();
    match c.check_form(&req, &csrf) {
        Ok(session) => {
            c.sessions.revoke(&session.id);
            tracing::info!(client = %client_label(client_addr(&req)), "console: signed out");
            let mut res = see_other(if c.token.is_some() {
                "/console/login"
            } else {
                "/console"
            });
            set_cookie(&mut res, &session_cookie(&req, None));
            res
        }
        Err(refused) => refused,
    }
}

async fn counters(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    if !c.signed_in(&req, c.session(&req).as_ref()) {
        return HttpResponse::Unauthorized().finish();
    }
    let found = c
        .pipeline
        .run(|p| async move {
            let db = p.db();
            let mut out: HashMap<String, i64> = HashMap::new();
            for d in messages::counts(db).await? {
                let key = if d.direction == "in" {
                    "inbound"
                } else {
                    "responses"
                };
                out.insert(key.into(), d.n);
            }
            for state in ["ready", "running", "dead"] {
                out.insert(state.into(), 0);
            }
            for j in jobs::depth(db).await? {
                *out.entry(j.state).or_default() += j.n;
            }
            Ok(out)
        })
        .await;
    match found {
        Ok(v) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "no-store"))
            .json(v),
        Err(e) => crate::http::error_response(&e),
    }
}

async fn agents_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    let agents = std::sync::Arc::clone(&c.agents);
    let since = c.pipeline.clock().now_ms().saturating_sub(86_400_000);
    guarded(&c, &req, move |p| async move {
        let db = p.db();
        let activity: HashMap<String, threads::AgentActivity> = threads::agent_activity(db)
            .await?
            .into_iter()
            .map(|a| (a.agent.clone(), a))
            .collect();
        let latency: HashMap<String, i64> = threads::agent_latency(db, since)
            .await?
            .into_iter()
            .map(|a| (a.agent, a.latency_ms))
            .collect();
        let tokens: HashMap<String, (i64, i64)> = crate::store::usage::per_agent(db, since)
            .await?
            .into_iter()
            .map(|t| (t.agent, (t.prompt_tokens, t.completion_tokens)))
            .collect();
        let mut rows = String::new();
        for a in agents.iter() {
            let act = activity.get(&a.name);
            let mut addresses = String::new();
            for (_, addr) in &a.addresses {
                let _ = match addr.as_deref() {
                    None => write!(addresses, "<td>—</td>"),
                    Some(u) if u.starts_with("https://") || u.starts_with("http://") => {
                        write!(addresses, "<td><a href=\"{0}\">{0}</a></td>", esc(u))
                    }
                    Some(other) => write!(addresses, "<td>{}</td>", esc(other)),
                };
            }
            let _ = write!(
                rows,
                "<tr data-agent=\"{n}\"><td><a href=\"/console/threads?agent={n}\">{n}</a></td>{addresses}\
                 <td><span class=\"badge\">{b}</span></td><td>{ok}</td><td>{ko}</td><td>{lat}</td><td>{tok}</td></tr>",
                n = esc(&a.name),
                b = esc(a.backend),
                ok = when(act.and_then(|a| a.last_success)),
                ko = when(act.and_then(|a| a.last_failure)),
                lat = latency
                    .get(&a.name)
                    .map_or_else(|| "—".to_owned(), |ms| format!("{ms} ms")),
                tok = tokens.get(&a.name).map_or_else(
                    || "—".to_owned(),
                    |(p, c)| format!("{} ({p} prompt, {c} completion)", p.saturating_add(*c))
                ),
            );
        }
        let columns: String = agents
            .first()
            .map(|a| {
                a.addresses
                    .iter()
                    .map(|(k, _)| format!("<th>{}</th>", esc(k.label)))
                    .collect()
            })
            .unwrap_or_default();
        Ok(View::page(
            "Agents",
            "Agents",
            &format!(
                "<table><tr><th>Name</th>{columns}<th>Backend</th>\
                 <th>Last answer</th><th>Last failure</th><th>Latency (24 h)</th>\
                 <th>Tokens (24 h)</th></tr>{rows}</table>"
            ),
        ))
    })
    .await
}

#[derive(serde::Deserialize)]
struct ThreadsQuery {
    agent: Option<String>,
    transport: Option<String>,
}

async fn threads_page(
    c: web::Data<Console>,
    req: HttpRequest,
    q: web::Query<ThreadsQuery>,
) -> HttpResponse {
    let q = q.into_inner();
    guarded(&c, &req, move |p| async move {
        let db = p.db();
        let filter = ThreadFilter {
            agent: q.agent.as_deref(),
            transport: q.transport.as_deref(),
            before: None,
        };
        let rows = threads::list(db, filter, 100).await?;
        let mut body = String::new();
        for t in super::read::summaries(db, &rows).await? {
            let _ = write!(
                body,
                "<tr><td><a href=\"/console/threads/{id}\">{id}</a></td><td><span class=\"badge\">{tr}</span></td>\
                 <td>{ag}</td><td>{created}</td><td>{last}</td><td>{n}</td></tr>",
                id = esc(&t.id),
                tr = esc(&t.transport),
                ag = esc(&t.agents.join(", ")),
                created = t.created_at,
                last = t.last_activity,
                n = t.message_count,
            );
        }
        Ok(View::page(
            "Conversations",
            "Conversations",
            &format!(
                "<p class=\"muted\">Newest first, every transport (the first 100).</p><table><tr><th>Thread</th>\
                 <th>Transport</th><th>Agents</th><th>Opened</th><th>Last activity</th><th>Messages</th></tr>{body}</table>"
            ),
        ))
    })
    .await
}

/// The sender evidence badges of a stored message body: method and whether it was verified.
fn evidence(body: &Value) -> String {
    let sender = &body["sender"];
    let verified = sender["verified"].as_bool().unwrap_or(false);
    format!(
        "<span class=\"badge\">{}</span> <span class=\"badge {}\">{}</span>",
        esc(sender["auth_method"].as_str().unwrap_or("none")),
        if verified { "ok" } else { "no" },
        if verified { "verified" } else { "unverified" }
    )
}

/// The text of a stored body's text parts.
fn text_of(body: &Value) -> String {
    body["parts"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

async fn thread_page(
    c: web::Data<Console>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let id = path.into_inner();
    guarded(&c, &req, move |p| async move {
        let db = p.db();
        let thread = threads::get(db, &id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no thread {id}")))?;
        let rows = threads::entries(db, &id, 1_000).await?;
        let mut body = format!(
            "<p><span class=\"badge\">{}</span> opened {}</p>",
            esc(&thread.transport),
            when(Some(thread.created_at))
        );
        for m in &rows {
            let v: Value = serde_json::from_str(&m.body).map_err(Error::corrupt)?;
            if let Some(at) = m.deleted_at {
                let _ = write!(
                    body,
                    "<div class=\"entry in deleted\"><a href=\"/console/messages/{id}\">{sender}</a> → {agent} \
                     <span class=\"badge no\">deleted</span> <span class=\"muted\">{at}, deleted {del}</span></div>",
                    id = esc(&m.id),
                    sender = esc(v["sender"]["address"].as_str().unwrap_or("?")),
                    agent = esc(&m.agent),
                    at = when(Some(m.created_at)),
                    del = when(Some(at)),
                );
            } else if m.direction == "in" {
                let _ = write!(
                    body,
                    "<div class=\"entry in\"><a href=\"/console/messages/{id}\">{sender}</a> → {agent} {ev} \
                     <span class=\"muted\">{at}</span><div>{text}</div></div>",
                    id = esc(&m.id),
                    sender = esc(v["sender"]["address"].as_str().unwrap_or("?")),
                    agent = esc(&m.agent),
                    ev = evidence(&v),
                    at = when(Some(m.created_at)),
                    text = esc(&text_of(&v)),
                );
            } else {
                let _ = write!(
                    body,
                    "<div class=\"entry out\">{agent} <span class=\"badge ok\">agent</span> \
                     <span class=\"muted\">{at}</span><div>{text}</div></div>",
                    agent = esc(&m.agent),
                    at = when(Some(m.created_at)),
                    text = esc(&text_of(&v)),
                );
            }
        }
        Ok(View::page("Conversations", &format!("Conversation {id}"), &body))
    })
    .await
}

fn pretty(v: &Value) -> String {
    esc(&serde_json::to_string_pretty(v).unwrap_or_default())
}

async fn message_page(
    c: web::Data<Console>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let id = path.into_inner();
    guarded(&c, &req, move |p| async move {
        let db = p.db();
        let m = threads::entry(db, &id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no message {id}")))?;
        let mut body: Value = serde_json::from_str(&m.body).map_err(Error::corrupt)?;
        crate::message::NormalizedMessage::strip_stored(&mut body);
        let response = threads::responses_to(db, &[m.id.as_str()]).await?.pop();
        let response_id = response.as_ref().map(|r| r.id.clone());
        let mut job_ids = vec![format!("dispatch:{}", m.id)];
        job_ids.extend(response_id.iter().map(|r| format!("deliver:{r}")));
        let refs: Vec<&str> = job_ids.iter().map(String::as_str).collect();
        let jobs = jobs::get_many(db, &refs).await?;
        let deliveries = threads::deliveries(db, &response_id.iter().map(String::as_str).collect::<Vec<_>>()).await?;
        let (status, failure) = super::read::progress(db, &[&m])
            .await?
            .remove(&m.id)
            .map(|p| (p.status, p.delivery_failure))
            .unzip();
        let failure = failure.flatten().map_or_else(String::new, |f| {
            let row = |name: &str, id: &str, v: Option<&String>| {
                v.map_or_else(String::new, |v| {
                    format!("<tr><th>{name}</th><td id=\"{id}\">{}</td></tr>", esc(v))
                })
            };
            format!(
                "<h2>Delivery failure</h2><table id=\"delivery-failure\">{}{}{}{}</table>",
                row("Status code", "failure-status", f.status_code.as_ref()),
                row("Diagnostic", "failure-diagnostic", f.diagnostic.as_ref()),
                row("Remote server", "failure-remote", f.remote_mta.as_ref()),
                row("Recipient", "failure-recipient", f.recipient.as_ref()),
            )
        });
        let mut attempts = String::new();
        for j in &jobs {
            let _ = write!(
                attempts,
                "<tr><td>{id}</td><td>{state}</td><td>{a} / {max}</td><td>{err}</td><td>{at}</td></tr>",
                id = esc(&j.id),
                state = esc(&j.state),
                a = j.attempts,
                max = j.max_attempts,
                err = esc(j.last_error.as_deref().unwrap_or("")),
                at = when(Some(j.updated_at)),
            );
        }
        for d in &deliveries {
            let _ = write!(
                attempts,
                "<tr><td>{id}</td><td>{outcome} (recorded)</td><td>{a}</td><td></td><td>{at}</td></tr>",
                id = esc(&d.job_id),
                outcome = esc(&d.outcome),
                a = d.attempts,
                at = when(Some(d.finished_at)),
            );
        }
        let status_json = serde_json::to_value(&status).map_err(Error::corrupt)?;
        let status_json = if m.direction == "in" { status_json } else { json!({"status": "response"}) };
        let deleted = m.deleted_at.map_or_else(String::new, |at| {
            format!(
                "<p id=\"deleted\"><span class=\"badge no\">deleted</span> {}: its author deleted it; \
                 its content, attachments and raw wire form are erased.</p>",
                when(Some(at))
            )
        });
        let main = format!(
            "{deleted}<p>Status <span class=\"badge\" id=\"status\">{st}</span> · thread <a href=\"/console/threads/{th}\">{th}</a> · \
             {ev}</p><h2>Dispatch and delivery attempts</h2><table><tr><th>Job</th><th>State</th><th>Attempts</th>\
             <th>Last error</th><th>Updated</th></tr>{attempts}</table>{failure}\
             <h2>NormalizedMessage</h2><pre id=\"normalized\">{msg}</pre><h2>Raw wire form</h2><pre id=\"raw\">{raw}</pre>{resp}",
            st = esc(status_json["status"].as_str().unwrap_or("")),
            th = esc(&m.thread_id),
            ev = evidence(&body),
            msg = pretty(&body),
            raw = pretty(&body["raw"]),
            resp = match &response {
                Some(r) => {
                    let v: Value = serde_json::from_str(&r.body).map_err(Error::corrupt)?;
                    format!("<h2>Response</h2><pre id=\"response\">{}</pre>", pretty(&v))
                }
                None => String::new(),
            },
        );
        Ok(View::page("Conversations", &format!("Message {id}"), &main))
    })
    .await
}

async fn send_page(c: web::Data<Console>, req: HttpRequest) -> HttpResponse {
    let mut options = String::new();
    for a in c.agents.iter() {
        let _ = write!(
            options,
            "<option value=\"{h}\">{h}</option>",
            h = esc(a.get("fediverse").unwrap_or(&a.name))
        );
    }
    let main = format!(
        "<form method=\"post\" action=\"/console/send\"><label for=\"recipient\">Agent</label>\
         <select id=\"recipient\" name=\"recipient\">{options}</select>\
         <label for=\"text\">Message</label><textarea id=\"text\" name=\"text\" rows=\"4\"></textarea>\
         <p><button type=\"submit\" id=\"send\">Send</button></p></form>\
         <p class=\"muted\">Sent through the operator API's transport as <code>console@localhost</code>, unverified.</p>"
    );
    guarded(&c, &req, move |_| async move {
        Ok(View::page(
            "Send a test message",
            "Send a test message",
            &main,
        ))
    })
    .await
}

#[derive(serde::Deserialize)]
struct SendForm {
    recipient: String,
    text: String,
    #[serde(default)]
    csrf: String,
}

async fn send(c: web::Data<Console>, req: HttpRequest, form: web::Form<SendForm>) -> HttpResponse {
    let form = form.into_inner();
    if let Err(refused) = c.check_form(&req, &form.csrf) {
        return refused;
    }
    let external_id = format!("console:{}", uuid::Uuid::now_v7());
    let request = json!({
        "external_id": external_id,
        "message": {
            "sender": {"address": "console@localhost", "auth_method": "none", "verified": false},
            "recipient": form.recipient,
            "parts": [{"kind": "text", "mime": "text/plain", "content": form.text}]
        }
    });
    let parsed = serde_json::to_vec(&request)
        .map_err(Error::corrupt)
        .and_then(|b| parse_request(&b, c.pipeline.clock().now()));
    let (external_id, msg) = match parsed {
        Ok(x) => x,
        Err(e) => return failure(&e),
    };
    let record = super::audit::SendRecord::new(audit::actor(&c, &req), &external_id, &msg);
    match c
        .pipeline
        .run(move |p| async move { p.ingest_with(NAME, &external_id, msg, record).await })
        .await
    {
        Ok((o, _)) => see_other(&format!("/console/messages/{}", o.message_id)),
        Err(e) => failure(&e),
    }
}
