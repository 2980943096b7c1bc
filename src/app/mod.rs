//! Builds the whole server from a [`Config`]: database, queue workers, pipeline, transports and
//! the HTTP listeners. Binding happens first, so port 0 works and the bound addresses are known.
//! The transports are those [`TRANSPORTS`] lists; everything that names transports (job kinds,
//! `[conversation.transports]`, the agents table, listener addresses) is derived from the list.

mod access;
mod server;
mod signals;

pub use signals::{Signals, Stop};

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::agents::{AgentBackend, AgentRegistry};
use crate::blobs::BlobStore;
use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::net::HttpClient;
use crate::ops::AddressKind;
use crate::pipeline::{Core, Pipeline, Services, Transport, TransportRegistry};
use crate::queue::{JobHandler, Queue, kinds};
use crate::site::Site;
use crate::store::Db;
use crate::transports::{Descriptor, Parts, TransportModule, a2a, activitypub, api, email};
use crate::trust::TrustVerifier;

/// The transports, in the order their routes are matched (the busiest endpoints, A2A JSON-RPC
/// and the inboxes, first).
pub const TRANSPORTS: [Descriptor; 4] = [
    a2a::TRANSPORT,
    activitypub::TRANSPORT,
    email::TRANSPORT,
    api::TRANSPORT,
];

/// The pipeline's own job kinds.
const PIPELINE_KINDS: [&str; 3] = [kinds::DISPATCH, kinds::DELIVER, kinds::TURN_END];

/// Every job kind of `transports` and the pipeline (`[queue.kinds.X]` must name one of them).
fn kinds_of(transports: &[Descriptor]) -> Vec<&'static str> {
    PIPELINE_KINDS
        .into_iter()
        .chain(transports.iter().flat_map(|t| t.job_kinds.iter().copied()))
        .collect()
}

/// Every job kind the application runs: the pipeline's and each transport's (what
/// `check-config` and `queue list --kind` accept).
#[must_use]
pub fn job_kinds() -> Vec<&'static str> {
    kinds_of(&TRANSPORTS)
}

/// The transports' names (what `[conversation.transports]` may name).
#[must_use]
pub fn transport_names() -> Vec<&'static str> {
    TRANSPORTS.iter().map(|t| t.name).collect()
}

/// The kinds of address the transports give agents (the agents table's columns).
#[must_use]
pub fn address_kinds() -> Vec<AddressKind> {
    TRANSPORTS.iter().filter_map(|t| t.address).collect()
}

/// Extra wiring for tests and embedders.
#[derive(Debug, Clone)]
pub struct Options {
    /// The clock.
    pub clock: SharedClock,
    /// Outbound transports registered besides the built-in ones (deliveries only).
    pub transports: Vec<Arc<dyn Transport>>,
    /// Whole transports built and started besides [`TRANSPORTS`], like them.
    pub modules: Vec<Descriptor>,
    /// Agents added (or replaced) besides the configured ones: `(name, backend)`.
    pub agents: Vec<(String, Arc<dyn AgentBackend>)>,
    /// Whether to start the queue workers (tests that drive stages by hand turn them off).
    pub workers: bool,
    /// Whether the pipeline keeps what it stored in memory ([`crate::pipeline::Caches`]);
    /// off, every read goes to the database (tests compare the two).
    pub caches: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            transports: Vec::new(),
            modules: Vec::new(),
            agents: Vec::new(),
            workers: true,
            caches: true,
        }
    }
}

/// A running switchboard.
#[derive(Debug)]
pub struct Application {
    http_addr: SocketAddr,
    metrics_addr: SocketAddr,
    /// The transports' own listeners, by name.
    listeners: Vec<(&'static str, SocketAddr)>,
    server: actix_web::dev::ServerHandle,
    metrics_server: actix_web::dev::ServerHandle,
    server_tasks: Vec<JoinHandle<std::io::Result<()>>>,
    shutdown_tx: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    queue: Arc<Queue>,
    pipeline: Pipeline,
    config: Config,
}

fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| Error::Startup(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::Startup(e.to_string()))?;
    Ok((listener, bound))
}

/// The shared services and the transports' parts, from `config`, over `db`.
async fn parts(
    config: &Config,
    opts: &Options,
    addresses: Vec<AddressKind>,
    db: Db,
) -> Result<Parts> {
    let site = Site::from_config(config)?;
    let clock = opts.clock.clone();
    let http = HttpClient::new(config.net.clone(), clock.clone())
        .map_err(|e| Error::Startup(format!("HTTP client: {e}")))?;
    let metrics = Arc::new(Metrics::new());
    let mut agents = AgentRegistry::from_config(
        &config.agents,
        site.handle_domain(),
        &http,
        &clock,
        &db,
        &config.limits,
        &metrics,
    );
    for (name, backend) in &opts.agents {
        agents.insert(name, None, None, Arc::clone(backend));
    }
    let queue = Queue::new(
        db.clone(),
        clock.clone(),
        config.queue.clone(),
        metrics.clone(),
    );
    let trust = TrustVerifier::new(
        &config.trust,
        config.net.allow_private_addresses,
        http.clone(),
        clock.clone(),
        db.clone(),
        metrics.clone(),
    );
    let blocks = Arc::new(crate::moderation::Blocks::new(&config.moderation.blocks));
    blocks.refresh(&db).await?;
    // Keys sealed under another KEK (or any, without one) stop the start here.
    let kek = crate::keys::Kek::configured(&config.server)?;
    let plain = crate::keys::check_kek(&db, kek.as_deref()).await?;
    if kek.is_some() && plain > 0 {
        tracing::warn!(
            plain,
            "private keys stored unencrypted: `switchboard keys encrypt` seals them"
        );
    }
    let services = Services {
        keys: Keys::new(db.clone(), clock.clone()).with_kek(kek),
        agents: Arc::new(agents),
        blobs: BlobStore::new(db.clone(), clock.clone(), &config.media, site.base_url()),
        db,
        clock,
        queue,
        metrics,
        blocks,
    };
    Ok(Parts {
        services,
        config: Arc::new(config.clone()),
        site,
        http,
        trust,
        addresses: addresses.into(),
    })
}

/// The shared services and the transports' parts, for a command that acts on the server's
/// data whether it runs or not (`switchboard agents move`): no listener is bound and no worker
/// started; the jobs it enqueues are run by the server's workers. Without `server.public_url`,
/// the server's address is `http://{server.bind}`, as the server itself takes it. The database
/// must exist: only `serve` creates one.
///
/// # Errors
/// An invalid configuration; no database, or database errors.
pub async fn offline_parts(mut config: Config) -> Result<Parts> {
    let bind = config.server.bind;
    config
        .server
        .public_url
        .get_or_insert_with(|| format!("http://{bind}"));
    config.check_with(&transport_names())?;
    let db = Db::open_existing(&config.database).await?;
    parts(&config, &Options::default(), address_kinds(), db).await
}

/// Starts the queue workers of the pipeline's job kinds and of each module's, refusing a
/// module that hands a kind its descriptor does not declare (`check-config` judges
/// `[queue.kinds.X]` by the declared ones).
fn spawn_workers(
    pipeline: &Pipeline,
    modules: &[(Descriptor, Box<dyn TransportModule>)],
    shutdown: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut jobs: Vec<(&'static str, Arc<dyn JobHandler>)> = vec![
        (kinds::DISPATCH, pipeline.dispatch_handler()),
        (kinds::DELIVER, pipeline.deliver_handler()),
        (kinds::TURN_END, pipeline.turn_end_handler()),
    ];
    for (d, m) in modules {
        for (kind, handler) in m.jobs() {
            if !d.job_kinds.contains(&kind) {
                return Err(Error::Startup(format!(
                    "transport {} runs job kind {kind}, which its descriptor does not declare",
                    d.name
                )));
            }
            jobs.push((kind, handler));
        }
    }
    let queue = &pipeline.services().queue;
    for (d, _) in modules {
        for kind in d.job_kinds {
            queue.runs_for(kind, d.name);
        }
    }
    Ok(jobs
        .into_iter()
        .flat_map(|(kind, handler)| queue.spawn_workers(kind, handler, shutdown.clone()))
        .collect())
}

impl Application {
    /// Builds and starts everything from `config`.
    ///
    /// # Errors
    /// Unusable configuration, unreachable database, ports in use.
    pub async fn build(config: Config) -> Result<Self> {
        Self::build_with(config, Options::default()).await
    }

    /// As [`Application::build`], with extra wiring.
    ///
    /// # Errors
    /// As [`Application::build`].
    pub async fn build_with(mut config: Config, opts: Options) -> Result<Self> {
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            "switchboard {} starting",
            env!("CARGO_PKG_VERSION")
        );
        let transports: Vec<Descriptor> = TRANSPORTS.iter().chain(&opts.modules).copied().collect();
        let (listener, http_addr) = bind(config.server.bind)?;
        config
            .server
            .public_url
            .get_or_insert_with(|| format!("http://{http_addr}"));
        let names: Vec<&str> = transports.iter().map(|t| t.name).collect();
        config.check_with(&names)?;
        let (metrics_listener, metrics_addr) = bind(config.server.metrics_bind)?;
        let addresses: Vec<AddressKind> = transports.iter().filter_map(|t| t.address).collect();
        let db = Db::open(&config.database).await?;
        let parts = parts(&config, &opts, addresses, db).await?;
        let mut modules = Vec::new();
        for d in &transports {
            modules.extend((d.build)(&parts)?.map(|m| (*d, m)));
        }
        let mut registry = TransportRegistry::default();
        for m in modules
            .iter()
            .map(|(_, m)| m.outbound())
            .chain(opts.transports)
        {
            registry.register(m);
        }
        let core = Core::new(&config, parts.services.clone(), registry, opts.caches)?;
        let pipeline = Pipeline::new(core);
        let queue = Arc::clone(&parts.queue);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut workers = Vec::new();
        if opts.workers {
            workers = spawn_workers(&pipeline, &modules, &shutdown_rx)?;
        }
        workers.push(queue.spawn_housekeeping(shutdown_rx.clone()));
        workers.push(
            parts
                .blocks
                .spawn_refresh(parts.db.clone(), shutdown_rx.clone()),
        );
        let retention = config.database.retention_days;
        workers.extend(pipeline.spawn_retention(retention, shutdown_rx.clone()));
        let (mut routes, mut private_routes, mut listeners) = (Vec::new(), Vec::new(), Vec::new());
        for (_, m) in &modules {
            let started = m.start(&pipeline, shutdown_rx.clone()).await?;
            routes.extend(started.routes);
            private_routes.extend(started.private_routes);
            workers.extend(started.tasks);
            listeners.extend(started.listeners);
        }
        // After every transport has registered its notification channels.
        workers.extend(queue.spawn_listener(shutdown_rx));
        let (server, admitted) = server::public(&config, listener, routes, &pipeline)?;
        let metrics_server = server::private(&config, metrics_listener, private_routes, &pipeline)?;
        let (server_handle, metrics_handle) = (server.handle(), metrics_server.handle());
        let server_tasks = vec![tokio::spawn(server), tokio::spawn(metrics_server)];
        let (domain, max_connections) = (parts.site.domain(), admitted.max_connections);
        tracing::info!(version = env!("CARGO_PKG_VERSION"), %http_addr, %metrics_addr, %domain, backend = ?parts.db.backend(), max_connections, open_file_limit = ?admitted.open_files, "switchboard is up");
        let app = Self {
            http_addr,
            metrics_addr,
            listeners,
            server: server_handle,
            metrics_server: metrics_handle,
            server_tasks,
            shutdown_tx,
            workers,
            queue,
            pipeline,
            config,
        };
        crate::ops::log_startup(&app.config, &parts.addresses, app.smtp_addr());
        Ok(app)
    }

    /// The bound public HTTP address.
    #[must_use]
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The bound address of the transport listener `name` (as its descriptor names it), when
    /// its transport runs.
    #[must_use]
    pub fn listener(&self, name: &str) -> Option<SocketAddr> {
        self.listeners
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
    }

    /// The bound SMTP address, when email is enabled: [`Application::listener`]`("smtp")`.
    #[must_use]
    pub fn smtp_addr(&self) -> Option<SocketAddr> {
        self.listener("smtp")
    }

    /// The bound metrics address.
    #[must_use]
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// The pipeline (tests ingest through it directly).
    #[must_use]
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The queue.
    #[must_use]
    pub fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }

    /// The effective configuration (with the bound public URL filled in).
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully; a SIGHUP is logged and
    /// ignored ([`Signals`]).
    ///
    /// # Errors
    /// When the signal handlers cannot be installed, or shutdown could not release leased jobs.
    pub async fn run_until_stopped(self) -> Result<()> {
        let signals = Signals::install()?;
        self.run_until(signals).await
    }

    /// [`Application::run_until_stopped`] with handlers installed earlier (`serve` installs them
    /// before it builds anything, so a signal during start-up is answered too).
    ///
    /// # Errors
    /// When shutdown could not release leased jobs.
    pub async fn run_until(self, mut signals: Signals) -> Result<()> {
        let stop = signals.stop_requested().await;
        tracing::info!(
            signal = stop.name(),
            grace_seconds = self.config.server.shutdown_grace_seconds,
            "shutting down: listeners closed, draining in-flight work"
        );
        self.shutdown().await
    }

    /// Shuts down in one stage: every listener stops accepting and every worker stops claiming
    /// jobs at once; in-flight requests, SMTP sessions and job batches then share one grace
    /// period (`server.shutdown_grace_seconds`), after which what is left is cut and any job
    /// still leased to this instance returns to the queue.
    ///
    /// # Errors
    /// When leased jobs could not be released (they return when their lease expires).
    pub async fn shutdown(self) -> Result<()> {
        let grace = Duration::from_secs(self.config.server.shutdown_grace_seconds);
        let deadline = tokio::time::Instant::now() + grace;
        // Workers and the SMTP listener watch this; the HTTP servers are told next, so nothing
        // is accepted or claimed while anything else drains.
        let _ = self.shutdown_tx.send(true);
        let (server, metrics_server) = (self.server, self.metrics_server);
        let mut server_tasks = self.server_tasks;
        let mut workers = self.workers;
        let http = async {
            // actix's own shutdown timeout is the same grace period, counted from now.
            futures_util::future::join(server.stop(true), metrics_server.stop(false)).await;
            futures_util::future::join_all(server_tasks.iter_mut()).await;
        };
        let jobs = futures_util::future::join_all(workers.iter_mut());
        let drained = tokio::time::timeout_at(deadline, futures_util::future::join(http, jobs));
        if drained.await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "in-flight work did not finish within the grace period; cutting it"
            );
            for t in &server_tasks {
                t.abort();
            }
            for w in &workers {
                w.abort();
            }
        }
        let released = self.queue.release_owned().await?;
        if released > 0 {
            tracing::info!(released, "returned leased jobs to the queue");
        }
        self.pipeline.db().close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::tests::webhook;

    #[test]
    fn addresses_follow_the_public_url_and_the_transports() {
        let mut c = Config::default();
        c.server.public_url = Some("https://sb.example".into());
        c.agents.push(webhook("https://hook.example/x"));
        let a = crate::ops::agent_addresses(&c, &address_kinds()).unwrap();
        assert_eq!(a[1].get("fediverse").unwrap(), "@hook@sb.example");
        assert_eq!(a[1].get("email"), Some("hook@sb.example"));
        assert_eq!(
            a[1].get("a2a_card"),
            Some("https://sb.example/agents/hook/agent-card.json")
        );
        assert_eq!(a[1].backend, "webhook");
        c.email.enabled = false;
        c.a2a.enabled = false;
        let a = crate::ops::agent_addresses(&c, &address_kinds()).unwrap();
        assert_eq!((a[0].get("email"), a[0].get("a2a_card")), (None, None));
        let table = crate::ops::agents_table(&a);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME  "), "{table}");
        assert!(
            lines[2].starts_with("hook ") && lines[2].ends_with("webhook"),
            "{table}"
        );
        assert!(lines[2].contains(" - "), "{table}");
    }

    #[test]
    fn job_kinds_are_the_pipelines_and_every_transports() {
        let kinds = job_kinds();
        for kind in [
            "dispatch",
            "deliver",
            "turn_end",
            "ap_deliver",
            "a2a_push",
            "email_role",
            "report_mail",
        ] {
            assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
        }
        assert_eq!(kinds.len(), 7);
        assert_eq!(transport_names(), ["a2a", "activitypub", "email", "api"]);
    }
}
