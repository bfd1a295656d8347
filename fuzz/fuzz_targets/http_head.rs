//! `cargo fuzz run http_head`: bridge::fuzzing::http_head must never panic (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bridge::fuzzing::http_head(data));
