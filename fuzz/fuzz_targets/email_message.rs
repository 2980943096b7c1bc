//! `switchboard::transports::email::fuzzing::email_message`: what it runs and asserts is documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::transports::email::fuzzing::email_message(data));
