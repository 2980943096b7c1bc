//! Pure mapping between ActivityStreams and the contract: who a note wakes (the addressing
//! rule), its visibility, sender address and profile, text, thread keys; and the reverse, a
//! NormalizedResponse rendered as a `Create(Note)` with Mastodon-compatible addressing, mention
//! markup and tags. It reads and writes the types of [`super::wire`]; the functions that read a
//! note or an actor also take it as JSON ([`AsWire`]). A few helpers read raw JSON for the
//! transport's other activities ([`many`], [`iri`], [`iris`], [`str_of`]). No I/O here.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::html;
use super::reply_context::ReplyContext;
use super::wire::{self, Activity, Actor, AsWire, FromJson as _, Image, Loose, Object, OneOrMany};
pub mod profile;
pub mod quotes;
mod reply;

pub use reply::{
    Recipient, ReplyPlan, addressing, create_of, mention_prefix_chars, reply_html, reply_note,
    reply_object, reply_warning,
};

use crate::message::{
    AddressingRelay, AgentChain, Audience, AuthMethod, Avatar, EvidenceSource, Extra,
    IdentityEvidence, MentionRelay, NormalizedMessage, Part, Proof, ReceivedVia,
    RecipientCapabilities, Sender, SenderProfile, Timestamp, TransportProof, Visibility,
};

/// The public collection, in its three spellings.
pub const PUBLIC: &str = "https://www.w3.org/ns/activitystreams#Public";

/// The namespace of switchboard's extension properties (`agentChain`).
pub const MENTIONABLE_NS: &str = "https://mentionable.dev/ns#";

/// The `agentChain` of a reply written at `chain`'s hop.
#[must_use]
pub fn chain_mark(chain: AgentChain) -> wire::AgentChain {
    wire::AgentChain {
        hop: u64::from(chain.hop).into(),
        max_hops: u64::from(chain.max_hops).into(),
        extra: wire::Extra::new(),
    }
}

/// Marks an agent's reply note with the hop its agent answered as in an agent conversation
/// (`agentChain`: `hop`, `maxHops`; an extension property in [`MENTIONABLE_NS`]), so that
/// another switchboard answering it continues the chain instead of starting a new one.
pub fn mark_chain(note: &mut Value, chain: AgentChain) {
    if let Some(m) = note.as_object_mut() {
        // Numbers only: writing it as JSON cannot fail.
        m.insert("agentChain".into(), json!(chain_mark(chain)));
    }
}

/// The chain a turn answering `note` continues, when the note carries an `agentChain`
/// ([`mark_chain`]): the next hop, at most the note's `maxHops` (and never above what any
/// configuration allows).
#[must_use]
pub fn chain_of(note: &impl AsWire<Object>) -> Option<AgentChain> {
    let note = note.as_wire();
    let c = note.agent_chain.get()?;
    let hop = u32::try_from(*c.hop.get()?).ok()?;
    let max_hops = u32::try_from(*c.max_hops.get()?)
        .ok()?
        .min(crate::config::MAX_MAX_HOPS);
    if hop == 0 || max_hops == 0 {
        return None;
    }
    let hop = hop.saturating_add(1);
    Some(AgentChain {
        hop,
        max_hops,
        is_final: hop >= max_hops,
    })
}

/// The `@context` of everything we publish.
#[must_use]
pub fn context() -> Value {
    let mut terms = json!({
        "Hashtag": "as:Hashtag",
        "sensitive": "as:sensitive",
        "conversation": "http://ostatus.org#conversation",
        "ostatus": "http://ostatus.org#",
        "mentionable": MENTIONABLE_NS,
        "agentChain": "mentionable:agentChain",
    });
    if let Some(t) = terms.as_object_mut() {
        t.extend(quotes::context_terms());
    }
    json!([
        "https://www.w3.org/ns/activitystreams",
        "https://w3id.org/security/v1",
        "https://w3id.org/security/data-integrity/v1",
        terms,
    ])
}

fn is_public(s: &str) -> bool {
    matches!(s, PUBLIC | "as:Public" | "Public")
}

/// The values of a property that may be one value or an array.
#[must_use]
pub fn many(v: Option<&Value>) -> Vec<&Value> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().collect(),
        Some(x) => vec![x],
    }
}

/// The IRI of a value that is an IRI string or an object with `id` (or `href`).
#[must_use]
pub fn iri(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(m) => m
            .get("id")
            .or_else(|| m.get("href"))
            .and_then(Value::as_str),
        _ => None,
    }
}

/// The IRIs of a one-or-many property.
#[must_use]
pub fn iris(v: Option<&Value>) -> Vec<String> {
    many(v)
        .into_iter()
        .filter_map(iri)
        .map(str::to_owned)
        .collect()
}

/// `activity` as an answer embeds it (an `Accept` of a `Follow`, of a `QuoteRequest`):
/// without its `@context` and its signatures, which belong to the document it came in.
#[must_use]
pub fn embeddable(activity: &Value) -> Value {
    let mut a = activity.clone();
    if let Some(m) = a.as_object_mut() {
        for k in ["@context", "proof", "signature"] {
            m.remove(k);
        }
    }
    a
}

/// A string property.
#[must_use]
pub fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `host[:port]` of an IRI.
#[must_use]
pub fn host_of(iri: &str) -> Option<String> {
    let u = url::Url::parse(iri).ok()?;
    let h = u.host_str()?.to_ascii_lowercase();
    Some(match u.port() {
        Some(p) => format!("{h}:{p}"),
        None => h,
    })
}

/// Everyone a note or its activity addresses (`to`, `cc`, `bto`, `bcc`, `audience`).
#[must_use]
pub fn audience(note: &impl AsWire<Object>, activity: &impl AsWire<Activity>) -> Vec<String> {
    let (note, activity) = (note.as_wire(), activity.as_wire());
    note.addressing
        .all()
        .chain(activity.addressing.all())
        .map(str::to_owned)
        .collect()
}

/// The `href`s of a note's `Mention` tags.
#[must_use]
pub fn mention_hrefs(note: &impl AsWire<Object>) -> Vec<String> {
    note.as_wire()
        .mentions()
        .filter_map(|t| t.href.as_str())
        .map(str::to_owned)
        .collect()
}

/// Mention tags as href → `@user@domain`. A tag name without a domain gets the href's host.
#[must_use]
pub fn mention_names(note: &impl AsWire<Object>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for t in note.as_wire().mentions() {
        let (Some(href), Some(name)) = (t.href.as_str(), t.name.as_str()) else {
            continue;
        };
        let name = name.trim_start_matches('@');
        let addr = if name.contains('@') {
            format!("@{name}")
        } else {
            match host_of(href) {
                Some(h) => format!("@{name}@{h}"),
                None => continue,
            }
        };
        out.insert(href.to_owned(), addr);
    }
    out
}

/// The addressing rule (`mention_relay: addressing`): the agent is woken only when it is both
/// addressed and mentioned by a `Mention` tag.
#[must_use]
pub fn wakes(
    note: &impl AsWire<Object>,
    activity: &impl AsWire<Activity>,
    agent_iri: &str,
) -> bool {
    let (note, activity) = (note.as_wire(), activity.as_wire());
    let mut addressed = note.addressing.all().chain(activity.addressing.all());
    addressed.any(|a| a == agent_iri) && note.mentions().any(|t| t.href.as_str() == Some(agent_iri))
}

/// Mastodon's visibility classes of an inbound note.
#[must_use]
pub fn visibility_of(note: &impl AsWire<Object>, author_followers: Option<&str>) -> Visibility {
    let note = note.as_wire();
    let iris = |p: &Loose<OneOrMany<wire::Reference>>| -> Vec<String> {
        p.iris().map(str::to_owned).collect()
    };
    visibility(
        &iris(&note.addressing.to),
        &iris(&note.addressing.cc),
        author_followers,
    )
}

/// The visibility class of a note addressed `to` and `cc` (IRIs) by an author whose followers
/// collection is `author_followers`: public in `to`, else unlisted (public in `cc`), else
/// followers-only (their collection addressed), else direct.
#[must_use]
pub fn visibility(to: &[String], cc: &[String], author_followers: Option<&str>) -> Visibility {
    if to.iter().any(|s| is_public(s)) {
        Visibility::Public
    } else if cc.iter().any(|s| is_public(s)) {
        Visibility::Unlisted
    } else if author_followers.is_some_and(|f| to.iter().chain(cc).any(|s| s == f))
        || to.iter().chain(cc).any(|s| s.ends_with("/followers"))
    {
        Visibility::Followers
    } else {
        Visibility::Direct
    }
}

/// The conversation key of a note: `context`, else `conversation` (FEP-7888, OStatus).
#[must_use]
pub fn explicit_thread(note: &impl AsWire<Object>) -> Option<String> {
    let note = note.as_wire();
    note.context()
        .or_else(|| note.conversation())
        .map(str::to_owned)
}

/// A note's two thread fields, which servers fill differently: `context` (an IRI: Mastodon's
/// `/contexts/N`, FEP-7888 collections) and `conversation` (Mastodon's `tag:` URI, which some
/// versions thread on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadFields<'a> {
    /// `context`, when the note has one.
    pub context: Option<&'a str>,
    /// `conversation`, when the note has one.
    pub conversation: Option<&'a str>,
}

/// The thread fields of `note`, each as received.
#[must_use]
pub fn thread_fields(note: &Object) -> ThreadFields<'_> {
    ThreadFields {
        context: note.context(),
        conversation: note.conversation(),
    }
}

/// The thread fields of a reply to `note` (FEP-7888), given those of the note it answers
/// (`parent`, when stored) and the context switchboard minted for the thread (`minted`, needed
/// only when neither has a `context`):
/// - `context`: the note's as received, else the parent's, else the minted one;
/// - `conversation`: the note's as received, else the note's `context`, else the parent's,
///   else the reply's `context` — a thread we name has one identity in both fields.
///
/// Neither is ever written over the other: a Mastodon note's `/contexts/N` context and `tag:`
/// conversation stay distinct.
#[must_use]
pub fn reply_thread<'a>(
    note: ThreadFields<'a>,
    parent: ThreadFields<'a>,
    minted: Option<&'a str>,
) -> ThreadFields<'a> {
    let context = note.context.or(parent.context).or(minted);
    ThreadFields {
        context,
        conversation: note
            .conversation
            .or(note.context)
            .or(parent.conversation)
            .or(context),
    }
}

/// `@user@host` of an actor document.
#[must_use]
pub fn address_of(actor: &impl AsWire<Actor>) -> Option<String> {
    let actor = actor.as_wire();
    let user = actor.preferred_username.as_str()?;
    let host = host_of(actor.id.as_str()?)?;
    Some(format!("@{user}@{host}"))
}

/// The plain text of a note given as JSON ([`note_text_with`], its mentions named by their
/// tags).
#[must_use]
pub fn note_text(note: &Value) -> String {
    let note = Object::from_json(note);
    note_text_with(&note, &mention_names(&note))
}

/// A note's content warning (its `summary`, as plain text), if it has one: what a `Note` is
/// about, shown before its text. (An `Article`'s or `Page`'s summary is an abstract, not a
/// warning.)
#[must_use]
pub fn content_warning(note: &impl AsWire<Object>) -> Option<String> {
    let note = note.as_wire();
    if note.kind().is_some_and(|k| k != "Note") {
        return None;
    }
    note.summary
        .as_str()
        .map(|s| html::to_text(s, &HashMap::new()))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// [`note_text`] with the mention links' addresses given (href → `@user@domain`): the content
/// only, its content warning apart ([`content_warning`]) — unless the note says nothing else,
/// when the warning is its text. A titled `Article` or `Page` opens with its title.
#[must_use]
pub fn note_text_with(note: &impl AsWire<Object>, mentions: &HashMap<String, String>) -> String {
    let note = note.as_wire();
    let content = note
        .content
        .as_str()
        .or_else(|| {
            note.content_map
                .get()
                .and_then(|m| m.values().find_map(Value::as_str))
        })
        .unwrap_or_default();
    let body = html::to_text(content, mentions);
    let name = note.name.as_str().filter(|s| !s.is_empty());
    match name {
        Some(n) if body.is_empty() => n.to_owned(),
        Some(n) if note.kind() != Some("Note") => format!("{n}\n\n{body}"),
        _ if body.is_empty() => content_warning(&*note).unwrap_or_default(),
        _ => body,
    }
}

/// One attachment of a note: where it is and what it claims to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The URL.
    pub url: String,
    /// Claimed media type.
    pub mime: Option<String>,
    /// Name or alt text.
    pub name: Option<String>,
    /// A `Link`, not a file.
    pub is_link: bool,
}

/// A note's attachments, at most `limit`.
#[must_use]
pub fn attachments(note: &impl AsWire<Object>, limit: usize) -> Vec<Attachment> {
    note.as_wire()
        .attachment
        .each()
        .filter_map(Loose::get)
        .filter_map(|a| {
            let url = a.location()?;
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return None;
            }
            Some(Attachment {
                url: url.to_owned(),
                mime: a.media_type.as_str().map(str::to_owned),
                name: a.name.as_str().map(str::to_owned),
                is_link: a.kind.as_str() == Some("Link"),
            })
        })
        .take(limit)
        .collect()
}

/// A verified note that wakes one agent, with everything its NormalizedMessage is made of.
#[derive(Debug)]
pub struct WokenNote<'a> {
    /// The message's id (UUIDv7).
    pub id: String,
    /// The verified activity, its note embedded (kept as `raw`, as received).
    pub activity: &'a Value,
    /// The authenticated actor's IRI.
    pub actor_id: &'a str,
    /// Its `@user@host`.
    pub actor_address: &'a str,
    /// Its document (display name, username, profile URL, avatar).
    pub actor_doc: &'a Value,
    /// How it was authenticated.
    pub method: AuthMethod,
    /// The key that verified.
    pub key_id: &'a str,
    /// Who verified it: this server's domain.
    pub verifier: &'a str,
    /// The woken agent, `@name@domain`.
    pub recipient: &'a str,
    /// The thread key.
    pub thread_key: &'a str,
    /// The stored message this note answers, when known.
    pub in_reply_to: Option<&'a str>,
    /// Text and attachments.
    pub parts: Vec<Part>,
    /// Characters one reply note to the sender's server may have (0: no limit).
    pub max_reply_chars: u64,
    /// When it was received.
    pub now: Timestamp,
}

/// The sender's profile from its actor document: presentation only, never authorization.
fn profile_of(doc: &Actor, actor_id: &str) -> SenderProfile {
    // The first icon, when it names a picture.
    let avatar = doc
        .icon
        .each()
        .next()
        .and_then(Loose::get)
        .and_then(|i| match i {
            Image::Url(s) => Some(Avatar {
                url: s.clone(),
                mime_type: None,
                width: None,
                height: None,
            }),
            Image::Object(o) => o.url.as_str().map(|u| Avatar {
                url: u.to_owned(),
                mime_type: o.media_type.as_str().map(str::to_owned),
                width: None,
                height: None,
            }),
        });
    SenderProfile {
        display_name: doc
            .name
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        username: doc.preferred_username.as_str().map(str::to_owned),
        url: doc.profile_url().map(str::to_owned),
        avatar,
        provider: Some("activitypub".into()),
        provider_subject: Some(actor_id.to_owned()),
        ..SenderProfile::default()
    }
}

/// Whether an actor document describes a program rather than a person: its `type` is `Service`
/// or `Application` (how Mastodon, Misskey, GoToSocial and switchboard itself publish bots and
/// instance actors), or it carries a bot flag some servers add (`bot`, `isBot`: true).
#[must_use]
pub fn is_automated(doc: &impl AsWire<Actor>) -> bool {
    let doc = doc.as_wire();
    let typed = doc.kind.each().filter_map(Loose::get).any(|t| {
        matches!(
            t.as_str(),
            "Service" | "Application" | "as:Service" | "as:Application"
        )
    });
    let flagged = [&doc.bot, &doc.is_bot]
        .iter()
        .any(|f| f.get() == Some(&true));
    typed || flagged
}

/// The NormalizedMessage of a woken note: the verified actor as sender, with one piece of
/// identity evidence (the actor IRI, vouched for by this server's verification of its
/// signature or proof), ActivityPub's reply capabilities, and the reply context
/// ([`ReplyContext`]) its answer is addressed and threaded by.
///
/// # Errors
/// The reply context does not convert to JSON (it always does).
pub fn note_message(
    n: WokenNote<'_>,
) -> Result<NormalizedMessage, crate::message::ReplyContextError> {
    let activity = Activity::from_json(n.activity);
    let note = activity.embedded();
    let actor = Actor::from_json(n.actor_doc);
    let profile = profile_of(&actor, n.actor_id);
    let evidence = IdentityEvidence {
        id: None,
        subject: n.actor_id.to_owned(),
        issuer: n.verifier.to_owned(),
        method: n.method.clone(),
        assurance: crate::message::Assurance::Domain,
        audience: Audience::One(n.recipient.to_owned()),
        issued_at: n.now,
        not_before: None,
        expires_at: None,
        on_behalf_of: None,
        claims: None,
        source: Some(EvidenceSource {
            transport: Some(ReceivedVia::ActivityPub.as_str().to_owned()),
            ..EvidenceSource::default()
        }),
        proof: Proof::Transport(TransportProof {
            verified_by: n.verifier.to_owned(),
            key_id: Some(n.key_id.to_owned()),
        }),
        extra: Extra::new(),
    };
    let mut msg = NormalizedMessage {
        id: n.id,
        thread_id: n.thread_key.to_owned(),
        in_reply_to: n.in_reply_to.map(str::to_owned),
        sender: Sender {
            address: n.actor_address.to_owned(),
            display_name: profile.display_name.clone(),
            profile: Some(profile),
            auth_method: n.method,
            verified: true,
            key_id: Some(n.key_id.to_owned()),
            identities: Some(vec![evidence]),
            automated: is_automated(&actor),
            client: None,
            extra: Extra::new(),
        },
        recipient: n.recipient.to_owned(),
        parts: n.parts,
        content_warning: note.and_then(content_warning),
        sensitive: note.is_some_and(|n| n.sensitive.get().copied().unwrap_or(false)),
        history: None,
        history_cache_breakpoint_after: None,
        recipient_capabilities: RecipientCapabilities {
            mention_relay: MentionRelay::Addressing(AddressingRelay {
                envelope_fields: vec!["to".into(), "cc".into()],
                also_inline: true,
            }),
            agent_chain: activity.embedded().and_then(chain_of),
            formats: vec!["text/html".into(), "text/plain".into()],
            attachments: true,
            streaming: false,
            max_text_chars: (n.max_reply_chars > 0).then_some(n.max_reply_chars),
        },
        received_via: ReceivedVia::ActivityPub,
        received_at: n.now,
        raw: n.activity.clone(),
        policy_resolution: None,
        received_trace: None,
        reply_context: crate::message::ReplyContext::NONE,
        extra: Extra::new(),
    };
    msg.set_reply_context(&ReplyContext::of_activity(&activity))?;
    Ok(msg)
}

#[cfg(test)]
mod tests {
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
}
