//! `cargo fuzz run event_record`: bridge::fuzzing::event_record must never panic (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bridge::fuzzing::event_record(data));
