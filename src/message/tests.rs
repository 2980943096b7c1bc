//! Round trips of every contract variant, open vocabularies and validation.

use serde_json::{Value, json};

use super::*;

fn full_message() -> Value {
    json!({
        "id": "0190a0b0-0000-7000-8000-000000000001",
        "thread_id": "thread-1",
        "in_reply_to": "0190a0b0-0000-7000-8000-000000000000",
        "sender": {
            "address": "@alice@mastodon.example",
            "display_name": "Alice",
            "profile": {
                "display_name": "Alice A.", "username": "alice", "url": "https://mastodon.example/@alice",
                "avatar": {"url": "https://mastodon.example/a.png", "mime_type": "image/png", "width": 48, "height": 48},
                "locale": "en", "timezone": "Europe/Berlin", "provider": "mastodon", "provider_subject": "123",
                "fetched_at": "2026-01-02T03:04:05.000Z", "extensions": {"bot": false}, "pronouns": "she/her"
            },
            "auth_method": "ap-http-signature",
            "verified": true,
            "key_id": "https://mastodon.example/users/alice#main-key",
            "identities": [
                {
                    "id": "ev1", "subject": "https://mastodon.example/users/alice", "issuer": "https://switchboard.example",
                    "method": "ap-http-signature", "assurance": "domain", "audience": "https://switchboard.example",
                    "issued_at": "2026-01-02T03:04:05.678Z", "not_before": "2026-01-02T03:04:05.678Z",
                    "expires_at": "2026-01-02T04:04:05.678Z", "on_behalf_of": ["user:1"], "claims": {"a": 1},
                    "source": {"transport": "activitypub", "transport_module": "inbox", "connector": "c", "channel": "x", "custom": 1},
                    "proof": {"type": "transport", "verified_by": "https://switchboard.example", "key_id": "k"}
                },
                {
                    "subject": "agent:b", "issuer": "https://connector.example", "method": "x-custom-method",
                    "assurance": "x-custom-assurance", "audience": ["a", "b"], "issued_at": "2026-01-02T03:04:05.678Z",
                    "proof": {"type": "signed-attestation", "alg": "EdDSA", "kid": "k1", "value": "sig", "canonicalization": "jcs"}
                },
                {
                    "subject": "sub", "issuer": "iss", "method": "a2a-jwt", "assurance": "agent", "audience": "aud",
                    "issued_at": "2026-01-02T03:04:05.678Z", "proof": {"type": "bearer-token", "verified_by": "sb", "token_hash": "abc"}
                },
                {
                    "subject": "sub", "issuer": "iss", "method": "a2a-oauth", "assurance": "oauth", "audience": "aud",
                    "issued_at": "2026-01-02T03:04:05.678Z", "proof": {"type": "zk-proof", "blob": [1, 2]}
                }
            ],
            "future_sender_field": {"x": 1}
        },
        "recipient": "@helper@switchboard.example",
        "parts": [
            {"kind": "text", "mime": "text/plain", "content": "hello"},
            {"kind": "text", "mime": "text/markdown", "content": "**hi**"},
            {"kind": "text", "mime": "text/html", "content": "<p>hi</p>", "lang": "en"},
            {"kind": "file", "name": "a.png", "mime": "image/png", "size": 10, "bytes_ref": {"kind": "inline", "data_base64": "aGk="}},
            {"kind": "file", "mime": "application/pdf", "bytes_ref": {"kind": "url", "url": "https://x.example/a.pdf", "expires_at": "2026-01-02T03:04:05.678Z"}},
            {"kind": "file", "mime": "image/jpeg", "bytes_ref": {"kind": "content_addressed", "algo": "sha256", "digest": "ab12", "url": "https://s.example/media/ab12?exp=1&sig=2"}},
            {"kind": "file", "mime": "image/jpeg", "bytes_ref": {"kind": "ipfs", "cid": "bafy"}},
            {"kind": "link", "url": "https://example.com/", "title": "Example", "description": "d"},
            {"kind": "artifact", "artifact_type": "report", "name": "r", "mime": "application/json", "data": {"rows": [1]}},
            {"kind": "artifact", "mime": "image/png", "bytes_ref": {"kind": "inline", "data_base64": "aGk="}},
            {"kind": "tool_call", "id": "c1", "name": "search", "args": {"q": "x"}},
            {"kind": "tool_call", "id": "c1", "name": "search", "args": {"q": "x"}, "result": [1]},
            {"kind": "tool_call", "id": "c2", "name": "search", "args": null, "error": {"message": "boom"}},
            {"kind": "policy", "policy": {
                "kind": "payment_required", "code": "P1", "title": "Pay", "message": "Please pay",
                "message_translations": {"de": {"title": "Zahlen", "message": "Bitte zahlen"}},
                "url": "https://switchboard.example/pay", "action_label": "Pay", "retry_after_seconds": 30,
                "auth_challenges": [{"scheme": "Bearer", "params": {"realm": "x"}}], "state": "st1", "data": {"amount": 1}
            }},
            {"kind": "policy", "policy": {"kind": "x-new-policy", "message": "m"}},
            {"kind": "poll", "options": ["a", "b"]}
        ],
        "history": [
            {"id": "h1", "role": "user", "sender": {"address": "bob@mail.example", "auth_method": "email-dmarc", "verified": true},
             "parts": [{"kind": "text", "mime": "text/plain", "content": "earlier"}], "timestamp": "2026-01-02T03:00:00.000Z"},
            {"role": "assistant", "sender": {"address": "@helper@switchboard.example", "auth_method": "none", "verified": true},
             "parts": [{"kind": "text", "mime": "text/plain", "content": "answer"}], "timestamp": "2026-01-02T03:01:00.000Z"}
        ],
        "history_cache_breakpoint_after": 0,
        "recipient_capabilities": {
            "mention_relay": {"kind": "addressing", "envelope_fields": ["to", "cc"], "also_inline": true},
            "agent_chain": {"hop": 1, "max_hops": 3, "is_final": false},
            "formats": ["text/html", "text/plain"], "attachments": true, "streaming": false, "max_text_chars": 500
        },
        "received_via": "activitypub",
        "received_at": "2026-01-02T03:04:05.678Z",
        "raw": {"type": "Create", "object": {"type": "Note"}},
        "policy_resolution": {
            "kind": "consent_required", "in_reply_to_state": "st0", "completed_at": "2026-01-02T03:04:05.678Z",
            "verified": true, "evidence": [], "data": {"k": "v"}
        },
        "received_trace": full_response(),
        "top_level_future_field": [1, 2, 3]
    })
}

fn full_response() -> Value {
    json!({
        "id": "r1", "in_reply_to": "m1", "thread_id": "thread-1", "agent": "@helper@switchboard.example",
        "parts": [{"kind": "text", "mime": "text/plain", "content": "need more"}],
        "state": "input_required", "mentions": ["@bob@example.com", "carol@example.com"],
        "visibility": "direct", "metadata": {"model": "x"}, "future": true
    })
}

#[test]
fn full_message_round_trips_losslessly() {
    let input = full_message();
    let msg: NormalizedMessage = serde_json::from_value(input.clone()).unwrap();
    msg.validate().unwrap();
    assert_eq!(serde_json::to_value(&msg).unwrap(), input);
    assert!(
        matches!(msg.parts[15], Part::Other(_)),
        "unknown part kind kept as Other"
    );
    assert_eq!(msg.parts[15].kind(), "poll");
    assert!(matches!(
        msg.parts[6],
        Part::File(FilePart {
            bytes_ref: BytesRef::Other(_),
            ..
        })
    ));
    let ids = msg.sender.identities.as_ref().unwrap();
    assert_eq!(ids[1].method, AuthMethod::Other("x-custom-method".into()));
    assert_eq!(
        ids[1].assurance,
        Assurance::Other("x-custom-assurance".into())
    );
    assert!(matches!(ids[3].proof, Proof::Other(_)));
    assert!(msg.extra.contains_key("top_level_future_field"));
    assert!(msg.sender.extra.contains_key("future_sender_field"));
}

#[test]
fn every_mention_relay_round_trips() {
    for relay in [
        json!({"kind": "inline"}),
        json!({"kind": "recipient-field", "fields": ["to", "cc"]}),
        json!({"kind": "addressing", "envelope_fields": ["to", "cc"], "also_inline": true}),
        json!({"kind": "none"}),
        json!({"kind": "x-future", "hint": 1}),
    ] {
        let parsed: MentionRelay = serde_json::from_value(relay.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), relay);
    }
    assert!(
        serde_json::from_value::<MentionRelay>(json!({"kind": "recipient-field"})).is_err(),
        "a known kind with missing fields is an error, not Other"
    );
}

#[test]
fn every_response_state_and_event_round_trips() {
    for state in [
        "completed",
        "input_required",
        "auth_required",
        "rejected",
        "failed",
        "x-paused",
    ] {
        let mut r = full_response();
        r["state"] = json!(state);
        let parsed: NormalizedResponse = serde_json::from_value(r.clone()).unwrap();
        assert_eq!(parsed.state.as_ref().unwrap().as_str(), state);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), r);
    }
    for vis in ["public", "unlisted", "followers", "direct"] {
        let mut r = full_response();
        r["visibility"] = json!(vis);
        let parsed: NormalizedResponse = serde_json::from_value(r.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), r);
    }
    for ev in [
        json!({"type": "delta", "text": "he"}),
        json!({"type": "part", "part": {"kind": "tool_call", "id": "1", "name": "n", "args": {}}}),
        json!({"type": "done", "response": full_response()}),
        json!({"type": "heartbeat"}),
    ] {
        let parsed: ResponseEvent = serde_json::from_value(ev.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), ev);
    }
}

#[test]
fn every_auth_method_and_policy_kind_round_trips() {
    for m in AuthMethod::KNOWN {
        let v: AuthMethod = serde_json::from_value(json!(m)).unwrap();
        assert!(!matches!(v, AuthMethod::Other(_)), "{m} is known");
        assert_eq!(serde_json::to_value(&v).unwrap(), json!(m));
    }
    for k in PolicyKind::KNOWN
        .iter()
        .chain(Assurance::KNOWN)
        .chain(ReceivedVia::KNOWN)
        .chain(TextMime::KNOWN)
    {
        assert_eq!(
            serde_json::to_value(PolicyKind::from(*k)).unwrap(),
            json!(k)
        );
    }
}

#[test]
fn minimal_message_uses_defaults_and_omits_absent_fields() {
    let input = json!({
        "id": "m1", "thread_id": "t1",
        "sender": {"address": "bob@example.com", "auth_method": "none", "verified": false},
        "recipient": "@echo@localhost",
        "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
        "recipient_capabilities": {"mention_relay": {"kind": "none"}, "formats": [], "attachments": false, "streaming": false},
        "received_via": "email", "received_at": "2026-01-02T03:04:05.678Z", "raw": null
    });
    let msg: NormalizedMessage = serde_json::from_value(input.clone()).unwrap();
    msg.validate().unwrap();
    assert_eq!(serde_json::to_value(&msg).unwrap(), input);
}

#[test]
fn validation_rejects_empty_parts_and_bad_addresses() {
    let base: NormalizedMessage = serde_json::from_value(full_message()).unwrap();
    let mut m = base.clone();
    m.parts.clear();
    assert_eq!(m.validate().unwrap_err().0, "parts is empty");
    let mut m = base.clone();
    m.recipient = "helper@switchboard.example".into();
    assert!(m.validate().unwrap_err().0.contains("recipient"));
    let mut m = base.clone();
    m.sender.address = "not an address".into();
    assert!(m.validate().unwrap_err().0.contains("sender.address"));
    let mut m = base;
    m.parts = vec![Part::Link(LinkPart {
        url: "no url".into(),
        title: None,
        description: None,
        extra: Extra::new(),
    })];
    assert!(m.validate().is_err());

    let mut r: NormalizedResponse = serde_json::from_value(full_response()).unwrap();
    r.validate().unwrap();
    r.parts.clear();
    r.validate().unwrap();
    r.state = None;
    assert!(r.validate().is_err(), "completed response without parts");
}

#[test]
fn malformed_known_parts_are_errors() {
    for bad in [
        json!({"kind": "text", "mime": "text/plain"}),
        json!({"kind": "file", "mime": "a/b"}),
        json!({"kind": 3}),
        json!({"content": "no kind"}),
    ] {
        assert!(
            serde_json::from_value::<Part>(bad.clone()).is_err(),
            "{bad} must not parse"
        );
    }
}

#[test]
fn committed_schemas_match_the_types() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema");
    for (name, content) in schema::schemas() {
        let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        assert!(
            committed == content,
            "docs/schema/{name} is stale: run `cargo run -- schema docs/schema` and commit the result"
        );
    }
}
