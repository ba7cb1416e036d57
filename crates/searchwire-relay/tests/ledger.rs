//! Every item accounted for, against the in-process fake cluster: the relay's `/metrics`
//! shows `accepted + recovered = indexed + duplicate + purged + queued + in_flight +
//! dead_letter` at every scrape while writers, the first try, the queue and the delivery
//! loop race (seeded throttling and connections reset after a write, dead letters, a purge
//! and a restart on the same queue); the counters agree with what the clients were told;
//! a single-document write the queue has no room for — at its append, or at the
//! high-water mark — is a 429 with `Retry-After`; and a relay whose queue just drained
//! takes writes again on a fresh measurement, not one periodic measurement later.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use searchwire::Client;
use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};
use searchwire_queue::{EmbeddedConfig, Queue};
use searchwire_relay::admission::AdmissionConfig;
use searchwire_relay::{PresentAs, Relay, RelayConfig, ShutdownReport};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<ShutdownReport>,
}

fn config() -> RelayConfig {
    RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        retry_base: Duration::from_millis(10),
        retry_cap: Duration::from_millis(40),
        idle_poll: Duration::from_millis(20),
        live_budget: Duration::from_millis(150),
        delivery_budget: Duration::from_millis(500),
        // Long enough for a delivery cycle (delivery budget 500 ms) to settle at shutdown.
        drain_timeout: Duration::from_secs(5),
        drain_grace: Duration::ZERO,
        present_as: PresentAs::OpenSearch,
        ..RelayConfig::default()
    }
}

async fn start(
    cluster: &FakeCluster,
    queue: &Queue,
    cfg: RelayConfig,
    admission: Option<AdmissionConfig>,
) -> Running {
    let client = Client::builder()
        .nodes(cluster.urls())
        .max_retries(1)
        .build()
        .unwrap();
    let mut relay = Relay::bind(cfg, client, queue.clone())
        .await
        .unwrap()
        // No recorder in this process: the ledger's series are the whole text.
        .metrics_render(Arc::new(String::new));
    if let Some(a) = admission {
        relay = relay.admission(a);
    }
    let addr = relay.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(relay.run(async move {
        let _ = rx.await;
    }));
    Running { addr, stop, task }
}

impl Running {
    async fn stop(self) -> ShutdownReport {
        let _ = self.stop.send(());
        self.task.await.unwrap()
    }
}

/// One request on its own connection: status, lower-case head, body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// The ledger's terms from one scrape, by series and label.
#[derive(Debug, Default, Clone, PartialEq)]
struct Terms(BTreeMap<String, i128>);

impl Terms {
    fn parse(text: &str) -> Terms {
        let mut t = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, v)) = line.rsplit_once(' ') else {
                continue;
            };
            let keep = [
                "searchwire_relay_accepted_items_total",
                "searchwire_relay_recovered_items",
                "searchwire_relay_settled_items_total",
                "searchwire_relay_held_items",
            ];
            if keep.iter().any(|k| name.starts_with(k)) {
                t.insert(name.to_owned(), v.parse().unwrap());
            }
        }
        Terms(t)
    }

    fn get(&self, k: &str) -> i128 {
        self.0
            .get(k)
            .copied()
            .unwrap_or_else(|| panic!("no {k} in {self:?}"))
    }

    fn accepted(&self) -> i128 {
        self.get("searchwire_relay_accepted_items_total")
    }

    fn recovered(&self) -> i128 {
        self.get("searchwire_relay_recovered_items")
    }

    fn settled(&self, how: &str) -> i128 {
        self.get(&format!(
            "searchwire_relay_settled_items_total{{how=\"{how}\"}}"
        ))
    }

    fn held(&self, state: &str) -> i128 {
        self.get(&format!("searchwire_relay_held_items{{state=\"{state}\"}}"))
    }

    /// The queue's share: queued + in flight + dead letters.
    fn held_all(&self) -> i128 {
        self.held("queued") + self.held("in_flight") + self.held("dead_letter")
    }

    /// Left side minus right side: 0 when every item is accounted for.
    fn unaccounted(&self) -> i128 {
        self.accepted() + self.recovered()
            - self.settled("indexed")
            - self.settled("duplicate")
            - self.settled("purged")
            - self.held_all()
    }
}

async fn scrape(addr: SocketAddr) -> Terms {
    let (status, _, body) = http(addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200, "{body}");
    let t = Terms::parse(&body);
    assert_eq!(t.0.len(), 8, "every term in every scrape: {body}");
    t
}

/// Scrapes back to back until `stop`, checking the equation each time; the number of scrapes.
async fn scrape_until(addr: SocketAddr, stop: Arc<AtomicBool>) -> u64 {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let t = scrape(addr).await;
        assert_eq!(t.unaccounted(), 0, "scrape {n} does not add up: {t:?}");
        n += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    n
}

/// What the writers were told.
#[derive(Default)]
struct Told {
    /// Ids answered 2xx (written or queued).
    acked: Mutex<BTreeSet<String>>,
    /// Items answered 2xx, counted per answer (an id is sent once, so equal to `acked`).
    items_2xx: AtomicU64,
}

/// A writer: bulk requests of 10 items (`index` ops, ids `{tag}-{n}`; every 7th item's
/// source carries the poison marker) until `stop`.
async fn writer(addr: SocketAddr, tag: String, stop: Arc<AtomicBool>, told: Arc<Told>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut body = String::new();
        for _ in 0..10 {
            let poison = if n % 7 == 0 { "POISON" } else { "ok" };
            body.push_str(&format!(
                "{{\"index\":{{\"_index\":\"acct\",\"_id\":\"{tag}-{n}\"}}}}\n{{\"v\":\"{poison}\"}}\n"
            ));
            n += 1;
        }
        let (status, _, text) = http(addr, "POST", "/_bulk", &body).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        for item in v["items"].as_array().unwrap() {
            let it = &item["index"];
            if it["status"]
                .as_u64()
                .is_some_and(|s| (200..300).contains(&s))
            {
                told.items_2xx.fetch_add(1, Ordering::Relaxed);
                told.acked
                    .lock()
                    .unwrap()
                    .insert(it["_id"].as_str().unwrap().to_owned());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_scrape_adds_up_through_throttling_resets_dead_letters_a_purge_and_a_restart() {
    let cluster = FakeCluster::start(2).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    // Seeded: 35% of the items throttled, 3% of the requests applied and then reset.
    bulk.random_faults(Some((0x5eed, 0.35, 0.03)));
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let first = start(&cluster, &queue, config(), None).await;
    let start_terms = scrape(first.addr).await;
    assert_eq!(
        start_terms.recovered(),
        0,
        "an empty queue: {start_terms:?}"
    );

    let told = Arc::new(Told::default());
    let stop_writers = Arc::new(AtomicBool::new(false));
    let stop_scraper = Arc::new(AtomicBool::new(false));
    let scraper = tokio::spawn(scrape_until(first.addr, stop_scraper.clone()));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            tokio::spawn(writer(
                first.addr,
                format!("w{w}"),
                stop_writers.clone(),
                told.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    // From now on the queued poison items the delivery loop sends are refused for good.
    bulk.mapping_error_marker("POISON");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    stop_writers.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    // The relay's count of accepted items is what the clients were told, item by item.
    let t = scrape(first.addr).await;
    let acked = told.acked.lock().unwrap().clone();
    assert_eq!(
        t.accepted(),
        i128::from(told.items_2xx.load(Ordering::Relaxed)),
        "{t:?}"
    );
    assert_eq!(t.accepted(), acked.len() as i128);
    assert!(t.held_all() > 0, "something was queued: {t:?}");
    stop_scraper.store(true, Ordering::Relaxed);
    let scrapes_first = scraper.await.unwrap();
    let report = first.stop().await;
    assert!(report.delivery_drained, "{report:?}");
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.leased, 0, "released at shutdown: {stats:?}");

    // A new relay on the same queue: what it finds is recovered, not accepted.
    bulk.random_faults(None);
    let second = start(&cluster, &queue, config(), None).await;
    let t = scrape(second.addr).await;
    assert_eq!(t.accepted(), 0, "{t:?}");
    assert_eq!(
        t.recovered(),
        i128::from(stats.backlog + stats.dead_letters),
        "{t:?}"
    );
    assert_eq!(t.unaccounted(), 0, "{t:?}");
    let stop_scraper = Arc::new(AtomicBool::new(false));
    let scraper = tokio::spawn(scrape_until(second.addr, stop_scraper.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let t = scrape(second.addr).await;
        if t.held("queued") + t.held("in_flight") == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never drained: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = scrape(second.addr).await;
    let dead = t.held("dead_letter");
    assert!(dead > 0, "the poison items queued before the marker: {t:?}");
    let (status, _, body) = http(
        second.addr,
        "POST",
        "/_searchwire/dead_letters/_purge?all=true",
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let t = scrape(second.addr).await;
    assert_eq!((t.settled("purged"), t.held_all()), (dead, 0), "{t:?}");
    stop_scraper.store(true, Ordering::Relaxed);
    let scrapes_second = scraper.await.unwrap();
    second.stop().await;

    // Every acknowledged id is in the store, except poison ones purged as dead letters.
    let ids: BTreeSet<String> = bulk.ids("acct").into_iter().collect();
    let missing: Vec<&String> = acked.difference(&ids).collect();
    for id in &missing {
        let n: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
        assert_eq!(
            n % 7,
            0,
            "{id} acknowledged, not poison, and not in the store"
        );
    }
    // A dead letter may be in the store too: a delivery the fake applied and then reset
    // before the marker was set, refused for good when it was retried after.
    assert!(
        missing.len() as i128 <= dead,
        "{} missing ids, only {dead} dead letters",
        missing.len()
    );
    eprintln!(
        "scrapes: {scrapes_first} + {scrapes_second}, every one adding up; {} acknowledged, {dead} dead letters",
        acked.len()
    );
    assert!(scrapes_first >= 20 && scrapes_second >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_item_queued_twice_is_settled_as_a_duplicate() {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.install(&cluster);
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let cfg = RelayConfig {
        queue_only: true,
        deliver: false,
        ..config()
    };
    let relay = start(&cluster, &queue, cfg, None).await;
    let item = "{\"index\":{\"_index\":\"acct\",\"_id\":\"same\"}}\n{\"v\":1}\n";
    for _ in 0..2 {
        let (status, _, body) = http(relay.addr, "POST", "/_bulk", item).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"queued\""), "{body}");
    }
    let t = scrape(relay.addr).await;
    assert_eq!(
        (t.accepted(), t.settled("duplicate"), t.held("queued")),
        (2, 1, 1),
        "{t:?}"
    );
    assert_eq!(t.unaccounted(), 0);
    relay.stop().await;
}

/// The answers of single-document writes to a relay in front of a cluster that throttles
/// every item, with `admission`, on `queue` (delivery off): each is a 429 with
/// `Retry-After: 5` and an `es_rejected_execution_exception` body; their reasons.
async fn single_writes_refused(queue: &Queue, admission: AdmissionConfig) -> (Vec<String>, Terms) {
    let cluster = FakeCluster::start(1).await.unwrap();
    let bulk = FakeBulk::new();
    bulk.fault_every(Some((1, BulkFault::Throttle)));
    bulk.install(&cluster);
    let cfg = RelayConfig {
        deliver: false,
        ..config()
    };
    let relay = start(&cluster, queue, cfg, Some(admission)).await;
    let doc = format!("{{\"pad\":\"{}\"}}", "x".repeat(700));
    let mut reasons = Vec::new();
    for (method, path) in [
        ("PUT", "/acct/_doc/1"),
        ("POST", "/acct/_doc"),
        ("PUT", "/acct/_create/3"),
        ("POST", "/acct/_doc/4?op_type=create"),
    ] {
        let (status, head, body) = http(relay.addr, method, path, &doc).await;
        assert_eq!(status, 429, "{method} {path}: {head} {body}");
        assert!(
            head.contains("\r\nretry-after: 5"),
            "{method} {path}: {head}"
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["error"]["type"], "es_rejected_execution_exception",
            "{body}"
        );
        assert_eq!(v["status"], 429, "{body}");
        reasons.push(v["error"]["reason"].as_str().unwrap().to_owned());
    }
    let t = scrape(relay.addr).await;
    relay.stop().await;
    (reasons, t)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_document_write_that_does_not_fit_at_its_append_is_a_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    // ~1.1 KB per stored document, a cap of 500 bytes: the cluster throttles the document,
    // and its append does not fit (the item's 429 — the path that had no Retry-After).
    let admission = AdmissionConfig {
        max_queue_bytes: Some(500),
        min_free_disk_bytes: 0,
        disk_path: None,
    };
    let (reasons, t) = single_writes_refused(&queue, admission).await;
    for r in &reasons {
        assert!(r.contains("could not take this item now"), "{r}");
        assert!(r.contains("--max-queue-bytes"), "{r}");
    }
    assert_eq!((t.accepted(), t.held_all()), (0, 0), "{t:?}");
}

/// An embedded queue in `dir` holding 3 documents of ~1.1 KB stored each: over a cap of
/// 2,400 bytes.
async fn queue_over_the_cap(dir: &tempfile::TempDir) -> Queue {
    let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
    let pad = "x".repeat(1000);
    let backlog: Vec<_> = (0..3)
        .map(|i| {
            searchwire_queue::NewMessage::new(format!(
                "{{\"index\":{{\"_index\":\"acct\",\"_id\":\"old-{i}\"}}}}\n{{\"pad\":\"{pad}\"}}\n"
            ))
            .index("acct")
        })
        .collect();
    queue.append(backlog).await.unwrap();
    queue
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_document_write_at_the_high_water_mark_is_a_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    // A backlog over the cap before the relay starts: it is at its high-water mark from its
    // first measurement, so writes are refused before anything is tried.
    let queue = queue_over_the_cap(&dir).await;
    let admission = AdmissionConfig {
        max_queue_bytes: Some(2_400),
        min_free_disk_bytes: 0,
        disk_path: None,
    };
    let (reasons, t) = single_writes_refused(&queue, admission).await;
    for r in &reasons {
        assert!(r.contains("delivering its backlog"), "{r}");
    }
    assert_eq!(
        (t.accepted(), t.recovered(), t.held_all()),
        (0, 3, 3),
        "{t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_queue_just_drained_takes_writes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A backlog over the cap when the relay starts (3 × ~1.1 KB, a cap of 2,400 bytes), and
    // no delivery: only what the test does empties the queue.
    let queue = queue_over_the_cap(&dir).await;
    let cluster = FakeCluster::start(1).await.unwrap();
    FakeBulk::new().install(&cluster);
    let cfg = RelayConfig {
        deliver: false,
        ..config()
    };
    let admission = AdmissionConfig {
        max_queue_bytes: Some(2_400),
        min_free_disk_bytes: 0,
        disk_path: None,
    };
    let relay = start(&cluster, &queue, cfg, Some(admission)).await;
    let doc = format!("{{\"pad\":\"{}\"}}", "x".repeat(1000));
    let (status, _, body) = http(relay.addr, "PUT", "/acct/_doc/1", &doc).await;
    assert_eq!(status, 429, "at the high-water mark: {body}");
    // The backlog delivered (by another consumer of the queue). Once the last measurement
    // is older than FRESH_TO_REFUSE, a write the estimate would refuse is checked against a
    // fresh one and taken: well within the second between two periodic measurements.
    let leased = queue.lease(10).await.unwrap();
    assert_eq!(leased.len(), 3);
    let ids: Vec<_> = leased.iter().map(|l| l.id()).collect();
    assert_eq!(queue.ack(&ids).await.unwrap(), 3);
    tokio::time::sleep(searchwire_relay::admission::FRESH_TO_REFUSE).await;
    let (status, _, body) = http(relay.addr, "PUT", "/acct/_doc/2", &doc).await;
    assert_eq!(status, 201, "the queue is empty now: {body}");
    relay.stop().await;
}
