//! The console's side of the audit trail ([`crate::store::audit`]): who acted on a console
//! request (the console session and the client address), the queue's retry and purge written
//! with their records, and the audit page `/console/audit`: the recorded operator actions,
//! newest first, filtered by action and time, a page at a time.

use std::fmt::Write as _;
use std::net::IpAddr;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::{COOKIE, Console, View, esc, guarded};
use crate::net::client_addr::{self, TrustedProxies};
use crate::store::Db;
use crate::store::audit::{self, Actor};
use crate::store::jobs;
use crate::transports::api::audit::AuditQuery;

/// Records shown on one page of `/console/audit` (the most the read API gives).
const PAGE: i64 = 200;

/// What the console needs to say who acted: the proxies whose forwarding headers are believed
/// (`server.trusted_proxies`).
#[derive(Debug, Clone, Default)]
pub(super) struct Trail {
    trusted: std::sync::Arc<TrustedProxies>,
}

impl Trail {
    /// From the server's trusted proxies (an unusable list, which the configuration check
    /// refuses, trusts none).
    pub(super) fn new(config: &crate::config::Config) -> Self {
        Self {
            trusted: std::sync::Arc::new(config.server.trusted().unwrap_or_default()),
        }
    }
}

/// A short non-secret id of the console session a request carries: the first 8 hex digits of
/// the SHA-256 of its session cookie (or of the bearer token it signs in with), `None` without
/// either (a console without `console.token`).
pub(super) fn session_id(req: &HttpRequest) -> Option<String> {
    session_cookie(req)
        .or_else(|| bearer(req))
        .filter(|v| !v.is_empty())
        .map(audit::short_id)
}

/// The value of the session cookie, when the request has one.
fn session_cookie(req: &HttpRequest) -> Option<&str> {
    for value in req.headers().get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((name, v)) = pair.trim().split_once('=')
                && name == COOKIE
            {
                return Some(v);
            }
        }
    }
    None
}

/// The bearer token of the request, when it has one.
fn bearer(req: &HttpRequest) -> Option<&str> {
    let auth = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    auth.strip_prefix("Bearer ")
}

/// The client of a console request: the address the public listener's middleware set, else
/// the peer, or behind a trusted proxy the address its forwarding headers name.
fn client(trail: &Trail, req: &HttpRequest) -> Option<IpAddr> {
    if let Some(ip) = crate::http::client_addr(req) {
        return Some(ip);
    }
    let peer = req.peer_addr()?.ip();
    let headers = req.headers();
    let forwarded: Vec<&[u8]> = headers.get_all("forwarded").map(|v| v.as_bytes()).collect();
    let xff: Vec<&[u8]> = headers
        .get_all("x-forwarded-for")
        .map(|v| v.as_bytes())
        .collect();
    Some(client_addr::resolve(peer, &trail.trusted, &forwarded, &xff))
}

/// Who acts on a console request: `console`, with `:` and the session's id when it has one,
/// and the client address.
pub(super) fn actor(c: &Console, req: &HttpRequest) -> Actor {
    Actor {
        credential: session_id(req)
            .map_or_else(|| "console".to_owned(), |id| format!("console:{id}")),
        client: client(&c.trail, req).map(|ip| ip.to_canonical().to_string()),
    }
}

/// Puts the dead job `id` back, recorded as done by `by`, in one transaction.
///
/// # Errors
/// Database errors: neither happened.
pub(super) async fn retry(db: &Db, by: &Actor, id: &str, now: i64) -> crate::error::Result<()> {
    let mut tx = db.begin().await?;
    let n = jobs::retry_dead_in(&mut tx, Some(id), now).await?;
    let entry = audit::Entry {
        actor: by,
        action: audit::action::QUEUE_RETRY,
        target: id,
        detail: json!({ "jobs": n }),
    };
    audit::record(&mut tx, &entry, now).await?;
    tx.commit().await
}

/// Deletes every dead job, recorded as done by `by`, in one transaction.
///
/// # Errors
/// Database errors: neither happened.
pub(super) async fn purge(db: &Db, by: &Actor, now: i64) -> crate::error::Result<()> {
    let mut tx = db.begin().await?;
    let n = jobs::purge_in(&mut tx, "dead").await?;
    let entry = audit::Entry {
        actor: by,
        action: audit::action::QUEUE_PURGE,
        target: "dead",
        detail: json!({ "jobs": n }),
    };
    audit::record(&mut tx, &entry, now).await?;
    tx.commit().await
}

/// `GET /console/audit?action=&since=&cursor=`.
pub(super) async fn audit_page(
    c: web::Data<Console>,
    req: HttpRequest,
    q: web::Query<AuditQuery>,
) -> HttpResponse {
    let mut q = q.into_inner();
    q.limit = Some(PAGE);
    guarded(&c, &req, move |p| async move {
        let found = crate::transports::api::audit::page(p.db(), &q).await?;
        let (action, since) = (q.action.unwrap_or_default(), q.since.unwrap_or_default());
        let older = found.next_cursor.map_or_else(String::new, |next| {
            let query = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("action", &action)
                .append_pair("since", &since)
                .append_pair("cursor", &next)
                .finish();
            format!("<p><a id=\"older\" href=\"/console/audit?{}\">Older</a></p>", esc(&query))
        });
        let mut body = String::new();
        for r in found.entries {
            let _ = write!(
                body,
                "<tr data-audit=\"{id}\"><td>{at}</td><td><code data-action>{action}</code></td>\
                 <td data-target>{target}</td><td><code>{detail}</code></td><td data-credential>{cred}</td>\
                 <td data-client>{client}</td></tr>",
                id = esc(&r.id),
                at = r.at,
                action = esc(&r.action),
                target = esc(&r.target),
                detail = esc(&r.detail.to_string()),
                cred = esc(&r.credential),
                client = esc(r.client.as_deref().unwrap_or("—")),
            );
        }
        let main = format!(
            "<p class=\"muted\">What operators did through the console and the operator API, newest \
             first: when, what, with which credential (never the secret itself) and from which address. \
             Also at <code>GET /api/v1/audit</code>; kept as long as messages (<code>database.retention_days</code>).</p>\
             <form method=\"get\" action=\"/console/audit\"><label for=\"action\">Action</label>\
             <input id=\"action\" name=\"action\" value=\"{action}\" placeholder=\"block.add\">\
             <label for=\"since\">Since (RFC 3339)</label>\
             <input id=\"since\" name=\"since\" value=\"{since}\" placeholder=\"2026-12-01T00:00:00Z\">\
             <p><button type=\"submit\">Filter</button></p></form>\
             <table id=\"audit\"><tr><th>When</th><th>Action</th><th>Target</th><th>Detail</th>\
             <th>Credential</th><th>Client</th></tr>{body}</table>{older}",
            action = esc(&action),
            since = esc(&since),
        );
        Ok(View::page("Audit log", "Audit log", &main))
    })
    .await
}
