//! Email: the SMTP listener against real peers (swaks sends, dkimpy signs and verifies, an
//! aiosmtpd catcher receives replies) and against a raw socket for everything peers would never
//! send: smuggling, floods, slow clients, STARTTLS injection, oversized and malformed mail.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use switchboard::config::{AgentEmailConfig, DnsMode, RelayTls, UnauthenticatedMail};
use switchboard::message::NormalizedMessage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{
    Engine, RecordingAgent, TestApp, TestDb, fresh_db, on_both_engines, spawn_on, wait_for,
};

const DOMAIN: &str = "agents.test";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/email")
        .join(name)
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name))
        .unwrap()
        .trim()
        .to_owned()
}

/// The interop peers, or `None` (after saying so) when the interop suite is off.
struct Peers {
    python: String,
    swaks: String,
    scripts: PathBuf,
}

fn peers() -> Option<Peers> {
    if !crate::helpers::interop("email") {
        return None;
    }
    let get = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: source scripts/peers/email.sh (scripts/test does)")
        })
    };
    let p = Peers {
        python: get("SWITCHBOARD_EMAIL_PYTHON"),
        swaks: get("SWITCHBOARD_EMAIL_SWAKS"),
        scripts: PathBuf::from(get("SWITCHBOARD_EMAIL_PEERS")),
    };
    assert!(Path::new(&p.python).exists(), "missing peer: {}", p.python);
    assert!(Path::new(&p.swaks).exists(), "missing peer: {}", p.swaks);
    Some(p)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The aiosmtpd catcher; killed on drop.
struct Catcher {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Catcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Catcher {
    fn start(p: &Peers, code: u16) -> Self {
        Self::start_on(p, code, "127.0.0.1", free_port(), None)
    }

    /// A catcher on `host:port`, offering STARTTLS with `tls` (certificate and key files).
    fn start_on(p: &Peers, code: u16, host: &str, port: u16, tls: Option<(&Path, &Path)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(&p.python);
        cmd.arg(p.scripts.join("catcher.py"))
            .arg(port.to_string())
            .arg(dir.path())
            .arg(code.to_string())
            .arg(host);
        if let Some((cert, key)) = tls {
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "catcher did not start");
        Self { child, port, dir }
    }

    /// Message `n` (1-based) and its envelope, once it has arrived.
    async fn message(&self, n: usize) -> (Vec<u8>, Vec<String>) {
        let eml = self.dir.path().join(format!("{n}.eml"));
        let env = self.dir.path().join(format!("{n}.env"));
        wait_for(30, &format!("reply {n} at the catcher"), || {
            let (eml, env) = (eml.clone(), env.clone());
            async move {
                let data = std::fs::read(&eml).ok()?;
                let env = std::fs::read_to_string(&env).ok()?;
                Some((data, env.lines().map(str::to_owned).collect()))
            }
        })
        .await
    }
}

/// A private Postfix instance (its own configuration, queue and log in a temporary directory)
/// listening on a loopback port and relaying `agents.test` to switchboard through a transport
/// map, as an operator would put Postfix in front. Stopped on drop.
struct Postfix {
    postfix: String,
    dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl Postfix {
    fn start(switchboard: SocketAddr) -> Self {
        Self::start_routing(free_port(), switchboard, &[])
    }

    /// As [`Postfix::start`], listening on `port`, and routing each of `routes` (domain, port)
    /// to that loopback port too.
    fn start_routing(port: u16, switchboard: SocketAddr, routes: &[(&str, u16)]) -> Self {
        let postfix = std::env::var("SWITCHBOARD_EMAIL_POSTFIX").unwrap_or_else(|_| {
            panic!("SWITCHBOARD_EMAIL_POSTFIX is not set: source scripts/peers/email.sh")
        });
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Postfix's daemons run as the postfix user and must reach the queue.
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        for sub in ["etc", "spool", "data"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let (ok, out) = run(Command::new("chown").arg("postfix").arg(d.join("data")));
        assert!(ok, "chown: {out}");
        let d = d.display();
        std::fs::write(
            dir.path().join("etc/main.cf"),
            format!(
                "compatibility_level = 3.6\n\
                 queue_directory = {d}/spool\ndata_directory = {d}/data\n\
                 mail_owner = postfix\nsetgid_group = postdrop\n\
                 myhostname = mx.relay.test\nmydomain = relay.test\nmyorigin = relay.test\n\
                 inet_interfaces = 127.0.0.1\ninet_protocols = ipv4\nmydestination =\n\
                 relay_domains = agents.test\n\
                 transport_maps = texthash:{d}/etc/transport\n\
                 mynetworks = 127.0.0.0/8\n\
                 smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination\n\
                 smtp_dns_support_level = disabled\nalias_maps =\nalias_database =\n\
                 maillog_file = {d}/postfix.log\nmaillog_file_prefixes = {d}\n",
            ),
        )
        .unwrap();
        // The transport map: brackets, so no MX lookup.
        let mut transport = format!("agents.test smtp:[127.0.0.1]:{}\n", switchboard.port());
        for (domain, port) in routes {
            transport.push_str(&format!("{domain} smtp:[127.0.0.1]:{port}\n"));
        }
        std::fs::write(dir.path().join("etc/transport"), transport).unwrap();
        let mut master = format!("127.0.0.1:{port} inet n - n - - smtpd\n");
        for (name, kind, private, limit) in [
            ("pickup", "unix", "n", "1"),
            ("cleanup", "unix", "n", "0"),
            ("qmgr", "unix", "n", "1"),
            ("rewrite", "unix", "-", "-"),
            ("bounce", "unix", "-", "0"),
            ("defer", "unix", "-", "0"),
            ("trace", "unix", "-", "0"),
            ("verify", "unix", "-", "1"),
            ("flush", "unix", "n", "0"),
            ("proxymap", "unix", "-", "-"),
            ("smtp", "unix", "-", "-"),
            ("relay", "unix", "-", "-"),
            ("showq", "unix", "n", "-"),
            ("error", "unix", "-", "-"),
            ("retry", "unix", "-", "-"),
            ("discard", "unix", "-", "-"),
            ("anvil", "unix", "-", "1"),
            ("scache", "unix", "-", "1"),
            ("postlog", "unix-dgram", "n", "1"),
        ] {
            let program = match name {
                "rewrite" => "trivial-rewrite",
                "defer" | "trace" => "bounce",
                "relay" => "smtp",
                "retry" => "error",
                "postlog" => "postlogd",
                other => other,
            };
            master.push_str(&format!(
                "{name} {kind} {private} - n - {limit} {program}\n"
            ));
        }
        std::fs::write(dir.path().join("etc/master.cf"), master).unwrap();
        let (ok, out) = run(Command::new(&postfix)
            .arg("-c")
            .arg(dir.path().join("etc"))
            .arg("start"));
        assert!(
            ok,
            "postfix start: {out} {}",
            std::fs::read_to_string(dir.path().join("postfix.log")).unwrap_or_default()
        );
        Self {
            postfix,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// Waits until a line of Postfix's log holds every one of `words`; returns it.
    async fn logged(&self, words: &[&str]) -> String {
        let log = self.dir.path().join("postfix.log");
        wait_for(30, &format!("Postfix to log {words:?}"), || {
            let log = log.clone();
            async move {
                let text = std::fs::read_to_string(&log).ok()?;
                text.lines()
                    .find(|l| words.iter().all(|w| l.contains(w)))
                    .map(str::to_owned)
            }
        })
        .await
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = Command::new(&self.postfix)
            .arg("-c")
            .arg(self.dir.path().join("etc"))
            .arg("stop")
            .output();
    }
}

/// Unfolded header `name` of a raw message.
fn header(raw: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let mut found: Option<String> = None;
    for line in head.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            if let Some(f) = found.as_mut() {
                f.push(' ');
                f.push_str(line.trim());
            }
            continue;
        }
        if found.is_some() {
            break;
        }
        if let Some((n, v)) = line.split_once(':')
            && n.eq_ignore_ascii_case(name)
        {
            found = Some(v.trim().to_owned());
        }
    }
    found
}

fn crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

fn dns_records(c: &mut switchboard::Config) {
    let key = fixture_text("sender-dkim.pub.b64");
    let weak = fixture_text("weak-dkim.pub.b64");
    let r = &mut c.email.dns_records;
    r.insert(
        "sel1._domainkey.example.com".into(),
        format!("v=DKIM1; k=rsa; p={key}"),
    );
    r.insert("example.com".into(), "v=spf1 ip4:127.0.0.1 -all".into());
    r.insert("_dmarc.example.com".into(), "v=DMARC1; p=reject".into());
    // A domain that authenticates by SPF and DMARC but has no MX and no address.
    r.insert("nowhere.test".into(), "v=spf1 ip4:127.0.0.1 -all".into());
    r.insert("_dmarc.nowhere.test".into(), "v=DMARC1; p=none".into());
    // A domain with a DKIM key but no SPF: DMARC rests on DKIM alone.
    r.insert(
        "sel1._domainkey.dkimonly.test".into(),
        format!("v=DKIM1; k=rsa; p={key}"),
    );
    r.insert(
        "weak._domainkey.dkimonly.test".into(),
        format!("v=DKIM1; k=rsa; p={weak}"),
    );
    // A domain that signs and publishes DMARC p=reject, without SPF: DMARC rests on DKIM.
    r.insert(
        "sel1._domainkey.dmarconly.test".into(),
        format!("v=DKIM1; k=rsa; p={key}"),
    );
    r.insert("_dmarc.dmarconly.test".into(), "v=DMARC1; p=reject".into());
}

/// A server with email on a loopback port, offline DNS pre-loaded, and a recording agent
/// `helper` besides `echo`.
async fn spawn_email(
    relay_port: Option<u16>,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> (TestApp, Arc<RecordingAgent>, SocketAddr) {
    spawn_email_on(Engine::Sqlite, relay_port, tweak).await
}

async fn spawn_email_on(
    engine: Engine,
    relay_port: Option<u16>,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> (TestApp, Arc<RecordingAgent>, SocketAddr) {
    let helper = Arc::new(RecordingAgent::default());
    let (app, addr) = spawn_email_with(engine, relay_port, helper.clone(), tweak).await;
    (app, helper, addr)
}

/// As [`spawn_email_on`], with `helper` answered by the given backend.
async fn spawn_email_with(
    engine: Engine,
    relay_port: Option<u16>,
    helper: Arc<dyn switchboard::agents::AgentBackend>,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> (TestApp, SocketAddr) {
    spawn_email_agents(engine, relay_port, vec![("helper".into(), helper)], tweak).await
}

/// As [`spawn_email_on`], with the given agents (name, backend) besides `echo`.
async fn spawn_email_agents(
    engine: Engine,
    relay_port: Option<u16>,
    agents: Vec<(String, Arc<dyn switchboard::agents::AgentBackend>)>,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> (TestApp, SocketAddr) {
    spawn_email_agents_on(fresh_db(engine).await, relay_port, agents, tweak).await
}

/// As [`spawn_email_agents`], on the database `db` (one a server used before, say).
async fn spawn_email_agents_on(
    db: TestDb,
    relay_port: Option<u16>,
    agents: Vec<(String, Arc<dyn switchboard::agents::AgentBackend>)>,
    tweak: impl FnOnce(&mut switchboard::Config),
) -> (TestApp, SocketAddr) {
    let app = spawn_on(db, move |c, o| {
        c.email.domain = Some(DOMAIN.into());
        c.email.dns = DnsMode::Offline;
        dns_records(c);
        if let Some(port) = relay_port {
            c.email.relay_host = Some("127.0.0.1".into());
            c.email.relay_port = port;
            c.email.relay_tls = RelayTls::None;
        }
        o.agents.extend(agents);
        tweak(c);
    })
    .await;
    let addr = app.app().smtp_addr().unwrap();
    (app, addr)
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Signs `msg` with dkimpy as `selector`/`domain` using a fixture key.
fn dkimpy_sign(
    p: &Peers,
    key: &str,
    selector: &str,
    domain: &str,
    msg: &str,
    algo: &str,
) -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    let src = dir.join("in.eml");
    let dst = dir.join("signed.eml");
    std::fs::write(&src, crlf(msg)).unwrap();
    let (ok, out) = run(Command::new(&p.python)
        .arg(p.scripts.join("sign.py"))
        .arg(fixture(key))
        .args([selector, domain])
        .arg(&src)
        .arg(&dst)
        .arg(algo));
    assert!(ok, "dkimpy signing failed: {out}");
    dst
}

/// Signs `eml` as example.com (selector `sel1`, RSA) and sends it from alice@example.com to
/// `to` with swaks; asserts it was accepted.
fn send_from_alice(p: &Peers, addr: SocketAddr, eml: &str, to: &[&str]) {
    let signed = dkimpy_sign(
        p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        eml,
        "rsa-sha256",
    );
    let (ok, out) = swaks(p, addr, "alice@example.com", to, &signed);
    assert!(ok && out.contains("250 2.0.0"), "{out}");
}

/// Sends a file with swaks; returns (exit ok, transcript).
fn swaks(p: &Peers, addr: SocketAddr, from: &str, to: &[&str], data: &Path) -> (bool, String) {
    let mut cmd = Command::new(&p.swaks);
    cmd.args([
        "--server",
        &addr.to_string(),
        "--from",
        from,
        "--helo",
        "client.example.com",
    ]);
    cmd.args(["--to", &to.join(",")]);
    cmd.arg("--data").arg(data);
    run(&mut cmd)
}

fn seen(agent: &RecordingAgent) -> Vec<NormalizedMessage> {
    agent.seen.lock().unwrap().clone()
}

async fn wait_seen(agent: &RecordingAgent, n: usize) -> Vec<NormalizedMessage> {
    wait_for(30, &format!("{n} message(s) at the agent"), || async {
        let s = seen(agent);
        (s.len() >= n).then_some(s)
    })
    .await
}

fn text_of(m: &NormalizedMessage) -> String {
    serde_json::to_value(&m.parts).unwrap()[0]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// A raw SMTP client, for what peers would never send.

/// A bare SMTP client over a socket.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Self {
        let mut r = Self {
            s: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        };
        let greeting = r.reply().await;
        assert!(greeting.starts_with("220 "), "{greeting}");
        r
    }

    /// Reads one whole (possibly multi-line) reply; "" on EOF.
    async fn reply(&mut self) -> String {
        loop {
            if let Some(end) = self.complete() {
                let r: Vec<u8> = self.buf.drain(..end).collect();
                return String::from_utf8_lossy(&r).into_owned();
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), self.s.read(&mut chunk))
                .await
                .expect("reply within 10 s")
                .unwrap_or(0);
            if n == 0 {
                return String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn complete(&self) -> Option<usize> {
        let mut start = 0;
        while let Some(pos) = self.buf[start..].windows(2).position(|w| w == b"\r\n") {
            let line = &self.buf[start..start + pos];
            let end = start + pos + 2;
            if line.len() >= 4 && line[3] == b' ' || line.len() == 3 {
                return Some(end);
            }
            start = end;
        }
        None
    }

    async fn send(&mut self, data: &[u8]) {
        self.s.write_all(data).await.unwrap();
    }

    async fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }
}

async fn stored_messages(app: &TestApp) -> i64 {
    let db = app.open_db().await;
    switchboard::store::messages::counts(&db)
        .await
        .unwrap()
        .into_iter()
        .filter(|c| c.direction == "in")
        .map(|c| c.n)
        .sum()
}

async fn transaction(r: &mut Raw, from: &str, to: &[&str]) {
    assert!(r.cmd("EHLO client.test").await.starts_with("250"));
    assert!(
        r.cmd(&format!("MAIL FROM:<{from}>"))
            .await
            .starts_with("250")
    );
    for t in to {
        let resp = r.cmd(&format!("RCPT TO:<{t}>")).await;
        assert!(resp.starts_with("250"), "{t}: {resp}");
    }
    assert!(r.cmd("DATA").await.starts_with("354"));
}

mod admission;
mod blocks;
mod bounces;
mod content;
mod durable;
mod loops;
mod mta_sts;
mod multi_agent;
mod peers;
mod policy;
mod roles;
mod session;
