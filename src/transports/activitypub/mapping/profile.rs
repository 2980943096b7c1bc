//! An agent's fediverse profile as Mastodon publishes one: profile fields as `PropertyValue`
//! attachments whose links are rendered the way Mastodon renders them, `icon` and `image`,
//! the `featured` collection of pinned notes, the actor type (`Service` for a bot, else
//! `Person`), `discoverable` and `indexable`, and the digest that tells a changed profile from
//! the one last announced. Pure: the images are already read and named.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::super::html::escape;
use super::PUBLIC;
use crate::config::ProfileField;

/// Mastodon shows this many characters of a link's text; the rest is hidden (and the visible
/// part gets the `ellipsis` class).
const LINK_VISIBLE_CHARS: usize = 30;

/// A profile image as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileImage {
    /// Where it is served (ours, with its content hash in the path) or the operator's URL.
    pub url: String,
    /// Its media type, when known.
    pub media_type: Option<String>,
}

/// What an agent's actor publishes about itself beyond its name and keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDoc<'a> {
    /// `Service` when true, `Person` when false.
    pub bot: bool,
    /// Mastodon's `discoverable`.
    pub discoverable: bool,
    /// Mastodon's `indexable`.
    pub indexable: bool,
    /// `icon`.
    pub avatar: Option<&'a ProfileImage>,
    /// `image`.
    pub header: Option<&'a ProfileImage>,
    /// `attachment`.
    pub fields: &'a [ProfileField],
    /// The pinned texts, in order.
    pub pinned: &'a [String],
    /// `alsoKnownAs`: the agent's other accounts, as actor IRIs.
    pub also_known_as: &'a [String],
    /// `movedTo`: the account the agent moved to.
    pub moved_to: Option<&'a str>,
}

/// The actor type of an agent: `Service` (a bot, Mastodon's bot badge) or `Person`.
#[must_use]
pub const fn actor_type(bot: bool) -> &'static str {
    if bot { "Service" } else { "Person" }
}

/// The JSON-LD terms the profile properties need beyond ActivityStreams: Mastodon's `toot:`
/// namespace (`discoverable`, `indexable`, `featured`) and schema.org's `PropertyValue`.
#[must_use]
pub fn context_terms() -> Value {
    json!({
        "toot": "http://joinmastodon.org/ns#",
        "discoverable": "toot:discoverable",
        "indexable": "toot:indexable",
        "featured": {"@id": "toot:featured", "@type": "@id"},
        "schema": "http://schema.org#",
        "PropertyValue": "schema:PropertyValue",
        "value": "schema:value",
        "alsoKnownAs": {"@id": "as:alsoKnownAs", "@type": "@id"},
        "movedTo": {"@id": "as:movedTo", "@type": "@id"},
    })
}

/// A link as Mastodon renders one in a profile field: the scheme (and `www.`) hidden, the
/// first 30 characters shown, the rest hidden behind an ellipsis; `rel="me"` only when the
/// field asks for it.
#[must_use]
pub fn field_link(url: &str, rel_me: bool) -> String {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or(url);
    let rest = rest.strip_prefix("www.").unwrap_or(rest);
    let prefix = &url[..url.len() - rest.len()];
    let cut = rest
        .char_indices()
        .nth(LINK_VISIBLE_CHARS)
        .map_or(rest.len(), |(i, _)| i);
    let (shown, hidden) = rest.split_at(cut);
    let rel = if rel_me {
        "me nofollow noopener noreferrer"
    } else {
        "nofollow noopener noreferrer"
    };
    format!(
        "<a href=\"{href}\" rel=\"{rel}\" target=\"_blank\" translate=\"no\">\
         <span class=\"invisible\">{prefix}</span>\
         <span class=\"{class}\">{shown}</span>\
         <span class=\"invisible\">{hidden}</span></a>",
        href = escape(url),
        prefix = escape(prefix),
        class = if hidden.is_empty() { "" } else { "ellipsis" },
        shown = escape(shown),
        hidden = escape(hidden),
    )
}

/// A profile field's value as HTML: text escaped, every `http(s)` URL in it a link
/// ([`field_link`]).
#[must_use]
pub fn field_html(value: &str, rel_me: bool) -> String {
    super::super::html::linkify_with(value.trim(), |url| field_link(url, rel_me))
}

/// The `attachment` of an actor with these fields: one `PropertyValue` each, in order.
#[must_use]
pub fn attachment(fields: &[ProfileField]) -> Vec<Value> {
    fields
        .iter()
        .map(|f| {
            json!({
                "type": "PropertyValue",
                "name": f.name,
                "value": field_html(&f.value, f.rel_me),
            })
        })
        .collect()
}

fn image(i: &ProfileImage) -> Value {
    let mut v = json!({"type": "Image", "url": i.url});
    if let (Some(m), Some(o)) = (&i.media_type, v.as_object_mut()) {
        o.insert("mediaType".into(), json!(m));
    }
    v
}

/// The collection of an actor's pinned notes, at `{actor}/featured`.
#[must_use]
pub fn featured_url(actor: &str) -> String {
    format!("{actor}/featured")
}

/// The id of a pinned note: under the actor, named by the hash of its text, so it stays the
/// same while the text does.
#[must_use]
pub fn pinned_id(actor: &str, text: &str) -> String {
    format!("{actor}/pinned/{}", pinned_key(text))
}

/// The last path segment of a pinned note's id.
#[must_use]
pub fn pinned_key(text: &str) -> String {
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    digest[..16].to_owned()
}

/// A pinned note: public, the agent's, its text as HTML.
#[must_use]
pub fn pinned_note(actor: &str, text: &str) -> Value {
    let id = pinned_id(actor, text);
    json!({
        "id": id,
        "type": "Note",
        "attributedTo": actor,
        "content": super::super::html::text_to_html(text),
        "to": [PUBLIC],
        "cc": [format!("{actor}/followers")],
        "url": id,
    })
}

/// The `featured` collection: the pinned notes, embedded, in order (as Mastodon serves it).
#[must_use]
pub fn featured(actor: &str, pinned: &[String]) -> Value {
    let items: Vec<Value> = pinned.iter().map(|t| pinned_note(actor, t)).collect();
    json!({
        "id": featured_url(actor),
        "type": "OrderedCollection",
        "totalItems": items.len(),
        "orderedItems": items,
    })
}

impl ProfileDoc<'_> {
    /// The actor properties the profile sets (`type`, `icon`, `image`, `attachment`,
    /// `featured`, `discoverable`, `indexable`), for the actor document at `actor`.
    #[must_use]
    pub fn properties(&self, actor: &str) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("type".into(), json!(actor_type(self.bot)));
        if let Some(a) = self.avatar {
            m.insert("icon".into(), image(a));
        }
        if let Some(h) = self.header {
            m.insert("image".into(), image(h));
        }
        m.insert("attachment".into(), json!(attachment(self.fields)));
        m.insert("featured".into(), json!(featured_url(actor)));
        m.insert("discoverable".into(), json!(self.discoverable));
        m.insert("indexable".into(), json!(self.indexable));
        if !self.also_known_as.is_empty() {
            m.insert("alsoKnownAs".into(), json!(self.also_known_as));
        }
        if let Some(to) = self.moved_to {
            m.insert("movedTo".into(), json!(to));
        }
        m
    }

    /// The digest of what the profile publishes, with the name and summary beside it: equal
    /// digests, nothing to announce. The pinned texts count too (their notes are embedded in
    /// `featured`).
    #[must_use]
    pub fn digest(&self, actor: &str, name: &str, summary: &str) -> String {
        let doc = json!({
            "properties": self.properties(actor),
            "name": name,
            "summary": summary,
            "pinned": self.pinned,
        });
        hex::encode(Sha256::digest(doc.to_string().as_bytes()))
    }
}

/// The media type an image URL's file extension names, when it names one.
#[must_use]
pub fn media_type_of_url(url: &str) -> Option<&'static str> {
    let path = url::Url::parse(url).ok()?.path().to_ascii_lowercase();
    let ext = path.rsplit_once('.')?.1.to_owned();
    extension_type(&ext)
}

/// The media type of a file extension (`png`, `jpg`, …) of a profile image.
#[must_use]
pub fn extension_type(ext: &str) -> Option<&'static str> {
    Some(match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        _ => return None,
    })
}

/// The file extension of a profile image's media type.
#[must_use]
pub fn image_extension(media_type: &str) -> &'static str {
    match media_type {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/avif" => "avif",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, value: &str, rel_me: bool) -> ProfileField {
        ProfileField {
            name: name.into(),
            value: value.into(),
            rel_me,
        }
    }

    #[test]
    fn links_render_as_mastodon_renders_them() {
        assert_eq!(
            field_link("https://example.com", false),
            "<a href=\"https://example.com\" rel=\"nofollow noopener noreferrer\" target=\"_blank\" translate=\"no\">\
             <span class=\"invisible\">https://</span><span class=\"\">example.com</span>\
             <span class=\"invisible\"></span></a>"
        );
        // rel="me" only where asked; `www.` hidden with the scheme.
        let me = field_link("http://www.example.org/me", true);
        assert!(
            me.contains("rel=\"me nofollow noopener noreferrer\""),
            "{me}"
        );
        assert!(
            me.contains(
                "<span class=\"invisible\">http://www.</span><span class=\"\">example.org/me</span>"
            ),
            "{me}"
        );
    }

    #[test]
    fn long_links_show_thirty_characters_and_an_ellipsis() {
        let url = "https://example.com/a/very/long/path/that/goes/on";
        let html = field_link(url, false);
        assert!(
            html.contains("<span class=\"ellipsis\">example.com/a/very/long/path/t</span>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"invisible\">hat/goes/on</span></a>"),
            "{html}"
        );
    }

    #[test]
    fn field_values_are_escaped_text_with_links() {
        assert_eq!(
            field_html("<b>AI</b> & co", true),
            "&lt;b&gt;AI&lt;/b&gt; &amp; co"
        );
        let html = field_html("docs at https://example.com/x?a=1&b=2 ok", true);
        assert!(
            html.starts_with("docs at <a href=\"https://example.com/x?a=1&amp;b=2\" rel=\"me "),
            "{html}"
        );
        assert!(html.ends_with("</a> ok"), "{html}");
        // Not a link: another scheme, or no URL at all.
        assert_eq!(field_html("ftp://example.com", true), "ftp://example.com");
    }

    #[test]
    fn attachments_are_property_values_in_order() {
        let a = attachment(&[
            field("Website", "https://example.com", true),
            field("Model", "echo", false),
        ]);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0]["type"], "PropertyValue");
        assert_eq!(a[0]["name"], "Website");
        assert!(
            a[0]["value"]
                .as_str()
                .unwrap()
                .contains("rel=\"me nofollow")
        );
        assert_eq!(
            a[1],
            json!({"type": "PropertyValue", "name": "Model", "value": "echo"})
        );
    }

    #[test]
    fn the_profile_sets_type_images_featured_and_switches() {
        let avatar = ProfileImage {
            url: "https://sb.example/agents/a/images/ab.png".into(),
            media_type: Some("image/png".into()),
        };
        let header = ProfileImage {
            url: "https://cdn.example/h".into(),
            media_type: None,
        };
        let pinned = vec!["Hello".to_owned()];
        let doc = ProfileDoc {
            bot: false,
            discoverable: false,
            indexable: true,
            avatar: Some(&avatar),
            header: Some(&header),
            fields: &[],
            pinned: &pinned,
            also_known_as: &[],
            moved_to: None,
        };
        let actor = "https://sb.example/agents/a";
        let p = doc.properties(actor);
        assert_eq!(p["type"], "Person");
        assert_eq!(
            p["icon"],
            json!({"type": "Image", "mediaType": "image/png", "url": avatar.url})
        );
        assert_eq!(
            p["image"],
            json!({"type": "Image", "url": "https://cdn.example/h"})
        );
        assert_eq!(p["featured"], "https://sb.example/agents/a/featured");
        assert_eq!(
            (p["discoverable"].clone(), p["indexable"].clone()),
            (json!(false), json!(true))
        );
        let bot = ProfileDoc {
            bot: true,
            ..doc.clone()
        };
        assert_eq!(bot.properties(actor)["type"], "Service");
        // Anything published changes the digest; the same profile gives the same digest.
        let d = doc.digest(actor, "A", "");
        assert_eq!(d, doc.clone().digest(actor, "A", ""));
        assert_ne!(d, bot.digest(actor, "A", ""));
        assert_ne!(d, doc.digest(actor, "B", ""));
        let other = vec!["Bye".to_owned()];
        assert_ne!(
            d,
            ProfileDoc {
                pinned: &other,
                ..doc.clone()
            }
            .digest(actor, "A", "")
        );
        // Neither alias nor move is published until there is one; each changes the digest.
        assert!(p.get("alsoKnownAs").is_none() && p.get("movedTo").is_none());
        let aliases = vec!["https://old.example/users/a".to_owned()];
        let moved = ProfileDoc {
            also_known_as: &aliases,
            moved_to: Some("https://new.example/users/a"),
            ..doc.clone()
        };
        let m = moved.properties(actor);
        assert_eq!(m["alsoKnownAs"], json!(aliases));
        assert_eq!(m["movedTo"], "https://new.example/users/a");
        assert_ne!(d, moved.digest(actor, "A", ""));
    }

    #[test]
    fn featured_embeds_public_pinned_notes_with_stable_ids() {
        let actor = "https://sb.example/agents/a";
        let f = featured(actor, &["One".into(), "Two https://example.com".into()]);
        assert_eq!(f["type"], "OrderedCollection");
        assert_eq!(f["totalItems"], 2);
        let first = &f["orderedItems"][0];
        assert_eq!(first["id"], pinned_id(actor, "One"));
        assert_eq!(first["attributedTo"], actor);
        assert_eq!(first["to"], json!([PUBLIC]));
        assert_eq!(first["content"], "<p>One</p>");
        assert!(
            f["orderedItems"][1]["content"]
                .as_str()
                .unwrap()
                .contains("<a href=\"https://example.com\"")
        );
        assert_eq!(pinned_key("One").len(), 16);
        assert_ne!(pinned_key("One"), pinned_key("Two"));
    }

    #[test]
    fn image_urls_name_their_type_by_extension() {
        assert_eq!(
            media_type_of_url("https://cdn.example/a/Face.JPG?x=1"),
            Some("image/jpeg")
        );
        assert_eq!(media_type_of_url("https://cdn.example/avatar"), None);
        assert_eq!(image_extension("image/webp"), "webp");
    }
}
