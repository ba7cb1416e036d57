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
    let doc = std::fs::read_to_string(DOC).unwrap();
    let table = searchwire_relay::config::markdown_table();
    let (head, rest) = doc.split_once(BEGIN).expect("begin marker");
    let (_, tail) = rest.split_once(END).expect("end marker");
    let fresh = format!("{head}{BEGIN}{table}{END}{tail}");
    if std::env::var_os("SEARCHWIRE_BLESS").is_some() {
        std::fs::write(DOC, &fresh).unwrap();
        return;
    }
    assert!(
        doc == fresh,
        "docs/configuration.md is out of date with searchwire_relay::config; \
         run SEARCHWIRE_BLESS=1 cargo test -p searchwire-relay --test docs"
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
