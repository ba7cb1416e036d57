//! The Redis queue through Sentinels while its primary fails: each test starts its own
//! primary, 2 replicas and 3 Sentinels (`scripts/redis sentinel-start`, ports from
//! `SEARCHWIRE_TEST_REDIS_PORT_BASE`, 10 per test) and kills, stops or fails over its servers.
//! The slow replication link goes through Toxiproxy (`SEARCHWIRE_TEST_TOXIPROXY`).
//! scripts/test sets both; with `SEARCHWIRE_REQUIRE_REDIS=1` a missing one fails.
//!
//! The counts are exact: every payload whose append was acknowledged is delivered (or still
//! queued) under one id, never lost, never stored twice. The waits poll the servers' and
//! Sentinels' state (an outside process's), with deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire_queue::redis::SentinelConfig;
use searchwire_queue::{NewMessage, QueueOptions, RedisConfig, RedisQueue};
use support::sentinel::{ports, toxiproxy, toxiproxy_call, Topology, MASTER};
use tokio::time::Instant;

/// One test at a time: each runs 6 servers and load on a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn connect(t: &Topology, stream: &str, min_replicas: usize) -> RedisQueue {
    let mut c = RedisConfig::sentinel(SentinelConfig::new(t.sentinel_addrs(), MASTER));
    c.stream = stream.to_owned();
    c.min_replicas = min_replicas;
    c.options = QueueOptions::default().lease_timeout(Duration::from_secs(3));
    RedisQueue::connect(c).await.unwrap()
}

fn msg(p: &str) -> NewMessage {
    NewMessage::new(p.as_bytes().to_vec())
}

/// Appenders (unique payloads; every third append a batch of 4, on the transaction path)
/// and, optionally, a consumer that leases and acks.
struct Load {
    stop: Arc<AtomicBool>,
    /// Acknowledged payload → id, and when.
    acked: Arc<Mutex<Vec<(String, u64, Instant)>>>,
    /// Delivered payload → ids it was delivered under.
    delivered: Arc<Mutex<HashMap<String, Vec<u64>>>>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(q: &RedisQueue, appenders: usize, consume: bool) -> Load {
        let mut load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            acked: Arc::default(),
            delivered: Arc::default(),
            failed: Arc::default(),
            tasks: Vec::new(),
        };
        for a in 0..appenders {
            let (q, stop, acked, failed) = (
                q.clone(),
                load.stop.clone(),
                load.acked.clone(),
                load.failed.clone(),
            );
            load.tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let size = if n % 3 == 2 { 4 } else { 1 };
                    let payloads: Vec<String> =
                        (0..size).map(|k| format!("a{a}-{n}-{k}")).collect();
                    n += 1;
                    match q.append(payloads.iter().map(|p| msg(p)).collect()).await {
                        Ok(ids) => {
                            let now = Instant::now();
                            let mut acked = acked.lock().unwrap();
                            for (p, id) in payloads.into_iter().zip(ids) {
                                acked.push((p, id.id().0, now));
                            }
                        }
                        Err(_) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            // Not a synchronization: keeps a refused appender from spinning.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }));
        }
        if consume {
            let (q, stop, delivered) = (q.clone(), load.stop.clone(), load.delivered.clone());
            load.tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if consume_once(&q, &delivered).await == 0 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }));
        }
        load
    }

    async fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            t.await.unwrap();
        }
    }

    fn acked(&self) -> Vec<(String, u64, Instant)> {
        self.acked.lock().unwrap().clone()
    }
}

/// One lease of up to 100 and their ack; returns how many were leased (0 on an error).
async fn consume_once(q: &RedisQueue, delivered: &Mutex<HashMap<String, Vec<u64>>>) -> usize {
    let Ok(leases) = q.lease(100).await else {
        return 0;
    };
    let ids: Vec<_> = leases.iter().map(|l| l.message.id).collect();
    {
        let mut d = delivered.lock().unwrap();
        for l in &leases {
            let p = String::from_utf8(l.message.payload.clone()).unwrap();
            let ids = d.entry(p).or_default();
            if !ids.contains(&l.message.id.0) {
                ids.push(l.message.id.0);
            }
        }
    }
    // An ack lost in a failover only means the message comes back (at least once).
    let _ = q.ack(&ids).await;
    leases.len()
}

/// Every payload still queued, with its ids.
async fn queued(q: &RedisQueue) -> HashMap<String, Vec<u64>> {
    let mut out: HashMap<String, Vec<u64>> = HashMap::new();
    let mut after = None;
    loop {
        let page = q.list(after, 1000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for m in page {
            out.entry(String::from_utf8(m.payload).unwrap())
                .or_default()
                .push(m.id.0);
        }
    }
    out
}

/// (lost, doubled): acknowledged payloads found nowhere, and payloads found under more
/// than one id.
fn count(acked: &[(String, u64, Instant)], found: &HashMap<String, Vec<u64>>) -> (usize, usize) {
    let lost = acked
        .iter()
        .filter(|(p, _, _)| !found.contains_key(p))
        .count();
    let doubled = found.values().filter(|ids| ids.len() > 1).count();
    (lost, doubled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_append_after_a_failover_succeeds_on_the_new_primary() {
    let _serial = SERIAL.lock().await;
    let Some(base) = ports(0) else { return };
    let t = Topology::start("first-append", Some(base), &[]);
    let q = connect(&t, "first-append", 1).await;
    q.append(vec![msg("before")]).await.unwrap();
    let old = q.primary();
    assert_eq!(old, t.primary.addr);
    t.sentinels[0]
        .cmd(&["SENTINEL", "FAILOVER", MASTER])
        .await
        .unwrap();
    let new = t.wait_for_new_primary(&old, Duration::from_secs(30)).await;
    // Whether or not the promoted replica has the scripts, the first call must not fail.
    t.server(&new).cmd(&["SCRIPT", "FLUSH"]).await.unwrap();
    // The very first append after the failover: a single message (one script call) ...
    q.append(vec![msg("after-1")]).await.unwrap();
    assert_eq!(q.primary(), new);
    // ... and a batch (the transaction path).
    q.append(vec![msg("after-2"), msg("after-3")])
        .await
        .unwrap();
    let mut got: Vec<String> = q
        .lease(10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| String::from_utf8(l.message.payload).unwrap())
        .collect();
    got.sort();
    assert_eq!(got, ["after-1", "after-2", "after-3", "before"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_is_acknowledged_only_once_its_replicas_confirm_it() {
    let _serial = SERIAL.lock().await;
    let Some(base) = ports(1) else { return };
    let t = Topology::start("replicas", Some(base), &[]);
    let open = |min: usize| {
        let mut c = RedisConfig::new(t.primary.url());
        c.stream = "replicas".into();
        c.min_replicas = min;
        c.replica_timeout = Duration::from_millis(300);
        RedisQueue::connect(c)
    };
    let (q2, q0) = (open(2).await.unwrap(), open(0).await.unwrap());
    // Healthy: both paths are confirmed (a WAIT inside the transaction or the script would
    // answer at once with the replicas that confirmed earlier writes, short of 2).
    for _ in 0..20 {
        q2.append(vec![msg(&format!("one-{}", fastrand::u64(..)))])
            .await
            .unwrap();
        q2.append(vec![msg(&format!("x-{}", fastrand::u64(..))), msg("y")])
            .await
            .unwrap();
        q2.ack(&[q2.append(vec![msg("y")]).await.unwrap()[0].id()])
            .await
            .unwrap();
    }
    for r in &t.replicas {
        r.signal("STOP");
    }
    for batch in [vec![msg("single")], vec![msg("batch-1"), msg("batch-2")]] {
        let e = q2.append(batch).await.unwrap_err();
        assert!(e.to_string().contains("of the 2 replicas required"), "{e}");
    }
    // Without replicas required, today's behaviour: acknowledged by the primary alone.
    q0.append(vec![msg("unreplicated")]).await.unwrap();
    // Connections killed while the appends wait: a WAIT sent again on a new connection would
    // find nothing to wait for and confirm; none may succeed.
    let killing = Arc::new(AtomicBool::new(true));
    let killer = {
        let (primary, killing) = (t.primary.clone(), killing.clone());
        tokio::spawn(async move {
            let mut c = primary.conn().await;
            while killing.load(Ordering::Relaxed) {
                let _: redis::RedisResult<redis::Value> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .arg("SKIPME")
                    .arg("yes")
                    .query_async(&mut c)
                    .await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    let mut acknowledged = 0;
    for i in 0..20 {
        let batch = if i % 2 == 0 {
            vec![msg(&format!("k{i}"))]
        } else {
            vec![msg(&format!("k{i}a")), msg(&format!("k{i}b"))]
        };
        if q2.append(batch).await.is_ok() {
            acknowledged += 1;
        }
    }
    killing.store(false, Ordering::Relaxed);
    killer.await.unwrap();
    assert_eq!(acknowledged, 0);
    for r in &t.replicas {
        r.signal("CONT");
    }
    // The replicas reconnect; the next appends are confirmed again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while q2.append(vec![msg("back")]).await.is_err() {
        assert!(Instant::now() < deadline, "appends not confirmed again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The primary SIGKILLed and its data deleted under load while its replicas lag 300 ms
/// behind (Toxiproxy on the replication link, cut with the primary: the stream still in the
/// proxy is what had not left the lost machine). Returns (acknowledged, lost, doubled,
/// seconds from the promotion to the next acknowledgement).
async fn kill_the_primary(slot: u16, api: &str, min_replicas: usize) -> (usize, usize, usize, f64) {
    let base = ports(slot).unwrap();
    let (primary_port, proxy_port) = (base, base + 6);
    let proxy = format!("replication-{slot}-{}", std::process::id());
    toxiproxy_call(
        api,
        "POST",
        "/proxies",
        Some(&format!(
            r#"{{"name":"{proxy}","listen":"127.0.0.1:{proxy_port}","upstream":"127.0.0.1:{primary_port}"}}"#
        )),
    );
    let t = Topology::start(
        &format!("kill-{min_replicas}"),
        Some(base),
        &[
            (
                "SEARCHWIRE_REDIS_REPLICA_UPSTREAM",
                format!("127.0.0.1:{proxy_port}"),
            ),
            // A Sentinel leaves a replica that replicates from the proxy alone this long.
            ("SEARCHWIRE_REDIS_FAILOVER_TIMEOUT", "60000".into()),
        ],
    );
    toxiproxy_call(
        api,
        "POST",
        &format!("/proxies/{proxy}/toxics"),
        Some(
            r#"{"name":"lag","type":"latency","stream":"downstream","attributes":{"latency":300}}"#,
        ),
    );
    let q = connect(&t, "kill", min_replicas).await;
    let mut load = Load::start(&q, 16, false);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until || load.acked.lock().unwrap().len() < 50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The machine is lost: with it what had not left it yet (the proxy holds the replication
    // stream of the last 300 ms, as a slow network would).
    toxiproxy_call(
        api,
        "POST",
        &format!("/proxies/{proxy}"),
        Some(r#"{"enabled":false}"#),
    );
    t.primary.signal("KILL");
    std::fs::remove_dir_all(&t.primary.data).unwrap();
    let new = t
        .wait_for_new_primary(&t.primary.addr, Duration::from_secs(60))
        .await;
    let promoted = Instant::now();
    let deadline = promoted + Duration::from_secs(30);
    let first_after = loop {
        if let Some(at) = load
            .acked()
            .iter()
            .map(|a| a.2)
            .filter(|&at| at > promoted)
            .min()
        {
            break at;
        }
        assert!(
            Instant::now() < deadline,
            "no append acknowledged after the failover"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.stop().await;
    assert_eq!(q.primary(), new);
    toxiproxy_call(api, "DELETE", &format!("/proxies/{proxy}"), None);
    let acked = load.acked();
    let found = queued(&q).await;
    let (lost, doubled) = count(&acked, &found);
    let recovery = first_after
        .saturating_duration_since(promoted)
        .as_secs_f64();
    eprintln!(
        "min_replicas {min_replicas}: {} acknowledged, {lost} lost, {doubled} doubled, {} failed appends, \
         first acknowledgement {recovery:.3} s after the promotion",
        acked.len(),
        load.failed.load(Ordering::Relaxed)
    );
    (acked.len(), lost, doubled, recovery)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_loses_acknowledged_appends_unless_a_replica_confirmed_each() {
    let _serial = SERIAL.lock().await;
    let Some(_) = ports(2) else { return };
    let Some(api) = toxiproxy() else { return };
    // Without WAIT the lagging replicas lack the last acknowledged appends: the test can fail.
    let (acked, lost, _, _) = kill_the_primary(2, &api, 0).await;
    assert!(acked > 0);
    assert!(
        lost > 0,
        "no loss without WAIT: the replication link was not slow"
    );
    // With one replica's confirmation, none is lost and none stored twice.
    let (acked, lost, doubled, recovery) = kill_the_primary(3, &api, 1).await;
    assert!(acked > 0);
    assert_eq!((lost, doubled), (0, 0));
    assert!(
        recovery < 10.0,
        "acknowledged again {recovery} s after the promotion"
    );
}

/// Every acknowledged append delivered under the id it was acknowledged with, none twice.
/// An append whose first try failed as the primary moved is sent again by the queue; before
/// the resend carried the first try's receipt, a run stored 4 of 5,640 appends twice (the
/// first copy, replicated to the promoted replica, had been delivered and acknowledged
/// before the resend arrived, so payload de-duplication no longer knew it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_forced_failovers_under_load_lose_and_double_nothing() {
    let _serial = SERIAL.lock().await;
    let Some(base) = ports(4) else { return };
    let t = Topology::start("forced", Some(base), &[]);
    // Every replica's confirmation: a forced failover promotes one replica while the other
    // still follows the old primary (until the Sentinels reconfigure it, up to a second
    // later), so a write confirmed by that one alone would be lost.
    let q = connect(&t, "forced", 2).await;
    let mut load = Load::start(&q, 8, true);
    let mut primary = t.primary.addr.clone();
    for i in 0..20 {
        t.wait_settled(&primary, 2, Duration::from_secs(60)).await;
        // Each failover meets appends in flight: some acknowledged since the last one.
        let before = load.acked.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(30);
        while load.acked.lock().unwrap().len() < before + 20 {
            assert!(
                Instant::now() < deadline,
                "no appends acknowledged before failover {i}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Refused while the Sentinels still settle the last one (INPROG, NOGOODSLAVE).
        let deadline = Instant::now() + Duration::from_secs(60);
        while t.sentinels[i % 3]
            .cmd(&["SENTINEL", "FAILOVER", MASTER])
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "failover {i} refused for 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let old = primary;
        primary = t.wait_for_new_primary(&old, Duration::from_secs(60)).await;
        // The Sentinels turn the old primary into a replica at their next look at it (every
        // 10 s); done here at once to keep 20 failovers short. Writes it took meanwhile were
        // never confirmed by 2 replicas.
        let (host, port) = primary.rsplit_once(':').unwrap();
        t.server(&old)
            .cmd(&["REPLICAOF", host, port])
            .await
            .unwrap();
        let acked = load.acked.lock().unwrap().len();
        eprintln!(
            "failover {}: primary {primary}, {acked} acknowledged",
            i + 1
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    load.stop().await;
    // Whatever is still queued (leases lost in a failover come back after 3 s) is delivered.
    let delivered = load.delivered.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while q.stats().await.unwrap().backlog > 0 {
        assert!(Instant::now() < deadline, "the queue did not drain");
        if consume_once(&q, &delivered).await == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let acked = load.acked();
    let delivered = delivered.lock().unwrap().clone();
    let (lost, doubled) = count(&acked, &delivered);
    let ids_match = acked
        .iter()
        .filter(|(p, id, _)| delivered.get(p).is_some_and(|ids| ids.contains(id)))
        .count();
    eprintln!(
        "20 failovers: {} acknowledged, {lost} lost, {doubled} doubled, {} failed appends",
        acked.len(),
        load.failed.load(Ordering::Relaxed)
    );
    for (p, ids) in delivered.iter().filter(|(_, ids)| ids.len() > 1) {
        let a: Vec<_> = acked.iter().filter(|a| &a.0 == p).map(|a| a.1).collect();
        eprintln!("doubled: {p} delivered as {ids:?}, acknowledged as {a:?}");
    }
    assert!(acked.len() > 100);
    assert_eq!((lost, doubled), (0, 0));
    assert_eq!(
        ids_match,
        acked.len(),
        "delivered under another id than acknowledged"
    );
}

/// The soak's rare double, made to happen every time: an append whose first try ran on the
/// old primary and reached the replica about to be promoted, whose `WAIT` then failed (the
/// other replica is stopped), and whose message was delivered and acknowledged on the new
/// primary before the queue sent the append again. Payload de-duplication no longer knows
/// the payload by then; the first try's receipt does: the resend stores nothing and answers
/// the first try's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_its_first_copy_was_delivered_stores_nothing() {
    let _serial = SERIAL.lock().await;
    let Some(base) = ports(5) else { return };
    let t = Topology::start("resend", Some(base), &[]);
    let (a, b) = (&t.replicas[0], &t.replicas[1]);
    let mut c = RedisConfig::sentinel(SentinelConfig::new(t.sentinel_addrs(), MASTER));
    c.stream = "resend".into();
    // Both replicas must confirm; the stopped one never does, so the first try's WAIT
    // blocks (up to 20 s: room for a loaded machine, below the queue's 30 s resend window)
    // while the failover, the delivery and the ack happen.
    c.min_replicas = 2;
    c.replica_timeout = Duration::from_secs(20);
    let q = RedisQueue::connect(c).await.unwrap();
    q.append(vec![msg("warm-up")]).await.unwrap();
    b.signal("STOP");
    // The Sentinels see it down, so a failover promotes `a`.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = t.sentinels[0]
            .cmd(&["SENTINEL", "REPLICAS", MASTER])
            .await
            .unwrap();
        if format!("{listed:?}").contains("s_down") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped replica is not seen down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let appending = {
        let q = q.clone();
        tokio::spawn(async move { q.append(vec![msg("the-one")]).await })
    };
    // The first try ran on the primary and reached `a` (its record is there).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = a.cmd(&["HLEN", "resend:msg"]).await.unwrap();
        if n == redis::Value::Int(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the append did not reach the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while t.sentinels[0]
        .cmd(&["SENTINEL", "FAILOVER", MASTER])
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "failover refused for 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let new = t
        .wait_for_new_primary(&t.primary.addr, Duration::from_secs(30))
        .await;
    assert_eq!(new, a.addr);
    // Delivered and acknowledged on the new primary while the first try still waits.
    let mut direct = RedisConfig::new(a.url());
    direct.stream = "resend".into();
    let consumer = RedisQueue::connect(direct).await.unwrap();
    let leases = consumer.lease(10).await.unwrap();
    let mut delivered: Vec<(String, u64)> = leases
        .iter()
        .map(|l| {
            (
                String::from_utf8(l.message.payload.clone()).unwrap(),
                l.message.id.0,
            )
        })
        .collect();
    delivered.sort();
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    let ids: Vec<_> = leases.iter().map(|l| l.message.id).collect();
    consumer.ack(&ids).await.unwrap();
    // The old primary and the stopped replica follow the new one: the first try fails
    // (its WAIT is answered short or cut off) and the queue sends the append again.
    let (host, port) = new.rsplit_once(':').unwrap();
    t.primary.cmd(&["REPLICAOF", host, port]).await.unwrap();
    b.signal("CONT");
    b.cmd(&["REPLICAOF", host, port]).await.unwrap();
    let answered = appending.await.unwrap().unwrap();
    let first_copy = delivered.iter().find(|d| d.0 == "the-one").unwrap().1;
    assert_eq!(answered.len(), 1);
    assert_eq!(
        answered[0].id().0,
        first_copy,
        "the resend was stored again under a new id"
    );
    assert_eq!(q.stats().await.unwrap().backlog, 0);
}
