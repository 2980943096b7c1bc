//! Email benchmark: DKIM-signed messages accepted over SMTP per second — DKIM (RSA-2048), SPF,
//! DMARC and ARC checked, the message durably committed before `250` — side by side in the same
//! run with an aiosmtpd + dkimpy pipeline doing the same inbound work in Python
//! (`tests/peers/email/bench_peer.py`: SPF for MAIL FROM and HELO, DKIM, ARC, DMARC alignment
//! and policy, a MIME parse for the subject and text, one SQLite commit per message, all before
//! `250`).
//!
//! `cargo bench --bench email [-- N [CONNECTIONS]]`: N messages per round for switchboard in
//! each `database.durability` mode (a server per mode, on a database of its own, taking turns;
//! `BENCH_DURABILITY=periodic` or `fsync` measures one; `BENCH_POLICY=1` measures `periodic`
//! without and with ten access rules and a trusted issuer instead), half of them with MAIL, RCPT and DATA
//! pipelined, half one command per round trip; N/4 for the peer, which does not offer
//! PIPELINING. The peer needs `SWITCHBOARD_EMAIL_PYTHON` (or
//! `target/peers/email/venv`, made by `scripts/peers/email.sh`); without it only switchboard is
//! measured.
//!
//! Messages (~3 KB) are signed before the clock starts; each round uses fresh Message-IDs so no
//! message is a duplicate. The load generator is a process of its own (`bench/common/loadgen.rs`,
//! pinned to core 0 by default), so each contender's CPU time is its own process's alone.

#[path = "common/loadgen.rs"]
mod loadgen;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;
use switchboard::app::Options;
use switchboard::config::{DnsMode, Durability, Secret};
use switchboard::moderation::Who;
use switchboard::{Application, Config};
use tokio_rustls::rustls::pki_types::PrivateKeyDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

const ROUNDS: usize = 5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/email").join(name)
}

/// `count` signed messages with ids `{tag}-{i}`.
fn presign(tag: &str, count: usize) -> Vec<Vec<u8>> {
    let pem = std::fs::read(fixture("sender-dkim.key")).unwrap_or_else(|e| panic!("key: {e}"));
    let der = PrivateKeyDer::from_pem_slice(&pem).unwrap_or_else(|e| panic!("key: {e}"));
    let key = RsaKey::<Sha256>::from_key_der(der).unwrap_or_else(|e| panic!("key: {e}"));
    let signer = DkimSigner::from_key(key)
        .domain("example.com")
        .selector("sel1")
        .headers(["From", "To", "Subject", "Date", "Message-ID"]);
    let para = "Hello, this is a benchmark message of about three kilobytes, written the way \
                people write mail: a few paragraphs of ordinary text that the agent will read.\r\n";
    (0..count)
        .map(|i| {
            let mut body = String::new();
            while body.len() < 2_600 {
                body.push_str(para);
            }
            let msg = format!(
                "From: Alice <alice@example.com>\r\nTo: echo@agents.test\r\nSubject: bench {i}\r\n\
                 Date: Sun, 22 Nov 2026 06:00:00 +0000\r\nMessage-ID: <{tag}-{i}@example.com>\r\n\
                 MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}"
            );
            let sig = signer
                .sign(msg.as_bytes())
                .unwrap_or_else(|e| panic!("sign: {e}"));
            [sig.to_header().as_bytes(), msg.as_bytes()].concat()
        })
        .collect()
}

/// Sends `msgs` from the generator process over `conns` connections, pipelining MAIL, RCPT and
/// DATA when `pipelining` is set and the server offers it; the CPU time is that of process
/// `pid`.
fn measure(
    addr: SocketAddr,
    pid: u32,
    msgs: &[Vec<u8>],
    conns: usize,
    pipelining: bool,
) -> (loadgen::Report, f64) {
    let (report, cpu) = loadgen::run(
        &loadgen::Job {
            concurrency: conns,
            expect_status: 0,
            expect_body: None,
            load: loadgen::Load::Smtp {
                pipelining,
                addr: addr.to_string(),
                from: "alice@example.com".into(),
                to: "echo@agents.test".into(),
                messages: msgs
                    .iter()
                    .map(|m| String::from_utf8_lossy(m).into_owned())
                    .collect(),
            },
        },
        pid,
    );
    #[allow(clippy::cast_precision_loss)]
    let per = cpu as f64 / report.accepted.max(1) as f64;
    (report, per)
}

/// The generator's CPU time per accepted message, µs.
fn client_cpu(r: &loadgen::Report) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let per = r.client_cpu_us as f64 / r.accepted.max(1) as f64;
    per
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn python() -> Option<String> {
    std::env::var("SWITCHBOARD_EMAIL_PYTHON")
        .ok()
        .or_else(|| {
            let p = root().join("target/peers/email/venv/bin/python");
            p.exists().then(|| p.display().to_string())
        })
        .filter(|p| Path::new(p).exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("port: {e}"))
}

fn main() {
    loadgen::main(bench);
}

/// The servers measured, in order: `(durability, name, access rules)`. Both durability modes
/// unless `BENCH_DURABILITY` names one; with `BENCH_POLICY=1`, instead, the A/B of access
/// rules: `periodic` plain and `periodic` with [`with_policy`].
fn modes() -> Vec<(Durability, &'static str, bool)> {
    if std::env::var("BENCH_POLICY").as_deref() == Ok("1") {
        return vec![
            (Durability::Periodic, "periodic", false),
            (Durability::Periodic, "periodic+rules", true),
        ];
    }
    let both = vec![
        (Durability::Periodic, "periodic", false),
        (Durability::Fsync, "fsync", false),
    ];
    match std::env::var("BENCH_DURABILITY").as_deref() {
        Ok(one) => both.into_iter().filter(|(_, n, _)| *n == one).collect(),
        Err(_) => both,
    }
}

/// Ten access rules on the echo agent that every message's verified evidence (a DMARC pass,
/// `mailto:alice@example.com`) is checked against — nine deny rules that match nobody and the
/// allow rule that lets the sender in, under a default of deny — and one trusted connector
/// issuer: the A/B against none.
fn with_policy(config: &mut Config) {
    use switchboard::config::{AccessConfig, AccessDefault, AccessRule, TrustedIssuerConfig};
    let deny = (0..9)
        .map(|i| AccessRule {
            subject: Some(format!("mailto:*@blocked-{i}.example")),
            ..AccessRule::default()
        })
        .collect::<Vec<_>>();
    let allow = vec![AccessRule {
        method: Some("email-dmarc".into()),
        subject: Some("mailto:*@example.com".into()),
        ..AccessRule::default()
    }];
    for a in config.agents.iter_mut().filter(|a| a.name == "echo") {
        a.access = Some(AccessConfig {
            default: AccessDefault::Deny,
            allow: allow.clone(),
            deny: deny.clone(),
            ..AccessConfig::default()
        });
    }
    config.trust.issuers.push(TrustedIssuerConfig {
        issuer: "did:web:connector.example".into(),
        jwks_url: None,
        keys: Vec::new(),
        methods: vec!["urn:mentionable:auth:slack-workspace-member:v0.1".into()],
        assurance: vec!["verified".into()],
        subject_prefixes: Vec::new(),
    });
}

async fn bench() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    // Switchboard's share of a round per durability mode, half of it pipelined.
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(12_000);
    let conns: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let peer_n = (n / 4).max(100);
    let modes = modes();
    assert!(!modes.is_empty(), "BENCH_DURABILITY: periodic or fsync");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let pubkey = std::fs::read_to_string(fixture("sender-dkim.pub.b64"))
        .unwrap_or_else(|e| panic!("key: {e}"));
    let txt = format!("v=DKIM1; k=rsa; p={}", pubkey.trim());

    eprintln!(
        "signing {} messages…",
        ROUNDS * (modes.len() * n + peer_n) + (modes.len() + 1) * 200
    );
    let warm_peer = presign("warm-peer", 200);
    let peer_runs: Vec<_> = (0..ROUNDS)
        .map(|r| presign(&format!("peer{r}"), peer_n))
        .collect();
    let records: Vec<(String, String)> = vec![
        ("sel1._domainkey.example.com".into(), txt.clone()),
        ("example.com".into(), "v=spf1 ip4:127.0.0.1 -all".into()),
        ("_dmarc.example.com".into(), "v=DMARC1; p=reject".into()),
    ];

    // One server per mode, each on a database of its own, in this process.
    let mut servers = Vec::new();
    for (mode, name, policy) in &modes {
        let mut config = Config::default();
        if *policy {
            with_policy(&mut config);
        }
        config.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        config.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        config.database.url = Secret::new(format!(
            "sqlite://{}",
            dir.path().join(format!("sb-{name}.db")).display()
        ));
        config.database.durability = Some(*mode);
        config.email.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
        loadgen::unlimited(&mut config.limits);
        loadgen::blocks(&mut config.moderation);
        config.email.domain = Some("agents.test".into());
        config.email.dns = DnsMode::Offline;
        config.email.dns_records.extend(records.iter().cloned());
        // Every connection of the load generator comes from one address.
        config.email.max_sessions_per_peer = config.email.max_sessions;
        let app = Application::build_with(
            config,
            Options {
                workers: false,
                ..Options::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("switchboard: {e}"));
        let addr = app
            .smtp_addr()
            .unwrap_or_else(|| panic!("no SMTP listener"));
        let warm = presign(&format!("warm-{name}"), 200);
        let runs: Vec<_> = (0..ROUNDS)
            .map(|r| presign(&format!("sb-{name}-{r}"), n))
            .collect();
        servers.push((*name, app, addr, warm, runs));
    }

    let peer = python().map(|py| {
        let port = free_port();
        let mut child = Command::new(py)
            .arg(root().join("tests/peers/email/bench_peer.py"))
            .arg(port.to_string())
            .arg(dir.path().join("peer.db"))
            // The same DNS answers switchboard has.
            .args(
                records
                    .iter()
                    .flat_map(|(name, value)| [name.as_str(), value.as_str()]),
            )
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("peer: {e}"));
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        assert_eq!(line.trim(), "ready", "the peer did not start");
        (child, SocketAddr::from(([127, 0, 0, 1], port)))
    });
    if peer.is_none() {
        eprintln!("no aiosmtpd/dkimpy venv (scripts/peers/email.sh): measuring switchboard only");
    }

    let me = std::process::id();
    for (_, _, addr, warm, _) in &servers {
        let _ = measure(*addr, me, warm, conns, true);
    }
    if let Some((child, addr)) = &peer {
        let _ = measure(*addr, child.id(), &warm_peer, conns, true);
    }
    println!("email: {}", loadgen::describe());
    println!(
        "email: {n} (switchboard per durability mode, half of them pipelined) / {peer_n} (peer) messages of ~3 KB per round, {conns} connections, DKIM RSA-2048, commit before 250"
    );
    println!(
        "email: the client pipelines MAIL, RCPT and DATA where the server advertises PIPELINING (switchboard does, aiosmtpd does not); switchboard is also measured with one command per round trip"
    );
    // Columns: per mode, pipelined then one command per round trip; then the peer.
    let mut labels = Vec::new();
    for (name, ..) in &servers {
        labels.push(format!("{name} pipelined"));
        labels.push(format!("{name} no pipelining"));
    }
    labels.push("aiosmtpd+dkimpy".into());
    let header: Vec<String> = labels
        .iter()
        .map(|l| format!("{l} msg/s | CPU µs/msg"))
        .collect();
    println!("round | {}", header.join(" | "));
    let mut cols: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); labels.len()];
    for r in 0..ROUNDS {
        let mut row = vec![(r + 1).to_string()];
        // The modes take turns within a round; each switchboard column gets half of the mode's
        // messages for the round, so every id is fresh.
        for (i, (_, _, addr, _, runs)) in servers.iter().enumerate() {
            let (first, second) = runs[r].split_at(n / 2);
            for (j, (msgs, pipelining)) in [(first, true), (second, false)].into_iter().enumerate()
            {
                let (s, cpu) = measure(*addr, me, msgs, conns, pipelining);
                assert_eq!(s.accepted, msgs.len(), "switchboard refused some messages");
                let col = &mut cols[2 * i + j];
                col.0.push(s.rate());
                col.1.push(cpu);
                col.2.push(client_cpu(&s));
                row.extend([format!("{:.0}", s.rate()), format!("{cpu:.0}")]);
            }
        }
        match &peer {
            Some((child, addr)) => {
                let (p, cpu) = measure(*addr, child.id(), &peer_runs[r], conns, true);
                assert_eq!(p.accepted, peer_n, "the peer refused some messages");
                let col = cols.last_mut().unwrap_or_else(|| unreachable!());
                col.0.push(p.rate());
                col.1.push(cpu);
                col.2.push(client_cpu(&p));
                row.extend([format!("{:.0}", p.rate()), format!("{cpu:.0}")]);
            }
            None => row.extend(["-".into(), "-".into()]),
        }
        println!("{}", row.join(" | "));
    }
    let clients: Vec<String> = cols
        .iter()
        .map(|c| format!("{:.0}", median(c.2.clone())))
        .collect();
    let medians: Vec<(f64, f64)> = cols
        .into_iter()
        .map(|(rates, cpu, _)| (median(rates), median(cpu)))
        .collect();
    let peer_col = medians.len() - 1;
    let mut row = vec!["median".to_owned()];
    for (i, (rate, cpu)) in medians.iter().enumerate() {
        if i < peer_col || peer.is_some() {
            row.extend([format!("{rate:.0}"), format!("{cpu:.0}")]);
        }
    }
    println!("{}", row.join(" | "));
    println!(
        "load generator CPU µs/msg (median): {}",
        labels
            .iter()
            .zip(&clients)
            .map(|(l, c)| format!("{c} {l}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // With the rules ÷ without, per way of sending (BENCH_POLICY=1).
    if modes.iter().any(|m| m.2) {
        for (j, way) in ["pipelined", "no pipelining"].into_iter().enumerate() {
            let ((pr, pc), (rr, rc)) = (medians[j], medians[2 + j]);
            println!(
                "ratio with access rules ÷ without ({way}): rate {:.3}, CPU per message {:.3}",
                rr / pr,
                rc / pc
            );
        }
    } else if servers.len() == 2 {
        // fsync ÷ periodic, per way of sending, when both ran.
        for (j, way) in ["pipelined", "no pipelining"].into_iter().enumerate() {
            let ((pr, pc), (fr, fc)) = (medians[j], medians[2 + j]);
            println!(
                "ratio fsync ÷ periodic ({way}): rate {:.2}, CPU per message {:.2}",
                fr / pr,
                fc / pc
            );
        }
    }
    if peer.is_some() {
        let (pr, pc) = medians[peer_col];
        for (label, (sr, sc)) in labels.iter().zip(&medians).take(peer_col) {
            println!(
                "ratio switchboard ({label}) ÷ peer: rate {:.1}×, CPU per message {:.1}× less",
                sr / pr,
                pc / sc
            );
        }
    }
    // The checks of a sender no block matches: the envelope sender at MAIL FROM, then the
    // agent's and ingest's of the message's sender.
    if let Some((_, app, ..)) = servers.first() {
        let alice = || Who::default().with_sender("alice@example.com");
        loadgen::print_blocks_cost(&app.config().moderation, "message", medians[0].1, || {
            vec![(None, alice()), (Some("echo"), alice()), (None, alice())]
        });
    }
    // How many messages an fsync served: the WAL syncs commits waited for, per message.
    for (name, app, _, warm, runs) in &servers {
        let syncs = app.pipeline().db().wal_syncs();
        if syncs > 0 {
            let sent = warm.len() + runs.iter().map(Vec::len).sum::<usize>();
            #[allow(clippy::cast_precision_loss)]
            let per = sent as f64 / syncs as f64;
            println!("{name}: {syncs} WAL syncs for {sent} messages ({per:.1} messages per sync)");
        }
    }
    if let Some((mut child, _)) = peer {
        let _ = child.kill();
        let _ = child.wait();
    }
    for (_, app, ..) in servers {
        let _ = app.shutdown().await;
    }
}
