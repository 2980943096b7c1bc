//! ActivityStreams shapes as switchboard reads and writes them, pure data: the activity, the
//! object (a note, article, page or question), the actor document with its keys, tags
//! (mentions), attachments and switchboard's `agentChain` extension. What a note means to the
//! contract is [`super::mapping`]'s.
//!
//! JSON-LD as servers send it is loose: a property may hold one value or an array
//! ([`OneOrMany`]), an IRI or an embedded object ([`Reference`]), or something of another shape
//! altogether. Every property is a [`Loose`]: absent, of the expected shape, or of another shape
//! (`null` included), kept as it came and read as absent. Every type here reads any JSON object,
//! and properties switchboard does not know are kept in `extra`, so nothing a peer sent is
//! lost: written back, a value reads as the JSON it was read from. A message's `raw` is the
//! activity as received, never one written back from these types.

use std::borrow::Cow;

use serde::de::{DeserializeOwned, Deserializer};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Properties a type does not name, kept as they came.
pub type Extra = Map<String, Value>;

/// A property: absent, of the expected shape `T`, or of any other shape (kept as it came,
/// read as absent). Fields of this type are written only when present
/// (`skip_serializing_if = "Loose::is_absent"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Loose<T> {
    /// Not there.
    #[default]
    Absent,
    /// The expected shape.
    Typed(T),
    /// Anything else, `null` included.
    Other(Value),
}

impl<T> Loose<T> {
    /// The value, when it has the expected shape.
    pub const fn get(&self) -> Option<&T> {
        match self {
            Self::Typed(t) => Some(t),
            Self::Absent | Self::Other(_) => None,
        }
    }

    /// Whether the property is not there (the serde `skip_serializing_if` of every field).
    pub const fn is_absent(&self) -> bool {
        matches!(self, Self::Absent)
    }
}

impl Loose<String> {
    /// The string, when the property holds one.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        self.get().map(String::as_str)
    }
}

impl<T> Loose<OneOrMany<T>> {
    /// The values, in order (none when absent or of another shape).
    pub fn each(&self) -> std::slice::Iter<'_, T> {
        match self {
            Self::Typed(v) => v.iter(),
            Self::Absent | Self::Other(_) => [].iter(),
        }
    }
}

impl Loose<OneOrMany<Reference>> {
    /// The IRIs the references name, in order.
    pub fn iris(&self) -> impl Iterator<Item = &str> {
        self.each().filter_map(Reference::iri)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(match T::deserialize(&v) {
            Ok(t) => Self::Typed(t),
            Err(_) => Self::Other(v),
        })
    }
}

impl<T: Serialize> Serialize for Loose<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Typed(t) => t.serialize(s),
            Self::Other(v) => v.serialize(s),
            Self::Absent => s.serialize_none(),
        }
    }
}

impl<T> From<T> for Loose<T> {
    fn from(t: T) -> Self {
        Self::Typed(t)
    }
}

impl From<&str> for Loose<String> {
    fn from(s: &str) -> Self {
        Self::Typed(s.to_owned())
    }
}

impl<T> From<Option<T>> for Loose<T> {
    fn from(t: Option<T>) -> Self {
        t.map_or(Self::Absent, Self::Typed)
    }
}

/// One value or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// An array.
    Many(Vec<T>),
    /// A single value.
    One(T),
}

impl<T> OneOrMany<T> {
    /// The values, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        match self {
            Self::Many(v) => v.iter(),
            Self::One(t) => std::slice::from_ref(t).iter(),
        }
    }
}

/// A reference to another object: its IRI, or the object embedded (a `Link`, an actor…).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Reference {
    /// An IRI.
    Iri(String),
    /// An embedded object or link.
    Object(RefObject),
    /// Anything else.
    Other(Value),
}

impl Reference {
    /// The IRI: the string, or an embedded object's `id`, else its `href` (an `id` that is
    /// there but no string, `null` included, names nothing).
    #[must_use]
    pub fn iri(&self) -> Option<&str> {
        match self {
            Self::Iri(s) => Some(s),
            Self::Object(o) if o.id.is_absent() => o.href.as_str(),
            Self::Object(o) => o.id.as_str(),
            Self::Other(_) => None,
        }
    }

    /// Where it links to: the string, or an embedded `Link`'s `href`.
    #[must_use]
    pub fn href(&self) -> Option<&str> {
        match self {
            Self::Iri(s) => Some(s),
            Self::Object(o) => o.href.as_str(),
            Self::Other(_) => None,
        }
    }
}

impl From<&str> for Reference {
    fn from(s: &str) -> Self {
        Self::Iri(s.to_owned())
    }
}

/// An embedded object or link, as far as a reference to it is read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RefObject {
    /// `id`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub id: Loose<String>,
    /// `href` (of a `Link`).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub href: Loose<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Who an activity or object is addressed to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Addressing {
    /// `to`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub to: Loose<OneOrMany<Reference>>,
    /// `cc`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub cc: Loose<OneOrMany<Reference>>,
    /// `bto`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub bto: Loose<OneOrMany<Reference>>,
    /// `bcc`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub bcc: Loose<OneOrMany<Reference>>,
    /// `audience`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub audience: Loose<OneOrMany<Reference>>,
}

impl Addressing {
    /// Everyone addressed: `to`, `cc`, `bto`, `bcc`, `audience`, in that order.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        [&self.to, &self.cc, &self.bto, &self.bcc, &self.audience]
            .into_iter()
            .flat_map(Loose::iris)
    }
}

/// A type read from JSON as it came: any object reads (see the module's contract); anything
/// else reads as the empty value.
pub trait FromJson: DeserializeOwned + Default {
    /// `v` as this type.
    #[must_use]
    fn from_json(v: &Value) -> Self {
        Self::deserialize(v).unwrap_or_default()
    }
}

/// The wire type `T`, or JSON read as one: what the mapping functions take, so that the
/// transport (holding the typed form) and callers holding JSON (tests, fuzzing) share them.
pub trait AsWire<T: Clone> {
    /// The value as a `T`.
    fn as_wire(&self) -> Cow<'_, T>;
}

impl<T: FromJson + Clone> AsWire<T> for Value {
    fn as_wire(&self) -> Cow<'_, T> {
        Cow::Owned(T::from_json(self))
    }
}

/// An activity (`Create`, `Follow`, …), as far as a note's path reads it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Activity {
    /// `id`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub id: Loose<String>,
    /// `type`.
    #[serde(rename = "type", skip_serializing_if = "Loose::is_absent")]
    pub kind: Loose<String>,
    /// The actor: its IRI, or its document embedded.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub actor: Loose<Reference>,
    /// The object: embedded, or its IRI.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub object: Loose<ObjectRef>,
    /// Who it is addressed to.
    #[serde(flatten)]
    pub addressing: Addressing,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl FromJson for Activity {}

impl AsWire<Activity> for Activity {
    fn as_wire(&self) -> Cow<'_, Activity> {
        Cow::Borrowed(self)
    }
}

impl Activity {
    /// The actor's IRI.
    #[must_use]
    pub fn actor_iri(&self) -> Option<&str> {
        self.actor.get().and_then(Reference::iri)
    }

    /// The object, when it is embedded.
    #[must_use]
    pub fn embedded(&self) -> Option<&Object> {
        match self.object.get() {
            Some(ObjectRef::Object(o)) => Some(o),
            _ => None,
        }
    }
}

/// An activity's object: embedded, or named by its IRI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ObjectRef {
    /// Embedded.
    Object(Box<Object>),
    /// An IRI.
    Iri(String),
}

/// An object: a `Note` (or `Article`, `Page`, `Question`), as received or as switchboard writes
/// its replies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Object {
    /// `id`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub id: Loose<String>,
    /// `type`.
    #[serde(rename = "type", skip_serializing_if = "Loose::is_absent")]
    pub kind: Loose<String>,
    /// The author(s).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub attributed_to: Loose<OneOrMany<Reference>>,
    /// A title (articles, pages, questions).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub name: Loose<String>,
    /// The content warning.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub summary: Loose<String>,
    /// The HTML content.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub content: Loose<String>,
    /// The content by language.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub content_map: Loose<Map<String, Value>>,
    /// When it was published.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub published: Loose<String>,
    /// Who it is addressed to.
    #[serde(flatten)]
    pub addressing: Addressing,
    /// Tags: mentions, hashtags, emoji.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub tag: Loose<OneOrMany<Loose<Tag>>>,
    /// Attachments.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub attachment: Loose<OneOrMany<Loose<Attachment>>>,
    /// Where it is shown.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub url: Loose<OneOrMany<Reference>>,
    /// Whether it is marked sensitive.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub sensitive: Loose<bool>,
    /// The object it answers.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub in_reply_to: Loose<Reference>,
    /// The thread (FEP-7888; Mastodon's `/contexts/N`).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub context: Loose<Reference>,
    /// The OStatus conversation (Mastodon's `tag:` URI).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub conversation: Loose<String>,
    /// switchboard's agent conversation hop ([`AgentChain`]).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub agent_chain: Loose<AgentChain>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl FromJson for Object {}

impl AsWire<Object> for Object {
    fn as_wire(&self) -> Cow<'_, Object> {
        Cow::Borrowed(self)
    }
}

impl Object {
    /// `id`, when a string.
    #[must_use]
    pub fn id(&self) -> Option<&str> {
        self.id.as_str()
    }

    /// `type`, when a string.
    #[must_use]
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_str()
    }

    /// The first author's IRI.
    #[must_use]
    pub fn author(&self) -> Option<&str> {
        self.attributed_to.iris().next()
    }

    /// The IRI of the object it answers.
    #[must_use]
    pub fn in_reply_to(&self) -> Option<&str> {
        self.in_reply_to.get().and_then(Reference::iri)
    }

    /// The IRI of its `context`.
    #[must_use]
    pub fn context(&self) -> Option<&str> {
        self.context.get().and_then(Reference::iri)
    }

    /// Its `conversation`, when a string.
    #[must_use]
    pub fn conversation(&self) -> Option<&str> {
        self.conversation.as_str()
    }

    /// The tags of type `Mention`.
    pub fn mentions(&self) -> impl Iterator<Item = &Tag> {
        self.tag
            .each()
            .filter_map(Loose::get)
            .filter(|t| t.kind.as_str() == Some("Mention"))
    }
}

/// A tag: a `Mention` (`href` the actor, `name` its `@user@host`), a `Hashtag`, an `Emoji`…
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tag {
    /// `type`.
    #[serde(rename = "type", skip_serializing_if = "Loose::is_absent")]
    pub kind: Loose<String>,
    /// What it links to.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub href: Loose<String>,
    /// Its text.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub name: Loose<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Tag {
    /// A `Mention` of the actor `href` as `name`.
    #[must_use]
    pub fn mention(href: &str, name: &str) -> Self {
        Self {
            kind: "Mention".into(),
            href: href.into(),
            name: name.into(),
            extra: Extra::new(),
        }
    }
}

/// An attachment: a `Document`, `Image`… with a `url`, or a `Link` with an `href`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Attachment {
    /// `type`.
    #[serde(rename = "type", skip_serializing_if = "Loose::is_absent")]
    pub kind: Loose<String>,
    /// Its claimed media type.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub media_type: Loose<String>,
    /// Where it is: a URL, a `Link`, or several.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub url: Loose<OneOrMany<Reference>>,
    /// Where a `Link` points.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub href: Loose<String>,
    /// Its name or alt text.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub name: Loose<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Attachment {
    /// A `Document` at `url` as switchboard attaches files to its replies: `name` is always
    /// written, `null` when the file has none.
    #[must_use]
    pub fn document(url: &str, media_type: &str, name: Option<&str>) -> Self {
        Self {
            kind: "Document".into(),
            media_type: media_type.into(),
            url: OneOrMany::One(url.into()).into(),
            href: Loose::Absent,
            name: name.map_or(Loose::Other(Value::Null), Into::into),
            extra: Extra::new(),
        }
    }

    /// Where it is: a `url` string, a `url` Link's `href`, the first of a `url` array that is
    /// either; without a `url` (or one of another shape, `null` included), its own `href`.
    #[must_use]
    pub fn location(&self) -> Option<&str> {
        match self.url.get() {
            None | Some(OneOrMany::One(Reference::Other(_))) => self.href.as_str(),
            Some(OneOrMany::One(r)) => r.href(),
            Some(OneOrMany::Many(v)) => v.iter().find_map(Reference::href),
        }
    }
}

/// switchboard's `agentChain` extension: the hop an agent's reply was written at in an agent
/// conversation (`mentionable:agentChain`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AgentChain {
    /// 1-based hop.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub hop: Loose<u64>,
    /// The chain's limit.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub max_hops: Loose<u64>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// An actor document (`Person`, `Service`, `Application`, `Group`…).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Actor {
    /// `id`.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub id: Loose<String>,
    /// `type`, one or several.
    #[serde(rename = "type", skip_serializing_if = "Loose::is_absent")]
    pub kind: Loose<OneOrMany<Loose<String>>>,
    /// The user name on its server.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub preferred_username: Loose<String>,
    /// The display name.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub name: Loose<String>,
    /// The profile page.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub url: Loose<OneOrMany<Reference>>,
    /// The avatar: a URL or an `Image`, or several.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub icon: Loose<OneOrMany<Loose<Image>>>,
    /// The personal inbox.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub inbox: Loose<String>,
    /// The followers collection.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub followers: Loose<String>,
    /// `endpoints` (the shared inbox).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub endpoints: Loose<Endpoints>,
    /// RSA keys (`publicKey`).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub public_key: Loose<OneOrMany<Loose<Key>>>,
    /// Multikeys (FEP-521a `assertionMethod`).
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub assertion_method: Loose<OneOrMany<Loose<Key>>>,
    /// The bot flag some servers add.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub bot: Loose<bool>,
    /// The same under Misskey's name.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub is_bot: Loose<bool>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

impl FromJson for Actor {}

impl AsWire<Actor> for Actor {
    fn as_wire(&self) -> Cow<'_, Actor> {
        Cow::Borrowed(self)
    }
}

impl Actor {
    /// The profile page: the first `url` that names one.
    #[must_use]
    pub fn profile_url(&self) -> Option<&str> {
        self.url.iris().next()
    }

    /// `endpoints.sharedInbox`, when a string.
    #[must_use]
    pub fn shared_inbox(&self) -> Option<&str> {
        self.endpoints.get().and_then(|e| e.shared_inbox.as_str())
    }
}

/// An actor's `endpoints`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Endpoints {
    /// The server's shared inbox.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub shared_inbox: Loose<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A key an actor publishes: RSA under `publicKey` (`publicKeyPem`), Ed25519 as a `Multikey`
/// under `assertionMethod` (`publicKeyMultibase`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Key {
    /// The key's IRI.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub id: Loose<String>,
    /// `type` (`Multikey`).
    #[serde(rename = "type", skip_serializing_if = "Loose::is_absent")]
    pub kind: Loose<String>,
    /// An RSA key in PEM.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub public_key_pem: Loose<String>,
    /// A Multikey, base58btc.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub public_key_multibase: Loose<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

/// An avatar: its URL, or an `Image`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Image {
    /// A URL.
    Url(String),
    /// An `Image` object.
    Object(ImageObject),
}

/// An `Image` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ImageObject {
    /// Where the picture is.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub url: Loose<String>,
    /// Its media type.
    #[serde(skip_serializing_if = "Loose::is_absent")]
    pub media_type: Loose<String>,
    /// Everything else.
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn loose_json_ld_reads_and_nothing_is_lost() {
        let v = json!({
            "id": "https://m.example/n/1",
            "type": "Note",
            "attributedTo": [{"id": "https://m.example/u/a", "type": "Person"}],
            "content": 5,
            "to": "https://sb.example/agents/h",
            "cc": [{"href": "https://m.example/u/b"}, 7, null],
            "tag": {"type": "Mention", "href": "https://sb.example/agents/h"},
            "inReplyTo": {"id": null, "href": "https://m.example/n/0"},
            "attachment": ["not an object", {"type": "Document", "url": [7, {"href": "https://m.example/f.png"}]}],
            "agentChain": {"hop": "1", "maxHops": 3},
            "quoteUrl": "https://m.example/n/9",
            "summary": null,
            "context": null,
        });
        let note = Object::from_json(&v);
        assert_eq!(note.id(), Some("https://m.example/n/1"));
        assert_eq!(note.author(), Some("https://m.example/u/a"));
        assert_eq!(note.content.as_str(), None, "content of another shape");
        assert_eq!(note.summary, Loose::Other(Value::Null), "null is kept");
        assert_eq!(
            note.addressing.all().collect::<Vec<_>>(),
            ["https://sb.example/agents/h", "https://m.example/u/b"]
        );
        assert_eq!(note.mentions().count(), 1);
        assert_eq!(note.in_reply_to(), None, "an id of null names nothing");
        let files: Vec<_> = note
            .attachment
            .each()
            .filter_map(Loose::get)
            .filter_map(Attachment::location)
            .collect();
        assert_eq!(files, ["https://m.example/f.png"]);
        let chain = note.agent_chain.get().expect("chain");
        assert_eq!(chain.hop.get(), None);
        assert_eq!(chain.max_hops.get(), Some(&3));
        // Everything comes back out as it went in.
        assert_eq!(serde_json::to_value(&note).expect("json"), v);
        // Not an object: nothing.
        assert_eq!(
            Object::from_json(&json!("https://m.example/n/1")),
            Object::default()
        );
    }

    #[test]
    fn an_actor_document_reads_with_its_keys_and_endpoints() {
        let v = json!({
            "id": "https://m.example/u/a",
            "type": ["Service", "schema:Thing"],
            "preferredUsername": "a",
            "url": {"type": "Link", "href": "https://m.example/@a"},
            "icon": [{"type": "Image", "url": "https://m.example/a.png", "mediaType": "image/png"}],
            "endpoints": "https://m.example/endpoints",
            "publicKey": {"id": "https://m.example/u/a#main-key", "publicKeyPem": "-----BEGIN"},
            "assertionMethod": ["https://m.example/u/a#ed", {"id": "k", "type": "Multikey", "publicKeyMultibase": "z6Mk"}],
            "isBot": "yes",
        });
        let actor = Actor::from_json(&v);
        assert_eq!(actor.preferred_username.as_str(), Some("a"));
        assert_eq!(actor.profile_url(), Some("https://m.example/@a"));
        assert_eq!(actor.shared_inbox(), None, "endpoints as an IRI");
        assert_eq!(actor.assertion_method.each().count(), 2);
        assert_eq!(actor.is_bot.get(), None);
        assert_eq!(serde_json::to_value(&actor).expect("json"), v);
    }

    #[test]
    fn a_written_attachment_always_names_itself() {
        let a = Attachment::document("https://sb.example/media/ab", "image/png", None);
        assert_eq!(
            serde_json::to_value(&a).expect("json"),
            json!({"type": "Document", "mediaType": "image/png", "url": "https://sb.example/media/ab", "name": null})
        );
    }
}
