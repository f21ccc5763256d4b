#![no_main]
//! libFuzzer's driver of `tern::fuzz::api_key` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::api_key(data));
