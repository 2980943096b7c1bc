//! Agents moving between accounts, as Mastodon accounts do: the other accounts an agent names
//! (`also_known_as`, published as `alsoKnownAs`, resolved when the server starts), which lets
//! followers of those accounts move in; and `switchboard agents move`, which records the new
//! account (published as `movedTo`) and sends `Move` to the agent's followers, whose servers
//! then follow the new account in their place.

use std::sync::Arc;

use serde_json::{Value, json};

use super::fetch::FetchError;
use super::mapping;
use super::profile::Published;
use super::{ActivityPub, Inner, store};
use crate::config::AccountRef;
use crate::error::{Error, Result};
use crate::transports::Parts;

/// How long after a move an agent can move to another account: 30 days, as Mastodon allows,
/// so that followers are not passed from account to account. Moving again to the same account
/// (sending its followers the `Move` again) is always allowed.
pub const MOVE_COOLDOWN_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// What [`move_agent`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The agent's actor IRI.
    pub from: String,
    /// The actor IRI of the account it moved to.
    pub to: String,
    /// The inboxes the `Move` goes to (shared inboxes once).
    pub inboxes: usize,
}

impl Inner {
    /// `agent`'s other accounts as actor IRIs (as resolved at start; none before).
    pub(super) fn aliases(&self, agent: &str) -> Arc<[String]> {
        self.aliases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&agent.to_lowercase())
            .cloned()
            .unwrap_or_else(|| Arc::from([]))
    }

    /// The local agent a handle names (`user@host` with the host of our handles or our own).
    fn local_handle(&self, user: &str, host: &str) -> Option<Arc<crate::agents::Agent>> {
        (host.eq_ignore_ascii_case(&self.handle_domain) || host.eq_ignore_ascii_case(&self.domain))
            .then(|| self.agents.get(user))
            .flatten()
    }
}

/// Resolves every agent's `also_known_as` to actor IRIs, for its actor to publish. An account
/// that cannot be resolved now is left out, with a warning, until the next start.
pub(super) async fn resolve_aliases(inner: &Inner) {
    for agent in inner.agents.all() {
        resolve_aliases_of(inner, &agent.name).await;
    }
}

/// Resolves `agent`'s `also_known_as` afresh, for its actor to publish.
async fn resolve_aliases_of(inner: &Inner, agent: &str) {
    let resolved = aliases_of(inner, agent).await;
    inner
        .aliases
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(agent.to_lowercase(), resolved.into());
}

/// `agent`'s configured other accounts, resolved, each once.
async fn aliases_of(inner: &Inner, agent: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for alias in &inner.profile(agent).config().also_known_as {
        match resolve_alias(inner, alias).await {
            Ok(iri) if !out.contains(&iri) => out.push(iri),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                agent,
                alias = %alias,
                error = %e,
                "an account in also_known_as could not be resolved: alsoKnownAs leaves it out \
                 until the next start"
            ),
        }
    }
    out
}

/// The actor IRI of an account the operator named: an IRI as it is, a handle of one of our
/// agents without asking anyone, another handle through WebFinger.
async fn resolve_alias(inner: &Inner, alias: &str) -> std::result::Result<String, FetchError> {
    match AccountRef::parse(alias).map_err(FetchError::Permanent)? {
        AccountRef::Iri(iri) => Ok(iri.to_owned()),
        AccountRef::Handle(user, host) => match inner.local_handle(user, host) {
            Some(local) => Ok(inner.actor_url(&local.name)),
            None => Ok(inner.resolve_account(alias, false).await?.id.clone()),
        },
    }
}

/// Moves `agent` to the account `to` (`@user@host` or an actor IRI), which must already name
/// the agent among its aliases (`alsoKnownAs`), as Mastodon requires before it lets followers
/// go: records the move, so that the actor publishes `movedTo`, and sends its followers (each
/// shared inbox once) the changed actor (`Update`) and then the `Move`, in one transaction.
/// The server's workers deliver them, now or when it next runs.
///
/// # Errors
/// [`Error::Invalid`] when ActivityPub is off, the agent is unknown, the account cannot be
/// resolved, is the agent itself or does not name it; database and key store errors.
pub async fn move_agent(parts: &Parts, agent: &str, to: &str) -> Result<Moved> {
    if !parts.config.activitypub.enabled {
        return Err(Error::Invalid(
            "ActivityPub is off (activitypub.enabled = false)".into(),
        ));
    }
    let ap = ActivityPub::new(parts)?;
    let inner = &ap.inner;
    let agent = inner
        .agents
        .get(agent)
        .ok_or_else(|| Error::Invalid(format!("no agent is named {agent:?}")))?;
    let from = inner.actor_url(&agent.name);
    let (target, aliases) = target_of(inner, to).await?;
    if target == from {
        return Err(Error::Invalid(format!("{to} is {from} itself")));
    }
    if !aliases.contains(&from) {
        return Err(Error::Invalid(format!(
            "{target} does not name {from} among its aliases (alsoKnownAs): add it there first \
             (Mastodon: Preferences → Account → Moving from a different account; switchboard: \
             also_known_as), then move"
        )));
    }
    let now = inner.clock.now_ms();
    if let Some(last) = store::last_move(&inner.db, &agent.name).await?
        && last.target != target
        && now.saturating_sub(last.moved_at) < MOVE_COOLDOWN_MS
    {
        let when = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .map(|d| d.format("%Y-%m-%d %H:%M UTC").to_string())
                .unwrap_or_default()
        };
        return Err(Error::Invalid(format!(
            "{} moved to {} on {}: it can move to another account from {} (30 days after a move, \
             as Mastodon allows); moving again to {} resends the Move",
            agent.name,
            last.target,
            when(last.moved_at),
            when(last.moved_at.saturating_add(MOVE_COOLDOWN_MS)),
            last.target,
        )));
    }
    resolve_aliases_of(inner, &agent.name).await;
    let published = Published::new(inner, &agent.name, Some(target.clone()));
    let doc = super::actor::actor_doc_of(inner, &agent, published.doc().properties(&from)).await?;
    let inboxes = inner.follower_inboxes(&agent.name).await?;
    let activities = [
        super::profile::update_of(&from, doc, now),
        move_activity(&from, &target, now),
    ];
    let mut tx = inner.db.begin().await?;
    store::record_move(&mut tx, &agent.name, &target, now).await?;
    let enqueued =
        super::outbound::enqueue(inner, &mut tx, &agent.name, &inboxes, &activities).await?;
    tx.commit().await?;
    inner.queue.hand_over(enqueued);
    tracing::info!(agent = %agent.name, to = %target, inboxes = inboxes.len(), "moved: Move sent");
    Ok(Moved {
        from,
        to: target,
        inboxes: inboxes.len(),
    })
}

/// The account moved to: its actor IRI and the aliases it publishes (one of ours, as its
/// configuration names them; another, fetched afresh).
async fn target_of(inner: &Inner, to: &str) -> Result<(String, Vec<String>)> {
    let account = AccountRef::parse(to).map_err(|why| Error::Invalid(format!("{to}: {why}")))?;
    let local = match account {
        AccountRef::Handle(user, host) => inner.local_handle(user, host),
        AccountRef::Iri(iri) => inner.local_agent(iri),
    };
    if let Some(local) = local {
        let aliases = aliases_of(inner, &local.name).await;
        return Ok((inner.actor_url(&local.name), aliases));
    }
    let actor = inner
        .resolve_account(to, true)
        .await
        .map_err(|e| Error::Invalid(format!("{to} cannot be resolved: {e}")))?;
    Ok((
        actor.id.clone(),
        mapping::iris(actor.doc.get("alsoKnownAs")),
    ))
}

/// The `Move` of the actor `from` to `target`, addressed to its followers; its id names the
/// time it was made.
fn move_activity(from: &str, target: &str, now: i64) -> Value {
    json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{from}#moves/{now}"),
        "type": "Move",
        "actor": from,
        "object": from,
        "target": target,
        "to": [format!("{from}/followers")],
    })
}
