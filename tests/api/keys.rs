//! Server signing keys: generated once, stored, shared by instances, usable with ring;
//! encrypted at rest under a key-encryption key, which rotates.

use std::sync::Arc;

use base64::Engine as _;
use switchboard::Application;
use switchboard::clock::SystemClock;
use switchboard::config::Secret;
use switchboard::error::ErrorKind;
use switchboard::keys::{self, Kek, Keys};
use switchboard::store;

use crate::helpers::{Engine, TestDb, on_both_engines, spawn_app, spawn_on, test_config};

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

/// The public key of `test:rsa`, read from `db` by a key store that has only `kek`.
async fn rsa_public(db: &switchboard::store::Db, kek: &Arc<Kek>) -> Vec<u8> {
    Keys::new(db.clone(), Arc::new(SystemClock))
        .with_kek(Some(kek.clone()))
        .rsa("test:rsa")
        .await
        .unwrap()
        .public_key_spki_der()
        .to_vec()
}

/// A key-encryption key `[byte; 32]`, as hex.
fn kek_hex(byte: u8) -> String {
    hex::encode([byte; 32])
}

/// Private keys at rest: written plain without a KEK and still read once there is one; sealed
/// by `encrypt_plain` (no longer the PKCS#8 in the row); read back, signing, under that KEK;
/// refused under another or none, at start-up too; moved to a new KEK by `rotate`.
async fn private_keys_are_encrypted_at_rest_and_the_kek_rotates(engine: Engine) {
    let mut t = spawn_app(engine, |_, _| {}).await;
    let plain = t.app().pipeline().keys().clone();
    let rsa = plain.rsa("test:rsa").await.unwrap();
    let ed = plain.ed25519("test:ed").await.unwrap();
    t.stop().await;
    let db = t.open_db().await;
    let rows = store::keys::all(&db).await.unwrap();
    assert!(rows.len() >= 2, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.kek_id.is_none()),
        "plain without a KEK"
    );
    let stored_rsa = |rows: &[store::keys::NamedKeyRow]| {
        rows.iter()
            .find(|r| r.name == "test:rsa")
            .map(|r| (r.private_der.clone(), r.kek_id.clone()))
            .unwrap()
    };
    assert_eq!(stored_rsa(&rows).0, rsa.private_key_pkcs8_der());

    let first = Arc::new(Kek::parse(&kek_hex(1)).unwrap());
    let second = Arc::new(Kek::parse(&kek_hex(2)).unwrap());
    assert_ne!(first.id(), second.id());
    let with =
        |kek: &Arc<Kek>| Keys::new(db.clone(), Arc::new(SystemClock)).with_kek(Some(kek.clone()));

    // Plain records are read under a KEK (the migration path) and counted.
    assert_eq!(rsa_public(&db, &first).await, rsa.public_key_spki_der());
    assert_eq!(
        keys::check_kek(&db, Some(&first)).await.unwrap(),
        rows.len()
    );

    // `keys encrypt`: every record sealed, none plain any more, nothing left to do twice.
    assert_eq!(keys::encrypt_plain(&db, &first).await.unwrap(), rows.len());
    assert_eq!(keys::encrypt_plain(&db, &first).await.unwrap(), 0);
    let sealed = store::keys::all(&db).await.unwrap();
    assert!(
        sealed
            .iter()
            .all(|r| r.kek_id.as_deref() == Some(first.id())),
        "{sealed:?}"
    );
    let (record, _) = stored_rsa(&sealed);
    assert_ne!(
        record,
        rsa.private_key_pkcs8_der(),
        "the key is no longer stored plain"
    );
    assert!(
        !record
            .windows(32)
            .any(|w| rsa.private_key_pkcs8_der().windows(32).any(|p| p == w)),
        "no part of the key is in the record"
    );
    assert_eq!(keys::check_kek(&db, Some(&first)).await.unwrap(), 0);

    // Round trip: read and used under the KEK, by a store that knew nothing before.
    let reread = with(&first).rsa("test:rsa").await.unwrap();
    let sig = reread.sign_pkcs1_sha256(b"hello").unwrap();
    assert!(keys::verify_rsa_pkcs1_sha256(
        rsa.public_key_spki_der(),
        b"hello",
        &sig
    ));
    assert_eq!(
        with(&first)
            .ed25519("test:ed")
            .await
            .unwrap()
            .public_key_raw(),
        ed.public_key_raw()
    );
    // A key made under a KEK is sealed when written.
    let fresh = with(&first).ed25519("test:fresh").await.unwrap();
    let rows = store::keys::all(&db).await.unwrap();
    let row = rows.iter().find(|r| r.name == "test:fresh").unwrap();
    assert_eq!(row.kek_id.as_deref(), Some(first.id()));
    assert_ne!(row.private_der, fresh.private_key_pkcs8_der());

    // The wrong KEK, or none, is refused, naming the KEK the keys need.
    let wrong = keys::check_kek(&db, Some(&second))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("wrong KEK") && wrong.contains(first.id()),
        "{wrong}"
    );
    let none = keys::check_kek(&db, None).await.unwrap_err().to_string();
    assert!(none.contains("server.kek_file"), "{none}");
    assert!(with(&second).rsa("test:rsa").await.is_err());
    assert!(
        Keys::new(db.clone(), Arc::new(SystemClock))
            .rsa("test:rsa")
            .await
            .is_err()
    );
    // A KEK whose id is right but whose key is not (a forged id) does not open the records.
    let forged = Kek::parse(&kek_hex(3)).unwrap();
    assert!(forged.open("test:rsa", "rsa-2048", &record).is_err());
    // A record moved to another name does not open either.
    assert!(first.open("test:other", "rsa-2048", &record).is_err());
    assert!(first.open("test:rsa", "rsa-2048", &record).is_ok());

    // At start-up: the server refuses the wrong KEK and no KEK, and starts with the right one.
    for kek in [Some(kek_hex(2)), None] {
        let mut config = test_config(&t.db.url);
        config.server.kek = kek.map(Secret::new);
        let e = Application::build(config).await.unwrap_err().to_string();
        assert!(e.contains("KEK"), "{e}");
    }
    let mut t2 = spawn_on(TestDb::url_only(t.db.url.clone()), |c, _| {
        c.server.kek = Some(Secret::new(kek_hex(1)));
    })
    .await;
    assert_eq!(
        t2.app()
            .pipeline()
            .keys()
            .rsa("test:rsa")
            .await
            .unwrap()
            .public_key_spki_der(),
        rsa.public_key_spki_der()
    );
    t2.stop().await;

    // Rotation: every record re-sealed under the new KEK, the old one refused from then on.
    let total = store::keys::all(&db).await.unwrap().len();
    let moved = keys::rotate(&db, &first, &second).await.unwrap();
    assert_eq!(moved, total);
    assert_eq!(keys::check_kek(&db, Some(&second)).await.unwrap(), 0);
    assert!(keys::check_kek(&db, Some(&first)).await.is_err());
    assert_eq!(rsa_public(&db, &second).await, rsa.public_key_spki_der());
    // Rotating again from a KEK the records are not under changes nothing.
    assert_eq!(keys::rotate(&db, &first, &second).await.unwrap(), 0);
    let third = Kek::parse(&kek_hex(4)).unwrap();
    assert!(keys::rotate(&db, &first, &third).await.is_err());
    assert_eq!(keys::check_kek(&db, Some(&second)).await.unwrap(), 0);
    db.close().await;
}
on_both_engines!(private_keys_are_encrypted_at_rest_and_the_kek_rotates);

#[test]
fn a_kek_is_32_bytes_of_hex_or_base64() {
    let hex = kek_hex(7);
    let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([7u8; 32]);
    let id = Kek::parse(&hex).unwrap().id().to_owned();
    for text in [b64.as_str(), url.as_str(), &format!("{hex}\n")] {
        assert_eq!(Kek::parse(text).unwrap().id(), id, "{text}");
    }
    for bad in [
        "",
        "abc",
        &hex[..62],
        &format!("{hex}00"),
        "change-me-to-a-long-kek",
    ] {
        let e = Kek::parse(bad).unwrap_err().to_string();
        assert!(e.contains("32 bytes"), "{bad}: {e}");
    }
    assert!(!format!("{:?}", Kek::parse(&hex).unwrap()).contains(&hex[..8]));
}
