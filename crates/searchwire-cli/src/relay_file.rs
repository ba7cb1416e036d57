//! The `--config` file of `searchwire relay`: TOML, flat, one key per flag, named as the
//! flag without its dashes (`queue-dir = "/var/lib/relay"`, `url = ["https://a:9200"]`,
//! `queue-only = true`). Each key becomes the flag it names (`--queue-dir=/var/lib/relay`),
//! so clap checks the value exactly as on the command line.
//!
//! Every problem of the file is reported at once, each with its line: a key that is not a
//! setting (naming the closest one), a value of the wrong type (naming the type the key
//! takes), a section (the file is flat). No value of the file is ever quoted in a message:
//! the file holds credentials.

use std::collections::BTreeMap;
use std::path::Path;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::relay_settings::{closest, Kind, Setting};

/// By key: the flags the file's value stands for.
pub(crate) type Flags = BTreeMap<String, Vec<String>>;

/// Reads the file at `path`; the error names the file and every problem in it.
pub(crate) fn read(path: &Path, all: &[Setting]) -> Result<Flags, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the config file {}: {e}", path.display()))?;
    parse(&text, all).map_err(|problems| {
        format!(
            "the config file {} is not valid:\n  {}",
            path.display(),
            problems.join("\n  ")
        )
    })
}

/// The flags of the file's text, or its problems (one sentence each, with the line).
pub(crate) fn parse(text: &str, all: &[Setting]) -> Result<Flags, Vec<String>> {
    let line = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let table = DeTable::parse(text).map_err(|e| {
        // The message only: toml's full rendering quotes the line, which may hold a secret.
        let at = e
            .span()
            .map_or(String::new(), |s| format!("line {}: ", line(s.start)));
        vec![format!("{at}not valid TOML: {}", e.message())]
    })?;
    let mut flags = Flags::new();
    let mut problems: Vec<(usize, String)> = Vec::new();
    for (key, value) in table.get_ref().iter() {
        let name = key.get_ref().as_ref();
        let at = key.span().start;
        match setting(name, all) {
            Err(problem) if matches!(value.get_ref(), DeValue::Table(_)) => problems.push((
                at,
                format!(
                    "line {}: `{name}` is a table or section, and the file has none: write \
                     each setting as a top-level key ({problem})",
                    line(at)
                ),
            )),
            Err(problem) => problems.push((at, format!("line {}: {problem}", line(at)))),
            Ok(s) => match to_flags(s, value) {
                Ok(f) => {
                    flags.insert(s.key.clone(), f);
                }
                Err(found) => problems.push((
                    at,
                    format!(
                        "line {}: key `{name}` must be {}, not {found}",
                        line(at),
                        s.expected()
                    ),
                )),
            },
        }
    }
    if problems.is_empty() {
        return Ok(flags);
    }
    problems.sort();
    Err(problems.into_iter().map(|(_, p)| p).collect())
}

/// The setting a key names, or why it names none.
fn setting<'a>(name: &str, all: &'a [Setting]) -> Result<&'a Setting, String> {
    if let Some(s) = all.iter().find(|s| s.key == name) {
        return Ok(s);
    }
    if name == "config" || name == "check" {
        return Err(format!(
            "`{name}` cannot be set in the config file: give --{name} on the command line"
        ));
    }
    let near = closest(name, all.iter().map(|s| s.key.as_str())).unwrap_or("url");
    Err(format!(
        "unknown key `{name}`; the closest known key is `{near}` (the keys are the flags of \
         searchwire relay without the leading --, in one flat table)"
    ))
}

/// The flags of one value; `Err` names the TOML type found instead of the expected one.
fn to_flags(s: &Setting, value: &Spanned<DeValue<'_>>) -> Result<Vec<String>, String> {
    let flag = format!("--{}", s.key);
    match (value.get_ref(), s.repeated) {
        (DeValue::Array(items), true) => {
            let mut out = Vec::new();
            for item in items {
                let one = scalar(s, &flag, item.get_ref())
                    .map_err(|t| format!("an array holding {t}"))?;
                out.extend(one);
            }
            Ok(out)
        }
        (v, _) => scalar(s, &flag, v),
    }
}

/// One value by the setting's kind; `Err` says what was found instead ("a string").
fn scalar(s: &Setting, flag: &str, v: &DeValue<'_>) -> Result<Vec<String>, String> {
    match (s.kind, v) {
        (Kind::Switch, DeValue::Boolean(true)) => Ok(vec![flag.to_owned()]),
        (Kind::Switch, DeValue::Boolean(false)) => Ok(Vec::new()),
        (_, DeValue::Boolean(true)) if s.optional_value => Ok(vec![flag.to_owned()]),
        (_, DeValue::Boolean(false)) if s.optional_value => Ok(Vec::new()),
        (Kind::Count, DeValue::Integer(n)) => match u8::from_str_radix(n.as_str(), n.radix()) {
            Ok(n) => Ok(vec![flag.to_owned(); usize::from(n)]),
            Err(_) => Err("an integer out of range (0 to 255)".to_owned()),
        },
        (Kind::Integer, DeValue::Integer(n)) => match i128::from_str_radix(n.as_str(), n.radix()) {
            Ok(n) => Ok(vec![format!("{flag}={n}")]),
            Err(_) => Err("an integer out of range".to_owned()),
        },
        (Kind::Text, DeValue::String(text)) => Ok(vec![format!("{flag}={text}")]),
        (_, other) => Err(a(other.type_str())),
    }
}

/// "a string", "an integer", "an array".
fn a(t: &str) -> String {
    if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {t}")
    } else {
        format!("a {t}")
    }
}
