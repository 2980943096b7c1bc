//! What a mail becomes: threading through `References` and `Message-ID`, automatic mail kept
//! from agents, attachments as file parts within the cap.

use super::*;

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
