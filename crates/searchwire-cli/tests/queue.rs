//! `searchwire queue` against real queues: an embedded one in a temporary directory, and a
//! Redis one when `SEARCHWIRE_TEST_REDIS` is set (scripts/test sets it and
//! `SEARCHWIRE_REQUIRE_REDIS=1`, which turns a missing server into a failure).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;
use std::time::Duration;

use searchwire_queue::{EmbeddedConfig, NewMessage, Queue, RedisConfig};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_searchwire");

async fn run(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(args)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(Duration::from_secs(60), cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("cannot run {BIN}: {e}"),
        Err(_) => panic!("{BIN} {args:?} did not finish within 60 s"),
    }
}

fn json_lines(o: &Output) -> Vec<Value> {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Fills a queue: three queued messages (one not UTF-8), two dead letters.
async fn fill(q: &Queue) {
    q.append(vec![
        NewMessage::new(b"{\"doc\":1}".to_vec())
            .index("products")
            .priority(3),
        NewMessage::new(vec![0xff, 0x00]),
        NewMessage::new(b"dead-1".to_vec()),
        NewMessage::new(b"dead-2".to_vec()),
        NewMessage::new(b"{\"doc\":5}".to_vec()),
    ])
    .await
    .unwrap();
    let leases = q.lease(5).await.unwrap();
    for l in &leases {
        if l.message.payload.starts_with(b"dead") {
            assert!(q
                .dead_letter(l, "400 mapper_parsing_exception")
                .await
                .unwrap());
        }
    }
    q.release().await.unwrap();
}

/// The whole operator flow on one queue, given the flags that name it.
async fn operator_flow(flags: &[&str]) {
    let with = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["queue".into()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v.extend(flags.iter().map(|s| s.to_string()));
        v
    };
    let args = |extra: &[&str]| with(extra);

    let out = run(&as_refs(&args(&["stats", "--json"]))).await;
    let stats = &json_lines(&out)[0];
    assert_eq!(stats["backlog"], 3, "{stats}");
    assert_eq!(stats["due"], 3);
    assert_eq!(stats["leased"], 0);
    assert_eq!(stats["dead_letters"], 2);
    assert!(stats["oldest_age_ms"].is_u64());

    let queued = json_lines(&run(&as_refs(&args(&["list", "--json"]))).await);
    assert_eq!(queued.len(), 3);
    assert_eq!(queued[0]["payload"], "{\"doc\":1}");
    assert_eq!(queued[0]["index"], "products");
    assert_eq!(queued[0]["priority"], 3);
    assert_eq!(queued[0]["pending_shutdown"], true, "released by fill()");
    assert_eq!(queued[1]["payload"], Value::Null);
    assert_eq!(queued[1]["payload_hex"], "ff00");
    let paged = json_lines(
        &run(&as_refs(&args(&[
            "list",
            "--json",
            "--limit",
            "1",
            "--after",
            &queued[0]["id"].to_string(),
        ])))
        .await,
    );
    assert_eq!(paged.len(), 1);
    assert_eq!(paged[0]["id"], queued[1]["id"]);

    let dead = json_lines(&run(&as_refs(&args(&["list", "--dead-letters", "--json"]))).await);
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0]["reason"], "400 mapper_parsing_exception");
    assert_eq!(dead[0]["payload"], "dead-1");
    let table = run(&as_refs(&args(&["list", "--dead-letters"]))).await;
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        table.starts_with("ID\tPRIORITY\tATTEMPTS\tDEAD_AT"),
        "{table}"
    );
    assert!(table.contains("400 mapper_parsing_exception"), "{table}");

    let first = dead[0]["id"].to_string();
    let r = json_lines(&run(&as_refs(&args(&["replay", "--id", &first, "--json"]))).await);
    assert_eq!(r[0], serde_json::json!({"replayed": 1, "duplicates": 0}));

    let refused = run(&as_refs(&args(&["purge", "--all"]))).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("add --yes"));
    let p = json_lines(&run(&as_refs(&args(&["purge", "--all", "--yes", "--json"]))).await);
    assert_eq!(p[0], serde_json::json!({"purged": 1}));

    let out = run(&as_refs(&args(&["stats"]))).await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("backlog       4\n"), "{text}");
    assert!(text.contains("dead_letters  0\n"), "{text}");
}

fn as_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_queue_stats_list_replay_purge() {
    let dir = tempfile::tempdir().unwrap();
    let q = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    fill(&q).await;
    if let Queue::Embedded(e) = &q {
        e.close().await.unwrap(); // one owner at a time: hand the file to the CLI
    }
    operator_flow(&["--queue-dir", dir.path().to_str().unwrap()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_queue_stats_list_replay_purge() {
    let url = match std::env::var("SEARCHWIRE_TEST_REDIS") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            assert_ne!(
                std::env::var("SEARCHWIRE_REQUIRE_REDIS").as_deref(),
                Ok("1"),
                "SEARCHWIRE_REQUIRE_REDIS=1 but SEARCHWIRE_TEST_REDIS is not set"
            );
            eprintln!("skipping: set SEARCHWIRE_TEST_REDIS to run the Redis CLI test");
            return;
        }
    };
    let stream = format!("cli-{}-{:x}", std::process::id(), fastrand::u64(..));
    let mut c = RedisConfig::new(url.clone());
    c.stream = stream.clone();
    let q = Queue::connect_redis(c).await.unwrap();
    fill(&q).await;
    // The queue stays open: a Redis queue can be inspected while its consumers run.
    operator_flow(&["--redis", &url, "--stream", &stream]).await;
}

#[tokio::test]
async fn a_missing_queue_is_a_usage_error_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    let out = run(&["queue", "stats", "--queue-dir", missing.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no queue in"));
    assert!(!missing.exists());
    let out = run(&["queue", "stats"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "one of --queue-dir/--redis is required"
    );
}

#[tokio::test]
async fn a_queue_held_by_another_process_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let _owner = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let out = run(&[
        "queue",
        "stats",
        "--queue-dir",
        dir.path().to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("one owner at a time"), "{err}");
}

#[tokio::test]
async fn redis_passwords_never_reach_the_output() {
    let out = run(&["queue", "stats", "--redis", "redis://:hunter2@127.0.0.1:1"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to Redis at redis://<redacted>@127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains("hunter2"));
}
