//! `cargo fuzz run client_hello`: bridge::fuzzing::client_hello must never panic (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bridge::fuzzing::client_hello(data));
