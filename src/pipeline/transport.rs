//! The contract between the pipeline and the transports: [`Transport`], the outbound half every
//! transport implements (render and deliver a response, and optionally stream progress or end
//! a turn), [`Delivery`], what it is handed, and [`TransportRegistry`], where the pipeline finds
//! a transport by the name messages were ingested under. The pipeline owns this contract and
//! knows transports only through it; transports depend on the pipeline, never the reverse.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::OutboundError;
use crate::message::{NormalizedMessage, NormalizedResponse, ResponseEvent};

/// One response to deliver, with the message it answers (for reply context: ids, addressing,
/// threading headers).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The delivery job's stable id: the same on every retry, so the far side can dedupe.
    pub job_id: String,
    /// This attempt's number (1-based).
    pub attempt: i64,
    /// What the agent said.
    pub response: NormalizedResponse,
    /// What it answers (shared with the turn that answered it).
    pub original: std::sync::Arc<NormalizedMessage>,
    /// The response woke sibling agents (it mentioned them): their answers follow in the same
    /// thread. A transport that gives its caller one answer (A2A) holds this one back until the
    /// chain's last answer.
    pub continues: bool,
}

/// What a transport does once the transaction it wrote a delivery in has committed.
pub type AfterCommit = Box<dyn FnOnce() + Send>;

/// The outbound half of a transport.
#[async_trait::async_trait]
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// The name messages are ingested under and deliveries routed by.
    fn name(&self) -> &str;

    /// Renders and sends a response.
    ///
    /// # Errors
    /// Temporary failures are retried with backoff; permanent ones end the delivery.
    async fn deliver(&self, delivery: &Delivery) -> Result<(), OutboundError>;

    /// How the transport delivers inside the transaction that stores a response, if its
    /// deliveries are writes to switchboard's own database and nothing else (A2A: the response
    /// becomes the task's status and artifacts). Such a response is delivered there, without a
    /// delivery job.
    fn delivers_in_transaction(&self) -> Option<&dyn DeliversInTransaction> {
        None
    }

    /// Whether the transport renders policy parts itself (A2A: a data part, and the task
    /// state). For the others the pipeline turns each into its text and a link to the landing
    /// page of its state ([`crate::policy::as_text`]) before [`Transport::deliver`].
    fn carries_policy_parts(&self) -> bool {
        false
    }

    /// Where a streaming backend's events go while it answers, if the transport shows them
    /// (otherwise they are not forwarded).
    fn streams_progress(&self) -> Option<&dyn StreamsProgress> {
        None
    }

    /// Whether [`Transport::deliver`] only schedules the sending, in jobs of the transport's own
    /// that count each attempt in the delivery metric themselves (ActivityPub: one POST per
    /// inbox). The pipeline's delivery job then counts no delivery attempt of its own.
    fn sends_in_jobs(&self) -> bool {
        false
    }

    /// Retention: erases what the transport keeps in tables of its own about messages stored
    /// before `before` (unix ms), at most a batch per call; returns how many rows. Called every
    /// minute when `database.retention_days` is set ([`super::Pipeline::spawn_retention`]).
    ///
    /// # Errors
    /// Database errors (logged; the next call tries again).
    async fn erase_before(&self, before: i64) -> crate::error::Result<u64> {
        let _ = before;
        Ok(0)
    }

    /// Who may send on this transport, for the safety rules ([`crate::limits`]).
    fn exposure(&self) -> Exposure {
        Exposure::default()
    }

    /// Who ends a turn that had no response, if the transport has to (only then does the
    /// pipeline schedule a `turn_end` job for messages whose turn ends without a response).
    fn ends_turns(&self) -> Option<&dyn EndsTurns> {
        None
    }
}

/// A transport that delivers by writing to switchboard's own database
/// ([`Transport::delivers_in_transaction`]).
#[async_trait::async_trait]
pub trait DeliversInTransaction: Send + Sync {
    /// Delivers a response inside `tx`, the transaction that stores it; returns what to do once
    /// that transaction has committed.
    ///
    /// # Errors
    /// Temporary failures hand the response to a delivery job instead; permanent ones end the
    /// delivery.
    async fn deliver_in(
        &self,
        tx: &mut crate::store::Tx,
        delivery: &Delivery,
    ) -> Result<AfterCommit, OutboundError>;
}

/// A transport that shows an answer while it is produced ([`Transport::streams_progress`]).
#[async_trait::async_trait]
pub trait StreamsProgress: Send + Sync {
    /// The agent reported part of its answer to `original` while producing it (best effort:
    /// the final response is delivered by [`Transport::deliver`] as always). Called in order,
    /// and every call returns before the final response is stored.
    ///
    /// # Errors
    /// Logged and otherwise ignored.
    async fn progress(
        &self,
        original: &NormalizedMessage,
        event: &ResponseEvent,
    ) -> Result<(), OutboundError>;
}

/// A transport that must end a turn its agent did not answer ([`Transport::ends_turns`]).
#[async_trait::async_trait]
pub trait EndsTurns: Send + Sync {
    /// The agent ended `original`'s turn without a response: it had nothing to say
    /// (`failure` is `None`), or its dispatch failed for good (`failure` says why, for the
    /// log; callers are told no internal detail). An A2A task still has to reach a terminal
    /// state.
    ///
    /// # Errors
    /// Temporary failures are retried with backoff.
    async fn unanswered(
        &self,
        original: &NormalizedMessage,
        failure: Option<&str>,
    ) -> Result<(), OutboundError>;
}

/// Who may send on a transport, for the safety rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exposure {
    /// Anyone on the open networks may send (ActivityPub, email, A2A): the built-in rate limits
    /// apply ([`crate::config::DEFAULT_PER_SENDER`]). Not so for the operator's own API, whose
    /// sender is whatever the holder of the operator's token says.
    pub open: bool,
    /// An answer goes back in the response to the sender's own request (A2A), never as a new
    /// message the sender might answer again.
    pub answers_in_request: bool,
    /// A sender's address names its server (`@user@host`, ActivityPub): the agents' per-host
    /// rate limits apply.
    pub per_host: bool,
}

/// The transports of this instance, by name.
#[derive(Debug, Default, Clone)]
pub struct TransportRegistry {
    by_name: HashMap<String, Arc<dyn Transport>>,
}

impl TransportRegistry {
    /// Registers a transport (replacing one of the same name).
    pub fn register(&mut self, t: Arc<dyn Transport>) {
        self.by_name.insert(t.name().to_owned(), t);
    }

    /// The transport called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<dyn Transport>> {
        self.by_name.get(name).cloned()
    }

    /// Every transport.
    pub fn all(&self) -> impl Iterator<Item = &Arc<dyn Transport>> {
        self.by_name.values()
    }

    /// The exposure of the transport called `name` (closed when there is none).
    #[must_use]
    pub fn exposure(&self, name: &str) -> Exposure {
        self.by_name
            .get(name)
            .map_or_else(Exposure::default, |t| t.exposure())
    }
}
