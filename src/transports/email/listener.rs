//! The SMTP listener: binds the port, admits connections (per peer, or per client named by
//! the PROXY protocol) and serves each through [`super::connection`] into the receiving side.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{auth, connection, inbound, names, roles, served_domains, session, smtp};
use crate::config::{Config, EmailConfig, UnauthenticatedMail};
use crate::error::{Error, Result};
use crate::pipeline::Pipeline;

/// The listener's name (`Application::listener`, its connection metrics).
pub(super) const SMTP: &str = "smtp";

/// A running SMTP listener.
#[derive(Debug)]
pub struct Listener {
    /// The bound address.
    pub addr: SocketAddr,
    /// The accept loop.
    pub task: JoinHandle<()>,
}

fn tls_acceptor(cfg: &EmailConfig) -> Result<Option<tokio_rustls::TlsAcceptor>> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::PrivateKeyDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let (Some(cert), Some(key)) = (&cfg.tls_cert_file, &cfg.tls_key_file) else {
        return Ok(None);
    };
    let certs = crate::net::pem::certificates(cert)
        .map_err(|e| Error::Startup(format!("email.tls_cert_file {cert}: {e}")))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| Error::Startup(format!("email.tls_key_file {key}: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Startup(format!("email TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| Error::Startup(format!("email TLS: {e}")))?;
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(server))))
}

/// Answers a connection over the session caps with `421` and closes it.
fn refuse_session(
    metrics: &crate::metrics::Metrics,
    stream: tokio::net::TcpStream,
    refusal: crate::admission::Refusal,
) {
    metrics.connection_refused(SMTP, refusal.label());
    let line: &'static [u8] = match refusal {
        crate::admission::Refusal::Full => b"421 4.7.0 Too many connections, try again later\r\n",
        crate::admission::Refusal::PeerFull => {
            b"421 4.7.0 Too many connections from your address, try again later\r\n"
        }
    };
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut stream = stream;
        let _ = stream.write_all(line).await;
    });
}

/// Binds the SMTP listener and starts accepting sessions until `shutdown`.
///
/// # Errors
/// Unusable TLS files or DNS records; the port in use.
pub(super) async fn listen(
    config: &Config,
    pipeline: Pipeline,
    roles: &roles::Roles,
    mut shutdown: watch::Receiver<bool>,
) -> Result<Listener> {
    let cfg = &config.email;
    let (mail_domain, hostname) = names(config)?;
    let served = served_domains(config)?;
    let txt = auth::StaticTxt::new(&cfg.dns_records, cfg.dns == crate::config::DnsMode::Offline)?;
    let verifier = auth::Verifier::new(cfg.dns, txt, &hostname)?;
    let policies = config
        .agents
        .iter()
        .filter_map(|a| {
            let p = a.email.as_ref()?.unauthenticated?;
            Some((a.name.to_lowercase(), p))
        })
        .collect::<HashMap<String, UnauthenticatedMail>>();
    let data_budget = smtp::DataBudget::new(
        cfg.max_data_memory_bytes,
        pipeline.metrics().smtp_data_bytes(),
    );
    let server = Arc::new(connection::Server::new(
        hostname.clone(),
        session::Limits::from(cfg),
        data_budget,
        tls_acceptor(cfg)?,
        shutdown.clone(),
    ));
    let inbound = Arc::new(inbound::Inbound {
        pipeline,
        verifier,
        max_mime_depth: cfg.max_mime_depth,
        mail_domain,
        served,
        hostname,
        policies,
        default_policy: cfg.unauthenticated,
        max_blob_bytes: config.media.max_bytes,
        queue: Arc::clone(&roles.queue),
    });
    // Role mail for an agent is handed over through the receiving side.
    let _ = roles
        .inbound
        .set(Arc::clone(&inbound) as Arc<dyn roles::ToAgent>);
    let listener = TcpListener::bind(cfg.bind)
        .await
        .map_err(|e| Error::Startup(format!("cannot listen on {}: {e}", cfg.bind)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::Startup(e.to_string()))?;
    let metrics = Arc::clone(inbound.pipeline.metrics());
    let sessions = crate::admission::Admission::new(
        cfg.max_sessions,
        cfg.max_sessions_per_peer,
        metrics.connections(SMTP),
    );
    let proxy_protocol = cfg.proxy_protocol;
    let trusted = Arc::new(config.server.trusted()?);
    if proxy_protocol && trusted.is_empty() {
        tracing::warn!(
            "email.proxy_protocol is on and server.trusted_proxies is empty: any client that \
             reaches the SMTP listener directly can name its own address"
        );
    }
    let task = tokio::spawn(async move {
        // Running sessions: at shutdown the loop waits for them (the application bounds the
        // wait by its grace period; dropping the set aborts what is left).
        let mut running = tokio::task::JoinSet::new();
        let mut backoff = crate::admission::AcceptBackoff::default();
        loop {
            while running.try_join_next().is_some() {}
            let (stream, peer) = tokio::select! {
                _ = shutdown.changed() => break,
                accepted = listener.accept() => match accepted {
                    Ok(x) => {
                        backoff.succeeded(SMTP);
                        x
                    }
                    Err(e) => {
                        let pause = backoff.failed(SMTP, &e);
                        tokio::select! {
                            _ = shutdown.changed() => break,
                            () = tokio::time::sleep(pause) => continue,
                        }
                    }
                },
            };
            let _ = stream.set_nodelay(true);
            // With the PROXY protocol the client is known only once its header is read: until
            // then the connection holds a place in all, then the client one of its own.
            let admitted = if proxy_protocol {
                sessions.admit_connection()
            } else {
                sessions.admit(peer.ip())
            };
            let permit = match admitted {
                Ok(slot) => slot,
                Err(refusal) => {
                    refuse_session(&metrics, stream, refusal);
                    continue;
                }
            };
            let server = Arc::clone(&server);
            let inbound = Arc::clone(&inbound);
            let (sessions, metrics, trusted) =
                (sessions.clone(), Arc::clone(&metrics), Arc::clone(&trusted));
            running.spawn(async move {
                let mut stream = stream;
                let mut client = peer;
                let mut client_permit = None;
                if proxy_protocol {
                    let read = crate::net::proxy_protocol::read_client(&mut stream, peer, &trusted);
                    client = match read.await {
                        Ok(client) => client,
                        Err(e) => {
                            metrics.connection_refused(SMTP, "proxy_protocol");
                            tracing::debug!(%peer, error = %e, "SMTP connection closed");
                            return;
                        }
                    };
                    match sessions.admit_client(client.ip()) {
                        Ok(slot) => client_permit = Some(slot),
                        Err(refusal) => {
                            refuse_session(&metrics, stream, refusal);
                            return;
                        }
                    }
                }
                connection::serve(stream, client, &server, &*inbound).await;
                drop((permit, client_permit));
            });
        }
        drop(listener);
        if !running.is_empty() {
            tracing::info!(
                sessions = running.len(),
                "SMTP listener closed; letting sessions finish their messages"
            );
        }
        while running.join_next().await.is_some() {}
    });
    tracing::info!(%addr, "SMTP listener is up");
    Ok(Listener { addr, task })
}
