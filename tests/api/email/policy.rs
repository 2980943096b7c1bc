//! The policy round trip over email, with swaks sending DKIM-signed mail and the aiosmtpd
//! catcher receiving replies: the agent's consent request arrives as text and a link; opening
//! the link resolves nothing; pressing its button brings the agent back into the same mail
//! thread, with the resolution verified.

use std::sync::Arc;

use super::{Catcher, dkimpy_sign, header, peers, spawn_email_with, swaks};
use crate::helpers::{Engine, PolicyAgent, on_both_engines};

/// The body of a caught message with quoted-printable soft line breaks undone.
fn body_text(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).replace("=\r\n", "")
}

/// The state of the first landing link in `text`.
fn state_in(text: &str) -> String {
    let at = text.find("/policy/").expect("a landing link") + "/policy/".len();
    text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect()
}

on_both_engines!(mail_gets_a_consent_link_whose_button_resumes_the_thread);
async fn mail_gets_a_consent_link_whose_button_resumes_the_thread(engine: Engine) {
    let Some(p) = peers() else { return };
    let catcher = Catcher::start(&p, 250);
    let agent = Arc::new(PolicyAgent::default());
    let (app, addr) = spawn_email_with(engine, Some(catcher.port), agent.clone(), |_| {}).await;

    let m1 = "From: Alice Example <alice@example.com>\nTo: Helper <helper@agents.test>\nSubject: Newsletter\nDate: Wed, 25 Nov 2026 06:00:00 +0000\nMessage-ID: <consent-1@example.com>\n\nPlease add me to the list (you will need consent first).\n";
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
    assert!(ok && out.contains("250 2.0.0"), "{out}");

    // The request: its text and a link carrying a fresh state, threaded under the message.
    let (ask, envelope) = catcher.message(1).await;
    assert_eq!(envelope[1], "alice@example.com");
    assert_eq!(
        header(&ask, "In-Reply-To").unwrap(),
        "<consent-1@example.com>"
    );
    let text = body_text(&ask);
    assert!(text.contains("Consent needed"), "{text}");
    assert!(text.contains("May I keep your address"), "{text}");
    assert!(text.contains("Review and consent"), "{text}");
    let state = state_in(&text);
    assert_eq!(state.len(), 43, "{text}");
    let page = format!("{}/policy/{state}", app.base);

    // A mail scanner following the link resolves nothing.
    let r = app.http.get(&page).send().await.unwrap();
    assert_eq!(r.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(agent.seen().len(), 1);

    // The button: the agent gets the resolution, verified, and its answer is mailed to the
    // same sender in the same thread.
    let r = app.http.post(&page).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let resolved = agent.nth(2).await;
    let res = resolved.policy_resolution.clone().expect("a resolution");
    assert!(res.verified);
    assert_eq!(res.kind.as_str(), "consent_required");
    assert_eq!(resolved.sender.address, "alice@example.com");
    assert_eq!(resolved.thread_id, agent.seen()[0].thread_id);
    let (answer, envelope) = catcher.message(2).await;
    assert_eq!(envelope[1], "alice@example.com");
    assert_eq!(
        header(&answer, "In-Reply-To").unwrap(),
        "<consent-1@example.com>"
    );
    assert_eq!(header(&answer, "Subject").unwrap(), "Re: Newsletter");
    assert!(
        body_text(&answer).contains("resolved consent_required verified=true"),
        "{}",
        body_text(&answer)
    );

    // The link used once is used up.
    let r = app.http.post(&page).send().await.unwrap();
    assert_eq!(r.status(), 200, "the same button again is the same answer");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(agent.seen().len(), 2);
    assert!(!catcher.dir.path().join("3.eml").exists(), "no third mail");
}
