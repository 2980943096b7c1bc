//! Transports: each verifies and normalizes what arrives on its wire and hands it to
//! [`crate::pipeline::Pipeline::ingest`], and renders and delivers responses through its
//! [`crate::pipeline::Transport`], the outbound contract the pipeline owns.
//!
//! Every transport has one shape, [`TransportModule`]: built from the shared [`Parts`], it hands
//! the application its outbound half, the job kinds it runs, and, once the pipeline exists, its
//! HTTP routes, listeners and background tasks ([`Started`]). `app.rs` builds the enabled ones
//! in one loop. No transport imports another.

pub mod a2a;
pub mod activitypub;
pub mod api;
pub mod email;
pub mod memory;

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::web;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::agents::AgentRegistry;
use crate::blobs::BlobStore;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::error::Result;
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::net::HttpClient;
use crate::pipeline::{Pipeline, Transport};
use crate::queue::{JobHandler, Queue};
use crate::site::Site;
use crate::store::Db;
use crate::trust::TrustVerifier;

/// What every transport is built from: the configuration, the site's names and the shared
/// services (all cheap to clone).
#[derive(Debug, Clone)]
pub struct Parts {
    /// The effective configuration.
    pub config: Arc<Config>,
    /// The public URL and domains.
    pub site: Site,
    /// The database.
    pub db: Db,
    /// The clock.
    pub clock: SharedClock,
    /// The one guarded outbound HTTP client.
    pub http: HttpClient,
    /// Signing keys.
    pub keys: Keys,
    /// The hosted agents.
    pub agents: Arc<AgentRegistry>,
    /// Attachments.
    pub blobs: BlobStore,
    /// The job queue.
    pub queue: Arc<Queue>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Verifies identity assertions forwarded by trusted connectors.
    pub trust: TrustVerifier,
    /// The blocks in force (what the pipeline refuses; a transport also leaves blocked parties
    /// out of what it sends).
    pub blocks: Arc<crate::moderation::Blocks>,
}

/// Routes a transport mounts on the public HTTP app (called once per HTTP worker).
pub type Routes = Arc<dyn Fn(&mut web::ServiceConfig) + Send + Sync>;

/// What a transport runs once the pipeline exists.
#[derive(Default)]
pub struct Started {
    /// Its routes on the public HTTP app, if it has any.
    pub routes: Option<Routes>,
    /// Its background tasks (listeners, watchers); awaited at shutdown.
    pub tasks: Vec<JoinHandle<()>>,
    /// The addresses it listens on besides the HTTP app, by name (`smtp`).
    pub listeners: Vec<(&'static str, SocketAddr)>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("routes", &self.routes.is_some())
            .field("tasks", &self.tasks.len())
            .field("listeners", &self.listeners)
            .finish()
    }
}

/// One transport, as the application assembles it.
#[async_trait::async_trait]
pub trait TransportModule: Send + Sync {
    /// The name its messages are ingested under (the `received_via` value).
    fn name(&self) -> &'static str;

    /// Its outbound half, which the pipeline delivers responses through.
    fn outbound(&self) -> Arc<dyn Transport>;

    /// The job kinds it runs besides the pipeline's, with their handlers.
    fn jobs(&self) -> Vec<(&'static str, Arc<dyn JobHandler>)> {
        Vec::new()
    }

    /// Starts its inbound side on `pipeline`: binds its listeners, spawns its background tasks
    /// (which stop when `shutdown` turns true) and returns its routes.
    ///
    /// # Errors
    /// A listener that cannot bind, unusable configuration.
    async fn start(&self, pipeline: &Pipeline, shutdown: watch::Receiver<bool>) -> Result<Started>;
}
