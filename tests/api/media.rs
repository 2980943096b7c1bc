//! Attachments: content-addressed storage, signed expiring `/media` URLs, and fresh URLs for
//! agents while storage keeps the digest only.

use std::sync::Arc;

use switchboard::clock::{Clock, ManualClock, SystemClock};
use switchboard::error::ErrorKind;
use switchboard::message::{BytesRef, Part};

use crate::helpers::{Engine, RecordingAgent, message, on_both_engines, spawn_app, wait_for};

async fn media_urls_are_signed_and_expire(engine: Engine) {
    let clock = ManualClock::new(SystemClock.now_ms());
    let c2 = clock.clone();
    let mut t = spawn_app(engine, move |c, o| {
        c.media.max_bytes = 1024;
        c.media.url_ttl_seconds = 60;
        o.clock = c2;
    })
    .await;
    let blobs = t.app().pipeline().blobs().clone();
    let r = blobs
        .put(b"<script>alert(1)</script>", "text/html")
        .await
        .unwrap();
    let again = blobs
        .put(b"<script>alert(1)</script>", "text/html")
        .await
        .unwrap();
    assert_eq!(r.digest, again.digest, "content-addressed");
    assert_eq!(r.digest.len(), 64);
    let url = r.url.unwrap();
    assert!(
        url.starts_with(&format!("{}/media/{}?exp=", t.base, r.digest)),
        "{url}"
    );

    let resp = t.http.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/html");
    assert!(
        resp.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(resp.text().await.unwrap(), "<script>alert(1)</script>");

    let tampered = format!("{}0", &url[..url.len() - 1]);
    let tampered = if tampered == url {
        format!("{}1", &url[..url.len() - 1])
    } else {
        tampered
    };
    assert_eq!(t.http.get(&tampered).send().await.unwrap().status(), 403);
    let bare = format!("{}/media/{}", t.base, r.digest);
    assert_eq!(t.http.get(&bare).send().await.unwrap().status(), 403);
    let unknown = "0".repeat(64);
    assert_eq!(
        t.http
            .get(blobs.url(&unknown))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        t.http
            .get(format!("{}/media/not-a-digest?exp=1&sig=x", t.base))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    clock.advance_ms(61_000);
    assert_eq!(
        t.http.get(&url).send().await.unwrap().status(),
        403,
        "expired"
    );
    assert_eq!(
        t.http
            .get(blobs.url(&r.digest))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "a fresh URL works"
    );

    let big = vec![0u8; 2048];
    assert_eq!(
        blobs
            .put(&big, "application/octet-stream")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::TooLarge
    );
    t.stop().await;
}
on_both_engines!(media_urls_are_signed_and_expire);

async fn agents_get_fresh_urls_and_storage_keeps_digests(engine: Engine) {
    let agent = Arc::new(RecordingAgent::default());
    let a2 = agent.clone();
    let mut t = spawn_app(engine, move |_, o| o.agents.push(("rec".into(), a2))).await;
    let blobs = t.app().pipeline().blobs().clone();
    let r = blobs
        .put(b"attachment bytes", "application/pdf")
        .await
        .unwrap();
    let mut m = message(&t.agent("rec"), "k", "see attached");
    let mut file: serde_json::Value = serde_json::json!({
        "kind": "file", "name": "a.pdf", "mime": "application/pdf", "size": 16,
        "bytes_ref": {"kind": "content_addressed", "algo": "sha256", "digest": r.digest, "url": "https://stale.example/old"}
    });
    m.parts.push(serde_json::from_value(file.take()).unwrap());
    let out = t.ingest("att-1", m).await;
    wait_for(20, "the reply", || async {
        (t.transport.count() == 1).then_some(())
    })
    .await;

    let stored = switchboard::store::messages::get(&t.open_db().await, &out.message_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored.body.contains(&r.digest)
            && !stored.body.contains("stale.example")
            && !stored.body.contains("/media/"),
        "storage keeps the digest, never a URL: {}",
        stored.body
    );
    let seen = agent.seen.lock().unwrap().clone();
    let Part::File(f) = &seen[0].parts[1] else {
        panic!("file part expected")
    };
    let BytesRef::ContentAddressed(c) = &f.bytes_ref else {
        panic!("content-addressed expected")
    };
    let url = c.url.clone().unwrap();
    assert!(url.contains("/media/") && url.contains("sig="), "{url}");
    let body = t
        .http
        .get(&url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&body[..], b"attachment bytes");
    t.stop().await;
}
on_both_engines!(agents_get_fresh_urls_and_storage_keeps_digests);
