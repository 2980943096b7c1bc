//! The ActivityPub transport over real HTTP: discovery documents, the verified inbox with its
//! bad-input cases, the addressing rule, follows, deletes and updates, replies delivered signed
//! to a loopback "remote server", fixtures shaped like Mastodon, GoToSocial, Misskey,
//! Pleroma/Akkoma and Lemmy payloads, minted thread contexts, long replies as threads of notes,
//! agents' profiles and the `Update` announcing a changed one, and the interop suites against a
//! real Fedify peer and a peer on the Rust `activitypub_federation` crate.
//!
//! `remote` is the fake remote server and the signing helpers; every other module is one group
//! of scenarios, and this one holds the setup they share.

mod blocks;
mod chunking;
mod contexts;
mod deletion;
mod delivery;
mod documents;
mod events;
mod fixtures;
mod handle_domain;
mod inbox;
mod interop;
mod interop_rs;
mod loops;
mod migration;
mod moderation;
mod multi_agent;
mod profile;
mod quotes;
pub(crate) mod remote;
mod verification;

use std::sync::Arc;

use serde_json::Value;
use switchboard::store::{Arg, Db};

use crate::helpers::{Engine, RecordingAgent, TestApp, spawn_app};
use remote::Remote;

/// The `n` column of the one row `sql` returns, or 0 without a row.
async fn count(db: &Db, sql: &str, args: &[Arg<'_>]) -> i64 {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let n: Option<N> = db.fetch_optional(sql, args).await.unwrap();
    n.map_or(0, |n| n.n)
}

/// GETs `url` as an ActivityPub client: status, content type, JSON body (null when not JSON).
pub(crate) async fn get_ap(t: &TestApp, url: &str) -> (u16, String, Value) {
    let r = t
        .http
        .get(url)
        .header("accept", "application/activity+json")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, ct, r.json().await.unwrap_or(Value::Null))
}

/// A running app with two recording agents, `echo` and `helper`, and a remote server.
struct Setup {
    t: TestApp,
    remote: Remote,
    echo: Arc<RecordingAgent>,
    helper: Arc<RecordingAgent>,
}

/// Starts the remote server and the app on `engine`, with `tweak` applied to its config.
async fn setup(engine: Engine, tweak: impl FnOnce(&mut switchboard::Config)) -> Setup {
    let remote = Remote::start().await;
    let echo = Arc::new(RecordingAgent::default());
    let helper = Arc::new(RecordingAgent::default());
    let (e, h) = (echo.clone(), helper.clone());
    let t = spawn_app(engine, move |c, o| {
        tweak(c);
        o.agents.push(("echo".into(), e));
        o.agents.push(("helper".into(), h));
    })
    .await;
    Setup {
        t,
        remote,
        echo,
        helper,
    }
}
