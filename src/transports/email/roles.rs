//! Role addresses: `postmaster@` (RFC 5321 §4.5.1: it must be accepted), `abuse@` (RFC 2142)
//! and `dmarc@` (where `docs/protocols/email.md` has operators publish DMARC reports, `rua=`) of
//! every served domain (the mail domain and the host agents' handles are on), and the bare
//! `<Postmaster>`.
//!
//! A message to a role address is taken whatever its sender, kind or authentication (bounces
//! and reports are automatic mail from unauthenticated senders more often than not): at the end
//! of DATA it is stored whole and an [`JOB_KIND`] job is committed with it, before `250`. The
//! job routes it to `email.postmaster` ([`Postmaster`]): forwarded intact to an address, through
//! the relay (or MX) replies take, with our envelope sender and our DKIM signature; or handed to
//! an agent as mail to it. Without a destination the job ends dead at its first attempt — held:
//! `switchboard queue list` shows it, the message stays in the blob store, and `switchboard
//! queue retry` routes it once a destination is set. Role mail is never answered: a reply to a
//! bounce or a DMARC report is backscatter, and one to a forged sender would make the role
//! address a reflector.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::EmailTransport;
use super::smtp::{Rcpt, SessionEnvelope};
use crate::config::Postmaster;
use crate::error::{OutboundError, Result};
use crate::queue::{JobHandler, Queue};
use crate::store::jobs::JobRow;
use crate::store::{Db, blobs};

/// The job kind that routes a message sent to a role address.
pub const JOB_KIND: &str = "email_role";

/// The local parts that name a role (in any case).
const ROLES: [&str; 3] = ["postmaster", "abuse", "dmarc"];

/// What the bounce address of a forward starts with after `bounces+` (then the message's
/// digest), so that its bounce is told apart from a reply's.
pub const BOUNCE_TAG: &str = "role-";

/// The role address `address` (a RCPT TO path) names, lowercase, if it is one: `local@domain`
/// with a role local part and a domain in `served`, or `postmaster` without a domain (RFC 5321
/// §4.1.1.3), which smtp-proto hands over as the empty path (as it does `<>`, which is no valid
/// forward-path, so nothing else is read as it).
#[must_use]
pub fn role_address(address: &str, served: &[String]) -> Option<String> {
    let address = address.trim();
    if address.is_empty() || address.eq_ignore_ascii_case("postmaster") {
        return Some("postmaster".into());
    }
    let (local, domain) = address.rsplit_once('@')?;
    let role = ROLES.iter().find(|r| local.eq_ignore_ascii_case(r))?;
    let domain = served.iter().find(|d| domain.eq_ignore_ascii_case(d))?;
    Some(format!("{role}@{domain}"))
}

/// What an [`JOB_KIND`] job carries: where the stored message is, and its envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoleJob {
    /// SHA-256 of the message, its key in the blob store.
    pub digest: String,
    /// The role addresses it was sent to.
    pub rcpts: Vec<String>,
    /// MAIL FROM (empty for the null sender).
    pub mail_from: String,
    /// The client.
    pub client_ip: IpAddr,
    /// Its HELO name.
    pub helo: String,
    /// Whether the session was under TLS.
    pub tls: bool,
    /// When the message was received (unix ms).
    pub received_at: i64,
}

/// Stores `raw` and commits the job that routes it, before the client is told `250`; returns
/// the job's id. A message received again (the same bytes) is one job.
///
/// # Errors
/// Database errors (the client is told `451` and retries).
pub(super) async fn queue(
    db: &Db,
    queue: &Queue,
    env: &SessionEnvelope<'_>,
    raw: &[u8],
    now: i64,
) -> Result<String> {
    let digest = hex::encode(Sha256::digest(raw));
    let job = RoleJob {
        digest: digest.clone(),
        rcpts: env
            .rcpts
            .iter()
            .filter_map(|r| match r {
                Rcpt::Role(a) => Some(a.clone()),
                _ => None,
            })
            .collect(),
        mail_from: env.mail_from.to_owned(),
        client_ip: env.peer.ip(),
        helo: env.helo.to_owned(),
        tls: env.tls,
        received_at: now,
    };
    let payload = serde_json::to_string(&job).map_err(crate::Error::corrupt)?;
    let id = format!("{JOB_KIND}:{digest}");
    let mut tx = db.begin().await?;
    blobs::put_in(&mut tx, &digest, "message/rfc822", raw, now).await?;
    let enqueued = queue
        .enqueue(&mut tx, JOB_KIND, &[(id.clone(), payload)], now)
        .await?;
    tx.commit().await?;
    queue.hand_over(enqueued);
    Ok(id)
}

/// What hands role mail to an agent: the receiving side, which parses, authenticates and
/// ingests mail.
#[async_trait::async_trait]
pub(super) trait ToAgent: Send + Sync + std::fmt::Debug {
    /// Hands the message of `job` (`raw`) to the agent `name`, as mail it never answers.
    ///
    /// # Errors
    /// Permanent when it can never be handed over; temporary otherwise.
    async fn role_to_agent(
        &self,
        job: &RoleJob,
        raw: &[u8],
        name: &str,
    ) -> std::result::Result<(), OutboundError>;
}

/// Where role mail goes, and what takes it there.
#[derive(Debug)]
pub(super) struct Roles {
    pub(super) postmaster: Option<Postmaster>,
    pub(super) outbound: Arc<EmailTransport>,
    pub(super) queue: Arc<Queue>,
    /// The receiving side, once the listener has started.
    pub(super) inbound: OnceLock<Arc<dyn ToAgent>>,
}

impl Roles {
    /// Routes one job's message.
    async fn route(&self, row: &JobRow) -> std::result::Result<(), OutboundError> {
        let job: RoleJob = serde_json::from_str(&row.payload)
            .map_err(|e| OutboundError::permanent(format!("malformed job: {e}")))?;
        let raw = blobs::get(&self.outbound.db, &job.digest)
            .await?
            .ok_or_else(|| OutboundError::permanent("the stored message is gone"))?
            .data;
        match &self.postmaster {
            None => {
                let subject = subject(&raw);
                tracing::warn!(
                    job = %row.id,
                    rcpts = ?job.rcpts,
                    mail_from = %job.mail_from,
                    subject = %subject,
                    "mail to a role address is held: email.postmaster is not set"
                );
                Err(OutboundError::permanent(format!(
                    "held: email.postmaster is not set (mail to {} from <{}>, subject {subject:?}); \
                     set it, then `switchboard queue retry {}`",
                    job.rcpts.join(", "),
                    job.mail_from,
                    row.id
                )))
            }
            Some(Postmaster::Forward(to)) => self.outbound.forward(&job, &raw, to).await,
            Some(Postmaster::Agent(name)) => {
                let inbound = self.inbound.get().ok_or_else(|| {
                    OutboundError::temporary("the SMTP listener has not started yet")
                })?;
                inbound.role_to_agent(&job, &raw, name).await
            }
        }
    }
}

/// The message's subject on one line, shortened, for the operator.
fn subject(raw: &[u8]) -> String {
    let s = mail_parser::MessageParser::new()
        .parse_headers(raw)
        .and_then(|m| m.subject().map(str::to_owned))
        .unwrap_or_default();
    super::parse::sanitize_line(&s).chars().take(100).collect()
}

/// Handles [`JOB_KIND`] jobs: routes each message, the outcomes committed together.
#[derive(Debug)]
pub(super) struct Handler(pub(super) Arc<Roles>);

#[async_trait::async_trait]
impl JobHandler for Handler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let roles = &self.0;
        let results = join_all(batch.iter().map(|row| roles.route(row))).await;
        let now = roles.outbound.clock.now_ms();
        let mut tx = roles.outbound.db.begin().await?;
        let finished = roles
            .queue
            .finish(&mut tx, owner, batch, &results, now)
            .await?;
        roles.queue.commit(tx, finished).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_addresses_of_served_domains_and_the_bare_postmaster() {
        let served = vec!["agents.test".to_owned(), "switchboard.test".to_owned()];
        for (given, want) in [
            ("postmaster@agents.test", Some("postmaster@agents.test")),
            ("PostMaster@Agents.Test", Some("postmaster@agents.test")),
            ("abuse@switchboard.test", Some("abuse@switchboard.test")),
            ("DMARC@agents.test", Some("dmarc@agents.test")),
            ("Postmaster", Some("postmaster")),
            ("", Some("postmaster")),
            ("postmaster@elsewhere.test", None),
            ("abuse", None),
            ("hostmaster@agents.test", None),
            ("postmaster+x@agents.test", None),
        ] {
            assert_eq!(role_address(given, &served).as_deref(), want, "{given:?}");
        }
    }
}
