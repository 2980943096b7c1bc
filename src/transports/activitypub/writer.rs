//! Group commit of the inbox's own rows: each woken note (`ap_objects`) with its activity id
//! (`ap_seen`). Concurrent inbox requests hand their rows to one task, which commits whatever
//! has queued up in a single transaction, so a burst costs a few commits instead of one each.

use tokio::sync::{mpsc, oneshot};

use super::store::{self, NewObject};
use crate::error::{Error, Result};
use crate::store::Db;

/// An owned note row and the activity id to mark seen.
#[derive(Debug)]
pub(super) struct Pending {
    pub id: String,
    pub agent: String,
    pub author: String,
    pub message_id: String,
    pub thread_key: String,
    pub public: bool,
    pub body: String,
    pub activity_id: String,
    pub now: i64,
    pub reply: oneshot::Sender<Result<()>>,
}

const MAX_BATCH: usize = 256;
/// Seen activity ids are kept this long: longer than any sender retries (Mastodon: about a week).
pub(super) const SEEN_RETENTION_MS: i64 = 14 * 86_400_000;
const CLEANUP_EVERY_MS: i64 = 3_600_000;

/// Starts the writer; the sender hands it rows.
pub(super) fn spawn(db: Db) -> mpsc::Sender<Pending> {
    let (tx, rx) = mpsc::channel(4096);
    tokio::spawn(run(db, rx));
    tx
}

async fn run(db: Db, mut rx: mpsc::Receiver<Pending>) {
    let mut last_cleanup = 0;
    while let Some(first) = rx.recv().await {
        if first.now - last_cleanup > CLEANUP_EVERY_MS {
            last_cleanup = first.now;
            match store::forget_seen_before(&db, first.now - SEEN_RETENTION_MS).await {
                Ok(n) if n > 0 => tracing::debug!(n, "forgot old activity ids"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "forgetting old activity ids failed"),
            }
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let result = commit(&db, &batch).await;
        for p in batch {
            let r = match &result {
                Ok(()) => Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e, "storing inbox rows failed");
                    Err(Error::Unavailable)
                }
            };
            let _ = p.reply.send(r);
        }
    }
}

async fn commit(db: &Db, batch: &[Pending]) -> Result<()> {
    let mut tx = db.begin().await?;
    for p in batch {
        store::insert_object(
            &mut tx,
            &NewObject {
                id: &p.id,
                kind: "in",
                agent: &p.agent,
                author: &p.author,
                message_id: Some(&p.message_id),
                thread_key: &p.thread_key,
                public: p.public,
                body: &p.body,
            },
            p.now,
        )
        .await?;
        store::mark_seen_tx(&mut tx, &p.activity_id, p.now).await?;
    }
    tx.commit().await
}
