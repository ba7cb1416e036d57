//! The real `searchwire relay` binary with TLS, talked to by curl (a real TLS client):
//! HTTPS with certificates made in the test and written to real files, a real SIGHUP that
//! reloads them (and a bad new pair that keeps the old one), a reload when the files change,
//! mutual TLS, and the exit code of a public listener without TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

use searchwire_fake::certs::{replace_file, TestCa as Ca};

fn ca(name: &str) -> Ca {
    Ca::new(name).unwrap()
}

fn leaf(ca: &Ca, client: bool) -> (String, String) {
    ca.leaf(client).unwrap()
}

fn write(path: &Path, text: &str) {
    replace_file(path, text).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

struct Relay {
    child: Child,
    port: u16,
    lines: mpsc::UnboundedReceiver<String>,
    _queue: tempfile::TempDir,
}

impl Relay {
    /// Starts the relay (cluster unreachable, every item queued) and waits for it to listen.
    async fn start(extra: &[&str]) -> Relay {
        let queue = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut child = Command::new(BIN)
            .args(["relay", "--url", "http://127.0.0.1:1", "--queue-only"])
            .args(["--queue-dir", queue.path().to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (tx, mut lines) = mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(l)) = stderr.next_line().await {
                eprintln!("[relay] {l}");
                let _ = tx.send(l);
            }
        });
        let listening = wait_line(&mut lines, "listening on https://").await;
        assert!(
            listening.contains(&format!("127.0.0.1:{port}")),
            "{listening}"
        );
        Relay {
            child,
            port,
            lines,
            _queue: queue,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    fn hangup(&self) {
        let pid = self.child.id().unwrap().to_string();
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -HUP {pid}");
    }

    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

/// The next stderr line containing `needle` (30 s at most).
async fn wait_line(lines: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> String {
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.recv().await {
            if l.contains(needle) {
                return l;
            }
        }
        panic!("the relay's stderr ended before {needle:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("no {needle:?} on the relay's stderr within 30 s"))
}

/// What curl got: its exit code (0, or 60 for an untrusted certificate, ...), the HTTP
/// status and the body.
struct Curl {
    code: i32,
    status: u16,
    body: String,
}

async fn curl(ca: &Path, identity: Option<(&Path, &Path)>, args: &[&str]) -> Curl {
    let mut cmd = Command::new("curl");
    cmd.args(["--silent", "--show-error", "--max-time", "10"])
        .arg("--cacert")
        .arg(ca)
        .args(["--write-out", "\n%{http_code}"]);
    if let Some((cert, key)) = identity {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    let out = cmd.args(args).output().await.expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    Curl {
        code: out.status.code().unwrap_or(-1),
        status: status.trim().parse().unwrap_or(0),
        body: body.to_owned(),
    }
}

struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Files {
        Files(tempfile::tempdir().unwrap())
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    fn s(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_owned()
    }
    fn server(&self, (cert, key): &(String, String), ca: &Ca, ca_name: &str) {
        write(&self.path("relay.crt"), cert);
        write(&self.path("relay.key"), key);
        write(&self.path(ca_name), &ca.pem);
    }
}

#[tokio::test]
async fn curl_gets_https_and_a_sighup_reloads_the_certificate_unless_the_new_pair_is_bad() {
    let f = Files::new();
    let first_ca = ca("first CA");
    f.server(&leaf(&first_ca, false), &first_ca, "first-ca.pem");
    let (cert, key) = (f.s("relay.crt"), f.s("relay.key"));
    let relay = Relay::start(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-reload-interval",
        "0s",
    ])
    .await;
    let mut relay = relay;
    let live = relay.url("/health/live");
    let got = curl(&f.path("first-ca.pem"), None, &[&live]).await;
    assert_eq!((got.code, got.status), (0, 200), "{}", got.body);
    let bulk = curl(
        &f.path("first-ca.pem"),
        None,
        &[
            "-H",
            "Content-Type: application/x-ndjson",
            "--data-binary",
            "{\"index\":{\"_index\":\"logs\"}}\n{\"m\":1}\n",
            &relay.url("/_bulk"),
        ],
    )
    .await;
    assert_eq!(bulk.status, 200, "{}", bulk.body);
    assert!(bulk.body.contains("\"queued\""), "{}", bulk.body);

    // A renewed certificate from another CA, then SIGHUP: curl trusting the new CA gets
    // through, curl trusting only the old one does not (60: peer certificate not trusted).
    let second_ca = ca("second CA");
    f.server(&leaf(&second_ca, false), &second_ca, "second-ca.pem");
    relay.hangup();
    wait_line(
        &mut relay.lines,
        "SIGHUP: TLS certificate reloaded (sha256:",
    )
    .await;
    let got = curl(&f.path("second-ca.pem"), None, &[&live]).await;
    assert_eq!((got.code, got.status), (0, 200), "{}", got.body);
    let old = curl(&f.path("first-ca.pem"), None, &[&live]).await;
    assert_eq!(old.code, 60, "the old CA no longer verifies the relay");

    // A bad new pair (a key that is not the certificate's): logged, the second pair stays.
    let (third_cert, _) = leaf(&second_ca, false);
    write(&f.path("relay.crt"), &third_cert);
    relay.hangup();
    let warned = wait_line(&mut relay.lines, "TLS reload failed").await;
    assert!(
        warned.contains("still serving the previous certificate"),
        "{warned}"
    );
    assert!(
        warned.contains("does not go with the certificate"),
        "{warned}"
    );
    let got = curl(&f.path("second-ca.pem"), None, &[&live]).await;
    assert_eq!((got.code, got.status), (0, 200), "{}", got.body);
    relay.stop().await;
}

#[tokio::test]
async fn changed_files_are_served_without_a_signal() {
    let f = Files::new();
    let first_ca = ca("first CA");
    f.server(&leaf(&first_ca, false), &first_ca, "first-ca.pem");
    let (cert, key) = (f.s("relay.crt"), f.s("relay.key"));
    let relay = Relay::start(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-reload-interval",
        "100ms",
    ])
    .await;
    let live = relay.url("/health/live");
    assert_eq!(
        curl(&f.path("first-ca.pem"), None, &[&live]).await.status,
        200
    );
    let second_ca = ca("second CA");
    f.server(&leaf(&second_ca, false), &second_ca, "second-ca.pem");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while curl(&f.path("second-ca.pem"), None, &[&live]).await.status != 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the changed files were not served within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.stop().await;
}

#[tokio::test]
async fn curl_with_a_client_certificate_is_the_relays_client_and_without_one_reaches_health_only() {
    let f = Files::new();
    let server_ca = ca("server CA");
    f.server(&leaf(&server_ca, false), &server_ca, "server-ca.pem");
    let client_ca = ca("client CA");
    write(&f.path("client-ca.pem"), &client_ca.pem);
    let (client_cert, client_key) = leaf(&client_ca, true);
    write(&f.path("client.crt"), &client_cert);
    write(&f.path("client.key"), &client_key);
    let (cert, key, cca) = (f.s("relay.crt"), f.s("relay.key"), f.s("client-ca.pem"));
    let relay = Relay::start(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &cca,
    ])
    .await;
    let ca_file = f.path("server-ca.pem");
    let bulk_args = |url: String| {
        vec![
            "-H".to_owned(),
            "Content-Type: application/x-ndjson".to_owned(),
            "--data-binary".to_owned(),
            "{\"index\":{\"_index\":\"logs\"}}\n{\"m\":1}\n".to_owned(),
            url,
        ]
    };
    let args = bulk_args(relay.url("/_bulk"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let health = curl(&ca_file, None, &[&relay.url("/health/retry-queue")]).await;
    assert_eq!(health.status, 200, "{}", health.body);
    let anonymous = curl(&ca_file, None, &args).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    assert!(
        anonymous.body.contains("client certificate"),
        "{}",
        anonymous.body
    );

    let identity = Some((f.path("client.crt"), f.path("client.key")));
    let identity = identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    let certified = curl(&ca_file, identity, &args).await;
    assert_eq!(
        (certified.code, certified.status),
        (0, 200),
        "{}",
        certified.body
    );
    assert!(certified.body.contains("\"queued\""), "{}", certified.body);
    relay.stop().await;
}

#[tokio::test]
async fn a_public_listener_without_tls_exits_2_and_says_how_to_add_it() {
    let queue = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let listen = format!("0.0.0.0:{port}");
    let base = [
        "relay",
        "--url",
        "http://127.0.0.1:1",
        "--auth-token",
        "t0ken",
        "--listen",
        listen.as_str(),
        "--queue-dir",
        queue.path().to_str().unwrap(),
    ];
    let out = Command::new(BIN).args(base).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in plaintext"), "{err}");
    assert!(err.contains("--tls-cert FILE --tls-key FILE"), "{err}");
    assert!(err.contains("--allow-plaintext"), "{err}");
    assert!(!err.contains("t0ken"), "{err}");
    // The operator who means it: valid (checked without binding).
    let out = Command::new(BIN)
        .args(base)
        .args(["--allow-plaintext", "--check"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
