//! What email needs to answer a mail, kept with its message as the reply context
//! ([`crate::message::reply_context`]): whether it may be answered at all (role mail never is),
//! who the answer goes to and from, whether the sender's From is its own, and what threads the
//! answer under the mail.

use serde::{Deserialize, Serialize};

use super::wire::{Mailbox, Summary};
use crate::error::OutboundError;
use crate::message::{AuthMethod, NormalizedMessage};

/// The reply context of a mail's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyContext {
    /// The role addresses the copy stands for (role mail handed to an agent): never answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The agent's address the sender wrote to (plus tag and all), the reply's From; absent
    /// for a message stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_address: Option<String>,
    /// The thread key the mail was filed under: the reply's Message-ID is remembered under it,
    /// so an answer to the reply finds the thread.
    pub thread_key: String,
    /// The From address is the sender's own (aligned DKIM, or a DMARC pass): only then do its
    /// From and Reply-To get an answer, unless the agent answers unauthenticated mail too.
    pub from_authenticated: bool,
    /// The first `From` mailbox.
    pub from: Option<Mailbox>,
    /// The first `Reply-To` mailbox.
    pub reply_to: Option<Mailbox>,
    /// The envelope sender (`MAIL FROM`), empty for the null sender.
    pub mail_from: String,
    /// `Message-ID`, which the reply answers.
    pub message_id: Option<String>,
    /// `In-Reply-To` (used for the reply's References when the mail has none).
    pub in_reply_to: Vec<String>,
    /// `References`.
    pub references: Vec<String>,
    /// The subject the reply answers (`Re: …`).
    pub subject: Option<String>,
}

impl ReplyContext {
    /// The context of a mail summarised as `summary` (its message's `raw`), filed under
    /// `thread_key`, its From authenticated or not.
    #[must_use]
    pub fn of_summary(summary: &Summary, thread_key: String, from_authenticated: bool) -> Self {
        Self {
            roles: summary.roles.clone(),
            agent_address: summary.agent_address.clone(),
            thread_key,
            from_authenticated,
            from: summary.from.clone(),
            reply_to: summary.reply_to.clone(),
            mail_from: summary.envelope.mail_from.clone(),
            message_id: summary.message_id.clone(),
            in_reply_to: summary.in_reply_to.clone(),
            references: summary.references.clone(),
            subject: summary.subject.clone(),
        }
    }

    /// The reply context of `msg`: the one stored with it, else, for a message stored before
    /// reply contexts existed, the same fields read from its `raw` summary, where such a
    /// message kept them (a missing thread key is the message's thread; a missing From flag
    /// counts a DMARC pass as authenticated). That fallback is all that reads `raw` to reply.
    ///
    /// # Errors
    /// Permanent: the stored context does not read.
    pub fn of(msg: &NormalizedMessage) -> Result<Self, OutboundError> {
        let unreadable = |e: &dyn std::fmt::Display| {
            OutboundError::permanent(format!("the mail's reply context does not read: {e}"))
        };
        if let Some(ctx) = msg.reply_context::<Self>().map_err(|e| unreadable(&e))? {
            return Ok(ctx);
        }
        // A `raw` that is no summary (none at all, say) has no reply address: the delivery
        // fails for that reason, as it did when `raw` was read field by field.
        let summary = Summary::deserialize(&msg.raw).unwrap_or_default();
        let thread_key = summary
            .thread_key
            .clone()
            .unwrap_or_else(|| msg.thread_id.clone());
        let from_authenticated = summary
            .from_authenticated
            .unwrap_or(msg.sender.auth_method == AuthMethod::EmailDmarc);
        Ok(Self::of_summary(&summary, thread_key, from_authenticated))
    }
}
