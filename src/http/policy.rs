//! The landing page of a policy part's state (`/policy/{state}`), where the link in an email or
//! fediverse reply leads ([`crate::policy`]).
//!
//! `GET` only shows the request (its title, message, the agent's own page if it named one, and
//! a button): mail scanners and link previews fetch links, and fetching must resolve nothing.
//! `POST` (the button) records the resolution as a turn of the conversation, which the agent
//! then answers where the conversation is. Pages are self-contained HTML, never cached, never
//! leaking the state in a `Referer`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

use super::AppState;
use crate::error::Error;
use crate::markdown::escape_html as escape;
use crate::message::PolicyPart;
use crate::pipeline::LinkOutcome;
use crate::policy::{LANDING_PATH, action_label};

/// Mounts `GET` and `POST` `/policy/{state}`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route(&format!("{LANDING_PATH}/{{state}}"), web::get().to(show))
        .route(&format!("{LANDING_PATH}/{{state}}"), web::post().to(submit));
}

/// A state as minted is 43 URL-safe characters; anything else is not looked up.
fn plausible(state: &str) -> bool {
    state.len() == 43
        && state
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn page(status: StatusCode, title: &str, body: &str) -> HttpResponse {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{t}</title>\
         <style>body{{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:3rem auto;\
         padding:0 1rem;color:#222}}button{{font:inherit;padding:.5rem 1.25rem;cursor:pointer}}\
         .muted{{color:#666;font-size:.9rem}}</style></head><body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    );
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .insert_header(("Referrer-Policy", "no-referrer"))
        .insert_header(("X-Robots-Tag", "noindex"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header((
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'",
        ))
        .body(html)
}

fn unusable(e: &Error) -> HttpResponse {
    match e {
        Error::Invalid(why) if why.ends_with("replayed") => page(
            StatusCode::GONE,
            "Already used",
            "<p>This link has been used already.</p>",
        ),
        Error::Invalid(why) if why.ends_with("expired") => page(
            StatusCode::GONE,
            "Link expired",
            "<p>This link has expired. Write to the agent again to get a new one.</p>",
        ),
        Error::Invalid(_) | Error::NotFound(_) => page(
            StatusCode::NOT_FOUND,
            "Unknown link",
            "<p>This link is not known here.</p>",
        ),
        Error::Refused { .. } => page(
            StatusCode::FORBIDDEN,
            "Not accepted",
            "<p>The agent no longer accepts messages from this conversation.</p>",
        ),
        Error::RateLimited { retry_after_s } => page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many requests",
            &format!("<p>Please try again in {retry_after_s} seconds.</p>"),
        ),
        other => {
            tracing::warn!(error = %other, "policy landing page failed");
            page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again later",
                "<p>This could not be recorded just now. Please try again in a moment.</p>",
            )
        }
    }
}

async fn show(state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let token = path.into_inner();
    if !plausible(&token) {
        return unusable(&Error::NotFound("state".into()));
    }
    let lookup = token.clone();
    let row = match state
        .pipeline
        .run(move |p| async move { p.policy_state(&lookup).await })
        .await
    {
        Ok(Some(row)) => row,
        Ok(None) => return unusable(&Error::NotFound("state".into())),
        Err(e) => return unusable(&e),
    };
    let now = state.pipeline.clock().now_ms();
    if row.consumed_at.is_some() {
        return page(
            StatusCode::OK,
            "Done",
            "<p>Your answer has been recorded. The agent continues in the conversation.</p>",
        );
    }
    if row.expires_at <= now {
        return unusable(&Error::from(crate::policy::Refusal::Expired));
    }
    let Ok(policy) = serde_json::from_str::<PolicyPart>(&row.part) else {
        return unusable(&Error::corrupt("policy part"));
    };
    let agent = state.pipeline.agents().get(&row.agent).map_or_else(
        || row.agent.clone(),
        |a| a.display_name.clone().unwrap_or_else(|| a.name.clone()),
    );
    let mut body = format!(
        "<p class=\"muted\">{} asks:</p><p>{}</p>",
        escape(&agent),
        escape(&policy.message).replace('\n', "<br>")
    );
    // The agent's own page (a payment form, a consent text) gets the state, so it can send
    // the reader back here when done.
    if let Some(url) = policy.url.as_deref().and_then(|u| url::Url::parse(u).ok())
        && url.scheme() == "https"
    {
        let mut url = url;
        url.query_pairs_mut().append_pair("state", &token);
        body.push_str(&format!(
            "<p><a href=\"{}\" rel=\"noopener noreferrer\">Open the agent's page</a></p>",
            escape(url.as_str())
        ));
    }
    body.push_str(&format!(
        "<form method=\"post\"><button type=\"submit\">{}</button></form>\
         <p class=\"muted\">Nothing is recorded until you press the button.</p>",
        escape(action_label(&policy))
    ));
    page(
        StatusCode::OK,
        policy.title.as_deref().unwrap_or("Your answer is needed"),
        &body,
    )
}

async fn submit(state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let token = path.into_inner();
    if !plausible(&token) {
        return unusable(&Error::NotFound("state".into()));
    }
    match state
        .pipeline
        .run(move |p| async move { p.resolve_policy_link(&token).await })
        .await
    {
        Ok(LinkOutcome::Resolved | LinkOutcome::AlreadyResolved) => page(
            StatusCode::OK,
            "Done",
            "<p>Your answer has been recorded. The agent continues in the conversation.</p>",
        ),
        Err(e) => unusable(&e),
    }
}
