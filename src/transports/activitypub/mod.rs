//! The ActivityPub transport: agents as fediverse actors.
//!
//! - [`sig`]: draft-cavage and RFC 9421 HTTP signatures (parse, check, sign).
//! - [`proof`]: FEP-8b32 `eddsa-jcs-2022` object proofs, JCS, base58btc Multikeys.
//! - [`html`]: note HTML to text, and the outbound sanitiser.
//! - [`wire`]: the ActivityStreams shapes read and written (activity, note, actor, tags).
//! - [`mapping`]: ActivityStreams ⇄ contract, pure.
//! - [`reply_context`]: what a reply needs of the note it answers, kept with the message.
//! - [`store`]: the transport's tables.
//! - `fetch`: signed, cached fetches of remote actors and keys (through the SSRF guard).
//! - `documents`: WebFinger, actors, NodeInfo, collections, notes, profile pages.
//! - `inbox`: the inbox endpoints (per agent and shared): limits, replay check, refusals.
//! - `verify`: authentication of requests and activities (HTTP signatures, object proofs).
//! - `activities`: what verified activities do (notes wake agents, follows, deletes, edits).
//! - `events`: follows, likes, boosts and quote requests told to agents that asked
//!   (`notify`), as event messages.
//! - `moderation`: `Block` of an agent (and its `Undo`) and `Flag` (reports of abuse).
//! - `software`: what software remote servers run (NodeInfo), for the reply length they take.
//! - `profile`: agents' profiles (`[agents.activitypub]`): images, the `featured` collection,
//!   the `Update` of the actor sent at start when the profile changed.
//! - `migration`: other accounts of an agent (`alsoKnownAs`) and its move to a new one
//!   (`Move`, `movedTo`).
//! - `quotes`: quote requests (FEP-044f) answered by the agent's `quote_policy`, and the
//!   authorizations it grants.
//! - `outbound`: replies as `Create(Note)` (a thread of them when too long) and the per-inbox
//!   delivery jobs.
//!
//! See `docs/protocols/activitypub.md` for the field-by-field mapping and what is verified.

mod activities;
mod actor;
mod answer;
mod documents;
mod events;
mod fetch;
#[doc(hidden)]
pub mod fuzzing;
pub mod html;
mod inbox;
mod long_replies;
pub mod mapping;
mod migration;
mod moderation;
mod outbound;
mod profile;
pub mod proof;
mod public;
mod quotes;
mod reject;
pub mod reply_context;
pub mod sig;
mod software;
pub mod store;
mod verify;
pub mod wire;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix_web::web;

pub use fetch::RemoteActor;
pub use migration::{Moved, move_agent};
pub use outbound::DeliverHandler;

use tokio::sync::watch;

use super::{Parts, Started, TransportModule};
use crate::agents::AgentRegistry;
use crate::blobs::BlobStore;
use crate::clock::SharedClock;
use crate::config::ActivityPubConfig;
use crate::error::Result;
use crate::hop::OnMain;
use crate::keys::Keys;
use crate::net::HttpClient;
use crate::pipeline::{Pipeline, Transport};
use crate::queue::{JobHandler, Queue};
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
    /// `example.org[:port]`: the host of `base`.
    domain: String,
    /// The domain of agents' handles (`server.handle_domain`, else `domain`).
    handle_domain: String,
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
    metrics: Arc<crate::metrics::Metrics>,
    /// Where reports (`Flag`) are mailed (`moderation.reports_to`).
    reports_to: Option<String>,
    /// The operator's blocks: a blocked actor is neither addressed nor delivered to.
    blocks: Arc<crate::moderation::Blocks>,
    /// Remote actors by actor IRI and by key IRI, with the time they were fetched.
    actors: Mutex<HashMap<String, (Arc<RemoteActor>, i64)>>,
    /// Concurrent deliveries per host.
    hosts: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    /// Remote servers' software (NodeInfo) by host, `None` when unknown, with when it was
    /// looked up.
    software: Mutex<HashMap<String, (Option<String>, i64)>>,
    /// One NodeInfo lookup per host at a time.
    software_lookups: crate::net::gates::Gates,
    /// When activity ids seen long ago were last forgotten (unix ms).
    seen_cleanup: std::sync::atomic::AtomicI64,
    /// Agents' profiles (`[agents.activitypub]`) by lower-case name, images read.
    profiles: HashMap<String, Arc<profile::AgentProfile>>,
    /// Agents' other accounts (`also_known_as`) as actor IRIs, by lower-case name: resolved
    /// at start.
    aliases: Mutex<HashMap<String, Arc<[String]>>>,
}

impl ActivityPub {
    /// Builds the transport from the shared parts, reading the agents' profile images.
    ///
    /// # Errors
    /// [`crate::error::Error::Config`] for a profile image that cannot be read or used.
    pub fn new(parts: &Parts) -> Result<Self> {
        let site = &parts.site;
        let profiles = profile::load(
            &parts.config.agents,
            site.base_url(),
            &parts.blobs,
            parts.config.media.max_bytes,
        )?;
        Ok(Self {
            inner: Arc::new(Inner {
                cfg: parts.config.activitypub.clone(),
                base: site.base_url().to_owned(),
                domain: site.domain().to_owned(),
                handle_domain: site.handle_domain().to_owned(),
                mail_domain: site.mail_domain().map(str::to_owned),
                allow_private: parts.config.net.allow_private_addresses,
                seen_cleanup: std::sync::atomic::AtomicI64::new(0),
                db: parts.db.clone(),
                clock: parts.clock.clone(),
                http: parts.http.clone(),
                keys: parts.keys.clone(),
                agents: parts.agents.clone(),
                blobs: parts.blobs.clone(),
                queue: parts.queue.clone(),
                metrics: parts.metrics.clone(),
                reports_to: parts.config.moderation.reports_to.clone(),
                blocks: Arc::clone(&parts.blocks),
                actors: Mutex::new(HashMap::new()),
                hosts: Mutex::new(HashMap::new()),
                software: Mutex::new(HashMap::new()),
                software_lookups: crate::net::gates::Gates::default(),
                profiles,
                aliases: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Whether the transport is on.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.inner.cfg.enabled
    }

    /// The job handler of [`JOB_KIND`].
    #[must_use]
    pub fn deliver_handler(&self) -> Arc<DeliverHandler> {
        Arc::new(DeliverHandler(self.clone()))
    }
}

/// The ActivityPub transport, as the application lists it.
pub const TRANSPORT: super::Descriptor = super::Descriptor {
    name: NAME,
    job_kinds: &[JOB_KIND],
    listeners: &[],
    address: Some(crate::ops::AddressKind {
        key: "fediverse",
        label: "Fediverse",
        rank: 1,
        of: handle,
    }),
    build,
};

/// `agent`'s fediverse handle, `@name@domain` (its name, whether ActivityPub is on or not).
fn handle(_: &crate::config::Config, site: &crate::site::Site, agent: &str) -> Option<String> {
    Some(format!("@{agent}@{}", site.handle_domain()))
}

/// Builds the ActivityPub transport, or nothing when `activitypub.enabled` is off.
///
/// # Errors
/// A profile image that cannot be read or used ([`ActivityPub::new`]).
pub fn build(parts: &Parts) -> Result<Option<Box<dyn TransportModule>>> {
    if !parts.config.activitypub.enabled {
        return Ok(None);
    }
    let ap = ActivityPub::new(parts)?;
    parts
        .metrics
        .hosts()
        .add_source(Arc::new(HostHealth(ap.clone())));
    Ok(Some(Box::new(ap)))
}

/// The hosts ActivityPub delivers to, as the operator's remote-hosts page shows them: failure
/// streaks, last errors and the circuit breaker (`activitypub.breaker_days`).
#[derive(Debug)]
struct HostHealth(ActivityPub);

/// The most hosts the remote-hosts page lists from the database.
const MAX_LISTED_HOSTS: i64 = 500;

#[async_trait::async_trait]
impl crate::hosts::HostSource for HostHealth {
    async fn hosts(&self) -> Result<Vec<crate::hosts::HostHealth>> {
        let inner = &self.0.inner;
        let now = inner.clock.now_ms();
        let rows = store::hosts(&inner.db, MAX_LISTED_HOSTS).await?;
        Ok(rows
            .into_iter()
            .map(|r| crate::hosts::HostHealth {
                circuit: inner.circuit(r.failing_since, now),
                host: r.host,
                transport: NAME,
                failures: r.failures,
                failing_since: r.failing_since,
                last_error: r.last_error,
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl TransportModule for ActivityPub {
    fn outbound(&self) -> Arc<dyn Transport> {
        Arc::new(self.clone())
    }

    fn jobs(&self) -> Vec<(&'static str, Arc<dyn JobHandler>)> {
        vec![(JOB_KIND, self.deliver_handler())]
    }

    /// Announces changed profiles to followers; then its routes: WebFinger, NodeInfo, actors,
    /// inboxes, collections, notes, profile documents, each handler reaching the pipeline
    /// through `pipeline`.
    async fn start(&self, pipeline: &Pipeline, _: watch::Receiver<bool>) -> Result<Started> {
        migration::resolve_aliases(&self.inner).await;
        profile::announce_changes(&self.inner).await?;
        let state = HttpState {
            site: public::Public::new(Arc::clone(&self.inner)),
            main: pipeline.on_main(Served {
                inner: Arc::clone(&self.inner),
                pipeline: pipeline.clone(),
            }),
        };
        let limit = self.inner.cfg.max_body_bytes;
        Ok(Started {
            routes: Some(Arc::new(move |cfg: &mut web::ServiceConfig| {
                cfg.app_data(web::Data::new(state.clone()));
                // The inboxes first: they take most requests.
                inbox::routes(cfg, limit);
                documents::routes(cfg);
                profile::routes(cfg);
                quotes::routes(cfg);
            })),
            ..Started::default()
        })
    }
}

/// State of the transport's HTTP handlers: names and settings read in place, everything that
/// does I/O reached on the main runtime.
#[derive(Debug, Clone)]
struct HttpState {
    site: public::Public,
    main: OnMain<Served>,
}

/// What the HTTP handlers do I/O with, on the main runtime.
#[derive(Debug, Clone)]
struct Served {
    inner: Arc<Inner>,
    pipeline: Pipeline,
}

impl Inner {
    fn actor_url(&self, agent: &str) -> String {
        format!("{}/agents/{agent}", self.base)
    }

    /// The URL of a thread context an agent minted.
    fn context_url(&self, agent: &str, id: &str) -> String {
        format!("{}/contexts/{id}", self.actor_url(agent))
    }

    /// The id of one of our minted contexts named by `iri`, with the agent it is under.
    fn local_context<'a>(&self, iri: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = iri.strip_prefix(&self.base)?.strip_prefix("/agents/")?;
        let (agent, id) = rest.split_once("/contexts/")?;
        (!agent.contains('/') && !id.is_empty() && !id.contains(['/', '#', '?']))
            .then_some((agent, id))
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
