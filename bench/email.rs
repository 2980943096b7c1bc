//! Email benchmark: DKIM-signed messages accepted over SMTP per second — DKIM (RSA-2048), SPF,
//! DMARC and ARC checked, the message durably committed before `250` — side by side in the same
//! run with an aiosmtpd + dkimpy pipeline doing the same inbound work (DKIM verification, one
//! SQLite commit per message before `250`).
//!
//! `cargo bench --bench email [-- N [CONNECTIONS]]`. The peer needs
//! `SWITCHBOARD_EMAIL_PYTHON` (or `target/peers/email/venv`, made by `scripts/peers/email.sh`);
//! without it only switchboard is measured.
//!
//! Messages (~3 KB) are signed before the clock starts; each round uses fresh Message-IDs so no
//! message is a duplicate. The load generator runs inside the switchboard process, so its CPU
//! time counts against switchboard; the peer's CPU time is its own process only.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter;
use mail_auth::dkim::DkimSigner;
use switchboard::app::Options;
use switchboard::config::{DnsMode, Secret};
use switchboard::{Application, Config};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as TokioBufReader};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::PrivateKeyDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

const ROUNDS: usize = 3;

/// CPU time (user + system) of a process from /proc, in microseconds.
fn cpu_micros(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (field(11) + field(12)) * 10_000
}

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

async fn reply(r: &mut TokioBufReader<TcpStream>) -> String {
    let mut all = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return all;
        }
        all.push_str(&line);
        if line.len() < 4 || line.as_bytes()[3] == b' ' {
            return all;
        }
    }
}

/// Sends `msgs` over `conns` connections (one message at a time on each, no pipelining);
/// returns how many got 250.
async fn drive(addr: SocketAddr, msgs: &[Vec<u8>], conns: usize) -> usize {
    let chunk = msgs.len().div_ceil(conns.max(1));
    let tasks: Vec<_> = msgs
        .chunks(chunk.max(1))
        .map(|part| {
            let part = part.to_vec();
            tokio::spawn(async move {
                let s = TcpStream::connect(addr)
                    .await
                    .unwrap_or_else(|e| panic!("connect: {e}"));
                let _ = s.set_nodelay(true);
                let mut r = TokioBufReader::new(s);
                reply(&mut r).await;
                r.get_mut()
                    .write_all(b"EHLO bench.example.com\r\n")
                    .await
                    .ok();
                reply(&mut r).await;
                let mut ok = 0;
                for m in part {
                    for cmd in [
                        &b"MAIL FROM:<alice@example.com>\r\n"[..],
                        b"RCPT TO:<echo@agents.test>\r\n",
                        b"DATA\r\n",
                    ] {
                        r.get_mut().write_all(cmd).await.ok();
                        reply(&mut r).await;
                    }
                    r.get_mut().write_all(&m).await.ok();
                    r.get_mut().write_all(b"\r\n.\r\n").await.ok();
                    if reply(&mut r).await.starts_with("250") {
                        ok += 1;
                    }
                }
                r.get_mut().write_all(b"QUIT\r\n").await.ok();
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap_or(0);
    }
    ok
}

struct Sample {
    rate: f64,
    cpu_per_msg: f64,
    ok: usize,
}

async fn measure(addr: SocketAddr, pid: &str, msgs: &[Vec<u8>], conns: usize) -> Sample {
    let cpu0 = cpu_micros(pid);
    let t0 = Instant::now();
    let ok = drive(addr, msgs, conns).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_micros(pid).saturating_sub(cpu0);
    #[allow(clippy::cast_precision_loss)]
    Sample {
        rate: ok as f64 / secs,
        cpu_per_msg: cpu as f64 / ok.max(1) as f64,
        ok,
    }
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

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let conns: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16);
    let peer_n = (n / 4).max(100);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let pubkey = std::fs::read_to_string(fixture("sender-dkim.pub.b64"))
        .unwrap_or_else(|e| panic!("key: {e}"));
    let txt = format!("v=DKIM1; k=rsa; p={}", pubkey.trim());

    eprintln!("signing {} messages…", ROUNDS * (n + peer_n) + 2 * 200);
    let warm_sb = presign("warm-sb", 200);
    let warm_peer = presign("warm-peer", 200);
    let sb_runs: Vec<_> = (0..ROUNDS).map(|r| presign(&format!("sb{r}"), n)).collect();
    let peer_runs: Vec<_> = (0..ROUNDS)
        .map(|r| presign(&format!("peer{r}"), peer_n))
        .collect();

    let mut config = Config::default();
    config.server.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.server.metrics_bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.database.url = Secret::new(format!("sqlite://{}", dir.path().join("sb.db").display()));
    config.email.bind = "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}"));
    config.email.domain = Some("agents.test".into());
    config.email.dns = DnsMode::Offline;
    config
        .email
        .dns_records
        .insert("sel1._domainkey.example.com".into(), txt.clone());
    config
        .email
        .dns_records
        .insert("example.com".into(), "v=spf1 ip4:127.0.0.1 -all".into());
    config
        .email
        .dns_records
        .insert("_dmarc.example.com".into(), "v=DMARC1; p=reject".into());
    let app = Application::build_with(
        config,
        Options {
            workers: false,
            ..Options::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("switchboard: {e}"));
    let sb_addr = app
        .smtp_addr()
        .unwrap_or_else(|| panic!("no SMTP listener"));

    let peer = python().map(|py| {
        let port = free_port();
        let mut child = Command::new(py)
            .arg(root().join("tests/peers/email/bench_peer.py"))
            .arg(port.to_string())
            .arg(dir.path().join("peer.db"))
            .arg("sel1._domainkey.example.com")
            .arg(&txt)
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

    let me = std::process::id().to_string();
    let _ = drive(sb_addr, &warm_sb, conns).await;
    if let Some((child, addr)) = &peer {
        let _ = drive(*addr, &warm_peer, conns).await;
        let _ = child.id();
    }
    println!(
        "email: {n} (switchboard) / {peer_n} (peer) messages of ~3 KB per round, {conns} connections, DKIM RSA-2048, commit before 250"
    );
    println!("round | switchboard msg/s | CPU µs/msg | aiosmtpd+dkimpy msg/s | CPU µs/msg");
    let (mut sb_rates, mut sb_cpu, mut p_rates, mut p_cpu) = (vec![], vec![], vec![], vec![]);
    for r in 0..ROUNDS {
        let s = measure(sb_addr, &me, &sb_runs[r], conns).await;
        assert_eq!(s.ok, n, "switchboard refused some messages");
        sb_rates.push(s.rate);
        sb_cpu.push(s.cpu_per_msg);
        let (pr, pc) = match &peer {
            Some((child, addr)) => {
                let p = measure(*addr, &child.id().to_string(), &peer_runs[r], conns).await;
                assert_eq!(p.ok, peer_n, "the peer refused some messages");
                p_rates.push(p.rate);
                p_cpu.push(p.cpu_per_msg);
                (format!("{:.0}", p.rate), format!("{:.0}", p.cpu_per_msg))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "{} | {:.0} | {:.0} | {pr} | {pc}",
            r + 1,
            s.rate,
            s.cpu_per_msg
        );
    }
    let (sr, sc) = (median(sb_rates), median(sb_cpu));
    print!("median | {sr:.0} | {sc:.0}");
    if peer.is_some() {
        let (pr, pc) = (median(p_rates), median(p_cpu));
        println!(" | {pr:.0} | {pc:.0}");
        println!(
            "ratio switchboard ÷ peer: rate {:.1}×, CPU per message {:.1}× less",
            sr / pr,
            pc / sc
        );
    } else {
        println!();
    }
    if let Some((mut child, _)) = peer {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = app.shutdown().await;
}
