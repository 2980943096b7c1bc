//! `database.durability` seen from an SMTP client: with `fsync`, `250` comes only after the
//! message's commit is on disk — after a WAL sync on SQLite, on a connection that runs with
//! `synchronous_commit = on` on PostgreSQL; with `periodic`, no commit waits for a sync.

use switchboard::config::Durability;

use super::{Raw, spawn_email_on, transaction};
use crate::helpers::{Engine, on_both_engines};

on_both_engines!(a_250_in_fsync_mode_comes_once_the_message_is_on_disk);
async fn a_250_in_fsync_mode_comes_once_the_message_is_on_disk(engine: Engine) {
    for mode in [Durability::Periodic, Durability::Fsync] {
        let (mut app, _helper, addr) = spawn_email_on(engine, None, |c| {
            c.database.durability = Some(mode);
        })
        .await;
        let db = app.app().pipeline().db().clone();
        assert_eq!(db.durability(), mode);
        let before = db.wal_syncs();
        let mut r = Raw::connect(addr).await;
        transaction(&mut r, "bob@elsewhere.test", &["helper@agents.test"]).await;
        r.send(b"From: bob@elsewhere.test\r\nTo: helper@agents.test\r\nMessage-ID: <d1@elsewhere.test>\r\n\r\nkeep me\r\n.\r\n").await;
        let got = r.reply().await;
        assert!(got.starts_with("250 2.0.0 Message queued"), "{got}");
        match (engine, mode) {
            (Engine::Sqlite, Durability::Fsync) => assert!(
                db.wal_syncs() > before,
                "250 was sent before the WAL was synced"
            ),
            (Engine::Sqlite, Durability::Periodic) => assert_eq!(db.wal_syncs(), 0),
            (Engine::Postgres, _) => {
                let (setting,): (String,) = sqlx::query_as("SHOW synchronous_commit")
                    .fetch_one(db.postgres_pool().unwrap())
                    .await
                    .unwrap();
                let want = if mode == Durability::Fsync {
                    "on"
                } else {
                    "off"
                };
                assert_eq!(setting, want);
            }
        }
        app.stop().await;
    }
}
