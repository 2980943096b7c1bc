//! An agent's actor document: its keys, endpoints and handle, with its profile
//! (`[agents.activitypub]`) merged in; served by `documents` and sent in `Update`s by `profile`
//! and `migration`.

use serde_json::{Value, json};

use super::Inner;
use super::mapping::profile;
use crate::agents::Agent;
use crate::error::Error;

/// The actor document of an agent, its profile (`[agents.activitypub]`) included.
pub(super) async fn actor_doc(inner: &Inner, agent: &Agent) -> crate::Result<Value> {
    let profile = inner
        .published(&agent.name)
        .await?
        .doc()
        .properties(&inner.actor_url(&agent.name));
    actor_doc_of(inner, agent, profile).await
}

/// The actor document of `agent`, with `profile` (what `ProfileDoc::properties` gives) as its
/// profile.
///
/// # Errors
/// Key store errors.
pub(super) async fn actor_doc_of(
    inner: &Inner,
    agent: &Agent,
    profile: serde_json::Map<String, Value>,
) -> crate::Result<Value> {
    let rsa = inner
        .keys
        .rsa(&Inner::rsa_key_name(&agent.name))
        .await
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let ed = inner
        .keys
        .ed25519(&Inner::ed_key_name(&agent.name))
        .await
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let id = inner.actor_url(&agent.name);
    let mut terms = profile::context_terms();
    if let Some(t) = terms.as_object_mut() {
        t.insert(
            "manuallyApprovesFollowers".into(),
            json!("as:manuallyApprovesFollowers"),
        );
        t.insert(
            "webfinger".into(),
            json!("https://purl.archive.org/socialweb/webfinger"),
        );
    }
    let mut doc = json!({
        "@context": [
            "https://www.w3.org/ns/activitystreams",
            "https://w3id.org/security/v1",
            "https://w3id.org/security/multikey/v1",
            terms,
        ],
        "id": id,
        "preferredUsername": agent.name,
        "name": agent.display_name.clone().unwrap_or_else(|| agent.name.clone()),
        "summary": agent.summary.as_deref().map(super::html::text_to_html).unwrap_or_default(),
        "url": id,
        "inbox": format!("{id}/inbox"),
        "outbox": format!("{id}/outbox"),
        "followers": format!("{id}/followers"),
        "endpoints": {"sharedInbox": format!("{}/inbox", inner.base)},
        "manuallyApprovesFollowers": false,
        "webfinger": format!("{}@{}", agent.name, inner.handle_domain),
        "publicKey": {
            "id": format!("{id}#main-key"),
            "owner": id,
            "publicKeyPem": rsa.public_key_pem(),
        },
        "assertionMethod": [{
            "id": format!("{id}#ed25519-key"),
            "type": "Multikey",
            "controller": id,
            "publicKeyMultibase": super::proof::ed25519_multikey(&ed.public_key_raw()),
        }],
    });
    if let Some(m) = doc.as_object_mut() {
        m.extend(profile);
    }
    Ok(doc)
}
