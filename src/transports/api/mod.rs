//! The operator's HTTP message API: a plain, token-protected way to hand switchboard a message
//! (`POST /api/v1/messages`) and get the agent's response back, either by polling
//! (`GET /api/v1/messages/{id}/response`) or as a signed callback POST to `api.callback_url`;
//! and to read what the instance holds: its agents, threads on every transport, each message's
//! status (`docs/api.md`).
//!
//! It exists for integration and operations (smoke tests, load tests, systems that are not on
//! any of the federated protocols) and is off unless `api.token` is set. Messages ingested here
//! are operator-asserted: the operator vouches for the sender fields.

mod audit;
mod blocks;
pub mod console;
pub mod openapi;
mod read;
mod status;
pub mod wire;

use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{Parts, Started, TransportModule};
use crate::clock::SharedClock;
use crate::config::{ApiConfig, Secret};
use crate::error::{Error, OutboundError, Result};
use crate::http::error_response;
use crate::message::NormalizedMessage;
use crate::net::{HttpClient, HttpRequest as OutRequest, constant_time_eq, signed_headers};
use crate::pipeline::{Delivery, Front, Pipeline, Transport};
use crate::store::threads;
use wire::AgentView;

/// The transport name API messages are ingested under.
pub const NAME: &str = "api";

/// Delivers responses of API messages to the configured callback.
#[derive(Debug)]
pub struct ApiTransport {
    http: HttpClient,
    callback_url: Option<String>,
    secret: Option<Secret>,
    clock: SharedClock,
}

impl ApiTransport {
    /// From configuration.
    #[must_use]
    pub fn new(cfg: &ApiConfig, http: HttpClient, clock: SharedClock) -> Self {
        Self {
            http,
            callback_url: cfg.callback_url.clone(),
            secret: cfg.callback_secret.clone(),
            clock,
        }
    }
}

#[async_trait::async_trait]
impl Transport for ApiTransport {
    fn name(&self) -> &str {
        NAME
    }

    async fn deliver(&self, d: &Delivery) -> Result<(), OutboundError> {
        let Some(url) = &self.callback_url else {
            // Without a callback the response stays available at GET …/response.
            return Ok(());
        };
        let body =
            serde_json::to_vec(&d.response).map_err(|e| OutboundError::permanent(e.to_string()))?;
        let mut headers = match &self.secret {
            Some(secret) => signed_headers(secret, self.clock.now_ms(), &body),
            None => {
                let mut h = reqwest::header::HeaderMap::new();
                h.insert(
                    reqwest::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                h
            }
        };
        if let Ok(v) = HeaderValue::from_str(&d.response.id) {
            headers.insert("idempotency-key", v);
        }
        crate::telemetry::inject(&mut headers);
        let resp = self
            .http
            .send(OutRequest {
                method: reqwest::Method::POST,
                url,
                headers,
                body: Some(Bytes::from(body)),
                timeout: None,
            })
            .await?;
        self.http.classify_status(&resp)
    }
}

/// The operator API as the application assembles it: always on, its routes answer 404 until
/// `api.token` is set.
#[derive(Debug)]
pub struct Api {
    outbound: Arc<ApiTransport>,
    token: Option<Secret>,
    agents: Arc<Vec<AgentView>>,
    config: Arc<crate::config::Config>,
    addresses: Arc<[crate::ops::AddressKind]>,
}

/// The operator API, as the application lists it: it gives agents no address of its own.
pub const TRANSPORT: super::Descriptor = super::Descriptor {
    name: NAME,
    job_kinds: &[],
    listeners: &[],
    address: None,
    build,
};

/// Builds the API transport (always on).
///
/// # Errors
/// [`Error::Config`] when the public URL is unusable.
pub fn build(parts: &Parts) -> Result<Option<Box<dyn TransportModule>>> {
    let cfg = &parts.config.api;
    let agents = crate::ops::agent_addresses(&parts.config, &parts.addresses)?
        .into_iter()
        .zip(&parts.config.agents)
        .map(|(a, c)| AgentView {
            display_name: c.display_name.clone(),
            handle: a.get("fediverse").unwrap_or_default().to_owned(),
            email: a.get("email").map(str::to_owned),
            card_url: a.get("a2a_card").map(str::to_owned),
            backend: a.backend.to_owned(),
            name: a.name,
        })
        .collect();
    Ok(Some(Box::new(Api {
        agents: Arc::new(agents),
        outbound: Arc::new(ApiTransport::new(
            cfg,
            parts.http.clone(),
            parts.clock.clone(),
        )),
        token: cfg.token.clone(),
        config: Arc::clone(&parts.config),
        addresses: Arc::clone(&parts.addresses),
    })))
}

#[async_trait::async_trait]
impl TransportModule for Api {
    fn outbound(&self) -> Arc<dyn Transport> {
        self.outbound.clone()
    }

    /// Its routes: the operator API on the public listener, the console on the private one.
    async fn start(&self, pipeline: &Pipeline, _: watch::Receiver<bool>) -> Result<Started> {
        let console = console::Console::new(&self.config, &self.addresses, pipeline.clone())?;
        let state = ApiState {
            pipeline: pipeline.front(),
            token: self.token.clone(),
            agents: Arc::clone(&self.agents),
        };
        Ok(Started {
            routes: Some(Arc::new(move |cfg: &mut web::ServiceConfig| {
                cfg.app_data(web::Data::new(state.clone()))
                    .route("/api/v1/messages", web::post().to(post_message))
                    .route("/api/v1/messages/{id}", web::get().to(read::get_message))
                    .route(
                        "/api/v1/messages/{id}/response",
                        web::get().to(read::get_response),
                    )
                    .route("/api/v1/agents", web::get().to(read::list_agents))
                    .route("/api/v1/threads", web::get().to(read::list_threads))
                    .route("/api/v1/threads/{id}", web::get().to(read::get_thread))
                    .route("/api/v1/blocks", web::get().to(blocks::list_blocks))
                    .route("/api/v1/blocks", web::post().to(blocks::add_block))
                    .route(
                        "/api/v1/blocks/{id}",
                        web::delete().to(blocks::remove_block),
                    )
                    .route("/api/v1/reports", web::get().to(read::list_reports))
                    .route("/api/v1/audit", web::get().to(audit::list_audit));
            })),
            private_routes: console.map(|console| -> super::Routes {
                Arc::new(move |cfg: &mut web::ServiceConfig| {
                    console::configure(cfg, console.clone());
                })
            }),
            ..Started::default()
        })
    }
}

/// State of the API handlers.
#[derive(Debug, Clone)]
struct ApiState {
    /// Where messages go.
    pipeline: Front,
    /// The bearer token; the API answers 404 without one.
    token: Option<Secret>,
    /// The configured agents as `GET /api/v1/agents` lists them.
    agents: Arc<Vec<AgentView>>,
}

/// Checks the bearer token; returns who acted, for the audit log.
fn authorize(state: &ApiState, req: &HttpRequest) -> Result<crate::store::audit::Actor, Error> {
    let Some(token) = &state.token else {
        return Err(Error::NotFound("the message API is disabled".into()));
    };
    let given = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.expose().as_bytes()) {
        Ok(audit::api_actor(token.expose(), req))
    } else {
        refused(req, if given.is_empty() { "missing" } else { "wrong" });
        Err(Error::Unauthenticated)
    }
}

/// Logs a request refused for its operator API token (`missing` or `wrong`), with the client
/// address (behind a trusted proxy, the client it names).
fn refused(req: &HttpRequest, token: &str) {
    let client = crate::http::client_addr(req).or_else(|| req.peer_addr().map(|p| p.ip()));
    tracing::warn!(
        client = %client.map_or_else(|| "-".to_owned(), |c| c.to_string()),
        method = %req.method(),
        path = req.path(),
        token,
        "operator API: authentication refused"
    );
}

/// Turns an API request body into a NormalizedMessage, filling what the API may omit.
fn parse_request(
    body: &[u8],
    now: crate::message::Timestamp,
) -> Result<(String, NormalizedMessage), Error> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Error::Invalid(format!("body is not JSON: {e}")))?;
    let external_id = value
        .get("external_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::Invalid("external_id (a non-empty string) is required".into()))?
        .to_owned();
    let Some(Value::Object(mut m)) = value.get("message").cloned() else {
        return Err(Error::Invalid("message (an object) is required".into()));
    };
    let id = uuid::Uuid::now_v7().to_string();
    m.insert("id".into(), json!(id));
    m.insert("received_at".into(), json!(now));
    m.entry("thread_id")
        .or_insert_with(|| json!(format!("api:{id}")));
    m.entry("received_via").or_insert_with(|| json!(NAME));
    m.entry("raw").or_insert(Value::Null);
    m.entry("recipient_capabilities").or_insert_with(|| {
        json!({
            "mention_relay": { "kind": "none" },
            "formats": ["text/plain", "text/markdown", "application/json"],
            "attachments": false,
            "streaming": false
        })
    });
    let msg: NormalizedMessage = serde_path_to_error::deserialize(Value::Object(m))
        .map_err(|e| Error::Invalid(format!("message.{}: {}", e.path(), e.inner())))?;
    Ok((external_id, msg))
}

async fn post_message(
    state: web::Data<ApiState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let actor = match authorize(&state, &req) {
        Ok(actor) => actor,
        Err(e) => return error_response(&e),
    };
    let now = state.pipeline.clock().now();
    let (external_id, mut msg) = match parse_request(&body, now) {
        Ok(x) => x,
        Err(e) => return error_response(&e),
    };
    let record = audit::SendRecord::new(actor, &external_id, &msg);
    // A thread id this API returned continues its thread: messages are threaded by the key the
    // thread was opened with. (`api:…` is such a key already: the one a message opens when it
    // names none.)
    let ingested = state
        .pipeline
        .run(move |p| async move {
            if !msg.thread_id.starts_with("api:")
                && let Some(t) = threads::get(p.db(), &msg.thread_id).await?
                && t.transport == NAME
            {
                msg.thread_id = t.thread_key;
            }
            p.ingest_with(NAME, &external_id, msg, record).await
        })
        .await;
    match ingested {
        Ok((o, _)) => HttpResponse::Accepted().json(wire::Accepted {
            id: o.message_id,
            thread_id: o.thread_id,
            duplicate: o.duplicate,
        }),
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_defaults_and_reports_paths() {
        let now = crate::message::Timestamp::from_unix_millis(0);
        let body = br#"{"external_id":"x1","message":{"sender":{"address":"bob@example.com","auth_method":"none","verified":false},"recipient":"@echo@localhost","parts":[{"kind":"text","mime":"text/plain","content":"hi"}]}}"#;
        let (ext, msg) = parse_request(body, now).unwrap();
        assert_eq!(ext, "x1");
        assert!(msg.thread_id.starts_with("api:"));
        msg.validate().unwrap();
        let e = parse_request(
            br#"{"external_id":"x","message":{"sender":{"address":1}}}"#,
            now,
        )
        .unwrap_err();
        assert!(e.to_string().contains("message.sender.address"), "{e}");
        assert!(parse_request(b"{", now).is_err());
        assert!(
            parse_request(br#"{"message":{}}"#, now)
                .unwrap_err()
                .to_string()
                .contains("external_id")
        );
    }
}
