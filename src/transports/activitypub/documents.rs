//! Discovery and the documents other servers fetch: WebFinger, agent actors (JSON for
//! ActivityPub clients, an HTML profile page for browsers), the instance actor, NodeInfo 2.1,
//! outbox and followers collections, the thread contexts agents minted, and every note an agent
//! posted at its id.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::actor::actor_doc;
use super::answer::{AP_JSON, ap, not_found};
use super::mapping::{self, str_of};
use super::public::Public;
use super::{HttpState, Served, store};
use crate::agents::Agent;
use crate::error::Error;

pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/.well-known/webfinger", web::get().to(webfinger))
        .route("/.well-known/nodeinfo", web::get().to(nodeinfo_links))
        .route("/nodeinfo/2.1", web::get().to(nodeinfo))
        .route("/actor", web::get().to(instance_actor))
        .route("/agents/{name}", web::get().to(actor))
        .route("/agents/{name}/outbox", web::get().to(outbox))
        .route("/agents/{name}/followers", web::get().to(followers))
        .route("/agents/{name}/contexts/{id}", web::get().to(context))
        .route("/agents/{name}/notes/{id}", web::get().to(note))
        .route(
            "/agents/{name}/notes/{id}/activity",
            web::get().to(note_activity),
        );
}

fn wants_ap(req: &HttpRequest) -> bool {
    req.headers()
        .get(actix_web::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.contains("activity+json") || a.contains("ld+json") || a.contains("application/json")
        })
}

#[derive(Debug, serde::Deserialize)]
struct WfQuery {
    resource: Option<String>,
}

async fn webfinger(state: web::Data<HttpState>, q: web::Query<WfQuery>) -> HttpResponse {
    let site = &state.site;
    let Some(resource) = q.resource.as_deref() else {
        return HttpResponse::BadRequest().json(json!({"error": "resource is required"}));
    };
    // An agent answers under its handle domain and under the server's own host: a remote
    // server that only knows the actor checks `preferredUsername@{actor host}` first.
    let agent = if let Some(acct) = resource.strip_prefix("acct:") {
        let acct = acct.trim_start_matches('@');
        acct.rsplit_once('@')
            .filter(|(_, d)| {
                d.eq_ignore_ascii_case(site.domain())
                    || d.eq_ignore_ascii_case(site.handle_domain())
            })
            .and_then(|(n, _)| site.agents().get(n))
    } else {
        site.local_agent(resource)
    };
    let Some(agent) = agent else {
        if resource == site.instance_actor() || resource == format!("acct:{0}@{0}", site.domain()) {
            return jrd(json!({
                "subject": format!("acct:{0}@{0}", site.domain()),
                "aliases": [site.instance_actor()],
                "links": [{"rel": "self", "type": AP_JSON, "href": site.instance_actor()}],
            }));
        }
        return not_found();
    };
    let actor = site.actor_url(&agent.name);
    let mut links = vec![
        json!({"rel": "self", "type": AP_JSON, "href": actor}),
        json!({"rel": "https://mentionable.dev/ns/rel/agent-card", "type": "application/json",
               "href": format!("{actor}/agent-card.json")}),
        json!({"rel": "http://webfinger.net/rel/profile-page", "type": "text/html", "href": actor}),
    ];
    if let Some(mail) = site.mail_domain() {
        links.push(json!({"rel": "mailto", "href": format!("mailto:{}@{mail}", agent.name)}));
    }
    jrd(json!({
        "subject": format!("acct:{}@{}", agent.name, site.handle_domain()),
        "aliases": [actor],
        "links": links,
    }))
}

fn jrd(v: Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/jrd+json")
        .insert_header(("Access-Control-Allow-Origin", "*"))
        .body(v.to_string())
}

async fn nodeinfo_links(state: web::Data<HttpState>) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "links": [{
            "rel": "http://nodeinfo.diaspora.software/ns/schema/2.1",
            "href": format!("{}/nodeinfo/2.1", state.site.base()),
        }]
    }))
}

async fn nodeinfo(state: web::Data<HttpState>) -> HttpResponse {
    let n = state.site.agents().all().len();
    HttpResponse::Ok()
        .content_type(
            "application/json; profile=\"http://nodeinfo.diaspora.software/ns/schema/2.1#\"",
        )
        .body(
            json!({
                "version": "2.1",
                // No repository: the crate names none, and a made-up one would mislead.
                "software": {
                    "name": "switchboard",
                    "version": env!("CARGO_PKG_VERSION"),
                },
                "protocols": ["activitypub"],
                "services": {"inbound": [], "outbound": []},
                "openRegistrations": false,
                "usage": {"users": {"total": n, "activeMonth": n, "activeHalfyear": n}},
                "metadata": {"nodeName": state.site.domain()},
            })
            .to_string(),
        )
}

/// Runs a fallible read on the main runtime.
async fn on_main<T, F, Fut>(state: &HttpState, f: F) -> Result<T, HttpResponse>
where
    T: Send + 'static,
    F: FnOnce(Served) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = crate::Result<T>> + Send + 'static,
{
    state.main.run(f).await.map_err(|e| {
        tracing::warn!(error = %e, "ActivityPub document unavailable");
        crate::http::error_response(&e)
    })
}

async fn instance_actor(state: web::Data<HttpState>) -> HttpResponse {
    let key = match on_main(&state, |s| async move {
        s.inner
            .keys
            .rsa("ap:instance")
            .await
            .map_err(|e| Error::Invalid(e.to_string()))
    })
    .await
    {
        Ok(k) => k,
        Err(r) => return r,
    };
    let site = &state.site;
    let id = site.instance_actor();
    ap(&json!({
        "@context": mapping::context(),
        "id": id,
        "type": "Application",
        "preferredUsername": site.domain(),
        "name": "switchboard",
        "inbox": format!("{}/inbox", site.base()),
        "outbox": format!("{id}/outbox"),
        "endpoints": {"sharedInbox": format!("{}/inbox", site.base())},
        "manuallyApprovesFollowers": true,
        "publicKey": {"id": format!("{id}#main-key"), "owner": id, "publicKeyPem": key.public_key_pem()},
    }))
}

async fn actor(
    state: web::Data<HttpState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let Some(agent) = state.site.agents().get(&path.into_inner()) else {
        return not_found();
    };
    if !wants_ap(&req) {
        return profile_page(&state.site, &agent);
    }
    match on_main(&state, |s| async move { actor_doc(&s.inner, &agent).await }).await {
        Ok(doc) => ap(&doc),
        Err(r) => r,
    }
}

fn profile_page(site: &Public, agent: &Agent) -> HttpResponse {
    use super::html::escape;
    let name = agent.display_name.as_deref().unwrap_or(&agent.name);
    let actor = site.actor_url(&agent.name);
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{n}</title>\
         <link rel=\"alternate\" type=\"application/activity+json\" href=\"{a}\"></head>\
         <body><main><h1>{n}</h1><p>@{u}@{d}</p><p>{s}</p>\
         <p>An AI agent. Mention it from any fediverse account to talk to it.</p></main></body></html>",
        n = escape(name),
        a = escape(&actor),
        u = escape(&agent.name),
        d = escape(site.handle_domain()),
        s = escape(agent.summary.as_deref().unwrap_or_default()),
    );
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Vary", "Accept"))
        .insert_header(("Content-Security-Policy", "default-src 'none'"))
        .body(page)
}

async fn outbox(state: web::Data<HttpState>, path: web::Path<String>) -> HttpResponse {
    let Some(agent) = state.site.agents().get(&path.into_inner()) else {
        return not_found();
    };
    let name = agent.name.clone();
    let rows = on_main(&state, |s| async move {
        let db = &s.inner.db;
        Ok((
            store::outbox_count(db, &name).await?,
            store::outbox(db, &name, 20).await?,
        ))
    })
    .await;
    let (total, rows) = match rows {
        Ok(r) => r,
        Err(r) => return r,
    };
    let items: Vec<Value> = rows
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .map(|n| {
            let mut c = mapping::create_of(&n);
            if let Some(m) = c.as_object_mut() {
                m.remove("@context");
            }
            c
        })
        .collect();
    let id = format!("{}/outbox", state.site.actor_url(&agent.name));
    ap(&json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": id,
        "type": "OrderedCollection",
        "totalItems": total,
        "orderedItems": items,
    }))
}

async fn followers(state: web::Data<HttpState>, path: web::Path<String>) -> HttpResponse {
    let Some(agent) = state.site.agents().get(&path.into_inner()) else {
        return not_found();
    };
    let name = agent.name.clone();
    let rows = match on_main(&state, |s| async move {
        store::followers(&s.inner.db, &name).await
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let items: Vec<&str> = rows.iter().map(|r| r.actor.as_str()).collect();
    ap(&json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{}/followers", state.site.actor_url(&agent.name)),
        "type": "OrderedCollection",
        "totalItems": items.len(),
        "orderedItems": items,
    }))
}

/// How many note ids a context collection lists (oldest first; `totalItems` counts all).
const CONTEXT_ITEMS: i64 = 500;

/// A thread context an agent minted (FEP-7888): an `OrderedCollection`, attributed to the
/// agent, of the ids of the thread's notes that anyone may fetch — received and ours, public
/// or unlisted; followers-only and direct notes are never listed. 404 for an unknown id or one
/// minted by another agent.
async fn context(state: web::Data<HttpState>, path: web::Path<(String, String)>) -> HttpResponse {
    let (name, id) = path.into_inner();
    let Some(agent) = state.site.agents().get(&name) else {
        return not_found();
    };
    let agent_name = agent.name.clone();
    let found = on_main(&state, |s| async move {
        let db = &s.inner.db;
        let Some(c) = store::context(db, &id).await? else {
            return Ok(None);
        };
        if c.agent != agent_name {
            return Ok(None);
        }
        let (total, items) = store::public_thread(db, &c.thread_key, CONTEXT_ITEMS).await?;
        Ok(Some((c.id, total, items)))
    })
    .await;
    let (id, total, items) = match found {
        Ok(Some(f)) => f,
        Ok(None) => return not_found(),
        Err(r) => return r,
    };
    let actor = state.site.actor_url(&agent.name);
    ap(&json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": state.site.context_url(&agent.name, &id),
        "type": "OrderedCollection",
        "attributedTo": actor,
        "totalItems": total,
        "orderedItems": items,
    }))
}

/// A stored note of ours, if the requester may see it: public and unlisted notes to anyone;
/// followers-only and direct notes only to a request signed by an addressee.
async fn visible_note(
    state: &HttpState,
    req: &HttpRequest,
    name: &str,
    id: &str,
) -> Result<Value, HttpResponse> {
    let note_id = format!("{}/notes/{id}", state.site.actor_url(name));
    let incoming = super::verify::Incoming::from_request(req);
    on_main(state, |s| async move {
        let inner = &s.inner;
        let Some(row) = store::object(&inner.db, &note_id).await? else {
            return Err(Error::NotFound("no such note".into()));
        };
        if row.kind != "out" {
            return Err(Error::NotFound("no such note".into()));
        }
        let note: Value = serde_json::from_str(&row.body).map_err(Error::corrupt)?;
        if row.deleted != 0 {
            return Ok(json!({"id": note_id, "type": "Tombstone", "@gone": true}));
        }
        if row.public == 0 {
            let signer = super::verify::verify_http(inner, &incoming, None)
                .await
                .map_err(|_| Error::NotFound("no such note".into()))?;
            if !mapping::audience(&note, &Value::Null)
                .iter()
                .any(|a| *a == signer.0.id)
            {
                return Err(Error::NotFound("no such note".into()));
            }
        }
        Ok(note)
    })
    .await
}

async fn note(
    state: web::Data<HttpState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (name, id) = path.into_inner();
    match visible_note(&state, &req, &name, &id).await {
        Ok(mut n) if n.get("@gone").is_some() => {
            if let Some(m) = n.as_object_mut() {
                m.remove("@gone");
            }
            HttpResponse::Gone()
                .content_type(AP_JSON)
                .body(n.to_string())
        }
        Ok(mut n) => {
            if let Some(m) = n.as_object_mut() {
                m.insert("@context".into(), mapping::context());
            }
            ap(&n)
        }
        Err(r) => r,
    }
}

async fn note_activity(
    state: web::Data<HttpState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (name, id) = path.into_inner();
    match visible_note(&state, &req, &name, &id).await {
        Ok(n) if n.get("@gone").is_some() => not_found(),
        Ok(n) if str_of(&n, "id").is_some() => ap(&mapping::create_of(&n)),
        Ok(_) => not_found(),
        Err(r) => r,
    }
}
