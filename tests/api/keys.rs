//! Server signing keys: generated once, stored, shared by instances, usable with ring.

use std::sync::Arc;

use switchboard::clock::SystemClock;
use switchboard::error::ErrorKind;
use switchboard::keys::{self, Keys};

use crate::helpers::{Engine, on_both_engines, spawn_app};

async fn keys_are_generated_once_and_shared(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let keys = t.app().pipeline().keys().clone();

    // A burst of first uses (the first deliveries after a start) waits for one key instead of
    // each caller generating its own.
    let burst = futures_util::future::join_all((0..8).map(|_| keys.rsa("test:burst"))).await;
    let first = burst[0].as_ref().unwrap();
    assert!(
        burst
            .iter()
            .all(|k| Arc::ptr_eq(k.as_ref().unwrap(), first)),
        "one key generated and shared by the whole burst"
    );

    let rsa = keys.rsa("test:rsa").await.unwrap();
    let again = keys.rsa("test:rsa").await.unwrap();
    assert!(Arc::ptr_eq(&rsa, &again), "cached after first use");
    let sig = rsa.sign_pkcs1_sha256(b"hello").unwrap();
    assert_eq!(sig.len(), 256, "RSA-2048");
    assert!(keys::verify_rsa_pkcs1_sha256(
        rsa.public_key_spki_der(),
        b"hello",
        &sig
    ));
    assert!(!keys::verify_rsa_pkcs1_sha256(
        rsa.public_key_spki_der(),
        b"hellO",
        &sig
    ));
    let from_pem = keys::spki_der_from_pem(&rsa.public_key_pem()).unwrap();
    assert_eq!(from_pem, rsa.public_key_spki_der());
    // A bare PKCS#1 key (what some servers publish) verifies too.
    let pkcs1 = keys::spki_subject_key(rsa.public_key_spki_der()).unwrap();
    assert!(keys::verify_rsa_pkcs1_sha256(pkcs1, b"hello", &sig));

    let ed = keys.ed25519("test:ed").await.unwrap();
    let sig = ed.sign(b"hello");
    assert_eq!(sig.len(), 64);
    assert!(keys::verify_ed25519(&ed.public_key_raw(), b"hello", &sig));
    assert!(!keys::verify_ed25519(&ed.public_key_raw(), b"other", &sig));
    assert!(!keys::verify_ed25519(&[0; 31], b"hello", &sig));

    // One name holds one algorithm.
    let err = keys.ed25519("test:rsa").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);

    // Another instance on the same database signs with the same keys, and two instances
    // racing to create a key end up with one.
    let db = t.open_db().await;
    let other = Keys::new(db.clone(), Arc::new(SystemClock));
    assert_eq!(
        other.rsa("test:rsa").await.unwrap().public_key_spki_der(),
        rsa.public_key_spki_der()
    );
    assert_eq!(
        other.ed25519("test:ed").await.unwrap().public_key_raw(),
        ed.public_key_raw()
    );
    let third = Keys::new(db, Arc::new(SystemClock));
    let (a, b) = tokio::join!(other.ed25519("test:race"), third.ed25519("test:race"));
    assert_eq!(a.unwrap().public_key_raw(), b.unwrap().public_key_raw());
    t.stop().await;
}
on_both_engines!(keys_are_generated_once_and_shared);
