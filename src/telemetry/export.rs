//! The exporter: a background task that takes finished spans from a bounded queue and posts
//! them in batches to the collector (`{otlp_endpoint}/v1/traces`, protobuf). It never blocks
//! the pipeline: the layer drops a span when the queue is full, and a batch the collector does
//! not take is dropped too; both are counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::otlp::{SpanRecord, export_request};

/// Spans exported and dropped since start, read by the metrics at scrape time
/// (`switchboard_otlp_spans_total{outcome}`).
#[derive(Debug)]
pub(crate) struct Counts {
    exported: AtomicU64,
    dropped: AtomicU64,
}

impl Counts {
    const fn new() -> Self {
        Self {
            exported: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    pub(super) fn dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    fn exported(&self, n: u64) {
        self.exported.fetch_add(n, Ordering::Relaxed);
    }

    /// `(exported, dropped)` so far.
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.exported.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

/// The process's counts (one exporter per process, as there is one global subscriber).
pub(crate) static COUNTS: Counts = Counts::new();

/// Where and how batches go.
pub(super) struct Exporter {
    pub(super) client: reqwest::Client,
    /// `{otlp_endpoint}/v1/traces`.
    pub(super) url: String,
    pub(super) service_name: String,
    pub(super) batch_size: usize,
    pub(super) flush: Duration,
}

impl Exporter {
    /// Runs until every sender is gone: batches of at most `batch_size` spans, each sent when
    /// full or `flush` after its first span; a flush request sends what is queued at once and
    /// is answered when it has been sent.
    pub(super) async fn run(
        self,
        mut rx: mpsc::Receiver<SpanRecord>,
        mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        let mut failing = false;
        loop {
            let mut batch = Vec::new();
            let mut answer = None;
            tokio::select! {
                first = rx.recv() => match first {
                    Some(s) => batch.push(s),
                    None => return,
                },
                Some(done) = flushes.recv() => answer = Some(done),
            }
            if answer.is_none() {
                let deadline = tokio::time::sleep(self.flush);
                tokio::pin!(deadline);
                while batch.len() < self.batch_size {
                    tokio::select! {
                        next = rx.recv() => match next {
                            Some(s) => batch.push(s),
                            None => break,
                        },
                        Some(done) = flushes.recv() => {
                            answer = Some(done);
                            break;
                        }
                        () = &mut deadline => break,
                    }
                }
            }
            if answer.is_some() {
                while let Ok(s) = rx.try_recv() {
                    batch.push(s);
                }
            }
            for chunk in batch.chunks(self.batch_size) {
                self.send(chunk, &mut failing).await;
            }
            if let Some(done) = answer {
                let _ = done.send(());
            }
        }
    }

    async fn send(&self, spans: &[SpanRecord], failing: &mut bool) {
        let body = export_request(
            &self.service_name,
            "switchboard",
            env!("CARGO_PKG_VERSION"),
            spans,
        );
        let n = spans.len() as u64;
        let sent = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send()
            .await;
        let problem = match sent {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("HTTP {}", r.status().as_u16())),
            Err(e) => Some(e.to_string()),
        };
        match problem {
            None => {
                COUNTS.exported(n);
                if std::mem::take(failing) {
                    tracing::info!(url = %self.url, "trace export resumed");
                }
            }
            Some(problem) => {
                COUNTS.dropped(n);
                // Said once per outage, not once per batch.
                if !std::mem::replace(failing, true) {
                    tracing::warn!(url = %self.url, error = %problem, "trace export failed: spans are dropped until the collector answers");
                }
            }
        }
    }
}
