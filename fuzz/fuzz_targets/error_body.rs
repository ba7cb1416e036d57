#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| searchwire::fuzzing::error_body(data));
