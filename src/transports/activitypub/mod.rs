//! The ActivityPub transport: agents as fediverse actors.
//!
//! - [`sig`]: draft-cavage and RFC 9421 HTTP signatures (parse, check, sign).
//! - [`proof`]: FEP-8b32 `eddsa-jcs-2022` object proofs, JCS, base58btc Multikeys.
//! - [`html`]: note HTML to text, and the outbound sanitiser.
//! - [`mapping`]: ActivityStreams ⇄ contract, pure.
//! - [`store`]: the transport's tables.
//! - `fetch`: signed, cached fetches of remote actors and keys (through the SSRF guard).
//! - `documents`: WebFinger, actors, NodeInfo, collections, notes, profile pages.
//! - `inbox`: the verified inbox (per agent and shared).
//! - `outbound`: replies as `Create(Note)` and the per-inbox delivery jobs.
//!
//! See `docs/protocols/activitypub.md` for the field-by-field mapping and what is verified.

mod documents;
mod fetch;
pub mod html;
mod inbox;
pub mod mapping;
mod outbound;
pub mod proof;
pub mod sig;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix_web::web;

pub use fetch::RemoteActor;
pub use outbound::DeliverHandler;

use crate::agents::AgentRegistry;
use crate::blobs::BlobStore;
use crate::clock::SharedClock;
use crate::config::{ActivityPubConfig, Config};
use crate::keys::Keys;
use crate::net::HttpClient;
use crate::pipeline::Pipeline;
use crate::queue::Queue;
use crate::store::Db;

/// The transport name messages are ingested under.
pub const NAME: &str = "activitypub";

/// The job kind of one signed POST to one inbox.
pub const JOB_KIND: &str = "ap_deliver";

/// The ActivityPub transport (cheap to clone).
#[derive(Debug, Clone)]
pub struct ActivityPub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cfg: ActivityPubConfig,
    /// `https://example.org` (no trailing slash).
    base: String,
    /// `example.org[:port]`.
    domain: String,
    /// The agents' mail domain when the email transport is on (WebFinger `mailto:` links).
    mail_domain: Option<String>,
    allow_private: bool,
    db: Db,
    clock: SharedClock,
    http: HttpClient,
    keys: Keys,
    agents: Arc<AgentRegistry>,
    blobs: BlobStore,
    queue: Arc<Queue>,
    /// Remote actors by actor IRI and by key IRI, with the time they were fetched.
    actors: Mutex<HashMap<String, (Arc<RemoteActor>, i64)>>,
    /// Concurrent deliveries per host.
    hosts: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// When activity ids seen long ago were last forgotten (unix ms).
    seen_cleanup: std::sync::atomic::AtomicI64,
}

/// What [`ActivityPub::new`] needs.
#[derive(Debug, Clone)]
pub struct Parts {
    /// The database.
    pub db: Db,
    /// The clock.
    pub clock: SharedClock,
    /// The guarded outbound client.
    pub http: HttpClient,
    /// Signing keys.
    pub keys: Keys,
    /// Hosted agents.
    pub agents: Arc<AgentRegistry>,
    /// Attachments.
    pub blobs: BlobStore,
    /// The job queue.
    pub queue: Arc<Queue>,
}

impl ActivityPub {
    /// Builds the transport.
    ///
    /// # Errors
    /// When the public URL is unusable.
    pub fn new(config: &Config, parts: Parts) -> Result<Self, crate::Error> {
        let url = config.public_url().map_err(crate::Error::Config)?;
        let base = url.as_str().trim_end_matches('/').to_owned();
        let domain = config
            .domain()
            .ok_or_else(|| crate::Error::Config("server.public_url: no host".into()))?;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg: config.activitypub.clone(),
                base,
                domain,
                mail_domain: config.email.enabled.then(|| config.mail_domain()).flatten(),
                allow_private: config.net.allow_private_addresses,
                seen_cleanup: std::sync::atomic::AtomicI64::new(0),
                db: parts.db,
                clock: parts.clock,
                http: parts.http,
                keys: parts.keys,
                agents: parts.agents,
                blobs: parts.blobs,
                queue: parts.queue,
                actors: Mutex::new(HashMap::new()),
                hosts: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Whether the transport is on.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.inner.cfg.enabled
    }

    /// Registers the transport's routes (WebFinger, NodeInfo, actors, inboxes, collections,
    /// notes), each handler reaching the pipeline through `pipeline`.
    pub fn configure(&self, cfg: &mut web::ServiceConfig, pipeline: Pipeline) {
        if !self.enabled() {
            return;
        }
        let state = HttpState {
            ap: self.clone(),
            pipeline,
        };
        let limit = self.inner.cfg.max_body_bytes;
        cfg.app_data(web::Data::new(state));
        // The inboxes first: they take most requests.
        inbox::routes(cfg, limit);
        documents::routes(cfg);
    }

    /// The job handler of [`JOB_KIND`].
    #[must_use]
    pub fn deliver_handler(&self) -> Arc<DeliverHandler> {
        Arc::new(DeliverHandler(self.clone()))
    }
}

/// State of the transport's HTTP handlers.
#[derive(Debug, Clone)]
struct HttpState {
    ap: ActivityPub,
    pipeline: Pipeline,
}

impl Inner {
    fn actor_url(&self, agent: &str) -> String {
        format!("{}/agents/{agent}", self.base)
    }

    fn instance_actor(&self) -> String {
        format!("{}/actor", self.base)
    }

    /// The local agent an actor IRI names.
    fn local_agent(&self, iri: &str) -> Option<Arc<crate::agents::Agent>> {
        let name = iri.strip_prefix(&format!("{}/agents/", self.base))?;
        if name.contains('/') || name.contains('#') {
            return None;
        }
        self.agents.get(name)
    }

    fn is_local(&self, iri: &str) -> bool {
        iri.starts_with(&format!("{}/", self.base))
    }

    fn rsa_key_name(agent: &str) -> String {
        format!("ap:actor:{agent}")
    }

    fn ed_key_name(agent: &str) -> String {
        format!("ap:actor-ed25519:{agent}")
    }
}
