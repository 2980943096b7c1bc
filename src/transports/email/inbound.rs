//! What happens after the final dot: checks, parsing, authentication, who is woken, the mapping
//! to `NormalizedMessage`, and ingest. The SMTP answer is 250 only once every woken agent's copy
//! (and the copy for the role addresses, [`super::roles`]) is committed, 451 when that fails (the
//! sender retries), and a 5xx for what will never be accepted.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::NAME;
use super::auth::{AuthOutcome, Envelope, Verifier};
use super::parse::{self, ParseError, ParsedMail};
use super::reply_context::ReplyContext;
use super::roles::{self, RoleJob};
use super::session::Receiver;
use super::smtp::{Rcpt, Reply, SessionEnvelope};
use super::store;
use super::wire::{self, BodyRef, Summary};
use crate::agents::Agent;
use crate::config::{Notify, UnauthenticatedMail};
use crate::error::OutboundError;
use crate::message::{
    Assurance, Audience, AuthMethod, BytesRef, ContentAddressedBytes, EventPart, EvidenceSource,
    Extra, FilePart, IdentityEvidence, MentionRelay, NormalizedMessage, Part, Proof, ReceivedVia,
    RecipientCapabilities, RecipientFieldRelay, Sender, TransportProof,
};
use crate::moderation::Who;
use crate::pipeline::Pipeline;
use crate::queue::Queue;

/// The receiving side of the transport, shared by every session.
pub struct Inbound {
    pub(super) pipeline: Pipeline,
    pub(super) verifier: Verifier,
    pub(super) max_mime_depth: usize,
    pub(super) mail_domain: String,
    /// Every domain mail is taken for ([`super::served_domains`]), the mail domain first.
    pub(super) served: Vec<String>,
    pub(super) hostname: String,
    pub(super) policies: HashMap<String, UnauthenticatedMail>,
    pub(super) default_policy: UnauthenticatedMail,
    pub(super) max_blob_bytes: usize,
    /// Where role mail's routing jobs go.
    pub(super) queue: Arc<Queue>,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("mail_domain", &self.mail_domain)
            .field("hostname", &self.hostname)
            .field("max_mime_depth", &self.max_mime_depth)
            .finish_non_exhaustive()
    }
}

/// The local part of a VERP bounce address: `bounces+{response id}`.
pub const BOUNCE_PREFIX: &str = "bounces+";

/// The text of `550 5.7.1` when a block refuses the sender (it says no more than that access
/// is denied).
const BLOCKED: &str = "Access denied";

/// The text of `550 5.7.1` when an agent's access rules refuse the sender.
const REFUSED_BY_ACCESS: &str = "Sender not authorized for this recipient";

/// What a message's authentication results vouch for about the sender it goes on as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Vouched {
    /// DMARC passed for the From address the message goes on as (`email-dmarc` evidence).
    pub dmarc: bool,
    /// The From address is the sender's own: aligned DKIM, or a DMARC pass (DKIM or SPF
    /// aligned).
    pub from_authenticated: bool,
}

/// DMARC vouches for the From header's address only. A message without a usable From (none, or
/// a first address that is no mailbox, while DMARC may have passed on a later one) goes on as
/// from its envelope sender, which DMARC never checked: it gets no `email-dmarc` evidence and its
/// From is not authenticated.
pub(super) fn what_auth_vouches_for(mail: &ParsedMail, auth: &AuthOutcome) -> Vouched {
    let from = mail.from.is_some();
    Vouched {
        dmarc: from && auth.dmarc_pass,
        from_authenticated: from && (auth.dmarc_pass || auth.dkim_aligned),
    }
}

impl Inbound {
    /// The recipient `address` names, if it is ours: in the mail domain a bounce address or an
    /// agent (an agent named like a role keeps its mail), else a role address of any served
    /// domain, or the bare `postmaster`.
    #[must_use]
    pub fn resolve(&self, address: &str) -> Option<Rcpt> {
        if let Some((local, domain)) = address.trim().rsplit_once('@')
            && domain.eq_ignore_ascii_case(&self.mail_domain)
        {
            if let Some(token) = local.strip_prefix(BOUNCE_PREFIX)
                && !token.is_empty()
                && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                return Some(Rcpt::Bounce(token.to_owned()));
            }
            // Plus-addressing: `helper+anything@` reaches `helper`.
            let name = local.split('+').next().unwrap_or(local);
            if let Some(agent) = self.pipeline.agents().get(name) {
                return Some(Rcpt::Agent(agent.name.clone()));
            }
        }
        roles::role_address(address, &self.served).map(Rcpt::Role)
    }

    fn email_address(&self, agent: &Agent) -> String {
        format!("{}@{}", agent.name.to_lowercase(), self.mail_domain)
    }

    /// Whether `agent` is named in To or Cc (plus tags allowed).
    fn addressed(&self, agent: &Agent, mail: &ParsedMail) -> bool {
        let want = agent.name.to_lowercase();
        mail.to.iter().chain(&mail.cc).any(|a| {
            a.rsplit_once('@').is_some_and(|(local, domain)| {
                domain.eq_ignore_ascii_case(&self.mail_domain)
                    && local
                        .split('+')
                        .next()
                        .unwrap_or(local)
                        .eq_ignore_ascii_case(&want)
            })
        })
    }

    fn policy(&self, agent: &str) -> UnauthenticatedMail {
        self.policies
            .get(&agent.to_lowercase())
            .copied()
            .unwrap_or(self.default_policy)
    }

    /// Handles a complete message; the reply is what the client is told after the dot.
    pub async fn receive(&self, env: &SessionEnvelope<'_>, raw: &[u8]) -> Reply {
        let metrics = self.pipeline.metrics();
        if let Err(e) = parse::check_raw(raw) {
            metrics.inbound(NAME, "invalid");
            return Reply::new(550, [5, 6, 0], e.to_string());
        }
        let (mail, parsed) = match parse::parse_with(raw, env.mail_from, self.max_mime_depth) {
            Ok(m) => m,
            Err(ParseError::Loop) => {
                metrics.inbound(NAME, "invalid");
                return Reply::new(554, [5, 4, 6], "Too many hops: mail loop detected");
            }
            Err(e) => {
                metrics.inbound(NAME, "invalid");
                return Reply::new(550, [5, 6, 0], e.to_string());
            }
        };
        let now = self.pipeline.clock().now_ms();
        for r in env.rcpts {
            let Rcpt::Bounce(response_id) = r else {
                continue;
            };
            let Some((report, failed)) =
                mail.dsn.as_ref().and_then(|d| d.failure().map(|f| (d, f)))
            else {
                continue;
            };
            let detail = failed.detail();
            if let Some(digest) = response_id.strip_prefix(roles::BOUNCE_TAG) {
                // Not a reply's: a forward of role mail (there is no delivery to mark).
                tracing::warn!(
                    digest,
                    detail,
                    "a forwarded role message bounced: check email.postmaster"
                );
                continue;
            }
            if let Some(report) = response_id.strip_prefix(super::reports::BOUNCE_TAG) {
                tracing::warn!(
                    report,
                    detail,
                    "a mailed report bounced: check moderation.reports_to"
                );
                continue;
            }
            // The agent is told before the delivery is marked: a failure in between is retried
            // by the sender, and the second telling is the same message (deduplicated).
            let told = self.tell_bounce(env, raw, &parsed, &mail, response_id, failed);
            let marked = async {
                told.await?;
                store::mark_bounced(
                    self.pipeline.db(),
                    response_id,
                    failed,
                    &report.reporting_mta,
                    now,
                )
                .await
            };
            match marked.await {
                Ok(changed) => {
                    tracing::info!(response = %response_id, changed, detail, "bounce recorded");
                    if changed {
                        metrics.delivery(NAME, "bounced");
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "recording a bounce failed");
                    return Reply::new(451, [4, 3, 0], "Try again later");
                }
            }
        }
        // Role mail is taken whatever it is (bounces, reports, unauthenticated complaints): it is
        // stored with the job that routes it before anything else is decided.
        let role = if env.rcpts.iter().any(|r| matches!(r, Rcpt::Role(_))) {
            match roles::queue(self.pipeline.db(), &self.queue, env, raw, now).await {
                Ok(job) => Some(job),
                Err(e) => {
                    tracing::error!(error = %e, "storing mail to a role address failed");
                    return Reply::new(451, [4, 3, 0], "Try again later");
                }
            }
        } else {
            None
        };
        // What the client is told when no agent takes the message.
        let taken = |role: Option<String>| match role {
            Some(job) => Reply::new(250, [2, 0, 0], format!("Message queued as {job}")),
            None => Reply::new(250, [2, 0, 0], "OK"),
        };
        let agents: Vec<Arc<Agent>> = env
            .rcpts
            .iter()
            .filter_map(|r| match r {
                Rcpt::Agent(name) => self.pipeline.agents().get(name),
                Rcpt::Bounce(_) | Rcpt::Role(_) => None,
            })
            .filter(|a| self.addressed(a, &mail))
            .collect();
        if agents.is_empty() {
            // Bounces, Bcc copies: accepted, nobody is woken.
            if role.is_none() {
                metrics.inbound(NAME, "ignored");
            }
            return taken(role);
        }
        if let Some(reason) = mail.no_reply {
            tracing::info!(reason, from = %env.mail_from, "automatic mail: accepted, not answered");
            metrics.inbound(NAME, "ignored");
            return taken(role);
        }
        let auth = self
            .verifier
            .verify(
                raw,
                &parsed,
                &Envelope {
                    ip: env.peer.ip(),
                    helo: env.helo,
                    mail_from: env.mail_from,
                },
            )
            .await;
        let accepting: Vec<Arc<Agent>> = agents
            .into_iter()
            .filter(|a| auth.dmarc_pass || self.policy(&a.name) == UnauthenticatedMail::Accept)
            .collect();
        // The sender's domain (else its HELO name), for the record of refusals.
        let refused = |reason: &str| {
            let host = env.mail_from.rsplit_once('@').map_or(env.helo, |(_, d)| d);
            metrics.refused_from(host, reason, now);
        };
        if accepting.is_empty() {
            metrics.inbound(NAME, "unauthenticated");
            refused("550 failed authentication (DKIM, SPF, DMARC)");
            // Refused only when every recipient refuses it: a role address never does.
            if role.is_some() {
                return taken(role);
            }
            return Reply::new(
                550,
                [5, 7, 1],
                "Message failed authentication (DKIM, SPF, DMARC)",
            );
        }
        match self.store(env, raw, &mail, &auth, &accepting, &[]).await {
            Ok(id) => Reply::new(250, [2, 0, 0], format!("Message queued as {id}")),
            Err(crate::Error::Refused { .. }) => {
                refused("550 refused by the agent's access rules");
                Reply::new(550, [5, 7, 1], REFUSED_BY_ACCESS)
            }
            Err(crate::Error::Blocked) => {
                refused("550 blocked");
                Reply::new(550, [5, 7, 1], BLOCKED)
            }
            Err(crate::Error::RateLimited { .. }) => {
                refused("451 over the rate limit");
                Reply::new(451, [4, 7, 1], "Too many messages; try again later")
            }
            // The message itself is unacceptable (say a From address that does not parse):
            // a retry would fail the same way, so the refusal is permanent.
            Err(e) if e.kind() == crate::error::ErrorKind::Invalid => {
                tracing::info!(error = %e, from = %env.mail_from, "inbound mail refused");
                metrics.inbound(NAME, "invalid");
                Reply::new(550, [5, 6, 0], "Message content is not acceptable")
            }
            Err(e) => {
                tracing::error!(error = %e, "storing inbound mail failed");
                Reply::new(451, [4, 3, 0], "Try again later")
            }
        }
    }

    /// Tells the agent whose response `response_id` bounced, when it asked to be told
    /// (`notify = ["delivery_failed"]`): an event message in the response's thread, from the
    /// bounce's sender, never answered by mail (a bounce address stands for no one). The bounce
    /// address is the credential here: only the servers the reply went through saw it, so the
    /// agent's access rules are not asked, though a block of the sender still holds. Told once
    /// per response.
    async fn tell_bounce(
        &self,
        env: &SessionEnvelope<'_>,
        raw: &[u8],
        parsed: &mail_parser::Message<'_>,
        mail: &ParsedMail,
        response_id: &str,
        failed: &wire::RecipientStatus,
    ) -> crate::Result<()> {
        let db = self.pipeline.db();
        let Some(response) = crate::store::threads::entry(db, response_id).await? else {
            return Ok(());
        };
        let agent = match self.pipeline.agents().get(&response.agent) {
            Some(a) if response.transport == NAME && a.notified_of(Notify::DeliveryFailed) => a,
            _ => return Ok(()),
        };
        let sent_as = format!("{response_id}@{}", self.mail_domain);
        // The bounce read as an answer to the reply, so that it joins the reply's thread.
        let about = ParsedMail {
            message_id: mail.message_id.clone(),
            from: mail.from.clone(),
            subject: mail.subject.clone(),
            in_reply_to: vec![sent_as.clone()],
            ..ParsedMail::default()
        };
        let thread = self.thread(&agent, &about, &sent_as).await?;
        let auth = self
            .verifier
            .verify(
                raw,
                parsed,
                &Envelope {
                    ip: env.peer.ip(),
                    helo: env.helo,
                    mail_from: env.mail_from,
                },
            )
            .await;
        let bounce = format!("{BOUNCE_PREFIX}{response_id}@{}", self.mail_domain);
        let mut msg = self.normalize(
            env,
            raw.len(),
            &about,
            &auth,
            &agent,
            &thread,
            &[],
            None,
            0,
            &[bounce],
        )?;
        let outcome = failed.reason();
        msg.parts = vec![Part::Event(EventPart {
            event: Notify::DeliveryFailed.as_str().to_owned(),
            object: Some(response_id.to_owned()),
            outcome: (!outcome.is_empty()).then_some(outcome),
            extra: Extra::new(),
        })];
        if self
            .pipeline
            .blocked(Some(&agent.name), NAME, &Who::of(&msg.sender))
            .is_some()
        {
            return Ok(());
        }
        let key = format!("bounce:{response_id}");
        self.pipeline.ingest(NAME, &key, msg).await?;
        Ok(())
    }

    /// Stores one copy of the message per agent of `agents`; `roles` are the role addresses
    /// the copies stand for (role mail handed to an agent, never answered), or none.
    async fn store(
        &self,
        env: &SessionEnvelope<'_>,
        raw: &[u8],
        mail: &ParsedMail,
        auth: &AuthOutcome,
        agents: &[Arc<Agent>],
        roles: &[String],
    ) -> crate::Result<String> {
        let blobs = self.pipeline.blobs();
        let mut files = Vec::new();
        let mut dropped = 0usize;
        // Bytes go in the same transaction as the first agent's copy of the message.
        let mut new_blobs = Vec::new();
        for a in &mail.attachments {
            match blobs.prepare(&a.data, &a.mime) {
                Ok(b) => {
                    files.push(Part::File(FilePart {
                        name: a.name.clone(),
                        mime: a.mime.clone(),
                        size: u64::try_from(a.data.len()).ok(),
                        bytes_ref: BytesRef::ContentAddressed(ContentAddressedBytes {
                            algo: "sha256".into(),
                            digest: b.digest.clone(),
                            url: None,
                        }),
                        extra: Extra::new(),
                    }));
                    new_blobs.push(b);
                }
                Err(crate::Error::TooLarge(_)) => dropped += 1,
                Err(e) => return Err(e),
            }
        }
        // The whole message is kept as a blob.
        let digest = hex::encode(Sha256::digest(raw));
        let body = (raw.len() <= self.max_blob_bytes).then(|| digest.clone());
        if body.is_some() {
            new_blobs.push(crate::blobs::NewBlob {
                digest: digest.clone(),
                mime: "message/rfc822".into(),
                data: raw.to_vec(),
            });
        }
        let external = mail
            .message_id
            .clone()
            .unwrap_or_else(|| format!("sha256:{digest}"));
        let mut first = None;
        let mut refused = None;
        for agent in agents {
            let thread = self.thread(agent, mail, &external).await?;
            let msg = self.normalize(
                env,
                raw.len(),
                mail,
                auth,
                agent,
                &thread,
                &files,
                body.as_deref(),
                dropped,
                roles,
            )?;
            let name = agent.name.to_lowercase();
            let rows = MailRows {
                blobs: std::mem::take(&mut new_blobs),
            };
            // Recipients that block this sender or whose access rules refuse it are skipped;
            // the mail is refused only when every recipient refuses it.
            let blocked = self
                .pipeline
                .blocked(Some(&agent.name), NAME, &Who::of(&msg.sender))
                .map(|_| crate::Error::Blocked);
            if let Some(e) = blocked.map_or_else(
                || self.pipeline.authorize(agent, NAME, &msg.sender).err(),
                Some,
            ) {
                refused.get_or_insert(e);
                new_blobs = rows.blobs;
                continue;
            }
            let key = store::inbound_key(&name, &external);
            let (outcome, _) = self.pipeline.ingest_with(NAME, &key, msg, rows).await?;
            first.get_or_insert(outcome.message_id);
        }
        match (first, refused) {
            (Some(id), _) => Ok(id),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(String::new()),
        }
    }

    /// The thread a message belongs to for `agent`: the thread of the first known id among
    /// In-Reply-To then References (newest first), else the root of References, else the
    /// Thread-Index conversation, else a new thread rooted at this message.
    async fn thread(
        &self,
        agent: &Agent,
        mail: &ParsedMail,
        own_id: &str,
    ) -> crate::Result<Thread> {
        let name = agent.name.to_lowercase();
        let candidates: Vec<&str> = mail
            .in_reply_to
            .iter()
            .chain(mail.references.iter().rev())
            .map(String::as_str)
            .collect();
        let known = store::lookup(self.pipeline.db(), &name, &candidates).await?;
        for c in &candidates {
            if let Some(k) = known.iter().find(|k| k.message_id == *c) {
                let parent = mail
                    .in_reply_to
                    .first()
                    .and_then(|irt| known.iter().find(|k| k.message_id == *irt))
                    .map(|k| k.stored_id.clone());
                return Ok(Thread {
                    key: k.thread_key.clone(),
                    parent,
                    new: false,
                });
            }
        }
        let root = mail.references.first().or(mail.in_reply_to.first());
        let (key, new) = match (root, &mail.thread_index_guid) {
            (Some(r), _) => (format!("{name}:{r}"), false),
            (None, Some(guid)) => (format!("{name}:thread-index:{guid}"), false),
            (None, None) => (format!("{name}:{own_id}"), true),
        };
        Ok(Thread {
            key,
            parent: None,
            new,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn normalize(
        &self,
        env: &SessionEnvelope<'_>,
        size: usize,
        mail: &ParsedMail,
        auth: &AuthOutcome,
        agent: &Agent,
        thread: &Thread,
        files: &[Part],
        body: Option<&str>,
        dropped: usize,
        roles: &[String],
    ) -> crate::Result<NormalizedMessage> {
        let now = self.pipeline.clock().now();
        let from = mail.from.clone().or_else(|| {
            (!env.mail_from.is_empty()).then(|| parse::Mailbox {
                name: None,
                address: env.mail_from.to_lowercase(),
            })
        });
        let address = from
            .as_ref()
            .map_or_else(|| "unknown@invalid".to_owned(), |m| m.address.clone());
        let key_id = auth
            .dkim_pass
            .as_ref()
            .map(|(d, s)| format!("{s}._domainkey.{d}"));
        let evidence = |subject: String, method: AuthMethod, assurance, claims| IdentityEvidence {
            id: None,
            subject,
            issuer: self.hostname.clone(),
            method,
            assurance,
            audience: Audience::One(agent.address.clone()),
            issued_at: now,
            not_before: None,
            expires_at: None,
            on_behalf_of: None,
            claims,
            source: Some(EvidenceSource {
                transport: Some(NAME.into()),
                ..EvidenceSource::default()
            }),
            proof: Proof::Transport(TransportProof {
                verified_by: self.hostname.clone(),
                key_id: key_id.clone(),
            }),
            extra: Extra::new(),
        };
        let vouched = what_auth_vouches_for(mail, auth);
        let (auth_method, identity) = if vouched.dmarc {
            let mut claims = Extra::new();
            claims.insert("dmarc".into(), json!(auth.dmarc));
            let aligned_by = if auth.dmarc_via_spf { "spf" } else { "dkim" };
            claims.insert("aligned_by".into(), json!(aligned_by));
            let e = evidence(
                format!("mailto:{address}"),
                AuthMethod::EmailDmarc,
                Assurance::Address,
                Some(claims),
            );
            (AuthMethod::EmailDmarc, Some(e))
        } else if let Some((d, _)) = &auth.dkim_pass {
            let e = evidence(
                format!("dns:{d}"),
                AuthMethod::EmailDkim,
                Assurance::Domain,
                None,
            );
            (AuthMethod::EmailDkim, Some(e))
        } else {
            (AuthMethod::None, None)
        };
        let verified = identity.is_some();
        let mut text = mail.text.clone().unwrap_or_default();
        if thread.new
            && let Some(subject) = mail.subject.as_deref().filter(|s| !s.is_empty())
        {
            text = if text.is_empty() {
                format!("Subject: {subject}")
            } else {
                format!("Subject: {subject}\n\n{text}")
            };
        }
        let mut parts = Vec::with_capacity(1 + files.len());
        if !text.is_empty() {
            parts.push(Part::text(text));
        }
        parts.extend(files.iter().cloned());
        if parts.is_empty() {
            parts.push(Part::text("(empty message)"));
        }
        let rcpt_to: Vec<String> = env
            .rcpts
            .iter()
            .filter_map(|r| match r {
                Rcpt::Agent(n) => Some(format!("{}@{}", n.to_lowercase(), self.mail_domain)),
                Rcpt::Role(a) => Some(a.clone()),
                Rcpt::Bounce(_) => None,
            })
            .collect();
        let summary = Summary {
            message_id: mail.message_id.clone(),
            subject: mail.subject.clone(),
            from: mail.from.clone(),
            reply_to: mail.reply_to.clone(),
            to: mail.to.clone(),
            cc: mail.cc.clone(),
            date: mail.date.clone(),
            in_reply_to: mail.in_reply_to.clone(),
            references: mail.references.clone(),
            thread_index_guid: mail.thread_index_guid.clone(),
            thread_key: Some(thread.key.clone()),
            agent_address: Some(self.email_address(agent)),
            from_authenticated: Some(vouched.from_authenticated),
            authentication_results: auth.results.clone(),
            size,
            body: body.map(BodyRef::rfc822),
            dropped_attachments: dropped,
            envelope: wire::Envelope {
                mail_from: env.mail_from.to_owned(),
                rcpt_to,
                client_ip: env.peer.ip().to_string(),
                helo: env.helo.to_owned(),
                tls: env.tls,
            },
            // Never answered (see `EmailTransport::deliver`).
            roles: roles.to_vec(),
        };
        let context =
            ReplyContext::of_summary(&summary, thread.key.clone(), vouched.from_authenticated);
        let raw = serde_json::to_value(&summary).map_err(crate::Error::corrupt)?;
        let sender = Sender {
            address,
            display_name: from.and_then(|f| f.name),
            profile: None,
            auth_method,
            verified,
            key_id: key_id.filter(|_| verified),
            identities: identity.map(|e| vec![e]),
            // Only an agent's mail carries an agent conversation's hop; automatic mail of any
            // other kind is never answered at all (RFC 3834, `no_reply`).
            automated: mail.agent_chain.is_some(),
            client: None,
            extra: Extra::new(),
        };
        let mut msg = NormalizedMessage {
            id: uuid::Uuid::now_v7().to_string(),
            thread_id: thread.key.clone(),
            in_reply_to: thread.parent.clone(),
            sender,
            recipient: agent.address.clone(),
            parts,
            content_warning: None,
            sensitive: false,
            history: None,
            history_cache_breakpoint_after: None,
            recipient_capabilities: RecipientCapabilities {
                mention_relay: MentionRelay::RecipientField(RecipientFieldRelay {
                    fields: vec!["to".into(), "cc".into()],
                }),
                agent_chain: mail.agent_chain,
                formats: vec!["text/plain".into(), "text/html".into()],
                attachments: true,
                streaming: false,
                max_text_chars: None,
            },
            received_via: ReceivedVia::Email,
            received_at: now,
            raw,
            policy_resolution: None,
            received_trace: None,
            reply_context: crate::message::ReplyContext::NONE,
            extra: Extra::new(),
        };
        msg.set_reply_context(&context)
            .map_err(crate::Error::corrupt)?;
        Ok(msg)
    }
}

#[async_trait::async_trait]
impl roles::ToAgent for Inbound {
    /// Hands a message sent to role addresses (an [`roles::JOB_KIND`] job) to the agent `name`,
    /// as mail to it that is never answered: parsed and authenticated as at receipt, one copy,
    /// deduplicated like any mail to the agent. Permanent failures: the agent is gone, or the
    /// message is refused as invalid; temporary: the database fails.
    async fn role_to_agent(
        &self,
        job: &RoleJob,
        raw: &[u8],
        name: &str,
    ) -> Result<(), OutboundError> {
        let agent = self
            .pipeline
            .agents()
            .get(name)
            .ok_or_else(|| OutboundError::permanent(format!("no agent named {name:?}")))?;
        let (mail, parsed) = parse::parse_with(raw, &job.mail_from, self.max_mime_depth)
            .map_err(|e| OutboundError::permanent(e.to_string()))?;
        let rcpts: Vec<Rcpt> = job.rcpts.iter().cloned().map(Rcpt::Role).collect();
        let env = SessionEnvelope {
            peer: std::net::SocketAddr::new(job.client_ip, 0),
            helo: &job.helo,
            mail_from: &job.mail_from,
            rcpts: &rcpts,
            tls: job.tls,
        };
        let auth = self
            .verifier
            .verify(
                raw,
                &parsed,
                &Envelope {
                    ip: job.client_ip,
                    helo: &job.helo,
                    mail_from: &job.mail_from,
                },
            )
            .await;
        self.store(&env, raw, &mail, &auth, &[agent], &job.rcpts)
            .await?;
        Ok(())
    }
}

/// The session asks the inbound side about senders and recipients and hands it finished
/// messages.
impl Receiver for Inbound {
    /// A server-wide block over the envelope sender (its address or domain) refuses it at once,
    /// `550 5.7.1`; an agent's own blocks and the `From` address are judged after `DATA`. The
    /// null sender of bounces is never refused here.
    async fn mail(&self, from: &str) -> Result<(), Reply> {
        if from.is_empty()
            || self
                .pipeline
                .blocked(None, NAME, &Who::default().with_sender(from))
                .is_none()
        {
            return Ok(());
        }
        let domain = from.rsplit_once('@').map_or(from, |(_, d)| d);
        let now = self.pipeline.clock().now_ms();
        self.pipeline
            .metrics()
            .refused_from(domain, "550 blocked at MAIL FROM", now);
        Err(Reply::new(550, [5, 7, 1], BLOCKED))
    }

    /// A mailbox of ours (an agent, a bounce address, a role address of a served domain, the
    /// bare `postmaster`), else `550 5.1.1`; an address in another domain is relaying, which
    /// this server never does: `550 5.7.1`.
    async fn rcpt(&self, address: &str) -> Result<Rcpt, Reply> {
        if let Some(rcpt) = self.resolve(address) {
            // An agent whose access rules no mail could ever satisfy refuses at once, before
            // the body is sent.
            if let Rcpt::Agent(name) = &rcpt
                && let Some(agent) = self.pipeline.agents().get(name)
                && !agent
                    .access
                    .may_admit_via(&[AuthMethod::EmailDkim, AuthMethod::EmailDmarc])
            {
                self.pipeline.metrics().refused(
                    &agent.name,
                    NAME,
                    crate::access::Denial::NotAllowed.label(),
                );
                return Err(Reply::new(550, [5, 7, 1], REFUSED_BY_ACCESS));
            }
            return Ok(rcpt);
        }
        let ours = address
            .trim()
            .rsplit_once('@')
            .is_some_and(|(_, domain)| self.served.iter().any(|d| domain.eq_ignore_ascii_case(d)));
        Err(if ours {
            Reply::new(550, [5, 1, 1], "Mailbox unavailable")
        } else {
            Reply::new(550, [5, 7, 1], "Relaying denied")
        })
    }

    async fn message(&self, envelope: SessionEnvelope<'_>, raw: &[u8]) -> Reply {
        self.receive(&envelope, raw).await
    }
}

/// What email stores with a message, in its ingest transaction: its bytes (the whole message,
/// the attachments). Its Message-ID, by which later mail finds the thread, is the message's
/// dedupe key ([`store::inbound_key`]), which ingest stores.
struct MailRows {
    blobs: Vec<crate::blobs::NewBlob>,
}

#[async_trait::async_trait]
impl crate::pipeline::IngestWrite for MailRows {
    async fn write(&mut self, tx: &mut crate::store::Tx, now: i64) -> crate::Result<bool> {
        for b in &self.blobs {
            b.store_in(tx, now).await?;
        }
        Ok(true)
    }
}

/// The thread of an inbound message.
#[derive(Debug, Clone)]
struct Thread {
    /// The wire thread key (`{agent}:{root id}`).
    key: String,
    /// Our stored message this one answers.
    parent: Option<String>,
    /// This message opens the thread.
    new: bool,
}
