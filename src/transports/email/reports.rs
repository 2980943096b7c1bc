//! Reports of abuse (ActivityPub `Flag`, [`crate::store::reports`]) mailed to
//! `moderation.reports_to`: the transport that received the report commits a
//! [`crate::store::reports::JOB_KIND`] job with it, and this handler sends one plain-text mail
//! per report through the relay (or MX) replies take, from `postmaster@{mail domain}`, signed
//! with our DKIM key. A relay that defers is retried like any job; the report stays stored
//! whatever happens to the mail.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use lettre::Message;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};

use super::parse::sanitize_line;
use super::{EmailTransport, outbound};
use crate::error::{OutboundError, Result};
use crate::queue::{JobHandler, Queue};
use crate::store::jobs::JobRow;
use crate::store::reports::{self, MailJob, ReportRow};

/// What the bounce address of a report's mail starts with after `bounces+` (then the report's
/// id), so that its bounce is told apart from a reply's.
pub const BOUNCE_TAG: &str = "report-";

/// The subject and plain text of a report's mail.
#[must_use]
pub fn report_text(r: &ReportRow) -> (String, String) {
    let about = r.agent.as_deref().unwrap_or("this server");
    let subject = sanitize_line(&format!("Report from {} about {about}", r.host));
    let objects: Vec<String> = serde_json::from_str(&r.objects).unwrap_or_default();
    let when = chrono::DateTime::from_timestamp_millis(r.received_at)
        .unwrap_or_default()
        .to_rfc3339();
    let mut text = format!(
        "A report of abuse arrived from {host} ({transport}).\n\n\
         Reporter: {reporter}\nAgent: {about}\nReceived: {when}\nReport: {id}\nActivity: {activity}\n\n\
         Reported:\n",
        host = r.host,
        transport = r.transport,
        reporter = r.reporter,
        id = r.id,
        activity = r.activity_id,
    );
    for o in &objects {
        let _ = writeln!(text, "  {o}");
    }
    text.push_str("\nComment:\n");
    text.push_str(if r.content.trim().is_empty() {
        "(none)"
    } else {
        r.content.trim()
    });
    text.push('\n');
    (subject, text)
}

/// The report's mail, unsigned.
///
/// # Errors
/// Unusable addresses; lettre refusing the message.
pub fn build_report(
    r: &ReportRow,
    from: &str,
    to: &str,
    message_id: &str,
    date: SystemTime,
) -> std::result::Result<Vec<u8>, outbound::BuildError> {
    let (subject, text) = report_text(r);
    let mailbox = |a: &str| {
        a.parse::<lettre::message::Mailbox>()
            .map_err(|_| outbound::BuildError::Address(sanitize_line(a)))
    };
    let msg = Message::builder()
        .from(mailbox(from)?)
        .to(mailbox(to)?)
        .subject(subject)
        .message_id(Some(format!("<{message_id}>")))
        .date(date)
        .header(ContentType::TEXT_PLAIN)
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-generated".into(),
        ))
        .body(text)
        .map_err(|e| outbound::BuildError::Message(e.to_string()))?;
    Ok(msg.formatted())
}

impl EmailTransport {
    /// Mails the stored report `job` names to its address.
    async fn mail_report(&self, job: &MailJob) -> std::result::Result<(), OutboundError> {
        let r = reports::get(&self.db, &job.report_id)
            .await?
            .ok_or_else(|| OutboundError::permanent("the report is gone"))?;
        let from = format!("postmaster@{}", self.mail_domain);
        let message_id = format!("report-{}@{}", r.id, self.mail_domain);
        let date = SystemTime::UNIX_EPOCH
            + Duration::from_millis(u64::try_from(self.clock.now_ms()).unwrap_or(0));
        let raw = build_report(&r, &from, &job.to, &message_id, date)
            .map_err(|e| OutboundError::permanent(e.to_string()))?;
        let signed = self.sign(&raw, outbound::BodySigning::Relaxed).await?;
        let bounce = self.bounce_address(&format!(
            "{BOUNCE_TAG}{}",
            r.id.replace(|c: char| !c.is_ascii_alphanumeric(), "")
        ));
        let envelope = lettre::address::Envelope::new(
            bounce.parse().ok(),
            vec![
                job.to
                    .parse()
                    .map_err(|_| OutboundError::permanent("unusable moderation.reports_to"))?,
            ],
        )
        .map_err(|e| OutboundError::permanent(e.to_string()))?;
        self.send(&envelope, &signed).await?;
        tracing::info!(report = %r.id, to = %job.to, "report mailed");
        Ok(())
    }
}

/// Handles [`reports::JOB_KIND`] jobs: one mail each, the outcomes committed together.
#[derive(Debug)]
pub(super) struct Handler {
    pub(super) outbound: Arc<EmailTransport>,
    pub(super) queue: Arc<Queue>,
}

#[async_trait::async_trait]
impl JobHandler for Handler {
    async fn handle(&self, owner: &str, batch: &[JobRow]) -> Result<()> {
        let results = join_all(batch.iter().map(|row| async move {
            let job: MailJob = serde_json::from_str(&row.payload)
                .map_err(|e| OutboundError::permanent(format!("malformed job: {e}")))?;
            self.outbound.mail_report(&job).await
        }))
        .await;
        let now = self.outbound.clock.now_ms();
        let mut tx = self.outbound.db.begin().await?;
        let finished = self
            .queue
            .finish(&mut tx, owner, batch, &results, now)
            .await?;
        self.queue.commit(tx, finished).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_mail_names_the_reporter_the_objects_and_the_comment_on_safe_lines() {
        let r = ReportRow {
            id: "0190-r1".into(),
            activity_id: "https://bad.example/flags/1".into(),
            transport: "activitypub".into(),
            reporter: "https://bad.example/actor".into(),
            host: "bad.example\r\nBcc: x@y.z".into(),
            agent: Some("echo".into()),
            objects:
                r#"["https://sb.example/agents/echo","https://sb.example/agents/echo/notes/1"]"#
                    .into(),
            content: "spam, twice\r\nBcc: victim@example.net".into(),
            received_at: 1_795_000_000_000,
        };
        let raw = build_report(
            &r,
            "postmaster@agents.test",
            "mod@example.org",
            "report-1@agents.test",
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000),
        )
        .unwrap();
        let parsed = mail_parser::MessageParser::default().parse(&raw).unwrap();
        assert!(
            parsed
                .subject()
                .unwrap()
                .starts_with("Report from bad.example")
        );
        assert!(parsed.header("Bcc").is_none());
        let body = parsed.body_text(0).unwrap();
        for want in [
            "Reporter: https://bad.example/actor",
            "Agent: echo",
            "  https://sb.example/agents/echo/notes/1",
            "spam, twice",
        ] {
            assert!(body.contains(want), "{want} in {body}");
        }
        let text = String::from_utf8_lossy(&raw);
        assert!(text.contains("Auto-Submitted: auto-generated"), "{text}");
    }
}
