//! Retention (`database.retention_days`): the retention task erases the messages and
//! responses stored more than that many days ago, the blobs stored as long ago that nothing
//! refers to any more, the received ActivityPub notes and the A2A tasks as old; newer ones
//! stay, and so do the blobs a newer message still refers to and the dedupe keys.

use std::sync::Arc;

use serde_json::json;
use switchboard::clock::{Clock, ManualClock, SystemClock};
use switchboard::message::NormalizedMessage;
use switchboard::store::{Arg, Db, messages};

use crate::helpers::{
    Engine, RecordingAgent, a2a_send, a2a_task_ended, message, on_both_engines, spawn_app, wait_for,
};

const DAY_MS: i64 = 86_400_000;

/// `msg` with a file part referring to each of `digests`.
fn with_files(mut msg: NormalizedMessage, digests: &[&str]) -> NormalizedMessage {
    for d in digests {
        msg.parts.push(
            serde_json::from_value(json!({
                "kind": "file", "name": "f.bin", "mime": "application/octet-stream", "size": 1,
                "bytes_ref": {"kind": "content_addressed", "algo": "sha256", "digest": d}
            }))
            .unwrap(),
        );
    }
    msg
}

async fn n(db: &Db, sql: &str, args: &[Arg<'_>]) -> i64 {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct N {
        n: i64,
    }
    let r: Option<N> = db.fetch_optional(sql, args).await.unwrap();
    r.map_or(0, |r| r.n)
}

async fn blob_exists(db: &Db, digest: &str) -> bool {
    n(
        db,
        "SELECT COUNT(*) AS n FROM blobs WHERE digest = $1",
        &[Arg::Text(digest)],
    )
    .await
        == 1
}

async fn note_row(db: &Db, id: &str, kind: &str, at: i64) {
    db.execute(
        "INSERT INTO ap_objects (id, kind, agent, author, message_id, thread_key, public, body, created_at, updated_at) \
         VALUES ($1, $2, 'rec', 'https://remote.example/users/a', NULL, $1, 1, '{\"content\":\"words\"}', $3, $3)",
        &[Arg::Text(id), Arg::Text(kind), Arg::Int(at)],
    )
    .await
    .unwrap();
}

async fn retention_erases_what_is_older_than_its_days(engine: Engine) {
    let clock = ManualClock::new(SystemClock.now_ms());
    let agent = Arc::new(RecordingAgent::default());
    let (c2, a2) = (clock.clone(), agent.clone());
    let mut t = spawn_app(engine, move |c, o| {
        c.database.retention_days = 1;
        o.clock = c2;
        o.agents.push(("rec".into(), a2));
    })
    .await;
    let db = t.open_db().await;
    let blobs = t.app().pipeline().blobs().clone();
    let put = |bytes: &'static [u8]| {
        let blobs = blobs.clone();
        async move {
            blobs
                .put(bytes, "application/octet-stream")
                .await
                .unwrap()
                .digest
        }
    };
    let only_old = put(b"only the old message refers to this").await;
    let shared = put(b"the old and the new message refer to this").await;
    let garbage = put(b"nothing refers to this").await;
    let rec = t.agent("rec");
    let old = t
        .ingest(
            "old-1",
            with_files(message(&rec, "k-old", "old words"), &[&only_old, &shared]),
        )
        .await;
    wait_for(20, "the old answer", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;
    let old_answer = messages::response_to(&db, &old.message_id)
        .await
        .unwrap()
        .unwrap()
        .id;
    // An A2A task: its document holds the caller's message too.
    let (status, _, sent) = a2a_send(&t, "rec", None, "old a2a words").await;
    assert_eq!(status, 200, "{sent}");
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    a2a_task_ended(&t, "rec", &task).await;
    let start = clock.now_ms();
    note_row(&db, "https://remote.example/notes/old-in", "in", start).await;
    note_row(&db, "https://remote.example/notes/old-out", "out", start).await;

    // Two days later: a new message, referring to one of the old blobs and to a new one.
    clock.advance_ms(2 * DAY_MS);
    let fresh = put(b"the new message's own").await;
    let new = t
        .ingest(
            "new-1",
            with_files(message(&rec, "k-new", "new words"), &[&shared, &fresh]),
        )
        .await;
    note_row(
        &db,
        "https://remote.example/notes/new-in",
        "in",
        clock.now_ms(),
    )
    .await;
    wait_for(20, "the new answer", || async {
        (t.transport.count() == 2).then_some(())
    })
    .await;

    // The retention task runs within seconds of the clock passing a minute.
    wait_for(30, "retention to erase the old message", || async {
        messages::get(&db, &old.message_id)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_for(30, "retention to erase the old blobs and notes", || async {
        (!blob_exists(&db, &garbage).await
            && n(
                &db,
                "SELECT COUNT(*) AS n FROM ap_objects WHERE kind = 'in'",
                &[],
            )
            .await
                == 1)
            .then_some(())
    })
    .await;
    assert!(
        messages::get(&db, &old_answer).await.unwrap().is_none(),
        "the old answer is erased too"
    );
    wait_for(30, "retention to erase the old task", || async {
        (n(&db, "SELECT COUNT(*) AS n FROM a2a_tasks", &[]).await == 0).then_some(())
    })
    .await;
    assert_eq!(
        n(&db, "SELECT COUNT(*) AS n FROM a2a_task_events", &[]).await,
        0
    );
    let got: serde_json::Value = t
        .http
        .post(format!("{}/agents/rec/a2a", t.base))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": task}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["error"]["data"][0]["reason"], "TASK_NOT_FOUND", "{got}");
    assert!(!blob_exists(&db, &only_old).await);
    assert!(
        blob_exists(&db, &shared).await,
        "a newer message still refers to it"
    );
    assert!(blob_exists(&db, &fresh).await);
    let kept = messages::get(&db, &new.message_id).await.unwrap().unwrap();
    assert!(kept.body.contains("new words") && kept.deleted_at.is_none());
    assert!(
        messages::response_to(&db, &new.message_id)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        n(
            &db,
            "SELECT COUNT(*) AS n FROM blob_refs WHERE message_id = $1",
            &[Arg::Text(&old.message_id)]
        )
        .await,
        0
    );
    assert_eq!(
        n(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE body LIKE '%old words%' OR body LIKE '%old a2a words%'",
            &[]
        )
        .await,
        0
    );
    assert_eq!(
        n(
            &db,
            "SELECT COUNT(*) AS n FROM ap_objects WHERE id = 'https://remote.example/notes/old-out'",
            &[]
        )
        .await,
        1,
        "our agents' own notes stay"
    );
    assert_eq!(
        n(
            &db,
            "SELECT COUNT(*) AS n FROM ap_objects WHERE id = 'https://remote.example/notes/new-in'",
            &[]
        )
        .await,
        1
    );
    // The read API no longer knows it; its dedupe key stays.
    let r = t
        .http
        .get(format!("{}/api/v1/messages/{}", t.base, old.message_id))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let again = t.ingest("old-1", message(&rec, "k-old", "old words")).await;
    assert!(again.duplicate);
    assert_eq!(agent.seen.lock().unwrap().len(), 3);
    t.stop().await;
}
on_both_engines!(retention_erases_what_is_older_than_its_days);
