//! Tests of the session without sockets.

use super::data_receiver;

/// The DATA receiver alone, as primed after 354.
fn feed(input: &[u8]) -> (bool, Vec<u8>) {
    let mut rx = data_receiver();
    let mut msg = Vec::new();
    let done = rx.ingest(&mut input.iter(), &mut msg);
    (done, msg)
}

#[test]
fn an_empty_body_ends_at_the_first_dot() {
    assert_eq!(feed(b".\r\n"), (true, Vec::new()));
}

#[test]
fn a_stuffed_first_line_loses_one_dot() {
    assert_eq!(feed(b"..x\r\nb\r\n.\r\n"), (true, b".x\r\nb\r\n".to_vec()));
}

#[test]
fn a_body_without_leading_dot_is_unchanged() {
    assert_eq!(feed(b"a\r\n.\r\n"), (true, b"a\r\n".to_vec()));
}
