//! The files in `deploy/` hold together: the Dockerfile, `compose.yaml` and the systemd unit are
//! parsed and checked for what running switchboard needs (a data volume, SMTP reachable, a
//! health check without curl, no root, secrets only from an env file, a stop timeout above the
//! shutdown grace period), the unit and its sysusers.d entry go through systemd's own tools,
//! and the image's environment is loaded by the real binary. The Kubernetes manifests of
//! `deploy/kubernetes/` go through kubernetes-validate against a pinned Kubernetes version, the
//! configuration a replica runs with (ConfigMap, image, Secret) through the configuration check,
//! and what an operator relies on (probes on the private listener, graceful stops, no Service
//! on the private listener, SMTP client addresses kept) is checked one property at a time.
//! And the image is built with buildah from the Dockerfile and run: its configuration agrees
//! with the compose file, both health checks pass inside it, the server runs as uid 10001, and a
//! message written through the API survives a new container on the same volume.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The shutdown grace period every stop timeout must exceed: the default's, or the example
/// configuration's when that is longer.
fn grace_seconds() -> u64 {
    let example = switchboard::Config::load(
        Some(&root().join("deploy/switchboard.example.toml")),
        Vec::new(),
    )
    .unwrap();
    switchboard::Config::default()
        .server
        .shutdown_grace_seconds
        .max(example.server.shutdown_grace_seconds)
}

/// The instructions of the Dockerfile's last stage, continuation lines joined: (keyword, rest).
fn final_stage() -> Vec<(String, String)> {
    let text = read("deploy/Dockerfile");
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && cur.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(line);
                joined.push(std::mem::take(&mut cur));
            }
        }
    }
    let mut stage = Vec::new();
    for ins in joined {
        let (kw, rest) = ins.split_once(' ').unwrap_or((&ins, ""));
        let kw = kw.to_uppercase();
        if kw == "FROM" {
            stage.clear();
        }
        stage.push((kw, rest.trim().to_owned()));
    }
    stage
}

fn instruction(stage: &[(String, String)], kw: &str) -> Vec<String> {
    stage
        .iter()
        .filter(|(k, _)| k == kw)
        .map(|(_, v)| v.clone())
        .collect()
}

/// The image's `ENV` settings.
fn image_env(stage: &[(String, String)]) -> BTreeMap<String, String> {
    instruction(stage, "ENV")
        .iter()
        .flat_map(|e| {
            e.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn port_of(addr: &str) -> String {
    addr.rsplit(':').next().unwrap().to_owned()
}

/// A mapping with YAML merge keys (`<<: *anchor`) applied.
fn merged(y: &Yaml) -> yaml_rust2::yaml::Hash {
    let mut out = yaml_rust2::yaml::Hash::new();
    if let Some(h) = y.as_hash() {
        if let Some(base) = h.get(&Yaml::String("<<".into())) {
            out.extend(merged(base));
        }
        for (k, v) in h {
            if k.as_str() != Some("<<") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

fn get<'a>(h: &'a yaml_rust2::yaml::Hash, key: &str) -> &'a Yaml {
    h.get(&Yaml::String(key.into()))
        .unwrap_or_else(|| panic!("no {key} in {h:?}"))
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec()
        .unwrap_or_else(|| panic!("not a list: {y:?}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// `45s`, `1m30s` in seconds.
fn duration_seconds(s: &str) -> u64 {
    let (mut total, mut n) = (0, String::new());
    for c in s.chars() {
        if c.is_ascii_digit() {
            n.push(c);
        } else {
            let v: u64 = n.parse().unwrap();
            n.clear();
            total += match c {
                's' => v,
                'm' => v * 60,
                'h' => v * 3600,
                _ => panic!("unit {c} in {s}"),
            };
        }
    }
    assert!(n.is_empty(), "{s}: no unit");
    total
}

mod compose;
mod image;
mod kubernetes;
mod systemd;
