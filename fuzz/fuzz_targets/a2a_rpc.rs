//! `switchboard::transports::a2a::server::fuzzing::a2a_rpc`: what it runs and asserts is documented there.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::transports::a2a::server::fuzzing::a2a_rpc(data));
