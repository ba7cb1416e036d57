//! Code and docs cannot drift: `docs/configuration.md` must contain the defaults table
//! exactly as `searchwire::defaults` renders it. Regenerate with
//! `SEARCHWIRE_BLESS=1 cargo test -p searchwire --test docs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
const BEGIN: &str = "<!-- defaults:begin (generated from searchwire::defaults; do not edit) -->\n";
const END: &str = "<!-- defaults:end -->";

#[test]
fn configuration_doc_matches_the_defaults_table() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    let table = searchwire::explain::markdown_table();
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("begin marker in docs/configuration.md");
    let (_, tail) = rest
        .split_once(END)
        .expect("end marker in docs/configuration.md");
    let fresh = format!("{head}{BEGIN}{table}{END}{tail}");
    if std::env::var_os("SEARCHWIRE_BLESS").is_some() {
        std::fs::write(DOC, &fresh).unwrap();
        return;
    }
    assert!(
        doc == fresh,
        "docs/configuration.md is out of date with searchwire::defaults; \
         run SEARCHWIRE_BLESS=1 cargo test -p searchwire --test docs"
    );
}
