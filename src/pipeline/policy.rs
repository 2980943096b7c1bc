//! The pipeline's half of the policy round trip ([`crate::policy`]): checking a presented
//! state ahead of ingest, and the turn a state's landing page stores when its link is followed.

use super::{IngestOutcome, Pipeline};
use crate::error::{Error, Result};
use crate::message::{NormalizedMessage, Part, PolicyResolution, Timestamp};
use crate::policy::{self, Presented, Refusal};
use crate::store::messages;
use crate::store::policy::{self as sql, StateRow};

/// What following a state's link did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkOutcome {
    /// The resolution was stored as a new turn of the thread, for the agent to answer.
    Resolved,
    /// This link had been followed already and its turn stored: nothing new.
    AlreadyResolved,
}

impl Pipeline {
    /// Checks the policy state `msg` presents, if any, as ingest will (same agent, thread and
    /// sender, unused, unexpired), without consuming it: a transport that must change its own
    /// records before ingest (A2A: the task resumes) asks first, so a refused state leaves
    /// them as they were. Ingest checks again, and only its check counts.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the [`Refusal`]; database errors.
    pub async fn check_policy_state(
        &self,
        transport: &str,
        agent: &str,
        msg: &NormalizedMessage,
    ) -> Result<()> {
        let Some(claim) = &msg.policy_resolution else {
            return Ok(());
        };
        let mut claim = claim.clone();
        let mut tx = self.core.db.begin().await?;
        let turn = Presented {
            agent,
            transport,
            thread_key: &msg.thread_id,
            sender: &msg.sender,
            message_id: &msg.id,
        };
        let checked = policy::verify_in(&mut tx, &mut claim, &turn, self.core.clock.now_ms()).await;
        // Dropped, not committed: the state stays unused.
        drop(tx);
        match checked? {
            Ok(()) => Ok(()),
            Err(r) => {
                self.core.metrics.policy_state(r.label());
                Err(r.into())
            }
        }
    }

    /// The state `state` as minted, for its landing page; `None` when unknown.
    ///
    /// # Errors
    /// Database errors.
    pub async fn policy_state(&self, state: &str) -> Result<Option<StateRow>> {
        sql::get(&self.core.db, state).await
    }

    /// The landing page of `state` was submitted: stores a turn of the state's thread, from the
    /// sender the policy part went to, presenting the state (so ingest consumes it and the
    /// agent gets a verified `policy_resolution`), answered like any turn of that thread. The
    /// turn's wire context is the message the policy part answered, so the agent's reply is
    /// threaded and addressed as that one was. Submitting twice stores one turn.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the [`Refusal`] for a state that cannot be used; what ingest
    /// refuses (access rules, rate limits); database errors.
    pub async fn resolve_policy_link(&self, state: &str) -> Result<LinkOutcome> {
        let now = self.core.clock.now_ms();
        let refused = |r: Refusal| {
            self.core.metrics.policy_state(r.label());
            Err(Error::from(r))
        };
        let Some(row) = sql::get(&self.core.db, state).await? else {
            return refused(Refusal::Unknown);
        };
        let external_id = format!("policy:{state}");
        if row.consumed_at.is_some() {
            // The same link submitted again gets the turn it stored; anything else is a replay.
            if row
                .consumed_by
                .as_deref()
                .is_some_and(|by| by.starts_with("policy-link:"))
            {
                return Ok(LinkOutcome::AlreadyResolved);
            }
            return refused(Refusal::Replayed);
        }
        if row.expires_at <= now {
            return refused(Refusal::Expired);
        }
        let original = messages::get(&self.core.db, &row.message_id)
            .await?
            .ok_or_else(|| Error::NotFound("the message this policy answered".into()))?;
        let original =
            NormalizedMessage::from_stored_json(&original.body).map_err(Error::corrupt)?;
        let thread = crate::store::threads::get(&self.core.db, &row.thread_id)
            .await?
            .ok_or_else(|| Error::NotFound("the thread this policy belongs to".into()))?;
        // A transport that carries policy parts itself (A2A) takes the state on its own wire,
        // where the turn resumes what it belongs to; its states have no landing page.
        if self
            .core
            .transports
            .get(&thread.transport)
            .is_none_or(|t| t.carries_policy_parts())
        {
            return refused(Refusal::Foreign);
        }
        let msg = NormalizedMessage {
            id: format!("policy-link:{}", uuid::Uuid::now_v7()),
            thread_id: thread.thread_key,
            in_reply_to: Some(row.response_id.clone()),
            sender: original.sender,
            recipient: original.recipient,
            parts: vec![Part::text(format!(
                "[{} completed through its link]",
                row.kind
            ))],
            content_warning: None,
            sensitive: false,
            history: None,
            history_cache_breakpoint_after: None,
            recipient_capabilities: original.recipient_capabilities,
            received_via: original.received_via,
            received_at: Timestamp::from_unix_millis(now),
            raw: original.raw,
            policy_resolution: Some(PolicyResolution {
                kind: row.kind.as_str().into(),
                in_reply_to_state: row.state.clone(),
                completed_at: Timestamp::from_unix_millis(now),
                verified: false,
                evidence: None,
                data: None,
            }),
            received_trace: None,
            // Answered like the message it completes, so its transport replies the same way.
            reply_context: original.reply_context,
            extra: crate::message::Extra::new(),
        };
        let IngestOutcome { duplicate, .. } =
            self.ingest(&thread.transport, &external_id, msg).await?;
        Ok(if duplicate {
            LinkOutcome::AlreadyResolved
        } else {
            LinkOutcome::Resolved
        })
    }
}
