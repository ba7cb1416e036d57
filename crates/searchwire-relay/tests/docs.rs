//! Code and docs cannot drift: `docs/configuration.md` must contain the relay's defaults table
//! exactly as `searchwire_relay::config` renders it. Regenerate with
//! `SEARCHWIRE_BLESS=1 cargo test -p searchwire-relay --test docs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
const BEGIN: &str =
    "<!-- relay-defaults:begin (generated from searchwire_relay::config; do not edit) -->\n";
const END: &str = "<!-- relay-defaults:end -->";

#[test]
fn configuration_doc_matches_the_relay_defaults() {
    searchwire_fake::docs::assert_generated_section(
        std::path::Path::new(DOC),
        BEGIN,
        END,
        &searchwire_relay::config::markdown_table(),
        "cargo test -p searchwire-relay --test docs",
    );
}

#[test]
fn the_table_holds_the_reference_values() {
    use searchwire_relay::config as c;
    assert_eq!(c::BACKLOG_THRESHOLD, 500);
    assert_eq!(c::DRAIN_TIMEOUT.as_secs(), 4);
    assert_eq!(c::MAX_BODY_BYTES, 100 * 1024 * 1024);
    let t = c::markdown_table();
    for v in ["| 500 |", "| 4s |", "| 100 MB |", c::LISTEN] {
        assert!(t.contains(v), "{v} missing from the table");
    }
}
