//! The A2A server, over its two bindings (JSON-RPC and HTTP+JSON): envelope and version
//! checks, method dispatch, the A2A operations over the durable task store, SSE streams, and
//! the agent card routes.
//!
//! Layout: `envelope` reads a JSON-RPC call (HTTP, the envelope, the A2A version) and writes
//! any call's answer; `rest` reads an HTTP+JSON call (path, query, body) into the same call; `dispatch` authenticates the caller and picks the operation; `send` takes a
//! message (with `turn`: what a turn hands the pipeline), `tasks` reads, lists, cancels and
//! resubscribes to tasks (the operations; the durable store is [`super::tasks`]),
//! `push_config` keeps push notification configs; `stream` writes the SSE answers. This module
//! holds the routes and their shared state.

mod call;
mod dispatch;
mod envelope;
#[doc(hidden)]
pub mod fuzzing;
mod push_config;
mod rest;
mod send;
mod stream;
mod tasks;
mod turn;

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use self::envelope::serve;
use super::auth::{Caller, Verifier};
use super::card::RenderedCard;
use super::tasks::TaskEngine;
use super::wire::{self, RpcError};
use crate::agents::AgentRegistry;
use crate::config::{A2aAuthConfig, A2aConfig};
use crate::hop::OnMain;
use crate::moderation::Who;
use crate::pipeline::Pipeline;
use crate::trust::TrustVerifier;

/// State of the A2A routes.
#[derive(Debug)]
pub struct A2aState {
    /// The agents (their names and addresses are read in place).
    pub agents: Arc<AgentRegistry>,
    /// The pipeline (where messages go) and the task store, reached on the main runtime.
    pub main: OnMain<(Pipeline, TaskEngine)>,
    /// Settings.
    pub cfg: A2aConfig,
    /// The agent the hub answers for by default.
    pub default_agent: String,
    /// Largest request body.
    pub max_body: usize,
    /// The hub card.
    pub hub_card: RenderedCard,
    /// Per-agent cards, by lower-case name.
    pub cards: HashMap<String, RenderedCard>,
    /// Per-agent extended cards (JSON), by lower-case name, for the agents that have one.
    pub extended_cards: HashMap<String, serde_json::Value>,
    /// Checks bearer tokens.
    pub verifier: Verifier,
    /// Who may call each agent, by lower-case name (public when absent).
    pub policies: HashMap<String, A2aAuthConfig>,
    /// Verifies identity assertions forwarded in message metadata.
    pub trust: TrustVerifier,
    /// The public base URL (the advertised endpoints are below it).
    pub public_url: String,
    /// The public host (with its port when not the default); an `@name@{this}` lead also
    /// names a local agent when handles are on another domain (`server.handle_domain`).
    pub web_domain: String,
    /// `net.allow_private_addresses`: push configs are checked at creation as the SSRF guard
    /// checks their notifications.
    pub allow_private: bool,
}

/// A call being served on the main runtime: the routes' state (what it dereferences to) and
/// what they do I/O with.
#[derive(Debug, Clone)]
pub(super) struct Served {
    state: Arc<A2aState>,
    /// Where messages go.
    pub(super) pipeline: Pipeline,
    /// The task store.
    pub(super) engine: TaskEngine,
}

impl std::ops::Deref for Served {
    type Target = A2aState;

    fn deref(&self) -> &A2aState {
        &self.state
    }
}

impl Served {
    /// Refuses a caller the agent's policy does not admit (401), or that a block over its
    /// evidence's subject or issuer refuses (403, before any of its calls is served).
    fn admit(
        &self,
        caller: &Caller,
        agent: &str,
        client: Option<std::net::IpAddr>,
    ) -> Result<(), RpcError> {
        if caller.admitted_by(self.policy(agent)) {
            if self
                .pipeline
                .blocked(Some(agent), super::NAME, &Who::of(&caller.sender))
                .is_some()
            {
                return Err(RpcError::new(
                    wire::FORBIDDEN,
                    "this agent does not accept messages from this caller",
                ));
            }
            Ok(())
        } else {
            refused(client, Some(agent), "no bearer token from a trusted issuer");
            Err(RpcError::new(
                wire::UNAUTHENTICATED,
                format!("{agent} requires a bearer token from a trusted issuer"),
            ))
        }
    }
}

impl A2aState {
    /// Runs `call` on the main runtime, with what it does I/O with.
    async fn on_main<T, F, Fut>(self: Arc<Self>, f: F) -> crate::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Served) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = crate::Result<T>> + Send + 'static,
    {
        let main = self.main.clone();
        main.run(move |(pipeline, engine)| {
            f(Served {
                state: self,
                pipeline,
                engine,
            })
        })
        .await
    }

    fn policy(&self, agent: &str) -> &A2aAuthConfig {
        static PUBLIC: A2aAuthConfig = A2aAuthConfig::Public;
        self.policies.get(&agent.to_lowercase()).unwrap_or(&PUBLIC)
    }

    /// The caller behind `authorization`: anonymous without one, else a verified principal.
    async fn authenticate(
        &self,
        authorization: Option<&str>,
        agent: Option<&str>,
        client: Option<std::net::IpAddr>,
    ) -> Result<Caller, RpcError> {
        let Some(value) = authorization else {
            return Ok(Caller::anonymous());
        };
        let policies: Vec<&A2aAuthConfig> = match agent {
            Some(a) => vec![self.policy(a)],
            None => self.policies.values().collect(),
        };
        if policies.iter().all(|p| matches!(p, A2aAuthConfig::Public)) {
            // Nobody here checks tokens: a credential meant for something else is ignored.
            return Ok(Caller::anonymous());
        }
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                refused(client, agent, "not a bearer token");
                RpcError::new(wire::UNAUTHENTICATED, "use Authorization: Bearer")
            })?;
        self.verifier.verify(token, &policies).await.map_err(|e| {
            refused(client, agent, &e.to_string());
            RpcError::new(wire::UNAUTHENTICATED, "invalid token")
        })
    }
}

/// Logs an A2A call refused for its credentials, with the client address (behind a trusted
/// proxy, the client it names), the agent it was for and why.
fn refused(client: Option<std::net::IpAddr>, agent: Option<&str>, reason: &str) {
    tracing::warn!(
        client = %client.map_or_else(|| "-".to_owned(), |c| c.to_string()),
        agent = agent.unwrap_or("-"),
        reason,
        "A2A: authentication refused"
    );
}

/// A card's resource: GET and HEAD, `405` with `Allow` for any other method.
fn card_resource<F, Args>(path: &str, handler: F) -> actix_web::Resource
where
    F: actix_web::Handler<Args> + Clone,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    web::resource(path)
        .route(web::get().to(handler.clone()))
        .route(web::head().to(handler))
        .default_service(web::to(|| async {
            HttpResponse::MethodNotAllowed()
                .insert_header(("Allow", "GET, HEAD"))
                .finish()
        }))
}

/// Registers the A2A routes.
pub fn configure(cfg: &mut web::ServiceConfig, state: Arc<A2aState>) {
    cfg.app_data(web::Data::from(state))
        .service(card_resource("/.well-known/agent-card.json", hub_card))
        .service(card_resource("/.well-known/agent-card/{name}", agent_card))
        .service(card_resource("/agents/{name}/agent-card.json", agent_card))
        .route(super::card::JWKS_PATH, web::get().to(jwks))
        .route("/a2a", web::post().to(hub_rpc))
        .route("/a2a/", web::post().to(hub_rpc))
        .route("/agents/{name}/a2a", web::post().to(agent_rpc))
        .route("/agents/{name}/a2a/", web::post().to(agent_rpc))
        .route("/a2a/{rest:.+}", web::to(hub_rest))
        .route("/agents/{name}/a2a/{rest:.+}", web::to(agent_rest));
}

async fn hub_rest(
    state: web::Data<A2aState>,
    req: HttpRequest,
    body: web::Payload,
    path: web::Path<String>,
) -> HttpResponse {
    rest::serve_rest(state, req, body, None, &path.into_inner()).await
}

async fn agent_rest(
    state: web::Data<A2aState>,
    req: HttpRequest,
    body: web::Payload,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (name, rest) = path.into_inner();
    match state.agents.get(&name) {
        Some(a) => rest::serve_rest(state, req, body, Some(a.name.clone()), &rest).await,
        None => {
            let e = RpcError::new(wire::METHOD_NOT_FOUND, "no such agent");
            HttpResponse::NotFound().json(wire::rest_error(&e))
        }
    }
}

fn card_response(state: &A2aState, req: &HttpRequest, card: &RenderedCard) -> HttpResponse {
    let cache = format!("public, max-age={}", state.cfg.card_max_age_seconds);
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let matches = card.not_modified(header("if-none-match"), header("if-modified-since"));
    let mut resp = if matches {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    resp.insert_header(("Cache-Control", cache))
        .insert_header(("ETag", card.etag.clone()))
        .insert_header((
            "Last-Modified",
            crate::net::date::format_unix_s(card.modified_s),
        ));
    if matches {
        resp.finish()
    } else {
        resp.content_type("application/json")
            .body(card.body.clone())
    }
}

async fn hub_card(state: web::Data<A2aState>, req: HttpRequest) -> HttpResponse {
    card_response(&state, &req, &state.hub_card)
}

async fn agent_card(
    state: web::Data<A2aState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    match state.cards.get(&path.into_inner().to_lowercase()) {
        Some(card) => card_response(&state, &req, card),
        None => HttpResponse::NotFound().json(json!({"error": "no such agent"})),
    }
}

async fn jwks(state: web::Data<A2aState>) -> HttpResponse {
    match state
        .main
        .run(|(pipeline, _)| async move { super::push::jwks(pipeline.keys()).await })
        .await
    {
        Ok(doc) => HttpResponse::Ok()
            .insert_header(("Cache-Control", "public, max-age=300"))
            .content_type("application/jwk-set+json")
            .body(doc.to_string()),
        Err(e) => crate::http::error_response(&e),
    }
}

async fn hub_rpc(state: web::Data<A2aState>, req: HttpRequest, body: web::Payload) -> HttpResponse {
    serve(state, req, body, None).await
}

async fn agent_rpc(
    state: web::Data<A2aState>,
    req: HttpRequest,
    body: web::Payload,
    path: web::Path<String>,
) -> HttpResponse {
    let name = path.into_inner();
    match state.agents.get(&name) {
        Some(a) => serve(state, req, body, Some(a.name.clone())).await,
        None => HttpResponse::NotFound().json(json!({"error": "no such agent"})),
    }
}
