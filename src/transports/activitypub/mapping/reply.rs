//! The reverse of the note path: a `NormalizedResponse` rendered as a reply `Note` (in a
//! `Create`), with Mastodon-compatible addressing, mention markup and tags. Pure, like the rest
//! of [`super`].

use serde_json::{Value, json};

use super::super::wire::{self, Loose, Object, OneOrMany, Tag};
use super::{PUBLIC, ThreadFields, context, html, str_of};
use crate::message::{Part, TextMime, Visibility};

/// A recipient of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    /// Actor IRI.
    pub iri: String,
    /// `@user@host`.
    pub address: String,
    /// Profile URL for the mention link (the IRI when unknown).
    pub url: String,
}

/// Everything a reply note is built from.
#[derive(Debug, Clone)]
pub struct ReplyPlan<'a> {
    /// The note's IRI.
    pub note_id: &'a str,
    /// The agent's actor IRI.
    pub actor: &'a str,
    /// The agent's followers collection.
    pub followers: &'a str,
    /// The note replied to.
    pub in_reply_to: Option<&'a str>,
    /// The reply's `context` and `conversation` ([`super::reply_thread`]); a missing conversation is
    /// the context.
    pub thread: ThreadFields<'a>,
    /// Visibility.
    pub visibility: Visibility,
    /// Addressed and mentioned recipients.
    pub recipients: &'a [Recipient],
    /// The response's parts (file parts must carry a fetchable URL already).
    pub parts: &'a [Part],
    /// ISO 8601 publication time.
    pub published: &'a str,
    /// The content warning (`summary`), if any: it makes the note sensitive too.
    pub content_warning: Option<&'a str>,
    /// The attachments are sensitive.
    pub sensitive: bool,
}

/// The content warning of a reply: the one the response sets (an empty one: none), else that
/// of the message it answers, as Mastodon's clients carry a warning on into replies.
#[must_use]
pub fn reply_warning<'a>(set: Option<&'a str>, answered: Option<&'a str>) -> Option<&'a str> {
    set.or(answered).map(str::trim).filter(|cw| !cw.is_empty())
}

/// `(to, cc)` by visibility, as Mastodon emits them.
#[must_use]
pub fn addressing(
    visibility: &Visibility,
    followers: &str,
    mentioned: &[String],
) -> (Vec<String>, Vec<String>) {
    let m = mentioned.iter().cloned();
    match visibility {
        Visibility::Public => (
            vec![PUBLIC.into()],
            std::iter::once(followers.into()).chain(m).collect(),
        ),
        Visibility::Unlisted => (
            vec![followers.into()],
            std::iter::once(PUBLIC.into()).chain(m).collect(),
        ),
        Visibility::Followers => (vec![followers.into()], m.collect()),
        _ => (m.collect(), Vec::new()),
    }
}

/// The reply's HTML: mention markup for recipients the text does not already mention, then the
/// text parts (plain text escaped and linked, markdown rendered, both HTML kinds sanitised),
/// then links.
#[must_use]
pub fn reply_html(recipients: &[Recipient], parts: &[Part]) -> String {
    let mut body = String::new();
    let mut texts = String::new();
    for p in parts {
        match p {
            Part::Text(t) => {
                texts.push_str(&t.content);
                texts.push('\n');
                match t.mime {
                    TextMime::Html => body.push_str(&html::sanitize(&t.content)),
                    TextMime::Markdown => {
                        body.push_str(&html::sanitize(&crate::markdown::to_html(&t.content)));
                    }
                    _ => body.push_str(&html::text_to_html(&t.content)),
                }
            }
            Part::Link(l)
                if url::Url::parse(&l.url)
                    .is_ok_and(|u| matches!(u.scheme(), "http" | "https")) =>
            {
                let title = l.title.as_deref().unwrap_or(&l.url);
                body.push_str(&format!(
                    "<p><a href=\"{}\" rel=\"nofollow noopener noreferrer\" target=\"_blank\">{}</a></p>",
                    html::escape(&l.url),
                    html::escape(title)
                ));
            }
            _ => {}
        }
    }
    let prefix: Vec<String> = prefixed(recipients, &texts)
        .map(|r| {
            let user = r
                .address
                .trim_start_matches('@')
                .split('@')
                .next()
                .unwrap_or_default();
            html::mention_html(&r.url, user)
        })
        .collect();
    if prefix.is_empty() {
        return body;
    }
    let prefix = prefix.join(" ");
    match body.strip_prefix("<p>") {
        Some(rest) => format!("<p>{prefix} {rest}"),
        None => format!("<p>{prefix}</p>{body}"),
    }
}

/// The recipients [`reply_html`] mentions ahead of the text: those `texts` does not mention.
fn prefixed<'a>(
    recipients: &'a [Recipient],
    texts: &'a str,
) -> impl Iterator<Item = &'a Recipient> {
    recipients.iter().filter(|r| !texts.contains(&r.address))
}

/// Characters the mention prefix of [`reply_html`] takes in a note with `parts`, counted as the
/// full `@user@host` and a space each (more than the link text shows: a safe upper bound).
#[must_use]
pub fn mention_prefix_chars(recipients: &[Recipient], parts: &[Part]) -> usize {
    let texts: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.content.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    prefixed(recipients, &texts)
        .map(|r| r.address.chars().count() + 1)
        .sum()
}

/// The reply note (without `@context`): `id`, `type`, `attributedTo`, `content`, `published`,
/// `to`, `cc` (arrays, empty ones too), `tag` (a `Mention` per recipient), `url`, `sensitive`
/// (true under a content warning or for sensitive attachments), then `summary` (the content
/// warning), `inReplyTo`, `context`, `conversation` and `attachment` when there are any.
#[must_use]
pub fn reply_object(plan: &ReplyPlan<'_>, attachments: Vec<wire::Attachment>) -> Object {
    let mentioned: Vec<String> = plan.recipients.iter().map(|r| r.iri.clone()).collect();
    let (to, cc) = addressing(&plan.visibility, plan.followers, &mentioned);
    let list = |iris: Vec<String>| {
        Loose::Typed(OneOrMany::Many(
            iris.into_iter().map(wire::Reference::Iri).collect(),
        ))
    };
    let tags = plan
        .recipients
        .iter()
        .map(|r| Loose::Typed(Tag::mention(&r.iri, &r.address)))
        .collect();
    Object {
        id: plan.note_id.into(),
        kind: "Note".into(),
        attributed_to: OneOrMany::One(plan.actor.into()).into(),
        content: reply_html(plan.recipients, plan.parts).into(),
        published: plan.published.into(),
        addressing: wire::Addressing {
            to: list(to),
            cc: list(cc),
            ..wire::Addressing::default()
        },
        tag: OneOrMany::Many(tags).into(),
        url: OneOrMany::One(plan.note_id.into()).into(),
        sensitive: (plan.sensitive || plan.content_warning.is_some()).into(),
        summary: plan.content_warning.map(str::to_owned).into(),
        in_reply_to: plan.in_reply_to.map(wire::Reference::from).into(),
        context: plan.thread.context.map(wire::Reference::from).into(),
        conversation: plan
            .thread
            .conversation
            .or(plan.thread.context)
            .map(str::to_owned)
            .into(),
        attachment: (!attachments.is_empty())
            .then(|| OneOrMany::Many(attachments.into_iter().map(Loose::Typed).collect()))
            .into(),
        ..Object::default()
    }
}

/// [`reply_object`] as JSON.
#[must_use]
pub fn reply_note(plan: &ReplyPlan<'_>, attachments: Vec<wire::Attachment>) -> Value {
    // Strings, booleans and lists of them: writing it as JSON cannot fail.
    json!(reply_object(plan, attachments))
}

/// Wraps a note in its `Create`, with the note's addressing and our `@context`.
#[must_use]
pub fn create_of(note: &Value) -> Value {
    let id = format!("{}/activity", str_of(note, "id").unwrap_or_default());
    json!({
        "@context": context(),
        "id": id,
        "type": "Create",
        "actor": note.get("attributedTo"),
        "published": note.get("published"),
        "to": note.get("to"),
        "cc": note.get("cc"),
        "object": note,
    })
}
