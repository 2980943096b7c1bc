//! The `tracing` layer that turns switchboard's spans into [`SpanRecord`]s: each span gets a
//! trace id (its parent's, a remote parent's set with [`super::set_parent`], or a new one) and
//! a span id when it opens, its fields become attributes, and it is handed to the exporter when
//! it closes, without waiting: a full queue drops the span and counts it.
//!
//! Fields with special meaning: `otel.kind` (`server`, `client`, `producer`, `consumer`),
//! `otel.name` (the exported name, instead of the span's), `otel.status_code` (`ok`, `error`)
//! and `otel.status_message`.

use std::time::Instant;

use tokio::sync::mpsc;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use super::context::TraceParent;
use super::otlp::{AttrValue, SpanKind, SpanRecord, StatusCode};

/// What the layer keeps of an open span, in the span's extensions.
#[derive(Debug)]
pub(super) struct SpanData {
    pub(super) context: TraceParent,
    pub(super) parent: Option<[u8; 8]>,
    started: Instant,
    start_unix_nano: u64,
    name: Option<String>,
    kind: SpanKind,
    status: StatusCode,
    status_message: Option<String>,
    attributes: Vec<(&'static str, AttrValue)>,
}

/// Reads a span's fields into its [`SpanData`].
struct Fields<'a>(&'a mut SpanData);

impl Fields<'_> {
    fn set(&mut self, field: &Field, value: AttrValue) {
        let name = field.name();
        if let Some(special) = name.strip_prefix("otel.") {
            let text = match &value {
                AttrValue::Str(s) => s.clone(),
                other => format!("{other:?}"),
            };
            match special {
                "kind" => {
                    if let Some(k) = SpanKind::parse(&text) {
                        self.0.kind = k;
                    }
                }
                "name" => self.0.name = Some(text),
                "status_code" => {
                    self.0.status = match text.to_ascii_lowercase().as_str() {
                        "ok" => StatusCode::Ok,
                        "error" => StatusCode::Error,
                        _ => StatusCode::Unset,
                    };
                }
                "status_message" => self.0.status_message = Some(text),
                _ => {}
            }
            return;
        }
        if let Some(slot) = self.0.attributes.iter_mut().find(|(k, _)| *k == name) {
            slot.1 = value;
        } else {
            self.0.attributes.push((name, value));
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, AttrValue::Str(value.to_owned()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, AttrValue::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, AttrValue::Int(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(v) => self.set(field, AttrValue::Int(v)),
            Err(_) => self.set(field, AttrValue::Str(value.to_string())),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, AttrValue::Double(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, AttrValue::Str(format!("{value:?}")));
    }
}

/// The layer: spans in, [`SpanRecord`]s out to the exporter's queue.
pub(super) struct OtlpLayer {
    pub(super) tx: mpsc::Sender<SpanRecord>,
    /// Wall-clock nanoseconds now (the one reading of the wall clock, from [`crate::clock`]).
    pub(super) now_unix_nano: fn() -> u64,
}

/// A fresh random id, never all zero.
fn random_id<const N: usize>() -> [u8; N] {
    loop {
        let id: [u8; N] = std::array::from_fn(|_| rand::random::<u8>());
        if id != [0; N] {
            return id;
        }
    }
}

impl<S> tracing_subscriber::Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<SpanData>().map(|d| d.context));
        let context = TraceParent {
            trace_id: parent.map_or_else(random_id, |p| p.trace_id),
            span_id: random_id(),
            flags: parent.map_or(1, |p| p.flags),
        };
        let mut data = SpanData {
            context,
            parent: parent.map(|p| p.span_id),
            started: Instant::now(),
            start_unix_nano: (self.now_unix_nano)(),
            name: None,
            kind: SpanKind::Internal,
            status: StatusCode::Unset,
            status_message: None,
            attributes: Vec::new(),
        };
        attrs.record(&mut Fields(&mut data));
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(data) = ext.get_mut::<SpanData>() {
            values.record(&mut Fields(data));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(data) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        let elapsed = u64::try_from(data.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let record = SpanRecord {
            trace_id: data.context.trace_id,
            span_id: data.context.span_id,
            parent_span_id: data.parent,
            flags: data.context.flags,
            name: data.name.unwrap_or_else(|| span.name().to_owned()),
            kind: data.kind,
            start_unix_nano: data.start_unix_nano,
            end_unix_nano: data.start_unix_nano.saturating_add(elapsed),
            attributes: data.attributes,
            status: data.status,
            status_message: data.status_message,
        };
        if self.tx.try_send(record).is_err() {
            super::export::COUNTS.dropped(1);
        }
    }
}
