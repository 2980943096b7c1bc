//! Entry points for the fuzz targets under `fuzz/` (see `docs/fuzzing.md`). Each takes arbitrary
//! bytes, runs the code that reads such bytes off the network, and asserts what must hold for
//! every input: a panic, in that code or in an assertion there, is a finding. Not an API: hidden
//! from the docs, and free to change with the code it drives.
//!
//! Each transport keeps the entry points into its own code, so no module imports a transport it
//! may not: `transports::email::fuzzing` (`smtp_session`, `email_message`),
//! `transports::activitypub::fuzzing` (`ap_inbox`, `ap_signature`) and
//! `transports::a2a::server::fuzzing` (`a2a_rpc`). The address parser's is here ([`address`]),
//! with what they share.
//!
//! Nothing a harness runs does I/O: the SMTP session talks to a fake receiver, mail
//! authentication answers DNS from a static table (every other name does not exist, and its
//! resolver has no servers to ask), and nothing reaches a database or the network.

use futures_util::FutureExt as _;

use crate::message::{Address, is_domain, is_handle_name};

/// Runs a future of a harness to its end: they never wait (their receivers and DNS tables answer
/// at once), so one poll finishes them.
///
/// # Panics
/// When the future waits after all.
pub fn now<F: Future>(f: F) -> F::Output {
    match f.now_or_never() {
        Some(out) => out,
        None => panic!("a future of a fuzz harness waited, but nothing there does I/O"),
    }
}

/// Asserts that `s` (the kept `what`) is one line: no control characters.
///
/// # Panics
/// When it is not.
pub fn one_line(what: &str, s: &str) {
    assert!(
        !s.chars().any(char::is_control),
        "{what} keeps a control character: {s:?}"
    );
}

/// The address parser (`@name@domain` handles and `local@domain` email addresses): an address
/// that parses renders back to its text and parses to itself again; its domain is a domain and
/// a handle's name a handle name; only handles parse as handles.
pub fn address(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = Address::parse(s);
    assert_eq!(
        Address::parse_handle(s),
        parsed.clone().filter(|a| a.handle),
        "{s:?}"
    );
    let Some(a) = parsed else { return };
    let rendered = if a.handle {
        format!("@{}@{}", a.local, a.domain)
    } else {
        format!("{}@{}", a.local, a.domain)
    };
    assert_eq!(rendered, s, "{a:?} renders differently");
    assert_eq!(
        Address::parse(&rendered).as_ref(),
        Some(&a),
        "{rendered:?} parses differently"
    );
    assert!(is_domain(a.domain), "{a:?}: domain");
    assert!(
        !a.local.is_empty() && !a.local.contains('@') && !a.domain.contains('@'),
        "{a:?}: an @ inside a part"
    );
    if a.handle {
        assert!(is_handle_name(a.local), "{a:?}: handle name");
    }
}

/// The seed corpus of `target` under `fuzz/corpus`, by file name (for tests).
#[cfg(test)]
pub(crate) fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transports::a2a::server::fuzzing::a2a_rpc;
    use crate::transports::activitypub::fuzzing::{ap_inbox, ap_signature};
    use crate::transports::email::fuzzing::{email_message, smtp_session};

    #[test]
    fn every_seed_and_kept_finding_holds_its_targets_properties() {
        type Target = fn(&[u8]);
        let targets: [(&str, Target); 6] = [
            ("smtp_session", smtp_session),
            ("email_message", email_message),
            ("ap_inbox", ap_inbox),
            ("ap_signature", ap_signature),
            ("a2a_rpc", a2a_rpc),
            ("address", address),
        ];
        for (target, run) in targets {
            let seeds = seeds(target);
            assert!(seeds.len() >= 5, "{target} has {} seeds", seeds.len());
            for (name, data) in seeds {
                let ran = std::panic::catch_unwind(|| run(&data));
                assert!(ran.is_ok(), "fuzz/corpus/{target}/{name} fails");
            }
        }
    }
}
