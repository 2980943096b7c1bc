//! Agents moving between accounts: `also_known_as` published as `alsoKnownAs` (handles of our
//! own agents resolved without a lookup), `switchboard agents move` refusing an account that
//! does not name the agent, and a move publishing `movedTo` and sending followers the changed
//! actor and the `Move`, signed — through the library call the command makes and through the
//! command itself.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use switchboard::config::AgentActivityPubConfig;
use switchboard::transports::activitypub::{Moved, move_agent};

use super::profile::follow;
use super::remote::signed_by;
use super::{count, get_ap, setup};
use crate::helpers::{Engine, on_both_engines, wait_for};

/// Adds an echo agent `name` naming `aliases` among its other accounts.
pub(crate) fn add_agent(c: &mut switchboard::Config, name: &str, aliases: Vec<String>) {
    let mut agent = c.agents.iter().find(|a| a.name == "echo").cloned().unwrap();
    agent.name = name.into();
    agent.activitypub = Some(AgentActivityPubConfig {
        also_known_as: aliases,
        ..AgentActivityPubConfig::default()
    });
    c.agents.push(agent);
}

/// The `Move` jobs queued.
async fn move_jobs(db: &switchboard::store::Db) -> i64 {
    count(
        db,
        "SELECT COUNT(*) AS n FROM jobs WHERE kind = 'ap_deliver' AND payload LIKE '%#moves/%'",
        &[],
    )
    .await
}

async fn a_move_is_refused_unless_the_new_account_names_the_agent_then_sent_signed(engine: Engine) {
    let bind: std::net::SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let domain = bind.to_string();
    let config: Arc<Mutex<Option<switchboard::Config>>> = Arc::default();
    let kept = Arc::clone(&config);
    let s = setup(engine, move |c| {
        c.server.bind = bind;
        add_agent(c, "next", vec![format!("@echo@{domain}")]);
        add_agent(c, "third", vec![format!("@echo@{domain}")]);
        add_agent(c, "other", Vec::new());
        *kept.lock().unwrap() = Some(c.clone());
    })
    .await;
    let (t, remote) = (&s.t, &s.remote);
    let mut config = config.lock().unwrap().take().unwrap();
    config.server.public_url = Some(t.base.clone());
    let echo = format!("{}/agents/echo", t.base);
    let next = format!("{}/agents/next", t.base);

    // The handle of one of our agents is published as its actor IRI.
    let (_, _, doc) = get_ap(t, &next).await;
    assert_eq!(doc["alsoKnownAs"], json!([echo]), "{doc}");
    let (_, _, doc) = get_ap(t, &echo).await;
    assert!(
        doc.get("alsoKnownAs").is_none() && doc.get("movedTo").is_none(),
        "{doc}"
    );

    remote.add_actor("ann");
    remote.add_actor("bob");
    follow(t, remote, "ann").await;
    follow(t, remote, "bob").await;

    let parts = switchboard::app::offline_parts(config.clone())
        .await
        .unwrap();
    let db = t.open_db().await;
    // Refused: an account that does not name echo, echo itself, an unknown agent, garbage.
    let host = t.base.trim_start_matches("http://");
    for (agent, to, why) in [
        ("echo", format!("@other@{host}"), "does not name"),
        ("echo", format!("{}/agents/other", t.base), "does not name"),
        ("echo", echo.clone(), "itself"),
        ("nobody", next.clone(), "no agent is named"),
        ("echo", "next".to_owned(), "must be an actor URL"),
    ] {
        let e = move_agent(&parts, agent, &to)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{agent} → {to}: {e}");
    }
    assert_eq!(move_jobs(&db).await, 0, "a refused move sends nothing");
    let (_, _, doc) = get_ap(t, &echo).await;
    assert!(doc.get("movedTo").is_none(), "{doc}");

    // Moved by handle: recorded, published, and sent once to the remote's shared inbox.
    let moved = move_agent(&parts, "echo", &format!("@next@{host}"))
        .await
        .unwrap();
    assert_eq!(
        moved,
        Moved {
            from: echo.clone(),
            to: next.clone(),
            inboxes: 1,
        }
    );
    let (_, _, doc) = get_ap(t, &echo).await;
    assert_eq!(doc["movedTo"], next, "{doc}");
    assert_eq!(doc["@context"][3]["movedTo"]["@id"], "as:movedTo");
    let got = wait_for(20, "the Update and the Move", || async {
        let posts = remote.posts();
        let update = posts
            .iter()
            .find(|p| p.2["type"] == "Update" && p.2["object"]["movedTo"] == next)
            .cloned();
        let mv = posts.iter().find(|p| p.2["type"] == "Move").cloned();
        update.zip(mv)
    })
    .await;
    let (update, mv) = got;
    assert_eq!(update.2["actor"], echo);
    assert_eq!(
        (&mv.2["actor"], &mv.2["object"], &mv.2["target"]),
        (&json!(echo), &json!(echo), &json!(next)),
        "{}",
        mv.2
    );
    // Signed by echo over the bytes sent, and the Move arrived after the Update it follows.
    assert_eq!(
        signed_by(&t.http, remote, &mv).await,
        format!("{echo}#main-key")
    );
    let posts = remote.posts();
    let order: Vec<&str> = posts
        .iter()
        .filter_map(|p| p.2["type"].as_str())
        .filter(|k| matches!(*k, "Update" | "Move"))
        .collect();
    assert_eq!(order, ["Update", "Move"]);
    assert_eq!(move_jobs(&db).await, 1, "one job for the one shared inbox");

    // Within 30 days of a move, not elsewhere (though the account names echo too); to the same
    // account again, the Move is sent again.
    let e = move_agent(&parts, "echo", &format!("@third@{host}"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("30 days") && e.contains(&next), "{e}");
    assert_eq!(move_jobs(&db).await, 1, "a refused move sends nothing");
    let again = move_agent(&parts, "echo", &next).await.unwrap();
    assert_eq!((again.to.as_str(), again.inboxes), (next.as_str(), 1));
    assert_eq!(move_jobs(&db).await, 2);
    let (_, _, doc) = get_ap(t, &echo).await;
    assert_eq!(doc["movedTo"], next, "{doc}");
    parts.db.close().await;
    db.close().await;
}

on_both_engines!(a_move_is_refused_unless_the_new_account_names_the_agent_then_sent_signed);

/// `switchboard agents move` itself: the binary, given the server's configuration file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_move_command_moves_an_agent() {
    let config: Arc<Mutex<Option<switchboard::Config>>> = Arc::default();
    let kept = Arc::clone(&config);
    let s = setup(Engine::Sqlite, move |c| {
        add_agent(c, "next", Vec::new());
        *kept.lock().unwrap() = Some(c.clone());
    })
    .await;
    let t = &s.t;
    let echo = format!("{}/agents/echo", t.base);
    let mut config = config.lock().unwrap().take().unwrap();
    config.server.public_url = Some(t.base.clone());
    // `next` names echo: through the configuration the command reads (the server's copy
    // has none, so the move is judged by the file).
    if let Some(a) = config.agents.iter_mut().find(|a| a.name == "next") {
        a.activitypub = Some(AgentActivityPubConfig {
            also_known_as: vec![echo.clone()],
            ..AgentActivityPubConfig::default()
        });
    }
    let dir = std::env::temp_dir().join(format!("sb-move-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("switchboard.toml");
    // Secrets are written masked: the database comes from the environment, as it may.
    std::fs::write(&file, config.to_masked_toml().unwrap()).unwrap();
    let run = |to: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .env("SWITCHBOARD__DATABASE__URL", &t.db.url)
            .args(["--config", file.to_str().unwrap(), "agents", "move", "echo"])
            .args(["--to", to])
            .output()
            .unwrap()
    };
    let out = run("@nobody@");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be an actor URL"), "{err}");
    let next = format!("{}/agents/next", t.base);
    let out = run(&next);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("moved {echo} to {next}: Move queued for 0")),
        "{said}"
    );
    let (_, _, doc): (u16, String, Value) = get_ap(t, &echo).await;
    assert_eq!(doc["movedTo"], next, "{doc}");
}
