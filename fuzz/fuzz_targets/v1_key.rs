#![no_main]
//! libFuzzer's driver of `tern::fuzz::v1_key` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::v1_key(data));
