//! `cargo fuzz run socks5_request`: bridge::fuzzing::socks5_request must never panic (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bridge::fuzzing::socks5_request(data));
