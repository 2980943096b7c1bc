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
mod tests;
