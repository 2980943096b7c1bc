//! Snapshots of assembled prompts (`tests/fixtures/assembly/*.json`): each fixture holds a
//! NormalizedMessage with its history and the exact `messages` array a chat model must get.

use serde_json::{Value, json};
use switchboard::agents::assembly::assemble;
use switchboard::message::{NormalizedMessage, Part};
use switchboard::transports::email::parse;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/assembly/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Assembles the fixture's message with its system prompt and compares with its snapshot;
/// assembling the result's user text again must not prefix it twice.
fn check(name: &str, msg: &NormalizedMessage, f: &Value) {
    let got = serde_json::to_value(assemble(msg, f["system_prompt"].as_str())).unwrap();
    assert_eq!(
        got,
        f["expected"],
        "{name}: assembled\n{}",
        serde_json::to_string_pretty(&got).unwrap()
    );
}

fn message_of(f: &Value) -> NormalizedMessage {
    serde_json::from_value(f["message"].clone()).unwrap()
}

#[test]
fn activitypub_thread() {
    let f = fixture("activitypub_thread");
    check("activitypub_thread", &message_of(&f), &f);
}

#[test]
fn email_thread_with_quoted_text_stripped() {
    let f = fixture("email_thread");
    let mail = parse::parse(f["eml"].as_str().unwrap().as_bytes(), "bob@example.com", 10).unwrap();
    let text = mail.text.unwrap();
    assert!(
        !text.contains("Which day") && !text.contains("Example Corp"),
        "the parser strips the quote and the signature: {text:?}"
    );
    let mut msg = message_of(&f);
    msg.parts = vec![Part::text(text)];
    check("email_thread", &msg, &f);
}

#[test]
fn a2a_multi_turn_task() {
    let f = fixture("a2a_task");
    check("a2a_task", &message_of(&f), &f);
}

#[test]
fn three_agent_chain() {
    let f = fixture("agent_chain");
    let msg = message_of(&f);
    check("agent_chain", &msg, &f);
    // The hop before the last one is told its place, not to conclude.
    let mut hop2 = msg;
    hop2.recipient_capabilities.agent_chain =
        serde_json::from_value(json!({"hop": 2, "max_hops": 3, "is_final": false})).unwrap();
    let got = assemble(&hop2, None);
    assert_eq!(
        got[got.len() - 2].content,
        "You are responding as hop 2 of a chain capped at 3 hops."
    );
}

#[test]
fn stored_content_is_never_changed_and_prefixes_are_not_doubled() {
    let f = fixture("activitypub_thread");
    let msg = message_of(&f);
    let before = serde_json::to_value(&msg).unwrap();
    let first = assemble(&msg, None);
    assert_eq!(serde_json::to_value(&msg).unwrap(), before);
    // Text that already carries its attribution (a re-entered or legacy turn) keeps one.
    let mut again = msg.clone();
    again.parts = vec![Part::text(
        "[Alice (@alice@mastodon.example)]: @helper@sb.example can you sum up where we landed?",
    )];
    assert_eq!(assemble(&again, None), first);
}
