//! Outbound: a NormalizedResponse becomes a `Create(Note)` from the agent's actor (a thread of
//! them, each answering the one before, when the text is longer than the addressed servers
//! take), stored (so each is served at its id and in the outbox) together with one durable
//! `ap_deliver` job per inbox (shared inboxes preferred) in one transaction, which POSTs the notes
//! in thread order. The job handler signs and POSTs with a per-host concurrency limit,
//! Mastodon's retry classes (5xx/408/429 retried with `Retry-After`, other 4xx final) and a
//! circuit breaker for hosts failing for days.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::join_all;
use reqwest::header::HeaderValue;
use serde_json::Value;

use super::fetch::FetchError;
use super::long_replies;
use super::mapping::{self, Recipient, ReplyPlan, str_of};
use super::reply_context::{NoteContext, ReplyContext};
use super::wire::{self, FromJson as _};
use super::{ActivityPub, Inner, JOB_KIND, NAME, proof, store};
use crate::config::AccountRef;
use crate::error::{Error, OutboundError, PeerStatus, Result};
use crate::message::{BytesRef, Part, Visibility};
use crate::net::HttpRequest;
use crate::pipeline::{Delivery, Transport};
use crate::queue::{Enqueued, JobHandler};
use crate::store::Tx;
use crate::store::jobs::JobRow;

/// Payload of an `ap_deliver` job.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct DeliverJob {
    /// The signing agent.
    agent: String,
    /// Target inbox.
    inbox: String,
    /// The activities' JSON, POSTed in order, each once the one before it was accepted (the
    /// notes of a long reply answer one another). A job of one activity may hold it alone.
    body: wire::OneOrMany<String>,
}

/// Enqueues one delivery job per inbox for `activities` (in the order they must arrive),
/// signed as `agent`; hand the jobs over once `tx` has committed.
pub(super) async fn enqueue(
    inner: &Inner,
    tx: &mut Tx,
    agent: &str,
    inboxes: &[String],
    activities: &[Value],
) -> Result<Enqueued> {
    let Some(first) = activities.first() else {
        return inner.queue.enqueue(tx, JOB_KIND, &[], 0).await;
    };
    let id = str_of(first, "id").unwrap_or_default();
    let bodies: Vec<String> = activities.iter().map(Value::to_string).collect();
    let now = inner.clock.now_ms();
    let rows: Vec<(String, String)> = inboxes
        .iter()
        .map(|inbox| {
            let payload = serde_json::to_string(&DeliverJob {
                agent: agent.to_owned(),
                inbox: inbox.clone(),
                body: wire::OneOrMany::Many(bodies.clone()),
            })
            .map_err(Error::corrupt)?;
            Ok((format!("ap:{id}|{inbox}"), payload))
        })
        .collect::<Result<_>>()?;
    inner.queue.enqueue(tx, JOB_KIND, &rows, now).await
}

/// A reply, built and signed, with where it goes.
struct Reply {
    /// The answering agent.
    agent: String,
    /// The `Create(Note)` of each note, in thread order, with their proofs.
    creates: Vec<Value>,
    /// Every inbox it is delivered to.
    inboxes: Vec<String>,
    /// Whether anyone may fetch it (public or unlisted).
    public: bool,
    /// The thread it belongs to (`ap_objects.thread_key`).
    thread_key: String,
}

/// The id of note `index` (0-based) of a reply whose first note is `first`: the first keeps
/// the response's own id, the next are `-2`, `-3`, …, the same on every retry.
fn chunk_note_id(first: &str, index: usize) -> String {
    if index == 0 {
        first.to_owned()
    } else {
        format!("{first}-{}", index + 1)
    }
}

/// A unix-ms time as the ISO 8601 text notes carry.
fn stamp(ms: i64) -> String {
    serde_json::to_value(crate::message::Timestamp::from_unix_millis(ms))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn temp(e: impl std::fmt::Display) -> OutboundError {
    OutboundError::temporary(e.to_string())
}

impl Inner {
    /// Resolves a mention (`@user@host` via WebFinger, or an actor IRI) to an actor.
    async fn resolve_mention(&self, m: &str) -> Option<Arc<super::RemoteActor>> {
        self.resolve_account(m, false).await.ok()
    }

    /// Resolves an account (`@user@host` via WebFinger, or an actor IRI) to its actor,
    /// fetched afresh when `force`.
    pub(super) async fn resolve_account(
        &self,
        m: &str,
        force: bool,
    ) -> std::result::Result<Arc<super::RemoteActor>, FetchError> {
        let (user, host) = match AccountRef::parse(m).map_err(FetchError::Permanent)? {
            AccountRef::Iri(iri) => return self.actor(iri, force).await,
            AccountRef::Handle(user, host) => (user, host),
        };
        let scheme = if self.allow_private { "http" } else { "https" };
        let url = format!("{scheme}://{host}/.well-known/webfinger?resource=acct:{user}@{host}");
        let resp = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::GET,
                url: &url,
                headers: reqwest::header::HeaderMap::new(),
                body: None,
                timeout: Some(std::time::Duration::from_millis(self.cfg.fetch_timeout_ms)),
            })
            .await?;
        match resp.status.as_u16() {
            404 | 410 => return Err(FetchError::Gone),
            s if s >= 500 || s == 429 => {
                return Err(FetchError::Temporary(format!(
                    "WebFinger of {user}@{host} answered {s}"
                )));
            }
            _ => {}
        }
        let jrd: Value = serde_json::from_slice(&resp.body).map_err(|_| {
            FetchError::Permanent(format!("WebFinger of {user}@{host} answered no JSON"))
        })?;
        let href = mapping::many(jrd.get("links")).into_iter().find_map(|l| {
            (str_of(l, "rel") == Some("self")
                && str_of(l, "type")
                    .is_some_and(|t| t.contains("activity+json") || t.contains("ld+json")))
            .then(|| str_of(l, "href"))
            .flatten()
        });
        let href = href.ok_or_else(|| {
            FetchError::Permanent(format!("WebFinger of {user}@{host} names no actor"))
        })?;
        self.actor(href, force).await
    }

    /// The context of a thread that came without one: the one minted for it before (by any
    /// agent), else a new one minted for `agent`.
    async fn thread_context(&self, agent: &str, thread_key: &str) -> Result<String> {
        let row = match store::context_of_thread(&self.db, thread_key).await? {
            Some(row) => row,
            None => {
                let id = uuid::Uuid::now_v7().simple().to_string();
                store::mint_context(&self.db, &id, thread_key, agent, self.clock.now_ms()).await?
            }
        };
        Ok(self.context_url(&row.agent, &row.id))
    }

    /// The reply's `context` and `conversation` ([`mapping::reply_thread`]): the note's, else
    /// those of the stored note it answers, else a context minted for the thread.
    async fn reply_thread(
        &self,
        agent: &str,
        note: Option<&NoteContext>,
        thread_key: &str,
    ) -> Result<(Option<String>, Option<String>)> {
        let parent = match note.and_then(|n| n.in_reply_to.as_deref()) {
            Some(p) => store::object(&self.db, p).await?,
            None => None,
        };
        let parent: Option<wire::Object> = parent.and_then(|p| serde_json::from_str(&p.body).ok());
        let ours = note.map_or_else(mapping::ThreadFields::default, |n| mapping::ThreadFields {
            context: n.context.as_deref(),
            conversation: n.conversation.as_deref(),
        });
        let theirs = parent
            .as_ref()
            .map(mapping::thread_fields)
            .unwrap_or_default();
        let minted = if ours.context.or(theirs.context).is_none() {
            Some(self.thread_context(agent, thread_key).await?)
        } else {
            None
        };
        let t = mapping::reply_thread(ours, theirs, minted.as_deref());
        Ok((
            t.context.map(str::to_owned),
            t.conversation.map(str::to_owned),
        ))
    }

    async fn build_reply(&self, d: &Delivery) -> std::result::Result<Reply, OutboundError> {
        let agent = self
            .agents
            .resolve(&d.response.agent)
            .ok_or_else(|| OutboundError::permanent(format!("no agent {}", d.response.agent)))?;
        let actor = self.actor_url(&agent.name);
        let followers = format!("{actor}/followers");
        let quote_policy = self.profile(&agent.name).config().quote_policy;
        let ctx = ReplyContext::of(&d.original)?;
        let original_note = ctx.note.as_ref();
        let sender_iri = ctx
            .actor
            .as_deref()
            .ok_or_else(|| OutboundError::permanent("the original has no actor"))?;
        let sender = self.actor(sender_iri, false).await.map_err(|e| match e {
            super::fetch::FetchError::Temporary(r) => OutboundError::temporary(r),
            other => OutboundError::permanent(format!("sender: {other}")),
        })?;
        let mut actors = vec![sender];
        // Local agents are addressed and tagged like anyone else; the pipeline wakes them
        // itself (no round trip through our own inbox). A reply relayed from another agent
        // addresses that agent too.
        let relay = crate::pipeline::relayed_from(&d.original);
        let mut locals: Vec<Arc<crate::agents::Agent>> = Vec::new();
        let inline: Vec<&str> = d
            .response
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.content.as_str()),
                _ => None,
            })
            .flat_map(crate::pipeline::inline_handles)
            .collect();
        for m in relay
            .map(|(_, by)| by)
            .into_iter()
            .chain(d.response.mentions.iter().flatten().map(String::as_str))
            .chain(inline.iter().copied())
        {
            if let Some(local) = self.agents.resolve(m) {
                if local.name != agent.name && !locals.iter().any(|l| l.name == local.name) {
                    locals.push(local);
                }
                continue;
            }
            if inline.contains(&m) && !d.response.mentions.iter().flatten().any(|x| x == m) {
                // Only local handles written in the text are taken up; remote ones are for
                // the agent to put in `mentions`.
                continue;
            }
            match self.resolve_mention(m).await {
                Some(a) if !actors.iter().any(|x| x.id == a.id) => actors.push(a),
                Some(_) => {}
                None => tracing::warn!(mention = %m, "mention could not be resolved; left out"),
            }
        }
        // Actors that blocked the agent, and those the operator blocks (for this agent or
        // server-wide), are neither addressed nor delivered to.
        let blockers = store::blockers_of(&self.db, &agent.name).await?;
        let left_out = |actor: &str| {
            blockers.contains(actor)
                || self
                    .blocks
                    .find(
                        Some(&agent.name),
                        &crate::moderation::Who::default().with_sender(actor),
                    )
                    .is_some()
        };
        let recipients: Vec<Recipient> = actors
            .iter()
            .filter(|a| !left_out(&a.id))
            .map(|a| Recipient {
                iri: a.id.clone(),
                address: a.address.clone(),
                url: wire::Actor::from_json(&a.doc)
                    .profile_url()
                    .unwrap_or(&a.id)
                    .to_owned(),
            })
            .chain(locals.iter().map(|l| Recipient {
                iri: self.actor_url(&l.name),
                address: l.address.clone(),
                url: self.actor_url(&l.name),
            }))
            .collect();
        let visibility = d.response.visibility.unwrap_or_else(|| {
            original_note.map_or(Visibility::Direct, |n| {
                mapping::visibility(&n.to, &n.cc, actors[0].followers.as_deref())
            })
        });
        let in_reply_to = original_note.and_then(|n| n.id.as_deref());
        // The thread key the inbox stored the note under, so the reply joins its thread (and
        // its context collection); else what the inbox would have chosen.
        let stored = match in_reply_to {
            Some(id) => store::object(&self.db, id).await?,
            None => None,
        };
        let thread_key = match stored {
            Some(row) => row.thread_key,
            None => original_note
                .and_then(NoteContext::explicit_thread)
                .or_else(|| {
                    original_note.map(|n| {
                        n.in_reply_to
                            .as_deref()
                            .unwrap_or(n.id.as_deref().unwrap_or_default())
                    })
                })
                .map_or_else(|| d.response.thread_id.clone(), str::to_owned),
        };
        let (context, conversation) = self
            .reply_thread(&agent.name, original_note, &thread_key)
            .await?;
        let note_id = format!("{actor}/notes/{}", d.response.id);
        let now = self.clock.now_ms();
        let mut attachments = Vec::new();
        for p in &d.response.parts {
            if let Part::File(f) = p
                && let BytesRef::ContentAddressed(c) = &f.bytes_ref
            {
                attachments.push(wire::Attachment::document(
                    &self.blobs.url(&c.digest),
                    &f.mime,
                    f.name.as_deref(),
                ));
            }
        }
        // A relayed turn's reply answers the mentioning agent's note (its id is minted from
        // the response id), so the thread reads as the conversation it was.
        let relayed_parent = relay.and_then(|(response, by)| {
            let by = self.agents.resolve(by)?;
            Some(format!("{}/notes/{response}", self.actor_url(&by.name)))
        });
        // The notes: one, or a thread of them when the text exceeds what the addressed
        // servers take, each answering the one before it.
        let groups = {
            let ids: Vec<&str> = actors.iter().map(|a| a.id.as_str()).collect();
            let limit = usize::try_from(self.reply_limit_of(&ids).await).unwrap_or(usize::MAX);
            let parts = &d.response.parts;
            if limit == 0
                || long_replies::note_chars(parts)
                    + mapping::mention_prefix_chars(&recipients, parts)
                    <= limit
            {
                vec![parts.clone()]
            } else {
                // A chunk without the text's inline mentions is prefixed with them all.
                long_replies::chunk_parts(
                    parts,
                    limit,
                    mapping::mention_prefix_chars(&recipients, &[]),
                )
            }
        };
        // An FEP-8b32 proof under the agent's Ed25519 key (its assertionMethod), so a server
        // that forwards the reply to its followers passes on something they can verify.
        let key = self.keys.ed25519(&Inner::ed_key_name(&agent.name)).await?;
        // The hop this answer is in its agent conversation: the turn's own, or the first.
        let chain = d
            .original
            .recipient_capabilities
            .agent_chain
            .unwrap_or(crate::message::AgentChain::first(agent.limits.max_hops));
        let mut creates = Vec::with_capacity(groups.len());
        let mut attachments = Some(attachments);
        let mut previous: Option<String> = None;
        for (i, parts) in groups.iter().enumerate() {
            let id = chunk_note_id(&note_id, i);
            // A millisecond apart, so servers ordering by publication keep the thread's order.
            let published = stamp(now + i64::try_from(i).unwrap_or(0));
            let plan = ReplyPlan {
                note_id: &id,
                actor: &actor,
                followers: &followers,
                in_reply_to: match &previous {
                    Some(p) => Some(p.as_str()),
                    None => relayed_parent.as_deref().or(in_reply_to),
                },
                thread: mapping::ThreadFields {
                    context: context.as_deref(),
                    conversation: conversation.as_deref(),
                },
                visibility,
                recipients: &recipients,
                parts,
                published: &published,
                content_warning: mapping::reply_warning(
                    d.response.content_warning.as_deref(),
                    d.original.content_warning.as_deref(),
                ),
                sensitive: d.response.sensitive,
            };
            // Attachments go with the first note, the one answering the original.
            let mut note = mapping::reply_note(&plan, attachments.take().unwrap_or_default());
            mapping::mark_chain(&mut note, chain);
            if let Some(m) = note.as_object_mut() {
                m.insert(
                    "interactionPolicy".into(),
                    mapping::quotes::interaction_policy(
                        quote_policy,
                        &actor,
                        &followers,
                        &visibility,
                    ),
                );
            }
            let mut create = mapping::create_of(&note);
            proof::attach(
                &mut create,
                &format!("{actor}#ed25519-key"),
                &published,
                |m| key.sign(m),
            );
            creates.push(create);
            previous = Some(id);
        }
        let mut inboxes: BTreeSet<String> = actors
            .iter()
            .filter(|a| !left_out(&a.id))
            .filter_map(|a| a.delivery_inbox().map(str::to_owned))
            .collect();
        if !matches!(visibility, Visibility::Direct) {
            let followers = store::followers(&self.db, &agent.name).await?;
            inboxes.extend(
                followers
                    .into_iter()
                    .filter(|f| !left_out(&f.actor))
                    .map(|f| f.inbox),
            );
        }
        let inboxes: Vec<String> = inboxes.into_iter().filter(|i| !self.is_local(i)).collect();
        let public = matches!(visibility, Visibility::Public | Visibility::Unlisted);
        Ok(Reply {
            agent: agent.name.clone(),
            creates,
            inboxes,
            public,
            thread_key,
        })
    }

    fn host_limit(&self, host: &str) -> Arc<tokio::sync::Semaphore> {
        let mut m = match self.hosts.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        Arc::clone(m.entry(host.to_owned()).or_insert_with(|| {
            Arc::new(tokio::sync::Semaphore::new(
                self.cfg.host_concurrency.max(1),
            ))
        }))
    }

    /// The POSTs of `job`, in order, stopping at the first that fails: how many were accepted,
    /// and how the job ends.
    async fn post_in_order(&self, job: &DeliverJob) -> Posted {
        let mut accepted = 0;
        for body in job.body.iter() {
            if let Err(e) = self.post(&job.agent, &job.inbox, body).await {
                return Posted {
                    accepted,
                    result: Err(e),
                };
            }
            accepted += 1;
        }
        Posted {
            accepted,
            result: Ok(()),
        }
    }

    /// One signed POST of `body` to `inbox`, as `agent`.
    async fn post(
        &self,
        agent: &str,
        inbox: &str,
        body: &str,
    ) -> std::result::Result<(), OutboundError> {
        let url = url::Url::parse(inbox).map_err(|e| OutboundError::permanent(e.to_string()))?;
        let host = mapping::host_of(inbox).unwrap_or_default();
        let health = store::host(&self.db, &host).await?;
        let now = self.clock.now_ms();
        if self.circuit(health.failing_since, now) == crate::hosts::Circuit::Open {
            return Err(OutboundError::permanent(format!(
                "{host} has been failing for more than {} days",
                self.cfg.breaker_days
            )));
        }
        let _permit = self.host_limit(&host).acquire_owned().await.map_err(temp)?;
        let body = Bytes::from(body.to_owned());
        let mut headers = self
            .sign_headers(Some(agent), "POST", &url, Some(&body), health.rfc9421 > 0)
            .await?;
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/activity+json"),
        );
        let sent = self
            .http
            .send(HttpRequest {
                method: reqwest::Method::POST,
                url: url.as_str(),
                headers,
                body: Some(body),
                timeout: Some(std::time::Duration::from_millis(self.cfg.fetch_timeout_ms)),
            })
            .await;
        let result = sent.and_then(|r| self.http.classify_status(&r));
        let ok = match &result {
            Ok(()) => true,
            // A 4xx other than 408/429 is an answer, not an outage.
            Err(e @ OutboundError::Permanent { .. }) => {
                e.status().is_some_and(PeerStatus::is_refusal)
            }
            Err(_) => false,
        };
        let failure = result.as_ref().err().map(ToString::to_string);
        let now = self.clock.now_ms();
        self.metrics.hosts().delivered(
            crate::hosts::Channel::ActivityPub,
            &host,
            failure.as_deref().map_or(Ok(()), Err),
            now,
        );
        // The host's own error, not a refusal of one activity, is its last error.
        let error = failure.filter(|_| !ok);
        // A healthy host stays healthy without a write per delivery.
        let changed = !ok || health.failing_since.is_some() || health.failures > 0;
        if changed
            && let Err(e) = store::record_delivery(&self.db, &host, error.as_deref(), now).await
        {
            tracing::warn!(error = %e, "recording host health failed");
        }
        result
    }

    /// The circuit of a host failing since `failing_since` (if at all): open once it has been
    /// failing for more than `activitypub.breaker_days`.
    pub(super) fn circuit(&self, failing_since: Option<i64>, now: i64) -> crate::hosts::Circuit {
        let breaker_ms =
            i64::try_from(self.cfg.breaker_days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
        match failing_since {
            None => crate::hosts::Circuit::Closed,
            Some(since) if now - since > breaker_ms => crate::hosts::Circuit::Open,
            Some(_) => crate::hosts::Circuit::Failing,
        }
    }
}

#[async_trait::async_trait]
impl Transport for ActivityPub {
    fn name(&self) -> &str {
        NAME
    }

    /// Any server may deliver; an answer is a new note its author may answer; an actor's
    /// handle names its server, which the per-host limits count.
    fn exposure(&self) -> crate::pipeline::Exposure {
        crate::pipeline::Exposure {
            open: true,
            answers_in_request: false,
            per_host: true,
        }
    }

    fn sends_in_jobs(&self) -> bool {
        true
    }

    async fn deliver(&self, d: &Delivery) -> std::result::Result<(), OutboundError> {
        self.inner.send_reply(d).await
    }

    /// The received notes stored before `before`, a batch at a time (our agents' own notes
    /// stay: they are what the outbox and note pages serve).
    async fn erase_before(&self, before: i64) -> Result<u64> {
        store::erase_received_before(&self.inner.db, before, 500).await
    }
}

impl Inner {
    /// Builds the reply `d` describes, stores its notes and schedules one signed POST per note
    /// and inbox, in one transaction; a reply already stored (the same response again, a
    /// retried delivery) is sent once.
    pub(super) async fn send_reply(&self, d: &Delivery) -> std::result::Result<(), OutboundError> {
        let inner = self;
        let Reply {
            agent,
            creates,
            inboxes,
            public,
            thread_key,
        } = inner.build_reply(d).await?;
        let actor = inner.actor_url(&agent);
        let mut tx = inner.db.begin().await?;
        let now = inner.clock.now_ms();
        let mut fresh = None;
        for create in &creates {
            let note = create.get("object").cloned().unwrap_or_default();
            let note_id = str_of(&note, "id").unwrap_or_default().to_owned();
            let stored = store::insert_object(
                &mut tx,
                &store::NewObject {
                    id: &note_id,
                    kind: "out",
                    agent: &agent,
                    author: &actor,
                    message_id: Some(&d.response.id),
                    thread_key: &thread_key,
                    public,
                    body: &note.to_string(),
                },
                now,
            )
            .await?;
            // The first note decides: stored before, the reply was sent before (a retry).
            fresh.get_or_insert(stored);
        }
        // One job per inbox takes the notes in thread order: a note never arrives before the
        // one it answers.
        let enqueued = if fresh == Some(true) {
            Some(enqueue(inner, &mut tx, &agent, &inboxes, &creates).await?)
        } else {
            None
        };
        tx.commit().await?;
        if let Some(e) = enqueued {
            inner.queue.hand_over(e);
        }
        Ok(())
    }
}

/// How a delivery job's POSTs went: how many were accepted before the one that failed, if any.
struct Posted {
    accepted: usize,
    result: std::result::Result<(), OutboundError>,
}

impl crate::queue::Attempted for Posted {
    fn error(&self) -> Option<&OutboundError> {
        self.result.as_ref().err()
    }
}

/// Handles `ap_deliver` jobs: each job's POSTs in order, outcomes committed together, each job
/// counted as a delivery attempt of this transport. A job retried after some of its activities
/// were accepted keeps only the rest, in the transaction that puts it back: none is sent twice.
#[derive(Debug)]
pub struct DeliverHandler(pub(super) ActivityPub);

#[async_trait::async_trait]
impl JobHandler for DeliverHandler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let inner = &self.0.inner;
        let jobs: Vec<std::result::Result<DeliverJob, OutboundError>> = batch
            .iter()
            .map(|job| {
                serde_json::from_str(&job.payload)
                    .map_err(|e| OutboundError::permanent(format!("malformed job: {e}")))
            })
            .collect();
        let results = join_all(jobs.iter().map(|job| async move {
            match job {
                Ok(job) => inner.post_in_order(job).await,
                Err(e) => Posted {
                    accepted: 0,
                    result: Err(e.clone()),
                },
            }
        }))
        .await;
        let now = inner.clock.now_ms();
        let mut tx = inner.db.begin().await?;
        let mut finished = inner
            .queue
            .finish(&mut tx, owner, batch, &results, now)
            .await?;
        for (i, (job, posted)) in jobs.iter().zip(&results).enumerate() {
            // Each job is one delivery attempt of this transport.
            finished.count_delivery(i, NAME);
            let retried = matches!(
                finished.end(i),
                Some(crate::store::jobs::Finish::Retry { .. })
            );
            if let Ok(job) = job
                && retried
                && posted.accepted > 0
            {
                let rest = DeliverJob {
                    agent: job.agent.clone(),
                    inbox: job.inbox.clone(),
                    body: wire::OneOrMany::Many(
                        job.body.iter().skip(posted.accepted).cloned().collect(),
                    ),
                };
                let payload = serde_json::to_string(&rest).map_err(Error::corrupt)?;
                crate::store::jobs::set_payload(&mut tx, &batch[i].id, &payload).await?;
            }
        }
        inner.queue.commit(tx, finished).await
    }
}
