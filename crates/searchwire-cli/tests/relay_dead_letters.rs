//! Dead letters an operator can act on, end to end: the real `searchwire relay` in front of
//! the fake cluster (which refuses items whose source holds a marker with a
//! `mapper_parsing_exception`), its admin endpoint (`/_searchwire/dead_letters`) and
//! `searchwire queue dead-letters` on the same queue — the embedded one, and Redis when
//! `SEARCHWIRE_TEST_REDIS` is set. A replay after the cause is fixed delivers each dead
//! letter once, under its original op and id.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relay_support;

use std::time::Duration;

use relay_support::{free_port, health, http_with, spawn_relay_with, terminate, BIN};
use searchwire_fake::{FakeBulk, FakeCluster};
use serde_json::Value;

const TOKEN: &str = "admin-secret";

fn redis_url() -> Option<String> {
    let required = std::env::var("SEARCHWIRE_REQUIRE_REDIS").is_ok_and(|v| v.trim() == "1");
    match std::env::var("SEARCHWIRE_TEST_REDIS") {
        Ok(u) if !u.trim().is_empty() => Some(u.trim().to_owned()),
        _ => {
            assert!(
                !required,
                "SEARCHWIRE_REQUIRE_REDIS=1 but SEARCHWIRE_TEST_REDIS is not set"
            );
            eprintln!("relay_dead_letters: Redis part skipped (SEARCHWIRE_TEST_REDIS is not set)");
            None
        }
    }
}

async fn admin(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, Value) {
    let auth = format!("Bearer {TOKEN}");
    let (s, b) = http_with(addr, method, path, &[("Authorization", auth.as_str())], b"")
        .await
        .expect("the relay answers");
    (s, serde_json::from_str(&b).unwrap_or(Value::Null))
}

/// `searchwire queue dead-letters ARGS` with the queue flags: (exit code, stdout).
fn cli(queue: &[&str], args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(BIN)
        .args(["queue", "dead-letters"])
        .args(&args[..1])
        .args(queue)
        .args(&args[1..])
        .output()
        .unwrap();
    eprintln!("[cli {args:?}] {}", String::from_utf8_lossy(&out.stderr));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn ids_of(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = v["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let payload = d["payload"].as_str().unwrap();
            let action: Value = serde_json::from_str(payload.lines().next().unwrap()).unwrap();
            action["index"]["_id"].as_str().unwrap().to_owned()
        })
        .collect();
    ids.sort();
    ids
}

async fn scenario(relay_queue: &[&str], cli_queue: &[&str]) {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    bulk.mapping_error_marker("BROKEN");
    let urls = cluster.urls().join(",");
    let mut args = relay_queue.to_vec();
    args.extend(["--queue-only", "--auth-token", TOKEN]);
    let relay = spawn_relay_with(&urls, free_port(), &args).await;
    let body = [
        ("logs-a", "a1", "BROKEN"),
        ("logs-a", "a2", "BROKEN"),
        ("logs-b", "b1", "fine"),
        ("metrics-x", "m1", "BROKEN"),
        ("other-y", "o1", "BROKEN"),
    ]
    .iter()
    .map(|(i, id, m)| {
        format!("{{\"index\":{{\"_index\":\"{i}\",\"_id\":\"{id}\"}}}}\n{{\"msg\":\"{m} {id}\"}}\n")
    })
    .collect::<String>();
    let auth = format!("Bearer {TOKEN}");
    let (s, _) = http_with(
        relay.addr,
        "POST",
        "/_bulk",
        &[("Authorization", auth.as_str())],
        body.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(s, 200);
    // The delivery loop meets the mapping errors: four dead letters, b1 indexed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((_, h)) = health(relay.addr).await {
            if h["dead_letters"] == 4 && h["backlog"] == 0 {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dead letters: {:?}",
            health(relay.addr).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(bulk.count("logs-b"), 1);

    // The admin endpoint needs the relay's credentials.
    let (s, _) = http_with(relay.addr, "GET", "/_searchwire/dead_letters", &[], b"")
        .await
        .unwrap();
    assert_eq!(s, 401);
    let (s, all) = admin(relay.addr, "GET", "/_searchwire/dead_letters").await;
    assert_eq!(s, 200, "{all}");
    assert_eq!(ids_of(&all), ["a1", "a2", "m1", "o1"]);
    let d = &all["dead_letters"][0];
    assert_eq!(d["error_type"], "mapper_parsing_exception");
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .contains("mapper_parsing_exception"),
        "{d}"
    );
    assert!(d["attempts"].is_u64() && d["max_retries"].is_u64(), "{d}");
    assert!(
        d["payload"]
            .as_str()
            .unwrap()
            .contains("\"msg\":\"BROKEN a1\""),
        "{d}"
    );
    let (s, logs) = admin(
        relay.addr,
        "GET",
        "/_searchwire/dead_letters?index=logs-*&error_type=mapper_parsing_exception",
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(ids_of(&logs), ["a1", "a2"]);
    let (_, none) = admin(relay.addr, "GET", "/_searchwire/dead_letters?older_than=1h").await;
    assert_eq!(ids_of(&none), Vec::<String>::new());
    let id = d["id"].as_u64().unwrap();
    let (s, one) = admin(
        relay.addr,
        "GET",
        &format!("/_searchwire/dead_letters/{id}"),
    )
    .await;
    assert_eq!((s, one["id"].as_u64()), (200, Some(id)));
    let (s, _) = admin(relay.addr, "GET", "/_searchwire/dead_letters/999999").await;
    assert_eq!(s, 404);
    let (s, e) = admin(relay.addr, "POST", "/_searchwire/dead_letters/_replay").await;
    assert_eq!(s, 400, "a replay without a filter needs all=true: {e}");
    let (s, e) = admin(relay.addr, "GET", "/_searchwire/dead_letters?bogus=1").await;
    assert_eq!(s, 400, "{e}");

    // The mapping is fixed: replay logs-*; each lands once, under its id.
    bulk.mapping_error_marker("\u{1}never");
    let (s, r) = admin(
        relay.addr,
        "POST",
        "/_searchwire/dead_letters/_replay?index=logs-*",
    )
    .await;
    assert_eq!((s, r["replayed"].as_u64()), (200, Some(2)), "{r}");
    let (_, again) = admin(
        relay.addr,
        "POST",
        "/_searchwire/dead_letters/_replay?index=logs-*",
    )
    .await;
    assert_eq!(again["replayed"], 0, "once: {again}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while bulk.count("logs-a") < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replayed dead letters were not delivered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        (bulk.writes("logs-a", "a1"), bulk.writes("logs-a", "a2")),
        (1, 1)
    );
    assert!(bulk.get("logs-a", "a1").is_some());
    let (_, left) = admin(relay.addr, "GET", "/_searchwire/dead_letters").await;
    assert_eq!(ids_of(&left), ["m1", "o1"]);
    assert_eq!(terminate(relay).await, Some(0));

    // The CLI on the same queue (the embedded one has one owner: the relay is stopped).
    let (code, out) = cli(cli_queue, &["list", "--index", "metrics-*", "--json"]);
    assert_eq!(code, 0);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["error_type"], "mapper_parsing_exception");
    let m1 = lines[0]["id"].as_u64().unwrap().to_string();
    let (code, shown) = cli(cli_queue, &["show", &m1]);
    assert_eq!(code, 0);
    assert!(
        shown.contains("\"_id\":\"m1\"") && shown.contains("BROKEN m1"),
        "{shown}"
    );
    assert!(
        shown.contains("error_type    mapper_parsing_exception"),
        "{shown}"
    );
    assert_eq!(cli(cli_queue, &["show", "999999"]).0, 1);
    let (code, table) = cli(
        cli_queue,
        &["list", "--error-type", "mapper_parsing_exception"],
    );
    assert_eq!(code, 0);
    assert_eq!(
        table.lines().count(),
        3,
        "header and two dead letters: {table}"
    );
    assert_eq!(cli(cli_queue, &["replay"]).0, 2, "no filter and no --all");
    let (code, out) = cli(cli_queue, &["replay", "--index", "metrics-x", "--json"]);
    assert_eq!(code, 0);
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["replayed"], 1, "{out}");
    assert_eq!(
        cli(
            cli_queue,
            &["purge", "--error-type", "mapper_parsing_exception"]
        )
        .0,
        2,
        "needs --yes"
    );
    let (code, out) = cli(
        cli_queue,
        &["purge", "--error-type", "mapper_parsing_exception", "--yes"],
    );
    assert_eq!((code, out.trim()), (0, "purged 1"));
    let (code, out) = cli(cli_queue, &["list"]);
    assert_eq!(
        (code, out.lines().count()),
        (0, 1),
        "only the header: {out}"
    );

    // The replayed m1 is delivered by the next relay on the queue, once.
    let relay = spawn_relay_with(&urls, free_port(), &args).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while bulk.count("metrics-x") < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "m1 was not delivered after its replay"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(bulk.writes("metrics-x", "m1"), 1);
    assert_eq!(bulk.count("other-y"), 0, "purged for good");
    assert_eq!(terminate(relay).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_replayed_and_purged_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    scenario(&["--queue-dir", d], &["--queue-dir", d]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_shown_replayed_and_purged_redis() {
    let Some(redis) = redis_url() else { return };
    let stream = format!("sw-dead-letters-{}", std::process::id());
    scenario(
        &["--redis", &redis, "--redis-stream", &stream],
        &["--redis", &redis, "--stream", &stream],
    )
    .await;
}
