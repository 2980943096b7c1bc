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

    type Target = fn(&[u8]);

    /// Every fuzz target: its name (a `[[bin]]` of `fuzz/Cargo.toml` and a directory of
    /// `fuzz/corpus`), the path its `fuzz/fuzz_targets/NAME.rs` calls, and that function.
    const TARGETS: [(&str, &str, Target); 6] = [
        (
            "smtp_session",
            "switchboard::transports::email::fuzzing::smtp_session",
            smtp_session,
        ),
        (
            "email_message",
            "switchboard::transports::email::fuzzing::email_message",
            email_message,
        ),
        (
            "ap_inbox",
            "switchboard::transports::activitypub::fuzzing::ap_inbox",
            ap_inbox,
        ),
        (
            "ap_signature",
            "switchboard::transports::activitypub::fuzzing::ap_signature",
            ap_signature,
        ),
        (
            "a2a_rpc",
            "switchboard::transports::a2a::server::fuzzing::a2a_rpc",
            a2a_rpc,
        ),
        ("address", "switchboard::fuzzing::address", address),
    ];

    fn fuzz_file(path: &str) -> String {
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
            .unwrap()
    }

    /// The test command replays the seeds here instead of building the fuzz crate: every seed
    /// and kept finding goes through the function its target calls, and each failing one is
    /// named (its panic is printed above the list).
    #[test]
    fn every_seed_and_kept_finding_holds_its_targets_properties() {
        let mut failed = Vec::new();
        for (target, _, run) in TARGETS {
            let seeds = seeds(target);
            assert!(seeds.len() >= 5, "{target} has {} seeds", seeds.len());
            for (name, data) in seeds {
                if std::panic::catch_unwind(|| run(&data)).is_err() {
                    failed.push(format!("fuzz/corpus/{target}/{name}"));
                }
            }
        }
        assert!(failed.is_empty(), "seeds that fail: {failed:?}");
    }

    /// The replay above covers what `scripts/fuzz` runs: the same targets as `fuzz/Cargo.toml`
    /// and `fuzz/corpus`, each replayed through the very function its harness calls.
    #[test]
    fn the_seed_replay_covers_every_fuzz_target_through_its_harness_function() {
        let manifest = fuzz_file("fuzz/Cargo.toml");
        let mut bins: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .filter_map(|l| l.strip_suffix('"'))
            .filter(|n| *n != "switchboard-fuzz")
            .collect();
        bins.sort_unstable();
        let mut corpora: Vec<String> =
            std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
        corpora.sort_unstable();
        let mut names: Vec<&str> = TARGETS.iter().map(|(n, _, _)| *n).collect();
        names.sort_unstable();
        assert_eq!(bins, names, "fuzz/Cargo.toml's targets");
        assert_eq!(corpora, names, "fuzz/corpus's directories");
        for (target, path, _) in TARGETS {
            let harness = fuzz_file(&format!("fuzz/fuzz_targets/{target}.rs"));
            let body = harness
                .lines()
                .find(|l| l.starts_with("libfuzzer_sys::fuzz_target!"))
                .unwrap_or_default();
            assert_eq!(
                body,
                format!("libfuzzer_sys::fuzz_target!(|data: &[u8]| {path}(data));"),
                "fuzz/fuzz_targets/{target}.rs calls its entry point alone"
            );
        }
    }
}
