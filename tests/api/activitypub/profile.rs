//! Agents' fediverse profiles (`[agents.activitypub]`): what the actor publishes (type, icon,
//! image, fields, featured, discovery switches), the images served from the blob store, the
//! pinned notes, `check-config`'s refusals, and the `Update` a changed profile sends followers
//! when the server starts again — one per inbox, none when nothing changed.

use serde_json::{Value, json};
use switchboard::config::{AgentActivityPubConfig, ProfileField};
use switchboard::transports::activitypub::mapping;

use super::remote::{Remote, post_signed, signed_by};
use super::{count, get_ap, setup};
use crate::helpers::{Engine, on_both_engines, spawn_on, wait_for};

/// A 1×1 transparent PNG.
const PNG_HEX: &str = "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000b49444154789c6360000200000500017a5eab3f0000000049454e44ae426082";

pub(crate) fn png() -> Vec<u8> {
    hex::decode(PNG_HEX).unwrap()
}

/// Writes the PNG to a fresh file and returns its path (kept until the process ends).
pub(crate) fn png_file() -> String {
    let dir = std::env::temp_dir().join(format!("sb-profile-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("avatar.png");
    std::fs::write(&path, png()).unwrap();
    path.to_string_lossy().into_owned()
}

/// A full profile: a file avatar, an https header, two fields (one `rel="me"`), two pinned
/// posts, a person who may be indexed but not listed.
pub(crate) fn full_profile(avatar: &str) -> AgentActivityPubConfig {
    AgentActivityPubConfig {
        avatar: Some(avatar.to_owned()),
        header: Some("https://cdn.example/banner.jpg".into()),
        fields: vec![
            ProfileField {
                name: "Website".into(),
                value: "https://example.com".into(),
                rel_me: true,
            },
            ProfileField {
                name: "Source".into(),
                value: "https://code.example/switchboard".into(),
                rel_me: false,
            },
        ],
        pinned: vec![
            "Mention me to talk.".into(),
            "Rules: https://example.com/rules".into(),
        ],
        bot: false,
        discoverable: false,
        indexable: true,
        also_known_as: vec!["https://old.example/users/echo".into()],
        quote_policy: switchboard::config::QuotePolicy::Anyone,
    }
}

/// Sets `echo`'s profile in `c`.
pub(crate) fn with_profile(c: &mut switchboard::Config, p: AgentActivityPubConfig) {
    let echo = c.agents.iter_mut().find(|a| a.name == "echo").unwrap();
    echo.activitypub = Some(p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_actor_publishes_the_profile_and_serves_its_documents() {
    let avatar = png_file();
    let profile = full_profile(&avatar);
    let s = setup(Engine::Sqlite, move |c| with_profile(c, profile)).await;
    let (t, http) = (&s.t, &s.t.http);
    let echo = format!("{}/agents/echo", t.base);

    let (_, _, doc) = get_ap(t, &echo).await;
    assert_eq!(doc["type"], "Person", "bot = false: {doc}");
    assert_eq!(doc["discoverable"], false);
    assert_eq!(doc["indexable"], true);
    // Mastodon's terms are defined in the context.
    let terms = doc["@context"][3].clone();
    assert_eq!(terms["toot"], "http://joinmastodon.org/ns#");
    assert_eq!(terms["indexable"], "toot:indexable");
    assert_eq!(terms["PropertyValue"], "schema:PropertyValue");
    assert_eq!(terms["featured"]["@id"], "toot:featured");
    assert_eq!(terms["alsoKnownAs"]["@id"], "as:alsoKnownAs");
    // Its other account, by IRI; it moved nowhere.
    assert_eq!(
        doc["alsoKnownAs"],
        json!(["https://old.example/users/echo"])
    );
    assert!(doc.get("movedTo").is_none(), "{doc}");

    // The avatar file: stored, served at a URL naming its content hash, with its type.
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(png()));
    assert_eq!(doc["icon"]["type"], "Image");
    assert_eq!(doc["icon"]["mediaType"], "image/png");
    let icon = doc["icon"]["url"].as_str().unwrap();
    assert_eq!(icon, format!("{echo}/images/{digest}.png"));
    let r = http.get(icon).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    let cache = r.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(
        cache.contains("max-age=31536000") && cache.contains("immutable"),
        "{cache}"
    );
    assert_eq!(r.bytes().await.unwrap().to_vec(), png());
    // The header URL is published as it is, its type from the extension.
    assert_eq!(
        doc["image"],
        json!({"type": "Image", "mediaType": "image/jpeg", "url": "https://cdn.example/banner.jpg"})
    );
    // Only the profile's images are served there: not another blob, not another agent's path.
    let other = t
        .app()
        .pipeline()
        .blobs()
        .put(b"secret attachment", "text/plain")
        .await
        .unwrap();
    for url in [
        format!("{echo}/images/{}.png", other.digest),
        format!("{}/agents/helper/images/{digest}.png", t.base),
    ] {
        assert_eq!(http.get(&url).send().await.unwrap().status(), 404, "{url}");
    }

    // Fields: PropertyValues, links as Mastodon renders them, rel="me" only where asked.
    let fields = doc["attachment"].as_array().unwrap();
    assert_eq!(fields.len(), 2);
    assert_eq!(fields[0]["type"], "PropertyValue");
    assert_eq!(fields[0]["name"], "Website");
    assert_eq!(
        fields[0]["value"],
        "<a href=\"https://example.com\" rel=\"me nofollow noopener noreferrer\" target=\"_blank\" translate=\"no\">\
         <span class=\"invisible\">https://</span><span class=\"\">example.com</span><span class=\"invisible\"></span></a>"
    );
    let source = fields[1]["value"].as_str().unwrap();
    assert!(
        source.contains("rel=\"nofollow noopener noreferrer\""),
        "{source}"
    );

    // Featured: the pinned notes, embedded, each dereferenceable at its id.
    assert_eq!(doc["featured"], format!("{echo}/featured"));
    let (status, _, featured) = get_ap(t, &format!("{echo}/featured")).await;
    assert_eq!(status, 200);
    assert_eq!(featured["type"], "OrderedCollection");
    assert_eq!(featured["totalItems"], 2);
    let items = featured["orderedItems"].as_array().unwrap();
    assert_eq!(items[0]["content"], "<p>Mention me to talk.</p>");
    for item in items {
        let (status, _, note) = get_ap(t, item["id"].as_str().unwrap()).await;
        assert_eq!(status, 200);
        assert_eq!(note["id"], item["id"]);
        assert_eq!(note["type"], "Note");
        assert_eq!(note["attributedTo"], echo);
        assert_eq!(note["to"], json!([mapping::PUBLIC]));
        assert_eq!(note["content"], item["content"]);
    }
    let (status, _, _) = get_ap(t, &format!("{echo}/pinned/0000000000000000")).await;
    assert_eq!(status, 404);

    // An agent without a profile keeps the defaults: a bot, discoverable, not indexable.
    let (_, _, helper) = get_ap(t, &format!("{}/agents/helper", t.base)).await;
    assert_eq!(helper["type"], "Service");
    assert_eq!(helper["discoverable"], true);
    assert_eq!(helper["indexable"], false);
    assert!(helper.get("icon").is_none(), "{helper}");
    assert_eq!(helper["attachment"], json!([]));
    let (_, _, empty) = get_ap(t, &format!("{}/agents/helper/featured", t.base)).await;
    assert_eq!(empty["totalItems"], 0);
}

/// Follows `echo` as `name` (signed as the remote actor) and waits for the Accept.
pub(crate) async fn follow(t: &crate::helpers::TestApp, remote: &Remote, name: &str) {
    let actor = remote.actor_url(name);
    let echo = format!("{}/agents/echo", t.base);
    let follow = json!({"@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{}/follows/{name}", remote.base), "type": "Follow", "actor": actor, "object": echo});
    let r = post_signed(
        &t.http,
        &format!("{echo}/inbox"),
        &serde_json::to_vec(&follow).unwrap(),
        &remote.key_id(name),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    wait_for(10, "the Accept", || async {
        remote
            .posts()
            .into_iter()
            .find(|p| p.2["type"] == "Accept" && p.2["object"]["actor"] == actor)
    })
    .await;
}

/// The Update jobs queued, by target inbox.
async fn update_jobs(db: &switchboard::store::Db) -> i64 {
    count(
        db,
        "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND payload LIKE '%#updates/%'",
        &[],
    )
    .await
}

on_both_engines!(a_changed_profile_is_announced_once_per_inbox);

async fn a_changed_profile_is_announced_once_per_inbox(engine: Engine) {
    let avatar = png_file();
    let first = full_profile(&avatar);
    // Every start at the same address, as a deployment's public URL stays the same.
    let bind: std::net::SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let p = first.clone();
    let mut s = setup(engine, move |c| {
        c.server.bind = bind;
        with_profile(c, p);
    })
    .await;
    let remote = s.remote.clone();
    // Two followers behind one shared inbox, one with an inbox of its own.
    remote.add_actor("alice");
    remote.add_actor("bob");
    remote.add_actor("carol");
    let carol_path = "/users/carol";
    let mut carol: Value =
        serde_json::from_str(&remote.docs.lock().unwrap()[carol_path].1).unwrap();
    carol.as_object_mut().unwrap().remove("endpoints");
    remote.set(carol_path, 200, &carol);
    for name in ["alice", "bob", "carol"] {
        follow(&s.t, &remote, name).await;
    }
    let db = s.t.open_db().await;
    assert_eq!(
        update_jobs(&db).await,
        0,
        "the first start had no followers to tell"
    );

    // The same profile again: nothing is sent.
    s.t.stop().await;
    let p = first.clone();
    let echo_agent = s.echo.clone();
    let mut t = spawn_on(s.t.db.take(), move |c, o| {
        c.server.bind = bind;
        with_profile(c, p);
        o.agents.push(("echo".into(), echo_agent));
    })
    .await;
    assert_eq!(
        update_jobs(&db).await,
        0,
        "an unchanged profile is not announced"
    );

    // A changed profile: one Update per inbox, the shared one once.
    t.stop().await;
    let mut second = first.clone();
    second.bot = true;
    second.pinned.push("New here.".into());
    let echo_agent = s.echo.clone();
    let p = second.clone();
    let t = spawn_on(t.db.take(), move |c, o| {
        c.server.bind = bind;
        with_profile(c, p);
        o.agents.push(("echo".into(), echo_agent));
    })
    .await;
    assert_eq!(update_jobs(&db).await, 2, "one Update per inbox");
    let echo = format!("{}/agents/echo", t.base);
    let updates = wait_for(20, "the Updates delivered", || async {
        let u: Vec<_> = remote
            .posts()
            .into_iter()
            .filter(|p| p.2["type"] == "Update")
            .collect();
        (u.len() == 2).then_some(u)
    })
    .await;
    let mut paths: Vec<&str> = updates.iter().map(|u| u.0.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/inbox", "/users/carol/inbox"]);
    for post in &updates {
        let body = &post.2;
        assert_eq!(body["actor"], echo);
        assert_eq!(body["object"]["id"], echo);
        assert_eq!(body["object"]["type"], "Service", "the new profile: {body}");
        assert_eq!(body["object"]["publicKey"]["owner"], echo);
        assert!(
            body["to"]
                .as_array()
                .unwrap()
                .contains(&json!(mapping::PUBLIC))
        );
        // Signed by the agent's key, over the bytes sent.
        assert_eq!(
            signed_by(&t.http, &remote, post).await,
            format!("{echo}#main-key")
        );
    }
    let (_, _, featured) = get_ap(&t, &format!("{echo}/featured")).await;
    assert_eq!(featured["totalItems"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_refuses_bad_profiles() {
    let mut c = switchboard::Config::default();
    let mut p = full_profile("/nonexistent/avatar.png");
    p.header = Some("http://cdn.example/banner.jpg".into());
    p.fields = (0..5)
        .map(|i| ProfileField {
            name: format!("f{i}"),
            value: "v".into(),
            rel_me: false,
        })
        .collect();
    p.fields[0].value = "x".repeat(256);
    p.pinned = vec![String::new(); 6];
    p.also_known_as = vec![
        "old.example/users/echo".into(),
        "@echo@".into(),
        "https://".into(),
    ];
    with_profile(&mut c, p);
    let problems = c.check().unwrap_err().to_string();
    for needle in [
        "agents[0].activitypub.header \"http://cdn.example/banner.jpg\": not an https URL",
        "agents[0].activitypub.fields: 5 fields, at most 4",
        "agents[0].activitypub.fields[0].value: 256 characters, at most 255",
        "agents[0].activitypub.pinned: 6 posts, at most 5",
        "agents[0].activitypub.pinned[0]: must not be empty",
        "agents[0].activitypub.also_known_as[0] \"old.example/users/echo\": must be an actor URL (https://…) or a handle (@user@host)",
        "agents[0].activitypub.also_known_as[1] \"@echo@\": must be",
        "agents[0].activitypub.also_known_as[2] \"https://\": not a valid URL",
    ] {
        assert!(problems.contains(needle), "{needle} in {problems}");
    }
    // The files: missing, or not an image.
    let env = switchboard::ops::check_environment(&c, &[]);
    assert!(
        env.iter()
            .any(|p| p.starts_with("agents[0].activitypub.avatar \"/nonexistent/avatar.png\"")),
        "{env:#?}"
    );
    let text = std::env::temp_dir().join(format!("sb-not-an-image-{}.png", uuid::Uuid::new_v4()));
    std::fs::write(&text, "hello").unwrap();
    let mut c = switchboard::Config::default();
    with_profile(&mut c, full_profile(text.to_str().unwrap()));
    assert!(c.check().is_ok(), "the values themselves are fine");
    let env = switchboard::ops::check_environment(&c, &[]);
    assert!(
        env.iter()
            .any(|p| p.contains("not a PNG, JPEG, GIF, WebP or AVIF image")),
        "{env:#?}"
    );
    let mut c = switchboard::Config::default();
    with_profile(&mut c, full_profile(&png_file()));
    let env = switchboard::ops::check_environment(&c, &[]);
    assert!(!env.iter().any(|p| p.contains("activitypub")), "{env:#?}");
}
