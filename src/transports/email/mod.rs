//! Email: agents with mailboxes.
//!
//! Inbound, an SMTP listener takes mail for `{agent}@{mail domain}`: the command grammar is a
//! state machine without I/O ([`session`]), driven by one loop per connection ([`connection`]),
//! both speaking the types of [`smtp`]. After the final dot the message is checked and parsed
//! ([`parse`]), authenticated with DKIM, SPF, DMARC and ARC ([`auth`]), mapped to a
//! `NormalizedMessage` for every agent named in To or Cc and ingested ([`inbound`]); only then
//! does the client get 250. The message keeps the mail's summary as `raw` ([`wire`]) and what
//! a reply needs as its reply context ([`reply_context`]). Mail to the role addresses
//! (`postmaster@`, `abuse@`, `dmarc@`) is stored and routed by a job to `email.postmaster`
//! ([`roles`]); reports of abuse are mailed to `moderation.reports_to` ([`reports`]).
//! Outbound, [`EmailTransport`] renders the agent's response as a threaded reply from the
//! message's reply context, signs it with DKIM and sends it through the configured relay
//! ([`outbound`]), or straight to the recipient's MX hosts (`direct`). A bounce of it is read
//! into the delivery's record ([`wire::DeliveryReport`]); mail a person did not ask an agent for
//! carries a one-click unsubscribe ([`unsubscribe`]).

pub mod auth;
pub mod connection;
mod direct;
#[doc(hidden)]
pub mod fuzzing;
pub mod inbound;
mod listener;
pub mod mta_sts;
pub mod outbound;
pub mod parse;
pub mod reply_context;
pub mod reports;
pub mod roles;
pub mod session;
pub mod smtp;
pub mod store;
pub mod unsubscribe;
pub mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use tokio::sync::watch;

use self::reply_context::ReplyContext;
use super::{Parts, Started, TransportModule};
use crate::blobs::BlobStore;
use crate::clock::SharedClock;
use crate::config::{Config, EmailConfig, Postmaster, RelayTls};
use crate::error::{Error, OutboundError, Result};
use crate::keys::Keys;
use crate::message::{BytesRef, Part};
use crate::pipeline::{Delivery, Pipeline, Transport};
use crate::queue::JobHandler;
use crate::store::Db;

/// The transport name email is ingested under.
pub const NAME: &str = "email";

/// The key name of the DKIM key for `selector` in the key store.
#[must_use]
pub fn dkim_key_name(selector: &str) -> String {
    format!("dkim:{selector}")
}

/// The DNS record publishing the DKIM key: `(name, TXT value)`.
///
/// # Errors
/// Key store errors (the key is generated on first use).
pub async fn dkim_record(keys: &Keys, selector: &str, domain: &str) -> Result<(String, String)> {
    let key = keys.rsa(&dkim_key_name(selector)).await?;
    Ok((
        format!("{selector}._domainkey.{domain}"),
        outbound::dkim_txt_record(key.public_key_spki_der()),
    ))
}

/// The mail domain and the SMTP host name of `config`.
///
/// # Errors
/// [`Error::Config`] without a usable domain.
pub fn names(config: &Config) -> Result<(String, String)> {
    let domain = config
        .mail_domain()
        .ok_or_else(|| Error::Config("email.domain: no mail domain".into()))?;
    let hostname = config
        .email
        .hostname
        .clone()
        .unwrap_or_else(|| domain.clone());
    Ok((domain, hostname))
}

/// The domains this server takes mail for: the mail domain, and the host agents' handles are
/// on (`@name@host`) when that is another domain name. Role addresses are taken on all of them;
/// agents' mailboxes are in the mail domain.
///
/// # Errors
/// [`Error::Config`] without a usable mail domain.
pub fn served_domains(config: &Config) -> Result<Vec<String>> {
    let (mail_domain, _) = names(config)?;
    let mut served = vec![mail_domain];
    if let Ok(url) = config.public_url()
        && let Some(url::Host::Domain(host)) = url.host()
        && !served.iter().any(|d| d.eq_ignore_ascii_case(host))
    {
        served.push(host.to_lowercase());
    }
    Ok(served)
}

/// Where role mail goes, checked against the agents and the served domains.
///
/// # Errors
/// [`Error::Config`]: an agent that does not exist, or a forward to one of our own domains
/// (which would come straight back).
fn postmaster(
    config: &Config,
    agents: &crate::agents::AgentRegistry,
) -> Result<Option<Postmaster>> {
    let p = config.email.postmaster();
    match &p {
        Some(Postmaster::Agent(name)) if agents.get(name).is_none() => Err(Error::Config(format!(
            "email.postmaster: no agent named {name:?}"
        ))),
        Some(Postmaster::Forward(to)) => {
            let domain = to.rsplit_once('@').map_or("", |(_, d)| d);
            if served_domains(config)?
                .iter()
                .any(|d| d.eq_ignore_ascii_case(domain))
            {
                return Err(Error::Config(format!(
                    "email.postmaster {to:?}: an address this server receives; name the agent instead"
                )));
            }
            Ok(p)
        }
        _ => Ok(p),
    }
}

/// Delivers agents' responses to email as DKIM-signed replies.
pub struct EmailTransport {
    db: Db,
    blobs: BlobStore,
    keys: Keys,
    clock: SharedClock,
    mail_domain: String,
    /// The domain of agents' `@name@domain` handles.
    domain: String,
    selector: String,
    display_names: HashMap<String, String>,
    /// Agents that reply to unauthenticated senders too (lowercase names).
    reply_unauthenticated: std::collections::HashSet<String>,
    relay: Option<AsyncSmtpTransport<Tokio1Executor>>,
    /// The public base URL, which one-click unsubscribe links are under.
    public_base: String,
    /// `host:port` of the relay, when one is set (the remote-hosts page's name for it).
    relay_name: Option<String>,
    direct: direct::Direct,
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for EmailTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailTransport")
            .field("mail_domain", &self.mail_domain)
            .field("selector", &self.selector)
            .field("relay", &self.relay.is_some())
            .finish_non_exhaustive()
    }
}

fn relay(cfg: &EmailConfig, hostname: &str) -> Result<Option<AsyncSmtpTransport<Tokio1Executor>>> {
    let Some(host) = &cfg.relay_host else {
        return Ok(None);
    };
    let tls = |host: &str| {
        TlsParameters::new(host.to_owned())
            .map_err(|e| Error::Startup(format!("email relay TLS: {e}")))
    };
    let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.as_str())
        .port(cfg.relay_port)
        .hello_name(ClientId::Domain(hostname.to_owned()))
        .timeout(Some(Duration::from_secs(cfg.relay_timeout_seconds)));
    b = match cfg.relay_tls {
        RelayTls::None => b.tls(Tls::None),
        RelayTls::Starttls => b.tls(Tls::Required(tls(host)?)),
        RelayTls::Tls => b.tls(Tls::Wrapper(tls(host)?)),
    };
    if let (Some(user), Some(pass)) = (&cfg.relay_username, &cfg.relay_password) {
        b = b.credentials(Credentials::new(user.clone(), pass.expose().to_owned()));
    }
    Ok(Some(b.build()))
}

impl EmailTransport {
    /// From configuration.
    ///
    /// # Errors
    /// An unusable relay or mail domain.
    pub fn new(
        config: &Config,
        db: Db,
        blobs: BlobStore,
        keys: Keys,
        clock: SharedClock,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Self> {
        let (mail_domain, hostname) = names(config)?;
        let display_names = config
            .agents
            .iter()
            .filter_map(|a| Some((a.name.to_lowercase(), a.display_name.clone()?)))
            .collect();
        let reply_unauthenticated = config
            .agents
            .iter()
            .filter(|a| a.email.as_ref().is_some_and(|e| e.reply_to_unauthenticated))
            .map(|a| a.name.to_lowercase())
            .collect();
        let direct = direct::direct(config, &db, hostname.clone(), metrics.clone())?;
        Ok(Self {
            db,
            blobs,
            keys,
            clock,
            mail_domain,
            domain: config.domain().unwrap_or_default(),
            selector: config.email.dkim_selector.clone(),
            display_names,
            reply_unauthenticated,
            relay: relay(&config.email, &hostname)?,
            public_base: crate::site::Site::from_config(config)?
                .base_url()
                .to_owned(),
            relay_name: config
                .email
                .relay_host
                .as_ref()
                .map(|h| format!("{h}:{}", config.email.relay_port)),
            metrics,
            direct,
        })
    }

    /// Sends `bytes` through the relay, else to the MX hosts of the (one) recipient's domain.
    async fn send(
        &self,
        envelope: &lettre::address::Envelope,
        bytes: &[u8],
    ) -> std::result::Result<(), OutboundError> {
        // lettre ends the data with `\r\n.\r\n` whatever it ends with: the message's own last
        // line break is that one, or the receiver would get an empty line more.
        let bytes = bytes.strip_suffix(b"\r\n").unwrap_or(bytes);
        let domain = envelope.to().first().map_or("", |a| a.domain());
        let result = match &self.relay {
            Some(relay) => relay
                .send_raw(envelope, bytes)
                .await
                .map(|_| ())
                .map_err(|e| outbound::classify(&e)),
            None => {
                self.direct
                    .send(domain, envelope, bytes, self.clock.now_ms())
                    .await
            }
        };
        // Each relay, or each recipient domain without one, on the remote-hosts page.
        let failure = result.as_ref().err().map(ToString::to_string);
        self.metrics.hosts().delivered(
            crate::hosts::Channel::Mail,
            self.relay_name.as_deref().unwrap_or(domain),
            failure.as_deref().map_or(Ok(()), Err),
            self.clock.now_ms(),
        );
        result
    }

    /// Forwards a message sent to a role address to `to`, intact: a `Received` trace line and
    /// `X-Original-To` are put on top of it, then our DKIM signature (simple body
    /// canonicalisation, so the body is signed byte for byte as it came); the envelope sender is
    /// a bounce address of ours, so a bounce of the forward comes back here, not to the original
    /// sender (whose own DKIM signature still verifies, the message being unchanged).
    pub(super) async fn forward(
        &self,
        job: &roles::RoleJob,
        raw: &[u8],
        to: &str,
    ) -> std::result::Result<(), OutboundError> {
        let trace = outbound::forward_trace(job, &self.direct.hostname);
        let bytes = [trace.as_bytes(), raw].concat();
        let signed = self.sign(&bytes, outbound::BodySigning::Simple).await?;
        let bounce = self.bounce_address(&format!(
            "{}{}",
            roles::BOUNCE_TAG,
            job.digest.get(..32).unwrap_or(&job.digest)
        ));
        let envelope = lettre::address::Envelope::new(
            bounce.parse().ok(),
            vec![
                to.parse()
                    .map_err(|_| OutboundError::permanent("unusable email.postmaster address"))?,
            ],
        )
        .map_err(|e| OutboundError::permanent(e.to_string()))?;
        self.send(&envelope, &signed).await?;
        tracing::info!(rcpts = ?job.rcpts, to, digest = %job.digest, "role mail forwarded");
        Ok(())
    }

    /// Our bounce address for `token` (`bounces+{token}@{mail domain}`): a bounce sent to it
    /// comes back here, where the token says what bounced.
    /// `raw` signed with our DKIM key (made on first use): a key store error is temporary, an
    /// unusable key permanent.
    async fn sign(
        &self,
        raw: &[u8],
        body: outbound::BodySigning,
    ) -> std::result::Result<Vec<u8>, OutboundError> {
        let key = self.keys.rsa(&dkim_key_name(&self.selector)).await?;
        outbound::dkim_sign(
            raw,
            key.private_key_pkcs8_der(),
            &self.mail_domain,
            &self.selector,
            body,
        )
        .map_err(|e| OutboundError::permanent(e.to_string()))
    }

    fn bounce_address(&self, token: &str) -> String {
        format!("{}{token}@{}", inbound::BOUNCE_PREFIX, self.mail_domain)
    }

    async fn files(&self, parts: &[Part]) -> Vec<outbound::OutFile> {
        let mut out = Vec::new();
        for p in parts {
            let Part::File(f) = p else { continue };
            let data = match &f.bytes_ref {
                BytesRef::ContentAddressed(c) => match self.blobs.get(&c.digest).await {
                    Ok(Some((_, data))) => data,
                    _ => continue,
                },
                BytesRef::Inline(i) => {
                    match base64::engine::general_purpose::STANDARD.decode(&i.data_base64) {
                        Ok(d) => d,
                        Err(_) => continue,
                    }
                }
                _ => continue,
            };
            out.push(outbound::OutFile {
                name: f.name.clone().unwrap_or_else(|| "attachment".into()),
                mime: f.mime.clone(),
                data,
            });
        }
        out
    }
}

/// Where a reply to a mail with reply context `ctx` goes: its Reply-To, else its From, else its
/// envelope sender — when the From address was authenticated (aligned DKIM or a DMARC pass).
/// Otherwise nowhere, unless the agent replies to unauthenticated senders too
/// (`reply_unauthenticated`), and then to the From address only: a Reply-To is the sender's word
/// and counts only when From does.
fn reply_target(
    ctx: &ReplyContext,
    reply_unauthenticated: bool,
) -> std::result::Result<parse::Mailbox, &'static str> {
    if !ctx.from_authenticated && !reply_unauthenticated {
        return Err(
            "the sender's address is not authenticated (no aligned DKIM signature, no DMARC \
             pass): no reply is mailed to it",
        );
    }
    let reply_to = if ctx.from_authenticated {
        ctx.reply_to.clone()
    } else {
        None
    };
    reply_to
        .or_else(|| ctx.from.clone())
        .or_else(|| {
            (!ctx.mail_from.is_empty()).then(|| parse::Mailbox {
                name: None,
                address: ctx.mail_from.clone(),
            })
        })
        .ok_or("the message has no reply address")
}

impl EmailTransport {
    /// The mail addresses of the local agents a reply puts in `Cc`: the agent a relayed turn
    /// came from (`relayed_by`), then those the response mentions (`@name@domain` handles on
    /// our domain, the ones the pipeline wakes), each once, never the sender itself
    /// (`from`). The pipeline wakes them itself; the `Cc` tells the person who else is in the
    /// conversation, and their reply-all reaches them.
    fn local_cc(&self, relayed_by: Option<&str>, d: &Delivery, from: &str) -> Vec<String> {
        let mut cc: Vec<String> = Vec::new();
        for m in relayed_by
            .into_iter()
            .chain(d.response.mentions.iter().flatten().map(String::as_str))
        {
            let Some((name, host)) = m.strip_prefix('@').and_then(|h| h.split_once('@')) else {
                continue;
            };
            if name.is_empty() || !host.eq_ignore_ascii_case(&self.domain) {
                continue;
            }
            let address = format!("{}@{}", name.to_lowercase(), self.mail_domain);
            if !address.eq_ignore_ascii_case(from) && !cc.contains(&address) {
                cc.push(address);
            }
        }
        cc
    }
}

#[async_trait::async_trait]
impl Transport for EmailTransport {
    fn name(&self) -> &str {
        NAME
    }

    /// Anyone may send mail; an answer is a new mail the sender may answer.
    fn exposure(&self) -> crate::pipeline::Exposure {
        crate::pipeline::Exposure {
            open: true,
            answers_in_request: false,
            per_host: false,
        }
    }

    async fn deliver(&self, d: &Delivery) -> std::result::Result<(), OutboundError> {
        if d.response.parts.is_empty() {
            return Ok(());
        }
        let ctx = ReplyContext::of(&d.original)?;
        if !ctx.roles.is_empty() {
            // Bounces, reports, complaints: an answer would be backscatter, or reflected at
            // whoever the sender claims to be.
            tracing::info!(response = %d.response.id, "mail to a role address is never answered");
            return Ok(());
        }
        let agent = d
            .response
            .agent
            .trim_start_matches('@')
            .split('@')
            .next()
            .unwrap_or("")
            .to_lowercase();
        let to = match reply_target(&ctx, self.reply_unauthenticated.contains(&agent)) {
            Ok(to) => to,
            Err(why) => return Err(OutboundError::permanent(why)),
        };
        if to
            .address
            .rsplit_once('@')
            .is_some_and(|(_, dom)| dom.eq_ignore_ascii_case(&self.mail_domain))
        {
            tracing::info!(to = %to.address, "not replying to one of our own addresses");
            return Ok(());
        }
        // The address the sender wrote to, unless the turn was relayed from another agent.
        let from = ctx
            .agent_address
            .clone()
            .filter(|_| crate::pipeline::relayed_from(&d.original).is_none())
            .unwrap_or_else(|| format!("{agent}@{}", self.mail_domain));
        let message_id = format!("{}@{}", d.response.id, self.mail_domain);
        let thread_key = ctx.thread_key.as_str();
        let now = self.clock.now_ms();
        let relay = crate::pipeline::relayed_from(&d.original);
        // Mail the person did not ask this agent for (another agent's mention brought it into
        // the thread) carries a one-click unsubscribe (RFC 8058), and goes nowhere once the
        // address has used it.
        let unsubscribe = match relay {
            Some(_) => {
                let address = to.address.to_lowercase();
                let (token, gone) =
                    store::unsubscribe_token(&self.db, &agent, &address, now).await?;
                if gone {
                    tracing::info!(response = %d.response.id, agent, "the recipient unsubscribed from this agent's mail: not sent");
                    return Err(OutboundError::permanent(
                        "the recipient unsubscribed from this agent's mail",
                    ));
                }
                Some(format!("{}{}/{token}", self.public_base, unsubscribe::PATH))
            }
            None => None,
        };
        let remembered: crate::Result<()> = async {
            let mut tx = self.db.begin().await?;
            store::remember(
                &mut tx,
                &message_id,
                &agent,
                thread_key,
                &d.response.id,
                "out",
                now,
            )
            .await?;
            tx.commit().await
        }
        .await;
        remembered?;
        let (text, html) = outbound::render_parts(&d.response.parts);
        let files = self.files(&d.response.parts).await;
        let cc = self.local_cc(relay.map(|(_, by)| by), d, &from);
        let mut parent_id = ctx.message_id.clone();
        let mut refs = ctx.references.clone();
        let irt = &ctx.in_reply_to;
        if let Some((response, _)) = relay {
            // A relayed turn's reply answers the mentioning agent's mail (its Message-ID is
            // minted from the response id), below the mail that started the thread.
            refs.extend(parent_id.take());
            parent_id = Some(format!("{response}@{}", self.mail_domain));
        }
        let parent_id = parent_id.as_deref();
        let millis = u64::try_from(now).unwrap_or(0);
        let input = outbound::ReplyInput {
            from: (&from, self.display_names.get(&agent).map(String::as_str)),
            to: (&to.address, to.name.as_deref()),
            cc: &cc,
            subject: ctx.subject.as_deref(),
            // Only the agent's own warning: mail has no warnings of its own to carry on.
            content_warning: d.response.content_warning.as_deref(),
            message_id: &message_id,
            parent_id,
            parent_references: &refs,
            parent_in_reply_to: irt,
            date: SystemTime::UNIX_EPOCH + Duration::from_millis(millis),
            text,
            html,
            files,
        };
        let mut unsigned =
            outbound::build_reply(&input).map_err(|e| OutboundError::permanent(e.to_string()))?;
        // The hop this answer is in its agent conversation: the turn's own, or the first.
        let chain = d.original.recipient_capabilities.agent_chain.unwrap_or(
            crate::message::AgentChain::first(crate::config::DEFAULT_MAX_HOPS),
        );
        let mut head = format!(
            "{}: {}\r\n",
            parse::CHAIN_HEADER,
            parse::chain_header(chain)
        );
        if let Some(url) = &unsubscribe {
            head.push_str(&format!(
                "List-Unsubscribe: <{url}>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
            ));
        }
        unsigned.splice(0..0, head.into_bytes());
        let signed = self.sign(&unsigned, outbound::BodySigning::Relaxed).await?;
        let bounce = self.bounce_address(&d.response.id);
        let envelope = lettre::address::Envelope::new(
            bounce.parse().ok(),
            vec![
                to.address
                    .parse()
                    .map_err(|_| OutboundError::permanent("unusable recipient address"))?,
            ],
        )
        .map_err(|e| OutboundError::permanent(e.to_string()))?;
        self.send(&envelope, &signed).await?;
        tracing::info!(response = %d.response.id, to = %to.address, "reply sent");
        Ok(())
    }
}

/// The email transport as the application assembles it: its outbound half (DKIM-signed
/// replies), the routing of role mail, and, once the pipeline exists, the SMTP listener.
pub struct Email {
    outbound: Arc<EmailTransport>,
    config: Arc<Config>,
    roles: Arc<roles::Roles>,
}

impl std::fmt::Debug for Email {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Email")
            .field("bind", &self.config.email.bind)
            .finish_non_exhaustive()
    }
}

/// The email transport, as the application lists it.
pub const TRANSPORT: super::Descriptor = super::Descriptor {
    name: NAME,
    job_kinds: &[roles::JOB_KIND, crate::store::reports::JOB_KIND],
    listeners: &[listener::SMTP],
    address: Some(crate::ops::AddressKind {
        key: "email",
        label: "Email",
        rank: 2,
        of: address,
    }),
    build,
};

/// `agent`'s email address, when email is on.
fn address(_: &crate::config::Config, site: &crate::site::Site, agent: &str) -> Option<String> {
    site.mail_domain().map(|d| format!("{agent}@{d}"))
}

/// Builds the email transport, or nothing when `email.enabled` is off.
///
/// # Errors
/// No mail domain; an unusable relay; an `email.postmaster` that names no agent or one of our
/// own addresses.
pub fn build(parts: &Parts) -> Result<Option<Box<dyn TransportModule>>> {
    if !parts.config.email.enabled {
        return Ok(None);
    }
    let outbound = Arc::new(EmailTransport::new(
        &parts.config,
        parts.db.clone(),
        parts.blobs.clone(),
        parts.keys.clone(),
        parts.clock.clone(),
        parts.metrics.clone(),
    )?);
    let roles = Arc::new(roles::Roles {
        postmaster: postmaster(&parts.config, &parts.agents)?,
        outbound: Arc::clone(&outbound),
        queue: Arc::clone(&parts.queue),
        inbound: std::sync::OnceLock::new(),
    });
    Ok(Some(Box::new(Email {
        outbound,
        config: parts.config.clone(),
        roles,
    })))
}

#[async_trait::async_trait]
impl TransportModule for Email {
    fn outbound(&self) -> Arc<dyn Transport> {
        self.outbound.clone()
    }

    /// The jobs that route role mail and mail reports to `moderation.reports_to`.
    fn jobs(&self) -> Vec<(&'static str, Arc<dyn JobHandler>)> {
        vec![
            (
                roles::JOB_KIND,
                Arc::new(roles::Handler(Arc::clone(&self.roles))),
            ),
            (
                crate::store::reports::JOB_KIND,
                Arc::new(reports::Handler {
                    outbound: Arc::clone(&self.outbound),
                    queue: Arc::clone(&self.roles.queue),
                }),
            ),
        ]
    }

    /// Binds the SMTP listener; mounts the one-click unsubscribe URLs.
    async fn start(&self, pipeline: &Pipeline, shutdown: watch::Receiver<bool>) -> Result<Started> {
        let l = listener::listen(&self.config, pipeline.clone(), &self.roles, shutdown).await?;
        let pipeline = pipeline.front();
        Ok(Started {
            tasks: vec![l.task],
            listeners: vec![(listener::SMTP, l.addr)],
            routes: Some(Arc::new(move |cfg: &mut actix_web::web::ServiceConfig| {
                unsubscribe::routes(cfg, pipeline.clone());
            })),
            ..Started::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::message::NormalizedMessage;

    fn original(auth_method: &str) -> NormalizedMessage {
        serde_json::from_value(json!({
            "id": "m1",
            "thread_id": "t1",
            "sender": {"address": "bob@b.example", "auth_method": auth_method, "verified": false},
            "recipient": "@echo@agents.test",
            "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
            "recipient_capabilities": {"mention_relay": {"kind": "recipient-field", "fields": ["to"]},
                "formats": ["text/plain"], "attachments": true, "streaming": false},
            "received_via": "email",
            "received_at": "2026-11-25T00:00:00Z",
        }))
        .expect("a message")
    }

    fn raw(authenticated: Option<bool>) -> Value {
        let mut raw = json!({
            "from": {"name": "Bob", "address": "bob@b.example"},
            "reply_to": {"name": null, "address": "elsewhere@c.example"},
            "envelope": {"mail_from": "bounce@b.example"},
        });
        if let Some(a) = authenticated {
            raw["from_authenticated"] = json!(a);
        }
        raw
    }

    /// The reply target of a message stored before reply contexts existed, with `raw` and
    /// the sender's `auth_method`: its context is read from `raw`.
    fn reply_target(
        raw: &Value,
        original: &NormalizedMessage,
        reply_unauthenticated: bool,
    ) -> std::result::Result<parse::Mailbox, &'static str> {
        let msg = NormalizedMessage {
            raw: raw.clone(),
            ..original.clone()
        };
        let ctx = ReplyContext::of(&msg).expect("a context");
        super::reply_target(&ctx, reply_unauthenticated)
    }

    #[test]
    fn an_authenticated_from_gets_the_reply_at_its_reply_to() {
        let to = reply_target(&raw(Some(true)), &original("email-dkim"), false).expect("a target");
        assert_eq!(to.address, "elsewhere@c.example");
    }

    #[test]
    fn an_unauthenticated_from_gets_no_reply_unless_the_agent_opts_in_and_then_not_at_reply_to() {
        let refused = reply_target(&raw(Some(false)), &original("none"), false);
        assert!(refused.is_err_and(|why| why.contains("not authenticated")));
        let to = reply_target(&raw(Some(false)), &original("none"), true).expect("a target");
        assert_eq!(
            to.address, "bob@b.example",
            "From, never the claimed Reply-To"
        );
    }

    #[test]
    fn a_message_stored_before_the_flag_counts_a_dmarc_pass_as_authenticated() {
        let to = reply_target(&raw(None), &original("email-dmarc"), false).expect("a target");
        assert_eq!(to.address, "elsewhere@c.example");
        assert!(reply_target(&raw(None), &original("email-dkim"), false).is_err());
    }

    #[test]
    fn the_stored_context_is_read_and_raw_only_for_a_message_stored_before_it() {
        let mut raw = raw(Some(true));
        raw["thread_key"] = json!("echo:<root@b.example>");
        raw["agent_address"] = json!("echo+x@agents.test");
        raw["message_id"] = json!("m1@b.example");
        raw["references"] = json!(["root@b.example"]);
        raw["roles"] = json!(["abuse@agents.test"]);
        let old = NormalizedMessage {
            raw: raw.clone(),
            ..original("email-dkim")
        };
        // Stored before: the fields of `raw`.
        let legacy = ReplyContext::of(&old).expect("from raw");
        assert_eq!(legacy.thread_key, "echo:<root@b.example>");
        assert_eq!(legacy.agent_address.as_deref(), Some("echo+x@agents.test"));
        assert_eq!(legacy.roles, ["abuse@agents.test"]);
        assert_eq!(legacy.mail_from, "bounce@b.example");
        assert_eq!(legacy.references, ["root@b.example"]);
        assert!(legacy.from_authenticated);
        // Without a thread key, the message's thread; without `raw`, no address to answer.
        let bare = ReplyContext::of(&original("email-dmarc")).expect("from nothing");
        assert_eq!(bare.thread_key, "t1");
        assert!(super::reply_target(&bare, true).is_err());
        // A stored context wins over `raw`.
        let mut new = old.clone();
        let ctx = ReplyContext {
            roles: Vec::new(),
            thread_key: "echo:<other@b.example>".into(),
            ..legacy
        };
        new.set_reply_context(&ctx).expect("set");
        assert_eq!(ReplyContext::of(&new).expect("stored"), ctx);
    }
}
