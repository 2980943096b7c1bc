//! Prometheus metrics, served on their own listener: switchboard's own (`switchboard_…`),
//! `switchboard_build_info`, and the standard process metrics (`process_open_fds`,
//! `process_max_fds`, `process_resident_memory_bytes`), read from `/proc/self` at each scrape
//! on Linux.

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

fn latency_histogram() -> Histogram {
    // 0.5 ms … ~65 s
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

/// Every metric switchboard exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    http_requests: Family<Labels, Counter>,
    http_duration: Family<Labels, Histogram, fn() -> Histogram>,
    inbound: Family<Labels, Counter>,
    jobs: Family<Labels, Counter>,
    deliveries: Family<Labels, Counter>,
    queue_depth: Family<Labels, Gauge>,
    agent_latency: Family<Labels, Histogram, fn() -> Histogram>,
    end_to_end: Histogram,
    smtp_data_bytes: Gauge,
    connections: Family<Labels, Gauge>,
    connections_refused: Family<Labels, Counter>,
    refused: Family<Labels, Counter>,
    mta_sts: Family<Labels, Counter>,
    attestations: Family<Labels, Counter>,
    policy_states: Family<Labels, Counter>,
    turns: Family<Labels, Counter>,
    moderation: Family<Labels, Counter>,
    llm_tokens: Family<Labels, Counter>,
    otlp_spans: Family<Labels, Counter>,
    /// Held while the counts kept outside the registry are copied into it.
    sampling: std::sync::Mutex<()>,
    hosts: crate::hosts::Hosts,
    open_fds: Gauge,
    max_fds: Gauge,
    resident_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    #[must_use]
    pub fn new() -> Self {
        // The process metrics keep their standard, unprefixed names; everything else is
        // switchboard's.
        let mut root = Registry::default();
        let (open_fds, max_fds, resident_bytes) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        root.register(
            "process_open_fds",
            "Open file descriptors",
            open_fds.clone(),
        );
        root.register(
            "process_max_fds",
            "The open-file limit (soft)",
            max_fds.clone(),
        );
        root.register(
            "process_resident_memory_bytes",
            "Resident memory (RSS) in bytes",
            resident_bytes.clone(),
        );
        let registry = root.sub_registry_with_prefix("switchboard");
        let build_info = Family::<Labels, Gauge>::default();
        registry.register(
            "build_info",
            "Always 1; the labels name the running build",
            build_info.clone(),
        );
        build_info
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION").to_owned()),
                ("rust_version", env!("CARGO_PKG_RUST_VERSION").to_owned()),
            ])
            .set(1);
        let http_requests = Family::<Labels, Counter>::default();
        let http_duration =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let inbound = Family::<Labels, Counter>::default();
        let jobs = Family::<Labels, Counter>::default();
        let deliveries = Family::<Labels, Counter>::default();
        let queue_depth = Family::<Labels, Gauge>::default();
        let agent_latency =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        let end_to_end = latency_histogram();
        let smtp_data_bytes = Gauge::default();
        let connections = Family::<Labels, Gauge>::default();
        let connections_refused = Family::<Labels, Counter>::default();
        let refused = Family::<Labels, Counter>::default();
        let mta_sts = Family::<Labels, Counter>::default();
        let attestations = Family::<Labels, Counter>::default();
        let policy_states = Family::<Labels, Counter>::default();
        let turns = Family::<Labels, Counter>::default();
        let moderation = Family::<Labels, Counter>::default();
        let llm_tokens = Family::<Labels, Counter>::default();
        let otlp_spans = Family::<Labels, Counter>::default();
        registry.register(
            "llm_tokens",
            "Tokens a chat model reported using, by agent, model and kind (prompt, completion)",
            llm_tokens.clone(),
        );
        registry.register(
            "otlp_spans",
            "Trace spans by what became of them (exported; dropped: the export queue was full or the collector refused or was unreachable)",
            otlp_spans.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests by method, route and status",
            http_requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by method and route",
            http_duration.clone(),
        );
        registry.register(
            "inbound_messages",
            "Inbound messages by transport and outcome (accepted, duplicate)",
            inbound.clone(),
        );
        registry.register(
            "jobs",
            "Finished job attempts by kind and outcome (done, retry, dead, deferred: put back without using an attempt)",
            jobs.clone(),
        );
        registry.register(
            "deliveries",
            "Delivery attempts by transport and outcome (delivered, retry, failed; email also bounced)",
            deliveries.clone(),
        );
        registry.register(
            "queue_depth",
            "Jobs waiting, running and dead by kind and state, read at scrape time",
            queue_depth.clone(),
        );
        registry.register(
            "agent_call_duration_seconds",
            "Agent backend latency by agent and result",
            agent_latency.clone(),
        );
        registry.register(
            "end_to_end_seconds",
            "From receipt of a message to delivery of its response",
            end_to_end.clone(),
        );
        registry.register(
            "smtp_data_bytes",
            "Memory held for message bodies being received over SMTP (bytes)",
            smtp_data_bytes.clone(),
        );
        registry.register(
            "connections",
            "Open inbound connections by listener",
            connections.clone(),
        );
        registry.register(
            "connections_refused",
            "Inbound connections refused as they were accepted, by listener and reason (full, peer_full)",
            connections_refused.clone(),
        );
        registry.register(
            "refused",
            "Messages refused by an agent's access rules, by agent, transport and reason (denied, not_allowed)",
            refused.clone(),
        );
        registry.register(
            "mta_sts_failures",
            "Direct deliveries that fell short of the recipient domain's MTA-STS policy, by policy mode (enforce: not sent there; testing: sent anyway) and what failed (mx_mismatch, tls_failed)",
            mta_sts.clone(),
        );
        registry.register(
            "attestations",
            "Forwarded identity assertions by outcome (verified, or the reason one was dropped)",
            attestations.clone(),
        );
        registry.register(
            "policy_states",
            "Policy-part states by outcome (minted, resolved, or why one presented was refused: unknown, replayed, expired, foreign)",
            policy_states.clone(),
        );
        registry.register(
            "turns",
            "Inbound messages by how their dispatch ended (answered, no_reply, failed, merged into a later turn, interrupted by a newer message)",
            turns.clone(),
        );
        registry.register(
            "moderation_activities",
            "Moderation activities received from remote servers by kind (block, unblock: an actor blocking one of our agents or lifting it; report: a report of abuse stored)",
            moderation.clone(),
        );
        Self {
            registry: root,
            turns,
            moderation,
            llm_tokens,
            otlp_spans,
            sampling: std::sync::Mutex::new(()),
            hosts: crate::hosts::Hosts::default(),
            http_requests,
            http_duration,
            inbound,
            jobs,
            deliveries,
            queue_depth,
            agent_latency,
            end_to_end,
            smtp_data_bytes,
            connections,
            connections_refused,
            refused,
            mta_sts,
            attestations,
            policy_states,
            open_fds,
            max_fds,
            resident_bytes,
        }
    }

    /// Counts a direct delivery that fell short of an MTA-STS policy in `mode`, and what failed.
    pub fn mta_sts_failure(&self, mode: &str, failed: &str) {
        self.mta_sts
            .get_or_create(&vec![
                ("mode", mode.to_owned()),
                ("failed", failed.to_owned()),
            ])
            .inc();
    }

    /// Counts a message refused by an agent's access rules.
    pub fn refused(&self, agent: &str, transport: &str, reason: &str) {
        self.refused
            .get_or_create(&vec![
                ("agent", agent.to_owned()),
                ("transport", transport.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// Records that something from the remote `host` (an ActivityPub host, a mail domain) was
    /// refused, and why, in the bounded per-host record the console's remote-hosts page shows
    /// ([`crate::hosts`]). Not a Prometheus series: hosts are unbounded.
    pub fn refused_from(&self, host: &str, reason: &str, now_ms: i64) {
        self.hosts.refused(host, reason, now_ms);
    }

    /// The bounded records of remote hosts: refusals, delivery outcomes, the transports' views.
    #[must_use]
    pub fn hosts(&self) -> &crate::hosts::Hosts {
        &self.hosts
    }

    /// Counts a moderation activity received: `block`, `unblock` or `report`.
    pub fn moderation(&self, kind: &str) {
        self.moderation
            .get_or_create(&vec![("kind", kind.to_owned())])
            .inc();
    }

    /// Counts a forwarded identity assertion: `verified`, or the reason it was dropped.
    pub fn attestation(&self, outcome: &str) {
        self.attestations
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    /// Counts policy-part states: `minted`, `resolved`, or why one presented was refused.
    pub fn policy_state(&self, outcome: &str) {
        self.policy_states
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    /// The gauge of open connections on `listener`.
    #[must_use]
    pub fn connections(&self, listener: &str) -> Gauge {
        self.connections
            .get_or_create(&vec![("listener", listener.to_owned())])
            .clone()
    }

    /// Counts a connection refused at accept.
    pub fn connection_refused(&self, listener: &str, reason: &str) {
        self.connections_refused
            .get_or_create(&vec![
                ("listener", listener.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// The gauge of memory held for SMTP message bodies in flight.
    #[must_use]
    pub fn smtp_data_bytes(&self) -> &Gauge {
        &self.smtp_data_bytes
    }

    /// Counts an HTTP request.
    pub fn http(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.http_requests
            .get_or_create(&vec![
                ("method", method.to_owned()),
                ("route", route.to_owned()),
                ("status", status.to_string()),
            ])
            .inc();
        self.http_duration
            .get_or_create(&vec![
                ("method", method.to_owned()),
                ("route", route.to_owned()),
            ])
            .observe(elapsed.as_secs_f64());
    }

    /// Counts how an inbound message's dispatch ended: `answered`, `no_reply`, `failed`,
    /// `merged`, `interrupted`, `held` or `deleted`.
    pub fn turn(&self, outcome: &str) {
        self.turns
            .get_or_create(&vec![("outcome", outcome.to_owned())])
            .inc();
    }

    /// Counts an inbound message.
    pub fn inbound(&self, transport: &str, outcome: &str) {
        self.inbound
            .get_or_create(&vec![
                ("transport", transport.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// Counts a finished job attempt (recorded by the queue for every kind).
    pub fn job(&self, kind: &str, outcome: &str) {
        self.jobs
            .get_or_create(&vec![
                ("kind", kind.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// Counts a delivery attempt through `transport` and its outcome: `delivered`, `retry` (a
    /// temporary failure, tried again later), `failed` (refused for good, or out of attempts), or
    /// `bounced` (email reported undeliverable later).
    pub fn delivery(&self, transport: &str, outcome: &str) {
        self.deliveries
            .get_or_create(&vec![
                ("transport", transport.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// Records an agent call.
    pub fn agent_call(&self, agent: &str, elapsed: Duration, ok: bool) {
        self.agent_latency
            .get_or_create(&vec![
                ("agent", agent.to_owned()),
                ("result", if ok { "ok" } else { "error" }.to_owned()),
            ])
            .observe(elapsed.as_secs_f64());
    }

    /// Counts the tokens a chat model reported for one answer of `agent`'s.
    pub fn llm_tokens(&self, agent: &str, model: &str, prompt: u64, completion: u64) {
        for (kind, n) in [("prompt", prompt), ("completion", completion)] {
            self.llm_tokens
                .get_or_create(&vec![
                    ("agent", agent.to_owned()),
                    ("model", model.to_owned()),
                    ("kind", kind.to_owned()),
                ])
                .inc_by(n);
        }
    }

    /// Records receipt-to-delivery latency.
    pub fn end_to_end(&self, millis: i64) {
        #[allow(clippy::cast_precision_loss)]
        self.end_to_end.observe(millis.max(0) as f64 / 1000.0);
    }

    /// Sets the queue depth gauges from fresh counts.
    pub fn set_queue_depth(&self, counts: &[(String, String, i64)]) {
        self.queue_depth.clear();
        for (kind, state, n) in counts {
            self.queue_depth
                .get_or_create(&vec![("kind", kind.clone()), ("state", state.clone())])
                .set(*n);
        }
    }

    /// The text exposition format, with the process metrics read now.
    #[must_use]
    pub fn render(&self) -> String {
        self.sample_process();
        self.sample_spans();
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Metrics {
    /// Copies the trace exporter's counts (kept by the process-wide exporter) into the registry.
    fn sample_spans(&self) {
        let (exported, dropped) = crate::telemetry::span_counts();
        let Ok(_held) = self.sampling.lock() else {
            return;
        };
        for (outcome, total) in [("exported", exported), ("dropped", dropped)] {
            let c = self
                .otlp_spans
                .get_or_create(&vec![("outcome", outcome.to_owned())]);
            let seen = c.get();
            if total > seen {
                c.inc_by(total - seen);
            }
        }
    }

    /// Reads the process metrics from `/proc/self` (Linux); a value that cannot be read keeps
    /// its last one.
    fn sample_process(&self) {
        if let Some(n) = open_fds() {
            self.open_fds.set(n);
        }
        if let Some(n) = max_fds() {
            self.max_fds.set(n);
        }
        if let Some(n) = resident_bytes() {
            self.resident_bytes.set(n);
        }
    }
}

/// Open descriptors: the entries of `/proc/self/fd`, less the one reading it.
fn open_fds() -> Option<i64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    i64::try_from(n.saturating_sub(1)).ok()
}

/// The soft open-file limit.
fn max_fds() -> Option<i64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .and_then(|n| i64::try_from(n).ok())
}

/// Resident memory: `VmRSS` of `/proc/self/status`, in bytes.
fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_rss(&status)
}

/// `VmRSS:   1234 kB` in bytes.
fn vm_rss(status: &str) -> Option<i64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let n: i64 = words.next()?.parse().ok()?;
    (words.next()? == "kB").then(|| n.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        assert_eq!(
            vm_rss("Name:\tx\nVmRSS:\t   2048 kB\nVmData: 1 kB\n"),
            Some(2_097_152)
        );
        assert_eq!(vm_rss("VmRSS: 12 MB\n"), None);
        assert_eq!(vm_rss("Name: x\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_are_sampled() {
        let text = Metrics::new().render();
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing: {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(value("process_open_fds") >= 3.0, "{text}");
        assert!(
            value("process_resident_memory_bytes") > 1_000_000.0,
            "{text}"
        );
        assert!(
            value("process_max_fds") >= value("process_open_fds"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "switchboard_build_info{{version=\"{}\"",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }
}
