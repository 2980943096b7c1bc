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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postfix_relays_into_switchboard_through_a_transport_map() {
    let Some(p) = peers() else { return };
    let (mut app, helper, addr) = spawn_email(None, |_| {}).await;
    let postfix = Postfix::start(addr);

    // Mail signed by dkimpy goes to Postfix, which relays it to switchboard.
    let msg = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Through the relay\nDate: Sun, 22 Nov 2026 06:00:00 +0000\nMessage-ID: <relay-1@example.com>\n\nDoes this reach you through Postfix?\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        msg,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        postfix.addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok && out.contains("250 2.0.0 Ok: queued"), "{out}");
    let line = postfix
        .logged(&[
            &format!("relay=127.0.0.1[127.0.0.1]:{}", addr.port()),
            "status=sent",
        ])
        .await;
    assert!(line.contains("250 2.0.0 Message queued"), "{line}");
    let seen = wait_seen(&helper, 1).await;
    let m = &seen[0];
    // Postfix's Received header does not break DKIM: DMARC passes aligned.
    assert_eq!(m.sender.address, "alice@example.com");
    assert!(m.sender.verified, "{:?}", m.sender);
    assert_eq!(m.sender.auth_method.as_str(), "email-dmarc");
    assert_eq!(m.raw["envelope"]["helo"], "mx.relay.test");
    assert!(text_of(m).contains("through Postfix"), "{}", text_of(m));

    // An address that is not an agent: Postfix accepts it for the relay domain, switchboard
    // refuses it at RCPT, and the bounce is Postfix's to send, not ours.
    let (ok, out) = swaks(
        &p,
        postfix.addr,
        "alice@example.com",
        &["nobody@agents.test"],
        &signed,
    );
    assert!(ok, "{out}");
    let line = postfix
        .logged(&["nobody@agents.test", "status=bounced"])
        .await;
    assert!(line.contains("550 5.1.1"), "{line}");
    assert_eq!(seen.len(), 1);
    app.stop().await;
}

on_both_engines!(swaks_mail_signed_by_dkimpy_gets_a_dkim_signed_threaded_reply);
async fn swaks_mail_signed_by_dkimpy_gets_a_dkim_signed_threaded_reply(engine: Engine) {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let (mut app, helper, addr) = spawn_email_on(engine, Some(catcher.port), |_| {}).await;

    // 1. A first message, signed by dkimpy, sent by swaks.
    let m1 = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Plans for Tuesday\nDate: Sun, 22 Nov 2026 06:00:00 +0000\nMessage-ID: <m1@example.com>\n\nCan we meet on Tuesday?\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        m1,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok && out.contains("250 2.0.0 Message queued"), "{out}");

    let first = wait_seen(&helper, 1).await;
    let m = &first[0];
    assert_eq!(m.sender.address, "alice@example.com");
    assert!(m.sender.verified);
    let sender = serde_json::to_value(&m.sender).unwrap();
    assert_eq!(sender["auth_method"], "email-dmarc");
    assert_eq!(sender["key_id"], "sel1._domainkey.example.com");
    assert_eq!(
        sender["identities"][0]["subject"],
        "mailto:alice@example.com"
    );
    assert_eq!(sender["identities"][0]["assurance"], "address");
    assert_eq!(m.recipient, app.agent("helper"));
    assert!(text_of(m).contains("Can we meet on Tuesday?"));
    assert!(
        text_of(m).starts_with("Subject: Plans for Tuesday"),
        "{}",
        text_of(m)
    );
    let caps = serde_json::to_value(&m.recipient_capabilities).unwrap();
    assert_eq!(caps["mention_relay"]["kind"], "recipient-field");
    assert_eq!(m.raw["subject"], "Plans for Tuesday");
    let ar = m.raw["authentication_results"].as_str().unwrap();
    assert!(
        ar.contains("dkim=pass") && ar.contains("spf=pass") && ar.contains("dmarc=pass"),
        "{ar}"
    );
    assert!(
        ar.contains("smtp.helo=client.example.com"),
        "HELO checked too: {ar}"
    );
    assert_eq!(m.raw["envelope"]["mail_from"], "alice@example.com");

    // 2. The reply reaches the catcher, threaded and signed.
    let (reply, envelope) = catcher.message(1).await;
    assert!(
        envelope[0].starts_with("bounces+") && envelope[0].ends_with("@agents.test"),
        "{envelope:?}"
    );
    assert_eq!(envelope[1], "alice@example.com");
    assert_eq!(header(&reply, "Subject").unwrap(), "Re: Plans for Tuesday");
    assert_eq!(header(&reply, "In-Reply-To").unwrap(), "<m1@example.com>");
    assert_eq!(header(&reply, "References").unwrap(), "<m1@example.com>");
    assert_eq!(header(&reply, "Auto-Submitted").unwrap(), "auto-replied");
    assert!(
        header(&reply, "From")
            .unwrap()
            .contains("helper@agents.test")
    );
    assert!(header(&reply, "To").unwrap().contains("alice@example.com"));
    assert!(
        header(&reply, "Content-Type")
            .unwrap()
            .starts_with("multipart/alternative")
    );
    let reply_id = header(&reply, "Message-ID").unwrap();
    assert!(reply_id.ends_with("@agents.test>"), "{reply_id}");

    // dkimpy verifies the reply against the record `switchboard dkim` would print.
    let keys = app.app().pipeline().keys().clone();
    let (name, txt) = switchboard::transports::email::dkim_record(&keys, "switchboard", DOMAIN)
        .await
        .unwrap();
    let file = catcher.dir.path().join("1.eml");
    let (ok, out) = run(Command::new(&p.python)
        .arg(p.scripts.join("verify.py"))
        .arg(&file)
        .arg(&name)
        .arg(&txt));
    assert!(ok, "dkimpy refused our signature: {out}");
    assert!(out.starts_with("pass agents.test switchboard"), "{out}");
    // And a wrong key fails, so the check above means something.
    let other = format!("v=DKIM1; k=rsa; p={}", fixture_text("sender-dkim.pub.b64"));
    let (ok, _) = run(Command::new(&p.python)
        .arg(p.scripts.join("verify.py"))
        .arg(&file)
        .arg(&name)
        .arg(&other));
    assert!(!ok, "dkimpy accepted a signature under the wrong key");

    // 3. Alice answers the reply, quoting it: same thread, with history.
    let m2 = format!(
        "From: Alice Example <alice@example.com>\nTo: helper@agents.test\nSubject: Re: Plans for Tuesday\nDate: Sun, 22 Nov 2026 06:05:00 +0000\nMessage-ID: <m2@example.com>\nIn-Reply-To: {reply_id}\nReferences: <m1@example.com> {reply_id}\n\nGreat, 10:00 then.\n\nOn Sun, 22 Nov 2026, Helper wrote:\n> Can we meet on Tuesday?\n"
    );
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "example.com",
        &m2,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "alice@example.com",
        &["helper@agents.test"],
        &signed,
    );
    assert!(ok, "{out}");
    let both = wait_seen(&helper, 2).await;
    let second = &both[1];
    assert_eq!(
        second.thread_id, both[0].thread_id,
        "the answer stays in the thread"
    );
    assert_eq!(text_of(second), "Great, 10:00 then.", "quote stripped");
    let history = second.history.as_ref().expect("history");
    let hist = serde_json::to_string(history).unwrap();
    assert!(hist.contains("Can we meet on Tuesday?"), "{hist}");
    assert!(hist.contains("assistant"), "{hist}");
    // in_reply_to names our stored response (the reply the message answers).
    let response_id = reply_id
        .trim_matches(['<', '>'])
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(second.in_reply_to.as_deref(), Some(response_id.as_str()));

    let (reply2, _) = catcher.message(2).await;
    assert_eq!(header(&reply2, "In-Reply-To").unwrap(), "<m2@example.com>");
    assert_eq!(
        header(&reply2, "References").unwrap(),
        format!("<m1@example.com> {reply_id} <m2@example.com>")
    );
    assert_eq!(header(&reply2, "Subject").unwrap(), "Re: Plans for Tuesday");

    // 4. A bounce of the first reply to our VERP address marks its delivery failed.
    let db = app.open_db().await;
    let outcome = wait_for(10, "delivery recorded", || {
        let (db, id) = (db.clone(), response_id.clone());
        async move {
            switchboard::transports::email::store::delivery_outcome(&db, &id)
                .await
                .unwrap()
        }
    })
    .await;
    assert_eq!(outcome.0, "delivered");
    let dsn = format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.com>\nTo: {bounce}\nSubject: Undelivered Mail Returned to Sender\nMessage-ID: <dsn1@mx.example.com>\nMIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\nYour message could not be delivered.\n--b\nContent-Type: message/delivery-status\n\nReporting-MTA: dns; mx.example.com\n\nFinal-Recipient: rfc822; alice@example.com\nAction: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 user unknown\n--b--\n",
        bounce = envelope[0]
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dsn.eml");
    std::fs::write(&path, crlf(&dsn)).unwrap();
    let (ok, out) = swaks(&p, addr, "<>", &[&envelope[0]], &path);
    assert!(ok, "{out}");
    let outcome = switchboard::transports::email::store::delivery_outcome(&db, &response_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.0, "failed");
    assert!(outcome.1.unwrap().contains("5.1.1"));
    // The bounce woke nobody.
    assert_eq!(seen(&helper).len(), 2);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_mail_is_refused_or_flagged_per_agent() {
    let Some(p) = peers() else { return };
    let (mut app, helper, addr) = spawn_email(None, |c| {
        c.agents.push(switchboard::config::AgentConfig {
            activitypub: None,
            access: None,
            name: "strict".into(),
            display_name: None,
            summary: None,
            backend: switchboard::config::BackendConfig::Echo,
            a2a: None,
            email: Some(AgentEmailConfig {
                unauthenticated: Some(UnauthenticatedMail::Reject),
                ..AgentEmailConfig::default()
            }),
            notify: Vec::new(),
        });
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, crlf(body)).unwrap();
        path
    };

    // Unsigned mail from a domain with no SPF, DKIM or DMARC.
    let forged = write(
        "forged.eml",
        "From: Mallory <mallory@elsewhere.test>\nTo: strict@agents.test, helper@agents.test\nSubject: hi\nMessage-ID: <f1@elsewhere.test>\n\nTrust me.\n",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "mallory@elsewhere.test",
        &["strict@agents.test"],
        &forged,
    );
    assert!(
        !ok && out.contains("550 5.7.1"),
        "refused for a strict agent: {out}"
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "mallory@elsewhere.test",
        &["helper@agents.test"],
        &forged,
    );
    assert!(
        ok && out.contains("250 2.0.0"),
        "accepted, flagged, for a lenient agent: {out}"
    );
    let got = wait_seen(&helper, 1).await;
    assert!(!got[0].sender.verified);
    let sender = serde_json::to_value(&got[0].sender).unwrap();
    assert_eq!(sender["auth_method"], "none");
    assert!(sender.get("identities").is_none(), "{sender}");

    // A forged From at a domain with DMARC p=reject, unsigned, sent from an IP SPF allows:
    // SPF passes for MAIL FROM but the From domain differs, so DMARC fails.
    let spoof = write(
        "spoof.eml",
        "From: Alice <alice@example.com>\nTo: strict@agents.test\nSubject: pay\nMessage-ID: <s1@x.test>\n\nPay now.\n",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "mallory@elsewhere.test",
        &["strict@agents.test"],
        &spoof,
    );
    assert!(!ok && out.contains("550 5.7.1"), "{out}");

    // Weak signatures do not count: RSA-SHA1, and a 768-bit key.
    let body = "From: Dana <dana@dkimonly.test>\nTo: strict@agents.test\nSubject: weak\nMessage-ID: <w1@dkimonly.test>\n\nHello.\n";
    let sha1 = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "dkimonly.test",
        body,
        "rsa-sha1",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "dana@dkimonly.test",
        &["strict@agents.test"],
        &sha1,
    );
    assert!(
        !ok && out.contains("550 5.7.1"),
        "rsa-sha1 must not authenticate: {out}"
    );
    let small = dkimpy_sign(
        &p,
        "weak-dkim.key",
        "weak",
        "dkimonly.test",
        body,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "dana@dkimonly.test",
        &["strict@agents.test"],
        &small,
    );
    assert!(
        !ok && out.contains("550 5.7.1"),
        "a 768-bit key must not authenticate: {out}"
    );
    // The same message properly signed passes on DKIM alone (no SPF for this domain).
    let good = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "dkimonly.test",
        body,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "dana@dkimonly.test",
        &["strict@agents.test"],
        &good,
    );
    assert!(ok && out.contains("250 2.0.0"), "{out}");

    // mail-auth <= 0.14 misreads a relaxed body ending in whitespace-only lines; the workaround
    // verifies it the RFC 6376 way, as dkimpy does.
    let trailing = "From: Dana <dana@dkimonly.test>\nTo: strict@agents.test\nSubject: blank tail\nMessage-ID: <w2@dkimonly.test>\n\nHello!\n  \n\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "dkimonly.test",
        trailing,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "dana@dkimonly.test",
        &["strict@agents.test"],
        &signed,
    );
    assert!(
        ok && out.contains("250 2.0.0"),
        "relaxed body with blank tail: {out}"
    );
    // The repaired pass is a DKIM pass for DMARC too: a domain publishing p=reject whose
    // aligned signature verifies only over the repaired body passes DMARC, so a strict agent
    // takes it and a lenient one is told it is `email-dmarc`.
    let trailing = "From: Erin <erin@dmarconly.test>\nTo: strict@agents.test, helper@agents.test\nSubject: blank tail\nMessage-ID: <w3@dmarconly.test>\n\nHello!\n  \n\n";
    let signed = dkimpy_sign(
        &p,
        "sender-dkim.key",
        "sel1",
        "dmarconly.test",
        trailing,
        "rsa-sha256",
    );
    let (ok, out) = swaks(
        &p,
        addr,
        "erin@dmarconly.test",
        &["strict@agents.test", "helper@agents.test"],
        &signed,
    );
    assert!(
        ok && out.contains("250 2.0.0"),
        "DMARC passes on the repaired DKIM signature: {out}"
    );
    let got = wait_seen(&helper, 2).await;
    let erin = got
        .iter()
        .find(|m| m.sender.address == "erin@dmarconly.test")
        .expect("erin's message reached helper");
    let sender = serde_json::to_value(&erin.sender).unwrap();
    assert_eq!(sender["auth_method"], "email-dmarc", "{sender}");
    assert!(erin.sender.verified);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reply_is_mailed_to_an_unauthenticated_sender_unless_the_agent_opts_in() {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let (mut app, _helper, addr) = spawn_email(Some(catcher.port), |c| {
        c.agents.push(switchboard::config::AgentConfig {
            activitypub: None,
            access: None,
            name: "open".into(),
            display_name: None,
            summary: None,
            backend: switchboard::config::BackendConfig::Echo,
            a2a: None,
            email: Some(AgentEmailConfig {
                reply_to_unauthenticated: true,
                ..AgentEmailConfig::default()
            }),
            notify: Vec::new(),
        });
    })
    .await;
    let mut r = Raw::connect(addr).await;
    // Unsigned, from a domain with no SPF or DMARC, naming a victim in From and Reply-To: the
    // agent is told (verified: false), but no signed reply carries the text to the victim.
    transaction(&mut r, "mallory@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"From: victim@elsewhere.test\r\nReply-To: other@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <refl1@elsewhere.test>\r\n\r\nquote me\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let db = app.open_db().await;
    let job = wait_for(20, "the reply to be refused", || {
        let db = db.clone();
        async move {
            let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 10)
                .await
                .unwrap();
            jobs.into_iter().find(|j| j.state == "dead")
        }
    })
    .await;
    let err = job.last_error.unwrap_or_default();
    assert!(err.contains("not authenticated"), "{err}");
    // An agent that opts in answers the From address, never the claimed Reply-To.
    transaction(&mut r, "mallory@elsewhere.test", &["open@agents.test"]).await;
    r.send(b"From: victim@elsewhere.test\r\nReply-To: other@elsewhere.test\r\nTo: open@agents.test\r\nMessage-ID: <refl2@elsewhere.test>\r\n\r\nquote me\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let (reply, envelope) = catcher.message(1).await;
    assert_eq!(envelope[1], "victim@elsewhere.test", "{envelope:?}");
    assert_eq!(
        header(&reply, "In-Reply-To").unwrap(),
        "<refl2@elsewhere.test>",
        "the first message got no reply"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_refusals_end_the_delivery_and_deferrals_are_retried() {
    let Some(p) = peers() else { return };
    for code in [550u16, 451] {
        let catcher = Catcher::start(&p, code);
        let (mut app, _helper, addr) = spawn_email(Some(catcher.port), |_| {}).await;
        let mut r = Raw::connect(addr).await;
        // From alice@example.com, authenticated by SPF and DMARC, so a reply is mailed.
        transaction(&mut r, "alice@example.com", &["echo@agents.test"]).await;
        r.send(b"From: alice@example.com\r\nTo: echo@agents.test\r\nMessage-ID: <relay@example.com>\r\n\r\nhello\r\n.\r\n").await;
        assert!(r.reply().await.starts_with("250"));
        let db = app.open_db().await;
        let job = wait_for(20, "the delivery to be refused or retried", || {
            let db = db.clone();
            async move {
                let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 10)
                    .await
                    .unwrap();
                jobs.into_iter()
                    .find(|j| j.state == "dead" || j.attempts >= 2)
            }
        })
        .await;
        let err = job.last_error.clone().unwrap_or_default();
        if code == 550 {
            assert_eq!(job.state, "dead", "a 5xx is permanent: {job:?}");
            assert_eq!(job.attempts, 1, "and never retried: {job:?}");
            assert!(err.contains("permanent"), "{err}");
        } else {
            assert_ne!(job.state, "dead", "a 4xx is retried: {job:?}");
            assert!(job.attempts >= 2, "{job:?}");
            assert!(err.contains("temporary"), "{err}");
        }
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_relay_replies_go_to_the_recipients_mx() {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let port = catcher.port;
    let (mut app, _helper, addr) = spawn_email(None, move |c| {
        c.email.direct_port = port;
        c.email
            .dns_mx
            .insert("example.com".into(), vec!["127.0.0.1".into()]);
    })
    .await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "alice@example.com", &["echo@agents.test"]).await;
    r.send(b"From: Alice <alice@example.com>\r\nTo: echo@agents.test\r\nSubject: direct\r\nMessage-ID: <mx1@example.com>\r\n\r\nstraight to the MX\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let (reply, envelope) = catcher.message(1).await;
    assert_eq!(envelope[1], "alice@example.com");
    assert_eq!(header(&reply, "In-Reply-To").unwrap(), "<mx1@example.com>");
    assert!(header(&reply, "DKIM-Signature").is_some());
    // A domain with no MX and no address: retried, not dropped.
    transaction(&mut r, "bob@nowhere.test", &["echo@agents.test"]).await;
    r.send(b"From: bob@nowhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <mx2@nowhere.test>\r\n\r\nhello\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let db = app.open_db().await;
    let job = wait_for(20, "a retried delivery", || {
        let db = db.clone();
        async move {
            let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 10)
                .await
                .unwrap();
            jobs.into_iter().find(|j| j.attempts >= 2)
        }
    })
    .await;
    assert_ne!(job.state, "dead");
    assert!(job.last_error.unwrap_or_default().contains("nowhere.test"));
    app.stop().await;
}

#[test]
fn dkim_command_prints_the_record_to_publish() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"sqlite://{}\"\n[email]\ndomain = \"agents.test\"\ndkim_selector = \"s2026\"\n",
            dir.path().join("sb.db").display()
        ),
    )
    .unwrap();
    // The server made the database; `dkim`, like every command but `serve`, never creates one.
    let url = format!("sqlite://{}", dir.path().join("sb.db").display());
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(crate::helpers::create_db(&url));
    let run_dkim = || {
        let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["--config", config.to_str().unwrap(), "dkim"])
            .env_remove("SWITCHBOARD_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run_dkim();
    assert!(
        first.starts_with("s2026._domainkey.agents.test. IN TXT \"v=DKIM1; k=rsa; p=MIIB"),
        "{first}"
    );
    // Strings of at most 255 bytes.
    for s in first.split('"').skip(1).step_by(2) {
        assert!(s.len() <= 255, "{s}");
    }
    assert_eq!(run_dkim(), first, "the key is made once and kept");
}

// ---------------------------------------------------------------------------------------------
// Raw-socket tests: no peers needed.

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

on_both_engines!(session_commands_limits_and_pipelining);
async fn session_commands_limits_and_pipelining(engine: Engine) {
    let (mut app, _helper, addr) = spawn_email_on(engine, None, |c| {
        c.email.max_recipients = 2;
        c.email.max_message_bytes = 50_000;
    })
    .await;
    let mut r = Raw::connect(addr).await;
    assert!(r.cmd("MAIL FROM:<a@b.test>").await.starts_with("503 5.5.1"));
    let ehlo = r.cmd("EHLO client.test").await;
    for ext in [
        "PIPELINING",
        "SIZE 50000",
        "8BITMIME",
        "SMTPUTF8",
        "ENHANCEDSTATUSCODES",
    ] {
        assert!(ehlo.contains(ext), "{ext} missing: {ehlo}");
    }
    assert!(
        !ehlo.contains("STARTTLS"),
        "no certificate, no STARTTLS: {ehlo}"
    );
    assert!(r.cmd("VRFY echo").await.starts_with("502"));
    assert!(r.cmd("STARTTLS").await.starts_with("502 5.7.0"));
    assert!(r.cmd("NOOP").await.starts_with("250"));
    assert!(r.cmd("BOGUS").await.starts_with("500 5.5.1"));
    assert!(r.cmd("RCPT TO:<echo@agents.test>").await.starts_with("503"));
    assert!(
        r.cmd("MAIL FROM:<a@b.test> SIZE=60000")
            .await
            .starts_with("552")
    );
    assert!(
        r.cmd("MAIL FROM:<a@b.test> SIZE=1000")
            .await
            .starts_with("250")
    );
    assert!(
        r.cmd("RCPT TO:<nobody@agents.test>")
            .await
            .starts_with("550 5.1.1")
    );
    assert!(
        r.cmd("RCPT TO:<echo@elsewhere.test>")
            .await
            .starts_with("550 5.7.1 Relaying denied")
    );
    assert!(r.cmd("RCPT TO:<echo@agents.test>").await.starts_with("250"));
    assert!(
        r.cmd("RCPT TO:<helper+tag@agents.test>")
            .await
            .starts_with("250")
    );
    assert!(
        r.cmd("RCPT TO:<helper@agents.test>")
            .await
            .starts_with("250"),
        "a repeat is fine"
    );
    assert!(
        r.cmd("RCPT TO:<bounces+x@agents.test>")
            .await
            .starts_with("452 4.5.3")
    );
    assert!(r.cmd("RSET").await.starts_with("250"));
    assert!(r.cmd("DATA").await.starts_with("503"));

    // Everything pipelined in one write; one message to two agents, each woken once, plus
    // an agent in the envelope only (Bcc) that is not woken.
    let msg = crlf(
        "From: Bob <bob@elsewhere.test>\nTo: echo@agents.test, helper@agents.test\nSubject: pipelined\nMessage-ID: <p1@elsewhere.test>\n\nhello both\n.\n",
    );
    let batch = format!(
        "MAIL FROM:<bob@elsewhere.test>\r\nRCPT TO:<echo@agents.test>\r\nRCPT TO:<helper@agents.test>\r\nDATA\r\n{msg}"
    );
    r.send(batch.as_bytes()).await;
    for want in ["250", "250", "250", "354"] {
        let got = r.reply().await;
        assert!(got.starts_with(want), "{want}: {got}");
    }
    let done = r.reply().await;
    assert!(done.starts_with("250 2.0.0 Message queued"), "{done}");
    // 250 means committed: both copies are in the database now.
    assert_eq!(stored_messages(&app).await, 2);
    // The same message again is a duplicate, not a third copy.
    r.send(batch.as_bytes()).await;
    for _ in 0..4 {
        r.reply().await;
    }
    assert!(r.reply().await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 2);
    // Bcc-only agent: accepted, nobody woken.
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(crlf("From: bob@elsewhere.test\nTo: someone@elsewhere.test\nMessage-ID: <p2@elsewhere.test>\n\nbcc\n.\n").as_bytes()).await;
    assert!(r.reply().await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 2);
    assert!(r.cmd("QUIT").await.starts_with("221"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_smuggling_and_bad_line_endings_are_refused() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    // "\n.\n" must not end DATA: the smuggled transaction is part of the (refused) message.
    let smuggle = "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <sm1@elsewhere.test>\r\n\r\nhi\n.\nMAIL FROM:<admin@agents.test>\r\nRCPT TO:<echo@agents.test>\r\nDATA\r\nFrom: admin@agents.test\r\nTo: echo@agents.test\r\n\r\nsmuggled\r\n.\r\n";
    r.send(smuggle.as_bytes()).await;
    let got = r.reply().await;
    assert!(got.starts_with("550 5.6.0"), "{got}");
    // Nothing else was answered: the smuggled commands were never commands.
    assert!(r.cmd("NOOP").await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 0);
    // Other shapes: "\r\n.\n" and "\n.\r\n" do not end DATA either.
    for tail in ["\r\n.\nQUIT\r\n", "\n.\r\nQUIT\r\n"] {
        transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
        r.send(
            format!("From: bob@elsewhere.test\r\nMessage-ID: <sm2@e.test>\r\n\r\nx{tail}")
                .as_bytes(),
        )
        .await;
        r.send(b"\r\n.\r\n").await;
        let got = r.reply().await;
        assert!(got.starts_with("550 5.6.0"), "{tail:?}: {got}");
    }
    // Dot-stuffing is undone: a line "..x" arrives as ".x".
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <ds@e.test>\r\n\r\n..x\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    assert_eq!(stored_messages(&app).await, 1);
    let db = app.open_db().await;
    let rows: Vec<(String,)> = db
        .fetch_all("SELECT body FROM messages WHERE direction = 'in'", &[])
        .await
        .unwrap();
    drop(db);
    assert!(rows[0].0.contains("\".x\""), "{}", rows[0].0);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_data_body_is_answered_at_once() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    // The dot right after 354 ends DATA (it follows the CRLF that ended "DATA").
    r.send(b".\r\n").await;
    let got = r.reply().await;
    assert!(got.starts_with("250") || got.starts_with('5'), "{got}");
    assert!(r.cmd("NOOP").await.starts_with("250"));
    // A stuffed first line is unstuffed like any other line.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"..x\r\n.\r\n").await;
    let got = r.reply().await;
    assert!(got.starts_with("250") || got.starts_with('5'), "{got}");
    assert!(r.cmd("QUIT").await.starts_with("221"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_references_header_is_accepted_and_threads() {
    let (mut app, helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(b"From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <t0@e.test>\r\n\r\nfirst\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    // 5,000 ids, folded ten to a line.
    let ids: Vec<String> = std::iter::once("<t0@e.test>".to_owned())
        .chain((1..5000).map(|i| format!("<r{i}@e.test>")))
        .collect();
    let refs = ids
        .chunks(10)
        .map(|c| c.join(" "))
        .collect::<Vec<_>>()
        .join("\r\n ");
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(
        format!("From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <t1@e.test>\r\nIn-Reply-To: <r4999@e.test>\r\nReferences: {refs}\r\n\r\nsecond\r\n.\r\n")
            .as_bytes(),
    )
    .await;
    let got = r.reply().await;
    assert!(got.starts_with("250"), "{got}");
    let two = wait_seen(&helper, 2).await;
    assert_eq!(two[0].thread_id, two[1].thread_id, "threaded by the root");
    app.stop().await;
}

on_both_engines!(a_reply_to_a_received_message_threads_through_its_message_id);
async fn a_reply_to_a_received_message_threads_through_its_message_id(engine: Engine) {
    let (mut app, helper, addr) = spawn_email_on(engine, None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    // `m2` answers `m1` with In-Reply-To only, as some clients do: its thread cannot come from
    // a References root, only from knowing `m1`. `m1` also goes to `echo`: each agent keeps
    // its own copy.
    let mails = [
        "From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <m0@e.test>\r\n\r\nturn zero\r\n.\r\n",
        "From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nCc: echo@agents.test\r\nMessage-ID: <m1@e.test>\r\nIn-Reply-To: <m0@e.test>\r\nReferences: <m0@e.test>\r\n\r\nturn one\r\n.\r\n",
        "From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <m2@e.test>\r\nIn-Reply-To: <m1@e.test>\r\n\r\nturn two\r\n.\r\n",
    ];
    for (i, mail) in mails.iter().enumerate() {
        let to: &[&str] = if i == 1 {
            &["helper@agents.test", "echo@agents.test"]
        } else {
            &["helper@agents.test"]
        };
        transaction(&mut r, "bob@elsewhere.test", to).await;
        r.send(mail.as_bytes()).await;
        let got = r.reply().await;
        assert!(got.starts_with("250"), "{got}");
        // Each turn is seen before the next is sent, so the order below is the sending order.
        wait_seen(&helper, i + 1).await;
    }
    let seen = wait_seen(&helper, 3).await;
    let turn = |word: &str| {
        seen.iter()
            .find(|m| text_of(m).contains(word))
            .unwrap_or_else(|| panic!("no turn {word}"))
            .clone()
    };
    let (zero, one, two) = (turn("turn zero"), turn("turn one"), turn("turn two"));
    assert_eq!(one.thread_id, zero.thread_id, "threaded by References");
    assert_eq!(
        two.thread_id, zero.thread_id,
        "threaded by a received Message-ID"
    );
    assert_eq!(two.in_reply_to.as_deref(), Some(one.id.as_str()));
    assert_eq!(one.in_reply_to.as_deref(), Some(zero.id.as_str()));
    // A duplicate of `m2` (a retry) is stored once.
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(mails[2].as_bytes()).await;
    assert!(r.reply().await.starts_with("250"));
    assert!(r.cmd("QUIT").await.starts_with("221"));
    assert_eq!(
        stored_messages(&app).await,
        4,
        "three for helper, one for echo"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacceptable_from_address_is_refused_permanently() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"From: taro..yamada@docomo.ne.jp\r\nTo: echo@agents.test\r\nMessage-ID: <dd@e.test>\r\n\r\nhi\r\n.\r\n").await;
    let got = r.reply().await;
    assert!(got.starts_with("550 5.6.0"), "{got}");
    assert_eq!(stored_messages(&app).await, 0);
    assert!(r.cmd("QUIT").await.starts_with("221"));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_long_lines_deep_nesting_and_garbage_are_handled() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_message_bytes = 20_000;
    })
    .await;
    let mut r = Raw::connect(addr).await;

    // An enormous base64 part: read to the end, refused 552, the session goes on.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let mut big = String::from(
        "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <big@e.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n",
    );
    for _ in 0..2_000 {
        big.push_str("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5\r\n");
    }
    big.push_str("--b--\r\n.\r\n");
    r.send(big.as_bytes()).await;
    assert!(r.reply().await.starts_with("552 5.3.4"));
    assert!(r.cmd("NOOP").await.starts_with("250"));

    // A line over the RFC 5322 limit.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(
        format!(
            "From: bob@elsewhere.test\r\nMessage-ID: <long@e.test>\r\n\r\n{}\r\n.\r\n",
            "y".repeat(1_500)
        )
        .as_bytes(),
    )
    .await;
    assert!(r.reply().await.starts_with("550 5.6.0"));

    // Multiparts nested past the cap.
    let mut body = String::from("Content-Type: text/plain\r\n\r\ndeep\r\n");
    for i in 0..15 {
        body = format!(
            "Content-Type: multipart/mixed; boundary=n{i}\r\n\r\n--n{i}\r\n{body}\r\n--n{i}--\r\n"
        );
    }
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(format!("From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <deep@e.test>\r\nMIME-Version: 1.0\r\n{body}.\r\n").as_bytes()).await;
    let got = r.reply().await;
    assert!(
        got.starts_with("550 5.6.0") && got.contains("nested"),
        "{got}"
    );

    // A header name with a space, which parsers read differently.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    r.send(b"Fr om: admin@agents.test\r\nFrom: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <sp@e.test>\r\n\r\nx\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("550 5.6.0"));

    // Too many hops.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let hops: String = (0..51)
        .map(|i| format!("Received: from h{i}.test by h{}.test\r\n", i + 1))
        .collect();
    r.send(format!("{hops}From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <loop@e.test>\r\n\r\nx\r\n.\r\n").as_bytes()).await;
    assert!(r.reply().await.starts_with("554 5.4.6"));
    assert_eq!(stored_messages(&app).await, 0);

    // 8-bit garbage in headers and malformed MIME: accepted without harm, text recovered.
    transaction(&mut r, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let mut garbage = b"From: \xff\xfe Bob \xc3\x28 <bob@elsewhere.test>\r\nTo: echo@agents.test\r\nSubject: \xe9t\xe9 \xff\r\nMessage-ID: <g@e.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=\"never-closed\"\r\n\r\n--never-closed\r\nContent-Type: text/plain; charset=x-unknown-charset\r\n\r\nstill readable\r\n".to_vec();
    garbage.extend_from_slice(b".\r\n");
    r.send(&garbage).await;
    let got = r.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(stored_messages(&app).await, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_flight_share_one_memory_budget() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_message_bytes = 48 * 1024;
        c.email.max_data_memory_bytes = 64 * 1024;
    })
    .await;
    let held = app.app().pipeline().metrics().smtp_data_bytes().clone();
    let message = |id: &str| {
        let mut m = format!(
            "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <{id}@e.test>\r\n\r\n"
        );
        while m.len() < 30 * 1024 {
            m.push_str("an ordinary line of text that fills the body of this message\r\n");
        }
        m
    };

    // A is halfway through a body and holds the whole budget.
    let mut a = Raw::connect(addr).await;
    transaction(&mut a, "bob@elsewhere.test", &["echo@agents.test"]).await;
    let first = message("a");
    let (head, tail) = first.split_at(first.len() / 2);
    a.send(head.as_bytes()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while held.get() < 64 * 1024 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's body is never held"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // B is deferred (temporary, so its MTA retries), read to its end, and the session goes on.
    let mut b = Raw::connect(addr).await;
    transaction(&mut b, "bob@elsewhere.test", &["echo@agents.test"]).await;
    b.send(format!("{}.\r\n", message("b")).as_bytes()).await;
    let got = b.reply().await;
    assert!(got.starts_with("452 4.3.1"), "{got}");
    assert!(b.cmd("NOOP").await.starts_with("250"));

    // A finishes and gives its share back; B's retry lands.
    a.send(format!("{tail}.\r\n").as_bytes()).await;
    let got = a.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(held.get(), 0, "the budget is whole again");
    transaction(&mut b, "bob@elsewhere.test", &["echo@agents.test"]).await;
    b.send(format!("{}.\r\n", message("b")).as_bytes()).await;
    let got = b.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(stored_messages(&app).await, 2);

    // A session that drops mid-body gives its share back too.
    transaction(&mut a, "bob@elsewhere.test", &["echo@agents.test"]).await;
    a.send(head.as_bytes()).await;
    while held.get() == 0 {
        assert!(tokio::time::Instant::now() < deadline + Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while held.get() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a dropped session keeps its share"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_message_finish_and_closes_idle_sessions() {
    let (mut app, _helper, addr) = spawn_email(None, |_| {}).await;
    let mut idle = Raw::connect(addr).await;
    assert!(idle.cmd("EHLO client.test").await.starts_with("250"));
    let mut a = Raw::connect(addr).await;
    transaction(&mut a, "bob@elsewhere.test", &["echo@agents.test"]).await;
    a.send(b"From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <drain@e.test>\r\n\r\nfirst half")
        .await;
    let stopping = tokio::spawn(async move {
        app.stop().await;
        app
    });
    // A session between messages is told at once and closed.
    let got = idle.reply().await;
    assert!(got.starts_with("421 4.3.2"), "{got}");
    assert_eq!(idle.reply().await, "", "closed");
    // The message being received is finished and committed, then the session is closed.
    a.send(b", second half\r\n.\r\n").await;
    let got = a.reply().await;
    assert!(got.starts_with("250"), "{got}");
    let got = a.reply().await;
    assert!(got.starts_with("421 4.3.2"), "{got}");
    let app = stopping.await.unwrap();
    assert_eq!(stored_messages(&app).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_rules_keep_automatic_mail_from_agents() {
    let (mut app, helper, addr) = spawn_email(None, |_| {}).await;
    let mut r = Raw::connect(addr).await;
    let cases = [
        ("bob@elsewhere.test", "Auto-Submitted: auto-replied\r\n"),
        ("bob@elsewhere.test", "List-Id: <list.elsewhere.test>\r\n"),
        ("bob@elsewhere.test", "Precedence: bulk\r\n"),
        ("bob@elsewhere.test", "X-Auto-Response-Suppress: All\r\n"),
        ("MAILER-DAEMON@elsewhere.test", ""),
        ("owner-list@elsewhere.test", ""),
        ("", ""),
    ];
    for (i, (from, extra)) in cases.iter().enumerate() {
        assert!(r.cmd("EHLO client.test").await.starts_with("250"));
        assert!(
            r.cmd(&format!("MAIL FROM:<{from}>"))
                .await
                .starts_with("250")
        );
        assert!(
            r.cmd("RCPT TO:<helper@agents.test>")
                .await
                .starts_with("250")
        );
        assert!(r.cmd("DATA").await.starts_with("354"));
        let msg = format!(
            "From: bob@elsewhere.test\r\nTo: helper@agents.test\r\n{extra}Message-ID: <auto{i}@e.test>\r\n\r\nout of office\r\n.\r\n"
        );
        r.send(msg.as_bytes()).await;
        let got = r.reply().await;
        assert!(got.starts_with("250"), "case {i}: {got}");
    }
    // Outlook's Thread-Index threads two messages whose References were stripped.
    for (i, ti) in [
        "AQHZpP3Jr6zG5Ug0S0GZqZ0n4r0xYQ==",
        "AQHZpP3Jr6zG5Ug0S0GZqZ0n4r0xYYCAgICA",
    ]
    .iter()
    .enumerate()
    {
        transaction(&mut r, "carol@elsewhere.test", &["helper@agents.test"]).await;
        let msg = format!(
            "From: carol@elsewhere.test\r\nTo: helper@agents.test\r\nSubject: outlook {i}\r\nThread-Index: {ti}\r\nMessage-ID: <ti{i}@e.test>\r\n\r\nturn {i}\r\n.\r\n"
        );
        r.send(msg.as_bytes()).await;
        assert!(r.reply().await.starts_with("250"));
    }
    let two = wait_seen(&helper, 2).await;
    assert_eq!(
        two[0].thread_id, two[1].thread_id,
        "same Thread-Index conversation"
    );

    // An ordinary message gets through, so the ones above were really kept out.
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(b"From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nAuto-Submitted: no\r\nMessage-ID: <ok@e.test>\r\n\r\nhello\r\n.\r\n").await;
    assert!(r.reply().await.starts_with("250"));
    let got = wait_seen(&helper, 3).await;
    assert_eq!(got.len(), 3);
    assert_ne!(got[2].thread_id, got[0].thread_id);
    assert_eq!(stored_messages(&app).await, 3);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_become_file_parts_within_the_cap() {
    let (mut app, helper, addr) = spawn_email(None, |c| {
        c.media.max_bytes = 64;
    })
    .await;
    let mut r = Raw::connect(addr).await;
    assert!(r.cmd("HELO old.client.test").await.starts_with("250"));
    assert!(
        r.cmd("MAIL FROM:<bob@elsewhere.test>")
            .await
            .starts_with("250")
    );
    assert!(
        r.cmd("RCPT TO:<helper@agents.test>")
            .await
            .starts_with("250")
    );
    assert!(r.cmd("DATA").await.starts_with("354"));
    let big = "QUJD".repeat(40); // 120 bytes decoded: over the 64-byte cap
    let msg = format!(
        "From: Bob <bob@elsewhere.test>\r\nTo: helper@agents.test\r\nSubject: files\r\nMessage-ID: <att@e.test>\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"m\"\r\n\r\n--m\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nSee attached.\r\n--m\r\nContent-Type: image/png\r\nContent-Disposition: inline; filename=\"dot.png\"\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n--m\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"big.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n{big}\r\n--m--\r\n.\r\n"
    );
    r.send(msg.as_bytes()).await;
    assert!(r.reply().await.starts_with("250"));
    let got = wait_seen(&helper, 1).await;
    let parts = serde_json::to_value(&got[0].parts).unwrap();
    assert_eq!(parts[0]["kind"], "text");
    assert!(
        parts[0]["content"]
            .as_str()
            .unwrap()
            .contains("See attached.")
    );
    assert_eq!(
        parts.as_array().unwrap().len(),
        2,
        "the oversized file is dropped: {parts}"
    );
    assert_eq!(parts[1]["kind"], "file");
    assert_eq!(parts[1]["name"], "dot.png");
    assert_eq!(parts[1]["mime"], "image/png");
    assert_eq!(got[0].raw["dropped_attachments"], 1);
    assert_eq!(got[0].raw["envelope"]["helo"], "old.client.test");
    // The agent fetches the bytes from the signed media URL.
    let url = parts[1]["bytes_ref"]["url"].as_str().unwrap();
    let body = app
        .http
        .get(url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&body[..], b"\x89PNG\r\n\x1a\n");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_is_answered_451_and_the_retry_lands() {
    let (mut app, helper, addr) = spawn_email(None, |_| {}).await;
    let db = app.open_db().await;
    // Break the store under the running server: ingest cannot commit.
    db.execute("ALTER TABLE inbound_seen RENAME TO inbound_seen_away", &[])
        .await
        .unwrap();
    let msg = b"From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <tf@e.test>\r\n\r\nplease retry\r\n.\r\n";
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(msg).await;
    let got = r.reply().await;
    assert!(got.starts_with("451 4.3.0"), "{got}");
    db.execute("ALTER TABLE inbound_seen_away RENAME TO inbound_seen", &[])
        .await
        .unwrap();
    // The sender retries the same message: now it is stored, once.
    transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
    r.send(msg).await;
    let got = r.reply().await;
    assert!(got.starts_with("250"), "{got}");
    assert_eq!(wait_seen(&helper, 1).await.len(), 1);
    assert_eq!(stored_messages(&app).await, 1);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_and_slow_clients_are_cut_off() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_commands = 20;
        c.email.idle_timeout_seconds = 1;
        c.email.max_sessions = 2;
    })
    .await;
    // Past the session cap a client is told 421 at once.
    let held = (Raw::connect(addr).await, Raw::connect(addr).await);
    let mut third = TcpStream::connect(addr).await.unwrap();
    let mut b = vec![0u8; 256];
    let n = third.read(&mut b).await.unwrap();
    assert!(String::from_utf8_lossy(&b[..n]).starts_with("421 4.7.0"));
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut r = Raw::connect(addr).await;
    r.send("NOOP\r\n".repeat(100).as_bytes()).await;
    let mut all = String::new();
    loop {
        let got = r.reply().await;
        if got.is_empty() {
            break;
        }
        all.push_str(&got);
    }
    assert_eq!(all.matches("250 2.0.0").count(), 20, "{all}");
    assert!(all.contains("421 4.7.0"), "{all}");

    // A client that goes quiet is told and disconnected.
    let mut slow = Raw::connect(addr).await;
    assert!(slow.cmd("EHLO slow.test").await.starts_with("250"));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let got = slow.reply().await;
    assert!(got.starts_with("421 4.4.2"), "{got}");
    assert_eq!(slow.reply().await, "", "then the connection closes");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_discards_injected_plaintext() {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.tls_cert_file = Some(fixture("tls.crt").display().to_string());
        c.email.tls_key_file = Some(fixture("tls.key").display().to_string());
    })
    .await;
    let mut r = Raw::connect(addr).await;
    let ehlo = r.cmd("EHLO client.test").await;
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");
    // The classic injection: commands pipelined behind STARTTLS in the same packet.
    r.send(b"STARTTLS\r\nMAIL FROM:<evil@elsewhere.test>\r\nRCPT TO:<echo@agents.test>\r\n")
        .await;
    let got = r.reply().await;
    assert!(got.starts_with("220 2.0.0"), "{got}");
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(fixture("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let mut tls = connector
        .connect("localhost".try_into().unwrap(), r.s)
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut say = async |tls: &mut tokio_rustls::client::TlsStream<TcpStream>, line: &str| {
        tls.write_all(format!("{line}\r\n").as_bytes())
            .await
            .unwrap();
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // The session starts anew: the injected MAIL and RCPT were never run.
    let got = say(&mut tls, "RCPT TO:<echo@agents.test>").await;
    assert!(got.starts_with("503"), "{got}");
    let ehlo = say(&mut tls, "EHLO client.test").await;
    assert!(
        ehlo.starts_with("250") && !ehlo.contains("STARTTLS"),
        "{ehlo}"
    );
    let got = say(&mut tls, "STARTTLS").await;
    assert!(got.starts_with("504 5.7.4"), "{got}");
    let got = say(&mut tls, "RCPT TO:<echo@agents.test>").await;
    assert!(got.starts_with("503"), "MAIL was not carried over: {got}");
    assert!(
        say(&mut tls, "MAIL FROM:<bob@elsewhere.test>")
            .await
            .starts_with("250")
    );
    assert!(
        say(&mut tls, "RCPT TO:<echo@agents.test>")
            .await
            .starts_with("250")
    );
    assert!(say(&mut tls, "DATA").await.starts_with("354"));
    let got = say(&mut tls, "From: bob@elsewhere.test\r\nTo: echo@agents.test\r\nMessage-ID: <tls@e.test>\r\n\r\nover TLS\r\n.").await;
    assert!(got.starts_with("250"), "{got}");
    let db = app.open_db().await;
    let rows: Vec<(String,)> = db
        .fetch_all("SELECT body FROM messages WHERE direction = 'in'", &[])
        .await
        .unwrap();
    drop(db);
    let v: Value = serde_json::from_str(&rows[0].0).unwrap();
    assert_eq!(v["raw"]["envelope"]["tls"], true);
    assert_eq!(v["raw"]["envelope"]["mail_from"], "bob@elsewhere.test");
    app.stop().await;
}

/// `[agents.access]` over SMTP: an agent no mail could satisfy refuses at RCPT; otherwise the
/// verified evidence decides after DATA (DMARC-aligned From in, a look-alike display name and
/// an unauthenticated From out, a deny rule winning over an allow rule).
async fn access_rules_decide_mail_on_verified_evidence_only(engine: Engine) {
    use switchboard::config::{
        AccessConfig, AccessDefault, AccessRule, AgentConfig, BackendConfig,
    };
    let agent = |name: &str, access: AccessConfig| AgentConfig {
        activitypub: None,
        access: Some(access),
        name: name.into(),
        display_name: None,
        summary: None,
        backend: BackendConfig::Echo,
        a2a: None,
        email: None,
        notify: Vec::new(),
    };
    let (mut app, helper, addr) = spawn_email_on(engine, None, |c| {
        c.agents.push(agent(
            "helper",
            AccessConfig {
                refusal_reply: Default::default(),
                limits: Default::default(),
                default: AccessDefault::Deny,
                allow: vec![AccessRule {
                    method: Some("email-dmarc".into()),
                    subject: Some("mailto:*@example.com".into()),
                    ..AccessRule::default()
                }],
                deny: vec![AccessRule {
                    subject: Some("mailto:blocked@example.com".into()),
                    ..AccessRule::default()
                }],
            },
        ));
        c.agents.push(agent(
            "fedionly",
            AccessConfig {
                refusal_reply: Default::default(),
                limits: Default::default(),
                default: AccessDefault::Deny,
                allow: vec![AccessRule {
                    method: Some("ap-http-signature".into()),
                    ..AccessRule::default()
                }],
                deny: vec![],
            },
        ));
    })
    .await;
    let to = format!("helper@{DOMAIN}");

    // No mail can carry an ActivityPub signature: refused before the body is sent.
    let mut r = Raw::connect(addr).await;
    assert!(r.cmd("EHLO client.test").await.starts_with("250"));
    assert!(
        r.cmd("MAIL FROM:<alice@example.com>")
            .await
            .starts_with("250")
    );
    let rcpt = r.cmd(&format!("RCPT TO:<fedionly@{DOMAIN}>")).await;
    assert!(rcpt.starts_with("550 5.7.1"), "{rcpt}");

    async fn mail(addr: SocketAddr, from: &str, header_from: &str, to: &str, id: &str) -> String {
        let mut r = Raw::connect(addr).await;
        transaction(&mut r, from, &[to]).await;
        let body = format!(
            "From: {header_from}\r\nTo: {to}\r\nSubject: access\r\nMessage-ID: <{id}>\r\n\r\nHello.\r\n.\r\n"
        );
        r.send(body.as_bytes()).await;
        r.reply().await
    }
    // From aligned with an SPF pass (DMARC pass): email-dmarc evidence for mailto:alice@….
    let ok = mail(
        addr,
        "alice@example.com",
        "Alice <alice@example.com>",
        &to,
        "a1@example.com",
    )
    .await;
    assert!(ok.starts_with("250"), "{ok}");
    let got = wait_seen(&helper, 1).await;
    let evidence = serde_json::to_value(&got[0].sender.identities).unwrap();
    assert_eq!(evidence[0]["method"], "email-dmarc", "{evidence}");
    assert_eq!(evidence[0]["subject"], "mailto:alice@example.com");

    // A display name or a From that only looks like a partner's grants nothing.
    let forged = mail(
        addr,
        "mallory@elsewhere.test",
        "\"mailto:alice@example.com\" <mallory@elsewhere.test>",
        &to,
        "m1@elsewhere.test",
    )
    .await;
    assert!(forged.starts_with("550 5.7.1"), "{forged}");
    let spoofed = mail(
        addr,
        "mallory@elsewhere.test",
        "Alice <alice@example.com>",
        &to,
        "m2@elsewhere.test",
    )
    .await;
    assert!(spoofed.starts_with("550 5.7.1"), "{spoofed}");

    // Authenticated and allowed by domain, but denied by name: deny wins.
    let denied = mail(
        addr,
        "blocked@example.com",
        "<blocked@example.com>",
        &to,
        "b1@example.com",
    )
    .await;
    assert!(denied.starts_with("550 5.7.1"), "{denied}");

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen(&helper).len(), 1, "nothing refused reached the agent");
    assert_eq!(stored_messages(&app).await, 1, "nothing refused was stored");
    let metrics = app.metrics().await;
    for (agent, reason, n) in [
        ("helper", "not_allowed", 2),
        ("helper", "denied", 1),
        ("fedionly", "not_allowed", 1),
    ] {
        let line = format!(
            "switchboard_refused_total{{agent=\"{agent}\",transport=\"email\",reason=\"{reason}\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    app.stop().await;
}
on_both_engines!(access_rules_decide_mail_on_verified_evidence_only);

/// A sender over its rate limit is told to come back later: `451 4.7.1`, a temporary refusal
/// that the sending server retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_over_its_rate_gets_451() {
    let (mut app, helper, addr) = spawn_email(None, |c| {
        c.limits.per_sender = Some(switchboard::config::Rate {
            requests: 1,
            per_seconds: 3600,
        });
    })
    .await;
    let to = format!("helper@{DOMAIN}");
    for (n, want) in [(1, "250"), (2, "451 4.7.1")] {
        let mut r = Raw::connect(addr).await;
        transaction(&mut r, "alice@example.com", &[&to]).await;
        let body = format!(
            "From: Alice <alice@example.com>\r\nTo: {to}\r\nSubject: n{n}\r\nMessage-ID: <rate{n}@example.com>\r\n\r\nHello.\r\n.\r\n"
        );
        r.send(body.as_bytes()).await;
        let reply = r.reply().await;
        assert!(reply.starts_with(want), "message {n}: {reply}");
    }
    assert_eq!(wait_seen(&helper, 1).await.len(), 1);
    app.stop().await;
}

mod blocks;
mod bounces;
mod durable;
mod loops;
mod mta_sts;
mod multi_agent;
mod policy;
mod roles;

/// One peer holds at most `email.max_sessions_per_peer` sessions: the next is told 421 at once,
/// while another address is still greeted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_holds_at_most_its_sessions() {
    let (mut app, _helper, addr) = spawn_email(None, |c| {
        c.email.max_sessions_per_peer = 2;
    })
    .await;
    let _a = Raw::connect(addr).await;
    let _b = Raw::connect(addr).await;
    let mut third = TcpStream::connect(addr).await.unwrap();
    let mut got = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), third.read_to_string(&mut got)).await;
    assert!(
        got.starts_with("421 4.7.0 Too many connections from your address"),
        "{got:?}"
    );
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    let mut greeting = [0u8; 4];
    other.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"220 ");
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "switchboard_connections_refused_total{listener=\"smtp\",reason=\"peer_full\"} 1"
        ),
        "{metrics}"
    );
    app.stop().await;
}
