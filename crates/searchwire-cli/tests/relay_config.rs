//! `searchwire relay --config FILE`, the `SEARCHWIRE_RELAY_*` variables and `--check`,
//! through the real binary: the documented example file is valid, secrets are never
//! printed, a bad file exits 2 naming the key, and a relay runs from its file alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/relay.example.toml");

/// `searchwire relay ARGS` with only these `SEARCHWIRE_RELAY_*` variables.
async fn relay(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("relay").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("SEARCHWIRE_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(vars.iter().copied()).output().await.unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A certificate and key (PEM), self-signed for localhost.
fn pair() -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    (ck.cert.pem(), ck.signing_key.serialize_pem())
}

#[tokio::test]
async fn the_example_file_is_valid_once_its_files_exist_and_flags_and_variables_override_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (cert, key) = pair();
    std::fs::write(p("relay.crt"), &cert).unwrap();
    std::fs::write(p("relay.key"), &key).unwrap();
    std::fs::write(p("ca.pem"), &cert).unwrap();
    let (tls_cert, tls_key, ca, queue) = (p("relay.crt"), p("relay.key"), p("ca.pem"), p("queue"));
    let out = relay(
        &[
            "--config",
            EXAMPLE,
            "--check",
            "--tls-cert",
            &tls_cert,
            "--tls-key",
            &tls_key,
            "--tls-client-ca",
            &ca,
            "--ca-cert",
            &ca,
            "--queue-dir",
            &queue,
        ],
        &[
            ("SEARCHWIRE_RELAY_PASSWORD", "cluster-pw-1"),
            ("SEARCHWIRE_RELAY_AUTH_TOKEN", "client-token-2"),
            ("SEARCHWIRE_RELAY_MAX_RETRIES", "42"),
        ],
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("the configuration is valid, TLS certificate sha256:"),
        "{stderr}"
    );
    for line in [
        "listen = \"0.0.0.0:9280\"  # config file".to_owned(),
        "url = [\"https://opensearch-1.internal:9200\", \"https://opensearch-2.internal:9200\"]  # config file".to_owned(),
        format!("tls-cert = \"{tls_cert}\"  # flag"),
        "password = \"<redacted>\"  # SEARCHWIRE_RELAY_PASSWORD".to_owned(),
        "auth-token = \"<redacted>\"  # SEARCHWIRE_RELAY_AUTH_TOKEN".to_owned(),
        "max-retries = 42  # SEARCHWIRE_RELAY_MAX_RETRIES".to_owned(),
        "priority = [\"audit-=200\", \"debug-=10\"]  # config file".to_owned(),
        "# queue-only = false  (default)".to_owned(),
        "# max-connections = 1024  (default)".to_owned(),
        format!("# config file: {EXAMPLE}"),
    ] {
        assert!(stdout.lines().any(|l| l == line), "no line {line:?} in\n{stdout}");
    }
    for secret in ["cluster-pw-1", "client-token-2"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} printed"
        );
    }

    // As it is, the example names files of a real host: --check says which are missing.
    let out = relay(
        &["--config", EXAMPLE, "--check"],
        &[
            ("SEARCHWIRE_RELAY_PASSWORD", "cluster-pw-1"),
            ("SEARCHWIRE_RELAY_AUTH_TOKEN", "client-token-2"),
        ],
    )
    .await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/etc/searchwire/tls/cluster-ca.pem"),
        "{stderr}"
    );
    assert!(stderr.contains("/etc/searchwire/tls/relay.crt"), "{stderr}");
}

#[tokio::test]
async fn check_prints_no_secret_from_the_file_and_its_output_reads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        "url = \"http://relay:url-pw-3@127.0.0.1:9200\"\nqueue-dir = \"q\"\n\
         auth-user = \"shipper\"\nauth-password = \"auth-pw-4\"\nqueue-only = true\n",
    )
    .unwrap();
    let out = relay(&["--config", file.to_str().unwrap(), "--check"], &[]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stdout.contains("url-pw-3") && !stderr.contains("url-pw-3"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("auth-pw-4") && !stderr.contains("auth-pw-4"),
        "{stdout}"
    );
    assert!(
        stdout.contains("auth-password = \"<redacted>\"  # config file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("url = [\"http://<redacted>@127.0.0.1:9200\"]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("auth-user = \"shipper\"  # config file"),
        "{stdout}"
    );

    // The printed configuration is itself a valid config file (the redacted password too).
    let printed = dir.path().join("printed.toml");
    std::fs::write(&printed, &stdout).unwrap();
    let again = relay(&["--config", printed.to_str().unwrap(), "--check"], &[]).await;
    let (stdout2, stderr2) = text(&again);
    assert_eq!(again.status.code(), Some(0), "{stderr2}");
    assert!(
        stdout2.contains("queue-only = true  # config file"),
        "{stdout2}"
    );
}

#[tokio::test]
async fn a_bad_file_exits_2_naming_each_key_the_closest_one_and_the_type() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        "url = \"http://127.0.0.1:9200\"\nqueue-dri = \"q\"\nbacklog-threshold = \"lots\"\n",
    )
    .unwrap();
    let out = relay(&["--config", file.to_str().unwrap()], &[]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown key `queue-dri`; the closest known key is `queue-dir`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("key `backlog-threshold` must be an integer (N), not a string"),
        "{stderr}"
    );

    // A value clap refuses says where it came from.
    std::fs::write(
        &file,
        "url = \"http://127.0.0.1:9200\"\nqueue-dir = \"q\"\nlive-budget = \"soon\"\n",
    )
    .unwrap();
    let out = relay(&["--config", file.to_str().unwrap(), "--check"], &[]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--live-budget"), "{stderr}");
    assert!(
        stderr.contains("note: --live-budget came from the key `live-budget` of"),
        "{stderr}"
    );

    // What the relay refuses at start, --check refuses too.
    std::fs::write(
        &file,
        "url = \"http://127.0.0.1:9200\"\nqueue-dir = \"q\"\nmax-connections = 0\n",
    )
    .unwrap();
    let out = relay(&["--config", file.to_str().unwrap(), "--check"], &[]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("must be above zero"), "{stderr}");

    let out = relay(
        &["--url", "http://x", "--queue-dir", "q"],
        &[("SEARCHWIRE_RELAY_QUEU_DIR", "q")],
    )
    .await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the closest is SEARCHWIRE_RELAY_QUEUE_DIR"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_relay_runs_from_its_config_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = dir.path().join("relay.toml");
    let queue = dir.path().join("queue");
    std::fs::write(
        &file,
        format!(
            "url = \"http://127.0.0.1:1\"\nqueue-dir = \"{}\"\nlisten = \"127.0.0.1:{port}\"\n\
             queue-only = true\ndrain-grace = \"0s\"\n",
            queue.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["relay", "--config", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if l.contains("listening on") {
                return l;
            }
        }
        String::new()
    })
    .await
    .unwrap();
    assert!(
        listening.contains(&format!("http://127.0.0.1:{port}")),
        "{listening}"
    );
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let body = "{\"index\":{\"_index\":\"logs\"}}\n{\"m\":1}\n";
    s.write_all(
        format!(
            "POST /_bulk HTTP/1.1\r\nHost: r\r\nConnection: close\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("\"queued\""),
        "queue-only from the file: {answer}"
    );
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(
        Path::new(&queue).exists(),
        "the queue directory came from the file"
    );
}
