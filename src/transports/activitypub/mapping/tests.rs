//! Unit tests of the ActivityPub mapping: activities and notes in, notes and actors out.

use super::*;
use crate::message::TextMime;

#[test]
fn a_woken_note_becomes_a_message_with_the_verified_actor_as_evidence() {
    let activity = json!({"id": "https://m.example/a/1", "type": "Create"});
    let doc = json!({
        "id": "https://m.example/users/alice",
        "preferredUsername": "alice",
        "name": "Alice",
        "url": "https://m.example/@alice",
        "icon": {"type": "Image", "url": "https://m.example/a.png", "mediaType": "image/png"},
    });
    let now = Timestamp::from_unix_millis(1_700_000_000_000);
    let msg = note_message(WokenNote {
        id: "m1".into(),
        activity: &activity,
        actor_id: "https://m.example/users/alice",
        actor_address: "@alice@m.example",
        actor_doc: &doc,
        method: AuthMethod::ApHttpSignature,
        key_id: "https://m.example/users/alice#main-key",
        verifier: "sb.example",
        recipient: "@helper@sb.example",
        thread_key: "t1",
        in_reply_to: Some("r0"),
        parts: vec![Part::text("hi")],
        max_reply_chars: 500,
        now,
    })
    .expect("a message");
    msg.validate().expect("valid");
    let got = serde_json::to_value(&msg).expect("json");
    let expected = json!({
        "id": "m1",
        "thread_id": "t1",
        "in_reply_to": "r0",
        "sender": {
            "address": "@alice@m.example",
            "display_name": "Alice",
            "profile": {
                "display_name": "Alice",
                "username": "alice",
                "url": "https://m.example/@alice",
                "avatar": {"url": "https://m.example/a.png", "mime_type": "image/png"},
                "provider": "activitypub",
                "provider_subject": "https://m.example/users/alice",
            },
            "auth_method": "ap-http-signature",
            "verified": true,
            "key_id": "https://m.example/users/alice#main-key",
            "identities": [{
                "subject": "https://m.example/users/alice",
                "issuer": "sb.example",
                "method": "ap-http-signature",
                "assurance": "domain",
                "audience": "@helper@sb.example",
                "issued_at": now,
                "source": {"transport": "activitypub"},
                "proof": {
                    "type": "transport",
                    "verified_by": "sb.example",
                    "key_id": "https://m.example/users/alice#main-key",
                },
            }],
        },
        "recipient": "@helper@sb.example",
        "parts": [{"kind": "text", "mime": "text/plain", "content": "hi"}],
        "recipient_capabilities": {
            "mention_relay": {"kind": "addressing", "envelope_fields": ["to", "cc"], "also_inline": true},
            "formats": ["text/html", "text/plain"],
            "attachments": true,
            "streaming": false,
            "max_text_chars": 500,
        },
        "received_via": "activitypub",
        "received_at": now,
        "raw": activity,
    });
    assert_eq!(got, expected);
}

#[test]
fn an_actor_without_a_name_or_icon_has_a_bare_profile() {
    let activity = json!({});
    let doc = json!({"icon": "https://m.example/b.png", "name": ""});
    let msg = note_message(WokenNote {
        id: "m2".into(),
        activity: &activity,
        actor_id: "https://m.example/users/bob",
        actor_address: "@bob@m.example",
        actor_doc: &doc,
        method: AuthMethod::ApObjectIntegrityProof,
        key_id: "k",
        verifier: "sb.example",
        recipient: "@helper@sb.example",
        thread_key: "t",
        in_reply_to: None,
        parts: vec![Part::text("x")],
        max_reply_chars: 500,
        now: Timestamp::from_unix_millis(0),
    })
    .expect("a message");
    assert_eq!(msg.sender.display_name, None);
    let profile = msg.sender.profile.expect("profile");
    assert_eq!(profile.username, None);
    assert_eq!(
        profile.avatar.map(|a| a.url).as_deref(),
        Some("https://m.example/b.png")
    );
    assert_eq!(msg.in_reply_to, None);
}

#[test]
fn addressing_rule_needs_both() {
    let agent = "https://sb.example/agents/helper";
    let note = json!({"to": [PUBLIC], "cc": [agent], "tag": [{"type": "Mention", "href": agent, "name": "@helper@sb.example"}]});
    assert!(wakes(&note, &json!({}), agent));
    let no_tag = json!({"to": [agent]});
    assert!(!wakes(&no_tag, &json!({}), agent));
    let no_addr = json!({"to": [PUBLIC], "tag": {"type": "Mention", "href": agent}});
    assert!(!wakes(&no_addr, &json!({}), agent));
    // Addressing on the activity counts (single-valued, as GoToSocial and Fedify send it).
    let single = json!({"tag": {"type": "Mention", "href": agent}});
    assert!(wakes(&single, &json!({"to": agent}), agent));
}

#[test]
fn visibility_follows_mastodon() {
    let f = "https://m.example/users/a/followers";
    assert_eq!(
        visibility_of(&json!({"to": [PUBLIC]}), Some(f)),
        Visibility::Public
    );
    assert_eq!(
        visibility_of(&json!({"to": [f], "cc": ["as:Public"]}), Some(f)),
        Visibility::Unlisted
    );
    assert_eq!(
        visibility_of(&json!({"to": [f]}), Some(f)),
        Visibility::Followers
    );
    assert_eq!(
        visibility_of(&json!({"to": ["https://x/agents/a"]}), Some(f)),
        Visibility::Direct
    );
}

#[test]
fn content_warnings_of_mastodon_and_misskey_notes_stay_apart_from_the_text() {
    // Mastodon: `summary` is the spoiler text, `sensitive` true with it.
    let mastodon = json!({
        "id": "https://mastodon.example/users/alice/statuses/1",
        "type": "Note",
        "summary": "spoilers: the finale",
        "content": "<p>It was the butler all along</p>",
        "sensitive": true,
        "attributedTo": "https://mastodon.example/users/alice",
        "to": ["https://www.w3.org/ns/activitystreams#Public"]
    });
    let note = Object::from_json(&mastodon);
    assert_eq!(note_text(&mastodon), "It was the butler all along");
    assert_eq!(
        content_warning(&note).as_deref(),
        Some("spoilers: the finale")
    );
    // Misskey: the CW in `summary`, the source in `_misskey_content`.
    let misskey = json!({
        "id": "https://misskey.example/notes/9abc",
        "type": "Note",
        "summary": "food",
        "content": "<p><span>ramen again</span></p>",
        "_misskey_content": "ramen again",
        "sensitive": false,
        "attributedTo": "https://misskey.example/users/9xyz"
    });
    assert_eq!(note_text(&misskey), "ramen again");
    assert_eq!(
        content_warning(&Object::from_json(&misskey)).as_deref(),
        Some("food")
    );
    // Nothing but a warning: the warning is the text. An article's summary is no warning.
    let bare = json!({"type": "Note", "summary": "cw only", "content": ""});
    assert_eq!(note_text(&bare), "cw only");
    let article = json!({"type": "Article", "name": "Title", "summary": "An abstract", "content": "<p>Body</p>"});
    assert_eq!(content_warning(&Object::from_json(&article)), None);
    assert_eq!(note_text(&article), "Title\n\nBody");
    let plain = json!({"type": "Note", "summary": "", "content": "<p>hi</p>"});
    assert_eq!(content_warning(&Object::from_json(&plain)), None);
}

#[test]
fn reply_mirrors_direct_and_mentions_sender() {
    let r = vec![Recipient {
        iri: "https://m.example/users/alice".into(),
        address: "@alice@m.example".into(),
        url: "https://m.example/@alice".into(),
    }];
    let parts = vec![Part::text("hello <you>")];
    let plan = ReplyPlan {
        note_id: "https://sb.example/agents/h/notes/1",
        actor: "https://sb.example/agents/h",
        followers: "https://sb.example/agents/h/followers",
        in_reply_to: Some("https://m.example/n/1"),
        thread: ThreadFields {
            context: Some("https://m.example/contexts/1"),
            conversation: Some("tag:m.example,2026-01-01:objectId=1:objectType=Conversation"),
        },
        visibility: Visibility::Direct,
        recipients: &r,
        parts: &parts,
        published: "2026-01-01T00:00:00Z",
        content_warning: None,
        sensitive: false,
    };
    let note = reply_note(&plan, vec![]);
    assert_eq!(note["sensitive"], false);
    assert!(note.get("summary").is_none(), "no warning, no summary");
    let warned = reply_note(
        &ReplyPlan {
            content_warning: reply_warning(None, Some("spoilers: s2")),
            ..plan.clone()
        },
        vec![],
    );
    assert_eq!(warned["summary"], "spoilers: s2", "the warning carries on");
    assert_eq!(warned["sensitive"], true);
    let own = reply_warning(Some("mild peril"), Some("spoilers: s2"));
    assert_eq!(own, Some("mild peril"), "the agent's own warning wins");
    assert_eq!(
        reply_warning(Some(" "), Some("spoilers")),
        None,
        "empty: none"
    );
    let media = reply_note(
        &ReplyPlan {
            sensitive: true,
            ..plan.clone()
        },
        vec![],
    );
    assert_eq!(media["sensitive"], true);
    assert!(media.get("summary").is_none());
    // Each thread field is echoed as received, never one written over the other.
    assert_eq!(note["context"], "https://m.example/contexts/1");
    assert_eq!(
        note["conversation"],
        "tag:m.example,2026-01-01:objectId=1:objectType=Conversation"
    );
    let only_context = ReplyPlan {
        thread: ThreadFields {
            context: Some("https://sb.example/agents/h/contexts/1"),
            conversation: None,
        },
        ..plan
    };
    let note2 = reply_note(&only_context, vec![]);
    assert_eq!(note2["context"], "https://sb.example/agents/h/contexts/1");
    assert_eq!(
        note2["conversation"],
        "https://sb.example/agents/h/contexts/1"
    );
    assert_eq!(
        thread_fields(&Object::from_json(
            &json!({"context": "https://a.example/c", "conversation": "tag:x"})
        )),
        ThreadFields {
            context: Some("https://a.example/c"),
            conversation: Some("tag:x"),
        }
    );
    assert_eq!(note["to"], json!(["https://m.example/users/alice"]));
    assert_eq!(note["cc"], json!([]));
    assert_eq!(note["inReplyTo"], "https://m.example/n/1");
    assert_eq!(note["tag"][0]["href"], "https://m.example/users/alice");
    let content = note["content"].as_str().unwrap();
    assert!(
        content.starts_with("<p><span class=\"h-card\""),
        "{content}"
    );
    assert!(content.contains("hello &lt;you&gt;"), "{content}");
    let create = create_of(&note);
    assert_eq!(create["actor"], "https://sb.example/agents/h");
    assert_eq!(create["id"], "https://sb.example/agents/h/notes/1/activity");
}

#[test]
fn reply_thread_echoes_then_inherits_then_mints() {
    let none = ThreadFields::default();
    let mastodon = ThreadFields {
        context: Some("https://m.example/contexts/1"),
        conversation: Some("tag:m.example,2026:c"),
    };
    let ours = ThreadFields {
        context: Some("https://sb.example/agents/h/contexts/7"),
        conversation: Some("https://sb.example/agents/h/contexts/7"),
    };
    let minted = Some("https://sb.example/agents/h/contexts/9");
    // What came in is echoed as received, and nothing is minted over it.
    assert_eq!(reply_thread(mastodon, ours, minted), mastodon);
    // A note without either: the parent's, else the minted one, in both fields.
    assert_eq!(reply_thread(none, ours, minted), ours);
    let fresh = reply_thread(none, none, minted);
    assert_eq!(fresh.context, minted);
    assert_eq!(fresh.conversation, minted);
    // Only a conversation came in: it is echoed; the context is the parent's or minted.
    let tag_only = ThreadFields {
        context: None,
        conversation: Some("tag:m.example,2026:c"),
    };
    let r = reply_thread(tag_only, none, minted);
    assert_eq!(r.context, minted);
    assert_eq!(r.conversation, Some("tag:m.example,2026:c"));
    // Only a context came in: the conversation is that context (as before).
    let ctx_only = ThreadFields {
        context: Some("https://f.example/c/1"),
        conversation: None,
    };
    let r = reply_thread(ctx_only, ours, minted);
    assert_eq!(r.context, Some("https://f.example/c/1"));
    assert_eq!(r.conversation, Some("https://f.example/c/1"));
}

#[test]
fn the_mention_prefix_counts_recipients_the_text_does_not_name() {
    let r = vec![
        Recipient {
            iri: "https://m.example/users/alice".into(),
            address: "@alice@m.example".into(),
            url: "https://m.example/@alice".into(),
        },
        Recipient {
            iri: "https://g.example/users/bob".into(),
            address: "@bob@g.example".into(),
            url: "https://g.example/@bob".into(),
        },
    ];
    let parts = vec![Part::text("hi @bob@g.example")];
    assert_eq!(mention_prefix_chars(&r, &parts), "@alice@m.example ".len());
    assert_eq!(
        mention_prefix_chars(&r, &[]),
        "@alice@m.example @bob@g.example ".len()
    );
}

#[test]
fn markdown_is_rendered_then_sanitised() {
    let parts = vec![Part::Text(crate::message::TextPart {
        mime: TextMime::Markdown,
        content: "# Title\n\n**bold** and [a link](https://x.example/) <img src=x onerror=y>"
            .into(),
        extra: crate::message::Extra::new(),
    })];
    let html = reply_html(&[], &parts);
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    assert!(html.contains("href=\"https://x.example/\""), "{html}");
    assert!(html.contains("Title"), "{html}");
    // Headings are not on Mastodon's allow-list; raw HTML never passes through.
    assert!(!html.contains("<h1"), "{html}");
    assert!(!html.contains("<img"), "{html}");
}

#[test]
fn bots_are_told_from_people_by_their_actor_documents() {
    for doc in [
        json!({"type": "Service"}),
        json!({"type": "Application"}),
        json!({"type": ["Service", "schema:Thing"]}),
        json!({"type": "Person", "bot": true}),
        json!({"type": "Person", "isBot": true}),
    ] {
        assert!(is_automated(&doc), "{doc}");
    }
    for doc in [
        json!({"type": "Person"}),
        json!({"type": "Group"}),
        json!({"type": "Person", "bot": false}),
        json!({"type": "Person", "bot": "yes"}),
        json!({}),
    ] {
        assert!(!is_automated(&doc), "{doc}");
    }
}

#[test]
fn a_reply_carries_its_hop_and_an_answer_to_it_continues_the_chain() {
    let mut note = json!({"type": "Note"});
    mark_chain(
        &mut note,
        AgentChain {
            hop: 1,
            max_hops: 3,
            is_final: false,
        },
    );
    assert_eq!(note["agentChain"], json!({"hop": 1, "maxHops": 3}));
    assert_eq!(
        chain_of(&note),
        Some(AgentChain {
            hop: 2,
            max_hops: 3,
            is_final: false,
        })
    );
    let last = json!({"agentChain": {"hop": 2, "maxHops": 3}});
    assert_eq!(
        chain_of(&last).map(|c| (c.hop, c.is_final)),
        Some((3, true))
    );
    // Past the limit: the hop says so, and the pipeline holds the turn.
    let past = json!({"agentChain": {"hop": 3, "maxHops": 3}});
    assert_eq!(chain_of(&past).map(|c| c.hop), Some(4));
    // Nonsense is no chain; an absurd limit is capped.
    for bad in [
        json!({}),
        json!({"agentChain": {"hop": 0, "maxHops": 3}}),
        json!({"agentChain": {"hop": "1", "maxHops": 3}}),
        json!({"agentChain": {"hop": 1}}),
        json!({"agentChain": {"hop": -1, "maxHops": 3}}),
    ] {
        assert_eq!(chain_of(&bad), None, "{bad}");
    }
    let huge = json!({"agentChain": {"hop": 1, "maxHops": 4_000_000_000_u64}});
    assert_eq!(
        chain_of(&huge).map(|c| c.max_hops),
        Some(crate::config::MAX_MAX_HOPS)
    );
}
