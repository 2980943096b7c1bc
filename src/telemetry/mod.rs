//! Logging with `tracing` (pretty for people, JSON for log pipelines) and, when
//! `[telemetry] otlp_endpoint` is set, the export of switchboard's spans as OpenTelemetry
//! traces over OTLP/HTTP.
//!
//! A trace follows one message: the inbound request's span (its parent the caller's W3C
//! `traceparent`, when it sent one), `ingest`, then `dispatch` and `deliver` in queue workers —
//! possibly on another instance, so the context travels in the jobs' payloads as a
//! [`TraceParent`] — and the agent backend's call, whose outbound request carries the
//! `traceparent` of its span ([`inject`]). With no endpoint set nothing of this is kept: no
//! span data, no ids, nothing in the jobs.

mod context;
mod export;
mod layer;
pub mod otlp;

use std::io::IsTerminal;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::{LookupSpan as _, Registry};
use tracing_subscriber::util::SubscriberInitExt as _;

pub use context::{InvalidTraceParent, TraceParent, lenient};

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// The `traceparent` header.
pub const TRACEPARENT: &str = "traceparent";

/// Asks the exporter to send what it holds (at shutdown).
#[derive(Debug, Clone)]
pub struct Flusher(mpsc::Sender<oneshot::Sender<()>>);

impl Flusher {
    /// Sends every span finished so far, waiting `within` at most.
    pub async fn flush(&self, within: Duration) {
        let (done, wait) = oneshot::channel();
        if self.0.send(done).await.is_ok() {
            let _ = tokio::time::timeout(within, wait).await;
        }
    }
}

/// Installs the global subscriber once; later calls (tests) are ignored. `RUST_LOG` overrides
/// the configured filter. Colours only when standard error is a terminal: a journal, a file or
/// a container log gets plain text. With an OTLP endpoint, switchboard's spans (from `debug`
/// up, whatever the log filter) are also exported by a background task on the current Tokio
/// runtime; the returned [`Flusher`] sends what is left at shutdown.
///
/// # Errors
/// [`crate::Error::Startup`] when the exporter's HTTP client cannot be built.
pub fn init(cfg: &LogConfig, telemetry: &TelemetryConfig) -> crate::Result<Option<Flusher>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cfg.filter));
    let Some(endpoint) = &telemetry.otlp_endpoint else {
        // Without export, the subscriber is the plain formatter it always was.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal());
        let _ = match cfg.format {
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
            LogFormat::Pretty => builder.try_init(),
        };
        return Ok(None);
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| crate::Error::Startup(format!("trace exporter: {e}")))?;
    let (tx, rx) = mpsc::channel(telemetry.queue_size);
    let (flush_tx, flushes) = mpsc::channel(4);
    let exporter = export::Exporter {
        client,
        url: format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        service_name: telemetry.service_name.clone(),
        batch_size: telemetry.batch_size,
        flush: Duration::from_millis(telemetry.flush_ms),
    };
    let spans = layer::OtlpLayer {
        tx,
        now_unix_nano: crate::clock::system_unix_nanos,
    }
    .with_filter(tracing_subscriber::filter::filter_fn(|m| {
        m.is_span() && m.target().starts_with("switchboard") && *m.level() <= tracing::Level::DEBUG
    }));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let fmt = match cfg.format {
        LogFormat::Json => fmt.json().flatten_event(true).with_filter(filter).boxed(),
        LogFormat::Pretty => fmt.with_filter(filter).boxed(),
    };
    if tracing_subscriber::registry()
        .with(fmt)
        .with(spans)
        .try_init()
        .is_ok()
    {
        tokio::spawn(exporter.run(rx, flushes));
    }
    Ok(Some(Flusher(flush_tx)))
}

/// The trace context of the current span, when spans are exported (`None` otherwise, at the
/// cost of a thread-local read).
#[must_use]
pub fn current() -> Option<TraceParent> {
    context_of(&tracing::Span::current())
}

/// The trace context of `span`, when it is exported.
#[must_use]
pub fn context_of(span: &tracing::Span) -> Option<TraceParent> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span(id)?;
        let ext = data.extensions();
        ext.get::<layer::SpanData>().map(|d| d.context)
    })
    .flatten()
}

/// Makes `parent` (a caller's `traceparent`, or the context a queued job carried) the parent
/// of `span`: its trace id and parent span id are taken from it. Call it right after the span
/// is created, before any child; a no-op when `parent` is `None` or spans are not exported.
pub fn set_parent(span: &tracing::Span, parent: Option<TraceParent>) {
    let Some(parent) = parent else { return };
    span.with_subscriber(|(id, dispatch)| {
        let Some(registry) = dispatch.downcast_ref::<Registry>() else {
            return;
        };
        let Some(data) = registry.span(id) else {
            return;
        };
        let mut ext = data.extensions_mut();
        if let Some(d) = ext.get_mut::<layer::SpanData>() {
            d.context.trace_id = parent.trace_id;
            d.context.flags = parent.flags;
            d.parent = Some(parent.span_id);
        }
    });
}

/// The `traceparent` of the current span added to an outbound request's headers (nothing when
/// spans are not exported).
pub fn inject(headers: &mut reqwest::header::HeaderMap) {
    if let Some(tp) = current()
        && let Ok(v) = reqwest::header::HeaderValue::from_str(&tp.to_string())
    {
        headers.insert(TRACEPARENT, v);
    }
}

/// The spans exported and dropped since start, `(exported, dropped)`.
#[must_use]
pub fn span_counts() -> (u64, u64) {
    export::COUNTS.get()
}
