//! Transports: each verifies and normalizes what arrives on its wire and hands it to
//! [`crate::pipeline::Pipeline::ingest`], and renders and delivers responses through its
//! [`crate::pipeline::Transport`], the outbound contract the pipeline owns.
//!
//! Every transport has one shape. Its [`Descriptor`] says what it is before anything is built
//! (name, job kinds, listeners, the address it gives agents, how to build it); built from the
//! shared [`Parts`], its [`TransportModule`] hands the application its outbound half, the job
//! handlers, and, once the pipeline exists, its HTTP routes, listeners and background tasks
//! ([`Started`]). `app.rs` lists the descriptors; the job kinds `check-config` knows, the names
//! `[conversation.transports]` accepts, the agents table's columns and the listener addresses
//! are all derived from that list. No transport imports another.

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

use crate::config::Config;
use crate::error::Result;
use crate::net::HttpClient;
use crate::pipeline::{Pipeline, Services, Transport};
use crate::queue::JobHandler;
use crate::site::Site;
use crate::trust::TrustVerifier;

/// What every transport is built from: the configuration, the site's names, the services it
/// shares with the pipeline (read through the parts: `parts.db`), and its own (all cheap to
/// clone).
#[derive(Debug, Clone)]
pub struct Parts {
    /// The services shared with the pipeline.
    pub services: Services,
    /// The effective configuration.
    pub config: Arc<Config>,
    /// The public URL and domains.
    pub site: Site,
    /// The one guarded outbound HTTP client.
    pub http: HttpClient,
    /// Verifies identity assertions forwarded by trusted connectors.
    pub trust: TrustVerifier,
    /// The kinds of address the transports give agents ([`Descriptor::address`]).
    pub addresses: Arc<[crate::ops::AddressKind]>,
}

impl std::ops::Deref for Parts {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
}

/// What a transport is, known before anything of it is built.
#[derive(Debug, Clone, Copy)]
pub struct Descriptor {
    /// Its name: what its messages are ingested under (`received_via`) and its key in
    /// `[conversation.transports]`.
    pub name: &'static str,
    /// The job kinds it runs (`[queue.kinds.X]`); its module hands handlers for these and no
    /// other (checked when the application starts).
    pub job_kinds: &'static [&'static str],
    /// Its listeners besides the HTTP app, by name (`Application::listener`).
    pub listeners: &'static [&'static str],
    /// The address it gives every agent, if any (the agents table, the console, the start-up
    /// lines).
    pub address: Option<crate::ops::AddressKind>,
    /// Builds it, or nothing when the configuration turns it off.
    pub build: Build,
}

/// How a transport is built: its module, or nothing when the configuration turns it off.
pub type Build = fn(&Parts) -> Result<Option<Box<dyn TransportModule>>>;

/// Routes a transport mounts on the public HTTP app (called once per HTTP worker).
pub type Routes = Arc<dyn Fn(&mut web::ServiceConfig) + Send + Sync>;

/// What a transport runs once the pipeline exists.
#[derive(Default)]
pub struct Started {
    /// Its routes on the public HTTP app, if it has any.
    pub routes: Option<Routes>,
    /// Its routes on the private (metrics) listener, if it has any (the console).
    pub private_routes: Option<Routes>,
    /// Its background tasks (listeners, watchers); awaited at shutdown.
    pub tasks: Vec<JoinHandle<()>>,
    /// The addresses it listens on besides the HTTP app, by name (`smtp`).
    pub listeners: Vec<(&'static str, SocketAddr)>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("routes", &self.routes.is_some())
            .field("private_routes", &self.private_routes.is_some())
            .field("tasks", &self.tasks.len())
            .field("listeners", &self.listeners)
            .finish()
    }
}

/// One transport, as the application assembles it.
#[async_trait::async_trait]
pub trait TransportModule: Send + Sync {
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
