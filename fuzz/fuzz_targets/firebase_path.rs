#![no_main]
//! libFuzzer's driver of `tern::fuzz::firebase_path` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::firebase_path(data));
