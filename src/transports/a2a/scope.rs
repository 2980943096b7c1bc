//! Whose a task is: the scoping rules of A2A tasks and contexts.
//!
//! An identified caller (a verified bearer token) owns its tasks as `{issuer}#{sub}`: it reads,
//! lists and continues its own and nobody else's, and a `contextId` it names is in its own
//! namespace. An anonymous caller has nothing to prove who it is, so a task or context of one
//! is reached only through its id: the server mints task and context ids as time-ordered UUIDs
//! (version 7) whose 74 bits after the time all come from the CSPRNG, and whoever holds one is
//! the caller it was given to. (Fully random ids would cost every index they key a page of its
//! own per insert: see `docs/benchmarks/a2a.md`.) Anonymous tasks are stored under
//! `anonymous@{client address}`, which scopes their idempotency keys and resends; an anonymous
//! caller's listing without a `contextId` is empty.
//!
//! A `contextId` an anonymous caller chooses itself is accepted when no anonymous caller uses it
//! yet (the A2A specification lets a server preserve a client's context id). If it is a random
//! or time-ordered UUID (version 4 or 7) it is a capability like a minted one; any other string
//! is bound to the client address that first used it: only that address continues or lists it,
//! and it is a thread of that address's own, so a guessable name never joins a stranger's
//! conversation (clients behind one address share what they name guessably).

use std::net::IpAddr;

/// What every anonymous owner starts with.
const ANONYMOUS_PREFIX: &str = "anonymous@";

/// The SQL `LIKE` pattern matching every anonymous owner.
pub const ANONYMOUS_OWNERS: &str = "anonymous@%";

/// The thread principal of anonymous conversations (their context id, a capability, keeps them
/// apart).
const ANONYMOUS_THREAD: &str = "anonymous";

/// The owner an anonymous caller's tasks are stored under: its client address, if known.
#[must_use]
pub fn anonymous_owner(client: Option<IpAddr>) -> String {
    match client {
        Some(ip) => format!("{ANONYMOUS_PREFIX}{ip}"),
        None => format!("{ANONYMOUS_PREFIX}unknown"),
    }
}

/// Whether `owner` is an anonymous caller's (tasks stored before anonymous scoping, under the
/// bare `anonymous`, are not: nobody reaches those any more).
#[must_use]
pub fn is_anonymous(owner: &str) -> bool {
    owner.starts_with(ANONYMOUS_PREFIX)
}

/// Whether a context id is a capability: a random (version 4) or time-ordered (version 7) UUID,
/// as the server mints and as clients that choose their own do. A version 7 UUID carries 74
/// random bits after its time (RFC 9562 has them from a CSPRNG; generators that count within a
/// millisecond still draw at least 32 per id and the counter's start): as far beyond guessing
/// as a random one for anyone who has not seen a sibling id. Any other string may be guessed.
#[must_use]
pub fn is_capability(id: &str) -> bool {
    uuid::Uuid::parse_str(id).is_ok_and(|u| {
        matches!(u.get_version_num(), 4 | 7) && u.get_variant() == uuid::Variant::RFC4122
    })
}

/// The pipeline thread of a task of `owner` in `context`: its principal
/// ([`thread_principal`]) and the context id, on two lines.
#[must_use]
pub fn thread_id(owner: &str, context: &str) -> String {
    format!("{}\n{context}", thread_principal(owner, context))
}

/// The principal part of the thread id of a task of `owner` in `context`: the owner itself, or,
/// for an anonymous caller in a capability context, one name for every anonymous caller (the
/// context id that follows is theirs alone), so that a conversation continued from another
/// address stays one thread.
#[must_use]
pub fn thread_principal<'a>(owner: &'a str, context: &str) -> &'a str {
    if is_anonymous(owner) && is_capability(context) {
        ANONYMOUS_THREAD
    } else {
        owner
    }
}

/// A new task or context id minted at `now_ms` (the engine's clock): a version 7 UUID, the time
/// in milliseconds followed by 74 bits from the thread's cryptographically secure generator (no
/// counter), so that holding one is proof enough of being its caller while the rows and index
/// entries it keys are written in time order, next to each other.
#[must_use]
pub fn mint_id(now_ms: i64) -> String {
    let millis = u64::try_from(now_ms).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random::<[u8; 10]>())
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_time_ordered_and_random() {
        let now = 1_764_000_000_000;
        let a = mint_id(now);
        let b = mint_id(now);
        assert_ne!(a, b);
        let (ua, ub) = (
            uuid::Uuid::parse_str(&a).unwrap(),
            uuid::Uuid::parse_str(&b).unwrap(),
        );
        assert_eq!(ua.get_version_num(), 7, "{a}");
        assert_eq!(ua.get_variant(), uuid::Variant::RFC4122, "{a}");
        // No counter: two ids of one millisecond differ in their random bits, not by one.
        let random = |u: uuid::Uuid| u.as_u128() & ((1u128 << 80) - 1);
        let (ra, rb) = (random(ua), random(ub));
        assert!(ra.abs_diff(rb) > 1 << 16, "{a} {b}");
        // Time order: an id minted a millisecond later sorts after.
        let c = mint_id(now + 1);
        assert!(c > a && c > b, "{a} {b} {c}");
    }

    #[test]
    fn anonymous_owners() {
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let owner = anonymous_owner(Some(ip));
        assert_eq!(owner, "anonymous@192.0.2.7");
        assert!(is_anonymous(&owner));
        assert!(is_anonymous(&anonymous_owner(None)));
        assert!(!is_anonymous("anonymous"), "the old shared scope");
        assert!(!is_anonymous("https://idp.example/#anonymous@x"));
        let minted = mint_id(1);
        assert_eq!(thread_principal(&owner, &minted), "anonymous");
        assert_eq!(thread_principal(&owner, "team-room"), owner);
        assert_eq!(thread_id(&owner, &minted), format!("anonymous\n{minted}"));
        assert_eq!(
            thread_principal("https://idp.example/#a", &minted),
            "https://idp.example/#a"
        );
    }

    #[test]
    fn capabilities_are_random_uuids() {
        assert!(is_capability(&mint_id(1)));
        assert!(is_capability("9B2D6F1E-3C4A-4E8B-9F10-2A3B4C5D6E7F"));
        assert!(is_capability("019ae0c4-58a1-7b2e-9c4d-3f6a8e1b2c7d"));
        for guessable in [
            "team-room",
            "",
            "tck-client-context-001-abc",
            // name-based (v5) and time-only (v1) UUIDs can be derived
            "2ed6657d-e927-568b-95e1-2665a8aea6a2",
            "c232ab00-9414-11ec-b3c8-9f6bdeced846",
            // a version 4 nibble in a non-RFC variant
            "9b2d6f1e-3c4a-4e8b-cf10-2a3b4c5d6e7f",
        ] {
            assert!(!is_capability(guessable), "{guessable}");
        }
    }
}
