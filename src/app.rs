//! Builds the whole server from a [`Config`]: database, queue workers, pipeline, transports and
//! the HTTP listeners. Binding happens first, so port 0 works and the bound addresses are known.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpServer, middleware::from_fn};
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
use crate::pipeline::{Core, Pipeline};
use crate::queue::{Queue, kinds};
use crate::store::Db;
use crate::transports::a2a::{self, A2aTransport, tasks as a2a_tasks, tasks::TaskEngine};
use crate::transports::activitypub::{self, ActivityPub};
use crate::transports::api::{ApiState, ApiTransport};
use crate::transports::email::{self, EmailTransport};
use crate::transports::{Transport, TransportRegistry};

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
}

impl Default for Options {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            transports: Vec::new(),
            agents: Vec::new(),
            workers: true,
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
        let metrics_listener = bind(config.server.metrics_bind)?;
        let metrics_addr = metrics_listener
            .local_addr()
            .map_err(|e| Error::Startup(e.to_string()))?;
        let domain = config
            .domain()
            .ok_or_else(|| Error::Config("server.public_url: no host".into()))?;

        let clock = opts.clock.clone();
        let db = Db::open(&config.database).await?;
        let http_client = HttpClient::new(config.net.clone(), clock.clone())
            .map_err(|e| Error::Startup(format!("HTTP client: {e}")))?;
        let mut agents =
            AgentRegistry::from_config(&config.agents, &domain, &http_client, &clock, &db);
        for (name, backend) in opts.agents {
            agents.insert(&name, None, None, backend);
        }
        let keys = Keys::new(db.clone(), clock.clone());
        let mut transports = TransportRegistry::default();
        transports.register(Arc::new(ApiTransport::new(
            &config.api,
            http_client.clone(),
            clock.clone(),
        )));
        let metrics = Arc::new(Metrics::new());
        let queue = Queue::new(
            db.clone(),
            clock.clone(),
            config.queue.clone(),
            metrics.clone(),
        );
        let a2a_engine = TaskEngine::new(db.clone(), clock.clone(), queue.clone());
        if config.a2a.enabled {
            transports.register(Arc::new(A2aTransport::new(a2a_engine.clone())));
        }
        for t in opts.transports {
            transports.register(t);
        }
        let public_url = config.public_url().map_err(Error::Config)?;
        let blobs = BlobStore::new(
            db.clone(),
            clock.clone(),
            &config.media,
            public_url.as_str(),
        );
        let agents = Arc::new(agents);
        let activitypub = ActivityPub::new(
            &config,
            activitypub::Parts {
                db: db.clone(),
                clock: clock.clone(),
                http: http_client.clone(),
                keys: keys.clone(),
                agents: agents.clone(),
                blobs: blobs.clone(),
                queue: queue.clone(),
            },
        )?;
        if activitypub.enabled() {
            transports.register(Arc::new(activitypub.clone()));
        }
        if config.email.enabled {
            transports.register(Arc::new(EmailTransport::new(
                &config,
                db.clone(),
                blobs.clone(),
                keys.clone(),
                clock.clone(),
            )?));
        }
        let pipeline = Pipeline::new(Core {
            db: db.clone(),
            clock: clock.clone(),
            queue: queue.clone(),
            agents,
            transports,
            metrics,
            history: config.history,
            blobs,
            keys,
            recent: crate::store::messages::recent(),
        });

        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut workers = Vec::new();
        if opts.workers {
            workers.extend(queue.spawn_workers(
                kinds::DISPATCH,
                pipeline.dispatch_handler(),
                shutdown_rx.clone(),
            ));
            workers.extend(queue.spawn_workers(
                kinds::DELIVER,
                pipeline.deliver_handler(),
                shutdown_rx.clone(),
            ));
            workers.extend(queue.spawn_workers(
                kinds::TURN_END,
                pipeline.turn_end_handler(),
                shutdown_rx.clone(),
            ));
            if activitypub.enabled() {
                workers.extend(queue.spawn_workers(
                    activitypub::JOB_KIND,
                    activitypub.deliver_handler(),
                    shutdown_rx.clone(),
                ));
            }
        }
        if opts.workers && config.a2a.enabled {
            let push = a2a::push::PushHandler::new(
                db.clone(),
                http_client.clone(),
                pipeline.keys().clone(),
                clock.clone(),
                queue.clone(),
                public_url.as_str().trim_end_matches('/').to_owned(),
            );
            workers.extend(queue.spawn_workers(
                a2a::push::KIND,
                Arc::new(push),
                shutdown_rx.clone(),
            ));
        }
        workers.push(queue.spawn_housekeeping(shutdown_rx.clone()));
        if config.a2a.enabled {
            a2a_tasks::listen(&a2a_engine, &queue);
        }
        let smtp = if config.email.enabled {
            let l = email::listen(&config, pipeline.clone(), shutdown_rx.clone()).await?;
            workers.push(l.task);
            Some(l.addr)
        } else {
            None
        };
        if let Some(listener) = queue.spawn_listener(shutdown_rx) {
            workers.push(listener);
        }
        let a2a_state = if config.a2a.enabled {
            Some(a2a::build_state(
                pipeline.clone(),
                a2a_engine,
                &config,
                http_client.clone(),
            )?)
        } else {
            None
        };

        let state = AppState {
            pipeline: pipeline.clone(),
        };
        let api_state = ApiState {
            pipeline: pipeline.clone(),
            token: config.api.token.clone(),
        };
        let max_body = config.server.max_body_bytes;
        let grace = config.server.shutdown_grace_seconds;
        let app_state = state.clone();
        let ap_pipeline = pipeline.clone();
        let server = HttpServer::new(move || {
            let (s, a) = (app_state.clone(), api_state.clone());
            let (ap, p) = (activitypub.clone(), ap_pipeline.clone());
            let a2a_state = a2a_state.clone();
            // Routes are matched in this order: the busiest endpoints (A2A JSON-RPC, the
            // inboxes) come before the documents.
            App::new()
                .wrap(from_fn(http::track))
                .configure(move |c| {
                    if let Some(st) = a2a_state {
                        a2a::server::configure(c, st);
                    }
                })
                .configure(move |c| ap.configure(c, p))
                .configure(move |c| http::configure(c, s, a, max_body))
        })
        .workers(config.server.workers.max(1))
        // Stream events and small answers go out at once, not after the peer's delayed ACK
        // (up to 40 ms per SSE event with Nagle's algorithm on).
        .tcp_nodelay(true)
        .disable_signals()
        .shutdown_timeout(grace)
        .listen(listener)
        .map_err(|e| Error::Startup(e.to_string()))?
        .run();
        let metrics_state = state;
        let metrics_server = HttpServer::new(move || {
            let s = metrics_state.clone();
            App::new().configure(move |c| http::configure_metrics(c, s))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .listen(metrics_listener)
        .map_err(|e| Error::Startup(e.to_string()))?
        .run();
        let (server_handle, metrics_handle) = (server.handle(), metrics_server.handle());
        let server_tasks = vec![tokio::spawn(server), tokio::spawn(metrics_server)];
        tracing::info!(%http_addr, %metrics_addr, %domain, backend = ?db.backend(), "switchboard is up");
        Ok(Self {
            http_addr,
            metrics_addr,
            smtp_addr: smtp,
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

    /// Stops accepting requests, lets in-flight requests and job batches finish within the grace
    /// period, and returns any job still leased to this instance to the queue.
    ///
    /// # Errors
    /// When leased jobs could not be released (they return when their lease expires).
    pub async fn shutdown(self) -> Result<()> {
        self.server.stop(true).await;
        self.metrics_server.stop(false).await;
        for t in self.server_tasks {
            let _ = t.await;
        }
        let _ = self.shutdown_tx.send(true);
        let grace = Duration::from_secs(self.config.server.shutdown_grace_seconds);
        let mut workers = self.workers;
        let all = futures_util::future::join_all(workers.iter_mut());
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("job batches did not finish within the grace period; releasing them");
            for w in &workers {
                w.abort();
            }
        }
        let released = self.queue.release_owned().await?;
        if released > 0 {
            tracing::info!(released, "returned leased jobs to the queue");
        }
        self.pipeline.db().close().await;
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
