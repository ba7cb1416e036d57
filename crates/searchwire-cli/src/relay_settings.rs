//! The settings of `searchwire relay`, read from its clap definition: each flag's key in
//! the config file, its environment variable, the kind of value it takes and whether that
//! is a secret. The config file (`relay_file`), the variables (`relay_config`) and
//! `--check` (`relay_check`) all read this one list, so a flag added to `RelayArgs` is a
//! setting everywhere with no code of its own.

use clap::{ArgAction, Command, CommandFactory};

use crate::args::Cli;

/// The prefix of every relay setting's environment variable.
pub const ENV_PREFIX: &str = "SEARCHWIRE_RELAY_";

/// Flags that are not settings: they say what to do with the settings (or print help).
const NOT_SETTINGS: &[&str] = &["help", "version", "config", "check"];

/// The kind of value a flag takes, read from its clap definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A switch (`--queue-only`): a boolean.
    Switch,
    /// A counted switch (`-v`): a non-negative integer, the number of times.
    Count,
    /// An integer value.
    Integer,
    /// Any other value: a string, as on the command line.
    Text,
}

/// One setting of `searchwire relay`: a flag, its key and variable.
#[derive(Clone, Debug)]
pub(crate) struct Setting {
    /// clap's id (`queue_dir`).
    pub id: String,
    /// The flag's long name, which is the file's key (`queue-dir`).
    pub key: String,
    /// `SEARCHWIRE_RELAY_QUEUE_DIR`.
    pub env: String,
    pub kind: Kind,
    /// Repeatable: an array in the file, one value per line in the variable.
    pub repeated: bool,
    /// Its value may be left out (`--compress` or `--compress=4096`): `true` in the file or
    /// the variable gives the flag alone, `false` leaves it out.
    pub optional_value: bool,
    /// The flag's value name (`DIR`), for messages.
    pub value_name: String,
    /// Its value is a secret: printed as `<redacted>`.
    pub secret: bool,
}

impl Setting {
    /// What the file must give for it, in words.
    pub(crate) fn expected(&self) -> String {
        let one = match self.kind {
            Kind::Switch => "a boolean (true or false)".to_owned(),
            Kind::Count => "a non-negative integer".to_owned(),
            Kind::Integer => format!("an integer ({})", self.value_name),
            Kind::Text => format!("a string ({})", self.value_name),
        };
        if self.repeated {
            format!("{one}, or an array of them")
        } else if self.optional_value {
            format!("{one}, or a boolean")
        } else {
            one
        }
    }
}

/// A flag's name says its value is a secret when it holds one of these words (a password, a
/// token): `--password`, `--bearer`, `--auth-token`, `--auth-password`, and any such flag
/// added later.
const SECRET_WORDS: &[&str] = &["password", "token", "bearer", "secret"];

/// The environment variable of the flag `key`.
pub(crate) fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase().replace('-', "_"))
}

/// `searchwire relay` as clap sees it (global flags propagated into it).
pub(crate) fn relay_command() -> Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd.find_subcommand("relay")
        .cloned()
        .unwrap_or_else(|| Command::new("relay"))
}

/// Every setting of `cmd` (see the module docs).
pub(crate) fn settings(cmd: &Command) -> Vec<Setting> {
    let integer = [
        std::any::TypeId::of::<u8>(),
        std::any::TypeId::of::<u16>(),
        std::any::TypeId::of::<u32>(),
        std::any::TypeId::of::<u64>(),
        std::any::TypeId::of::<usize>(),
        std::any::TypeId::of::<i32>(),
        std::any::TypeId::of::<i64>(),
    ];
    cmd.get_arguments()
        .filter_map(|arg| {
            let key = arg.get_long()?;
            if NOT_SETTINGS.contains(&key) {
                return None;
            }
            let kind = match arg.get_action() {
                ArgAction::SetTrue | ArgAction::SetFalse => Kind::Switch,
                ArgAction::Count => Kind::Count,
                _ if integer
                    .iter()
                    .any(|t| arg.get_value_parser().type_id() == *t) =>
                {
                    Kind::Integer
                }
                _ => Kind::Text,
            };
            let value_name = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map_or_else(|| "VALUE".to_owned(), |v| v.to_string());
            Some(Setting {
                id: arg.get_id().to_string(),
                key: key.to_owned(),
                env: env_name(key),
                kind,
                repeated: matches!(arg.get_action(), ArgAction::Append),
                optional_value: arg.get_num_args().is_some_and(|n| n.min_values() == 0)
                    && !matches!(
                        arg.get_action(),
                        ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count
                    ),
                value_name,
                secret: SECRET_WORDS.iter().any(|w| key.contains(w)),
            })
        })
        .collect()
}

/// The candidate nearest to `name`: among those that contain it or that it contains (`TOKEN`
/// and `AUTH_TOKEN`, `tls` and `tls-key`) if any, else among all, the one at the smallest
/// edit distance (ties to the first).
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let all: Vec<&str> = candidates.collect();
    let related: Vec<&str> = all
        .iter()
        .copied()
        .filter(|c| c.contains(name) || name.contains(*c))
        .collect();
    let pool = if related.is_empty() { all } else { related };
    pool.into_iter().min_by_key(|c| distance(name, c))
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}
