//! The NormalizedMessage contract as Rust types (its JSON Schema, generated from them:
//! `docs/schema/normalized-message.schema.json`).
//!
//! Field names are snake_case on the wire. Types that round-trip through agents carry an `extra`
//! map so fields this version does not know are kept when a message is re-serialised.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::macros::{open_string_enum, open_tagged_enum};
use super::time::Timestamp;

/// Unknown fields, kept verbatim so a round trip loses nothing.
pub type Extra = Map<String, Value>;

/// One inbound turn, as every transport produces it and every agent backend consumes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NormalizedMessage {
    /// Switchboard's own id (UUIDv7); the wire id lives in `raw` and the dedupe key.
    pub id: String,
    /// Stable per conversation (switchboard's thread id once ingested).
    pub thread_id: String,
    /// Id of the message or response this answers, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    /// Who sent it, with verified identity evidence.
    pub sender: Sender,
    /// The agent addressed, `@agent@domain`.
    pub recipient: String,
    /// The content; never empty.
    pub parts: Vec<Part>,
    /// The sender's content warning, apart from the text: what the message is about, shown
    /// before it (ActivityPub `summary`). A reply carries it on by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_warning: Option<String>,
    /// The sender marked the message's media sensitive (ActivityPub `sensitive`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
    /// Earlier turns, oldest first, already trimmed by the history policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<HistoricalMessage>>,
    /// (switchboard) Index into `history` of the last turn of the stable head: a prompt cache
    /// breakpoint placed after it stays valid while the window slides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_cache_breakpoint_after: Option<usize>,
    /// How the reply path relays mentions and what it can carry.
    pub recipient_capabilities: RecipientCapabilities,
    /// The transport it arrived on; telemetry and storage keys only.
    pub received_via: ReceivedVia,
    /// When switchboard received it.
    pub received_at: Timestamp,
    /// The verified wire object.
    #[serde(default)]
    pub raw: Value,
    /// The verified completion of a policy part sent on the previous turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_resolution: Option<PolicyResolution>,
    /// The response this turn continues (A2A input-required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_trace: Option<Box<NormalizedResponse>>,
    /// What its transport needs to reply, in that transport's own type
    /// ([`super::reply_context`]). Never serialised with the message: neither agents nor the
    /// schema see it; the store keeps it beside the message's fields.
    #[serde(skip)]
    #[schemars(skip)]
    pub reply_context: super::ReplyContext,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

open_string_enum! {
    /// The transport a message arrived on.
    pub enum ReceivedVia {
        /// ActivityPub inbox delivery.
        ActivityPub = "activitypub",
        /// A2A JSON-RPC call.
        A2a = "a2a",
        /// SMTP.
        Email = "email",
    }
}

/// An earlier turn of the thread, as attached to `history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoricalMessage {
    /// The stored message or response id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `assistant` for the recipient agent's own turns, `user` for everyone else.
    pub role: Role,
    // `sender` and `parts` are shared (`Arc`): a turn is shown again on every dispatch of its
    // thread, and history shares what it holds in memory instead of copying it each time.
    /// Who wrote the turn.
    pub sender: std::sync::Arc<Sender>,
    /// Its content.
    pub parts: std::sync::Arc<Vec<Part>>,
    /// When it was received or produced.
    pub timestamp: Timestamp,
}

/// The role of a historical turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Anyone but the recipient agent.
    User,
    /// The recipient agent itself.
    Assistant,
}

/// The sender of a turn and what was verified about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Sender {
    /// `@user@domain` (ActivityPub, A2A callers) or `user@domain` (email).
    pub address: String,
    /// Human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Presentation context only, never authorization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<SenderProfile>,
    /// The wire credential that was checked.
    pub auth_method: AuthMethod,
    /// Whether the transport-native proof checked out.
    pub verified: bool,
    /// AP key URL, JWT kid, DKIM `d=/s=`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Verified principals behind this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identities: Option<Vec<IdentityEvidence>>,
    /// The sender is a program, not a person, as its transport's evidence says: an
    /// ActivityPub actor of type `Service` or `Application` or flagged as a bot, an A2A caller
    /// (an agent by definition), a mail from another agent's relay. Such a party gets a small
    /// conversation budget with each agent, so that two bots never answer each other forever;
    /// a person never does. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automated: bool,
    /// The network address the message came from, where nothing else tells its senders apart
    /// (an anonymous A2A caller): the rate limits count each such address as a sender of its
    /// own. Never serialised: neither agents nor the database see it.
    #[serde(skip)]
    #[schemars(skip)]
    pub client: Option<std::net::IpAddr>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

open_string_enum! {
    /// The wire credential of a turn, also used as the evidence `method` switchboard mints.
    pub enum AuthMethod {
        /// draft-cavage or RFC 9421 HTTP signature.
        ApHttpSignature = "ap-http-signature",
        /// FEP-8b32 object integrity proof.
        ApObjectIntegrityProof = "ap-object-integrity-proof",
        /// A2A bearer JWT.
        A2aJwt = "a2a-jwt",
        /// A2A OAuth access token.
        A2aOauth = "a2a-oauth",
        /// DKIM pass, not aligned with From.
        EmailDkim = "email-dkim",
        /// DKIM pass aligned with From (DMARC pass).
        EmailDmarc = "email-dmarc",
        /// Nothing was verified.
        None = "none",
    }
}

impl Sender {
    /// The sender record of one of switchboard's own agents (its responses in history): nothing
    /// to verify on a wire, so `auth_method` is `none` and `verified` is true.
    #[must_use]
    pub fn local_agent(address: &str) -> Self {
        Self {
            address: address.to_owned(),
            display_name: None,
            profile: None,
            auth_method: AuthMethod::None,
            verified: true,
            key_id: None,
            identities: None,
            automated: false,
            client: None,
            extra: Extra::new(),
        }
    }
}

/// The key of a turn's `sender` (beside its known fields) that names whom a multi-agent chain
/// works for: the sender of the turn that started it, as a list (A2A's
/// `metadata.mentionable.on_behalf_of`). switchboard sets it on turns it relays from one agent
/// to another; it is information, never evidence.
pub const ON_BEHALF_OF: &str = "on_behalf_of";

/// The key of a NormalizedMessage (beside its known fields) that lists the further local
/// agents (addresses) its sender addressed alongside `recipient` on a transport that gives the
/// sender one answer (the A2A hub's leading `@handles`): they answer after the recipient, in its
/// chain, as if its answer had mentioned them.
pub const ALSO_ADDRESSED: &str = "also_addressed";

impl NormalizedMessage {
    /// Whom a chain continuing from this turn works for: what the sender says
    /// ([`ON_BEHALF_OF`]), else the sender itself.
    #[must_use]
    pub fn on_behalf_of(&self) -> Value {
        match self.sender.extra.get(ON_BEHALF_OF) {
            Some(v @ Value::Array(_)) => v.clone(),
            _ => Value::Array(vec![Value::String(self.sender.address.clone())]),
        }
    }
}

/// Presentation context about a sender; never used for authorization.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SenderProfile {
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Username on its platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Profile page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Avatar picture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avatar: Option<Avatar>,
    /// BCP 47 language tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    /// IANA time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The platform that supplied the profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The subject at that provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_subject: Option<String>,
    /// When the profile was fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<Timestamp>,
    /// Provider-specific fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A sender's avatar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Avatar {
    /// Where the picture is.
    pub url: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Width in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// Height in pixels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
}

/// One verified principal behind a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IdentityEvidence {
    /// Evidence id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The principal, e.g. an actor IRI, `mailto:` address or JWT `sub`.
    pub subject: String,
    /// Who vouches for it.
    pub issuer: String,
    /// How it was established (open vocabulary).
    pub method: AuthMethod,
    /// How strong the evidence is (open vocabulary).
    pub assurance: Assurance,
    /// Who the evidence is for.
    pub audience: Audience,
    /// When it was issued.
    pub issued_at: Timestamp,
    /// Not valid before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// Not valid after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Upstream user authority in agent-to-agent chains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<Vec<String>>,
    /// Further claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Map<String, Value>>,
    /// Where the evidence came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<EvidenceSource>,
    /// How the evidence is proven.
    pub proof: Proof,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

open_string_enum! {
    /// How strong a piece of identity evidence is.
    pub enum Assurance {
        /// Vouched for by a platform.
        Platform = "platform",
        /// Proven control of a domain.
        Domain = "domain",
        /// Proven control of an address.
        Address = "address",
        /// An agent's own credential.
        Agent = "agent",
        /// An OAuth grant.
        Oauth = "oauth",
        /// A wallet signature.
        Wallet = "wallet",
        /// Delegated authority.
        Delegated = "delegated",
    }
}

/// One audience or several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Audience {
    /// A single audience.
    One(String),
    /// Several audiences.
    Many(Vec<String>),
}

/// Where evidence came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvidenceSource {
    /// Transport name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// Transport module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_module: Option<String>,
    /// Trusted connector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    /// Channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Further fields.
    #[serde(flatten)]
    pub extra: Extra,
}

open_tagged_enum! {
    /// How a piece of identity evidence is proven.
    pub enum Proof, tag = "type" {
        /// The receiving transport checked the wire credential itself.
        Transport(TransportProof) = "transport",
        /// A signed attestation from a trusted connector.
        SignedAttestation(SignedAttestationProof) = "signed-attestation",
        /// A bearer token checked by switchboard (never the token itself).
        BearerToken(BearerTokenProof) = "bearer-token",
    }
}

/// Proof by the receiving transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TransportProof {
    /// Who verified it.
    pub verified_by: String,
    /// The key used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// A signed attestation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SignedAttestationProof {
    /// Signature algorithm.
    pub alg: String,
    /// Key id.
    pub kid: String,
    /// The signature.
    pub value: String,
    /// Canonicalization used before signing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonicalization: Option<String>,
}

/// A verified bearer token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BearerTokenProof {
    /// Who verified it.
    pub verified_by: String,
    /// A hash of the token, never the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_hash: Option<String>,
}

open_tagged_enum! {
    /// One piece of content.
    pub enum Part, tag = "kind" {
        /// Text.
        Text(TextPart) = "text",
        /// A file.
        File(FilePart) = "file",
        /// A link.
        Link(LinkPart) = "link",
        /// A produced artifact.
        Artifact(ArtifactPart) = "artifact",
        /// A tool call and, once known, its result.
        ToolCall(ToolCallPart) = "tool_call",
        /// A policy part (consent, payment, rate limit…).
        Policy(PolicyPartWrapper) = "policy",
        /// Something that happened to the agent, not something said to it.
        Event(EventPart) = "event",
    }
}

impl Part {
    /// A `text/plain` part.
    #[must_use]
    pub fn text(content: impl Into<String>) -> Self {
        Self::Text(TextPart {
            mime: TextMime::Plain,
            content: content.into(),
            extra: Extra::new(),
        })
    }

    /// The tag of this part (`text`, `file`, …, or the unknown kind).
    #[must_use]
    pub fn kind(&self) -> &str {
        match self {
            Self::Text(_) => "text",
            Self::File(_) => "file",
            Self::Link(_) => "link",
            Self::Artifact(_) => "artifact",
            Self::ToolCall(_) => "tool_call",
            Self::Policy(_) => "policy",
            Self::Event(_) => "event",
            Self::Other(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The number of characters this part contributes to a text budget.
    #[must_use]
    pub fn text_len(&self) -> usize {
        match self {
            Self::Text(t) => count_chars(&t.content),
            Self::Link(l) => l.url.len() + l.title.as_ref().map_or(0, String::len),
            Self::Policy(p) => count_chars(&p.policy.message),
            _ => 0,
        }
    }
}

/// The characters of `s`: its length when it is ASCII, which is checked a word at a time
/// (history counts every turn's text against its budget on every dispatch).
fn count_chars(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// Text content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TextPart {
    /// `text/plain`, `text/markdown` or `text/html`.
    pub mime: TextMime,
    /// The text.
    pub content: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

open_string_enum! {
    /// The media type of a text part.
    pub enum TextMime {
        /// Plain text.
        Plain = "text/plain",
        /// Markdown.
        Markdown = "text/markdown",
        /// Sanitised HTML.
        Html = "text/html",
    }
}

/// A file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FilePart {
    /// File name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Media type.
    pub mime: String,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Where the bytes are.
    pub bytes_ref: BytesRef,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Something that happened to the agent, which it asked to be told of (`notify` in its
/// configuration): the message's `sender` is who did it. No reply is expected: an agent that
/// answers nothing (or `NO_REPLY`) sends nothing; one that answers writes to the sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventPart {
    /// What happened: `follow`, `like`, `announce` (a boost), `quote_request` or
    /// `delivery_failed` (a reply bounced).
    pub event: String,
    /// What it happened to, when not the agent itself: the IRI of the agent's note that was
    /// liked, boosted or asked to be quoted; the id of the response that bounced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// What came of it: for a quote request `accepted` or `rejected` (by the agent's
    /// `quote_policy`); for a bounce, the report's enhanced status code and the remote
    /// server's diagnostic (`5.1.1 550 5.1.1 user unknown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinkPart {
    /// The URL.
    pub url: String,
    /// Its title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A produced artifact, as bytes or inline structured data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactPart {
    /// Application-defined artifact type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Media type.
    pub mime: String,
    /// Where the bytes are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_ref: Option<BytesRef>,
    /// (switchboard) Structured JSON carried inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tool call; a streaming call re-emits the same `id`, first without and then with its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallPart {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub args: Value,
    /// The result, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, if the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolCallError>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallError {
    /// Human-readable reason.
    pub message: String,
}

/// `{ kind: 'policy', policy: PolicyPart }`: the policy part keeps its own `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyPartWrapper {
    /// The policy part.
    pub policy: PolicyPart,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

open_tagged_enum! {
    /// Where the bytes of a file or artifact are.
    pub enum BytesRef, tag = "kind" {
        /// Inline base64.
        Inline(InlineBytes) = "inline",
        /// A URL, possibly expiring.
        Url(UrlBytes) = "url",
        /// Content-addressed by digest, with a signed, expiring switchboard URL.
        ContentAddressed(ContentAddressedBytes) = "content_addressed",
    }
}

/// Inline bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InlineBytes {
    /// Base64 (standard alphabet) of the bytes.
    pub data_base64: String,
}

/// Bytes behind a URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UrlBytes {
    /// The URL.
    pub url: String,
    /// When the URL stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

/// Content-addressed bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContentAddressedBytes {
    /// Digest algorithm (`sha256`).
    pub algo: String,
    /// Lower-case hex digest.
    pub digest: String,
    /// A signed, expiring URL minted when the message is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A policy part: consent, payment, authorization, rate limits and the like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyPart {
    /// The policy kind (open vocabulary; an unknown kind is never success).
    pub kind: PolicyKind,
    /// Machine-readable code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Message to show.
    pub message: String,
    /// Translations keyed by language tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_translations: Option<std::collections::BTreeMap<String, PolicyTranslation>>,
    /// HTTPS URL on the agent's canonical host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Label of the action button.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_label: Option<String>,
    /// For too_many_requests and service_unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// For unauthorized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_challenges: Option<Vec<AuthChallenge>>,
    /// (switchboard) Opaque single-use token minted when the part leaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Further data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<String, Value>>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

open_string_enum! {
    /// The kind of a policy part.
    pub enum PolicyKind {
        /// 428-style consent.
        ConsentRequired = "consent_required",
        /// 401.
        Unauthorized = "unauthorized",
        /// 402.
        PaymentRequired = "payment_required",
        /// 403.
        Forbidden = "forbidden",
        /// 429.
        TooManyRequests = "too_many_requests",
        /// 451.
        UnavailableForLegalReasons = "unavailable_for_legal_reasons",
        /// 503.
        ServiceUnavailable = "service_unavailable",
    }
}

/// A translated policy message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyTranslation {
    /// Title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Message.
    pub message: String,
}

/// An authentication challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuthChallenge {
    /// Scheme, e.g. `Bearer`.
    pub scheme: String,
    /// Parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<std::collections::BTreeMap<String, String>>,
}

/// The verified completion of a policy part.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyResolution {
    /// The policy kind resolved.
    pub kind: PolicyKind,
    /// The `state` token of the part this completes.
    pub in_reply_to_state: String,
    /// When it completed.
    pub completed_at: Timestamp,
    /// Whether switchboard found and consumed the state token.
    pub verified: bool,
    /// Evidence gathered on completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<IdentityEvidence>>,
    /// Further data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<String, Value>>,
}

/// What the reply path can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecipientCapabilities {
    /// How mentions of other recipients are relayed.
    pub mention_relay: MentionRelay,
    /// Set when the turn comes from another agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_chain: Option<AgentChain>,
    /// Media types the reply path carries, best first.
    pub formats: Vec<String>,
    /// Whether attachments can be sent back.
    pub attachments: bool,
    /// Whether the caller holds an open stream.
    pub streaming: bool,
    /// Where the far side truncates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_text_chars: Option<u64>,
}

open_tagged_enum! {
    /// How the inbound platform routes mentions of other recipients in the reply.
    pub enum MentionRelay, tag = "kind" {
        /// The body's @handle routes (Slack, Discord).
        Inline(InlineRelay) = "inline",
        /// Only envelope fields wake a recipient (email).
        RecipientField(RecipientFieldRelay) = "recipient-field",
        /// Both addressing and a body mention are needed (ActivityPub).
        Addressing(AddressingRelay) = "addressing",
        /// No relay; the agent dispatches siblings itself (A2A).
        None(NoRelay) = "none",
    }
}

/// `{ kind: 'inline' }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InlineRelay {}

/// `{ kind: 'none' }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NoRelay {}

/// `{ kind: 'recipient-field', fields: ['to', 'cc'] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecipientFieldRelay {
    /// The envelope fields that wake a recipient.
    pub fields: Vec<String>,
}

/// `{ kind: 'addressing', envelope_fields: ['to', 'cc'], also_inline: true }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddressingRelay {
    /// The addressing fields that must name the recipient.
    pub envelope_fields: Vec<String>,
    /// Whether a body mention is needed as well.
    pub also_inline: bool,
}

/// Position in an agent-to-agent chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentChain {
    /// 1-based hop.
    pub hop: u32,
    /// Maximum hops.
    pub max_hops: u32,
    /// The agent must conclude and invite no other agent.
    pub is_final: bool,
}

impl AgentChain {
    /// The first hop of a chain of at most `max_hops`: the answer to a person.
    #[must_use]
    pub const fn first(max_hops: u32) -> Self {
        Self {
            hop: 1,
            max_hops,
            is_final: max_hops <= 1,
        }
    }
}

/// An agent's answer to one NormalizedMessage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NormalizedResponse {
    /// Switchboard's id for the response.
    pub id: String,
    /// The NormalizedMessage id it answers.
    pub in_reply_to: String,
    /// The thread.
    pub thread_id: String,
    /// The answering agent, `@agent@domain`.
    pub agent: String,
    /// The content; may be empty only when `state` is not `completed`.
    pub parts: Vec<Part>,
    /// Outcome; `completed` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ResponseState>,
    /// Extra addresses to address and wake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentions: Option<Vec<String>>,
    /// ActivityPub visibility; mirrors the inbound note when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Visibility>,
    /// A content warning on the answer (ActivityPub `summary`; email puts it before the
    /// subject). Absent, an ActivityPub reply carries the warning of the message it answers;
    /// an empty string sets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_warning: Option<String>,
    /// The answer's attachments are sensitive: hidden until the reader asks (ActivityPub
    /// `sensitive`; a content warning makes a note sensitive too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The answer that means "say nothing": a response whose only part is this text (surrounding
/// white space aside) is no response — what a chat model, which cannot answer HTTP 204, writes
/// when a turn needs no reply.
pub const NO_REPLY: &str = "NO_REPLY";

impl NormalizedResponse {
    /// Whether this response is the "say nothing" answer ([`NO_REPLY`]).
    #[must_use]
    pub fn says_nothing(&self) -> bool {
        matches!(self.parts.as_slice(), [Part::Text(t)] if t.content.trim() == NO_REPLY)
    }

    /// A fresh response to `msg` carrying `parts`: a new id, `msg`'s thread, its recipient as
    /// the answering agent, and nothing else set.
    #[must_use]
    pub fn reply_to(msg: &NormalizedMessage, parts: Vec<Part>) -> Self {
        Self {
            id: uuid::Uuid::now_v7().to_string(),
            in_reply_to: msg.id.clone(),
            thread_id: msg.thread_id.clone(),
            agent: msg.recipient.clone(),
            parts,
            state: None,
            mentions: None,
            visibility: None,
            content_warning: None,
            sensitive: false,
            metadata: None,
            extra: Extra::new(),
        }
    }

    /// The effective state (`completed` when absent).
    #[must_use]
    pub fn effective_state(&self) -> ResponseState {
        self.state.clone().unwrap_or(ResponseState::Completed)
    }
}

open_string_enum! {
    /// How an agent's turn ended.
    pub enum ResponseState {
        /// Done.
        Completed = "completed",
        /// The agent needs more input.
        InputRequired = "input_required",
        /// The agent needs authorization.
        AuthRequired = "auth_required",
        /// The agent declined.
        Rejected = "rejected",
        /// The agent failed.
        Failed = "failed",
    }
}

/// ActivityPub visibility of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Public.
    Public,
    /// Unlisted.
    Unlisted,
    /// Followers only.
    Followers,
    /// Direct.
    Direct,
}

open_tagged_enum! {
    /// One event of a streamed response.
    pub enum ResponseEvent, tag = "type" {
        /// Text appended to the current text part.
        Delta(DeltaEvent) = "delta",
        /// A complete part.
        Part(PartEvent) = "part",
        /// The final response.
        Done(DoneEvent) = "done",
    }
}

/// `{ type: 'delta', text }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeltaEvent {
    /// The appended text.
    pub text: String,
}

/// `{ type: 'part', part }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PartEvent {
    /// The part.
    pub part: Part,
}

/// `{ type: 'done', response }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DoneEvent {
    /// The final response (switchboard fills `id`, `in_reply_to`, `thread_id`, `agent` when absent).
    #[schemars(with = "NormalizedResponse")]
    pub response: Value,
}
