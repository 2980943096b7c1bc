//! Agents' fediverse profiles (`[agents.activitypub]`): the images read from their files when
//! the server starts, the start-up announcement of a changed profile (one `Update` of the actor
//! per follower inbox, decided by the digest recorded in `ap_profiles`), and the documents a
//! profile adds: the `featured` collection, each pinned note, and the images served from the
//! blob store at URLs naming their content hash.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};

use super::mapping::profile::{self as map, ProfileDoc, ProfileImage};
use super::mapping::{self, PUBLIC};
use super::{HttpState, Inner, store};
use crate::agents::Agent;
use crate::blobs::{BlobStore, NewBlob};
use crate::config::{AgentActivityPubConfig, AgentConfig, ImageSource, read_image_file};
use crate::error::{Error, Result};

/// How long a profile image may be cached: its URL names its content, so for good.
const IMAGE_CACHE: &str = "public, max-age=31536000, immutable";

/// The blob reference id under which an agent's profile keeps an image it stored.
fn image_ref(agent: &str, digest: &str) -> String {
    format!("ap-profile:{agent}:{digest}")
}

/// A profile image, read and published.
#[derive(Debug, Clone)]
struct Image {
    /// The bytes to keep in the blob store (a file's), none for an operator's URL.
    stored: Option<NewBlob>,
    /// What the actor publishes.
    published: ProfileImage,
}

/// An agent's profile, its images read.
#[derive(Debug, Clone, Default)]
pub(super) struct AgentProfile {
    cfg: AgentActivityPubConfig,
    avatar: Option<Image>,
    header: Option<Image>,
}

impl AgentProfile {
    /// What the actor document publishes of it.
    pub(super) fn doc(&self) -> ProfileDoc<'_> {
        ProfileDoc {
            bot: self.cfg.bot,
            discoverable: self.cfg.discoverable,
            indexable: self.cfg.indexable,
            avatar: self.avatar.as_ref().map(|i| &i.published),
            header: self.header.as_ref().map(|i| &i.published),
            fields: &self.cfg.fields,
            pinned: &self.cfg.pinned,
            also_known_as: &[],
            moved_to: None,
        }
    }

    /// The configured profile.
    pub(super) fn config(&self) -> &AgentActivityPubConfig {
        &self.cfg
    }

    fn images(&self) -> impl Iterator<Item = &Image> {
        self.avatar.iter().chain(self.header.iter())
    }

    /// The digests of the images kept in the blob store, sorted.
    fn stored_digests(&self) -> BTreeSet<&str> {
        self.images()
            .filter_map(|i| i.stored.as_ref().map(|b| b.digest.as_str()))
            .collect()
    }
}

/// What an agent's actor publishes of its profile: the configured one, the other accounts it
/// names and the account it moved to.
#[derive(Debug, Clone)]
pub(super) struct Published {
    profile: Arc<AgentProfile>,
    aliases: Arc<[String]>,
    moved_to: Option<String>,
}

impl Published {
    /// `agent`'s profile as it stands, with `moved_to`.
    pub(super) fn new(inner: &Inner, agent: &str, moved_to: Option<String>) -> Self {
        Self {
            profile: inner.profile(agent),
            aliases: inner.aliases(agent),
            moved_to,
        }
    }

    /// What the actor document publishes of it.
    pub(super) fn doc(&self) -> ProfileDoc<'_> {
        ProfileDoc {
            also_known_as: &self.aliases,
            moved_to: self.moved_to.as_deref(),
            ..self.profile.doc()
        }
    }
}

impl Inner {
    /// What `agent`'s actor publishes of its profile now, its move read from the database.
    ///
    /// # Errors
    /// Database errors.
    pub(super) async fn published(&self, agent: &str) -> Result<Published> {
        let moved_to = store::moved_to(&self.db, agent).await?;
        Ok(Published::new(self, agent, moved_to))
    }

    /// The inboxes of `agent`'s remote followers, each shared inbox once: where what concerns
    /// all of them (its profile, its move) is delivered.
    ///
    /// # Errors
    /// Database errors.
    pub(super) async fn follower_inboxes(&self, agent: &str) -> Result<Vec<String>> {
        Ok(store::followers(&self.db, agent)
            .await?
            .into_iter()
            .map(|f| f.inbox)
            .filter(|i| !self.is_local(i))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect())
    }
}

/// Reads every configured agent's profile: image files are read, recognised by their bytes
/// and named by their digest; an `https` image is published as it is.
///
/// # Errors
/// [`Error::Config`] for an image file that cannot be read, is not a PNG, JPEG, GIF, WebP or
/// AVIF image, or is over `media.max_bytes`.
pub(super) fn load(
    agents: &[AgentConfig],
    base: &str,
    blobs: &BlobStore,
    max_bytes: usize,
) -> Result<HashMap<String, Arc<AgentProfile>>> {
    let mut out = HashMap::new();
    for (i, agent) in agents.iter().enumerate() {
        let Some(cfg) = &agent.activitypub else {
            continue;
        };
        let actor = format!("{base}/agents/{}", agent.name);
        let read = |key: &str, value: &Option<String>| -> Result<Option<Image>> {
            let Some(value) = value else { return Ok(None) };
            let at = format!("agents[{i}].activitypub.{key} {value:?}");
            read_image(value, &actor, blobs, max_bytes)
                .map(Some)
                .map_err(|why| Error::Config(format!("{at}: {why}")))
        };
        let profile = AgentProfile {
            avatar: read("avatar", &cfg.avatar)?,
            header: read("header", &cfg.header)?,
            cfg: cfg.clone(),
        };
        out.insert(agent.name.to_lowercase(), Arc::new(profile));
    }
    Ok(out)
}

/// Reads one configured image (a path or an `https` URL) of the actor at `actor`.
fn read_image(
    value: &str,
    actor: &str,
    blobs: &BlobStore,
    max_bytes: usize,
) -> std::result::Result<Image, String> {
    match ImageSource::parse(value)? {
        ImageSource::Url(url) => Ok(Image {
            stored: None,
            published: ProfileImage {
                url: url.to_owned(),
                media_type: map::media_type_of_url(url).map(str::to_owned),
            },
        }),
        ImageSource::File(path) => {
            let (bytes, mime) = read_image_file(path, max_bytes)?;
            let blob = blobs.prepare(&bytes, mime).map_err(|e| e.to_string())?;
            let url = format!(
                "{actor}/images/{}.{}",
                blob.digest,
                map::image_extension(mime)
            );
            Ok(Image {
                stored: Some(blob),
                published: ProfileImage {
                    url,
                    media_type: Some(mime.to_owned()),
                },
            })
        }
    }
}

impl Inner {
    /// `agent`'s profile (the defaults for an agent without `[agents.activitypub]`).
    pub(super) fn profile(&self, agent: &str) -> Arc<AgentProfile> {
        self.profiles
            .get(&agent.to_lowercase())
            .cloned()
            .unwrap_or_default()
    }
}

/// At start: for each agent, keeps its profile images in the blob store and, when what its
/// actor publishes differs from the profile last announced (or none was), records the new one
/// and sends an `Update` of the actor to each of its followers' inboxes (shared inboxes once),
/// in one transaction. When several instances start at once, the one whose record lands
/// announces.
///
/// # Errors
/// Database and key store errors.
pub(super) async fn announce_changes(inner: &Inner) -> Result<()> {
    for agent in inner.agents.all() {
        announce(inner, &agent).await?;
    }
    Ok(())
}

async fn announce(inner: &Inner, agent: &Agent) -> Result<()> {
    let profile = inner.profile(&agent.name);
    let actor = inner.actor_url(&agent.name);
    let published = inner.published(&agent.name).await?;
    let doc = super::actor::actor_doc_of(inner, agent, published.doc().properties(&actor)).await?;
    let digest = published.doc().digest(
        &actor,
        mapping::str_of(&doc, "name").unwrap_or_default(),
        mapping::str_of(&doc, "summary").unwrap_or_default(),
    );
    let now = inner.clock.now_ms();
    let mut tx = inner.db.begin().await?;
    for blob in profile.images().filter_map(|i| i.stored.as_ref()) {
        blob.store_in(&mut tx, now).await?;
    }
    let previous = store::profile_in(&mut tx, &agent.name).await?;
    if previous.as_ref().is_some_and(|p| p.digest == digest) {
        // Nothing to announce; the images are stored again should they have gone missing.
        return tx.commit().await;
    }
    let stored = profile.stored_digests();
    let images = stored.iter().copied().collect::<Vec<_>>().join(" ");
    let recorded = store::replace_profile(
        &mut tx,
        &agent.name,
        previous.as_ref().map(|p| p.digest.as_str()),
        &digest,
        &images,
        now,
    )
    .await?;
    if !recorded {
        tracing::debug!(agent = %agent.name, "profile recorded by another instance");
        return Ok(());
    }
    // The images stay while the profile names them; the ones it no longer names go with it.
    let refs: Vec<String> = stored.iter().map(|d| image_ref(&agent.name, d)).collect();
    let pairs: Vec<(&str, &str)> = stored
        .iter()
        .copied()
        .zip(refs.iter().map(String::as_str))
        .collect();
    crate::store::blobs::add_refs(&mut tx, &pairs).await?;
    let dropped: Vec<String> = previous
        .iter()
        .flat_map(|p| p.images.split(' '))
        .filter(|d| !d.is_empty() && !stored.contains(d))
        .map(|d| image_ref(&agent.name, d))
        .collect();
    let dropped: Vec<&str> = dropped.iter().map(String::as_str).collect();
    crate::store::blobs::release(&mut tx, &dropped).await?;
    let inboxes = inner.follower_inboxes(&agent.name).await?;
    let update = update_of(&actor, doc, now);
    let enqueued =
        super::outbound::enqueue(inner, &mut tx, &agent.name, &inboxes, &[update]).await?;
    tx.commit().await?;
    inner.queue.hand_over(enqueued);
    tracing::info!(agent = %agent.name, followers = inboxes.len(), "profile changed: Update sent");
    Ok(())
}

/// The `Update` of the actor `doc` (its `@context` moved to the activity), public, to the
/// agent's followers; its id names the time it was made.
pub(super) fn update_of(actor: &str, mut doc: Value, now: i64) -> Value {
    let context = doc
        .as_object_mut()
        .and_then(|m| m.remove("@context"))
        .unwrap_or_else(mapping::context);
    json!({
        "@context": context,
        "id": format!("{actor}#updates/{now}"),
        "type": "Update",
        "actor": actor,
        "to": [PUBLIC],
        "cc": [format!("{actor}/followers")],
        "object": doc,
    })
}

/// The profile's documents: the `featured` collection, pinned notes, stored images.
pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/agents/{name}/featured", web::get().to(featured))
        .route("/agents/{name}/pinned/{key}", web::get().to(pinned))
        .route("/agents/{name}/images/{file}", web::get().to(image));
}

fn not_found() -> HttpResponse {
    super::answer::not_found()
}

/// The agent's `featured` collection: its pinned notes, embedded.
async fn featured(state: web::Data<HttpState>, path: web::Path<String>) -> HttpResponse {
    let site = &state.site;
    let Some(agent) = site.agents().get(&path.into_inner()) else {
        return not_found();
    };
    let actor = site.actor_url(&agent.name);
    let mut doc = map::featured(&actor, &site.profile(&agent.name).cfg.pinned);
    if let Some(m) = doc.as_object_mut() {
        m.insert("@context".into(), mapping::context());
    }
    super::answer::ap(&doc)
}

/// One pinned note, at its id.
async fn pinned(state: web::Data<HttpState>, path: web::Path<(String, String)>) -> HttpResponse {
    let site = &state.site;
    let (name, key) = path.into_inner();
    let Some(agent) = site.agents().get(&name) else {
        return not_found();
    };
    let actor = site.actor_url(&agent.name);
    let profile = site.profile(&agent.name);
    let Some(text) = profile
        .cfg
        .pinned
        .iter()
        .find(|t| map::pinned_key(t) == key)
    else {
        return not_found();
    };
    let mut note = map::pinned_note(&actor, text);
    if let Some(m) = note.as_object_mut() {
        m.insert("@context".into(), mapping::context());
    }
    super::answer::ap(&note)
}

/// A profile image the agent's profile names, `{digest}.{extension}`, from the blob store, with
/// its media type and cached for good (its URL changes with its content).
async fn image(state: web::Data<HttpState>, path: web::Path<(String, String)>) -> HttpResponse {
    let site = &state.site;
    let (name, file) = path.into_inner();
    let Some(agent) = site.agents().get(&name) else {
        return not_found();
    };
    let digest = file
        .split_once('.')
        .map_or(file.as_str(), |(d, _)| d)
        .to_owned();
    // Only the images this profile names: the blob store holds attachments too.
    if !site
        .profile(&agent.name)
        .stored_digests()
        .contains(digest.as_str())
    {
        return not_found();
    }
    match state
        .main
        .run(|s| async move { s.inner.blobs.get(&digest).await })
        .await
    {
        Ok(Some((mime, data))) => HttpResponse::Ok()
            .content_type(mime)
            .insert_header(("Cache-Control", IMAGE_CACHE))
            .insert_header(("X-Content-Type-Options", "nosniff"))
            .insert_header(("Content-Security-Policy", "default-src 'none'; sandbox"))
            .insert_header(("Access-Control-Allow-Origin", "*"))
            .body(data),
        Ok(None) => not_found(),
        Err(e) => {
            tracing::warn!(error = %e, "profile image unavailable");
            crate::http::error_response(&e)
        }
    }
}
