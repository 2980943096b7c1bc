//! `[telemetry]`: exporting the pipeline's spans as OpenTelemetry traces (OTLP over HTTP).

use serde::{Deserialize, Serialize};

/// Trace export. Off unless `otlp_endpoint` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector's base URL (`http://collector:4318`); spans are posted to
    /// `{otlp_endpoint}/v1/traces` as protobuf. Unset (the default): nothing is exported and no
    /// trace context is kept.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute of every exported span.
    pub service_name: String,
    /// Spans kept waiting for export at most; past that, new ones are dropped and counted
    /// (`switchboard_otlp_spans_total{outcome="dropped"}`).
    pub queue_size: usize,
    /// Spans sent in one export request at most.
    pub batch_size: usize,
    /// How long a span waits at most before its batch is sent (ms).
    pub flush_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "switchboard".into(),
            queue_size: 8192,
            batch_size: 512,
            flush_ms: 1000,
        }
    }
}

impl TelemetryConfig {
    /// Collects what is wrong with the section.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if let Some(endpoint) = &self.otlp_endpoint {
            match url::Url::parse(endpoint) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => problems.push(format!(
                    "telemetry.otlp_endpoint: {endpoint:?} is not an http(s) URL"
                )),
            }
        }
        if self.service_name.trim().is_empty() {
            problems.push("telemetry.service_name: must not be empty".into());
        }
        if self.queue_size == 0 || self.batch_size == 0 {
            problems.push("telemetry.queue_size and telemetry.batch_size: at least 1".into());
        }
        if self.flush_ms == 0 {
            problems.push("telemetry.flush_ms: at least 1".into());
        }
    }
}
