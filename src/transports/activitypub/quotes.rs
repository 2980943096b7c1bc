//! Quote requests (FEP-044f, Mastodon 4.5's quote posts): a `QuoteRequest` for one of an
//! agent's notes is answered by the agent's `quote_policy` — an `Accept` whose `result` is a
//! `QuoteAuthorization` served at its IRI, or a `Reject` — and the authorizations are served.

use actix_web::{HttpResponse, web};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::fetch::FetchError;
use super::mapping::{self, quotes};
use super::reject::Reject;
use super::verify::Auth;
use super::{HttpState, Inner, NAME, store};
use crate::config::QuotePolicy;
use crate::moderation::Who;
use crate::pipeline::Pipeline;

/// The key of the authorization answering the request `id`: stable, so that a request
/// answered twice gets the same answer.
fn key_of(id: &str) -> String {
    hex::encode(&Sha256::digest(id.as_bytes())[..16])
}

/// The IRI of `agent`'s authorization `key`.
fn authorization_url(actor: &str, key: &str) -> String {
    format!("{actor}/quote_authorizations/{key}")
}

/// Answers a verified `QuoteRequest`: one for a note that is not one of our agents' (or is
/// gone) is ignored; one whose quoting note (`instrument`, embedded or fetched from its
/// author's host) is not the requester's or does not quote the note is refused as invalid.
/// Otherwise the agent's `quote_policy` decides, for public and unlisted notes only: the
/// requester gets an `Accept` with the authorization (recorded first) or a `Reject`. An actor
/// the agent blocks gets no answer.
///
/// # Errors
/// A malformed request (400); database errors.
pub(super) async fn on_quote_request(
    inner: &Inner,
    pipeline: &Pipeline,
    activity: &Value,
    auth: &Auth,
) -> Result<(), Reject> {
    let id = mapping::str_of(activity, "id").unwrap_or_default();
    let quoted = quotes::requested(activity)
        .ok_or_else(|| Reject::invalid("QuoteRequest without object"))?;
    let Some((note, agent)) = inner.own_note(quoted).await? else {
        return Ok(());
    };
    let requester = &auth.actor.id;
    let quoting = match quotes::instrument(activity) {
        Some(v @ Value::Object(_)) => v.clone(),
        Some(Value::String(iri)) => match inner.fetch_object(iri).await {
            Ok(doc) => doc,
            Err(FetchError::Temporary(e)) => {
                return Err(Reject::new(503, format!("the quoting note: {e}")));
            }
            Err(e) => return Err(Reject::invalid(format!("the quoting note: {e}"))),
        },
        _ => return Err(Reject::invalid("QuoteRequest without instrument")),
    };
    if !quotes::quotes(&quoting, requester, quoted) {
        return Err(Reject::invalid(
            "the instrument is not the requester's note quoting the object",
        ));
    }
    let quoting_id = mapping::str_of(&quoting, "id")
        .unwrap_or_default()
        .to_owned();
    if mapping::host_of(&quoting_id) != mapping::host_of(requester) {
        return Err(Reject::invalid(
            "the quoting note is not on the requester's host",
        ));
    }
    if pipeline
        .blocked(
            Some(&agent.name),
            NAME,
            &Who::default()
                .with_sender(requester)
                .with_sender(&auth.actor.address),
        )
        .is_some()
    {
        return Ok(());
    }
    let policy = inner.profile(&agent.name).config().quote_policy;
    let allowed = note.public != 0
        && match policy {
            QuotePolicy::Anyone => true,
            QuotePolicy::Followers => store::is_follower(&inner.db, &agent.name, requester).await?,
            QuotePolicy::Nobody => false,
        };
    let inbox = auth
        .actor
        .delivery_inbox()
        .ok_or_else(|| Reject::invalid("the requester has no inbox"))?
        .to_owned();
    let key = key_of(id);
    let actor = inner.actor_url(&agent.name);
    let result = allowed.then(|| authorization_url(&actor, &key));
    let answer = quotes::answer(&actor, requester, activity, &key, result.as_deref());
    let now = inner.clock.now_ms();
    let mut tx = inner.db.begin().await?;
    if allowed {
        let row = store::QuoteRow {
            agent: agent.name.clone(),
            quoting: quoting_id,
            quoted: quoted.to_owned(),
        };
        store::authorize_quote(&mut tx, &key, &row, now).await?;
    }
    let enqueued =
        super::outbound::enqueue(inner, &mut tx, &agent.name, &[inbox], &[answer]).await?;
    tx.commit().await?;
    inner.queue.hand_over(enqueued);
    tracing::debug!(agent = %agent.name, requester, allowed, "quote request answered");
    let event = super::events::Event {
        kind: crate::config::Notify::QuoteRequest,
        activity,
        object: Some(quoted),
        outcome: Some(if allowed { "accepted" } else { "rejected" }),
    };
    super::events::tell(inner, pipeline, &agent, &event, auth).await
}

/// The route of the authorizations.
pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(
        "/agents/{name}/quote_authorizations/{key}",
        web::get().to(authorization),
    );
}

/// A `QuoteAuthorization`, while the note it lets be quoted stands (404 for an unknown one,
/// 410 once the note is deleted).
async fn authorization(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (name, key) = path.into_inner();
    let Some(agent) = state.site.agents().get(&name) else {
        return super::answer::not_found();
    };
    let looked_up = state
        .main
        .run(|s| async move {
            let Some(q) = store::quote_authorization(&s.inner.db, &key).await? else {
                return Ok(None);
            };
            let note = store::object(&s.inner.db, &q.quoted).await?;
            Ok(Some((key, q, note)))
        })
        .await;
    let (key, q, note) = match looked_up {
        Ok(Some(found)) => found,
        Ok(None) => return super::answer::not_found(),
        Err(e) => {
            tracing::warn!(error = %e, "reading a quote authorization failed");
            return HttpResponse::ServiceUnavailable().finish();
        }
    };
    if q.agent != agent.name {
        return super::answer::not_found();
    }
    if note.is_none_or(|n| n.deleted != 0) {
        return HttpResponse::Gone().finish();
    }
    let actor = state.site.actor_url(&agent.name);
    let id = authorization_url(&actor, &key);
    let mut doc = quotes::authorization(&id, &actor, &q.quoting, &q.quoted);
    if let Some(m) = doc.as_object_mut() {
        m.insert("@context".into(), mapping::context());
    }
    super::answer::ap(&doc)
}
