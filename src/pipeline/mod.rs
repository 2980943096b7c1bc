//! The pipeline: ingest (dedupe, store, enqueue dispatch in one transaction), dispatch (history,
//! agent call, store the response and enqueue its delivery in one transaction) and delivery
//! (through the originating transport, outcome recorded). A turn that ends without a response
//! (the agent had nothing to say, or its dispatch failed for good) is told to transports that
//! care ([`Transport::ends_turns`]) by a `turn_end` job enqueued in the same
//! transaction.
//!
//! One thread runs one turn of an agent at a time ([`Runs`]; across instances on PostgreSQL,
//! through leases in the database); what a message
//! does while its thread runs, and whether text waits for more from its sender, is the
//! `[conversation]` configuration (merged messages end `merged`, cancelled runs
//! `interrupted`).
//!
//! It owns the contract with transports ([`Transport`], [`Delivery`], [`TransportRegistry`])
//! and imports no transport.

mod caches;
mod chain;
mod conversation;
mod deliver;
mod dispatch;
mod erase;
mod history;
mod ingest;
mod policy;
mod runs;
mod transport;

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::hop::OnMain;

pub use caches::Caches;
pub use chain::{inline_handles, relayed_from};
pub use erase::EraseWrite;
pub use ingest::{IngestOutcome, IngestWrite};
pub use policy::LinkOutcome;
pub use runs::Runs;
pub use transport::{
    AfterCommit, DeliversInTransaction, Delivery, EndsTurns, Exposure, StreamsProgress, Transport,
    TransportRegistry,
};

use crate::agents::{Agent, AgentRegistry};
use crate::blobs::BlobStore;
use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::keys::Keys;
use crate::message::{HistoryPolicy, NormalizedMessage, Sender};
use crate::metrics::Metrics;
use crate::moderation::Who;
use crate::queue::{JobHandler, Queue};
use crate::store::Db;
use crate::telemetry::TraceParent;

/// Payload of a `dispatch` job.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct DispatchJob {
    /// The stored message to dispatch.
    pub(crate) message_id: String,
    /// The message opened its thread, so there is no history to load.
    #[serde(default)]
    pub(crate) new_thread: bool,
    /// For a turn relayed from one local agent to another: the agents that answered in the
    /// chain so far (local names, oldest first), none of which is woken again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) chain: Vec<String>,
    /// Why the agent is not called for this message, when a safety rule said so at ingest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) held: Option<Hold>,
    /// For a relayed turn: the sender of the turn that started the chain, whose evidence the
    /// woken agent's access rules and rate limits judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) origin: Option<Box<Sender>>,
    /// The span that enqueued it (`ingest`, or the dispatch that relayed the turn), when
    /// traces are exported: the dispatch's span continues that trace (a malformed one is
    /// ignored).
    #[serde(
        default,
        deserialize_with = "crate::telemetry::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) trace: Option<TraceParent>,
}

/// Why a stored message's agent is not called: the message is kept (and shown in its thread,
/// with status `held` and this reason), its turn ends without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Hold {
    /// An automated party went past its conversation budget with the agent
    /// (`limits.per_automated`), or is cooling down from it.
    #[serde(rename = "bot-loop")]
    BotLoop,
    /// The turn's agent chain, continued from another server, is past its hop limit.
    #[serde(rename = "max-hops")]
    MaxHops,
    /// A relayed turn: the woken agent's access rules refuse the chain's original sender.
    #[serde(rename = "refused")]
    Refused,
    /// A relayed turn: the chain's original sender is over the woken agent's rate limits.
    #[serde(rename = "rate-limited")]
    RateLimited,
    /// The sender has blocked the agent (an ActivityPub `Block`): nothing goes back to it.
    #[serde(rename = "blocked-by-sender")]
    BlockedBySender,
}

impl Hold {
    /// The reason as the read API and the logs name it (and `switchboard_refused_total` for a
    /// budget or a hop limit; a refused relayed turn is counted with the access rules' reason).
    pub(crate) const fn label(self) -> &'static str {
        match self {
            Self::BotLoop => "bot-loop",
            Self::MaxHops => "max-hops",
            Self::Refused => "refused",
            Self::RateLimited => "rate-limited",
            Self::BlockedBySender => "blocked-by-sender",
        }
    }
}

impl DispatchJob {
    /// The `(job id, payload)` rows of `jobs`, as the queue takes them (the job id is stable:
    /// `dispatch:{message id}`).
    ///
    /// # Errors
    /// [`Error::Corrupt`] when a payload cannot be serialised.
    pub(crate) fn rows<J: std::borrow::Borrow<Self>>(
        jobs: impl Iterator<Item = J>,
    ) -> Result<Vec<(String, String)>> {
        jobs.map(|j| {
            let j = j.borrow();
            let payload = serde_json::to_string(j)?;
            Ok((format!("dispatch:{}", j.message_id), payload))
        })
        .collect::<std::result::Result<Vec<_>, serde_json::Error>>()
        .map_err(Error::corrupt)
    }
}

/// Payload of a `deliver` job.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct DeliverJob {
    /// The stored response to deliver.
    pub(crate) response_id: String,
    /// The response woke sibling agents whose answers follow ([`Delivery::continues`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) continues: bool,
    /// The dispatch span that stored the response, when traces are exported: the delivery's
    /// span continues that trace (a malformed one is ignored).
    #[serde(
        default,
        deserialize_with = "crate::telemetry::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) trace: Option<TraceParent>,
}

/// Payload of a `turn_end` job.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct TurnEndJob {
    /// The stored message whose turn ended without a response.
    pub(crate) message_id: String,
    /// Why, when the dispatch failed for good (for the log only).
    #[serde(default)]
    pub(crate) failure: Option<String>,
}

/// The services the pipeline and the transports share, built once by the application (all
/// cheap to clone). The pipeline's [`Core`] and the transports' parts each hold one and read
/// its fields through it.
#[derive(Debug, Clone)]
pub struct Services {
    /// The database.
    pub db: Db,
    /// The clock.
    pub clock: SharedClock,
    /// The job queue.
    pub queue: Arc<Queue>,
    /// The hosted agents.
    pub agents: Arc<AgentRegistry>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Attachments.
    pub blobs: BlobStore,
    /// Signing keys.
    pub keys: Keys,
    /// The blocks in force: senders refused before anything of theirs is stored, parties a
    /// transport leaves out of what it sends.
    pub blocks: Arc<crate::moderation::Blocks>,
}

/// What the pipeline's stages share: the [`Services`] (its fields read through the core) and
/// the pipeline's own state.
#[derive(Debug)]
pub struct Core {
    services: Services,
    /// The transports responses go out by.
    pub transports: TransportRegistry,
    /// What agents see of a thread.
    pub history: HistoryPolicy,
    /// What this instance stored last, held in memory ([`Caches`]).
    pub caches: Caches,
    /// Rate-limit counters.
    pub rates: crate::limits::Windows,
    /// The public base URL (policy parts' landing pages).
    pub public_url: String,
    /// How long a policy part's state stays valid (ms).
    pub policy_state_ttl_ms: i64,
    /// The inbound debounce and queue mode, per transport.
    pub conversation: crate::config::ConversationConfig,
    /// The runs in flight in this process, per thread and agent.
    pub runs: Runs,
}

impl std::ops::Deref for Core {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
}

impl Core {
    /// The pipeline's state over `services`, its settings from `config`, delivering through
    /// `transports`; `caches` off holds nothing in memory ([`Caches::off`]).
    ///
    /// # Errors
    /// [`Error::Config`] when the public URL is unusable.
    pub fn new(
        config: &crate::config::Config,
        services: Services,
        transports: TransportRegistry,
        caches: bool,
    ) -> Result<Self> {
        let site = crate::site::Site::from_config(config)?;
        // SQLite serves one instance: every turn of its database is stored by this one.
        let caches = if caches {
            Caches::new(services.db.backend() == crate::store::Backend::Sqlite)
        } else {
            Caches::off()
        };
        Ok(Self {
            rates: crate::limits::Windows::new(services.db.clone()),
            services,
            transports,
            history: config.history,
            caches,
            public_url: site.base_url().to_owned(),
            policy_state_ttl_ms: i64::try_from(config.policy.state_ttl_seconds)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
            conversation: config.conversation.clone(),
            runs: Runs::default(),
        })
    }

    /// The shared services.
    #[must_use]
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// As [`Pipeline::blocked`].
    fn blocked(
        &self,
        agent: Option<&str>,
        transport: &str,
        who: &Who,
    ) -> Option<crate::moderation::Block> {
        let block = self.blocks.find(agent, who)?;
        self.metrics
            .refused(agent.unwrap_or("*"), transport, "blocked");
        tracing::info!(
            agent = agent.unwrap_or("*"),
            transport,
            block = %block.id,
            kind = block.kind.as_str(),
            pattern = %block.pattern,
            "refused: the sender is blocked"
        );
        Some(block)
    }

    /// As [`Pipeline::authorize`]: every path into an agent passes here, relayed turns too.
    fn authorize(&self, agent: &Agent, transport: &str, sender: &Sender) -> Result<()> {
        let Err(denial) = agent.access.decide(sender) else {
            return Ok(());
        };
        self.metrics.refused(&agent.name, transport, denial.label());
        tracing::info!(
            agent = %agent.name,
            transport,
            reason = denial.label(),
            evidence = %crate::access::evidence_summary(sender),
            "refused by the agent's access rules"
        );
        Err(Error::Refused {
            authenticated: sender.identities.as_ref().is_some_and(|i| !i.is_empty()),
        })
    }

    /// Counts a message from `sender` to `agent` in the agent's rate limits (the built-in
    /// defaults where `transport` faces the open networks); `Some(seconds)` to wait when it is
    /// over one of them, counted and logged.
    async fn over_rate(
        &self,
        agent: &Agent,
        transport: &str,
        sender: &Sender,
    ) -> Result<Option<u64>> {
        let exposure = self.transports.exposure(transport);
        let counting = crate::limits::Counting {
            open: exposure.open,
            per_host: exposure.per_host,
        };
        let now_ms = self.clock.now_ms();
        let over = self
            .rates
            .hit(&agent.limits, &agent.name, counting, sender, now_ms)
            .await?;
        if let Some(retry_after_s) = over {
            self.metrics.refused(&agent.name, transport, "rate_limited");
            tracing::info!(
                agent = %agent.name,
                transport,
                retry_after_s,
                evidence = %crate::access::evidence_summary(sender),
                "over the agent's rate limit"
            );
        }
        Ok(over)
    }

    /// Whether a message the agent's access rules and rate limits let in is still not to be
    /// answered: a chain continued from another server past its hop limit, or an automated
    /// party past its conversation budget (counted here). A transport that answers in the
    /// sender's own request (A2A) counts only calls made within an agent chain: an answer there
    /// cannot start another exchange by itself.
    async fn hold(
        &self,
        agent: &Agent,
        transport: &str,
        exposure: transport::Exposure,
        msg: &NormalizedMessage,
        now_ms: i64,
    ) -> Result<Option<Hold>> {
        let chain = msg.recipient_capabilities.agent_chain;
        let held = if chain.is_some_and(|c| c.hop > c.max_hops.min(agent.limits.max_hops)) {
            Some(Hold::MaxHops)
        } else if msg.sender.automated
            && (!exposure.answers_in_request || chain.is_some())
            && self
                .rates
                .over_budget(&agent.limits, &agent.name, &msg.sender, now_ms)
                .await?
        {
            Some(Hold::BotLoop)
        } else {
            None
        };
        if let Some(h) = held {
            self.metrics.refused(&agent.name, transport, h.label());
            tracing::info!(
                agent = %agent.name,
                transport,
                reason = h.label(),
                hop = chain.map_or(0, |c| c.hop),
                evidence = %crate::access::evidence_summary(&msg.sender),
                "stored, not answered"
            );
        }
        Ok(held)
    }
}

/// The entry point transports hand verified messages to.
#[derive(Debug, Clone)]
pub struct Pipeline {
    core: Arc<Core>,
    ingest_tx: mpsc::Sender<ingest::Pending>,
    main: tokio::runtime::Handle,
}

impl Pipeline {
    /// Builds the pipeline and starts its ingest writer.
    #[must_use]
    pub fn new(core: Core) -> Self {
        let core = Arc::new(core);
        erase::listen(&core);
        let c = Arc::clone(&core);
        core.queue.on_notify(
            runs::NOTIFY_CHANNEL,
            Arc::new(move |payload: &str| {
                for runs::Place { key, seq: newer } in runs::parse_notification(payload) {
                    if c.runs.interrupt(&key, newer) {
                        tracing::debug!(thread_id = %key.thread_id, agent = %key.agent, "run interrupted by a newer message stored elsewhere");
                    }
                }
            }),
        );
        let (ingest_tx, rx) = mpsc::channel(4096);
        tokio::spawn(ingest::writer(Arc::clone(&core), rx));
        Self {
            core,
            ingest_tx,
            main: tokio::runtime::Handle::current(),
        }
    }

    /// Stores a verified message and schedules its dispatch, exactly once per
    /// `(transport, external_id)`. Returns only after the commit, so the caller may acknowledge
    /// to its peer.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed message, [`Error::NotFound`] for an unknown recipient,
    /// database errors (nothing was stored).
    pub async fn ingest(
        &self,
        transport: &str,
        external_id: &str,
        msg: NormalizedMessage,
    ) -> Result<IngestOutcome> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.submit(
            transport,
            external_id,
            msg,
            ingest::Reply::Outcome(reply),
            rx,
            |o| o,
        )
        .await
    }

    /// As [`Pipeline::ingest`], with rows of the transport's own committed in the same
    /// transaction as the message (`write` runs inside it, and may decline the message); returns
    /// `write` afterwards, with whatever it recorded.
    ///
    /// # Errors
    /// As [`Pipeline::ingest`]; the write's own errors.
    pub async fn ingest_with<W: IngestWrite>(
        &self,
        transport: &str,
        external_id: &str,
        msg: NormalizedMessage,
        write: W,
    ) -> Result<(IngestOutcome, W)> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let reply = ingest::Reply::With(Box::new(ingest::Carry { write, reply }));
        self.submit(transport, external_id, msg, reply, rx, |(o, _)| o)
            .await
    }

    /// Whether `agent`'s access rules let `sender` in ([`crate::access`]); a refusal is
    /// counted and logged with a summary of the evidence (never the message). Ingest asks on
    /// every message; a transport may ask earlier to answer its peer sooner.
    ///
    /// # Errors
    /// [`Error::Refused`] when the rules refuse the sender.
    pub fn authorize(&self, agent: &Agent, transport: &str, sender: &Sender) -> Result<()> {
        self.core.authorize(agent, transport, sender)
    }

    /// Whether a block refuses `who` for `agent` (for every agent when `agent` is `None`: a
    /// transport that does not know the recipient yet asks about server-wide blocks); a
    /// refusal is counted (`switchboard_refused_total`, reason `blocked`, agent `*` for a
    /// server-wide check) and logged with the block. Ingest asks on every message; a transport
    /// asks earlier to refuse natively before reading more. Returns the block that refuses.
    #[must_use]
    pub fn blocked(
        &self,
        agent: Option<&str>,
        transport: &str,
        who: &Who,
    ) -> Option<crate::moderation::Block> {
        if !self.core.blocks.any() {
            return None;
        }
        self.core.blocked(agent, transport, who)
    }

    /// The blocks in force, to list and change.
    #[must_use]
    pub fn blocks(&self) -> &Arc<crate::moderation::Blocks> {
        &self.core.blocks
    }

    /// Adds a block at run time (the operator API, the console): stored, in force here at once
    /// and on the other instances at their next refresh; the same block twice is stored once.
    /// Recorded in the audit log as done by `by`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an agent this instance does not host; database errors.
    pub async fn add_block(
        &self,
        new: &crate::moderation::NewBlock,
        by: &crate::store::audit::Actor,
    ) -> Result<crate::moderation::Block> {
        if let Some(agent) = &new.agent
            && self.core.agents.get(agent).is_none()
        {
            return Err(Error::Invalid(format!("agent: no agent {agent:?}")));
        }
        let now = self.core.clock.now_ms();
        let block = self.core.blocks.add(&self.core.db, new, now, by).await?;
        tracing::info!(block = %block.id, kind = block.kind.as_str(), pattern = %block.pattern, "block added");
        Ok(block)
    }

    /// Hands `msg` to the ingest writer, which answers `reply` (received on `rx`) once its
    /// batch has committed; `outcome` reads what ingest did from the answer.
    async fn submit<T>(
        &self,
        transport: &str,
        external_id: &str,
        msg: NormalizedMessage,
        reply: ingest::Reply,
        rx: tokio::sync::oneshot::Receiver<Result<T>>,
        outcome: impl Fn(&T) -> &IngestOutcome,
    ) -> Result<T> {
        msg.validate()?;
        if external_id.is_empty() {
            return Err(Error::Invalid("external id is empty".into()));
        }
        let agent = self
            .core
            .agents
            .resolve(&msg.recipient)
            .ok_or_else(|| Error::NotFound(format!("no agent {}", msg.recipient)))?;
        if self.core.blocks.any()
            && self
                .core
                .blocked(Some(&agent.name), transport, &Who::of(&msg.sender))
                .is_some()
        {
            return Err(Error::Blocked);
        }
        self.authorize(&agent, transport, &msg.sender)?;
        let exposure = self.core.transports.exposure(transport);
        let now_ms = self.core.clock.now_ms();
        if let Some(retry_after_s) = self.core.over_rate(&agent, transport, &msg.sender).await? {
            return Err(Error::RateLimited { retry_after_s });
        }
        let held = self
            .core
            .hold(&agent, transport, exposure, &msg, now_ms)
            .await?;
        let span = tracing::debug_span!(
            "ingest",
            message_id = %msg.id,
            thread_id = tracing::field::Empty,
            thread_key = %msg.thread_id,
            transport,
            agent = %agent.name,
        );
        let pending = ingest::Pending {
            transport: transport.to_owned(),
            external_id: external_id.to_owned(),
            agent: agent.name.clone(),
            thread_key: msg.thread_id.clone(),
            msg: Arc::new(msg),
            refused: None,
            held,
            trace: crate::telemetry::context_of(&span),
            reply,
        };
        async {
            self.ingest_tx
                .send(pending)
                .await
                .map_err(|_| Error::Unavailable)?;
            let stored = rx.await.map_err(|_| Error::Unavailable)??;
            let outcome = outcome(&stored);
            tracing::Span::current().record("thread_id", outcome.thread_id.as_str());
            tracing::debug!(
                duplicate = outcome.duplicate,
                stored_as = %outcome.message_id,
                "message stored"
            );
            Ok(stored)
        }
        .instrument(span)
        .await
    }

    /// `value`, bound to the runtime the pipeline was built on: what an HTTP handler holds of
    /// something that does I/O ([`crate::hop`]).
    #[must_use]
    pub fn on_main<S: Clone + Send + 'static>(&self, value: S) -> OnMain<S> {
        OnMain::new(value, self.main.clone())
    }

    /// The pipeline as an HTTP handler holds it.
    #[must_use]
    pub fn front(&self) -> Front {
        Front {
            pipeline: self.on_main(self.clone()),
            clock: self.core.clock.clone(),
            metrics: Arc::clone(&self.core.metrics),
            agents: Arc::clone(&self.core.agents),
            blocks: Arc::clone(&self.core.blocks),
        }
    }

    /// The handler of `dispatch` jobs.
    #[must_use]
    pub fn dispatch_handler(&self) -> Arc<dyn JobHandler> {
        Arc::new(dispatch::DispatchHandler(Arc::clone(&self.core)))
    }

    /// The handler of `deliver` jobs.
    #[must_use]
    pub fn deliver_handler(&self) -> Arc<dyn JobHandler> {
        Arc::new(deliver::DeliverHandler(Arc::clone(&self.core)))
    }

    /// The handler of `turn_end` jobs.
    #[must_use]
    pub fn turn_end_handler(&self) -> Arc<dyn JobHandler> {
        Arc::new(deliver::TurnEndHandler(Arc::clone(&self.core)))
    }

    /// The services it shares with the transports.
    #[must_use]
    pub fn services(&self) -> &Services {
        &self.core.services
    }

    /// The database.
    #[must_use]
    pub fn db(&self) -> &Db {
        &self.core.db
    }

    /// The clock.
    #[must_use]
    pub fn clock(&self) -> &SharedClock {
        &self.core.clock
    }

    /// The agents.
    #[must_use]
    pub fn agents(&self) -> &Arc<AgentRegistry> {
        &self.core.agents
    }

    /// The blob store.
    #[must_use]
    pub fn blobs(&self) -> &BlobStore {
        &self.core.blobs
    }

    /// The signing keys.
    #[must_use]
    pub fn keys(&self) -> &Keys {
        &self.core.keys
    }

    /// The metrics.
    #[must_use]
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.core.metrics
    }
}

/// The pipeline as an HTTP handler holds it: what is kept in memory is read in place, anything
/// that touches the database runs on the main runtime through [`Front::run`].
#[derive(Debug, Clone)]
pub struct Front {
    pipeline: OnMain<Pipeline>,
    clock: SharedClock,
    metrics: Arc<Metrics>,
    agents: Arc<AgentRegistry>,
    blocks: Arc<crate::moderation::Blocks>,
}

impl Front {
    /// Runs the future `f` makes of the pipeline on the main runtime and waits for it.
    ///
    /// # Errors
    /// The future's own error, or [`Error::Unavailable`] when the main runtime is shutting
    /// down.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Pipeline) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    {
        self.pipeline.run(f).await
    }

    /// The clock.
    #[must_use]
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The metrics.
    #[must_use]
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The agents.
    #[must_use]
    pub fn agents(&self) -> &Arc<AgentRegistry> {
        &self.agents
    }

    /// The blocks in force.
    #[must_use]
    pub fn blocks(&self) -> Vec<crate::moderation::Block> {
        self.blocks.list()
    }
}

#[cfg(test)]
mod tests {
    use super::{DeliverJob, DispatchJob};

    #[test]
    fn job_payloads_carry_a_trace_only_when_there_is_one() {
        // A payload written before traces, or with export off, parses and writes no trace.
        let old: DispatchJob = serde_json::from_str(r#"{"message_id":"m1"}"#).unwrap();
        assert!(old.trace.is_none(), "an old payload has no trace");
        let written = serde_json::to_string(&old).unwrap();
        assert!(
            !written.contains("trace"),
            "nothing is written without one: {written}"
        );
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let with: DeliverJob =
            serde_json::from_str(&format!(r#"{{"response_id":"r1","trace":"{tp}"}}"#)).unwrap();
        assert_eq!(
            with.trace.map(|t| t.to_string()).as_deref(),
            Some(tp),
            "the trace is read back as written"
        );
        let bad: DeliverJob =
            serde_json::from_str(r#"{"response_id":"r1","trace":"nope"}"#).unwrap();
        assert!(
            bad.trace.is_none(),
            "a malformed trace is ignored, the job stands"
        );
    }
}
