//! Entry points for the coverage-guided fuzz targets in `fuzz/` (feature `fuzzing`, never
//! part of the supported API). Each runs one parser that network replies or user input
//! reach, and checks the invariants a hostile input must not break: no panic, no
//! credential echoed, and bounded results.

use std::time::{Duration, SystemTime};

/// Durations as users write them (flags, environment variables), and backoff specs.
pub fn duration(s: &str) {
    if let Ok(d) = crate::clock::duration::parse_duration(s) {
        // Whatever parses formats back and parses again to the same value.
        let shown = crate::clock::duration::format_duration(d);
        assert_eq!(
            crate::clock::duration::parse_duration(&shown).ok(),
            Some(d),
            "{shown}"
        );
    } else if let Err(e) = crate::clock::duration::parse_duration(s) {
        // The error echoes a bounded part of the input: at most 80 characters, each
        // escaped to at most 10 (`\u{10ffff}`), plus the explanation.
        assert!(e.to_string().len() <= 80 * 10 + 400, "error too long");
    }
    let _ = crate::policy::backoff::Backoff::parse(s);
}

/// A node URL as given with `--url` or `ClientBuilder::node`: parsed, and redacted for
/// display. A password in the URL never appears in the address shown.
pub fn node_url(s: &str) {
    match crate::http::addr::NodeAddr::parse(s) {
        Ok((addr, creds)) => {
            let shown = addr.to_string();
            assert!(
                !shown.contains('@'),
                "a shown address holds no userinfo: {shown}"
            );
            if let Some(crate::http::addr::Credentials::Basic { password, .. }) = creds {
                if password.len() >= 8 {
                    assert!(!shown.contains(&password), "the password is shown");
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    let redacted = crate::http::addr::redact_userinfo(s);
    assert!(
        redacted.matches('@').count() <= 1,
        "redaction keeps at most the last @"
    );
}

/// A `Retry-After` value: delay-seconds or an HTTP-date, relative to a fixed now.
pub fn retry_after(s: &str) {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let _ = crate::policy::backoff::parse_retry_after(s, now);
}

/// A `_nodes/http,os` reply as discovery reads it.
pub fn discovery_reply(body: &[u8]) {
    if let Ok(nodes) = crate::discovery::parse_nodes(body, "http", "") {
        for n in nodes {
            assert!(!n.addr.to_string().contains('@'));
        }
    }
}

/// `GET /` and `_cluster/health` replies as the health checks read them.
pub fn health_reply(body: &[u8]) {
    let _ = crate::nodes::info::parse_root(body);
    let _ = crate::nodes::info::parse_cluster_health(body);
}

/// The body of an error response, read for the error message (bounded).
pub fn error_body(body: &[u8]) {
    if let Some(reason) = crate::classify::error_reason(body) {
        assert!(reason.len() <= 64 * 1024 + 64, "the reason is bounded");
    }
}
