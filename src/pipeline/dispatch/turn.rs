//! One dispatch job's turn: the checks that may end it without a call (deleted, held, an
//! agent's own message, a relayed turn its agent's gate refuses, a message merged into a later
//! turn), the history and the earlier messages it takes in, the agent's call (streamed to the
//! transport where both can), and the response made ready to store: policy states minted,
//! sibling agents found, the body serialised.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument as _;

use super::plan::{Answer, Dispatched};
use super::{CALL_SLOT_WAIT, DispatchHandler, MAX_ABSORBED, message};
use crate::error::OutboundError;
use crate::message::{NormalizedMessage, ResponseEvent, Timestamp};
use crate::pipeline::DispatchJob;
use crate::store::messages::{self, StoredMessage};

impl DispatchHandler {
    /// The woken agent's own access rules and rate limits for a relayed turn, judged by
    /// `origin`, the sender of the turn that started the chain; `Some` when they hold it.
    async fn gate_relayed(
        &self,
        agent: &crate::agents::Agent,
        transport: &str,
        origin: &crate::message::Sender,
    ) -> std::result::Result<Option<crate::pipeline::Hold>, OutboundError> {
        let core = &self.0;
        if core.authorize(agent, transport, origin).is_err() {
            return Ok(Some(crate::pipeline::Hold::Refused));
        }
        let over = core.over_rate(agent, transport, origin).await?;
        Ok(over.map(|_| crate::pipeline::Hold::RateLimited))
    }

    /// The earlier messages the turn of `row` takes in, or how its job ends without a call
    /// when the message is left to a later turn (`Err`). Only transports whose conversation
    /// settings merge at all pay for the look-ups.
    async fn conversation(
        &self,
        row: &StoredMessage,
        msg: &NormalizedMessage,
        new_thread: bool,
    ) -> std::result::Result<
        std::result::Result<Vec<crate::pipeline::conversation::Absorbed>, Dispatched>,
        OutboundError,
    > {
        use crate::pipeline::conversation::{MERGED, absorbed, any_from, debounces};
        let conv = self.0.conversation.of(&row.transport);
        if !conv.merges() {
            return Ok(Ok(Vec::new()));
        }
        let db = &self.0.db;
        if messages::outcome_of(db, &row.id).await?.as_deref() == Some(MERGED) {
            return Ok(Err(Dispatched::Taken));
        }
        let debounced = conv.debounce_ms > 0 && debounces(msg);
        let collapses = conv.queue != crate::config::QueueMode::Followup;
        if debounced || collapses {
            let later = messages::unanswered_after(db, &row.thread_id, &row.agent, row.seq).await?;
            if (collapses && !later.is_empty())
                || (debounced && any_from(&later, &msg.sender.address))
            {
                tracing::debug!("merged into a later turn");
                return Ok(Err(Dispatched::Merged));
            }
        }
        if new_thread {
            return Ok(Ok(Vec::new()));
        }
        let before =
            messages::since_last_response(db, &row.thread_id, row.seq, MAX_ABSORBED).await?;
        Ok(Ok(absorbed(&before, &row.agent, &msg.sender.address)))
    }

    pub(super) async fn run(
        &self,
        row: &StoredMessage,
        job: &DispatchJob,
        run: &crate::pipeline::runs::Run,
        windows: &std::result::Result<crate::pipeline::history::Windows, OutboundError>,
    ) -> std::result::Result<Dispatched, OutboundError> {
        if row.deleted_at.is_some() {
            tracing::debug!("the message was deleted before its turn");
            return Ok(Dispatched::Deleted);
        }
        let new_thread = job.new_thread;
        let id = &row.id;
        let mut msg = message(row)?;
        let agent = self.0.agents.get(&row.agent).ok_or_else(|| {
            OutboundError::permanent(format!("agent {} is no longer configured", row.agent))
        })?;
        if msg.sender.address.eq_ignore_ascii_case(&agent.address) {
            tracing::debug!(message = %id, "an agent never answers itself");
            return Ok(Dispatched::Silent {
                absorbed: Vec::new(),
            });
        }
        if let Some(held) = job.held {
            return Ok(Dispatched::Held(held));
        }
        // A turn relayed from another agent passes the woken agent's own gate, judged by the
        // evidence of the sender who started the chain.
        let origin = match job.origin.as_deref() {
            Some(origin) if crate::pipeline::chain::relays(&msg.sender) => {
                if let Some(held) = self.gate_relayed(&agent, &row.transport, origin).await? {
                    return Ok(Dispatched::Held(held));
                }
                Some(origin)
            }
            _ => None,
        };
        let absorbed = match self.conversation(row, &msg, new_thread).await? {
            Ok(absorbed) => absorbed,
            Err(done) => return Ok(done),
        };
        let turns = if new_thread {
            Vec::new()
        } else {
            let relayed = crate::pipeline::chain::relayed_from(&msg).map(|(response, _)| response);
            let windows = windows.as_ref().map_err(Clone::clone)?;
            crate::pipeline::history::before(row, windows, &agent.address, relayed, &absorbed)?
        };
        let mut trimmed = self.0.history.apply(turns);
        // Stored references keep the digest only: mint URLs valid from now. (The message is
        // shared with the caches: it is copied only where it changes.)
        self.0.blobs.refresh_shared_urls(&mut msg);
        let original = self
            .0
            .transports
            .get(&row.transport)
            .filter(|t| t.delivers_in_transaction().is_some())
            .map(|_| Arc::clone(&msg));
        // The messages the turn takes in open it, oldest first.
        let absorbed_ids: Vec<String> = absorbed.iter().map(|a| a.id.clone()).collect();
        if !absorbed.is_empty() {
            let mut parts: Vec<crate::message::Part> =
                absorbed.into_iter().flat_map(|a| a.parts).collect();
            self.0.blobs.refresh_urls(&mut parts);
            let msg = Arc::make_mut(&mut msg);
            parts.append(&mut msg.parts);
            msg.parts = parts;
            tracing::debug!(
                merged = absorbed_ids.len(),
                "earlier messages join the turn"
            );
        }
        for turn in &mut trimmed.turns {
            self.0.blobs.refresh_shared_urls(&mut turn.parts);
        }
        if !trimmed.turns.is_empty() {
            let msg = Arc::make_mut(&mut msg);
            msg.history = Some(trimmed.turns);
            msg.history_cache_breakpoint_after = trimmed.cache_breakpoint_after;
        }
        let call = async {
            // At most the agent's max_concurrent_calls at once; a call that cannot start soon
            // is tried again later rather than held past its job's lease.
            let Ok(Ok(_permit)) =
                tokio::time::timeout(CALL_SLOT_WAIT, agent.limits.calls.acquire()).await
            else {
                return Err(OutboundError::temporary(format!(
                    "agent {} is at its max_concurrent_calls",
                    agent.name
                )));
            };
            let started = Instant::now();
            let transport = self
                .0
                .transports
                .get(&row.transport)
                .filter(|t| agent.backend.streams() && t.streams_progress().is_some());
            let answer = match transport {
                // A streaming answer: its events go to the transport in order, all of them
                // before the final response is stored.
                Some(transport) => {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ResponseEvent>();
                    let original = Arc::clone(&msg);
                    let forward = tokio::spawn(async move {
                        let Some(sink) = transport.streams_progress() else {
                            return;
                        };
                        while let Some(ev) = rx.recv().await {
                            if let Err(e) = sink.progress(&original, &ev).await {
                                tracing::debug!(message = %original.id, error = %e, "progress not passed on");
                            }
                        }
                    });
                    let report = move |ev: ResponseEvent| {
                        let _ = tx.send(ev);
                    };
                    let answer = agent.backend.respond_streaming(&msg, &report).await;
                    drop(report);
                    let _ = forward.await;
                    answer
                }
                None => agent.backend.respond(&msg).await,
            };
            Ok((answer, started))
        };
        // The backend's call: its outbound request carries this span's `traceparent`, and a
        // chat model's backend records the tokens it used on it.
        let call_span = tracing::debug_span!(
            "agent_call",
            otel.kind = "client",
            agent = %agent.name,
            otel.status_code = tracing::field::Empty,
            otel.status_message = tracing::field::Empty,
            gen_ai.request.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
        );
        let call = call.instrument(call_span.clone());
        // A newer message of the thread may interrupt the call (queue mode `interrupt`).
        let (answer, started) = tokio::select! {
            biased;
            () = run.interrupted() => {
                tracing::debug!("interrupted by a newer message");
                return Ok(Dispatched::Interrupted);
            }
            called = call => called?,
        };
        self.0
            .metrics
            .agent_call(&agent.name, started.elapsed(), answer.is_ok());
        if let Err(e) = &answer {
            call_span.record("otel.status_code", "error");
            call_span.record("otel.status_message", tracing::field::display(e));
        }
        // NO_REPLY, a model's way of answering nothing, is no response: nothing goes out (an
        // A2A task still completes).
        let answer = answer.map(|a| a.filter(|r| !r.says_nothing()));
        match &answer {
            Ok(Some(r)) => tracing::debug!(response_id = %r.id, "agent answered"),
            Ok(None) => tracing::debug!("agent had nothing to say"),
            Err(e) => tracing::debug!(error = %e, "agent call failed"),
        }
        let Some(mut response) = answer? else {
            return Ok(Dispatched::Silent {
                absorbed: absorbed_ids,
            });
        };
        response.thread_id.clone_from(&row.thread_id);
        crate::blobs::strip_urls(&mut response.parts);
        let states = crate::policy::mint(
            &mut response,
            &crate::policy::Issue {
                agent: &agent.name,
                thread_id: &row.thread_id,
                message_id: &row.id,
                sender: &msg.sender,
                expires_at: self
                    .0
                    .clock
                    .now_ms()
                    .saturating_add(self.0.policy_state_ttl_ms),
            },
        );
        crate::policy::settle_state(&mut response);
        let siblings = crate::pipeline::chain::siblings(
            &self.0.agents,
            &msg,
            origin.unwrap_or(&msg.sender),
            &job.chain,
            &agent,
            &response,
            Timestamp::from_unix_millis(self.0.clock.now_ms()),
        );
        let body = serde_json::to_string(&response)
            .map_err(|e| OutboundError::permanent(format!("response not serialisable: {e}")))?;
        Ok(Dispatched::Answer(Box::new(Answer {
            response,
            body,
            agent: agent.name.clone(),
            transport: row.transport.clone(),
            trace: crate::telemetry::current(),
            original,
            states,
            siblings,
            absorbed: absorbed_ids,
        })))
    }
}
