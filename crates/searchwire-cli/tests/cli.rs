//! The `searchwire` binary against in-process fake clusters: output formats and exit codes
//! are a contract, so these tests run the real binary as a child process.
//!
//! Each test starts a `FakeCluster` on a multi-thread tokio runtime and runs the binary with
//! `tokio::process`, so the runtime keeps serving the fake nodes while the child runs.

use std::process::Output;
use std::time::Duration;

use searchwire_fake::{Behavior, FakeCluster, Match};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

/// Runs the binary with `args` (and `env`), with none of the environment variables that
/// change its behaviour inherited from the test's environment.
async fn run_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .env_remove("SEARCHWIRE_REQUEST_TIMEOUT")
        .env_remove("SEARCHWIRE_ATTEMPT_TIMEOUT")
        .env_remove("SEARCHWIRE_PASSWORD")
        .env_remove("RUST_LOG")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/searchwire-test/credentials",
        )
        .env("AWS_CONFIG_FILE", "/nonexistent/searchwire-test/config")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match tokio::time::timeout(Duration::from_secs(60), cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("cannot run {BIN}: {e}"),
        Err(_) => panic!("{BIN} {args:?} did not finish within 60 s"),
    }
}

async fn run(args: &[&str]) -> Output {
    run_env(args, &[]).await
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `searchwire: <message>` line (log lines may precede it on stderr).
fn error_line(o: &Output) -> String {
    let err = stderr(o);
    err.lines()
        .find(|l| l.starts_with("searchwire: "))
        .unwrap_or_else(|| panic!("no 'searchwire: ' line on stderr: {err}"))
        .to_string()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

async fn cluster(n: usize) -> FakeCluster {
    FakeCluster::start(n)
        .await
        .unwrap_or_else(|e| panic!("cannot start the fake cluster: {e}"))
}

fn urls(c: &FakeCluster) -> String {
    c.urls().join(",")
}

/// Retries without waiting, so failure tests are fast.
const FAST: [&str; 2] = ["--backoff", "const:1ms"];

// ---- request: single ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_get_prints_the_body_and_exits_0() {
    let c = cluster(2).await;
    let doc = serde_json::json!({"_id": "1", "found": true, "_source": {"msg": "hello"}});
    for n in c.nodes() {
        n.on(
            Match::Path("/logs/_doc/1".into()),
            Behavior::json(200, doc.clone()),
        );
    }
    let out = run(&["request", "GET", "/logs/_doc/1", "--url", &urls(&c)]).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.ends_with('\n'), "{text:?}");
    assert_eq!(json(&text), doc);
    assert_eq!(c.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_flag_prints_status_node_attempts_and_parsed_body() {
    let c = cluster(1).await;
    let out = run(&["request", "get", "/", "--url", &urls(&c), "--json"]).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(v["status"], 200);
    assert_eq!(v["node"], c.node(0).url());
    assert_eq!(v["attempts"], 1);
    assert!(v["body"].is_object(), "{v}");
    assert!(v.get("error").is_none(), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_envelope_embeds_the_body_as_the_node_sent_it_on_one_line() {
    // Key order, number spellings and string contents stay exactly as sent; only the
    // whitespace between tokens goes, so the envelope is one line.
    let c = cluster(1).await;
    let respond = |status: u16, body: &str| Behavior::Respond {
        status,
        headers: Vec::new(),
        body: body.to_string().into(),
    };
    let pretty =
        "{\n  \"z\": 1,\n  \"a\": [12345678901234567890123, 1.50e3],\n  \"s\": \"a  b\\n\"\n}\n";
    c.node(0)
        .on(Match::Path("/pretty".into()), respond(200, pretty));
    c.node(0)
        .on(Match::Path("/text".into()), respond(400, "not \"json\"\n"));
    let url = c.node(0).url();
    let out = run(&["request", "GET", "/pretty", "--url", &url, "--json"]).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{{\"status\":200,\"node\":\"{url}\",\"attempts\":1,\"body\":{{\"z\":1,\"a\":[12345678901234567890123,1.50e3],\"s\":\"a  b\\n\"}}}}\n"
        )
    );
    // A body that is not JSON is a string; a failure adds its error kind.
    let out = run(&["request", "GET", "/text", "--url", &url, "--json"]).await;
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text:?}");
    let v = json(&text);
    assert_eq!(v["status"], 400);
    assert_eq!(v["body"], "not \"json\"\n");
    assert_eq!(v["error"], "status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_sent_as_json_or_ndjson_by_endpoint() {
    let c = cluster(1).await;
    let node = c.node(0);
    let out = run(&[
        "request",
        "POST",
        "/logs/_search",
        "--url",
        &urls(&c),
        "--data",
        r#"{"query":{"match_all":{}}}"#,
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let dir = std::env::temp_dir().join(format!("searchwire-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("bulk.ndjson");
    let bulk = "{\"index\":{\"_index\":\"logs\"}}\n{\"msg\":\"a\"}\n";
    std::fs::write(&file, bulk).unwrap_or_else(|e| panic!("{e}"));
    let at_file = format!("@{}", file.display());
    let out = run(&[
        "request",
        "POST",
        "/_bulk",
        "--url",
        &urls(&c),
        "--data",
        &at_file,
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);

    let search = node.requests_matching(&Match::Path("/logs/_search".into()));
    assert_eq!(search.len(), 1);
    assert_eq!(search[0].header("content-type"), Some("application/json"));
    assert_eq!(&search[0].body[..], br#"{"query":{"match_all":{}}}"#);
    let bulk_req = node.requests_matching(&Match::Path("/_bulk".into()));
    assert_eq!(bulk_req.len(), 1);
    assert_eq!(
        bulk_req[0].header("content-type"),
        Some("application/x-ndjson")
    );
    assert_eq!(&bulk_req[0].body[..], bulk.as_bytes());
}

// ---- request: failures and exit codes ---------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_unavailable_everywhere_exits_1_with_message_and_body() {
    let c = cluster(2).await;
    for n in c.nodes() {
        n.set_default(Behavior::status(503));
    }
    let mut args = vec!["request", "GET", "/", "--max-retries", "1"];
    let u = urls(&c);
    args.extend(["--url", &u]);
    args.extend(FAST);
    let out = run(&args).await;
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    let err = error_line(&out);
    assert!(err.contains("503"), "{err}");
    assert!(err.contains("2 attempts"), "{err}");
    // The final response's body goes to stdout.
    assert_eq!(json(&stdout(&out))["status"], 503);
    assert_eq!(c.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_credentials_exit_5() {
    let c = cluster(1).await;
    c.node(0).set_default(Behavior::status(401));
    let out = run_env(
        &["request", "GET", "/", "--url", &urls(&c), "--user", "admin"],
        &[("SEARCHWIRE_PASSWORD", "s3cret-pw")],
    )
    .await;
    assert_eq!(code(&out), 5, "stderr: {}", stderr(&out));
    let err = error_line(&out);
    assert!(err.contains("401"), "{err}");
    assert!(!err.contains("s3cret-pw") && !stdout(&out).contains("s3cret-pw"));
    // The password came from the environment: basic auth for admin:s3cret-pw.
    let req = &c.node(0).requests()[0];
    assert_eq!(
        req.header("authorization"),
        Some("Basic YWRtaW46czNjcmV0LXB3")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_down_exits_4() {
    let c = cluster(2).await;
    for n in c.nodes() {
        n.kill().await;
    }
    let mut args = vec!["request", "GET", "/"];
    let u = urls(&c);
    args.extend(["--url", &u]);
    args.extend(FAST);
    let out = run(&args).await;
    assert_eq!(code(&out), 4, "stderr: {}", stderr(&out));
    assert!(
        error_line(&out).contains("no node reachable"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_with_a_hanging_node_exits_3() {
    let c = cluster(1).await;
    c.node(0).set_default(Behavior::Hang);
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &urls(&c),
        "--deadline",
        "300ms",
    ])
    .await;
    assert_eq!(code(&out), 3, "stderr: {}", stderr(&out));
    assert!(error_line(&out).contains("deadline"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_too_short_to_start_an_attempt_exits_3_and_sends_nothing() {
    let c = cluster(1).await;
    for deadline in ["1ns", "500us"] {
        let out = run(&[
            "request",
            "POST",
            "/logs/_doc",
            "--url",
            &urls(&c),
            "--data",
            "{}",
            "--deadline",
            deadline,
        ])
        .await;
        assert_eq!(code(&out), 3, "stderr: {}", stderr(&out));
        assert!(
            error_line(&out).contains("nothing was sent"),
            "{}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }
    assert_eq!(c.request_count(), 0, "the node must receive nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_timeout_then_failover_succeeds() {
    // `--attempt-timeout`, and `--timeout`, its deprecated old name.
    for flag in ["--timeout", "--attempt-timeout"] {
        let c = cluster(2).await;
        c.node(0).set_default(Behavior::Hang);
        let out = run(&[
            "request",
            "GET",
            "/",
            "--url",
            &urls(&c),
            flag,
            "200ms",
            "--trace-attempts",
            // The hanging node first: round robin starts at node 0 (latency-aware
            // selection draws at random).
            "--selection",
            "round-robin",
        ])
        .await;
        assert_eq!(code(&out), 0, "{flag}: stderr: {}", stderr(&out));
        let lines = trace_lines(&stderr(&out));
        let outcomes: Vec<&str> = lines.iter().filter_map(|l| l["outcome"].as_str()).collect();
        assert_eq!(outcomes, ["timeout", "ok"], "{flag}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_on_a_live_node_exits_3_and_says_how_to_wait_longer() {
    // The node holds `/_cluster/health` open but answers `GET /` (the liveness check).
    let c = cluster(2).await;
    for i in 0..2 {
        c.node(i)
            .on(Match::Path("/_cluster/health".into()), Behavior::Hang);
    }
    let out = run(&[
        "request",
        "GET",
        "/_cluster/health",
        "--url",
        &urls(&c),
        "--attempt-timeout",
        "200ms",
        "--trace-attempts",
    ])
    .await;
    assert_eq!(code(&out), 3, "stderr: {}", stderr(&out));
    let line = error_line(&out);
    assert!(line.contains("is alive"), "{line}");
    assert!(line.contains("--attempt-timeout"), "{line}");
    let lines = trace_lines(&stderr(&out));
    let outcomes: Vec<&str> = lines.iter().filter_map(|l| l["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["timeout"], "not repeated on the other node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_adaptive_jitter_waits_the_backoff_exactly() {
    // From the 4th retry in 5 minutes the adaptive jitter stretches a backoff x1.8; the
    // switch keeps the user's backoff as computed.
    for (switch, expected) in [
        (None, [20.0, 20.0, 20.0, 36.0, 0.0]),
        (Some("--no-adaptive-jitter"), [20.0, 20.0, 20.0, 20.0, 0.0]),
    ] {
        let c = cluster(1).await;
        c.node(0).on(Match::Any, Behavior::status(503));
        let url = urls(&c);
        let mut args = vec![
            "request",
            "GET",
            "/",
            "--url",
            &url,
            "--backoff",
            "const:20ms",
            "--max-retries",
            "4",
            "--trace-attempts",
        ];
        args.extend(switch);
        let out = run(&args).await;
        assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
        let backoffs: Vec<f64> = trace_lines(&stderr(&out))
            .iter()
            .filter_map(|l| l["backoff_ms"].as_f64())
            .collect();
        assert_eq!(backoffs, expected, "{switch:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cert_needs_its_key_and_readable_files() {
    let base = ["request", "GET", "/", "--url", "https://127.0.0.1:1"];
    let mut alone = base.to_vec();
    alone.extend(["--client-cert", "/nonexistent/cert.pem"]);
    let out = run(&alone).await;
    assert_eq!(code(&out), 2, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("--client-key"), "{}", stderr(&out));
    let mut both = base.to_vec();
    both.extend([
        "--client-cert",
        "/nonexistent/cert.pem",
        "--client-key",
        "/nonexistent/key.pem",
    ]);
    let out = run(&both).await;
    assert_eq!(code(&out), 2, "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read --client-cert file"),
        "{}",
        stderr(&out)
    );
}

// ---- request: usage errors ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_timeout_is_a_usage_error_naming_the_flag() {
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        "http://127.0.0.1:1",
        "--timeout",
        "5 minutes",
    ])
    .await;
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(err.contains("--timeout"), "{err}");
    assert!(err.contains("5 minutes"), "{err}");
}

/// The stderr of a run that must exit with `want`, its error cut with a marker (a short
/// message, however long the value that caused it).
fn assert_cut_error(out: &Output, want: i32) -> String {
    let err = stderr(out);
    assert_eq!(code(out), want, "stderr: {}", &err[..err.len().min(2000)]);
    assert!(err.len() < 2000, "{} bytes of error", err.len());
    assert!(err.contains("more characters)"), "{err}");
    err
}

/// [`assert_cut_error`] for a usage error (2) caused by `huge`: its first 80 characters
/// are shown, no more.
fn assert_cut_usage_error(out: &Output, huge: &str) -> String {
    let err = assert_cut_error(out, 2);
    assert!(err.contains(&huge[..80]), "{err}");
    assert!(!err.contains(&huge[..81]), "{err}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_values_are_cut_in_errors_from_the_environment_flags_and_urls() {
    let digits = "9".repeat(300);
    // One argument may be at most 128 KiB (MAX_ARG_STRLEN).
    let huge = "x".repeat(100_000);
    // The environment.
    for var in ["SEARCHWIRE_ATTEMPT_TIMEOUT", "SEARCHWIRE_REQUEST_TIMEOUT"] {
        let out = run_env(
            &["request", "GET", "/", "--url", "http://127.0.0.1:1"],
            &[(var, &digits)],
        )
        .await;
        let err = assert_cut_usage_error(&out, &digits);
        assert!(err.contains(var), "{err}");
    }
    // Flags: clap's own message and ours.
    for (flag, value) in [("--deadline", &digits), ("--rate", &huge)] {
        let mut args = vec!["request", "GET", "/", "--url", "http://127.0.0.1:1"];
        args.extend([flag, value.as_str()]);
        if flag == "--rate" {
            args.extend(["--repeat", "1"]);
        }
        let err = assert_cut_usage_error(&run(&args).await, value);
        assert!(err.contains(flag), "{err}");
    }
    let method = format!("{huge}()");
    let out = run(&["request", &method, "/", "--url", "http://127.0.0.1:1"]).await;
    let err = assert_cut_usage_error(&out, &method);
    assert!(err.contains("HTTP method"), "{err}");
    // The request's own path, in the error of a request that failed.
    let path = format!("/{}", &huge[..20_000]);
    let out = run(&["request", "GET", &path, "--url", "http://127.0.0.1:1"]).await;
    assert_cut_error(&out, 4);
    // A URL: cut, and its credentials never shown.
    let url = format!("http://user:Sekr1tPassw0rd@{huge}:9200/?q=1");
    let err = assert_cut_error(&run(&["request", "GET", "/", "--url", &url]).await, 2);
    assert!(err.contains("http://<redacted>@xxx"), "{err}");
    assert!(!err.contains("Sekr1tPassw0rd"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_or_incomplete_flags_exit_2() {
    let base = ["request", "GET", "/", "--url", "http://127.0.0.1:1"];
    let cases: [&[&str]; 7] = [
        &["--user", "u"],
        &["--user", "u", "--password", "p", "--bearer", "t"],
        &["--repeat", "2", "--for", "1s"],
        &["--concurrency", "2"],
        &["--backoff", "exp:0s:1s"],
        &["--retry-on-status", "200"],
        &["--deadline", "0"],
    ];
    for extra in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = run(&args).await;
        assert_eq!(code(&out), 2, "{extra:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{extra:?}");
    }
    // Configuration errors found by the client builder also exit 2.
    let out = run(&["request", "GET", "/", "--url", "ftp://nowhere"]).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(error_line(&out).contains("ftp"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheme_typo_with_credentials_exits_2_without_echoing_the_password() {
    for cmd in [
        &["request", "GET", "/", "--json", "--trace-attempts"][..],
        &["health", "--json"][..],
    ] {
        let mut args = cmd.to_vec();
        args.extend_from_slice(&["--url", "https//alice:hunter2@127.0.0.1:1"]);
        let out = run(&args).await;
        assert_eq!(code(&out), 2, "{cmd:?}: {}", stderr(&out));
        assert!(error_line(&out).contains("scheme"), "{}", stderr(&out));
        assert!(
            !stdout(&out).contains("hunter2") && !stderr(&out).contains("hunter2"),
            "{cmd:?}: {}",
            stderr(&out)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_sigv4_signs_with_keys_from_the_environment_or_a_profile_and_never_prints_them() {
    let c = cluster(1).await;
    let url = urls(&c);
    let base = [
        "request",
        "GET",
        "/",
        "--url",
        &url,
        "--json",
        "--trace-attempts",
    ];
    let mut args = base.to_vec();
    args.extend_from_slice(&["--aws-sigv4", "eu-west-1:aoss"]);
    let out = run_env(
        &args,
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDFROMENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret-key"),
            ("AWS_SESSION_TOKEN", "env-session-token"),
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        !all.contains("env-secret") && !all.contains("env-session"),
        "{all}"
    );
    let recorded = c.node(0).requests();
    let auth = recorded
        .last()
        .unwrap()
        .header("authorization")
        .unwrap()
        .to_string();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDFROMENV/")
            && auth.contains("/eu-west-1/aoss/aws4_request"),
        "{auth}"
    );
    // A profile of the shared credentials file; the service defaults to es.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        "[prod]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profile-secret\n",
    )
    .unwrap();
    let mut args = base.to_vec();
    args.extend_from_slice(&["--aws-sigv4", "us-east-1"]);
    let out = run_env(
        &args,
        &[
            ("AWS_SHARED_CREDENTIALS_FILE", file.to_str().unwrap()),
            ("AWS_PROFILE", "prod"),
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!format!("{}{}", stdout(&out), stderr(&out)).contains("profile-secret"));
    let auth = c
        .node(0)
        .requests()
        .last()
        .unwrap()
        .header("authorization")
        .unwrap()
        .to_string();
    assert!(
        auth.contains("Credential=AKIDPROFILE/") && auth.contains("/us-east-1/es/"),
        "{auth}"
    );
    // No credentials anywhere: exit 2 saying where they are looked for.
    let out = run(&args).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        error_line(&out).contains("AWS_ACCESS_KEY_ID"),
        "{}",
        stderr(&out)
    );
    // With --user it is a usage error (one kind of credentials).
    let mut args = base.to_vec();
    args.extend_from_slice(&["--aws-sigv4", "us-east-1", "--user", "u", "--password", "p"]);
    assert_eq!(code(&run(&args).await), 2);
}

// ---- request: load -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_with_concurrency_prints_one_summary() {
    let c = cluster(2).await;
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &urls(&c),
        "--repeat",
        "20",
        "--concurrency",
        "4",
        // Round robin: the test counts requests on both nodes (the latency-aware default may
        // send all 20 to the node that answered faster).
        "--selection",
        "round-robin",
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    let v = json(&text);
    assert_eq!(v["requests"], 20);
    assert_eq!(v["ok"], 20);
    assert_eq!(v["failed"], 0);
    assert_eq!(v["attempts"], 20);
    assert_eq!(v["retries"], 0);
    assert_eq!(v["errors"], serde_json::json!({}));
    let lat = &v["latency_ms"];
    let (p50, p99, max) = (
        lat["p50"].as_f64().unwrap_or(-1.0),
        lat["p99"].as_f64().unwrap_or(-1.0),
        lat["max"].as_f64().unwrap_or(-1.0),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{lat}");
    // Round robin over both nodes.
    assert_eq!(c.request_count(), 20);
    assert!(c.nodes().iter().all(|n| n.request_count() > 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_failures_count_by_kind_and_exit_with_the_first_failure_code() {
    let c = cluster(1).await;
    c.node(0).set_default(Behavior::status(401));
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &urls(&c),
        "--repeat",
        "3",
        "--bearer",
        "tok",
    ])
    .await;
    assert_eq!(code(&out), 5, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(
        (v["requests"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(v["errors"], serde_json::json!({"auth": 3}));
    assert_eq!(
        c.node(0).requests()[0].header("authorization"),
        Some("Bearer tok")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_state_carries_across_repeated_requests() {
    // Node 0 is down: the first request that tries it marks it dead, and later requests of
    // the same run skip it, so there are fewer retries than requests.
    let c = cluster(2).await;
    c.node(0).kill().await;
    // Round robin: the dead node is tried exactly once (a random pick may never draw it).
    let mut args = vec![
        "request",
        "GET",
        "/",
        "--repeat",
        "10",
        "--selection",
        "round-robin",
    ];
    let u = urls(&c);
    args.extend(["--url", &u]);
    args.extend(FAST);
    let out = run(&args).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(v["ok"], 10);
    assert_eq!(v["retries"], 1, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selection_round_robin_gives_every_node_its_share_and_a_bad_name_is_a_usage_error() {
    let c = cluster(3).await;
    let u = urls(&c);
    let mut args = vec!["request", "GET", "/x", "--repeat", "30", "--url", &u];
    args.extend(["--selection", "round-robin"]);
    args.extend(FAST);
    let out = run(&args).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let per_node: Vec<usize> = c
        .nodes()
        .iter()
        .map(|n| n.requests_matching(&Match::Path("/x".into())).len())
        .collect();
    assert_eq!(per_node, [10, 10, 10]);

    let out = run(&["request", "GET", "/", "--url", &u, "--selection", "fastest"]).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("use latency or round-robin"),
        "{}",
        stderr(&out)
    );
}

/// `--selection` is a connection flag: every subcommand that talks to a cluster takes it
/// (the value is checked by the same parser, so a bad name is the same usage error), and
/// `request` above shows the shared client setup applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_that_connects_takes_selection() {
    let c = cluster(1).await;
    let u = urls(&c);
    for cmd in [
        &["health"][..],
        &["ingest"][..],
        &["relay"][..],
        &["queue", "deliver"][..],
        &["request", "GET", "/"][..],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--url", &u, "--selection", "fastest"]);
        let out = run(&args).await;
        assert_eq!(code(&out), 2, "{cmd:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("use latency or round-robin"),
            "{cmd:?}: {}",
            stderr(&out)
        );
    }
    let out = run(&[
        "health",
        "--url",
        &u,
        "--selection",
        "round-robin",
        "--json",
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_selection_describes_both() {
    let out = run(&["explain", "selection"]).await;
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.starts_with("latency (default):"), "{text}");
    assert!(text.contains("round-robin: Weighted round robin"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_duration_with_rate_paces_request_starts() {
    let c = cluster(1).await;
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &urls(&c),
        "--for",
        "500ms",
        "--rate",
        "10",
        "--concurrency",
        "3",
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    let n = v["requests"].as_u64().unwrap_or(0);
    // Ticks at 0, 100, ..., 400 ms (500 ms is the end): about 5, never a burst.
    assert!((1..=6).contains(&n), "{v}");
    assert_eq!(v["ok"].as_u64(), Some(n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_summary_reports_p90_wall_and_cpu_time() {
    let c = cluster(1).await;
    let base = ["request", "GET", "/", "--url", &urls(&c), "--for", "300ms"];
    let out = run(&base).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    let n = v["requests"].as_f64().unwrap_or(0.0);
    let f = |p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(-1.0);
    let (p50, p90, p99) = (
        f("/latency_ms/p50"),
        f("/latency_ms/p90"),
        f("/latency_ms/p99"),
    );
    assert!(n > 0.0 && 0.0 < p50 && p50 <= p90 && p90 <= p99, "{v}");
    // The load runs for 300 ms, and the last requests complete after that.
    let wall = f("/wall_s");
    assert!((0.3..5.0).contains(&wall), "{v}");
    assert!(
        (f("/requests_per_s") - n / wall).abs() < 1e-6 * n / wall,
        "{v}"
    );
    let (user, system, total) = (f("/cpu_s/user"), f("/cpu_s/system"), f("/cpu_s/total"));
    assert!(
        user >= 0.0 && system >= 0.0 && (total - user - system).abs() < 1e-9,
        "{v}"
    );
    // Hundreds of requests cannot cost zero CPU; nor can one thread use more than the wall
    // time times the runtime's threads (a generous bound: 64).
    assert!(total > 0.0 && total < wall * 64.0, "{v}");
    assert!(
        (f("/requests_per_cpu_s") - n / total).abs() < 1e-6 * n / total,
        "{v}"
    );
    // Without --json the same numbers, in words, on stderr.
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{} requests ({} ok, 0 failed",
            v["requests"], v["ok"]
        )) && err.contains(" requests per CPU-second")
            && err.contains("latency p50 "),
        "{err}"
    );
    // With --json: only the JSON.
    let mut args = base.to_vec();
    args.push("--json");
    let out = run(&args).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert!(json(&stdout(&out))["cpu_s"]["total"].is_f64());
    assert!(
        !stderr(&out).contains("requests per CPU-second"),
        "{}",
        stderr(&out)
    );
}

// ---- request: --trace-attempts -----------------------------------------------------------

fn trace_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(json)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_attempts_writes_one_json_line_per_attempt() {
    let c = cluster(2).await;
    c.node(0).once(Match::Any, Behavior::status(503));
    // Round robin: the first attempt must reach node 0 (latency-aware picks it at random).
    let mut args = vec![
        "request",
        "GET",
        "/",
        "--trace-attempts",
        "--selection",
        "round-robin",
    ];
    let u = urls(&c);
    args.extend(["--url", &u]);
    args.extend(FAST);
    let out = run(&args).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let lines = trace_lines(&stderr(&out));
    assert_eq!(lines.len(), 2, "{}", stderr(&out));
    let fields = [
        "request",
        "attempt",
        "node",
        "outcome",
        "status",
        "elapsed_ms",
        "backoff_ms",
    ];
    for l in &lines {
        for f in fields {
            assert!(l.get(f).is_some(), "{f} missing in {l}");
        }
        assert_eq!(l["request"], 1);
        assert!(l["elapsed_ms"].as_f64().is_some_and(|x| x >= 0.0), "{l}");
    }
    assert_eq!(lines[0]["attempt"], 1);
    assert_eq!(lines[0]["outcome"], "status:503");
    assert_eq!(lines[0]["status"], 503);
    assert_eq!(lines[0]["node"], c.node(0).url());
    assert_eq!(lines[0]["backoff_ms"], 1.0);
    assert_eq!(lines[1]["attempt"], 2);
    assert_eq!(lines[1]["outcome"], "ok");
    assert_eq!(lines[1]["status"], 200);
    assert_eq!(lines[1]["node"], c.node(1).url());
    assert_eq!(lines[1]["backoff_ms"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_lines_of_concurrent_requests_never_interleave() {
    let c = cluster(2).await;
    for n in c.nodes() {
        n.on(Match::Any, Behavior::status(503));
    }
    let mut args = vec![
        "request",
        "GET",
        "/",
        "--trace-attempts",
        "--repeat",
        "8",
        "--concurrency",
        "4",
        "--max-retries",
        "2",
    ];
    let u = urls(&c);
    args.extend(["--url", &u]);
    args.extend(FAST);
    let out = run(&args).await;
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    // Every line that starts like a trace line is a whole JSON object.
    let lines = trace_lines(&stderr(&out));
    assert_eq!(lines.len(), 24);
    let mut requests: Vec<u64> = lines.iter().filter_map(|l| l["request"].as_u64()).collect();
    requests.sort_unstable();
    requests.dedup();
    assert_eq!(requests, (1..=8).collect::<Vec<_>>());
    let v = json(&stdout(&out));
    assert_eq!(
        (v["attempts"].as_u64(), v["retries"].as_u64()),
        (Some(24), Some(16))
    );
    assert_eq!(v["errors"], serde_json::json!({"status": 8}));
}

// ---- explain -----------------------------------------------------------------------------

async fn resurrection_json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["explain", "resurrection", "--format", "json"];
    all.extend_from_slice(args);
    let out = run(&all).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    match json(&stdout(&out)) {
        Value::Array(rows) => rows,
        other => panic!("expected an array, got {other}"),
    }
}

fn finals(rows: &[Value]) -> Vec<f64> {
    rows.iter()
        .map(|r| r["final_s"].as_f64().unwrap_or(f64::NAN))
        .collect()
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 0.001, "{got:?} vs {want:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resurrection_reproduces_the_large_cluster_table() {
    let rows = resurrection_json(&["--total", "150", "--live", "0,10,50,100,149"]).await;
    assert_close(&finals(&rows), &[0.5, 2.5, 12.5, 25.0, 30.0]);
    for r in &rows {
        assert_eq!(r["base_s"], 30.0, "{r}");
        let f = r["final_s"].as_f64().unwrap_or(f64::NAN);
        let j = r["jitter_max_s"].as_f64().unwrap_or(f64::NAN);
        assert!((j - f / 2.0).abs() <= 0.001, "{r}");
        assert_eq!(
            r["live"].as_u64().unwrap_or(0) + r["dead"].as_u64().unwrap_or(0),
            150
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resurrection_small_cluster_and_failure_progression() {
    let rows = resurrection_json(&["--total", "3", "--live", "1,2"]).await;
    assert_close(&finals(&rows), &[10.0, 20.0]);

    let rows = resurrection_json(&["--live", "2", "--total", "3", "--failures", "1,2,3,4,5"]).await;
    assert_close(&finals(&rows), &[3.333, 6.667, 13.333, 20.0, 20.0]);
    let failures: Vec<u64> = rows.iter().filter_map(|r| r["failures"].as_u64()).collect();
    assert_eq!(failures, [1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resurrection_defaults_to_every_live_count() {
    let rows = resurrection_json(&[]).await;
    assert_eq!(rows.len(), 150);
    assert_eq!(rows[149]["live"], 149);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resurrection_csv_and_table() {
    let out = run(&[
        "explain",
        "resurrection",
        "--total",
        "3",
        "--live",
        "1,2",
        "--format",
        "csv",
    ])
    .await;
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "live,dead,failures,base_s,health_s,rate_limit_s,final_s,jitter_max_s",
            "1,2,6,30,10,0.25,10,5",
            "2,1,6,30,20,0.5,20,10",
        ]
    );

    let out = run(&["explain", "resurrection", "--total", "3"]).await;
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.starts_with("live"), "{text}");
    for needle in [
        "cores 8",
        "clients_per_server 8",
        "server_max_new_conns_per_sec 32",
        "jitter",
    ] {
        assert!(text.contains(needle), "{needle} missing: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resurrection_rejects_live_not_below_total() {
    let out = run(&["explain", "resurrection", "--total", "3", "--live", "1,3"]).await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("--live 3"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_defaults_lists_every_setting() {
    let out = run(&["explain", "defaults"]).await;
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.starts_with("setting"), "{text}");
    let max_retries = text
        .lines()
        .find(|l| l.starts_with("max_retries "))
        .unwrap_or_else(|| panic!("no max_retries row: {text}"));
    assert!(
        max_retries.contains(&searchwire::explain::MAX_RETRIES.to_string()),
        "{max_retries}"
    );
    assert_eq!(text.lines().count(), searchwire::explain::table().len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_states_defaults_from_the_library() {
    let out = run(&["request", "--help"]).await;
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    let timeout = searchwire::explain::format_duration(searchwire::explain::ATTEMPT_TIMEOUT);
    let statuses: Vec<String> = searchwire::explain::RETRY_ON_STATUS
        .iter()
        .map(u16::to_string)
        .collect();
    for needle in [
        format!("[default: {timeout}"),
        format!("[default: {}]", searchwire::explain::MAX_RETRIES),
        format!("[default: {}]", statuses.join(",")),
        "SEARCHWIRE_PASSWORD".to_string(),
    ] {
        assert!(text.contains(&needle), "{needle} missing: {text}");
    }
}

// ---- health ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_json_reports_every_node_and_exits_0() {
    let c = cluster(2).await;
    let out = run(&["health", "--url", &urls(&c), "--json"]).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    let v = json(&text);
    assert_eq!(v["cluster_name"], searchwire_fake::CLUSTER_NAME);
    assert_eq!(v["status"], "green");
    let nodes = v["nodes"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(nodes.len(), 2);
    for (n, node) in nodes.iter().zip(c.nodes()) {
        assert_eq!(
            n,
            &serde_json::json!({
                "url": node.url(),
                "state": "alive",
                "capability": "available",
                "version": searchwire_fake::VERSION,
                "distribution": "opensearch",
                "last_error": null,
            })
        );
        // GET / and the probe, with local=true and nothing else.
        let probes = node.requests_matching(&Match::Path("/_cluster/health".into()));
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].query.as_deref(), Some("local=true"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_table_shows_capability_and_credential_problems() {
    let c = cluster(3).await;
    c.node(1).on(
        Match::Path("/_cluster/health".into()),
        Behavior::status(403),
    );
    c.node(2).on(Match::Any, Behavior::status(401));
    let out = run(&["health", "--url", &urls(&c)]).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].contains("status: green"), "{text}");
    assert!(lines[0].contains("reachable: 3/3"), "{text}");
    assert!(lines[1].starts_with("NODE"), "{text}");
    assert!(
        lines[2].contains("available") && lines[2].contains("2.19.0"),
        "{text}"
    );
    assert!(lines[3].contains("unavailable"), "{text}");
    assert!(lines[4].contains("alive"), "{text}");
    assert!(lines[4].contains("credentials rejected (401)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_status_is_unknown_when_no_node_can_report_cluster_health() {
    let c = cluster(2).await;
    for n in c.nodes() {
        n.on(
            Match::Path("/_cluster/health".into()),
            Behavior::status(403),
        );
    }
    let out = run(&["health", "--url", &urls(&c), "--json"]).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(v["status"], "unknown");
    assert_eq!(
        v["cluster_name"],
        searchwire_fake::CLUSTER_NAME,
        "from GET /"
    );
    assert!(v["nodes"]
        .as_array()
        .is_some_and(|a| a.iter().all(|n| n["capability"] == "unavailable")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_exits_5_when_every_reachable_node_rejects_the_credentials() {
    let c = cluster(2).await;
    for n in c.nodes() {
        n.on(Match::Any, Behavior::status(401));
    }
    c.node(1).kill().await;
    let out = run(&[
        "health",
        "--url",
        &urls(&c),
        "--user",
        "alice",
        "--password",
        "hunter2",
        "--json",
    ])
    .await;
    assert_eq!(code(&out), 5, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(v["nodes"][0]["state"], "alive");
    assert_eq!(v["nodes"][0]["last_error"], "credentials rejected (401)");
    assert_eq!(v["nodes"][1]["state"], "dead");
    assert!(!stdout(&out).contains("hunter2") && !stderr(&out).contains("hunter2"));
    // The credentials were sent.
    let sent = c.node(0).requests();
    assert!(sent[0].header("authorization").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_exits_4_when_no_node_is_reachable() {
    let c = cluster(2).await;
    for n in c.nodes() {
        n.kill().await;
    }
    let out = run(&["health", "--url", &urls(&c), "--json"]).await;
    assert_eq!(code(&out), 4, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(v["status"], "unknown");
    assert!(v["nodes"].as_array().is_some_and(|a| a
        .iter()
        .all(|n| n["state"] == "dead" && n["last_error"].is_string())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_deadline_reports_hung_nodes_as_no_answer_and_exits_3_when_none_answered() {
    let c = cluster(2).await;
    c.node(1).on(Match::Any, Behavior::Hang);
    let out = run(&[
        "health",
        "--url",
        &urls(&c),
        "--deadline",
        "300ms",
        "--json",
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert_eq!(v["nodes"][0]["state"], "alive");
    assert_eq!(v["nodes"][1]["state"], "no answer");
    assert_eq!(
        v["nodes"][1]["last_error"],
        "no answer within the overall limit of 300ms"
    );
    let out = run(&["health", "--url", &urls(&c), "--deadline", "300ms"]).await;
    assert!(stdout(&out).contains("no answer"), "{}", stdout(&out));
    assert!(stdout(&out).contains("reachable: 1/2"), "{}", stdout(&out));
    c.node(0).on(Match::Any, Behavior::Hang);
    let out = run(&[
        "health",
        "--url",
        &urls(&c),
        "--deadline",
        "300ms",
        "--json",
    ])
    .await;
    assert_eq!(code(&out), 3, "stderr: {}", stderr(&out));
    let v = json(&stdout(&out));
    assert!(v["nodes"]
        .as_array()
        .is_some_and(|a| a.len() == 2 && a.iter().all(|n| n["state"] == "no answer")));
}

/// `n` loopback listeners that accept connections and never answer; the connections stay
/// open while the runtime runs.
async fn hung_listeners(n: usize) -> Vec<String> {
    let mut urls = Vec::new();
    for _ in 0..n {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("cannot listen: {e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}"));
        urls.push(format!("http://{addr}"));
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = l.accept().await {
                held.push(sock);
            }
        });
    }
    urls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_of_fifty_hung_nodes_ends_in_one_check_timeout_with_every_node_no_answer() {
    // Checked all at once: one 5 s health-check timeout for all 50, not one per few.
    let urls = hung_listeners(50).await.join(",");
    let started = tokio::time::Instant::now();
    let as_json = ["health", "--url", &urls, "--json"];
    let as_table = ["health", "--url", &urls];
    let (json_out, table_out) = tokio::join!(run(&as_json), run(&as_table));
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "took {took:?}; checking a few nodes at a time takes 35 s"
    );
    assert_eq!(code(&json_out), 3, "stderr: {}", stderr(&json_out));
    let v = json(&stdout(&json_out));
    let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
    assert_eq!(nodes.len(), 50);
    for n in &nodes {
        assert_eq!(n["state"], "no answer", "{n}");
        assert_eq!(
            n["last_error"], "no answer within the health check timeout of 5s",
            "{n}"
        );
    }
    assert_eq!(code(&table_out), 3, "stderr: {}", stderr(&table_out));
    let table = stdout(&table_out);
    assert!(table.contains("reachable: 0/50"), "{table}");
    assert_eq!(table.matches("  no answer  ").count(), 50, "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_watch_prints_one_json_line_per_check_until_interrupted() {
    use tokio::io::AsyncBufReadExt;
    let c = cluster(1).await;
    let mut child = tokio::process::Command::new(BIN)
        .args(["health", "--url", &urls(&c), "--json", "--watch", "50ms"])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    for i in 0..3 {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no line {i} within 20 s"))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("stdout closed after {i} lines"));
        assert_eq!(json(&line)["status"], "green");
    }
    // Each check visits the node again: GET / three times at least.
    assert!(c.node(0).requests_matching(&Match::Path("/".into())).len() >= 3);
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_usage_errors_exit_2() {
    let out = run(&["health"]).await;
    assert_eq!(code(&out), 2);
    let out = run(&["health", "--url", "http://127.0.0.1:1", "--watch", "0s"]).await;
    assert_eq!(code(&out), 2);
    let out = run(&["health", "--url", "http://127.0.0.1:1", "--user", "u"]).await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("password"), "{}", stderr(&out));
}

// ---- metrics ---------------------------------------------------------------------------------

/// `GET /metrics` on `addr`, or `None` while nothing listens there yet.
async fn scrape(addr: std::net::SocketAddr) -> Option<String> {
    get_path(addr, "/metrics").await
}

async fn get_path(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    conn.write_all(req.as_bytes()).await.ok()?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.ok()?;
    Some(reply)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_addr_serves_prometheus_text_while_the_command_runs() {
    let c = cluster(1).await;
    c.node(0)
        .on(Match::Path("/flaky".into()), Behavior::status(503));
    // A free port: bind an ephemeral one and release it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let url = urls(&c);
    let addr_arg = addr.to_string();
    let child = tokio::spawn(async move {
        run(&[
            "request",
            "GET",
            "/flaky",
            "--url",
            &url,
            "--for",
            "4s",
            "--rate",
            "50",
            "--max-retries",
            "1",
            "--backoff",
            "const:1ms",
            "--metrics-addr",
            &addr_arg,
        ])
        .await
    });
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        if let Some(reply) = scrape(addr).await {
            if reply.contains("searchwire_retries_total{class=\"gateway\"}") {
                text = reply;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Only /metrics is served: a probe aimed at another path must not pass.
    for path in ["/", "/health", "/ready"] {
        let reply = get_path(addr, path).await.unwrap_or_default();
        assert!(reply.starts_with("HTTP/1.1 404"), "{path}: {reply}");
    }
    let out = child.await.unwrap();
    assert_eq!(
        code(&out),
        1,
        "every request ended with 503: {}",
        stderr(&out)
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for series in [
        "searchwire_attempts_total{outcome=\"gateway\"}",
        "searchwire_requests_total{method=\"GET\",status_class=\"5xx\",result=\"status\"}",
        "searchwire_request_duration_seconds_bucket{method=\"GET\",le=\"0.005\"}",
        "searchwire_breaker_state{scope=\"cluster\",state=\"closed\"} 1",
    ] {
        assert!(text.contains(series), "{series} missing:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_metrics_addr_is_a_usage_error() {
    let c = cluster(1).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &urls(&c),
        "--metrics-addr",
        &addr,
    ])
    .await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        error_line(&out).contains("--metrics-addr"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_watch_serves_health_check_metrics() {
    let c = cluster(1).await;
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let mut child = tokio::process::Command::new(BIN)
        .args(["health", "--url", &urls(&c), "--json", "--watch", "50ms"])
        .args(["--metrics-addr", &addr.to_string()])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let series = "searchwire_health_checks_total{kind=\"check_all\",result=\"healthy\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut text = String::new();
    while tokio::time::Instant::now() < deadline {
        if let Some(reply) = scrape(addr).await {
            if reply.contains(series) {
                text = reply;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill().await;
    assert!(text.contains(series), "{series} never served:\n{text}");
}

// ---- flag names: attempt timeout vs the request's timeout ---------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_timeout_is_the_flag_and_timeout_its_deprecated_old_name() {
    let out = run(&["request", "--help"]).await;
    let help = stdout(&out);
    assert!(help.contains("--attempt-timeout <DUR>"), "{help}");
    assert!(
        help.contains("Deprecated old name of --attempt-timeout"),
        "{help}"
    );
    assert!(help.contains("SEARCHWIRE_ATTEMPT_TIMEOUT"), "{help}");
    // Both names at once is a usage error.
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        "http://127.0.0.1:1",
        "--timeout",
        "1s",
        "--attempt-timeout",
        "1s",
    ])
    .await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
}

// ---- docs ------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_doc_is_what_explain_defaults_prints() {
    let out = run(&["explain", "defaults", "--markdown"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let begin = "<!-- defaults:begin (generated from searchwire::defaults; do not edit) -->\n";
    let (_, rest) = doc.split_once(begin).expect("begin marker");
    let (table, _) = rest
        .split_once("<!-- defaults:end -->")
        .expect("end marker");
    assert_eq!(
        table,
        stdout(&out),
        "docs/configuration.md differs from `searchwire explain defaults --markdown`; \
         regenerate with SEARCHWIRE_BLESS=1 cargo test -p searchwire --test docs"
    );
}

// ---- hostile servers and careless input ---------------------------------------------------

/// A `GET /` answer with a huge version string and terminal escapes in the distribution.
fn hostile_root() -> Behavior {
    Behavior::json(
        200,
        serde_json::json!({
            "name": "n",
            "cluster_name": "c",
            "version": {"number": "9".repeat(70_000), "distribution": "opensearch\u{1b}[2J"},
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_table_survives_huge_and_escaping_server_text() {
    let c = cluster(1).await;
    c.node(0).on(Match::Path("/".into()), hostile_root());
    let out = run(&["health", "--url", &urls(&c)]).await;
    // Was: a panic (exit 101) in the table formatting for a 65,536+ character cell.
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        !text.contains('\u{1b}'),
        "raw escape in the table: {text:?}"
    );
    assert!(text.contains("\\u{1b}[2J"), "{text}");
    assert!(text.contains("more characters)"), "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() < 1_000,
            "a line of {} chars",
            line.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_messages_escape_server_text() {
    let c = cluster(1).await;
    c.node(0).set_default(Behavior::json(
        400,
        serde_json::json!({"error": {"type": "x", "reason": "bad\u{1b}[31mred\u{9b}"}, "status": 400}),
    ));
    let out = run(&["request", "GET", "/x", "--url", &urls(&c)]).await;
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(
        !err.contains('\u{1b}') && !err.contains('\u{9b}'),
        "{err:?}"
    );
    assert!(
        error_line(&out).contains("bad\\u{1b}[31mred\\u{9b}"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_concurrency_is_a_usage_error_not_an_abort() {
    let c = cluster(1).await;
    let u = urls(&c);
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &u,
        "--repeat",
        "1",
        "--concurrency",
        "100000000",
    ])
    .await;
    assert_eq!(code(&out), 2, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("--concurrency"), "{}", stderr(&out));
    // The largest accepted value with one request starts one worker and sends one request.
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &u,
        "--repeat",
        "1",
        "--concurrency",
        "10000",
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(json(&stdout(&out))["requests"], 1);
    assert_eq!(c.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_ends_on_time_even_when_the_rate_is_slower_than_the_workers() {
    let c = cluster(1).await;
    let started = tokio::time::Instant::now();
    // 20 workers and one start per second: before the fix each worker waited for its own
    // tick, so the run took about 20 s instead of 2 s.
    let out = run(&[
        "request",
        "GET",
        "/",
        "--url",
        &urls(&c),
        "--for",
        "2s",
        "--rate",
        "1",
        "--concurrency",
        "20",
    ])
    .await;
    let took = started.elapsed();
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let n = json(&stdout(&out))["requests"].as_u64().unwrap_or(0);
    assert!((1..=3).contains(&n), "{n} requests");
    // A wide margin for a loaded machine; the bug takes 20 s.
    assert!(took < Duration::from_secs(10), "the 2 s load ran {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_flag_lets_a_write_be_retried_after_a_gateway_error() {
    let c = cluster(1).await;
    let u = urls(&c);
    let base = [
        "request",
        "POST",
        "/logs/_doc/1",
        "--url",
        &u,
        "--data",
        "{}",
        "--backoff",
        "const:1ms",
    ];
    c.node(0).once(Match::Any, Behavior::status(503));
    let out = run(&base).await;
    // Not repeated: the 503 may have come from a proxy that forwarded the write.
    assert_eq!(code(&out), 1, "stderr: {}", stderr(&out));
    assert!(
        error_line(&out).contains("idempotent"),
        "{}",
        error_line(&out)
    );
    assert_eq!(c.request_count(), 1);

    c.node(0).once(Match::Any, Behavior::status(503));
    let mut args = base.to_vec();
    args.extend(["--idempotent", "--json"]);
    let out = run(&args).await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(json(&stdout(&out))["attempts"], 2);
    assert_eq!(c.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hedge_sends_a_slow_read_to_the_other_node_within_the_budget() {
    let c = cluster(2).await;
    c.node(0)
        .set_default(Behavior::status(200).delayed(Duration::from_millis(300)));
    // 20 requests pay for one hedge (5 %): of 24 requests alternating between a slow and a
    // fast node (round robin: latency-aware selection would avoid the slow node), the first
    // slow one after the 20th is hedged to the fast node.
    let out = run(&[
        "request",
        "GET",
        "/logs/_search",
        "--url",
        &urls(&c),
        "--repeat",
        "24",
        "--json",
        "--selection",
        "round-robin",
        "--hedge",
        "50ms",
    ])
    .await;
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let s = json(stdout(&out).lines().last().unwrap_or(""));
    assert_eq!(s["requests"], 24);
    assert_eq!(s["attempts"], 25, "one hedge: {s}");
    let hits = |i: usize| {
        c.node(i)
            .requests()
            .iter()
            .filter(|r| r.path == "/logs/_search")
            .count()
    };
    assert_eq!(hits(0) + hits(1), 25);
    // A bad delay is a usage error.
    let out = run(&["request", "GET", "/", "--url", &urls(&c), "--hedge", "p100"]).await;
    assert_eq!(code(&out), 2, "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("below 100"), "{}", stderr(&out));
}
