//! The verified inbox, per agent (`/agents/{name}/inbox`) and shared (`/inbox`).
//!
//! Order of work: size (the payload limit), JSON and nesting depth, activity id and its host,
//! authentication (`verify`: HTTP signature, FEP-8b32 proof), replay check (after
//! authentication, so an unsigned request learns nothing about which ids arrived), then the
//! activity itself (`activities`). Every activity that authenticates is answered 202 — handled,
//! duplicate, or deliberately ignored; 401 is only for authentication failures, 503 for trouble
//! worth a retry.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::NAME;
use super::mapping::{self, iri, str_of};
use super::reject::Reject;
use super::verify::{self, Incoming, Verdict};
use super::{HttpState, Inner, activities, moderation, store};
use crate::config::Notify;
use crate::moderation::{BlockKind, Who};
use crate::pipeline::Pipeline;

pub(super) fn routes(cfg: &mut web::ServiceConfig, limit: usize) {
    cfg.service(
        web::resource("/inbox")
            .app_data(web::PayloadConfig::new(limit))
            .route(web::post().to(shared_inbox)),
    )
    .service(
        web::resource("/agents/{name}/inbox")
            .app_data(web::PayloadConfig::new(limit))
            .route(web::post().to(agent_inbox)),
    );
}

/// The nesting depth of a JSON document (a scalar is 1).
pub(super) fn depth(v: &Value) -> usize {
    // Iterative, so a hostile document cannot exhaust the stack here.
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(m) => stack.extend(m.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

async fn shared_inbox(
    state: web::Data<HttpState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    receive(&state, &req, body).await
}

async fn agent_inbox(
    state: web::Data<HttpState>,
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let name = path.into_inner();
    if state.site.agents().get(&name).is_none() {
        return render(Err(Reject::new(404, "no such agent")));
    }
    receive(&state, &req, body).await
}

fn render(r: Result<(), Reject>) -> HttpResponse {
    match r {
        Ok(()) => HttpResponse::Accepted().finish(),
        Err(Reject {
            status,
            reason,
            retry_after_s,
        }) => {
            if status >= 500 {
                tracing::warn!(status, %reason, "inbox delivery failed");
            } else {
                tracing::debug!(status, %reason, "inbox delivery refused");
            }
            let code = actix_web::http::StatusCode::from_u16(status)
                .unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
            let mut b = HttpResponse::build(code);
            if let Some(secs) = retry_after_s.or((status == 503).then_some(60)) {
                b.insert_header(("Retry-After", secs.to_string()));
            }
            b.json(json!({ "error": reason }))
        }
    }
}

async fn receive(state: &HttpState, req: &HttpRequest, body: web::Bytes) -> HttpResponse {
    let activity: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return render(Err(Reject::invalid(format!("body is not JSON: {e}")))),
    };
    let cfg = state.site.cfg();
    if depth(&activity) > cfg.max_json_depth {
        return render(Err(Reject::invalid("JSON nested too deeply")));
    }
    let incoming = Incoming::from_request(req);
    // The host the activity claims to come from, for the record of refusals.
    let host = actor_of(&activity).and_then(mapping::host_of);
    let limit = Duration::from_millis(cfg.processing_timeout_ms);
    let result = state
        .main
        .run(move |s| async move {
            let result = tokio::time::timeout(
                limit,
                process(&s.inner, &s.pipeline, &incoming, &body, activity),
            )
            .await
            .unwrap_or_else(|_| Err(Reject::new(503, "processing took too long")));
            if let (Err(r), Some(host)) = (&result, &host)
                && (400..500).contains(&r.status)
            {
                s.pipeline.metrics().refused_from(
                    host,
                    &format!("{} {}", r.status, r.reason),
                    s.pipeline.clock().now_ms(),
                );
            }
            Ok(result)
        })
        .await
        .unwrap_or_else(|e| Err(Reject::from(e)));
    render(result)
}

fn actor_of(activity: &Value) -> Option<&str> {
    activity.get("actor").and_then(iri)
}

async fn process(
    inner: &Inner,
    pipeline: &Pipeline,
    incoming: &Incoming,
    body: &[u8],
    activity: Value,
) -> Result<(), Reject> {
    let id = str_of(&activity, "id")
        .ok_or_else(|| Reject::invalid("activity has no id"))?
        .to_owned();
    let kind = str_of(&activity, "type")
        .ok_or_else(|| Reject::invalid("activity has no type"))?
        .to_owned();
    let actor_iri = actor_of(&activity)
        .ok_or_else(|| Reject::invalid("activity has no actor"))?
        .to_owned();
    let actor_host = mapping::host_of(&actor_iri).ok_or_else(|| Reject::invalid("bad actor"))?;
    if mapping::host_of(&id).as_deref() != Some(actor_host.as_str()) {
        return Err(Reject::new(
            403,
            "activity id and actor are on different hosts",
        ));
    }
    if inner.is_local(&actor_iri) {
        return Err(Reject::new(
            403,
            "activities of local actors are not accepted",
        ));
    }
    // A server-wide block: a blocked instance is refused (403) before any of it is fetched or
    // verified; a blocked actor's activity is dropped unread (202: the actor learns nothing).
    // The actor is not verified yet, but a request that names a blocked actor falsely loses
    // nothing the actor itself could have had.
    if let Some(block) = pipeline.blocked(
        None,
        NAME,
        &Who::domain(&actor_host).with_sender(&actor_iri),
    ) {
        return match block.kind {
            BlockKind::Domain => Err(Reject::new(403, "this instance is blocked")),
            BlockKind::Sender | BlockKind::Issuer => {
                let now = inner.clock.now_ms();
                pipeline.metrics().refused_from(
                    &actor_host,
                    "202 dropped: the actor is blocked",
                    now,
                );
                Ok(())
            }
        };
    }
    let auth =
        match verify::authenticate(inner, incoming, body, &activity, &kind, &actor_iri).await? {
            Verdict::Authenticated(auth) => auth,
            Verdict::AccountGone => {
                activities::forget_actor(inner, &actor_iri).await?;
                store::mark_seen(&inner.db, &id, inner.clock.now_ms()).await?;
                return Ok(());
            }
        };
    // Its handle is known only now (`@name@host`, as operators write blocks).
    if pipeline
        .blocked(None, NAME, &Who::default().with_sender(&auth.actor.address))
        .is_some()
    {
        return Ok(());
    }
    // A replay is acknowledged without being processed again, but only once its sender is
    // authenticated: an unsigned request learns nothing about which ids arrived.
    if store::seen(&inner.db, &id).await? {
        return Ok(());
    }

    let now = inner.clock.now_ms();
    match kind.as_str() {
        // Marks the id seen in the same transaction that stores the note.
        "Create" if activities::on_create(inner, pipeline, &activity, &id, &auth).await? => {
            return Ok(());
        }
        "Create" => {}
        "Follow" => activities::on_follow(inner, pipeline, &activity, &auth).await?,
        "Block" => moderation::on_block(inner, &activity, &auth).await?,
        "Flag" => moderation::on_flag(inner, &activity, &id, &auth).await?,
        "Undo" if moderation::on_undo_block(inner, &activity, &auth).await? => {}
        "Undo" => activities::on_undo(inner, pipeline, &activity, &auth).await?,
        "Delete" => activities::on_delete(inner, pipeline, &activity, &auth).await?,
        "Update" => activities::on_update(inner, &activity, &auth).await?,
        "Like" => {
            super::events::on_like_or_announce(inner, pipeline, &activity, &auth, Notify::Like)
                .await?;
        }
        "Announce" => {
            super::events::on_like_or_announce(inner, pipeline, &activity, &auth, Notify::Announce)
                .await?;
        }
        "QuoteRequest" => {
            super::quotes::on_quote_request(inner, pipeline, &activity, &auth).await?
        }
        other => tracing::debug!(kind = other, activity = %id, "activity ignored"),
    }
    store::mark_seen(&inner.db, &id, now).await?;
    Ok(())
}
