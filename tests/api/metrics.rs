//! `/metrics` of a running server: the build and process metrics, and the Grafana dashboard in
//! `deploy/`, whose every query names a metric a live scrape has (and which shows every
//! switchboard metric), so the two cannot drift apart.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::helpers::{Engine, message, spawn_app, wait_for};

/// The value of the sample whose line starts with `prefix` (name and labels).
fn sample(text: &str, prefix: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The metric families of a scrape, by their `# TYPE` lines: (name, type).
fn families(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_owned(), kind.to_owned())
        })
        .collect()
}

/// Every series name a query may use for the families: a counter's `_total`, a histogram's
/// `_bucket`, `_sum` and `_count`, a gauge's own name.
fn series_names(families: &[(String, String)]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, kind) in families {
        match kind.as_str() {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.clone());
            }
        }
    }
    names
}

/// Every metric name in a PromQL expression: identifiers that start like switchboard's or the
/// process metrics.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            cur.push(c);
        } else {
            if cur.starts_with("switchboard_") || cur.starts_with("process_") {
                out.push(cur.clone());
            }
            cur.clear();
        }
    }
    out
}

/// Every query of the dashboard: panel targets and template variables.
fn queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => queries(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_build_and_the_process() {
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    let text = t.metrics().await;
    let build = format!(
        "switchboard_build_info{{version=\"{}\",rust_version=\"{}\"}} ",
        env!("CARGO_PKG_VERSION"),
        env!("CARGO_PKG_RUST_VERSION")
    );
    assert_eq!(sample(&text, &build), 1.0, "{text}");
    let fds = sample(&text, "process_open_fds ");
    // The test process holds the server's listeners, database files and client sockets.
    assert!(fds >= 5.0, "{text}");
    assert!(sample(&text, "process_max_fds ") >= fds);
    let rss = sample(&text, "process_resident_memory_bytes ");
    assert!(rss > 1_000_000.0, "{rss}");
    // Opening connections shows in the next scrape.
    let held: Vec<std::net::TcpStream> = (0..20)
        .map(|_| std::net::TcpStream::connect(t.app().http_addr()).unwrap())
        .collect();
    let more = wait_for(10, "the held connections", || async {
        let n = sample(&t.metrics().await, "process_open_fds ");
        (n >= fds + 20.0).then_some(n)
    })
    .await;
    assert!(more >= fds + 20.0);
    drop(held);
    t.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_only_metrics_that_exist() {
    let mut t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    // Some traffic, so that labelled series exist too.
    t.ingest("dash-1", message(&t.agent("echo"), "k", "hi"))
        .await;
    wait_for(20, "the reply", || async {
        (!t.transport.delivered().is_empty()).then_some(())
    })
    .await;
    let text = t.metrics().await;
    t.stop().await;
    let families = families(&text);
    let known = series_names(&families);

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() >= 6));
    let mut exprs = Vec::new();
    queries(&dashboard, &mut exprs);
    let used: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    let unknown: Vec<&String> = used.iter().filter(|n| !known.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics /metrics does not have: {unknown:?}"
    );
    // And it shows every switchboard metric.
    let unshown: Vec<&String> = families
        .iter()
        .filter(|(name, _)| name.starts_with("switchboard_"))
        .filter(|f| {
            series_names(std::slice::from_ref(*f))
                .iter()
                .all(|s| !used.contains(s))
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        unshown.is_empty(),
        "metrics not on the dashboard: {unshown:?}"
    );
}
