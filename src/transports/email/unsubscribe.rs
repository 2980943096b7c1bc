//! One-click unsubscribe (RFC 8058) from mail an agent writes to someone who did not write to
//! it: such mail carries `List-Unsubscribe: <{public url}/email/unsubscribe/{token}>` and
//! `List-Unsubscribe-Post: List-Unsubscribe=One-Click`, both under our DKIM signature. A mail
//! client's POST of `List-Unsubscribe=One-Click` to that URL records the opt-out
//! ([`store::unsubscribe`]); a person following the link in a browser gets a page with the
//! button that does the same (a GET changes nothing: link scanners fetch links). After it, the
//! agent writes to the address only in answer to the person's own mail.

use actix_web::{HttpResponse, web};

use super::store;
use crate::pipeline::Front;

/// Where the unsubscribe URLs are, under the public base URL.
pub const PATH: &str = "/email/unsubscribe";

/// The largest POST body taken (a one-click body is a few dozen bytes).
const MAX_BODY: usize = 4 * 1024;

/// Mounts `GET` and `POST {PATH}/{token}`.
pub(super) fn routes(cfg: &mut web::ServiceConfig, pipeline: Front) {
    cfg.service(
        web::resource(format!("{PATH}/{{token}}"))
            .app_data(web::Data::new(pipeline))
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .route(web::get().to(page))
            .route(web::post().to(one_click)),
    );
}

/// Whether `body` is a one-click request: the `List-Unsubscribe=One-Click` pair, form-encoded
/// (RFC 8058 §3.1) or as a `multipart/form-data` field.
fn is_one_click(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    let urlencoded = text
        .split('&')
        .any(|pair| pair.trim() == "List-Unsubscribe=One-Click");
    let multipart = text.contains("name=\"List-Unsubscribe\"") && text.contains("One-Click");
    urlencoded || multipart
}

/// The page a person who followed the link sees: one button, which posts the one-click body.
async fn page(path: web::Path<String>) -> HttpResponse {
    let token = crate::markdown::escape_html(&path.into_inner());
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Unsubscribe</title></head>\
         <body><h1>Unsubscribe</h1><p>Stop mail from this agent that you did not ask for? \
         Its answers to your own mail still reach you.</p>\
         <form method=\"post\" action=\"{PATH}/{token}\">\
         <input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
         <button type=\"submit\">Unsubscribe</button></form></body></html>"
    );
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(html)
}

/// Records the opt-out: `200` once it is (again or for the first time), `404` for a token no
/// mail carried, `400` for a body that is no one-click request.
async fn one_click(
    pipeline: web::Data<Front>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    if !is_one_click(&body) {
        return HttpResponse::BadRequest()
            .content_type("text/plain; charset=utf-8")
            .body("expected List-Unsubscribe=One-Click\n");
    }
    let token = path.into_inner();
    let now = pipeline.clock().now_ms();
    let done = pipeline
        .run(move |p| async move { store::unsubscribe(p.db(), &token, now).await })
        .await;
    match done {
        Ok(Some(who)) => {
            tracing::info!(agent = %who.agent, address = %who.address, "unsubscribed from the agent's unasked mail");
            HttpResponse::Ok()
                .content_type("text/plain; charset=utf-8")
                .body("Unsubscribed.\n")
        }
        Ok(None) => HttpResponse::NotFound()
            .content_type("text/plain; charset=utf-8")
            .body("unknown unsubscribe link\n"),
        Err(e) => {
            tracing::warn!(error = %e, "recording an unsubscribe failed");
            HttpResponse::ServiceUnavailable()
                .insert_header(("Retry-After", "5"))
                .finish()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_one_click_body_unsubscribes() {
        assert!(is_one_click(b"List-Unsubscribe=One-Click"));
        assert!(is_one_click(b"a=b&List-Unsubscribe=One-Click"));
        assert!(is_one_click(
            b"--x\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--x--\r\n"
        ));
        assert!(!is_one_click(b""));
        assert!(!is_one_click(b"List-Unsubscribe=No"));
    }
}
