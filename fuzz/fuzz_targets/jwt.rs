#![no_main]
//! libFuzzer's driver of `tern::fuzz::jwt` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::jwt(data));
