//! Agents' mail among switchboards: a reply is marked `Auto-Submitted` and carries its agent
//! conversation's hop (`X-Mentionable-Agent-Chain`), so another switchboard never answers it,
//! and a mail whose chain is past its hop limit is kept but not answered.

use std::net::SocketAddr;
use std::time::Duration;

use switchboard::store::Arg;

use super::{Raw, free_port, spawn_email_agents, transaction};
use crate::helpers::{Engine, TestApp, on_both_engines, wait_for};

/// The `n` of the one row `sql` returns.
async fn count(t: &TestApp, sql: &str, args: &[Arg<'_>]) -> i64 {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let n: Option<N> = t
        .app()
        .pipeline()
        .db()
        .fetch_optional(sql, args)
        .await
        .unwrap();
    n.map_or(0, |n| n.n)
}

async fn responses(t: &TestApp) -> i64 {
    count(
        t,
        "SELECT COUNT(*) AS n FROM messages WHERE direction = 'out'",
        &[],
    )
    .await
}

/// An instance whose echo agent is `echo@{domain}`, relaying its mail to `relay_port`, and
/// trusting both test domains' SPF (mail from loopback passes DMARC).
async fn instance(
    engine: Engine,
    domain: &'static str,
    relay_port: u16,
    bind: Option<u16>,
) -> (TestApp, SocketAddr) {
    spawn_email_agents(engine, Some(relay_port), vec![], move |c| {
        c.email.domain = Some(domain.into());
        if let Some(port) = bind {
            c.email.bind = format!("127.0.0.1:{port}").parse().unwrap();
        }
        for d in ["a.test", "b.test"] {
            let r = &mut c.email.dns_records;
            r.insert(d.into(), "v=spf1 ip4:127.0.0.1 -all".into());
            r.insert(format!("_dmarc.{d}"), "v=DMARC1; p=none".into());
        }
    })
    .await
}

/// Sends `headers` and a short body from `from` to `to` at `addr`; the reply to the final dot.
async fn send(addr: SocketAddr, from: &str, to: &str, headers: &str) -> String {
    let mut r = Raw::connect(addr).await;
    transaction(&mut r, from, &[to]).await;
    let data = format!("From: {from}\r\nTo: {to}\r\n{headers}\r\nhello\r\n.\r\n");
    r.send(data.as_bytes()).await;
    r.reply().await
}

on_both_engines!(two_switchboards_never_answer_each_others_mail);
async fn two_switchboards_never_answer_each_others_mail(engine: Engine) {
    // b relays to a's listener, a to b's.
    let a_port = free_port();
    let (b, b_addr) = instance(engine, "b.test", a_port, None).await;
    let (a, a_addr) = instance(engine, "a.test", b_addr.port(), Some(a_port)).await;
    // b's agent writes to a's: a answers, b keeps its hands off the automatic answer.
    let reply = send(
        a_addr,
        "echo@b.test",
        "echo@a.test",
        "Subject: hello\r\nMessage-ID: <first@b.test>\r\n",
    )
    .await;
    assert!(reply.starts_with("250"), "{reply}");
    wait_for(20, "b to take a's answer", || async {
        b.metrics()
            .await
            .contains(
                "switchboard_inbound_messages_total{transport=\"email\",outcome=\"ignored\"} 1",
            )
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!((responses(&a).await, responses(&b).await), (1, 0));
    assert_eq!(
        count(&b, "SELECT COUNT(*) AS n FROM messages", &[]).await,
        0,
        "an automatic answer is not even stored"
    );

    // A mail of another agent's conversation past its hop limit is kept, not answered.
    let reply = send(
        a_addr,
        "echo@b.test",
        "echo@a.test",
        "Subject: again\r\nMessage-ID: <third-hop@b.test>\r\nX-Mentionable-Agent-Chain: hop=3; max-hops=3\r\n",
    )
    .await;
    assert!(reply.starts_with("250"), "{reply}");
    wait_for(20, "the mail to be held", || async {
        (count(
            &a,
            "SELECT COUNT(*) AS n FROM messages WHERE outcome = 'held' AND error_class = $1",
            &[Arg::Text("max-hops")],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    assert_eq!(responses(&a).await, 1);
}
