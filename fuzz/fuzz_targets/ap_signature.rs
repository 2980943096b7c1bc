//! `switchboard::transports::activitypub::fuzzing::ap_signature`: what it runs and asserts is documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::transports::activitypub::fuzzing::ap_signature(data));
