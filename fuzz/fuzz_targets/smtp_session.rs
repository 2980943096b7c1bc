//! `switchboard::transports::email::fuzzing::smtp_session`: what it runs and asserts is documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::transports::email::fuzzing::smtp_session(data));
