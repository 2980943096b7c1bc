//! Builds the whole server from a [`Config`]: database, queue workers, pipeline, transports and
//! the HTTP listeners. Binding happens first, so port 0 works and the bound addresses are known.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer, middleware::from_fn, web};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::agents::{AgentBackend, AgentRegistry};
use crate::blobs::BlobStore;
use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{self, AppState};
use crate::keys::Keys;
use crate::metrics::Metrics;
use crate::net::HttpClient;
use crate::pipeline::{Core, Pipeline, Transport, TransportRegistry};
use crate::queue::{Queue, kinds};
use crate::site::Site;
use crate::store::Db;
use crate::transports::{Parts, TransportModule, a2a, activitypub, api, email};
use crate::trust::TrustVerifier;

/// Every job kind the application runs: the pipeline's and each transport's
/// (`[queue.kinds.X]` must name one of them).
pub const JOB_KINDS: [&str; 7] = [
    kinds::DISPATCH,
    kinds::DELIVER,
    kinds::TURN_END,
    activitypub::JOB_KIND,
    a2a::push::KIND,
    email::roles::JOB_KIND,
    crate::store::reports::JOB_KIND,
];

/// How a transport is built: nothing when the configuration turns it off.
type Build = fn(&Parts) -> Result<Option<Box<dyn TransportModule>>>;

/// Extra wiring for tests and embedders.
#[derive(Debug, Clone)]
pub struct Options {
    /// The clock.
    pub clock: SharedClock,
    /// Transports registered besides the built-in ones.
    pub transports: Vec<Arc<dyn Transport>>,
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
    smtp_addr: Option<SocketAddr>,
    server: actix_web::dev::ServerHandle,
    metrics_server: actix_web::dev::ServerHandle,
    server_tasks: Vec<JoinHandle<std::io::Result<()>>>,
    shutdown_tx: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    queue: Arc<Queue>,
    pipeline: Pipeline,
    config: Config,
}

fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| Error::Startup(format!("cannot listen on {addr}: {e}")))
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
        let listener = bind(config.server.bind)?;
        let http_addr = listener
            .local_addr()
            .map_err(|e| Error::Startup(e.to_string()))?;
        if config.server.public_url.is_none() {
            config.server.public_url = Some(format!("http://{http_addr}"));
        }
        config.check()?;
        let site = Site::from_config(&config)?;
        let metrics_listener = bind(config.server.metrics_bind)?;
        let metrics_addr = metrics_listener
            .local_addr()
            .map_err(|e| Error::Startup(e.to_string()))?;

        let clock = opts.clock.clone();
        let db = Db::open(&config.database).await?;
        let http_client = HttpClient::new(config.net.clone(), clock.clone())
            .map_err(|e| Error::Startup(format!("HTTP client: {e}")))?;
        let mut agents = AgentRegistry::from_config(
            &config.agents,
            site.handle_domain(),
            &http_client,
            &clock,
            &db,
            &config.limits,
        );
        for (name, backend) in opts.agents {
            agents.insert(&name, None, None, backend);
        }
        let metrics = Arc::new(Metrics::new());
        let queue = Queue::new(
            db.clone(),
            clock.clone(),
            config.queue.clone(),
            metrics.clone(),
        );
        let trust = TrustVerifier::new(
            &config.trust,
            config.net.allow_private_addresses,
            http_client.clone(),
            clock.clone(),
            db.clone(),
            metrics.clone(),
        );
        let blocks = Arc::new(crate::moderation::Blocks::new(&config.moderation.blocks));
        blocks.refresh(&db).await?;
        let parts = Parts {
            config: Arc::new(config.clone()),
            site: site.clone(),
            db: db.clone(),
            clock: clock.clone(),
            http: http_client,
            keys: Keys::new(db.clone(), clock.clone()),
            agents: Arc::new(agents),
            blobs: BlobStore::new(db.clone(), clock.clone(), &config.media, site.base_url()),
            queue: queue.clone(),
            metrics,
            trust,
            blocks: Arc::clone(&blocks),
        };
        // The order is the order routes are matched in: the busiest endpoints (A2A JSON-RPC,
        // the inboxes) come first.
        let builders: [Build; 4] = [a2a::build, activitypub::build, email::build, api::build];
        let mut modules = Vec::new();
        for build in builders {
            modules.extend(build(&parts)?);
        }
        let mut registry = TransportRegistry::default();
        for m in &modules {
            registry.register(m.outbound());
        }
        for t in opts.transports {
            registry.register(t);
        }
        let pipeline = Pipeline::new(Core {
            db: db.clone(),
            clock,
            queue: queue.clone(),
            agents: parts.agents.clone(),
            transports: registry,
            metrics: parts.metrics.clone(),
            history: config.history,
            blobs: parts.blobs.clone(),
            keys: parts.keys.clone(),
            // SQLite serves one instance: every turn of its database is stored by this one.
            caches: if opts.caches {
                crate::pipeline::Caches::new(db.backend() == crate::store::Backend::Sqlite)
            } else {
                crate::pipeline::Caches::off()
            },
            rates: crate::limits::Windows::new(db.clone()),
            public_url: site.base_url().to_owned(),
            policy_state_ttl_ms: i64::try_from(config.policy.state_ttl_seconds)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
            conversation: config.conversation.clone(),
            runs: crate::pipeline::Runs::default(),
            blocks: Arc::clone(&blocks),
        });

        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut workers = Vec::new();
        if opts.workers {
            let mut jobs = vec![
                (kinds::DISPATCH, pipeline.dispatch_handler()),
                (kinds::DELIVER, pipeline.deliver_handler()),
                (kinds::TURN_END, pipeline.turn_end_handler()),
            ];
            for m in &modules {
                jobs.extend(m.jobs());
            }
            for (kind, handler) in jobs {
                // `check-config` and `queue list --kind` judge kinds by JOB_KINDS.
                debug_assert!(JOB_KINDS.contains(&kind), "{kind} missing from JOB_KINDS");
                workers.extend(queue.spawn_workers(kind, handler, shutdown_rx.clone()));
            }
        }
        workers.push(queue.spawn_housekeeping(shutdown_rx.clone()));
        workers.push(blocks.spawn_refresh(db.clone(), shutdown_rx.clone()));
        workers
            .extend(pipeline.spawn_retention(config.database.retention_days, shutdown_rx.clone()));
        let mut routes = Vec::new();
        let mut listeners = Vec::new();
        for m in &modules {
            let started = m.start(&pipeline, shutdown_rx.clone()).await?;
            routes.extend(started.routes);
            workers.extend(started.tasks);
            listeners.extend(started.listeners);
        }
        // After every transport has registered its notification channels.
        if let Some(listener) = queue.spawn_listener(shutdown_rx) {
            workers.push(listener);
        }

        let state = AppState {
            pipeline: pipeline.clone(),
        };
        let srv = &config.server;
        let max_body = srv.max_body_bytes;
        let grace = srv.shutdown_grace_seconds;
        let deadlines = http::limits::Deadlines {
            body: Duration::from_millis(srv.body_timeout_ms),
            request: Duration::from_millis(srv.request_timeout_ms),
        };
        let open_files = crate::admission::raise_open_file_limit();
        let max_connections = match srv.max_connections {
            0 => crate::admission::auto_max_connections(open_files),
            n => n,
        };
        if let Some(limit) = open_files
            && u64::try_from(max_connections).unwrap_or(u64::MAX)
                > limit.saturating_sub(crate::admission::RESERVED_DESCRIPTORS)
        {
            tracing::warn!(
                max_connections,
                open_file_limit = limit,
                "server.max_connections leaves too few descriptors for the rest; raise the \
                 open-file limit (LimitNOFILE) or lower the cap"
            );
        }
        let admission = crate::admission::Admission::new(
            max_connections,
            srv.max_connections_per_peer,
            parts.metrics.connections("http"),
        );
        let workers_n = srv.workers.max(1);
        // actix's own per-worker cap backs ours up: it pauses accepting (leaving connections
        // in the kernel's queue, holding no descriptor) rather than running out of them.
        let per_worker = max_connections.div_ceil(workers_n) + 16;
        let trusted = Arc::new(srv.trusted()?);
        if srv.proxy_protocol && trusted.is_empty() {
            tracing::warn!(
                "server.proxy_protocol is on and server.trusted_proxies is empty: any client \
                 that reaches the listener directly can name its own address"
            );
        }
        let clients = http::client::Clients {
            trusted: Arc::clone(&trusted),
            admission: admission.clone(),
            metrics: parts.metrics.clone(),
        };
        let app_state = state.clone();
        let make_app = move || {
            let s = app_state.clone();
            let mut app = App::new()
                .app_data(web::Data::new(deadlines))
                .app_data(web::Data::new(clients.clone()))
                .wrap(from_fn(http::limits::deadlines))
                .wrap(from_fn(http::client::client))
                .wrap(from_fn(http::track));
            for r in &routes {
                let r = r.clone();
                app = app.configure(move |c| r(c));
            }
            app.configure(move |c| http::configure(c, s, max_body))
        };
        let server = if srv.proxy_protocol {
            let settings = http::client::ProxiedListener {
                admission,
                trusted,
                metrics: parts.metrics.clone(),
                workers: workers_n,
                max_per_worker: per_worker,
                client_request_timeout: Duration::from_millis(srv.header_timeout_ms),
                client_disconnect_timeout: Duration::from_secs(1),
                keep_alive: Duration::from_millis(srv.keep_alive_ms),
                shutdown_grace_seconds: grace,
            };
            http::client::serve_proxied(listener, settings, make_app)
                .map_err(|e| Error::Startup(e.to_string()))?
        } else {
            let on_connect_metrics = parts.metrics.clone();
            HttpServer::new(make_app)
                .workers(workers_n)
                .max_connections(per_worker)
                .client_request_timeout(Duration::from_millis(srv.header_timeout_ms))
                .client_disconnect_timeout(Duration::from_secs(1))
                .keep_alive(Duration::from_millis(srv.keep_alive_ms))
                .on_connect(move |conn, ext| {
                    http::limits::on_connect(&admission, &trusted, &on_connect_metrics, conn, ext);
                })
                // Stream events and small answers go out as soon as they are written
                // (`TCP_NODELAY`), never held back for the peer's delayed ACK.
                .tcp_nodelay(true)
                .disable_signals()
                .shutdown_timeout(grace)
                .listen(listener)
                .map_err(|e| Error::Startup(e.to_string()))?
                .run()
        };
        let metrics_state = state;
        let console = crate::transports::api::console::Console::new(&config, pipeline.clone())?;
        let metrics_server = HttpServer::new(move || {
            let (s, console) = (metrics_state.clone(), console.clone());
            App::new().configure(move |c| {
                http::configure_metrics(c, s);
                if let Some(console) = console {
                    crate::transports::api::console::configure(c, console);
                }
            })
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .listen(metrics_listener)
        .map_err(|e| Error::Startup(e.to_string()))?
        .run();
        let (server_handle, metrics_handle) = (server.handle(), metrics_server.handle());
        let server_tasks = vec![tokio::spawn(server), tokio::spawn(metrics_server)];
        let smtp_addr = listeners
            .iter()
            .find(|(name, _)| *name == "smtp")
            .map(|(_, a)| *a);
        let domain = site.domain();
        tracing::info!(%http_addr, %metrics_addr, %domain, backend = ?db.backend(), max_connections, open_file_limit = ?open_files, "switchboard is up");
        crate::ops::log_startup(&config, smtp_addr);
        Ok(Self {
            http_addr,
            metrics_addr,
            smtp_addr,
            server: server_handle,
            metrics_server: metrics_handle,
            server_tasks,
            shutdown_tx,
            workers,
            queue,
            pipeline,
            config,
        })
    }

    /// The bound public HTTP address.
    #[must_use]
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The bound SMTP address, when email is enabled.
    #[must_use]
    pub fn smtp_addr(&self) -> Option<SocketAddr> {
        self.smtp_addr
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

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully.
    ///
    /// # Errors
    /// When shutdown could not release leased jobs.
    pub async fn run_until_stopped(self) -> Result<()> {
        wait_for_signal().await;
        tracing::info!("shutting down");
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

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
