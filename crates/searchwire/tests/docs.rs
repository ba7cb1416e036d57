//! Code and docs cannot drift: `docs/configuration.md` must contain the defaults table
//! exactly as `searchwire::defaults` renders it. Regenerate with
//! `SEARCHWIRE_BLESS=1 cargo test -p searchwire --test docs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
const BEGIN: &str = "<!-- defaults:begin (generated from searchwire::defaults; do not edit) -->\n";
const END: &str = "<!-- defaults:end -->";

#[test]
fn configuration_doc_matches_the_defaults_table() {
    searchwire_fake::docs::assert_generated_section(
        std::path::Path::new(DOC),
        BEGIN,
        END,
        &searchwire::explain::markdown_table(),
        "cargo test -p searchwire --test docs",
    );
}
