//! AWS SigV4 (feature `aws-sigv4`) verified by an independent signer: a fake node records
//! every request searchwire sends — user requests, a retry, health checks, discovery — and
//! botocore (the AWS SDK for Python, installed from PyPI into a venv under the target
//! directory on first run) recomputes each signature from the recorded request alone.
#![cfg(feature = "aws-sigv4")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use searchwire::{AwsCredentials, AwsSigV4, Backoff, Client, Request};
use searchwire_fake::{Behavior, FakeNode, Match, Recorded};

/// botocore's version, pinned so the verifier does not move under the test.
const BOTOCORE: &str = "botocore==1.44.8";

/// A Python with botocore: a venv in the target directory, created once. The tests of this
/// file run in parallel: one creates the venv while the others wait (three concurrent
/// `venv --clear` of one directory fail on each other's files).
fn botocore_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(make_botocore_venv).clone()
}

fn make_botocore_venv() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("botocore-venv");
    let python = venv.join("bin").join("python");
    let ready = venv.join(".searchwire-ready");
    if std::fs::read_to_string(&ready).ok().as_deref() == Some(BOTOCORE) {
        return python;
    }
    let ok = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .expect("python3 is needed for the botocore verifier")
        .success();
    assert!(ok, "python3 -m venv failed");
    let ok = Command::new(venv.join("bin").join("pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            BOTOCORE,
        ])
        .status()
        .expect("pip runs")
        .success();
    assert!(ok, "pip install {BOTOCORE} failed (PyPI is needed once)");
    std::fs::write(&ready, BOTOCORE).unwrap();
    python
}

/// botocore's Authorization header (and body hash) for each recorded request.
fn botocore_expectations(
    node_url: &str,
    token: &str,
    region: &str,
    service: &str,
    requests: &[Recorded],
) -> Vec<serde_json::Value> {
    let reqs: Vec<_> = requests
        .iter()
        .map(|r| {
            let url = match &r.query {
                Some(q) => format!("{node_url}{}?{q}", r.path),
                None => format!("{node_url}{}", r.path),
            };
            serde_json::json!({
                "method": r.method,
                "url": url,
                "headers": r.headers,
                "body_hex": r.body.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            })
        })
        .collect();
    let input = serde_json::json!({
        "access_key": "AKIDSEARCHWIRE", "secret_key": "wJalr/K7MDENG+bPxRfiCYEXAMPLEKEY",
        "token": token, "region": region, "service": service, "requests": reqs,
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/botocore_sigv4.py");
    let mut child = Command::new(botocore_python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the botocore verifier failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn check_against_botocore(service: &str) {
    let node = FakeNode::start("n").await.unwrap();
    let token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJ";
    let creds = AwsCredentials::new(
        "AKIDSEARCHWIRE",
        "wJalr/K7MDENG+bPxRfiCYEXAMPLEKEY",
        Some(token.to_string()),
    );
    let client = Client::builder()
        .node(node.url())
        .aws_sigv4(AwsSigV4::new("eu-west-1", service, creds))
        .backoff(Backoff::constant(Duration::from_millis(10)))
        .resurrection_timers(false)
        .read_environment(false)
        .build()
        .unwrap();
    // A retry: the first search is throttled.
    node.once(Match::Any, Behavior::status(429));
    let search = Request::post("/my-index/_search")
        .query("q", "title:\"a b\" & c=d")
        .query("size", "5")
        .header("content-type", "application/json")
        .body(r#"{"query":{"match":{"title":"naïve café"}}}"#);
    let r = client.send(search).await.unwrap();
    assert_eq!(r.attempts().len(), 2);
    for req in [
        Request::get("/"),
        Request::put("/my-index/_doc/1%2F2").body(r#"{"a":1}"#),
        Request::post("/_bulk")
            .header("content-type", "application/x-ndjson")
            .body("{\"index\":{\"_index\":\"i\"}}\n{\"f\":1}\n"),
        Request::new(http::Method::DELETE, "/my-index"),
    ] {
        client.send(req).await.unwrap();
    }
    // Background requests: health checks and discovery.
    let _ = client.check_all().await;
    let _ = client.discover_now().await;

    let recorded = node.requests();
    let paths: Vec<_> = recorded.iter().map(|r| r.path.as_str()).collect();
    for p in ["/", "/_cluster/health", "/_bulk", "/my-index/_doc/1%2F2"] {
        assert!(paths.contains(&p), "{p} was sent: {paths:?}");
    }
    assert!(paths.iter().any(|p| p.starts_with("/_nodes")), "{paths:?}");
    let expected = botocore_expectations(&node.url(), token, "eu-west-1", service, &recorded);
    assert_eq!(expected.len(), recorded.len());
    for (r, e) in recorded.iter().zip(&expected) {
        let what = format!("{} {}", r.method, r.path);
        assert_eq!(
            r.header("authorization"),
            e["authorization"].as_str(),
            "botocore computes the same signature for {what}"
        );
        assert_eq!(
            r.header("x-amz-content-sha256"),
            e["body_sha256"].as_str(),
            "the body hash of {what}"
        );
        assert_eq!(r.header("x-amz-security-token"), Some(token));
        let signed = r
            .header("authorization")
            .unwrap()
            .split("SignedHeaders=")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .to_string();
        for h in [
            "host",
            "x-amz-content-sha256",
            "x-amz-date",
            "x-amz-security-token",
        ] {
            assert!(signed.split(';').any(|s| s == h), "{h} is signed in {what}");
        }
    }
    // The retry was signed afresh: the throttled attempt and the retry are two requests
    // with signatures of their own (their dates may fall in the same second; the
    // `every_attempt_and_every_check_is_signed_afresh` unit test checks the date with an
    // injected clock).
    let searches: Vec<_> = recorded
        .iter()
        .filter(|r| r.path == "/my-index/_search")
        .collect();
    assert_eq!(searches.len(), 2);
}

#[tokio::test]
async fn signatures_match_botocore_for_amazon_opensearch_service() {
    check_against_botocore("es").await;
}

#[tokio::test]
async fn signatures_match_botocore_for_opensearch_serverless() {
    check_against_botocore("aoss").await;
}

#[tokio::test]
async fn a_rejected_signature_is_an_auth_error_naming_no_secret() {
    let node = FakeNode::start("n").await.unwrap();
    node.set_default(Behavior::status(403));
    let client = Client::builder()
        .node(node.url())
        .aws_sigv4(AwsSigV4::new(
            "eu-west-1",
            "es",
            AwsCredentials::new("AKIDX", "very-secret-key", Some("very-secret-token".into())),
        ))
        .resurrection_timers(false)
        .read_environment(false)
        .build()
        .unwrap();
    let e = client.send(Request::get("/x")).await.unwrap_err();
    let shown = format!("{e} {e:?} {client:?}");
    assert!(!shown.contains("very-secret"), "{shown}");
}

#[tokio::test]
async fn a_compressed_body_is_signed_as_sent_and_a_retry_signs_the_same_bytes() {
    let node = FakeNode::start("n").await.unwrap();
    let token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJ";
    let creds = AwsCredentials::new(
        "AKIDSEARCHWIRE",
        "wJalr/K7MDENG+bPxRfiCYEXAMPLEKEY",
        Some(token.to_string()),
    );
    let client = Client::builder()
        .node(node.url())
        .aws_sigv4(AwsSigV4::new("eu-west-1", "es", creds))
        .compress_requests(0)
        .backoff(Backoff::constant(Duration::from_millis(10)))
        .resurrection_timers(false)
        .health_refresh(false)
        .read_environment(false)
        .build()
        .unwrap();
    node.once(Match::Path("/_bulk".into()), Behavior::status(429));
    let ndjson: String = (0..200)
        .map(|i| format!("{{\"index\":{{\"_index\":\"i\",\"_id\":\"{i}\"}}}}\n{{\"f\":{i}}}\n"))
        .collect();
    let r = client
        .send(
            Request::post("/_bulk")
                .header("content-type", "application/x-ndjson")
                .body(ndjson.clone()),
        )
        .await
        .unwrap();
    assert_eq!(r.attempts().len(), 2);
    let recorded = node.requests_matching(&Match::Path("/_bulk".into()));
    assert_eq!(recorded.len(), 2);
    assert_eq!(
        recorded[0].body, recorded[1].body,
        "the retry sends the same bytes"
    );
    assert_eq!(recorded[0].header("content-encoding"), Some("gzip"));
    let inflated = searchwire::compression::gunzip_bounded(&recorded[0].body, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(inflated, ndjson.as_bytes());
    // botocore signs the recorded (compressed) bytes and gets the same signature and hash.
    let expected = botocore_expectations(&node.url(), token, "eu-west-1", "es", &recorded);
    for (r, e) in recorded.iter().zip(&expected) {
        assert_eq!(r.header("authorization"), e["authorization"].as_str());
        assert_eq!(r.header("x-amz-content-sha256"), e["body_sha256"].as_str());
    }
}
