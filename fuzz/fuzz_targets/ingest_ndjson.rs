#![no_main]
//! The `searchwire ingest` input parser (the CLI's own file, compiled here), line by line
//! as the CLI reads it, in bulk format and in documents format with an id field.
#![allow(dead_code)]

#[path = "../../crates/searchwire-cli/src/ingest_parse.rs"]
mod ingest_parse;

use ingest_parse::{trim_line, Line, LineParser, ParseSpec};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let bulk = ParseSpec {
        docs: false,
        index: None,
        op: searchwire_bulk::OpType::Index,
        id_field: None,
        id_path: Vec::new(),
    };
    let docs = ParseSpec {
        docs: true,
        index: Some("i".into()),
        op: searchwire_bulk::OpType::Create,
        id_field: Some("user.id".into()),
        id_path: vec!["user".into(), "id".into()],
    };
    let data = bytes::Bytes::copy_from_slice(data);
    for spec in [&bulk, &docs] {
        let mut parser = LineParser::new(spec);
        for (n, line) in data.split(|b| *b == b'\n').enumerate() {
            let text = data.slice_ref(trim_line(line));
            if let Line::Record(Ok((_, start))) = parser.feed(&text, n as u64 + 1) {
                assert!(start <= n as u64 + 1);
            }
        }
        let _ = parser.finish();
    }
});
