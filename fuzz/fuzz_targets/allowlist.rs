//! `cargo fuzz run allowlist`: bridge::fuzzing::allowlist must never panic (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bridge::fuzzing::allowlist(data));
