#![no_main]
// A `_bulk` request body as the relay accepts it from its clients, and the bulk
// response the relay reads back from the cluster.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let defaults = searchwire_relay::ndjson::Defaults {
        index: Some("default-index".into()),
        routing: None,
        pipeline: None,
    };
    if let Ok(items) = searchwire_relay::ndjson::parse(data, &defaults) {
        let _ = searchwire_relay::send::parse_items(data, items.len());
    }
    let _ = searchwire_relay::send::parse_items(data, 3);
});
