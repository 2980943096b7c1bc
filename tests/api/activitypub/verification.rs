//! Who sent an activity: bad input and bad signatures refused, the private-address guard on key
//! fetches, RFC 9421 and FEP-8b32 object proofs, GoToSocial-style key documents and `hs2019`,
//! and key claims that must never take over another host's actor.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::store::{Arg, Db};
use switchboard::transports::activitypub::{mapping, sig};

use super::remote::{
    PUB_PEM, Remote, add_ed25519, base64_of, note_create, now_s, post_rfc9421, post_signed,
    rsa_sign,
};
use super::{count, setup};
use crate::helpers::{Engine, on_both_engines, spawn_app, wait_for};

on_both_engines!(bad_input_is_refused);
on_both_engines!(a_slow_key_server_is_cut_off);

/// A key server that does not answer in time: the request's time budget ends it, with 503,
/// long before the key server would answer (30 s, against a budget of 1.5 s).
async fn a_slow_key_server_is_cut_off(engine: Engine) {
    let s = setup(engine, |c| c.activitypub.processing_timeout_ms = 1_500).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    remote
        .delays
        .lock()
        .unwrap()
        .insert("/slow/key".into(), Duration::from_secs(25));
    let echo = format!("{}/agents/echo", t.base);
    let d = t.domain();
    let create = note_create(
        remote,
        "alice",
        "slow",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi</p>",
    );
    let started = std::time::Instant::now();
    let r = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &serde_json::to_vec(&create).unwrap(),
        &format!("{}/slow/key#main-key", remote.base),
        0,
    )
    .await;
    assert_eq!(r.status().as_u16(), 503, "processing time bounded");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "cut off by the budget, not by the key server: {:?}",
        started.elapsed()
    );
}

async fn bad_input_is_refused(engine: Engine) {
    // The default time budget (10 s): a wrong signature's key refetch and second verification
    // fit in it however loaded the machine is.
    let s = setup(engine, |c| c.activitypub.max_body_bytes = 64 * 1024).await;
    let (t, remote) = (&s.t, &s.remote);
    remote.add_actor("alice");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{}/inbox", t.base);
    let d = t.domain();
    let key = remote.key_id("alice");
    let make = |n: &str| {
        note_create(
            remote,
            "alice",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hi</p>",
        )
    };
    let status = |r: reqwest::Response| r.status().as_u16();

    // Unsigned.
    let body = serde_json::to_vec(&make("b1")).unwrap();
    let r = t
        .http
        .post(&inbox)
        .header("content-type", "application/activity+json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 401, "unsigned");

    // Wrong signature: signed, then the signature bytes replaced.
    let u = url::Url::parse(&inbox).unwrap();
    let mut hs =
        sig::sign_cavage::<()>("POST", &u, Some(&body), &key, now_s(), |m| Ok(rsa_sign(m)))
            .unwrap();
    for h in &mut hs {
        if h.0 == "signature" {
            let other = base64_of(&rsa_sign(b"something else"));
            let cut = h.1.find("signature=\"").unwrap();
            h.1 = format!("{}signature=\"{other}\"", &h.1[..cut]);
        }
    }
    let mut req = t.http.post(&inbox).body(body.clone());
    for (k, v) in &hs {
        req = req.header(*k, v);
    }
    assert_eq!(status(req.send().await.unwrap()), 401, "wrong signature");
    // The failure forced one refetch of the key (rotation), and no more.
    assert_eq!(remote.gets_of("/users/alice"), 2);

    // Digest mismatch: headers signed for one body, another body sent.
    let mut req = t
        .http
        .post(&inbox)
        .body(serde_json::to_vec(&make("b2")).unwrap());
    let hs = sig::sign_cavage::<()>("POST", &u, Some(&body), &key, now_s(), |m| Ok(rsa_sign(m)))
        .unwrap();
    for (k, v) in &hs {
        req = req.header(*k, v);
    }
    assert_eq!(status(req.send().await.unwrap()), 401, "digest mismatch");

    // Stale and future dates.
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, -3 * 3600).await),
        401,
        "stale"
    );
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, 3 * 3600).await),
        401,
        "future"
    );

    // Unreachable key: the key URL answers 404.
    let ghost = make("b3");
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&ghost).unwrap(),
        &format!("{}/users/ghost#main-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 401, "key 404");
    // … or nobody listens there at all: worth a retry.
    let r = post_signed(
        &t.http,
        &inbox,
        &body,
        "http://127.0.0.1:9/users/x#main-key",
        0,
    )
    .await;
    assert_eq!(status(r), 503, "key host down");

    // (A key server that does not answer in time: `a_slow_key_server_is_cut_off`.)

    // Actor and activity id on different hosts.
    let mut forged = make("b4");
    forged["id"] = json!("https://elsewhere.example/activities/1");
    assert_eq!(
        status(
            post_signed(
                &t.http,
                &inbox,
                &serde_json::to_vec(&forged).unwrap(),
                &key,
                0
            )
            .await
        ),
        403,
        "host mismatch"
    );

    // Signed by someone who is not the actor.
    remote.add_actor("bob");
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &remote.key_id("bob"), 0).await),
        401,
        "signer is not the actor"
    );

    // Oversized, malformed and deeply nested bodies.
    let mut big = make("b5");
    big["object"]["content"] = json!("x".repeat(70 * 1024));
    assert_eq!(
        status(post_signed(&t.http, &inbox, &serde_json::to_vec(&big).unwrap(), &key, 0).await),
        413,
        "oversized"
    );
    assert_eq!(
        status(post_signed(&t.http, &inbox, b"{\"id\": ", &key, 0).await),
        400,
        "malformed"
    );
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let mut nested = make("b6");
    nested["object"]["junk"] = serde_json::from_str(&deep).unwrap();
    assert_eq!(
        status(
            post_signed(
                &t.http,
                &inbox,
                &serde_json::to_vec(&nested).unwrap(),
                &key,
                0
            )
            .await
        ),
        400,
        "nested"
    );

    // Replay: the same activity twice is 202 both times and dispatched once.
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, 0).await),
        202
    );
    assert_eq!(
        status(post_signed(&t.http, &inbox, &body, &key, 0).await),
        202
    );
    wait_for(10, "the call", || async {
        (!s.echo.seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.echo.seen.lock().unwrap().len(),
        1,
        "replay not dispatched"
    );
    let db = t.open_db().await;
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) AS n FROM messages WHERE direction = 'in'",
            &[]
        )
        .await,
        1
    );
    // No oracle: the same id, seen already, sent unsigned is 401 like any unsigned request,
    // so nobody learns from the answer which activity ids arrived.
    let unsigned = t
        .http
        .post(&inbox)
        .header("content-type", "application/activity+json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(status(unsigned), 401, "an unsigned replay");

    // A Delete from an actor that is gone (its key answers 410): 202, nothing else.
    remote.add_actor("gone");
    let follow = json!({"id": format!("{}/follows/g", remote.base), "type": "Follow", "actor": remote.actor_url("gone"), "object": echo});
    assert_eq!(
        status(
            post_signed(
                &t.http,
                &inbox,
                &serde_json::to_vec(&follow).unwrap(),
                &remote.key_id("gone"),
                0
            )
            .await
        ),
        202
    );
    let del = json!({"id": format!("{}/users/gone#delete", remote.base), "type": "Delete", "actor": remote.actor_url("gone"), "object": remote.actor_url("gone")});
    // A forged self-Delete signed with a key id that answers 404 while the actor is alive:
    // refused, the actor is kept, and the activity id is not burnt.
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&del).unwrap(),
        &format!("{}/users/nobody#main-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 401, "forged delete with a missing key");
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_followers", &[]).await,
        1,
        "the live actor's follow stays"
    );
    remote.set("/users/gone", 410, &json!({"type": "Tombstone"}));
    // The cached key would still verify; force the gone path by signing with a rotated key id.
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&del).unwrap(),
        &format!("{}/users/gone#other-key", remote.base),
        0,
    )
    .await;
    assert_eq!(status(r), 202, "delete from a gone actor");
    assert_eq!(
        count(&db, "SELECT COUNT(*) AS n FROM ap_followers", &[]).await,
        0,
        "its follow is gone too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_on_a_private_address_is_never_fetched() {
    let remote = Remote::start().await;
    remote.add_actor("alice");
    let t = spawn_app(Engine::Sqlite, |c, _| c.net.allow_private_addresses = false).await;
    let echo = format!("{}/agents/echo", t.base);
    let c = note_create(
        &remote,
        "alice",
        "p1",
        vec![echo.clone()],
        vec![],
        &[(&echo, "@echo@x")],
        "<p>hi</p>",
    );
    let r = post_signed(
        &t.http,
        &format!("{}/inbox", t.base),
        &serde_json::to_vec(&c).unwrap(),
        &remote.key_id("alice"),
        0,
    )
    .await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        remote.gets_of("/users/alice"),
        0,
        "the guard refused before connecting"
    );
}

on_both_engines!(rfc9421_and_object_proofs_authenticate);

async fn rfc9421_and_object_proofs_authenticate(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let alice = remote.add_actor("alice");
    let ed = add_ed25519(remote, "alice");
    remote.add_actor("bob");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{echo}/inbox");
    let d = t.domain();
    let make = |n: &str| {
        note_create(
            remote,
            "alice",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            "<p>hi</p>",
        )
    };

    // RFC 9421 with the RSA key, and with the Ed25519 key.
    let body = serde_json::to_vec(&make("r1")).unwrap();
    let r = post_rfc9421(
        &t.http,
        &inbox,
        &body,
        &remote.key_id("alice"),
        "rsa-v1_5-sha256",
        rsa_sign,
    )
    .await;
    assert_eq!(r.status(), 202, "rfc9421 rsa");
    let body = serde_json::to_vec(&make("r2")).unwrap();
    let r = post_rfc9421(
        &t.http,
        &inbox,
        &body,
        &format!("{alice}#ed25519"),
        "ed25519",
        |m| ed.sign(m).as_ref().to_vec(),
    )
    .await;
    assert_eq!(r.status(), 202, "rfc9421 ed25519");
    // Tampered body under RFC 9421: Content-Digest mismatch.
    let u = url::Url::parse(&inbox).unwrap();
    let hs = sig::sign_rfc9421::<()>(
        "POST",
        &u,
        Some(&body),
        &remote.key_id("alice"),
        "rsa-v1_5-sha256",
        now_s(),
        |m| Ok(rsa_sign(m)),
    )
    .unwrap();
    let mut req = t
        .http
        .post(&inbox)
        .body(serde_json::to_vec(&make("r3")).unwrap());
    for (k, v) in hs {
        req = req.header(k, v);
    }
    assert_eq!(
        req.send().await.unwrap().status(),
        401,
        "content-digest mismatch"
    );

    // A forwarded activity: HTTP-signed by bob, carrying alice's FEP-8b32 proof.
    let at = |offset_s: i64| {
        use switchboard::clock::Clock as _;
        let ms = switchboard::clock::SystemClock.now_ms() + offset_s * 1000;
        switchboard::message::Timestamp::from_unix_millis(ms)
            .as_datetime()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let mut fwd = make("r4");
    switchboard::transports::activitypub::proof::attach(
        &mut fwd,
        &format!("{alice}#ed25519"),
        &at(-60),
        |m| ed.sign(m).as_ref().to_vec(),
    );
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&fwd).unwrap(),
        &remote.key_id("bob"),
        0,
    )
    .await;
    assert_eq!(r.status(), 202, "forwarded with a proof");
    let msgs = wait_for(10, "three calls", || async {
        let v = s.echo.seen.lock().unwrap().clone();
        (v.len() == 3).then_some(v)
    })
    .await;
    let by_proof = msgs.iter().find(|m| m.raw["id"] == fwd["id"]).unwrap();
    assert_eq!(
        by_proof.sender.auth_method.as_str(),
        "ap-object-integrity-proof"
    );
    assert_eq!(
        by_proof.sender.key_id.as_deref(),
        Some(format!("{alice}#ed25519").as_str())
    );
    // The same forward with a tampered proof is refused.
    let mut bad = make("r5");
    switchboard::transports::activitypub::proof::attach(
        &mut bad,
        &format!("{alice}#ed25519"),
        &at(-60),
        |m| ed.sign(m).as_ref().to_vec(),
    );
    bad["object"]["content"] = json!("<p>changed</p>");
    let r = post_signed(
        &t.http,
        &inbox,
        &serde_json::to_vec(&bad).unwrap(),
        &remote.key_id("bob"),
        0,
    )
    .await;
    assert_eq!(r.status(), 401, "tampered proof");

    // Proofs that are not current are refused, though their signatures verify: made more than
    // a week ago, dated in the future, past their `expires`, or not dated at all.
    for (i, what) in [
        "a stale proof",
        "a proof from the future",
        "an expired proof",
        "an undated proof",
    ]
    .into_iter()
    .enumerate()
    {
        let created = match i {
            0 => at(-8 * 86_400),
            1 => at(2 * 3_600),
            _ => at(-60),
        };
        let mut doc = make(&format!("r6-{i}"));
        // The proof is signed as it stands, so only its dates are wrong.
        let mut probe = doc.clone();
        switchboard::transports::activitypub::proof::attach(
            &mut probe,
            &format!("{alice}#ed25519"),
            &created,
            |_| vec![0; 64],
        );
        let mut config = probe["proof"].clone();
        let c = config.as_object_mut().unwrap();
        c.remove("proofValue");
        match i {
            2 => {
                c.insert("expires".into(), json!(at(-7_200)));
            }
            3 => {
                c.remove("created");
            }
            _ => {}
        }
        doc["proof"] =
            switchboard::transports::activitypub::proof::sign_config(&doc, config, |m| {
                ed.sign(m).as_ref().to_vec()
            });
        let r = post_signed(
            &t.http,
            &inbox,
            &serde_json::to_vec(&doc).unwrap(),
            &remote.key_id("bob"),
            0,
        )
        .await;
        assert_eq!(r.status(), 401, "{what}");
    }
    assert_eq!(
        s.echo.seen.lock().unwrap().len(),
        3,
        "none of them dispatched"
    );
}

/// GoToSocial publishes its key as a separate document (`…/main-key`, no fragment) whose `owner`
/// is the actor; activitypub_federation signs `hs2019` with `(created)` and `(expires)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_documents_and_hs2019_with_created() {
    let s = setup(Engine::Sqlite, |_| {}).await;
    let (t, remote) = (&s.t, &s.remote);
    let gts = remote.actor_url("gts");
    let key_id = format!("{gts}/main-key");
    remote.set(
        "/users/gts",
        200,
        &json!({"id": gts, "type": "Person", "preferredUsername": "gts", "inbox": format!("{gts}/inbox"),
                "publicKey": {"id": key_id, "owner": gts, "publicKeyPem": PUB_PEM}}),
    );
    remote.set(
        "/users/gts/main-key",
        200,
        &json!({"id": key_id, "owner": gts, "publicKeyPem": PUB_PEM}),
    );
    let echo = format!("{}/agents/echo", t.base);
    let d = t.domain();
    let c = note_create(
        remote,
        "gts",
        "g1",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi</p>",
    );
    let body = serde_json::to_vec(&c).unwrap();
    let r = post_signed(&t.http, &format!("{echo}/inbox"), &body, &key_id, 0).await;
    assert_eq!(r.status(), 202, "fragment-less key document");

    // What GoToSocial really serves at its key URL: a stub of the actor (`id` = actor URL)
    // whose `publicKey.owner` names the actor.
    let gts2 = remote.actor_url("gts2");
    let key2 = format!("{gts2}/main-key");
    let stub = json!({"id": gts2, "type": "Person", "preferredUsername": "gts2",
        "publicKey": {"id": key2, "owner": gts2, "publicKeyPem": PUB_PEM}});
    let mut full = stub.clone();
    full["inbox"] = json!(format!("{gts2}/inbox"));
    remote.set("/users/gts2", 200, &full);
    remote.set("/users/gts2/main-key", 200, &stub);
    let c2 = note_create(
        remote,
        "gts2",
        "g2",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi again</p>",
    );
    let body2 = serde_json::to_vec(&c2).unwrap();
    let r = post_signed(&t.http, &format!("{echo}/inbox"), &body2, &key2, 0).await;
    assert_eq!(r.status(), 202, "GoToSocial's stub-actor key document");

    // hs2019 over (request-target) (created) (expires) digest, as activitypub_federation signs.
    let c = note_create(
        remote,
        "gts",
        "g2",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>hi</p>",
    );
    let body = serde_json::to_vec(&c).unwrap();
    let (created, expires) = (now_s(), now_s() + 3600);
    let digest = sig::digest_header(&body);
    let path = "/agents/echo/inbox";
    let signing = format!(
        "(request-target): post {path}\n(created): {created}\n(expires): {expires}\ndigest: {digest}"
    );
    let header = format!(
        "keyId=\"{key_id}\",algorithm=\"hs2019\",created={created},expires={expires},headers=\"(request-target) (created) (expires) digest\",signature=\"{}\"",
        base64_of(&rsa_sign(signing.as_bytes()))
    );
    let r = t
        .http
        .post(format!("{}{path}", t.base))
        .header("digest", digest)
        .header("signature", header)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "hs2019 with (created)/(expires)");
    wait_for(10, "two calls", || async {
        (s.echo.seen.lock().unwrap().len() == 2).then_some(())
    })
    .await;
}

/// An actor's row in `ap_actors`: its document and when it was fetched.
async fn cached_actor(db: &Db, id: &str) -> (Value, i64) {
    #[derive(sqlx::FromRow, serde::Deserialize)]
    struct Row {
        doc: String,
        fetched_at: i64,
    }
    let row: Row = db
        .fetch_optional(
            "SELECT doc, fetched_at FROM ap_actors WHERE id = $1",
            &[Arg::Text(id)],
        )
        .await
        .unwrap()
        .unwrap();
    (serde_json::from_str(&row.doc).unwrap(), row.fetched_at)
}

on_both_engines!(key_claims_cannot_take_over_another_actor);

/// Actor-cache poisoning: an attacker's documents on its own host name another host's actor
/// (bob) — as the id of a key the attacker publishes, or as the `id`/owner of a key document —
/// and none of it may change what bob resolves to: his replies still go to his inbox, his own
/// signatures verify from his cached entry (no refetch), signatures under those keys never
/// authenticate bob, and his `ap_actors` row is untouched.
async fn key_claims_cannot_take_over_another_actor(engine: Engine) {
    let s = setup(engine, |_| {}).await;
    let (t, victim) = (&s.t, &s.remote);
    let evil = Remote::start().await;
    let bob = victim.add_actor("bob");
    let bob_key = victim.key_id("bob");
    let echo = format!("{}/agents/echo", t.base);
    let inbox = format!("{}/inbox", t.base);
    let d = t.domain();
    let db = t.open_db().await;
    let creates = |r: &Remote| {
        r.posts()
            .into_iter()
            .filter(|(_, _, b)| b["type"] == "Create")
            .count()
    };
    let both = || creates(victim) + creates(&evil);
    // A mention of echo by bob, signed with `key_id`.
    let mention = |n: &str, key_id: &str| {
        let c = note_create(
            victim,
            "bob",
            n,
            vec![echo.clone()],
            vec![],
            &[(&echo, &format!("@echo@{d}"))],
            &format!("<p>{n}</p>"),
        );
        let body = serde_json::to_vec(&c).unwrap();
        let (http, inbox, key_id) = (t.http.clone(), inbox.clone(), key_id.to_owned());
        async move { post_signed(&http, &inbox, &body, &key_id, 0).await.status() }
    };
    // A Like by an evil actor, signed with its own key: authenticates it (caching its
    // document) and is otherwise ignored.
    let like = |name: &str| {
        let like = json!({"id": format!("{}/likes/{name}", evil.base), "type": "Like",
            "actor": evil.actor_url(name), "object": format!("{}/notes/x", evil.base)});
        let body = serde_json::to_vec(&like).unwrap();
        let (http, inbox, key_id) = (t.http.clone(), inbox.clone(), evil.key_id(name));
        async move { post_signed(&http, &inbox, &body, &key_id, 0).await.status() }
    };

    // bob mentions echo and is answered at his own inbox.
    assert_eq!(mention("b1", &bob_key).await, 202);
    wait_for(15, "the first reply", || async {
        (creates(victim) == 1).then_some(())
    })
    .await;
    let original = cached_actor(&db, &bob).await;
    assert_eq!(original.0["inbox"], format!("{bob}/inbox"));
    assert_eq!(victim.gets_of("/users/bob"), 1);

    // mallory publishes a second key whose id is bob's actor IRI, and authenticates.
    let mallory = evil.add_actor("mallory");
    let mut doc: Value =
        serde_json::from_str(&evil.docs.lock().unwrap()["/users/mallory"].1).unwrap();
    doc["publicKey"] = json!([
        doc["publicKey"].clone(),
        {"id": bob, "owner": mallory, "publicKeyPem": PUB_PEM},
    ]);
    evil.set("/users/mallory", 200, &doc);
    assert_eq!(like("mallory").await, 202);
    // bob's next mention is still answered at bob's inbox, not mallory's.
    assert_eq!(mention("b2", &bob_key).await, 202);
    wait_for(15, "the second reply", || async {
        (both() == 2).then_some(())
    })
    .await;
    assert_eq!(creates(victim), 2, "bob's reply went to bob");
    assert_eq!(creates(&evil), 0, "nothing went to mallory");

    // trudy publishes an Ed25519 key under bob's key id, and authenticates.
    evil.add_actor("trudy");
    let trudy_ed = {
        use ring::signature::KeyPair as _;
        let pkcs8 =
            ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
                .unwrap();
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let raw: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
        let mut doc: Value =
            serde_json::from_str(&evil.docs.lock().unwrap()["/users/trudy"].1).unwrap();
        doc["assertionMethod"] = json!([{
            "id": bob_key, "type": "Multikey", "controller": evil.actor_url("trudy"),
            "publicKeyMultibase": switchboard::transports::activitypub::proof::ed25519_multikey(&raw),
        }]);
        evil.set("/users/trudy", 200, &doc);
        pair
    };
    assert_eq!(like("trudy").await, 202);
    // bob's own signature still verifies from his cached entry: no refetch was needed.
    assert_eq!(mention("b3", &bob_key).await, 202);
    assert_eq!(
        victim.gets_of("/users/bob"),
        1,
        "bob's cached key was not displaced"
    );
    // trudy's key under bob's key id does not authenticate a Create as bob.
    let forged = note_create(
        victim,
        "bob",
        "b4",
        vec![echo.clone()],
        vec![],
        &[(&echo, &format!("@echo@{d}"))],
        "<p>forged</p>",
    );
    let r = post_rfc9421(
        &t.http,
        &inbox,
        &serde_json::to_vec(&forged).unwrap(),
        &bob_key,
        "ed25519",
        |m| trudy_ed.sign(m).as_ref().to_vec(),
    )
    .await;
    assert_eq!(r.status(), 401, "trudy's key under bob's key id");
    // (That failure refetched bob once, as any failing signature does: key rotation.)
    let before = cached_actor(&db, &bob).await;
    let bob_gets = victim.gets_of("/users/bob");

    // Key documents on the evil host that name bob: a document claiming to be bob (its own
    // URL as owner), a key whose owner is bob, a GoToSocial-like stub whose id is bob. A
    // Create as bob signed under any of them is refused.
    let stub = |kid: &str| {
        json!({"id": bob, "type": "Person", "preferredUsername": "bob",
            "inbox": format!("{}/inbox", evil.base),
            "publicKey": {"id": kid, "publicKeyPem": PUB_PEM}})
    };
    let k1 = format!("{}/keys/k1", evil.base);
    let mut claims_bob = stub(&k1);
    claims_bob["owner"] = json!(k1);
    evil.set("/keys/k1", 200, &claims_bob);
    let k2 = format!("{}/keys/k2", evil.base);
    evil.set(
        "/keys/k2",
        200,
        &json!({"id": k2, "owner": bob, "publicKeyPem": PUB_PEM}),
    );
    let k3 = format!("{}/keys/k3", evil.base);
    evil.set("/keys/k3", 200, &stub(&k3));
    for (n, path, k) in [
        ("b5", "/keys/k1", &k1),
        ("b6", "/keys/k2", &k2),
        ("b7", "/keys/k3", &k3),
    ] {
        assert_eq!(mention(n, k).await, 401, "key document {k}");
        assert_eq!(victim.gets_of("/users/bob"), bob_gets, "{k} sent us to bob");
        assert_eq!(evil.gets_of(path), 1);
    }
    assert_eq!(
        cached_actor(&db, &bob).await,
        before,
        "bob's cached entry is untouched"
    );
    assert_eq!(
        victim.gets_of("/users/bob"),
        bob_gets,
        "nor was bob refetched"
    );

    // Through all of it bob's cached document stayed his own.
    assert_eq!(before.0, original.0);
    // Only bob's three genuine mentions were dispatched, and every reply went to bob.
    wait_for(15, "the third reply", || async {
        (both() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = s.echo.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|m| m.sender.address == format!("@bob@{}", mapping::host_of(&bob).unwrap()))
    );
    assert_eq!(creates(victim), 3);
    assert_eq!(creates(&evil), 0);
}
