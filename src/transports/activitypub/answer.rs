//! How the documents other servers fetch are answered: as `application/activity+json` that
//! varies by `Accept`, or as a JSON 404.

use actix_web::HttpResponse;
use serde_json::{Value, json};

/// The media type of ActivityPub documents.
pub(super) const AP_JSON: &str = "application/activity+json";

/// A 404 with a JSON body.
pub(super) fn not_found() -> HttpResponse {
    HttpResponse::NotFound().json(json!({"error": "not found"}))
}

/// `doc` as an ActivityPub document.
pub(super) fn ap(doc: &Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(AP_JSON)
        .insert_header(("Vary", "Accept"))
        .body(doc.to_string())
}
