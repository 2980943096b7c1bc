//! Deletion deletes: a signed `Delete` from a note's author (or an `Undo` of its `Create`)
//! erases the messages it became — text, attachments no other message refers to, raw wire
//! form —, keeps what threading needs, takes the turn out of the history the agents see later,
//! and the read API and the console show it deleted. A Delete from anyone else, of something
//! unknown, replayed or repeated changes nothing; a message deleted before its turn never
//! reaches its agent.

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard::message::{NormalizedMessage, NormalizedResponse, Part};
use switchboard::store::{Arg, Db};
use switchboard::transports::activitypub::mapping;

use super::count;
use super::remote::{Remote, note_create, post_signed};
use crate::helpers::{Engine, TestApp, on_both_engines, spawn_app, wait_for};

/// Records what it is given and answers "noted" (never the text it was sent, so that the
/// answer, which stays, does not carry what was deleted); a message saying "hold" waits for
/// `gate` first.
#[derive(Debug)]
struct Noting {
    seen: std::sync::Mutex<Vec<NormalizedMessage>>,
    gate: tokio::sync::Semaphore,
}

impl Default for Noting {
    fn default() -> Self {
        Self {
            seen: std::sync::Mutex::default(),
            gate: tokio::sync::Semaphore::new(0),
        }
    }
}

impl Noting {
    fn seen(&self) -> Vec<NormalizedMessage> {
        self.seen.lock().unwrap().clone()
    }

    async fn nth(&self, n: usize) -> NormalizedMessage {
        wait_for(20, &format!("call {n}"), || async {
            self.seen().get(n - 1).cloned()
        })
        .await
    }
}

#[async_trait::async_trait]
impl switchboard::agents::AgentBackend for Noting {
    async fn respond(
        &self,
        msg: &NormalizedMessage,
    ) -> Result<Option<NormalizedResponse>, switchboard::error::OutboundError> {
        self.seen.lock().unwrap().push(msg.clone());
        if text_of(msg).contains("hold") {
            let _permit = self.gate.acquire().await;
        }
        Ok(Some(NormalizedResponse::reply_to(
            msg,
            vec![Part::text("noted")],
        )))
    }
}

fn text_of(msg: &NormalizedMessage) -> String {
    msg.parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.content.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Everything the agent was shown of earlier turns, as one string.
fn history_of(msg: &NormalizedMessage) -> String {
    serde_json::to_string(&msg.history).unwrap()
}

struct Setup {
    t: TestApp,
    remote: Remote,
    echo: Arc<Noting>,
    helper: Arc<Noting>,
    inbox: String,
}

async fn setup(engine: Engine) -> Setup {
    let remote = Remote::start().await;
    let echo = Arc::new(Noting::default());
    let helper = Arc::new(Noting::default());
    let (e, h) = (echo.clone(), helper.clone());
    let t = spawn_app(engine, move |_, o| {
        o.agents.push(("echo".into(), e));
        o.agents.push(("helper".into(), h));
    })
    .await;
    remote.add_actor("alice");
    remote.add_actor("mallory");
    let inbox = format!("{}/inbox", t.base);
    Setup {
        t,
        remote,
        echo,
        helper,
        inbox,
    }
}

impl Setup {
    fn agent_iri(&self, name: &str) -> String {
        format!("{}/agents/{name}", self.t.base)
    }

    /// A public note by alice mentioning `agents`, in reply to `parent` when given.
    fn note(&self, n: &str, agents: &[&str], text: &str, parent: Option<&str>) -> Value {
        let d = self.t.domain();
        let iris: Vec<String> = agents.iter().map(|a| self.agent_iri(a)).collect();
        let handles: Vec<String> = agents.iter().map(|a| format!("@{a}@{d}")).collect();
        let mentions: Vec<(&str, &str)> = iris
            .iter()
            .zip(&handles)
            .map(|(i, h)| (i.as_str(), h.as_str()))
            .collect();
        let mut c = note_create(
            &self.remote,
            "alice",
            n,
            vec![mapping::PUBLIC.into()],
            iris.clone(),
            &mentions,
            &format!("<p>{} {text}</p>", handles.join(" ")),
        );
        if let Some(p) = parent {
            c["object"]["inReplyTo"] = json!(p);
        }
        c
    }

    /// Posts `activity` signed by `who`; returns the status.
    async fn post(&self, activity: &Value, who: &str) -> u16 {
        post_signed(
            &self.t.http,
            &self.inbox,
            &serde_json::to_vec(activity).unwrap(),
            &self.remote.key_id(who),
            0,
        )
        .await
        .status()
        .as_u16()
    }

    fn delete_of(&self, n: &str, note_id: &str, who: &str) -> Value {
        json!({"id": format!("{}/deletes/{n}", self.remote.base), "type": "Delete",
               "actor": self.remote.actor_url(who),
               "to": [mapping::PUBLIC],
               "object": {"id": note_id, "type": "Tombstone"}})
    }

    async fn api(&self, path: &str) -> (u16, Value) {
        let r = self
            .t
            .http
            .get(format!("{}{path}", self.t.base))
            .bearer_auth("test-token")
            .send()
            .await
            .unwrap();
        let code = r.status().as_u16();
        (code, r.json().await.unwrap_or(Value::Null))
    }
}

/// A stored message row, read straight from the database.
#[derive(Debug, sqlx::FromRow, serde::Deserialize)]
struct Row {
    id: String,
    body: String,
    deleted_at: Option<i64>,
}

async fn inbound_rows(db: &Db) -> Vec<Row> {
    db.fetch_all(
        "SELECT id, body, deleted_at FROM messages WHERE direction = 'in' ORDER BY seq",
        &[],
    )
    .await
    .unwrap()
}

async fn blob_count(db: &Db, digest: &str) -> i64 {
    count(
        db,
        "SELECT COUNT(*) AS n FROM blobs WHERE digest = $1",
        &[Arg::Text(digest)],
    )
    .await
}

/// The digest of the first stored file part of `body`.
fn digest_in(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap();
    v["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kind"] == "file")
        .and_then(|p| p["bytes_ref"]["digest"].as_str())
        .unwrap()
        .to_owned()
}

on_both_engines!(a_delete_from_its_author_erases_what_the_note_became);

async fn a_delete_from_its_author_erases_what_the_note_became(engine: Engine) {
    let s = setup(engine).await;
    let png = b"\x89PNG\r\n\x1a\nthe kumquat picture".to_vec();
    s.remote
        .media
        .lock()
        .unwrap()
        .insert("/media/k.png".into(), ("image/png".into(), png));
    // One note to two agents, with a picture: two stored copies, one blob.
    let mut c = s.note("d1", &["echo", "helper"], "my kumquat secret", None);
    c["object"]["attachment"] = json!([{"type": "Document", "mediaType": "image/png",
        "url": format!("{}/media/k.png", s.remote.base), "name": "kumquat.png"}]);
    let note_id = c["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.post(&c, "alice").await, 202);
    assert!(text_of(&s.echo.nth(1).await).contains("kumquat"));
    assert!(text_of(&s.helper.nth(1).await).contains("kumquat"));
    let db = s.t.open_db().await;
    // Both answers are stored before the note is deleted.
    wait_for(20, "both answers", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE direction = 'out'",
            &[],
        )
        .await
            == 2)
            .then_some(())
    })
    .await;
    let before = inbound_rows(&db).await;
    assert_eq!(before.len(), 2);
    let digest = digest_in(&before[0].body);
    assert_eq!(digest, digest_in(&before[1].body));
    assert_eq!(blob_count(&db, &digest).await, 1);

    // The author deletes it.
    assert_eq!(
        s.post(&s.delete_of("1", &note_id, "alice"), "alice").await,
        202
    );

    // Straight from the database: the text, the attachment and the raw form are gone; what
    // threading needs stays.
    let after = inbound_rows(&db).await;
    assert_eq!(after.len(), 2, "the rows stay, for dedupe and threading");
    for row in &after {
        assert!(row.deleted_at.is_some(), "{row:?}");
        assert!(!row.body.contains("kumquat"), "{}", row.body);
        assert!(!row.body.contains(&digest), "{}", row.body);
        let v: Value = serde_json::from_str(&row.body).unwrap();
        assert_eq!(v["parts"], json!([]));
        assert!(v.get("raw").is_none(), "{v}");
        let alice = s.remote.actor_url("alice");
        assert_eq!(
            v["sender"]["address"],
            json!(format!("@alice@{}", mapping::host_of(&alice).unwrap()))
        );
        assert!(v["thread_id"].is_string());
    }
    assert_eq!(blob_count(&db, &digest).await, 0, "the picture is erased");
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM blob_refs", &[]).await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_objects WHERE id = $1 AND deleted = 1 AND body NOT LIKE '%kumquat%'",
            &[Arg::Text(&note_id)]
        )
        .await,
        1,
        "the stored note is a tombstone"
    );
    // The agents' answers are theirs: they stay.
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE direction = 'out' AND deleted_at IS NULL",
            &[]
        )
        .await,
        2
    );

    // The read API shows it deleted, without its parts.
    let id = &after[0].id;
    let (code, v) = s.api(&format!("/api/v1/messages/{id}")).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["deleted"], true, "{v}");
    assert!(v["deleted_at"].is_string(), "{v}");
    assert_eq!(v["message"]["parts"], json!([]));
    assert!(!v.to_string().contains("kumquat"), "{v}");
    let thread = v["thread_id"].as_str().unwrap().to_owned();
    let (code, th) = s.api(&format!("/api/v1/threads/{thread}")).await;
    assert_eq!(code, 200);
    let entry = th["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == json!(id))
        .unwrap()
        .clone();
    assert_eq!(entry["deleted"], true, "{entry}");
    assert!(!th.to_string().contains("kumquat"), "{th}");
    // And so does the console.
    let console = |path: String| {
        let http = s.t.http.clone();
        let addr = s.t.app().metrics_addr();
        async move {
            http.get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let page = console(format!("/console/messages/{id}")).await;
    assert!(page.contains("id=\"deleted\""), "{page}");
    assert!(!page.contains("kumquat"), "{page}");
    let page = console(format!("/console/threads/{thread}")).await;
    assert!(page.contains(">deleted<"), "{page}");
    assert!(!page.contains("kumquat"), "{page}");

    // The next turn of the thread: its agent is shown its own answer, not the deleted note.
    let reply = s.note("d2", &["echo"], "and another thing", Some(&note_id));
    assert_eq!(s.post(&reply, "alice").await, 202);
    let next = s.echo.nth(2).await;
    assert!(text_of(&next).contains("another thing"));
    assert_eq!(next.thread_id, thread, "the thread continues");
    let history = history_of(&next);
    assert!(!history.contains("kumquat"), "{history}");
    let shown: Vec<String> = next
        .history
        .iter()
        .flatten()
        .filter_map(|h| h.id.clone())
        .collect();
    assert!(
        after.iter().all(|r| !shown.contains(&r.id)),
        "the deleted turns are left out, not shown empty: {history}"
    );
    assert!(history.contains("noted"), "its own answer stays: {history}");

    // The same Delete again (a replay), another Delete of the note, and a Delete of a note
    // never seen: 202, and nothing changes.
    let snapshot = |rows: Vec<Row>| {
        rows.into_iter()
            .map(|r| (r.id, r.body, r.deleted_at))
            .collect::<Vec<_>>()
    };
    let erased = snapshot(inbound_rows(&db).await);
    #[derive(sqlx::FromRow, serde::Deserialize, PartialEq, Debug)]
    struct Obj {
        body: String,
        updated_at: i64,
    }
    let obj = || async {
        db.fetch_optional::<Obj>(
            "SELECT body, updated_at FROM ap_objects WHERE id = $1",
            &[Arg::Text(&note_id)],
        )
        .await
        .unwrap()
    };
    let stored_note = obj().await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(
        s.post(&s.delete_of("1", &note_id, "alice"), "alice").await,
        202
    );
    assert_eq!(
        s.post(&s.delete_of("2", &note_id, "alice"), "alice").await,
        202
    );
    let unknown = format!("{}/notes/never-seen", s.remote.base);
    assert_eq!(
        s.post(&s.delete_of("3", &unknown, "alice"), "alice").await,
        202
    );
    assert_eq!(snapshot(inbound_rows(&db).await), erased);
    assert_eq!(obj().await, stored_note);
}

on_both_engines!(a_delete_from_anyone_else_erases_nothing);

async fn a_delete_from_anyone_else_erases_nothing(engine: Engine) {
    let s = setup(engine).await;
    let png = b"\x89PNG\r\n\x1a\nalice's own picture".to_vec();
    s.remote
        .media
        .lock()
        .unwrap()
        .insert("/media/a.png".into(), ("image/png".into(), png));
    let mut c = s.note("o1", &["echo"], "alice wrote this", None);
    c["object"]["attachment"] = json!([{"type": "Document", "mediaType": "image/png",
        "url": format!("{}/media/a.png", s.remote.base)}]);
    let note_id = c["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.post(&c, "alice").await, 202);
    s.echo.nth(1).await;
    let db = s.t.open_db().await;
    let before = inbound_rows(&db).await;
    let digest = digest_in(&before[0].body);

    // Mallory, signing as herself, deletes alice's note: accepted, and nothing is erased.
    assert_eq!(
        s.post(&s.delete_of("m1", &note_id, "mallory"), "mallory")
            .await,
        202
    );
    // Nor by an Undo of alice's Create.
    let undo = json!({"id": format!("{}/undos/m2", s.remote.base), "type": "Undo",
        "actor": s.remote.actor_url("mallory"), "object": c.clone()});
    assert_eq!(s.post(&undo, "mallory").await, 202);
    let after = inbound_rows(&db).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].deleted_at, None);
    assert_eq!(after[0].body, before[0].body);
    assert!(after[0].body.contains("alice wrote this"));
    assert_eq!(blob_count(&db, &digest).await, 1);
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM ap_objects WHERE id = $1 AND deleted = 0 AND body LIKE '%alice wrote this%'",
            &[Arg::Text(&note_id)]
        )
        .await,
        1
    );
    let (_, v) = s.api(&format!("/api/v1/messages/{}", after[0].id)).await;
    assert!(v.get("deleted").is_none(), "{v}");
}

on_both_engines!(an_undo_of_a_create_erases_like_a_delete);

async fn an_undo_of_a_create_erases_like_a_delete(engine: Engine) {
    let s = setup(engine).await;
    // An Undo embedding the Create, and an Undo naming only the Create's id.
    let first = s.note("u1", &["echo"], "first kumquat", None);
    let second = s.note("u2", &["helper"], "second kumquat", None);
    assert_eq!(s.post(&first, "alice").await, 202);
    assert_eq!(s.post(&second, "alice").await, 202);
    s.echo.nth(1).await;
    s.helper.nth(1).await;
    let db = s.t.open_db().await;
    assert_eq!(inbound_rows(&db).await.len(), 2);
    let alice = s.remote.actor_url("alice");
    let undo_embedded = json!({"id": format!("{}/undos/1", s.remote.base), "type": "Undo",
        "actor": alice, "object": first.clone()});
    let undo_by_id = json!({"id": format!("{}/undos/2", s.remote.base), "type": "Undo",
        "actor": alice, "object": second["id"].clone()});
    assert_eq!(s.post(&undo_embedded, "alice").await, 202);
    assert_eq!(s.post(&undo_by_id, "alice").await, 202);
    for row in inbound_rows(&db).await {
        assert!(row.deleted_at.is_some(), "{row:?}");
        assert!(!row.body.contains("kumquat"), "{}", row.body);
    }
    for c in [&first, &second] {
        assert_eq!(
            count(
                &db,
                "SELECT COUNT(*) AS n FROM ap_objects WHERE id = $1 AND deleted = 1 AND body NOT LIKE '%kumquat%'",
                &[Arg::Text(c["object"]["id"].as_str().unwrap())]
            )
            .await,
            1
        );
    }
}

on_both_engines!(a_message_deleted_before_its_turn_never_reaches_its_agent);

async fn a_message_deleted_before_its_turn_never_reaches_its_agent(engine: Engine) {
    let s = setup(engine).await;
    // The first turn holds the thread; the second waits for it.
    let first = s.note("w1", &["echo"], "hold on", None);
    let first_id = first["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.post(&first, "alice").await, 202);
    s.echo.nth(1).await;
    let second = s.note("w2", &["echo"], "my kumquat secret", Some(&first_id));
    let second_id = second["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.post(&second, "alice").await, 202);
    let db = s.t.open_db().await;
    let rows = wait_for(10, "the second message stored", || async {
        let rows = inbound_rows(&db).await;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    let waiting = rows[1].id.clone();
    let (_, v) = s.api(&format!("/api/v1/messages/{waiting}")).await;
    assert!(
        v["status"] == "queued" || v["status"] == "dispatching",
        "{v}"
    );

    // Deleted while it waits: shown deleted at once.
    assert_eq!(
        s.post(&s.delete_of("w2", &second_id, "alice"), "alice")
            .await,
        202
    );
    let (_, v) = s.api(&format!("/api/v1/messages/{waiting}")).await;
    assert_eq!(v["status"], "deleted", "{v}");

    // The first turn ends; the second's job finds it deleted and ends without a call.
    s.echo.gate.add_permits(1);
    wait_for(20, "the second's job to end deleted", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE id = $1 AND outcome = 'deleted'",
            &[Arg::Text(&waiting)],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    let (code, v) = s.api(&format!("/api/v1/messages/{waiting}/response")).await;
    assert_eq!((code, &v["status"]), (409, &json!("deleted")), "{v}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let seen = s.echo.seen();
    assert_eq!(seen.len(), 1, "the agent was called once: {seen:?}");
    assert!(!serde_json::to_string(&seen).unwrap().contains("kumquat"));
}

/// Two instances on one PostgreSQL database: the note is deleted through the other instance
/// while its message waits for its turn on this one, which holds it in memory. The other's
/// `NOTIFY` makes this one forget it: its agent is never called with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_on_another_instance_reaches_what_this_one_holds() {
    if crate::helpers::postgres_url().is_none() {
        eprintln!("SWITCHBOARD_TEST_POSTGRES_URL is not set: PostgreSQL leg skipped");
        return;
    }
    let s = setup(Engine::Postgres).await;
    // The other instance: same database, no workers of its own, its own inbox.
    let url = s.t.db.url.clone();
    let other = crate::helpers::spawn_on(crate::helpers::TestDb::url_only(url), |_, o| {
        o.workers = false;
        o.agents.push(("echo".into(), Arc::new(Noting::default())));
        o.agents
            .push(("helper".into(), Arc::new(Noting::default())));
    })
    .await;
    let first = s.note("x1", &["echo"], "hold on", None);
    let first_id = first["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.post(&first, "alice").await, 202);
    s.echo.nth(1).await;
    let second = s.note("x2", &["echo"], "my kumquat secret", Some(&first_id));
    let second_id = second["object"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.post(&second, "alice").await, 202);
    let db = s.t.open_db().await;
    let rows = wait_for(10, "the second message stored", || async {
        let rows = inbound_rows(&db).await;
        (rows.len() == 2).then_some(rows)
    })
    .await;
    let waiting = rows[1].id.clone();

    let delete = s.delete_of("x2", &second_id, "alice");
    let r = post_signed(
        &other.http,
        &format!("{}/inbox", other.base),
        &serde_json::to_vec(&delete).unwrap(),
        &s.remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202);
    assert!(inbound_rows(&db).await[1].deleted_at.is_some());
    // The notification travels between the instances.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    s.echo.gate.add_permits(1);
    wait_for(20, "the second's job to end deleted", || async {
        (count(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE id = $1 AND outcome = 'deleted'",
            &[Arg::Text(&waiting)],
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    let seen = s.echo.seen();
    assert_eq!(seen.len(), 1, "the agent was called once: {seen:?}");
    assert!(!serde_json::to_string(&seen).unwrap().contains("kumquat"));
}
