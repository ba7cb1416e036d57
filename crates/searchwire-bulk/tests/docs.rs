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
    let doc = std::fs::read_to_string(DOC).unwrap();
    let table = searchwire_bulk::defaults::markdown_table();
    let (head, rest) = doc.split_once(BEGIN).expect("begin marker in docs/bulk.md");
    let (_, tail) = rest.split_once(END).expect("end marker in docs/bulk.md");
    let fresh = format!("{head}{BEGIN}{table}{END}{tail}");
    if std::env::var_os("SEARCHWIRE_BLESS").is_some() {
        std::fs::write(DOC, &fresh).unwrap();
        return;
    }
    assert!(
        doc == fresh,
        "docs/bulk.md is out of date with searchwire_bulk::defaults; \
         run SEARCHWIRE_BLESS=1 cargo test -p searchwire-bulk --test docs"
    );
}
