//! The systemd unit in `packaging/`: `systemd-analyze verify` finds nothing to say about
//! it, `systemd-analyze security` rates its hardening OK or better, and it runs the relay
//! from its config file, checks it first and reloads TLS on `systemctl reload`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../packaging/searchwire-relay.service"
);
const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

/// The unit with `/usr/bin/searchwire` replaced by the binary under test (verify checks
/// that the executables exist), in a directory of its own.
fn unit_under_test() -> (tempfile::TempDir, std::path::PathBuf) {
    let text = std::fs::read_to_string(UNIT).unwrap();
    assert!(text.contains("/usr/bin/searchwire relay --config /etc/searchwire/relay.toml"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("searchwire-relay.service");
    std::fs::write(&path, text.replace("/usr/bin/searchwire", BIN)).unwrap();
    (dir, path)
}

fn systemd_analyze(args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("systemd-analyze cannot run ({e}): install it with `apt-get install -y systemd`")
        })
}

#[test]
fn the_systemd_unit_verifies_clean() {
    let (_dir, path) = unit_under_test();
    let out = systemd_analyze(&["verify", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify warns:\n{stderr}"
    );
}

#[test]
fn the_systemd_unit_is_hardened() {
    let (_dir, path) = unit_under_test();
    let out = systemd_analyze(&["security", "--offline=true", path.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for searchwire-relay.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    // systemd rates up to 3.9 "OK"; the unit measures 1.4 with systemd 252.
    assert!(level <= 2.0, "exposure {level}, more than 2.0:\n{text}");
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for line in [
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ExecStartPre=/usr/bin/searchwire relay --config /etc/searchwire/relay.toml --check",
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "RestartPreventExitStatus=2",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
}
