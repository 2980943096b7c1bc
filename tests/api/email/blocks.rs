//! Blocks over SMTP: a server-wide block on the envelope sender's address or domain refuses it
//! at `MAIL` with `550 5.7.1`; an agent's own block and blocks on the `From` address refuse after
//! the data, again `550 5.7.1`, unless another recipient takes the mail; nothing refused is
//! stored.

use switchboard::config::BlockConfig;

use super::{Raw, spawn_email, stored_messages, transaction};
use crate::helpers::{TestApp, wait_for};

/// Messages stored for `agent`.
async fn stored_for(t: &TestApp, agent: &str) -> i64 {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let n: Option<N> = t
        .app()
        .pipeline()
        .db()
        .fetch_optional(
            "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in' AND agent = $1",
            &[switchboard::store::Arg::Text(agent)],
        )
        .await
        .unwrap();
    n.map_or(0, |n| n.n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_senders_are_refused_550_5_7_1_and_never_stored() {
    let (t, _helper, addr) = spawn_email(None, |c| {
        for b in [
            BlockConfig {
                domain: Some("spam.test".into()),
                ..Default::default()
            },
            BlockConfig {
                sender: Some("boss@example.com".into()),
                ..Default::default()
            },
            BlockConfig {
                sender: Some("*@nowhere.test".into()),
                agent: Some("echo".into()),
                ..Default::default()
            },
        ] {
            c.moderation.blocks.push(b);
        }
    })
    .await;
    let mut r = Raw::connect(addr).await;
    assert!(r.cmd("EHLO client.test").await.starts_with("250"));
    // The envelope sender's domain, and its subdomains, at MAIL.
    for from in ["eve@spam.test", "eve@mx.SPAM.test"] {
        let reply = r.cmd(&format!("MAIL FROM:<{from}>")).await;
        assert!(reply.starts_with("550 5.7.1"), "{from}: {reply}");
    }
    // The session goes on: a sender not blocked is taken, the null sender too.
    assert!(r.cmd("MAIL FROM:<>").await.starts_with("250"));
    assert!(r.cmd("RSET").await.starts_with("250"));

    // A From address blocked server-wide, behind an envelope that is not: after the data.
    let send = |from: &'static str, to: &'static [&'static str]| async move {
        let mut r = Raw::connect(addr).await;
        transaction(&mut r, from, to).await;
        let data = format!(
            "From: {from}\r\nTo: {}\r\nSubject: hi\r\nMessage-ID: <{}@client.test>\r\n\r\nhello\r\n.\r\n",
            to.join(", "),
            uuid::Uuid::now_v7()
        );
        r.send(data.as_bytes()).await;
        r.reply().await
    };
    let reply = {
        let mut r = Raw::connect(addr).await;
        transaction(&mut r, "bounces@example.com", &["echo@agents.test"]).await;
        r.send(
            b"From: boss@example.com\r\nTo: echo@agents.test\r\nSubject: hi\r\n\r\nhello\r\n.\r\n",
        )
        .await;
        r.reply().await
    };
    assert!(reply.starts_with("550 5.7.1"), "{reply}");
    // An agent's own block: refused when it is the only recipient, skipped beside another.
    let reply = send("bob@nowhere.test", &["echo@agents.test"]).await;
    assert!(reply.starts_with("550 5.7.1"), "{reply}");
    assert_eq!(stored_messages(&t).await, 0);
    let reply = send(
        "bob@nowhere.test",
        &["helper@agents.test", "echo@agents.test"],
    )
    .await;
    assert!(reply.starts_with("250"), "{reply}");
    wait_for(10, "helper's copy", || async {
        (stored_for(&t, "helper").await == 1).then_some(())
    })
    .await;
    assert_eq!(stored_for(&t, "echo").await, 0);
    let metrics = t.metrics().await;
    // The MAIL refusals are the server's; those after the data are the agent's.
    for (agent, n) in [("*", 2), ("echo", 3)] {
        let line = format!(
            "switchboard_refused_total{{agent=\"{agent}\",transport=\"email\",reason=\"blocked\"}} {n}"
        );
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
}
