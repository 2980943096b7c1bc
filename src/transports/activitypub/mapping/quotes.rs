//! Quote posts with consent (FEP-044f, as Mastodon 4.5 speaks it): the `interactionPolicy`
//! our notes publish, the quoting note a `QuoteRequest` carries, and the `QuoteAuthorization`,
//! `Accept` and `Reject` that answer it. Pure.

use serde_json::{Value, json};

use super::{PUBLIC, iri, str_of};
use crate::config::QuotePolicy;
use crate::message::Visibility;

/// The `@context` terms of quote posts (GoToSocial's namespace for the policy, FEP-044f's for
/// the rest), as Mastodon defines them.
#[must_use]
pub fn context_terms() -> serde_json::Map<String, Value> {
    let terms = json!({
        "gts": "https://gotosocial.org/ns#",
        "interactionPolicy": {"@id": "gts:interactionPolicy", "@type": "@id"},
        "canQuote": {"@id": "gts:canQuote", "@type": "@id"},
        "automaticApproval": {"@id": "gts:automaticApproval", "@type": "@id"},
        "manualApproval": {"@id": "gts:manualApproval", "@type": "@id"},
        "interactingObject": {"@id": "gts:interactingObject", "@type": "@id"},
        "interactionTarget": {"@id": "gts:interactionTarget", "@type": "@id"},
        "QuoteRequest": "https://w3id.org/fep/044f#QuoteRequest",
        "QuoteAuthorization": "https://w3id.org/fep/044f#QuoteAuthorization",
        "quote": {"@id": "https://w3id.org/fep/044f#quote", "@type": "@id"},
        "quoteAuthorization": {"@id": "https://w3id.org/fep/044f#quoteAuthorization", "@type": "@id"},
    });
    match terms {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// Who a note of `actor` (whose followers are at `followers`) may be quoted by without asking
/// anyone: everyone (the public collection), its followers, or only its author (nobody else;
/// FEP-044f spells "nobody" so, as an empty list would vanish from JSON-LD). Notes that are
/// neither public nor unlisted are quoted by nobody, whatever the policy.
#[must_use]
pub fn interaction_policy(
    policy: QuotePolicy,
    actor: &str,
    followers: &str,
    visibility: &Visibility,
) -> Value {
    let open = matches!(visibility, Visibility::Public | Visibility::Unlisted);
    let who = match policy {
        QuotePolicy::Anyone if open => PUBLIC,
        QuotePolicy::Followers if open => followers,
        _ => actor,
    };
    json!({"canQuote": {"automaticApproval": [who]}})
}

/// The note a quote points at: FEP-044f's `quote`, else the older spellings Mastodon reads
/// (`_misskey_quote`, `quoteUrl`, `quoteUri`).
#[must_use]
pub fn quoted_by(note: &Value) -> Option<&str> {
    ["quote", "_misskey_quote", "quoteUrl", "quoteUri"]
        .iter()
        .find_map(|k| note.get(*k).and_then(iri))
}

/// The `QuoteAuthorization` by `actor` that lets `quoting` quote its note `quoted`, at `id`.
#[must_use]
pub fn authorization(id: &str, actor: &str, quoting: &str, quoted: &str) -> Value {
    json!({
        "id": id,
        "type": "QuoteAuthorization",
        "attributedTo": actor,
        "interactingObject": quoting,
        "interactionTarget": quoted,
    })
}

/// The answer of `actor` to the `QuoteRequest` `request` from `requester`: an `Accept` whose
/// `result` is the authorization's IRI, or (no authorization) a `Reject`. Its id is derived
/// from the request's, so that answering the same request again gives the same activity.
#[must_use]
pub fn answer(
    actor: &str,
    requester: &str,
    request: &Value,
    key: &str,
    authorization: Option<&str>,
) -> Value {
    let request = super::embeddable(request);
    let (kind, path) = if authorization.is_some() {
        ("Accept", "accepts")
    } else {
        ("Reject", "rejects")
    };
    let mut doc = json!({
        "@context": ["https://www.w3.org/ns/activitystreams", Value::Object(context_terms())],
        "id": format!("{actor}#{path}/quote_requests/{key}"),
        "type": kind,
        "actor": actor,
        "to": [requester],
        "object": request,
    });
    if let (Some(m), Some(result)) = (doc.as_object_mut(), authorization) {
        m.insert("result".into(), json!(result));
    }
    doc
}

/// The quoting note of a `QuoteRequest` (`instrument`), embedded, or its IRI.
#[must_use]
pub fn instrument(request: &Value) -> Option<&Value> {
    request.get("instrument").filter(|v| !v.is_null())
}

/// The note a `QuoteRequest` asks to quote (`object`).
#[must_use]
pub fn requested(request: &Value) -> Option<&str> {
    request.get("object").and_then(iri)
}

/// Whether `note` (a quoting note) is `author`'s and quotes `quoted`.
#[must_use]
pub fn quotes(note: &Value, author: &str, quoted: &str) -> bool {
    let by = note.get("attributedTo").and_then(iri);
    by == Some(author) && quoted_by(note) == Some(quoted) && str_of(note, "id").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACTOR: &str = "https://sb.example/agents/echo";
    const FOLLOWERS: &str = "https://sb.example/agents/echo/followers";

    #[test]
    fn the_policy_names_who_may_quote_and_closes_for_private_notes() {
        let who = |p, v: &Visibility| {
            interaction_policy(p, ACTOR, FOLLOWERS, v)["canQuote"]["automaticApproval"][0]
                .as_str()
                .map(str::to_owned)
                .unwrap()
        };
        assert_eq!(who(QuotePolicy::Anyone, &Visibility::Public), PUBLIC);
        assert_eq!(who(QuotePolicy::Anyone, &Visibility::Unlisted), PUBLIC);
        assert_eq!(who(QuotePolicy::Followers, &Visibility::Public), FOLLOWERS);
        assert_eq!(who(QuotePolicy::Nobody, &Visibility::Public), ACTOR);
        assert_eq!(who(QuotePolicy::Anyone, &Visibility::Followers), ACTOR);
        assert_eq!(who(QuotePolicy::Anyone, &Visibility::Direct), ACTOR);
    }

    #[test]
    fn a_quoting_note_is_read_in_every_spelling() {
        let q = "https://sb.example/agents/echo/notes/1";
        for key in ["quote", "_misskey_quote", "quoteUrl", "quoteUri"] {
            let note = json!({"id": "https://m.example/s/2", "attributedTo": "https://m.example/u/bob", key: q});
            assert_eq!(quoted_by(&note), Some(q), "{key}");
            assert!(quotes(&note, "https://m.example/u/bob", q));
            assert!(
                !quotes(&note, "https://m.example/u/eve", q),
                "another author"
            );
            assert!(!quotes(
                &note,
                "https://m.example/u/bob",
                "https://sb.example/x"
            ));
        }
        assert_eq!(quoted_by(&json!({"content": "no quote"})), None);
    }

    #[test]
    fn an_answer_is_an_accept_with_its_authorization_or_a_reject() {
        let req = json!({"@context": "https://www.w3.org/ns/activitystreams", "id": "https://m.example/u/bob/quote_requests/1",
            "type": "QuoteRequest", "actor": "https://m.example/u/bob", "object": "https://sb.example/n/1",
            "signature": {"x": 1}});
        let auth = format!("{ACTOR}/quote_authorizations/k");
        let a = answer(ACTOR, "https://m.example/u/bob", &req, "k", Some(&auth));
        assert_eq!(a["type"], "Accept");
        assert_eq!(a["result"], auth);
        assert_eq!(a["id"], format!("{ACTOR}#accepts/quote_requests/k"));
        assert_eq!(a["object"]["id"], req["id"]);
        assert!(a["object"].get("signature").is_none() && a["object"].get("@context").is_none());
        let r = answer(ACTOR, "https://m.example/u/bob", &req, "k", None);
        assert_eq!(r["type"], "Reject");
        assert!(r.get("result").is_none());
        let doc = authorization(
            &auth,
            ACTOR,
            "https://m.example/s/2",
            "https://sb.example/n/1",
        );
        assert_eq!(doc["type"], "QuoteAuthorization");
        assert_eq!(doc["interactingObject"], "https://m.example/s/2");
        assert_eq!(doc["interactionTarget"], "https://sb.example/n/1");
    }
}
