#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| searchwire::fuzzing::health_reply(data));
