#![no_main]
//! libFuzzer's driver of `tern::fuzz::snapshot_manifest` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::snapshot_manifest(data));
