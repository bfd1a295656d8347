//! `cargo fuzz run authority`: bridge::fuzzing::authority must never panic (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bridge::fuzzing::authority(data));
