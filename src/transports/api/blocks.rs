//! `/api/v1/blocks`: the senders refused, listed, added and removed at run time. What is added
//! here is stored in the database, so every instance sharing it refuses the same senders
//! ([`crate::moderation`]); the configuration file's blocks are listed too, and removed by
//! editing the file.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::wire::BlockList;
use super::{ApiState, authorize};
use crate::error::Error;
use crate::http::error_response;
use crate::moderation::NewBlock;

/// `GET /api/v1/blocks`: every block in force, the file's first.
pub(super) async fn list_blocks(state: web::Data<ApiState>, req: HttpRequest) -> HttpResponse {
    if let Err(e) = authorize(&state, &req) {
        return error_response(&e);
    }
    HttpResponse::Ok().json(BlockList {
        blocks: state.pipeline.blocks(),
    })
}

/// `POST /api/v1/blocks` with `{kind, pattern, agent?, reason?}`: 201 with the stored block
/// (the same block twice is stored once).
pub(super) async fn add_block(
    state: web::Data<ApiState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let by = match authorize(&state, &req) {
        Ok(by) => by,
        Err(e) => return error_response(&e),
    };
    let new: NewBlock = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error_response(&Error::Invalid(format!("body: {e}"))),
    };
    match state
        .pipeline
        .run(move |p| async move { p.add_block(&new, &by).await })
        .await
    {
        Ok(block) => HttpResponse::Created().json(block),
        Err(e) => error_response(&e),
    }
}

/// `DELETE /api/v1/blocks/{id}`: 204, 404 when no stored block has that id, 409 for one of the
/// file's.
pub(super) async fn remove_block(
    state: web::Data<ApiState>,
    req: HttpRequest,
    id: web::Path<String>,
) -> HttpResponse {
    let by = match authorize(&state, &req) {
        Ok(by) => by,
        Err(e) => return error_response(&e),
    };
    let id = id.into_inner();
    if id.starts_with("config-") {
        return HttpResponse::Conflict().json(json!({
            "error": "this block is in the configuration file; remove it there"
        }));
    }
    let gone = state
        .pipeline
        .run({
            let id = id.clone();
            move |p| async move {
                let now = p.clock().now_ms();
                p.blocks().remove(p.db(), &id, now, &by).await
            }
        })
        .await;
    match gone {
        Ok(true) => {
            tracing::info!(block = %id, "block removed");
            HttpResponse::NoContent().finish()
        }
        Ok(false) => error_response(&Error::NotFound(format!("no block {id}"))),
        Err(e) => error_response(&e),
    }
}
