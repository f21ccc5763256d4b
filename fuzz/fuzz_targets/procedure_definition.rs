#![no_main]
//! libFuzzer's driver of `tern::fuzz::procedure_definition` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::procedure_definition(data));
