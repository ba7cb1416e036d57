//! Code and docs cannot drift: `docs/bulk.md` must contain the defaults table exactly as
//! `searchwire_bulk::defaults` renders it. Regenerate with
//! `SEARCHWIRE_BLESS=1 cargo test -p searchwire-bulk --test docs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bulk.md");
const BEGIN: &str =
    "<!-- bulk-defaults:begin (generated from searchwire_bulk::defaults; do not edit) -->\n";
const END: &str = "<!-- bulk-defaults:end -->";

#[test]
fn bulk_doc_matches_the_defaults_table() {
    searchwire_fake::docs::assert_generated_section(
        std::path::Path::new(DOC),
        BEGIN,
        END,
        &searchwire_bulk::defaults::markdown_table(),
        "cargo test -p searchwire-bulk --test docs",
    );
}
