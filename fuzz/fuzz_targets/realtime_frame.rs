#![no_main]
//! libFuzzer's driver of `tern::fuzz::realtime_frame` (see src/fuzz.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| tern::fuzz::realtime_frame(data));
