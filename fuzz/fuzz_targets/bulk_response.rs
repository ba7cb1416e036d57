#![no_main]
// A `_bulk` response as the bulk indexer reads it.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(r) = searchwire_bulk::BulkResponse::parse(data) {
        let _ = format!("{r:?}");
    }
});
