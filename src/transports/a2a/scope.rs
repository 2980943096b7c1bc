//! Whose a task is: the scoping rules of A2A tasks and contexts.
//!
//! An identified caller (a verified bearer token) owns its tasks as `{issuer}#{sub}`: it reads,
//! lists and continues its own and nobody else's, and a `contextId` it names is in its own
//! namespace. An anonymous caller has nothing to prove who it is, so a task or context of one
//! is reached only through its id: the server mints task and context ids from 122 random bits
//! (a random UUID, never a time-ordered one), and whoever holds one is the caller it was given
//! to. Anonymous tasks are stored under `anonymous@{client address}`, which scopes their
//! idempotency keys and resends, never what can be read: an anonymous caller's listing without a
//! `contextId` is empty, and a `contextId` it invents is refused (the server cannot tell its
//! inventor from someone who guessed the same string).

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

/// The principal part of the thread id of a task of `owner`: the owner itself, or one name for
/// every anonymous caller (the context id that follows is theirs alone), so that a
/// conversation continued from another address stays one thread.
#[must_use]
pub fn thread_principal(owner: &str) -> &str {
    if is_anonymous(owner) {
        ANONYMOUS_THREAD
    } else {
        owner
    }
}

/// A new task or context id: a random (version 4) UUID, 122 random bits from the thread's
/// cryptographically secure generator, so that holding one is proof enough of being its
/// caller.
#[must_use]
pub fn mint_id() -> String {
    uuid::Builder::from_random_bytes(rand::random::<[u8; 16]>())
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_random_uuids() {
        let a = mint_id();
        let b = mint_id();
        assert_ne!(a, b);
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 4, "{a}");
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
        assert_eq!(thread_principal(&owner), "anonymous");
        assert_eq!(
            thread_principal("https://idp.example/#a"),
            "https://idp.example/#a"
        );
    }
}
