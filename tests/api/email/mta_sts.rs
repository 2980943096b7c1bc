//! MTA-STS on loopback: direct MX delivery to four domains whose policies an HTTPS server of
//! our own test CA serves. `example.com` (enforce, its MX listed and offering STARTTLS with a
//! valid certificate) gets its reply over TLS; `strict.test` (enforce, its MX not listed) and
//! `plain.test` (enforce, its MX without STARTTLS) get nothing and are retried; `lax.test`
//! (testing, the same MX without STARTTLS) gets its reply, the failure recorded. Each policy is
//! fetched once, however often its domain is tried.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Catcher, Raw, fixture, free_port, peers, spawn_email, transaction};
use crate::helpers::wait_for;

/// The HTTPS server of policies (`tests/peers/email/sts_server.py`), killed on drop.
struct PolicyServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for PolicyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PolicyServer {
    /// Serves `policies` (domain, body) at `mta-sts.{domain}`.
    fn start(p: &super::Peers, policies: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (domain, body) in policies {
            std::fs::write(dir.path().join(format!("mta-sts.{domain}.txt")), body).unwrap();
        }
        let port = free_port();
        let mut child = Command::new(&p.python)
            .arg(p.scripts.join("sts_server.py"))
            .arg(port.to_string())
            .arg(fixture("sts.crt"))
            .arg(fixture("sts.key"))
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the policy server did not start");
        Self { child, port, dir }
    }

    /// How often each policy host was asked.
    fn fetches(&self, host: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("fetches.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == host)
            .count()
    }
}

fn policy(mode: &str, mx: &str) -> String {
    format!("version: STSv1\r\nmode: {mode}\r\nmx: {mx}\r\nmax_age: 86400\r\n")
}

/// The email configuration of the test's servers: MX hosts on `port`, policies on `sts_port`.
fn configure(port: u16, sts_port: u16) -> impl FnOnce(&mut switchboard::Config) {
    move |c| {
        let e = &mut c.email;
        e.direct_port = port;
        e.mta_sts_port = sts_port;
        e.tls_roots_file = Some(fixture("sts-ca.crt").display().to_string());
        for (domain, mx, ip) in [
            ("example.com", "mx.example.com", "127.0.0.1"),
            ("strict.test", "mx.example.com", "127.0.0.1"),
            ("plain.test", "mx.plain.test", "127.0.0.2"),
            ("lax.test", "mx.plain.test", "127.0.0.2"),
        ] {
            e.dns_mx.insert(domain.into(), vec![mx.into()]);
            e.dns_hosts.insert(mx.into(), vec![ip.parse().unwrap()]);
            e.dns_hosts.insert(
                format!("mta-sts.{domain}"),
                vec!["127.0.0.1".parse().unwrap()],
            );
            e.dns_records.insert(
                format!("_mta-sts.{domain}"),
                "v=STSv1; id=2026112901;".into(),
            );
            if domain != "example.com" {
                e.dns_records
                    .insert(domain.into(), "v=spf1 ip4:127.0.0.1 -all".into());
                e.dns_records
                    .insert(format!("_dmarc.{domain}"), "v=DMARC1; p=none".into());
            }
        }
    }
}

/// Sends a message from `alice@{domain}` to echo.
async fn mail_from(r: &mut Raw, domain: &str, n: usize) {
    let from = format!("alice@{domain}");
    transaction(r, &from, &["echo@agents.test"]).await;
    r.send(
        format!(
            "From: Alice <{from}>\r\nTo: echo@agents.test\r\nSubject: sts\r\nMessage-ID: <sts{n}@{domain}>\r\n\r\nover MTA-STS\r\n.\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(r.reply().await.starts_with("250"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_delivery_honours_mta_sts_policies() {
    let Some(p) = peers() else { return };
    let port = free_port();
    // The MX with STARTTLS on 127.0.0.1, the one without on 127.0.0.2, on one port.
    let tls_mx = Catcher::start_on(
        &p,
        250,
        "127.0.0.1",
        port,
        Some((&fixture("sts.crt"), &fixture("sts.key"))),
    );
    let plain_mx = Catcher::start_on(&p, 250, "127.0.0.2", port, None);
    let (enforce, testing) = (
        policy("enforce", "mx.example.com"),
        policy("testing", "mx.plain.test"),
    );
    let server = PolicyServer::start(
        &p,
        &[
            ("example.com", enforce.as_str()),
            ("strict.test", &policy("enforce", "mx.strict.test")),
            ("plain.test", &policy("enforce", "mx.plain.test")),
            ("lax.test", testing.as_str()),
        ],
    );
    let (mut app, _helper, addr) = spawn_email(None, configure(port, server.port)).await;

    let mut r = Raw::connect(addr).await;
    for (i, domain) in ["example.com", "strict.test", "plain.test", "lax.test"]
        .iter()
        .enumerate()
    {
        mail_from(&mut r, domain, i).await;
    }

    // Enforced and met: over TLS, to the listed MX.
    let (_, envelope) = tls_mx.message(1).await;
    assert_eq!(envelope[1], "alice@example.com");
    assert!(
        tls_mx.dir.path().join("1.tls").exists(),
        "sent over STARTTLS"
    );
    // Testing mode: sent without TLS all the same.
    let (_, envelope) = plain_mx.message(1).await;
    assert_eq!(envelope[1], "alice@lax.test");

    // Enforced and not met: nothing sent, retried, the reason kept.
    let db = app.open_db().await;
    for (domain, why) in [
        (
            "strict.test",
            "MX mx.example.com is not in strict.test's policy",
        ),
        ("plain.test", "TLS with MX mx.plain.test failed"),
    ] {
        let job = wait_for(30, &format!("a retried delivery to {domain}"), || {
            let db = db.clone();
            async move {
                let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 20)
                    .await
                    .unwrap();
                jobs.into_iter().find(|j| {
                    j.attempts >= 2 && j.last_error.as_deref().is_some_and(|e| e.contains(why))
                })
            }
        })
        .await;
        assert_ne!(job.state, "done", "{domain}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !tls_mx.dir.path().join("2.eml").exists(),
        "strict.test got nothing"
    );
    assert!(
        !plain_mx.dir.path().join("2.eml").exists(),
        "plain.test got nothing"
    );

    let metrics = app.metrics().await;
    for line in [
        "switchboard_mta_sts_failures_total{mode=\"enforce\",failed=\"mx_mismatch\"}",
        "switchboard_mta_sts_failures_total{mode=\"enforce\",failed=\"tls_failed\"}",
        "switchboard_mta_sts_failures_total{mode=\"testing\",failed=\"tls_failed\"}",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    // Each policy was fetched once: retries use the one kept.
    for domain in ["example.com", "strict.test", "plain.test", "lax.test"] {
        assert_eq!(server.fetches(&format!("mta-sts.{domain}")), 1, "{domain}");
    }

    // Started again on the same database, with the policy server gone: the policies kept in
    // the database still hold (without them strict.test's mail would now go to its MX).
    app.stop().await;
    drop(server);
    let db_url = app.db.url.clone();
    let (mut again, addr) = super::spawn_email_agents_on(
        crate::helpers::TestDb::url_only(db_url),
        None,
        vec![(
            "helper".into(),
            std::sync::Arc::new(crate::helpers::RecordingAgent::default()),
        )],
        configure(port, free_port()),
    )
    .await;
    let mut r = Raw::connect(addr).await;
    mail_from(&mut r, "strict.test", 9).await;
    let db = again.open_db().await;
    wait_for(
        30,
        "the new mail to strict.test refused by the kept policy",
        || {
            let db = db.clone();
            async move {
                let jobs = switchboard::store::jobs::list(&db, None, Some("deliver"), 50)
                    .await
                    .unwrap();
                (jobs
                    .iter()
                    .filter(|j| {
                        j.last_error
                            .as_deref()
                            .is_some_and(|e| e.contains("not in strict.test's policy"))
                    })
                    .count()
                    >= 2)
                    .then_some(())
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !tls_mx.dir.path().join("2.eml").exists(),
        "strict.test still got nothing"
    );
    again.stop().await;
}
