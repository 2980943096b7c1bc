//! Reports of abuse received from remote servers (ActivityPub `Flag`), the `reports` table
//! (`migrations/*/20261127000200_reports.sql`): stored once per report activity, listed for the
//! operator (the read API's `GET /api/v1/reports`, the console's Reports page) and, when
//! `moderation.reports_to` is set, forwarded by mail by a [`JOB_KIND`] job committed with the
//! row.

use crate::error::Result;
use crate::store::{Arg, Db, Tx};

/// The job kind that mails one stored report to `moderation.reports_to` (run by the email
/// transport; payload [`MailJob`]).
pub const JOB_KIND: &str = "report_mail";

/// What a [`JOB_KIND`] job carries.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MailJob {
    /// The stored report.
    pub report_id: String,
    /// Where it goes.
    pub to: String,
}

/// A report to store.
#[derive(Debug, Clone)]
pub struct NewReport<'a> {
    /// Our id for it.
    pub id: &'a str,
    /// The report activity's id: a report is stored once.
    pub activity_id: &'a str,
    /// The transport it came by (`activitypub`).
    pub transport: &'a str,
    /// Who reported: the actor IRI (often a server's instance actor).
    pub reporter: &'a str,
    /// The reporter's host.
    pub host: &'a str,
    /// The local agent reported, when one is named.
    pub agent: Option<&'a str>,
    /// The reported objects of ours (actor and note IRIs), as a JSON array.
    pub objects: &'a str,
    /// The reporter's comment.
    pub content: &'a str,
}

/// A stored report.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ReportRow {
    /// Our id.
    pub id: String,
    /// The report activity's id.
    pub activity_id: String,
    /// The transport it came by.
    pub transport: String,
    /// Who reported.
    pub reporter: String,
    /// The reporter's host.
    pub host: String,
    /// The local agent reported, if any.
    pub agent: Option<String>,
    /// The reported objects, a JSON array of IRIs.
    pub objects: String,
    /// The reporter's comment.
    pub content: String,
    /// When it arrived (unix ms).
    pub received_at: i64,
}

const COLS: &str =
    "id, activity_id, transport, reporter, host, agent, objects, content, received_at";

/// Stores a report unless its activity was stored before; returns whether it was stored.
///
/// # Errors
/// Database errors.
pub async fn insert(tx: &mut Tx, r: &NewReport<'_>, now: i64) -> Result<bool> {
    let n = tx
        .execute(
            &format!(
                "INSERT INTO reports ({COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT DO NOTHING"
            ),
            &[
                Arg::Text(r.id),
                Arg::Text(r.activity_id),
                Arg::Text(r.transport),
                Arg::Text(r.reporter),
                Arg::Text(r.host),
                Arg::OptText(r.agent),
                Arg::Text(r.objects),
                Arg::Text(r.content),
                Arg::Int(now),
            ],
        )
        .await?;
    Ok(n > 0)
}

/// One report by id.
///
/// # Errors
/// Database errors.
pub async fn get(db: &Db, id: &str) -> Result<Option<ReportRow>> {
    db.fetch_optional(
        &format!("SELECT {COLS} FROM reports WHERE id = $1"),
        &[Arg::Text(id)],
    )
    .await
}

/// The newest reports first, at most `limit`, of one agent when `agent` is given.
///
/// # Errors
/// Database errors.
pub async fn list(db: &Db, agent: Option<&str>, limit: i64) -> Result<Vec<ReportRow>> {
    match agent {
        Some(a) => {
            db.fetch_all(
                &format!(
                    "SELECT {COLS} FROM reports WHERE agent = $1 \
                     ORDER BY received_at DESC, id DESC LIMIT $2"
                ),
                &[Arg::Text(a), Arg::Int(limit)],
            )
            .await
        }
        None => {
            db.fetch_all(
                &format!("SELECT {COLS} FROM reports ORDER BY received_at DESC, id DESC LIMIT $1"),
                &[Arg::Int(limit)],
            )
            .await
        }
    }
}
