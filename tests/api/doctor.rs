//! `switchboard doctor` against a real server on loopback: its public documents (directly, behind
//! a proxy that keeps or drops `Host`, and through a handle domain that redirects WebFinger),
//! DNS answers pre-loaded as `email.dns = "offline"` records, the SMTP listener's STARTTLS
//! certificate, the database and the media secret. Everything right passes; each wrong thing
//! fails (or warns) with its own message and fix; the command exits 1 on a failure.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use switchboard::Config;
use switchboard::config::{DnsMode, Secret};
use switchboard::doctor::{self, Level, Report};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app};

const DOMAIN: &str = "agents.test";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/email")
        .join(name)
}

fn now_s() -> i64 {
    use switchboard::clock::Clock;
    switchboard::clock::SystemClock.now_ms() / 1000
}

/// A server with mail on (STARTTLS with the test certificate for `localhost`, the SMTP host)
/// and `tweak` applied.
async fn spawn(engine: Engine, tweak: impl FnOnce(&mut Config) + Send + 'static) -> TestApp {
    spawn_app(engine, move |c, _| {
        c.email.enabled = true;
        c.email.domain = Some(DOMAIN.into());
        c.email.hostname = Some("localhost".into());
        c.email.dns = DnsMode::Offline;
        c.email.tls_cert_file = Some(fixture("tls.crt").display().to_string());
        c.email.tls_key_file = Some(fixture("tls.key").display().to_string());
        c.media.secret = Some(Secret::new("media-secret-for-tests"));
        tweak(c);
    })
    .await
}

/// The running server's configuration with every DNS record right: MX at the SMTP host, SPF
/// naming it, our DKIM key, a DMARC policy.
async fn right_config(t: &TestApp) -> Config {
    let mut c = t.app().config().clone();
    let db = t.open_db().await;
    let keys = switchboard::keys::Keys::new(db, Arc::new(switchboard::clock::SystemClock));
    let (name, value) =
        switchboard::transports::email::dkim_record(&keys, &c.email.dkim_selector, DOMAIN)
            .await
            .unwrap();
    let r = &mut c.email.dns_records;
    r.insert(name, value);
    r.insert(DOMAIN.into(), "v=spf1 a:localhost -all".into());
    r.insert(format!("_dmarc.{DOMAIN}"), "v=DMARC1; p=reject".into());
    c.email
        .dns_mx
        .insert(DOMAIN.into(), vec!["localhost".into()]);
    c
}

async fn run(t: &TestApp, config: &Config, now: i64) -> Report {
    let opts = doctor::Options {
        smtp: t.app().smtp_addr(),
        now_unix_s: now,
    };
    doctor::run(config, Arc::new(switchboard::clock::SystemClock), &opts).await
}

/// The check `name`'s level and text (detail and fix).
fn check(report: &Report, name: &str) -> (Level, String) {
    let c = report
        .get(name)
        .unwrap_or_else(|| panic!("no {name} check in\n{report}"));
    (
        c.level,
        format!("{} / fix: {}", c.detail, c.fix.clone().unwrap_or_default()),
    )
}

async fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// A reverse proxy on `listener` to `upstream`, one request per connection: it passes the
/// client's `Host` while `keep_host` is set, else replaces it with the upstream address (a
/// misconfigured proxy).
fn proxy(
    listener: TcpListener,
    upstream: Arc<std::sync::Mutex<Option<SocketAddr>>>,
    keep_host: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let (upstream, keep) = (upstream.clone(), keep_host.clone());
            tokio::spawn(async move {
                let Some(head) = read_head(&mut client).await else {
                    return;
                };
                let Some(to) = *upstream.lock().unwrap() else {
                    return;
                };
                let head: String = head
                    .split("\r\n")
                    .map(|line| {
                        let is_host = line.to_ascii_lowercase().starts_with("host:");
                        if is_host && !keep.load(Ordering::SeqCst) {
                            format!("Host: {to}")
                        } else if line.to_ascii_lowercase().starts_with("connection:") {
                            "Connection: close".to_owned()
                        } else {
                            line.to_owned()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\r\n");
                let Ok(mut up) = TcpStream::connect(to).await else {
                    return;
                };
                if up.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
            });
        }
    });
}

on_both_engines!(everything_right_passes);

async fn everything_right_passes(engine: Engine) {
    // The handle domain is a main site that redirects its WebFinger here.
    let site = free_port().await;
    let t = spawn(engine, move |c| {
        c.server.handle_domain = Some(site.to_string());
    })
    .await;
    redirector(site, t.base.clone()).await;

    let config = right_config(&t).await;
    let report = run(&t, &config, now_s()).await;
    for name in [
        "host",
        "webfinger",
        "handle-domain",
        "actor",
        "nodeinfo",
        "agent-card",
        "database",
        "media-secret",
        "mx",
        "spf",
        "dkim",
        "dmarc",
        "smtp-cert-name",
        "smtp-cert-expiry",
    ] {
        assert_eq!(check(&report, name).0, Level::Pass, "{name}:\n{report}");
    }
    // Plain http is allowed here by the development switch, and said so.
    let (level, text) = check(&report, "https");
    assert_eq!(level, Level::Warn, "{report}");
    assert!(text.contains("plain http"), "{text}");
    assert!(!report.failed(), "{report}");
    assert!(report.to_string().contains("0 failed"), "{report}");

    // Without a media secret: fine for one SQLite instance, a warning where several may run.
    let mut no_secret = config.clone();
    no_secret.media.secret = None;
    let (level, text) = check(&run(&t, &no_secret, now_s()).await, "media-secret");
    match engine {
        Engine::Sqlite => assert_eq!(level, Level::Pass, "{text}"),
        Engine::Postgres => {
            assert_eq!(level, Level::Warn, "{text}");
            assert!(text.contains("set media.secret"), "{text}");
        }
    }
}

/// An address on loopback nothing listens on yet.
async fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// An HTTP server at `addr` that answers every request with a 301 to `to` + the request target:
/// the handle domain's main site redirecting WebFinger.
async fn redirector(addr: SocketAddr, to: String) {
    let l = TcpListener::bind(addr).await.unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                let Some(head) = read_head(&mut s).await else {
                    return;
                };
                let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let answer = format!(
                    "HTTP/1.1 301 Moved Permanently\r\nlocation: {to}{target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
}

/// Each wrong thing fails with its message: a proxy that drops `Host`, MX elsewhere, SPF not
/// naming us, a DKIM record with another key, no DMARC, a certificate for another name, an
/// expired or expiring certificate; and the command exits 1 on a failure, 0 without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wrong_thing_fails_with_its_fix() {
    // The public URL is a proxy in front of the server.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let public = listener.local_addr().unwrap();
    let upstream = Arc::new(std::sync::Mutex::new(None));
    let keep_host = Arc::new(AtomicBool::new(true));
    proxy(listener, upstream.clone(), keep_host.clone());
    let t = spawn(Engine::Sqlite, move |c| {
        c.server.public_url = Some(format!("http://{public}"));
    })
    .await;
    *upstream.lock().unwrap() = Some(t.app().http_addr());
    let right = right_config(&t).await;
    let report = run(&t, &right, now_s()).await;
    assert!(
        !report.failed(),
        "through a proxy that keeps Host:\n{report}"
    );

    keep_host.store(false, Ordering::SeqCst);
    let report = run(&t, &right, now_s()).await;
    let (level, text) = check(&report, "host");
    assert_eq!(level, Level::Fail, "{report}");
    assert!(
        text.contains(&format!("Host: {}, not {public}", t.app().http_addr()))
            && text.contains("proxy_set_header Host $host"),
        "{text}"
    );
    keep_host.store(true, Ordering::SeqCst);

    let wrong = |f: &dyn Fn(&mut Config)| {
        let mut c = right.clone();
        f(&mut c);
        c
    };
    let cases: Vec<(&str, Config, &str)> = vec![
        (
            "mx",
            wrong(&|c| {
                c.email
                    .dns_mx
                    .insert(DOMAIN.into(), vec!["mx.elsewhere.test".into()]);
            }),
            "does not reach localhost",
        ),
        (
            "mx",
            wrong(&|c| {
                c.email.dns_mx.clear();
            }),
            "has no MX record",
        ),
        (
            "spf",
            wrong(&|c| {
                c.email
                    .dns_records
                    .insert(DOMAIN.into(), "v=spf1 a:other.test -all".into());
            }),
            "does not let localhost send",
        ),
        (
            "dkim",
            wrong(&|c| {
                let key = std::fs::read_to_string(fixture("sender-dkim.pub.b64")).unwrap();
                c.email.dns_records.insert(
                    format!("{}._domainkey.{DOMAIN}", c.email.dkim_selector),
                    format!("v=DKIM1; k=rsa; p={}", key.trim()),
                );
            }),
            "publishes another key than the one we sign with",
        ),
        (
            "dmarc",
            wrong(&|c| {
                c.email.dns_records.remove(&format!("_dmarc.{DOMAIN}"));
            }),
            "no DMARC record at _dmarc.agents.test",
        ),
        (
            "smtp-cert-name",
            wrong(&|c| {
                c.email.hostname = Some("mx.agents.test".into());
            }),
            "does not cover mx.agents.test",
        ),
    ];
    for (name, config, expect) in cases {
        let report = run(&t, &config, now_s()).await;
        let (level, text) = check(&report, name);
        assert_eq!(level, Level::Fail, "{name}: {report}");
        assert!(text.contains(expect), "{name}: {text}");
        assert!(report.failed());
    }

    // With a relay, SPF is followed through include: to the relay's own record.
    let relayed = |relay_spf: &str| {
        let mut c = right.clone();
        c.email.relay_host = Some("127.0.0.1".into());
        let r = &mut c.email.dns_records;
        r.insert(DOMAIN.into(), "v=spf1 include:_spf.relay.test -all".into());
        r.insert("_spf.relay.test".into(), relay_spf.to_owned());
        c
    };
    let ok = relayed("v=spf1 ip4:127.0.0.0/8 -all");
    let (level, text) = check(&run(&t, &ok, now_s()).await, "spf");
    assert_eq!(level, Level::Pass, "{text}");
    let elsewhere = relayed("v=spf1 ip4:192.0.2.0/24 -all");
    let (level, text) = check(&run(&t, &elsewhere, now_s()).await, "spf");
    assert_eq!(level, Level::Fail, "{text}");
    assert!(text.contains("does not let 127.0.0.1 send"), "{text}");

    // The test certificate's end, read from the certificate itself.
    let pem = std::fs::read(fixture("tls.crt")).unwrap();
    let der = {
        use tokio_rustls::rustls::pki_types::{CertificateDer, pem::PemObject};
        CertificateDer::from_pem_slice(&pem).unwrap()
    };
    let end = doctor::not_after(&der).expect("notAfter");
    let (level, text) = check(&run(&t, &right, end + 86_400).await, "smtp-cert-expiry");
    assert_eq!(level, Level::Fail);
    assert!(
        text.contains("expired on") && text.contains("renew it"),
        "{text}"
    );
    let (level, text) = check(&run(&t, &right, end - 5 * 86_400).await, "smtp-cert-expiry");
    assert_eq!(level, Level::Warn);
    assert!(text.contains("within 14 days"), "{text}");

    // The command: exit 1 with the failure printed, then 0 once it is fixed.
    let dir = tempfile::tempdir().unwrap();
    let smtp = t.app().smtp_addr().unwrap().to_string();
    let cli = |config: &Config| {
        let path = dir.path().join("doctor.toml");
        std::fs::write(&path, toml::to_string(config).unwrap()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args([
                "--config",
                path.to_str().unwrap(),
                "doctor",
                "--smtp",
                &smtp,
            ])
            .env("SWITCHBOARD__DATABASE__URL", &t.db.url)
            .env("SWITCHBOARD__MEDIA__SECRET", "media-secret-for-tests")
            .env_remove("SWITCHBOARD_CONFIG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, out) = cli(&wrong(&|c| {
        c.email.dns_records.remove(&format!("_dmarc.{DOMAIN}"));
    }));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL  dmarc"), "{out}");
    assert!(
        out.contains("fix: publish `_dmarc.agents.test. IN TXT"),
        "{out}"
    );
    let (code, out) = cli(&right);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("pass  dkim"), "{out}");
}

/// A local development setup (plain http on loopback) is told from a broken public one, and
/// each gets its own fix: locally with the development switch off the guard refuses to fetch
/// the public URL, which is said as such (turn the switch on, or serve a public https URL) and
/// is no failure; locally with nothing listening, start the server; only a public URL that
/// cannot be fetched gets the DNS and proxy advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_setup_is_told_from_a_broken_public_one() {
    let t = spawn_app(Engine::Sqlite, |_, _| {}).await;
    // The web checks are what this is about: the mail checks are left out.
    let mut running = t.app().config().clone();
    running.email.enabled = false;
    assert!(
        running
            .server
            .public_url
            .as_deref()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
        "the server runs on loopback"
    );

    let mut local = running.clone();
    local.net.allow_private_addresses = false;
    let report = run(&t, &local, now_s()).await;
    let (level, text) = check(&report, "https");
    assert_eq!(level, Level::Warn, "{report}");
    assert!(text.contains("development"), "{text}");
    let (level, text) = check(&report, "host");
    assert_eq!(level, Level::Warn, "{report}");
    assert!(
        text.contains("net.allow_private_addresses = true") && text.contains("https://"),
        "{text}"
    );
    assert!(
        !text.contains("DNS") && !text.contains("proxy"),
        "no DNS or proxy advice for a local setup: {text}"
    );
    assert!(
        report.get("webfinger").is_none(),
        "the fetches refused for the same reason are not run: {report}"
    );
    assert!(!report.failed(), "{report}");

    // Locally with the switch on and nothing listening at the public URL: start the server.
    let mut stopped = running.clone();
    stopped.server.public_url = Some(format!("http://{}", free_port().await));
    let report = run(&t, &stopped, now_s()).await;
    let (level, text) = check(&report, "host");
    assert_eq!(level, Level::Fail, "{report}");
    assert!(
        text.contains("switchboard serve") && !text.contains("DNS"),
        "{text}"
    );

    // A public URL that does not resolve: DNS and the proxy.
    let mut public = running.clone();
    public.net.allow_private_addresses = false;
    public.server.public_url = Some("https://switchboard.invalid".into());
    let report = run(&t, &public, now_s()).await;
    assert_eq!(check(&report, "https").0, Level::Pass, "{report}");
    let (level, text) = check(&report, "host");
    assert_eq!(level, Level::Fail, "{report}");
    assert!(text.contains("check DNS"), "{text}");
}
