//! The merge of flags, variables, the config file and defaults, through clap as `main` does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};

use super::*;
use crate::args::{Cli, Command as Sub};
use crate::relay::RelayArgs;
use crate::relay_settings::settings;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, OsString> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
        .collect()
}

fn argv(args: &[&str]) -> Vec<OsString> {
    ["searchwire", "relay"]
        .iter()
        .chain(args)
        .map(OsString::from)
        .collect()
}

/// Layers, then parses as `main` does: the relay's arguments and the sources.
fn relay(args: &[&str], vars: &[(&str, &str)]) -> Result<(RelayArgs, Sources), String> {
    let l = layer(argv(args), &env(vars))?;
    let m = Cli::command()
        .try_get_matches_from(&l.argv)
        .map_err(|e| e.to_string())?;
    match Cli::from_arg_matches(&m)
        .map_err(|e| e.to_string())?
        .command
    {
        Sub::Relay(a) => Ok((*a, l.sources.unwrap())),
        _ => Err("not the relay".into()),
    }
}

fn file(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.toml");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap().to_owned();
    (dir, p)
}

#[test]
fn a_flag_wins_over_a_variable_which_wins_over_the_file_which_wins_over_the_default() {
    let (_d, path) = file(
        "url = \"http://file:9200\"\nqueue-dir = \"/q\"\nlive-budget = \"1s\"\nmax-retries = 7\n",
    );
    let cfg = ["--config", path.as_str()];
    let var = [("SEARCHWIRE_RELAY_LIVE_BUDGET", "2s")];

    let with_flag: Vec<&str> = cfg.iter().copied().chain(["--live-budget", "3s"]).collect();
    let (a, s) = relay(&with_flag, &var).unwrap();
    assert_eq!(a.live_budget, Duration::from_secs(3));
    assert_eq!(
        s.of("live_budget", Some(ValueSource::CommandLine)),
        Source::Flag
    );

    let (a, s) = relay(&cfg, &var).unwrap();
    assert_eq!(a.live_budget, Duration::from_secs(2));
    assert_eq!(
        s.of("live_budget", None),
        Source::Env("SEARCHWIRE_RELAY_LIVE_BUDGET".into())
    );

    let (a, s) = relay(&cfg, &[]).unwrap();
    assert_eq!(a.live_budget, Duration::from_secs(1));
    assert_eq!(s.of("live_budget", None), Source::File);
    assert_eq!(a.max_retries, 7);
    assert_eq!(a.conn.urls, ["http://file:9200"]);
    assert_eq!(a.queue_dir.as_deref(), Some(std::path::Path::new("/q")));

    let (a, s) = relay(&["--url", "http://x", "--queue-dir", "q"], &[]).unwrap();
    assert_eq!(a.live_budget, Duration::from_secs(5));
    assert_eq!(
        s.of("live_budget", Some(ValueSource::DefaultValue)),
        Source::Default
    );
}

#[test]
fn repeatable_flags_take_arrays_in_the_file_and_lines_in_a_variable_and_a_flag_replaces_them() {
    let (_d, path) = file(
        "url = [\"http://a:9200\", \"http://b:9200\"]\nqueue-dir = \"q\"\n\
         priority = [\"audit-=9\", \"x-=3\"]\npass-through = \"DELETE /{index}\"\n",
    );
    let (a, _) = relay(&["--config", &path], &[]).unwrap();
    assert_eq!(a.conn.urls, ["http://a:9200", "http://b:9200"]);
    assert_eq!(a.priority.len(), 2);
    assert_eq!(
        a.pass_through.len(),
        1,
        "a single value for a repeatable key"
    );

    let vars = [(
        "SEARCHWIRE_RELAY_PASS_THROUGH",
        "PUT,POST /_ilm/policy/{name}\r\nDELETE /{index}\n\n",
    )];
    let (a, _) = relay(&["--config", &path], &vars).unwrap();
    assert_eq!(a.pass_through.len(), 2, "{:?}", a.pass_through);

    // The command line's list replaces the file's, it does not add to it.
    let (a, _) = relay(&["--config", &path, "--url", "http://c:9200"], &[]).unwrap();
    assert_eq!(a.conn.urls, ["http://c:9200"]);
    let vars = [("SEARCHWIRE_RELAY_URL", "http://d:9200,http://e:9200")];
    let (a, _) = relay(&["--config", &path], &vars).unwrap();
    assert_eq!(a.conn.urls, ["http://d:9200", "http://e:9200"]);
}

#[test]
fn switches_and_counts_from_the_file_and_variables() {
    let (_d, path) =
        file("url = \"http://a\"\nqueue-dir = \"q\"\nqueue-only = true\nverbose = 2\n");
    let (a, _) = relay(&["--config", &path], &[]).unwrap();
    assert!(a.queue_only);
    // A variable that says false wins over the file's true.
    let (a, _) = relay(
        &["--config", &path],
        &[("SEARCHWIRE_RELAY_QUEUE_ONLY", "false")],
    )
    .unwrap();
    assert!(!a.queue_only);
    let l = layer(argv(&["--config", &path]), &env(&[])).unwrap();
    let m = Cli::command().try_get_matches_from(&l.argv).unwrap();
    assert_eq!(Cli::from_arg_matches(&m).unwrap().verbose, 2);
    let e = relay(
        &["--config", &path],
        &[("SEARCHWIRE_RELAY_QUEUE_ONLY", "maybe")],
    )
    .unwrap_err();
    assert!(
        e.contains("SEARCHWIRE_RELAY_QUEUE_ONLY must be true or false"),
        "{e}"
    );
}

#[test]
fn a_flag_with_an_optional_value_takes_a_boolean_or_the_value() {
    // `--compress[=MIN_BYTES]`: `true` is the flag alone, a number its value, `false` off.
    let base = "url = \"http://a\"\nqueue-dir = \"q\"\n";
    let (_d, on) = file(&format!("{base}compress = true\n"));
    let (a, _) = relay(&["--config", &on], &[]).unwrap();
    assert_eq!(a.compress.compress, Some(None));
    let (_d2, sized) = file(&format!("{base}compress = 4096\n"));
    let (a, _) = relay(&["--config", &sized], &[]).unwrap();
    assert_eq!(a.compress.compress, Some(Some(4096)));
    let (a, _) = relay(
        &["--config", &on],
        &[("SEARCHWIRE_RELAY_COMPRESS", "false")],
    )
    .unwrap();
    assert_eq!(a.compress.compress, None);
    let (a, _) = relay(
        &["--config", &sized],
        &[("SEARCHWIRE_RELAY_COMPRESS", "on")],
    )
    .unwrap();
    assert_eq!(a.compress.compress, Some(None));
    let (a, _) = relay(&["--config", &on], &[("SEARCHWIRE_RELAY_COMPRESS", "2048")]).unwrap();
    assert_eq!(a.compress.compress, Some(Some(2048)));
    let (_d3, bad) = file(&format!("{base}compress = \"big\"\n"));
    let e = relay(&["--config", &bad], &[]).unwrap_err();
    assert!(e.contains("compress") && e.contains("or a boolean"), "{e}");
}

#[test]
fn the_file_and_variables_can_give_what_clap_requires_and_the_config_path_itself() {
    let (_d, path) = file("url = \"http://a\"\nqueue-dir = \"q\"\nauth-user = \"u\"\n");
    // --auth-user requires --auth-password: the variable gives it.
    let (a, _) = relay(
        &[],
        &[
            ("SEARCHWIRE_RELAY_CONFIG", path.as_str()),
            ("SEARCHWIRE_RELAY_AUTH_PASSWORD", "pw"),
        ],
    )
    .unwrap();
    assert_eq!(a.auth_user.as_deref(), Some("u"));
    assert_eq!(a.auth_password.as_deref(), Some("pw"));
    let e = relay(&["--config", &path], &[]).unwrap_err();
    assert!(e.contains("--auth-password"), "{e}");
}

#[test]
fn unknown_keys_and_variables_name_the_closest_and_wrong_types_the_expected_one() {
    let (_d, path) = file(
        "url = \"http://a\"\nqueue_dir = \"q\"\nmax-retries = \"ten\"\nqueue-only = 1\n\
         priority = [\"a=1\", 2]\n[tls]\ncert = \"c\"\n",
    );
    let e = relay(&["--config", &path], &[]).unwrap_err();
    assert!(
        e.contains("line 2: unknown key `queue_dir`; the closest known key is `queue-dir`"),
        "{e}"
    );
    assert!(
        e.contains("line 3: key `max-retries` must be an integer (N), not a string"),
        "{e}"
    );
    assert!(
        e.contains("line 4: key `queue-only` must be a boolean (true or false), not an integer"),
        "{e}"
    );
    assert!(e.contains("key `priority` must be a string (PREFIX=N), or an array of them, not an array holding an integer"), "{e}");
    assert!(e.contains("line 6: `tls` is a table or section"), "{e}");
    assert!(e.contains("`tls-"), "{e}");

    let e = relay(
        &["--url", "x", "--queue-dir", "q"],
        &[("SEARCHWIRE_RELAY_TOKEN", "t")],
    )
    .unwrap_err();
    assert!(
        e.contains("unknown environment variable SEARCHWIRE_RELAY_TOKEN"),
        "{e}"
    );
    assert!(
        e.contains("the closest is SEARCHWIRE_RELAY_AUTH_TOKEN"),
        "{e}"
    );

    let (_d2, check) = file("check = true\n");
    let e = relay(&["--config", &check], &[]).unwrap_err();
    assert!(
        e.contains("`check` cannot be set in the config file"),
        "{e}"
    );
}

#[test]
fn syntax_errors_give_the_line_and_never_quote_it() {
    let (_d, path) = file("url = \"http://a\"\npassword = \"hunter2\nqueue-dir = \"q\"\n");
    let e = relay(&["--config", &path], &[]).unwrap_err();
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("not valid TOML"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let e = relay(&["--config", "/nonexistent/relay.toml"], &[]).unwrap_err();
    assert!(
        e.contains("cannot read the config file /nonexistent/relay.toml"),
        "{e}"
    );
}

#[test]
fn every_flag_of_the_relay_is_a_setting_with_a_variable() {
    let all = settings(&crate::relay_settings::relay_command());
    let keys: Vec<&str> = all.iter().map(|s| s.key.as_str()).collect();
    for k in [
        "url",
        "password",
        "queue-dir",
        "redis",
        "auth-token",
        "tls-cert",
        "tls-client-ca",
        "allow-plaintext",
        "priority",
        "verbose",
    ] {
        assert!(keys.contains(&k), "{k} missing from {keys:?}");
    }
    assert!(!keys.contains(&"config") && !keys.contains(&"check") && !keys.contains(&"help"));
    let secret: Vec<&str> = all
        .iter()
        .filter(|s| s.secret)
        .map(|s| s.key.as_str())
        .collect();
    assert_eq!(
        secret,
        ["password", "bearer", "auth-token", "auth-password"]
    );
    let queue_dir = all.iter().find(|s| s.key == "queue-dir").unwrap();
    assert_eq!(queue_dir.env, "SEARCHWIRE_RELAY_QUEUE_DIR");
}

#[test]
fn other_commands_are_left_alone() {
    let args: Vec<OsString> = ["searchwire", "health", "--url", "http://a"]
        .iter()
        .map(OsString::from)
        .collect();
    let l = layer(args.clone(), &env(&[("SEARCHWIRE_RELAY_TYPO", "x")])).unwrap();
    assert_eq!(l.argv, args);
    assert!(l.sources.is_none());
}
