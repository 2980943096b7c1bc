//! Fuzz entry points into the ActivityPub transport (`crate::fuzzing` says what they are for):
//! an inbox body past its authentication, and the two HTTP signature grammars.

use std::collections::HashMap;

use memchr::memmem;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::html;
use super::inbox;
use super::mapping::{self as ap, iri, str_of};
use super::sig::{self, Alg, RequestView, Scheme, VerifyKey};
use super::wire::{FromJson as _, Object};
use crate::config::ActivityPubConfig;
use crate::message::{AuthMethod, NormalizedMessage, Part, Timestamp};

/// This server's base URL in the ActivityPub harnesses.
const AP_BASE: &str = "https://social.fuzz.test";

/// An inbox POST body, past its (assumed) authentication: the JSON and depth checks, the id,
/// type and actor rules, then, for a `Create` of an embedded note by its actor, what the note
/// becomes: who it wakes, its visibility, text, attachments (as links: nothing is fetched) and
/// thread, and the NormalizedMessage an agent gets.
///
/// That message survives a serde round trip unchanged; attachments stay within the limit and
/// are `http(s)` URLs; the note's content, sanitised for a reply, sanitises to itself and holds
/// only plain tags with `href`, `rel`, `target` and `class` attributes.
pub fn ap_inbox(body: &[u8]) {
    let cfg = ActivityPubConfig::default();
    let Ok(activity) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    if inbox::depth(&activity) > cfg.max_json_depth {
        return;
    }
    let (Some(id), Some(kind), Some(actor)) = (
        str_of(&activity, "id"),
        str_of(&activity, "type"),
        activity.get("actor").and_then(iri),
    ) else {
        return;
    };
    let Some(actor_host) = ap::host_of(actor) else {
        return;
    };
    if ap::host_of(id).as_deref() != Some(actor_host.as_str())
        || actor.starts_with(&format!("{AP_BASE}/"))
    {
        return;
    }
    let Some(note) = activity.get("object").filter(|o| o.is_object()) else {
        return;
    };
    if let Some(content) = str_of(note, "content") {
        check_sanitized(content);
    }
    if kind != "Create"
        || !matches!(
            str_of(note, "type"),
            Some("Note" | "Article" | "Page" | "Question")
        )
    {
        return;
    }
    let Some(note_id) = str_of(note, "id") else {
        return;
    };
    let author = note
        .get("attributedTo")
        .and_then(|a| ap::many(Some(a)).into_iter().find_map(iri));
    if author != Some(actor) || ap::host_of(note_id).as_deref() != Some(actor_host.as_str()) {
        return;
    }
    let agent = format!("{AP_BASE}/agents/helper");
    // Whether or not the note wakes the agent, what it would become is worked out.
    let _wakes = ap::wakes(note, &activity, &agent);
    let actor_doc = activity
        .get("actor")
        .filter(|a| a.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"id": actor, "preferredUsername": "someone"}));
    let followers = str_of(&actor_doc, "followers");
    let _visibility = ap::visibility_of(note, followers);
    let typed = Object::from_json(note);
    let _fields = ap::thread_fields(&typed);
    let thread = ap::explicit_thread(note)
        .or_else(|| note.get("inReplyTo").and_then(iri).map(str::to_owned))
        .unwrap_or_else(|| note_id.to_owned());
    let attachments = ap::attachments(note, cfg.max_attachments);
    assert!(attachments.len() <= cfg.max_attachments);
    let mut parts = Vec::new();
    let text = ap::note_text(note);
    if !text.is_empty() {
        parts.push(Part::text(text));
    }
    for a in &attachments {
        assert!(
            a.url.starts_with("https://") || a.url.starts_with("http://"),
            "attachment URL {:?}",
            a.url
        );
        if let Ok(link) =
            serde_json::from_value::<Part>(json!({"kind": "link", "url": a.url, "title": a.name}))
        {
            parts.push(link);
        }
    }
    if parts.is_empty() {
        parts.push(Part::text(""));
    }
    let address = ap::address_of(&actor_doc).unwrap_or_else(|| format!("@someone@{actor_host}"));
    let msg = ap::note_message(ap::WokenNote {
        id: "0190f0f0-0000-7000-8000-000000000000".into(),
        activity: &activity,
        actor_id: actor,
        actor_address: &address,
        actor_doc: &actor_doc,
        method: AuthMethod::ApHttpSignature,
        key_id: &format!("{actor}#main-key"),
        verifier: "social.fuzz.test",
        recipient: "@helper@social.fuzz.test",
        thread_key: &thread,
        in_reply_to: None,
        parts,
        max_reply_chars: cfg.max_reply_chars.for_software(Some("mastodon")),
        now: Timestamp::from_unix_millis(1_700_000_000_000),
    });
    match msg {
        Ok(msg) => round_trip(&msg),
        Err(e) => panic!("a woken note has no reply context: {e}"),
    }
}

/// The message reads back as it was, as agents are shown it (without its reply context) and
/// as it is stored (with it).
fn round_trip(msg: &NormalizedMessage) {
    let value = match serde_json::to_value(msg) {
        Ok(v) => v,
        Err(e) => panic!("a NormalizedMessage does not serialize: {e}"),
    };
    let shown = NormalizedMessage {
        reply_context: crate::message::ReplyContext::NONE,
        ..msg.clone()
    };
    match serde_json::from_value::<NormalizedMessage>(value.clone()) {
        Ok(back) => assert!(
            back == shown,
            "a NormalizedMessage changed in a serde round trip: {value}"
        ),
        Err(e) => panic!("a NormalizedMessage does not read back: {e}: {value}"),
    }
    let stored = match msg.to_stored_json() {
        Ok(s) => s,
        Err(e) => panic!("a NormalizedMessage does not serialize to be stored: {e}"),
    };
    match NormalizedMessage::from_stored_json(&stored) {
        Ok(back) => assert!(
            back == *msg,
            "a NormalizedMessage changed in a storage round trip: {stored}"
        ),
        Err(e) => panic!("a stored NormalizedMessage does not read back: {e}: {stored}"),
    }
}

/// `html` sanitised for a reply: a fixed point of the sanitiser, and only plain tags whose
/// attributes are `href`, `rel`, `target` and `class`, each quoted.
fn check_sanitized(html_in: &str) {
    let clean = html::sanitize(html_in);
    assert_eq!(
        html::sanitize(&clean),
        clean,
        "sanitising the sanitised HTML changed it (from {html_in:?})"
    );
    let mut rest = clean.as_str();
    while let Some(lt) = rest.find('<') {
        let Some(gt) = rest[lt..].find('>') else {
            panic!("an unterminated tag in sanitised HTML: {clean:?}");
        };
        let tag = &rest[lt + 1..lt + gt];
        rest = &rest[lt + gt + 1..];
        let tag = tag.strip_prefix('/').unwrap_or(tag);
        let (name, mut attrs) = tag.split_once(' ').unwrap_or((tag, ""));
        assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase()),
            "tag {name:?} in sanitised HTML: {clean:?}"
        );
        while !attrs.is_empty() {
            let Some((attr, value)) = attrs.split_once("=\"") else {
                panic!("attributes {attrs:?} in sanitised HTML: {clean:?}");
            };
            assert!(
                matches!(attr, "href" | "rel" | "target" | "class"),
                "attribute {attr:?} in sanitised HTML: {clean:?}"
            );
            let Some((_, tail)) = value.split_once('"') else {
                panic!("an unquoted attribute in sanitised HTML: {clean:?}");
            };
            attrs = tail.strip_prefix(' ').unwrap_or(tail);
        }
    }
}

/// The time every signature is checked at (seconds), 2023-11-14T22:13:20Z.
pub const SIG_NOW_S: i64 = 1_700_000_000;

/// An inbox request as text (`METHOD /path HTTP/1.1`, header lines, a blank line, the body),
/// its signature read by whichever scheme its headers name (draft-cavage `Signature`, RFC 9421
/// `Signature-Input` + `Signature`) at [`SIG_NOW_S`].
///
/// A signature that parses has something to verify (an RFC 9421 base holds one line per
/// covered component, then its parameters). Then the same request signed by this server, in
/// both schemes, parses back with the key id it was signed with and verifies.
pub fn ap_signature(data: &[u8]) {
    let Some(req) = HttpText::parse(data) else {
        return;
    };
    let lookup = |n: &str| req.headers.get(n).cloned();
    let target_uri = format!("{AP_BASE}{}", req.target);
    let view = RequestView {
        method: &req.method,
        path_and_query: &req.target,
        target_uri: &target_uri,
        header: &lookup,
    };
    let body = req.method.eq_ignore_ascii_case("POST").then_some(req.body);
    if let Ok(parsed) = sig::parse_any(&view, body, SIG_NOW_S) {
        match parsed.scheme {
            Scheme::Cavage => assert!(
                matches!(parsed.candidates.len(), 1 | 2),
                "{} cavage signing strings",
                parsed.candidates.len()
            ),
            Scheme::Rfc9421 => {
                assert_eq!(parsed.candidates.len(), 1, "one RFC 9421 signature base");
                let base = &parsed.candidates[0];
                assert!(!base.contains('\r'), "a CR in a signature base: {base:?}");
                let last = base.lines().last().unwrap_or_default();
                assert!(
                    last.starts_with("\"@signature-params\": ("),
                    "a signature base that does not end in its parameters: {base:?}"
                );
            }
        }
    }
    sign_and_read_back(&req.method, &req.target, body);
}

/// A request as the far side sends it: `method` to `target` (origin form) of [`AP_BASE`].
fn sign_and_read_back(method: &str, target: &str, body: Option<&[u8]>) {
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return;
    }
    let Ok(url) = url::Url::parse(&format!("{AP_BASE}{target}")) else {
        return;
    };
    if url.host_str() != Some("social.fuzz.test") || url.port().is_some() {
        return;
    }
    // What goes on the request line, and what the receiver rebuilds the target URI from.
    let on_wire = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let key_id = "https://remote.fuzz.test/users/alice#main-key";
    let fake_sign = |m: &[u8]| Ok::<_, ()>(Sha256::digest(m).to_vec());
    for scheme in [Scheme::Cavage, Scheme::Rfc9421] {
        let signed = match scheme {
            Scheme::Cavage => sig::sign_cavage(method, &url, body, key_id, SIG_NOW_S, fake_sign),
            Scheme::Rfc9421 => {
                sig::sign_rfc9421(method, &url, body, key_id, "ed25519", SIG_NOW_S, fake_sign)
            }
        };
        let Ok(signed) = signed else { continue };
        let mut headers: HashMap<String, String> =
            signed.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        headers.insert("host".into(), sig::authority(&url));
        let lookup = |n: &str| headers.get(n).cloned();
        let target_uri = format!("{AP_BASE}{on_wire}");
        let view = RequestView {
            method,
            path_and_query: &on_wire,
            target_uri: &target_uri,
            header: &lookup,
        };
        let parsed = match sig::parse_any(&view, body, SIG_NOW_S) {
            Ok(p) => p,
            Err(e) => panic!("our own {scheme:?} signature of {method} {url} does not parse: {e}"),
        };
        assert_eq!(parsed.scheme, scheme);
        assert_eq!(parsed.key_id, key_id);
        assert!(
            parsed.verify(&DigestKey),
            "our own {scheme:?} signature of {method} {url} does not verify: signed {:?}",
            parsed.candidates
        );
    }
}

/// A "key" whose signature over a message is the message's SHA-256.
struct DigestKey;

impl VerifyKey for DigestKey {
    fn verify(&self, _alg: Alg, msg: &[u8], sig: &[u8]) -> bool {
        Sha256::digest(msg).as_slice() == sig
    }
}

/// A request written as HTTP/1.1 text.
struct HttpText<'a> {
    method: String,
    target: String,
    /// Lower-case names; a repeated header's values joined with `", "`, as the inbox sees them.
    headers: HashMap<String, String>,
    body: &'a [u8],
}

impl<'a> HttpText<'a> {
    fn parse(data: &'a [u8]) -> Option<Self> {
        let (head, body) = match memmem::find(data, b"\r\n\r\n") {
            Some(at) => (&data[..at], &data[at + 4..]),
            None => (data, &data[data.len()..]),
        };
        let head = String::from_utf8_lossy(head);
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next()?.split(' ');
        let method = request_line.next()?.to_owned();
        let target = request_line.next()?.to_owned();
        if !target.starts_with('/') {
            return None;
        }
        let mut headers: HashMap<String, String> = HashMap::new();
        for line in lines {
            let (name, value) = line.split_once(':')?;
            let value = value.trim().to_owned();
            headers
                .entry(name.trim().to_ascii_lowercase())
                .and_modify(|v| {
                    v.push_str(", ");
                    v.push_str(&value);
                })
                .or_insert(value);
        }
        Some(Self {
            method,
            target,
            headers,
            body,
        })
    }
}
