//! `searchwire relay`'s drop-in flags reach the relay: `--no-default-pass-through` empties
//! the allow list, `--pass-through` adds a route (sent with the relay's credentials), and
//! `--advertise-address` is the address `GET /_nodes/http` names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod real_support;
mod relay_support;

use relay_support::{free_port, http, spawn_relay, terminate};
use searchwire_fake::FakeCluster;
use serde_json::Value;

#[test]
fn the_pass_through_and_advertise_flags_shape_the_relay() {
    real_support::runtime().block_on(async {
        let cluster = FakeCluster::start(1).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let relay = spawn_relay(
            &cluster.urls().join(","),
            dir.path(),
            free_port(),
            &[
                "--user",
                "relay",
                "--password",
                "relay-pw",
                "--no-default-pass-through",
                "--pass-through",
                "DELETE /{index}",
                "--advertise-address",
                "relay.example:9280",
            ],
        )
        .await;
        let (status, body) = http(relay.addr, "GET", "/logs/_search", b"").await.unwrap();
        assert_eq!(status, 403, "the defaults are gone: {body}");
        let (status, body) = http(relay.addr, "DELETE", "/old-logs", b"").await.unwrap();
        assert_eq!(status, 200, "{body}");
        let sent = cluster.node(0).requests();
        let delete = sent.iter().find(|r| r.path == "/old-logs").unwrap();
        assert_eq!(
            delete.header("authorization"),
            Some("Basic cmVsYXk6cmVsYXktcHc="),
            "sent with the relay's credentials"
        );
        assert!(!sent.iter().any(|r| r.path == "/logs/_search"));
        let (status, body) = http(relay.addr, "GET", "/_nodes/http", b"").await.unwrap();
        assert_eq!(status, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        let node = v["nodes"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone();
        assert_eq!(node["http"]["publish_address"], "relay.example:9280");
        terminate(relay).await;
    });
}
