//! `searchwire relay`'s settings from two places besides its flags: a TOML file (`--config
//! FILE`) and environment variables (`SEARCHWIRE_RELAY_<NAME>`).
//!
//! Both are derived from the clap definition of `searchwire relay`, nothing else: a key of
//! the file is a flag's long name (`queue-dir`), a variable is the prefix and the name in
//! upper case with `_` for `-` (`SEARCHWIRE_RELAY_QUEUE_DIR`), and the type a key takes is
//! read from the flag (a switch takes a boolean, a repeatable flag an array, an integer flag
//! an integer, every other flag a string). A flag added to `RelayArgs` (or to the connection
//! or Redis flags it flattens) is therefore a key and a variable at once, with no code here.
//!
//! How they merge: the values from the file and the environment are turned into the flags
//! they stand for and handed to clap with the command line, for each setting the command
//! line does not give (flag > variable > file > default). clap then checks everything once,
//! as for flags: the same parsers, conflicts and requirements, the same messages; a note
//! says where a value that clap refused came from ([`Sources::note`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::CommandFactory;

use crate::args::Cli;
use crate::relay_settings::{
    closest, env_name, relay_command, settings, Kind, Setting, ENV_PREFIX,
};

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The command line.
    Flag,
    /// This environment variable.
    Env(String),
    /// The `--config` file.
    File,
    /// The flag's default (or unset).
    Default,
}

/// The command line with the file's and the environment's settings added.
#[derive(Debug)]
pub struct Layered {
    /// What clap parses.
    pub argv: Vec<OsString>,
    /// For `searchwire relay`: where each setting that is not a flag came from.
    pub sources: Option<Sources>,
}

/// Where the settings the command line did not give came from.
#[derive(Debug, Default)]
pub struct Sources {
    /// The `--config` file, when one was read.
    pub file: Option<PathBuf>,
    /// By setting id: the variable or the file (absent: the command line or the default).
    pub added: BTreeMap<String, Source>,
}

impl Sources {
    /// Where the value of `id` came from, given what clap says of it.
    pub(crate) fn of(&self, id: &str, clap: Option<ValueSource>) -> Source {
        if let Some(s) = self.added.get(id) {
            return s.clone();
        }
        match clap {
            Some(ValueSource::CommandLine) => Source::Flag,
            _ => Source::Default,
        }
    }

    /// A line saying where the flags a clap error names came from, when that was the file
    /// or the environment (clap's message names the flag only).
    pub fn note(&self, e: &clap::Error) -> Option<String> {
        let named: Vec<String> = e
            .context()
            .flat_map(|(_, v)| match v {
                clap::error::ContextValue::String(s) => vec![s.clone()],
                clap::error::ContextValue::Strings(list) => list.clone(),
                _ => Vec::new(),
            })
            .collect();
        let settings = settings(&relay_command());
        let mut parts = Vec::new();
        for s in &settings {
            let flag = format!("--{}", s.key);
            let is_named = named.iter().any(|n| {
                n == &flag
                    || n.starts_with(&format!("{flag} "))
                    || n.starts_with(&format!("{flag}="))
            });
            if !is_named {
                continue;
            }
            match self.added.get(&s.id) {
                Some(Source::Env(var)) => parts.push(format!("{flag} came from {var}")),
                Some(Source::File) => parts.push(format!(
                    "{flag} came from the key `{}` of {}",
                    s.key,
                    self.file
                        .as_ref()
                        .map_or_else(|| "the config file".to_owned(), |f| f.display().to_string())
                )),
                _ => {}
            }
        }
        (!parts.is_empty()).then(|| format!("note: {}\n", parts.join("; ")))
    }
}

/// Adds the settings of the `--config` file and of the `SEARCHWIRE_RELAY_*` variables in
/// `env` to `argv`, when `argv` runs `searchwire relay`; any other command is returned as it
/// is. The error is a message for the user (exit 2): an unknown key or variable (naming the
/// closest known one), a value of the wrong type (naming the key and the type expected), a
/// file that cannot be read or is not TOML.
pub fn layer(argv: Vec<OsString>, env: &BTreeMap<String, OsString>) -> Result<Layered, String> {
    let unchanged = |argv| {
        Ok(Layered {
            argv,
            sources: None,
        })
    };
    // What the command line gives, read leniently: the file or a variable may supply what
    // it lacks (a required flag, the other half of a pair).
    let Ok(top) = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
    else {
        return unchanged(argv);
    };
    let Some(("relay", sub)) = top.subcommand() else {
        return unchanged(argv);
    };
    let cmd = relay_command();
    let all = settings(&cmd);
    let on_command_line = |id: &str| {
        [sub, &top].iter().any(|m| {
            m.try_get_raw(id).is_ok() && m.value_source(id) == Some(ValueSource::CommandLine)
        })
    };
    check_variables(&all, env)?;
    let config = match sub
        .try_get_raw("config")
        .ok()
        .flatten()
        .and_then(|mut v| v.next())
    {
        Some(path) if on_command_line("config") => Some(PathBuf::from(path)),
        _ => env
            .get(&env_name("config"))
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    };
    let file = match &config {
        Some(path) => crate::relay_file::read(path, &all)?,
        None => BTreeMap::new(),
    };
    let mut added = BTreeMap::new();
    let mut extra: Vec<OsString> = Vec::new();
    for s in &all {
        if on_command_line(&s.id) {
            continue;
        }
        let (tokens, source) = match env.get(&s.env).filter(|v| !v.is_empty()) {
            Some(value) => (from_variable(s, value)?, Source::Env(s.env.clone())),
            None => match file.get(&s.key) {
                Some(tokens) => (tokens.clone(), Source::File),
                None => continue,
            },
        };
        added.insert(s.id.clone(), source);
        extra.extend(tokens.into_iter().map(OsString::from));
    }
    let mut argv = argv;
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    argv.splice(at..at, extra);
    Ok(Layered {
        argv,
        sources: Some(Sources {
            file: config,
            added,
        }),
    })
}

/// Every `SEARCHWIRE_RELAY_*` variable must name a setting (or the config file): a typo is
/// an error that names the closest one, as an unknown key of the file is.
fn check_variables(all: &[Setting], env: &BTreeMap<String, OsString>) -> Result<(), String> {
    let mut known: Vec<String> = all.iter().map(|s| s.env.clone()).collect();
    known.push(env_name("config"));
    for name in env.keys().filter(|k| k.starts_with(ENV_PREFIX)) {
        if !known.contains(name) {
            let tail = name.trim_start_matches(ENV_PREFIX);
            let closest = closest(tail, known.iter().map(|k| k.trim_start_matches(ENV_PREFIX)))
                .map(|k| format!("{ENV_PREFIX}{k}"))
                .unwrap_or_default();
            return Err(format!(
                "unknown environment variable {name}: no setting of searchwire relay is called \
                 that; the closest is {closest} (each variable is {ENV_PREFIX} and a flag's \
                 name, e.g. {} for --queue-dir)",
                env_name("queue-dir")
            ));
        }
    }
    Ok(())
}

/// The flags a variable's value stands for.
fn from_variable(s: &Setting, value: &OsString) -> Result<Vec<String>, String> {
    let Some(text) = value.to_str() else {
        return Err(format!(
            "the environment variable {} is not valid UTF-8",
            s.env
        ));
    };
    let flag = format!("--{}", s.key);
    match s.kind {
        Kind::Switch => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(vec![flag]),
            "false" | "0" | "no" | "off" => Ok(Vec::new()),
            _ => Err(format!(
                "the environment variable {} must be true or false (or 1/0, yes/no, on/off)",
                s.env
            )),
        },
        Kind::Count => match text.trim().parse::<u8>() {
            Ok(n) => Ok(vec![flag; usize::from(n)]),
            Err(_) => Err(format!(
                "the environment variable {} must be a number of times (0 to 255)",
                s.env
            )),
        },
        Kind::Integer | Kind::Text if s.optional_value => {
            match text.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" => Ok(vec![flag]),
                "false" | "no" | "off" => Ok(Vec::new()),
                _ => Ok(vec![format!("{flag}={text}")]),
            }
        }
        Kind::Integer | Kind::Text if s.repeated => Ok(text
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("{flag}={l}"))
            .collect()),
        Kind::Integer | Kind::Text => Ok(vec![format!("{flag}={text}")]),
    }
}

#[cfg(test)]
mod tests;
