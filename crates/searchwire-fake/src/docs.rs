//! Code and docs cannot drift: a section of a Markdown file between two markers must be
//! exactly what the code renders. With `SEARCHWIRE_BLESS` set, the section is rewritten
//! instead of checked.

use std::path::Path;

/// Checks that the text of `doc` between the lines `begin` and `end` is `generated`, or, with
/// `SEARCHWIRE_BLESS` set, writes it there. Panics (this is for tests) with a message that
/// says how to regenerate: `regenerate`, e.g. `cargo test -p searchwire --test docs`.
#[allow(clippy::panic)]
pub fn assert_generated_section(
    doc: &Path,
    begin: &str,
    end: &str,
    generated: &str,
    regenerate: &str,
) {
    let shown = doc.display();
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("cannot read {shown}: {e}"));
    let Some((head, rest)) = text.split_once(begin) else {
        panic!("{shown} lacks the marker {begin:?}");
    };
    let Some((_, tail)) = rest.split_once(end) else {
        panic!("{shown} lacks the marker {end:?} after {begin:?}");
    };
    let fresh = format!("{head}{begin}{generated}{end}{tail}");
    if std::env::var_os("SEARCHWIRE_BLESS").is_some() {
        if let Err(e) = std::fs::write(doc, &fresh) {
            panic!("cannot write {shown}: {e}");
        }
        return;
    }
    assert!(
        text == fresh,
        "{shown} is out of date with the code; run SEARCHWIRE_BLESS=1 {regenerate}"
    );
}
