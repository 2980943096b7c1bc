//! Bots among bots on the fediverse: an automated party gets a small conversation budget with
//! each agent (a person never does), and two switchboards whose agents answer every mention
//! stop by themselves, by the agent chain's hop limit carried in `agentChain` or, with a long
//! one, by the budget.

use serde_json::json;
use switchboard::store::Arg;
use switchboard::transports::activitypub::sig;

use super::remote::{note_create, now_s, post_signed};
use super::{count, setup};
use crate::helpers::{Engine, TestApp, job_states, on_both_engines, spawn_app, wait_for};

/// Responses `t`'s agents stored.
async fn responses(t: &TestApp) -> i64 {
    count(
        t.app().pipeline().db(),
        "SELECT COUNT(*) AS n FROM messages WHERE direction = 'out'",
        &[],
    )
    .await
}

/// Inbound messages of `t` held for `reason`.
async fn held(t: &TestApp, reason: &str) -> i64 {
    count(
        t.app().pipeline().db(),
        "SELECT COUNT(*) AS n FROM messages WHERE outcome = 'held' AND error_class = $1",
        &[Arg::Text(reason)],
    )
    .await
}

/// Waits until none of `apps` has work left, and returns each one's responses: every job of
/// each is done (or dead), seen so twice in a row with nothing added between. Nothing moves
/// between switchboards but by a job (a delivery runs until the other side has stored what it
/// brings and queued its dispatch), so once they all rest nothing more can happen.
async fn settled(apps: &[&TestApp]) -> Vec<i64> {
    let last = std::sync::Mutex::new(None);
    wait_for(60, "the switchboards to have no work left", || async {
        let mut now = Vec::new();
        for t in apps {
            now.push(job_states(t.app().pipeline().db()).await);
        }
        let resting = now
            .iter()
            .all(|states| states.keys().all(|s| s == "done" || s == "dead"));
        let same = last.lock().unwrap().replace(now.clone()) == Some(now);
        (resting && same).then_some(())
    })
    .await;
    let mut out = Vec::new();
    for t in apps {
        out.push(responses(t).await);
    }
    out
}

async fn a_bot_gets_a_budget_and_a_person_does_not(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let echo = format!("{}/agents/echo", t.base);
    let mention = [(echo.as_str(), format!("@echo@{}", t.domain()))];
    let mention: Vec<(&str, &str)> = mention.iter().map(|(a, b)| (*a, b.as_str())).collect();
    remote.add_actor("alice");
    remote.add_bot("bot");
    let post = |author: &'static str, n: usize| {
        let create = note_create(
            remote,
            author,
            &format!("{author}-{n}"),
            vec![echo.clone()],
            vec![],
            &mention,
            "<p>ping</p>",
        );
        let body = serde_json::to_vec(&create).unwrap();
        let url = format!("{echo}/inbox");
        let key_id = remote.key_id(author);
        async move { post_signed(&t.http, &url, &body, &key_id, 0).await.status() }
    };
    for n in 0..8 {
        assert_eq!(post("bot", n).await, 202);
        assert_eq!(post("alice", n).await, 202);
    }
    // Every message is stored; the bot's past the fifth are held, the person's all answered.
    wait_for(20, "sixteen dispatches", || async {
        (s.echo.seen.lock().unwrap().len() >= 13 && held(t, "bot-loop").await == 3).then_some(())
    })
    .await;
    settled(&[t]).await;
    let seen = s.echo.seen.lock().unwrap().clone();
    let from = |who: &str| {
        seen.iter()
            .filter(|m| m.sender.address.starts_with(who))
            .count()
    };
    assert_eq!((from("@bot@"), from("@alice@")), (5, 8), "{seen:?}");
    assert!(
        seen.iter()
            .all(|m| m.sender.automated == m.sender.address.starts_with("@bot@"))
    );
    assert_eq!(held(t, "bot-loop").await, 3);
    let metrics = t.metrics().await;
    assert!(
        metrics.contains("switchboard_refused_total{agent=\"echo\",transport=\"activitypub\",reason=\"bot-loop\"} 3"),
        "{metrics}"
    );
    // The read API shows a held message as such.
    let id: String = {
        #[derive(sqlx::FromRow, serde::Deserialize)]
        struct Id {
            id: String,
        }
        let row: Option<Id> = t
            .app()
            .pipeline()
            .db()
            .fetch_optional(
                "SELECT id FROM messages WHERE outcome = 'held' ORDER BY seq LIMIT 1",
                &[],
            )
            .await
            .unwrap();
        row.unwrap().id
    };
    let view: serde_json::Value = t
        .http
        .get(format!("{}/api/v1/messages/{id}", t.base))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["status"], "held", "{view}");
    assert_eq!(view["reason"], "bot-loop", "{view}");
}
on_both_engines!(a_bot_gets_a_budget_and_a_person_does_not);

/// Two switchboards with the built-in echo agent (it answers every mention, addressing its
/// sender), each seeing the other's agent as the `Service` it is; `max_hops` as given.
async fn pair(engine: Engine, max_hops: Option<u32>) -> (TestApp, TestApp) {
    let tweak = move |c: &mut switchboard::Config, _: &mut switchboard::app::Options| {
        c.limits.max_hops = max_hops;
    };
    (
        spawn_app(engine, tweak).await,
        spawn_app(engine, tweak).await,
    )
}

/// Sets the exchange off: `b`'s echo agent mentions `a`'s in a note signed with its own key.
async fn first_mention(a: &TestApp, b: &TestApp) {
    let key = b
        .app()
        .pipeline()
        .keys()
        .rsa("ap:actor:echo")
        .await
        .unwrap();
    let (to, from) = (
        format!("{}/agents/echo", a.base),
        format!("{}/agents/echo", b.base),
    );
    let note = format!("{from}/notes/first");
    let create = json!({
        "@context": "https://www.w3.org/ns/activitystreams",
        "id": format!("{note}/activity"), "type": "Create", "actor": from, "to": [to],
        "object": {"id": note, "type": "Note", "attributedTo": from, "to": [to],
                   "content": "<p>hello, bot</p>", "published": "2026-11-27T00:00:00Z",
                   "tag": [{"type": "Mention", "href": to, "name": format!("@echo@{}", a.domain())}]},
    });
    let body = serde_json::to_vec(&create).unwrap();
    let url = url::Url::parse(&format!("{to}/inbox")).unwrap();
    let headers = sig::sign_cavage::<()>(
        "POST",
        &url,
        Some(&body),
        &format!("{from}#main-key"),
        now_s(),
        |m| Ok(key.sign_pkcs1_sha256(m).unwrap()),
    )
    .unwrap();
    let mut req = a
        .http
        .post(url.as_str())
        .header("content-type", "application/activity+json")
        .body(body);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    assert_eq!(req.send().await.unwrap().status(), 202);
}

async fn two_switchboards_stop_answering_each_other(engine: Engine) {
    // The default hop limit (3) ends it: a answers the first mention (hop 1), b answers that
    // (hop 2), a answers once more as the final hop, and b holds the next one.
    let (a, b) = pair(engine, None).await;
    first_mention(&a, &b).await;
    wait_for(30, "b to hold a hop past the limit", || async {
        (held(&b, "max-hops").await == 1).then_some(())
    })
    .await;
    assert_eq!(settled(&[&a, &b]).await, [2, 1]);
    assert_eq!(held(&a, "max-hops").await + held(&a, "bot-loop").await, 0);

    // With a chain long enough, the budget (5 per 10 minutes) ends it: each answers the other
    // five times, and a holds b's sixth.
    let (a, b) = pair(engine, Some(16)).await;
    first_mention(&a, &b).await;
    wait_for(60, "a bot loop to be held", || async {
        (held(&a, "bot-loop").await + held(&b, "bot-loop").await >= 1).then_some(())
    })
    .await;
    assert_eq!(
        settled(&[&a, &b]).await,
        [5, 5],
        "the budget bounds the exchange"
    );
    assert_eq!(held(&a, "bot-loop").await, 1);
}
on_both_engines!(two_switchboards_stop_answering_each_other);
