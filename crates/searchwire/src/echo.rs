//! How an error message shows a value the user supplied (an environment variable, a flag,
//! a configuration value, a URL, a header): quoted and escaped, and cut at
//! [`MAX_ECHO_CHARS`] characters with a marker saying how many were left out. A mistyped
//! value is recognisable from its start; a value of megabytes (a file pasted into a
//! variable) must not come back whole on the terminal or in a log line.
//!
//! Credentials are never passed here: errors about a password, a token or an
//! `Authorization` value name the setting, never the value.

use std::fmt::Write;

/// The most characters of a user-supplied value an error message shows: 80, a line's worth,
/// enough to recognise any value a person typed.
pub const MAX_ECHO_CHARS: usize = 80;

/// `value` as an error message shows it: quoted and escaped like `{:?}` (so control
/// characters cannot reach a terminal), and, when longer than [`MAX_ECHO_CHARS`]
/// characters, cut there with a marker.
///
/// ```
/// assert_eq!(searchwire::echo("5x"), r#""5x""#);
/// let long = "9".repeat(300);
/// assert_eq!(
///     searchwire::echo(&long),
///     format!("\"{}\"… (220 more characters)", "9".repeat(80))
/// );
/// ```
pub fn echo(value: &str) -> String {
    let mut out = String::new();
    match value.char_indices().nth(MAX_ECHO_CHARS) {
        None => {
            let _ = write!(out, "{value:?}");
        }
        Some((at, _)) => {
            let more = value[at..].chars().count();
            let _ = write!(out, "{:?}… ({more} more characters)", &value[..at]);
        }
    }
    out
}

/// [`echo`] without the quotes, for text a message shows as it is and that holds no
/// control characters (a request's method, which is an HTTP token, and its path, which
/// is checked before sending).
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        None => std::borrow::Cow::Borrowed(text),
        Some((at, _)) => std::borrow::Cow::Owned(format!(
            "{}… ({} more characters)",
            &text[..at],
            text[at..].chars().count()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole_and_long_ones_cut_with_a_marker() {
        assert_eq!(echo(""), "\"\"");
        assert_eq!(echo("a\u{1b}b\n"), "\"a\\u{1b}b\\n\"");
        let exact = "é".repeat(MAX_ECHO_CHARS);
        assert_eq!(echo(&exact), format!("\"{exact}\""));
        let huge = "é".repeat(3 * 1024 * 1024);
        let shown = echo(&huge);
        assert!(shown.ends_with(&format!(
            "… ({} more characters)",
            huge.chars().count() - 80
        )));
        assert!(shown.len() < 300, "{}", shown.len());
        assert_eq!(cut("GET"), "GET");
        assert_eq!(
            cut(&"/a".repeat(50)),
            format!("{}… (20 more characters)", "/a".repeat(40))
        );
    }
}
