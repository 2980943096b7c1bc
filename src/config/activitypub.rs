//! `[activitypub]`: the fediverse transport's limits, time budgets, delivery breaker and the
//! reply length each kind of remote server takes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The ActivityPub transport (`/agents/{name}`, inboxes, WebFinger, NodeInfo).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActivityPubConfig {
    /// Serve the fediverse endpoints and deliver replies.
    pub enabled: bool,
    /// Largest inbox body accepted (413 above).
    pub max_body_bytes: usize,
    /// Deepest JSON nesting accepted in an activity (400 above).
    pub max_json_depth: usize,
    /// Time budget of one inbox request, key fetches included (503 when exceeded).
    pub processing_timeout_ms: u64,
    /// Timeout of one outbound fetch or delivery.
    pub fetch_timeout_ms: u64,
    /// How long fetched actors and keys are trusted before a refetch.
    pub actor_cache_seconds: u64,
    /// Unknown parents fetched to find a thread's root.
    pub max_parent_fetches: usize,
    /// Attachments of one note downloaded into the blob store.
    pub max_attachments: usize,
    /// Concurrent deliveries to one host.
    pub host_concurrency: usize,
    /// Days of failures after which a host's deliveries stop (a success resets it).
    pub breaker_days: u64,
    /// Characters of one reply note by the remote server's software: longer replies go out as a
    /// thread of notes (also told to agents as `recipient_capabilities.max_text_chars`).
    pub max_reply_chars: MaxReplyChars,
}

impl Default for ActivityPubConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_body_bytes: 256 * 1024,
            max_json_depth: 32,
            processing_timeout_ms: 10_000,
            fetch_timeout_ms: 10_000,
            actor_cache_seconds: 86_400,
            max_parent_fetches: 3,
            max_attachments: 4,
            host_concurrency: 4,
            breaker_days: 7,
            max_reply_chars: MaxReplyChars::default(),
        }
    }
}

impl ActivityPubConfig {
    /// Limits that would refuse everything are refused.
    pub(super) fn check(&self, problems: &mut Vec<String>) {
        if self.max_body_bytes == 0 || self.max_json_depth == 0 || self.host_concurrency == 0 {
            problems.push(
                "activitypub: max_body_bytes, max_json_depth and host_concurrency must be > 0"
                    .into(),
            );
        }
        self.max_reply_chars.check(problems);
    }
}

/// The smallest per-note limit accepted: room for a mention, a few words and a ` (k/n)` marker.
pub const MIN_REPLY_CHARS: u64 = 50;

/// `activitypub.max_reply_chars`: characters of one reply note by the software a remote server
/// runs (NodeInfo `software.name`, compared in lower case), and `default` for a server whose
/// software is unknown or not listed. 0 is no limit: such replies go out as one note.
///
/// In the file it is a table (`default = 0`, `mastodon = 500`, …) whose entries override the
/// built-in ones; a bare number is the `default` with the built-in entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxReplyChars {
    /// The limit for software unknown or not listed (0: none).
    pub default: u64,
    /// Limits by software name, lower case.
    pub software: BTreeMap<String, u64>,
}

/// What servers accept by default in one post, by NodeInfo software name.
const BUILT_IN: &[(&str, u64)] = &[
    ("akkoma", 5000),
    ("firefish", 3000),
    ("gotosocial", 5000),
    ("hometown", 500),
    ("iceshrimp", 3000),
    ("mastodon", 500),
    ("misskey", 3000),
    ("pixelfed", 500),
    ("pleroma", 5000),
    ("sharkey", 3000),
];

impl Default for MaxReplyChars {
    fn default() -> Self {
        Self {
            default: 0,
            software: BUILT_IN
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
        }
    }
}

impl MaxReplyChars {
    /// The limit for servers running `software` (`None`: unknown), 0 when there is none.
    #[must_use]
    pub fn for_software(&self, software: Option<&str>) -> u64 {
        software
            .and_then(|s| self.software.get(&s.to_ascii_lowercase()))
            .copied()
            .unwrap_or(self.default)
    }

    fn check(&self, problems: &mut Vec<String>) {
        let bad: Vec<&str> = std::iter::once(("default", &self.default))
            .chain(self.software.iter().map(|(k, v)| (k.as_str(), v)))
            .filter(|(_, v)| **v != 0 && **v < MIN_REPLY_CHARS)
            .map(|(k, _)| k)
            .collect();
        if !bad.is_empty() {
            problems.push(format!(
                "activitypub.max_reply_chars: {} must be 0 (no limit) or at least {MIN_REPLY_CHARS}",
                bad.join(", ")
            ));
        }
    }
}

impl Serialize for MaxReplyChars {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut all: BTreeMap<&str, u64> = self
            .software
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        all.insert("default", self.default);
        all.serialize(s)
    }
}

impl<'de> Deserialize<'de> for MaxReplyChars {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Default(u64),
            Table(BTreeMap<String, u64>),
        }
        let mut out = Self::default();
        match Raw::deserialize(d)? {
            Raw::Default(n) => out.default = n,
            Raw::Table(t) => {
                // Names in lower case first: the built-in entries merged into the file's table
                // are, so a `Mastodon = …` of the operator's is applied after them.
                let (lower, other): (Vec<_>, Vec<_>) = t
                    .into_iter()
                    .partition(|(k, _)| *k == k.to_ascii_lowercase());
                for (k, v) in lower.into_iter().chain(other) {
                    if k == "default" {
                        out.default = v;
                    } else {
                        out.software.insert(k.to_ascii_lowercase(), v);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Most profile fields of one agent: what Mastodon shows by default.
pub const MAX_PROFILE_FIELDS: usize = 4;
/// Most characters of a profile field's name, and of its value (Mastodon's limits).
pub const MAX_FIELD_CHARS: usize = 255;
/// Most pinned posts of one agent (Mastodon lets an account pin five).
pub const MAX_PINNED: usize = 5;
/// Most characters of one pinned post (Mastodon's default post length).
pub const MAX_PINNED_CHARS: usize = 500;

/// `[agents.activitypub]`: the agent's fediverse profile. Every change is announced to its
/// followers with an `Update` of the actor when the server starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentActivityPubConfig {
    /// The profile picture: a file (read at start, served from the blob store) or an `https`
    /// URL (published as it is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avatar: Option<String>,
    /// The banner image, as `avatar`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Profile fields (name and value), in order; links in values are rendered as Mastodon
    /// renders them.
    pub fields: Vec<ProfileField>,
    /// Texts shown pinned on the profile (the actor's `featured` collection), in order.
    pub pinned: Vec<String>,
    /// An automated account: actor type `Service` (Mastodon's bot badge); `false` publishes a
    /// `Person`.
    pub bot: bool,
    /// May be listed in directories and suggested to others (Mastodon's `discoverable`).
    pub discoverable: bool,
    /// Its public posts may be indexed for full-text search (Mastodon's `indexable`).
    pub indexable: bool,
    /// The agent's other accounts, as actor IRIs (`https://…`) or handles (`@user@host`): the
    /// actor lists them in `alsoKnownAs`, so that followers of one of them that moves here
    /// (`Move`) are let through by their servers.
    pub also_known_as: Vec<String>,
    /// Who may quote the agent's public notes (FEP-044f, Mastodon's quote posts): `anyone`
    /// (the default, as on Mastodon), `followers` or `nobody`. Its notes publish it as their
    /// `interactionPolicy`, and quote requests are answered by it.
    pub quote_policy: QuotePolicy,
}

/// Who may quote an agent's notes (`quote_policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotePolicy {
    /// Anyone, for public and unlisted notes.
    #[default]
    Anyone,
    /// The agent's followers.
    Followers,
    /// No one.
    Nobody,
}

impl Default for AgentActivityPubConfig {
    fn default() -> Self {
        Self {
            avatar: None,
            header: None,
            fields: Vec::new(),
            pinned: Vec::new(),
            bot: true,
            discoverable: true,
            indexable: false,
            also_known_as: Vec::new(),
            quote_policy: QuotePolicy::default(),
        }
    }
}

/// One profile field (`fields = [{ name, value, rel_me }]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileField {
    /// The label.
    pub name: String,
    /// The value: text, or an `http(s)` URL, which becomes a link.
    pub value: String,
    /// The link carries `rel="me"` (a site that links back verifies the field, as on
    /// Mastodon).
    #[serde(default)]
    pub rel_me: bool,
}

/// Where a profile image comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource<'a> {
    /// A file, read at start.
    File(&'a str),
    /// An `https` URL, published as it is.
    Url(&'a str),
}

impl<'a> ImageSource<'a> {
    /// Reads a configured value: a URL (`scheme://…`) must be `https`; anything else is a path.
    ///
    /// # Errors
    /// Why the value is refused.
    pub fn parse(value: &'a str) -> Result<Self, String> {
        if value.trim().is_empty() {
            return Err("empty".into());
        }
        if !value.contains("://") {
            return Ok(Self::File(value));
        }
        match url::Url::parse(value) {
            Ok(u) if u.scheme() == "https" && u.host().is_some() => Ok(Self::Url(value)),
            Ok(_) => Err("not an https URL".into()),
            Err(e) => Err(format!("not a URL: {e}")),
        }
    }
}

impl AgentActivityPubConfig {
    /// The images by key (`avatar`, `header`), those that are set.
    #[must_use]
    pub fn images(&self) -> Vec<(&'static str, &str)> {
        [("avatar", &self.avatar), ("header", &self.header)]
            .into_iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
            .collect()
    }

    /// Images are files or `https` URLs; at most [`MAX_PROFILE_FIELDS`] fields, each named,
    /// with a value, neither over [`MAX_FIELD_CHARS`]; at most [`MAX_PINNED`] pinned texts,
    /// none empty or over [`MAX_PINNED_CHARS`]; at most [`MAX_ALIASES`] other accounts, each
    /// an `http(s)` actor IRI or a `@user@host` handle. `at` is the agent's path (`agents[0]`).
    pub(super) fn check(&self, at: &str, problems: &mut Vec<String>) {
        let at = format!("{at}.activitypub");
        for (key, value) in self.images() {
            if let Err(why) = ImageSource::parse(value) {
                problems.push(format!("{at}.{key} {value:?}: {why}"));
            }
        }
        check_count(
            &format!("{at}.fields"),
            self.fields.len(),
            "fields",
            MAX_PROFILE_FIELDS,
            problems,
        );
        for (i, f) in self.fields.iter().enumerate() {
            for (key, text) in [("name", &f.name), ("value", &f.value)] {
                check_text(
                    &format!("{at}.fields[{i}].{key}"),
                    text,
                    MAX_FIELD_CHARS,
                    problems,
                );
            }
        }
        check_count(
            &format!("{at}.pinned"),
            self.pinned.len(),
            "posts",
            MAX_PINNED,
            problems,
        );
        for (i, text) in self.pinned.iter().enumerate() {
            check_text(
                &format!("{at}.pinned[{i}]"),
                text,
                MAX_PINNED_CHARS,
                problems,
            );
        }
        check_count(
            &format!("{at}.also_known_as"),
            self.also_known_as.len(),
            "accounts",
            MAX_ALIASES,
            problems,
        );
        for (i, alias) in self.also_known_as.iter().enumerate() {
            if let Err(why) = AccountRef::parse(alias) {
                problems.push(format!("{at}.also_known_as[{i}] {alias:?}: {why}"));
            }
        }
    }
}

/// Most other accounts an agent lists in `also_known_as` (Mastodon lets an account name
/// that many aliases).
pub const MAX_ALIASES: usize = 10;

/// Another fediverse account, as the operator names it: an actor IRI or a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountRef<'a> {
    /// An `http(s)` actor IRI.
    Iri(&'a str),
    /// `@user@host` (the leading `@` optional): the user and the host.
    Handle(&'a str, &'a str),
}

impl<'a> AccountRef<'a> {
    /// Reads `value` as an actor IRI or a handle.
    ///
    /// # Errors
    /// What is wrong with it, for a problem line.
    pub fn parse(value: &'a str) -> Result<Self, String> {
        if value.starts_with("https://") || value.starts_with("http://") {
            return url::Url::parse(value)
                .ok()
                .filter(|u| u.host_str().is_some())
                .map(|_| Self::Iri(value))
                .ok_or_else(|| "not a valid URL".to_owned());
        }
        let (user, host) = value
            .strip_prefix('@')
            .unwrap_or(value)
            .split_once('@')
            .ok_or("must be an actor URL (https://…) or a handle (@user@host)")?;
        let valid_host = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
        if user.is_empty() || user.contains(['@', '/', ' ']) || !valid_host {
            return Err("must be an actor URL (https://…) or a handle (@user@host)".to_owned());
        }
        Ok(Self::Handle(user, host))
    }
}

/// A list of the profile (`path`) holds at most `max` `what`.
fn check_count(path: &str, n: usize, what: &str, max: usize, problems: &mut Vec<String>) {
    if n > max {
        problems.push(format!("{path}: {n} {what}, at most {max}"));
    }
}

/// A text of the profile (`path`) is not blank and has at most `max` characters.
fn check_text(path: &str, text: &str, max: usize, problems: &mut Vec<String>) {
    let n = text.chars().count();
    if text.trim().is_empty() {
        problems.push(format!("{path}: must not be empty"));
    } else if n > max {
        problems.push(format!("{path}: {n} characters, at most {max}"));
    }
}

/// The media type of an image, from its first bytes: PNG, JPEG, GIF, WebP or AVIF (what
/// Mastodon accepts for avatars and headers), else `None`.
#[must_use]
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.len() >= 12
        && &bytes[4..8] == b"ftyp"
        && matches!(&bytes[8..12], b"avif" | b"avis")
    {
        Some("image/avif")
    } else {
        None
    }
}

/// Reads a profile image file: at most `max_bytes`, and an image [`image_type`] recognises.
///
/// # Errors
/// Why the file cannot be used.
pub fn read_image_file(path: &str, max_bytes: usize) -> Result<(Vec<u8>, &'static str), String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    if meta.len() > u64::try_from(max_bytes).unwrap_or(u64::MAX) {
        return Err(format!(
            "{} bytes, over media.max_bytes ({max_bytes})",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let mime = image_type(&bytes).ok_or("not a PNG, JPEG, GIF, WebP or AVIF image")?;
    Ok((bytes, mime))
}

#[cfg(test)]
mod profile_tests {
    use super::*;

    #[test]
    fn images_are_recognised_by_their_bytes() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(image_type(&[0xff, 0xd8, 0xff, 0xe0]), Some("image/jpeg"));
        assert_eq!(image_type(b"GIF89a.."), Some("image/gif"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"\0\0\0\x1cftypavif"), Some("image/avif"));
        assert_eq!(image_type(b"<svg xmlns="), None);
    }

    #[test]
    fn image_values_are_files_or_https_urls() {
        assert_eq!(
            ImageSource::parse("/srv/a.png"),
            Ok(ImageSource::File("/srv/a.png"))
        );
        assert_eq!(
            ImageSource::parse("https://cdn.example/a.png"),
            Ok(ImageSource::Url("https://cdn.example/a.png"))
        );
        assert!(ImageSource::parse("http://cdn.example/a.png").is_err());
        assert!(ImageSource::parse("ftp://cdn.example/a.png").is_err());
        assert!(ImageSource::parse(" ").is_err());
    }
}
