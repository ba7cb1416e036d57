#![no_main]
// A `_bulk` response as the bulk indexer reads it: never a panic, and whenever the compact
// fast path accepts a body, the general `serde_json` parse reads the same response from it.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(r) = searchwire_bulk::BulkResponse::parse(data) {
        let _ = format!("{r:?}");
    }
    let (fast, general) = searchwire_bulk::__parse_both_ways(data);
    if let Some(fast) = fast {
        assert_eq!(Ok(fast), general, "the two parses disagree");
    }
});
