//! What `searchwire relay --check` prints: the effective configuration as a TOML file that
//! the relay would read back the same (defaults and unset settings as comments), each line
//! with where its value came from, secrets redacted.

use clap::ArgMatches;

use crate::relay_config::{Source, Sources};
use crate::relay_settings::{relay_command, settings, Kind, Setting};

/// What a redacted secret is printed as.
pub(crate) const REDACTED: &str = "<redacted>";

/// The effective configuration of the relay `matches` describe (the `relay` subcommand's
/// matches) with the sources of `sources`.
pub(crate) fn effective(matches: &ArgMatches, sources: &Sources) -> String {
    let mut out = String::from(
        "# searchwire relay: the effective configuration (a flag wins over \
         SEARCHWIRE_RELAY_<NAME>, which wins over the config file, which wins over the \
         default); secrets are redacted\n",
    );
    if let Some(f) = &sources.file {
        out.push_str(&format!("# config file: {}\n", f.display()));
    }
    for s in settings(&relay_command()) {
        let clap_source = matches.value_source(&s.id);
        let source = match sources.of(&s.id, clap_source) {
            Source::Flag => "flag".to_owned(),
            Source::Env(var) => var,
            Source::File => "config file".to_owned(),
            Source::Default => "default".to_owned(),
        };
        // A default is printed as a comment: the output, read back as a config file, sets
        // exactly what was set (a default given as a key could trip a flag's requirements,
        // e.g. redis-stream without redis).
        match (value(&s, matches), source == "default") {
            (Some(v), false) => out.push_str(&format!("{} = {v}  # {source}\n", s.key)),
            (Some(v), true) => out.push_str(&format!("# {} = {v}  (default)\n", s.key)),
            (None, _) => out.push_str(&format!("# {} is not set\n", s.key)),
        }
    }
    out
}

/// The setting's value as TOML, `None` when it is not set.
fn value(s: &Setting, m: &ArgMatches) -> Option<String> {
    if s.kind == Kind::Count {
        return Some(
            m.try_get_one::<u8>(&s.id)
                .ok()
                .flatten()
                .copied()
                .unwrap_or(0)
                .to_string(),
        );
    }
    let raw: Vec<String> = m
        .try_get_raw(&s.id)
        .ok()
        .flatten()?
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let one = |v: &str| -> String {
        match s.kind {
            _ if s.secret => quote(REDACTED),
            Kind::Switch => (v == "true").to_string(),
            Kind::Integer if v.parse::<i128>().is_ok() => v.to_owned(),
            _ if v.contains("://") => quote(&searchwire::redact_userinfo(v)),
            _ => quote(v),
        }
    };
    if s.repeated {
        let items: Vec<String> = raw.iter().map(|v| one(v)).collect();
        return Some(format!("[{}]", items.join(", ")));
    }
    match raw.first() {
        Some(v) => Some(one(v)),
        // Given without its optional value (`--compress`).
        None if s.optional_value && m.contains_id(&s.id) => Some("true".to_owned()),
        None => None,
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted_as_toml() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quote("x\u{1}"), "\"x\\u0001\"");
    }
}
