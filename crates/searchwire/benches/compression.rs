//! What request compression costs and saves on `_bulk` bodies of log documents, for the
//! `_bulk` default (`docs/benchmarks.md`, "Compressed requests"): per document, the CPU of
//! gzip at levels 1, 3 and 6 (the client) and of inflating (the node), and the bytes on the
//! wire with and without.
//!
//! ```sh
//! cargo bench -p searchwire --bench compression            # 5 rounds of 20 bodies each
//! COMPRESSION_ROUNDS=9 cargo bench -p searchwire --bench compression
//! ```
//!
//! The documents are generated (seeded): ~250 B access-log lines and ~1.5 KB application
//! logs with Kubernetes metadata, each with a random trace id and client address and the
//! UUIDv7-like `_id` the indexer assigns, 1,000 actions per body (the indexer's default).
//! CPU is the thread's own (`CLOCK_THREAD_CPUTIME_ID`); figures are medians over rounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use searchwire::compression::{gunzip_bounded, gzip};

const ACTIONS: usize = 1_000;
const BODIES: usize = 20;

fn main() {
    let rounds: usize = std::env::var("COMPRESSION_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("| documents | level | bytes per doc plain → gzip | ratio | gzip µs CPU per doc | inflate µs CPU per doc |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, make) in [
        (
            "~250 B access logs",
            access_log as fn(&mut fastrand::Rng, u64) -> String,
        ),
        ("~1.5 KB application logs", app_log),
    ] {
        let mut rng = fastrand::Rng::with_seed(42);
        let bodies: Vec<Vec<u8>> = (0..BODIES)
            .map(|b| body(&mut rng, make, (b * ACTIONS) as u64))
            .collect();
        let plain: usize = bodies.iter().map(Vec::len).sum();
        let docs = (BODIES * ACTIONS) as f64;
        for level in [1, 3, 6] {
            let mut gz_ns = Vec::new();
            let mut inflate_ns = Vec::new();
            let mut gz_bytes = 0;
            for _ in 0..rounds {
                let t = thread_cpu_ns();
                let gz: Vec<Vec<u8>> = bodies.iter().map(|b| gzip(b, level)).collect();
                gz_ns.push(thread_cpu_ns() - t);
                gz_bytes = gz.iter().map(Vec::len).sum();
                let t = thread_cpu_ns();
                for (g, b) in gz.iter().zip(&bodies) {
                    let back = gunzip_bounded(g, b.len()).unwrap().unwrap();
                    assert_eq!(back.len(), b.len());
                }
                inflate_ns.push(thread_cpu_ns() - t);
            }
            println!(
                "| {name} | {level} | {:.0} → {:.0} | {:.1}× | {:.2} | {:.2} |",
                plain as f64 / docs,
                gz_bytes as f64 / docs,
                plain as f64 / gz_bytes as f64,
                median(&mut gz_ns) as f64 / docs / 1000.0,
                median(&mut inflate_ns) as f64 / docs / 1000.0,
            );
        }
    }
}

/// One `_bulk` body of [`ACTIONS`] index actions.
fn body(rng: &mut fastrand::Rng, make: fn(&mut fastrand::Rng, u64) -> String, n0: u64) -> Vec<u8> {
    let mut out = String::new();
    for n in n0..n0 + ACTIONS as u64 {
        // A UUIDv7: 48 bits of milliseconds, then random bits.
        let id = format!(
            "{:012x}-7{:03x}-{:04x}-{:012x}",
            1_767_225_600_000 + n / 4,
            rng.u16(..0x1000),
            rng.u16(0x8000..0xc000),
            rng.u64(..1 << 48)
        );
        out.push_str(&format!(
            "{{\"index\":{{\"_index\":\"logs-2026.01.01\",\"_id\":\"{id}\"}}}}\n"
        ));
        out.push_str(&make(rng, n));
        out.push('\n');
    }
    out.into_bytes()
}

const PATHS: &[&str] = &[
    "/api/v1/orders",
    "/api/v1/items",
    "/api/v1/users/me",
    "/static/app.js",
    "/health",
    "/api/v2/search",
    "/login",
];
const AGENTS: &[&str] = &[
    "Mozilla/5.0 (X11; Linux x86_64)",
    "curl/8.5.0",
    "Go-http-client/1.1",
    "okhttp/4.12.0",
];
const LEVELS: &[&str] = &["INFO", "INFO", "INFO", "WARN", "DEBUG", "ERROR"];
const SERVICES: &[&str] = &["checkout", "catalog", "payments", "gateway", "search"];

fn timestamp(n: u64) -> String {
    let ms = n * 3;
    format!(
        "2026-01-01T{:02}:{:02}:{:02}.{:03}Z",
        (ms / 3_600_000) % 24,
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000
    )
}

fn access_log(rng: &mut fastrand::Rng, n: u64) -> String {
    format!(
        "{{\"@timestamp\":\"{}\",\"client\":\"10.{}.{}.{}\",\"method\":\"GET\",\"path\":\"{}/{}\",\"status\":{},\"bytes\":{},\"agent\":\"{}\",\"ms\":{}}}",
        timestamp(n),
        rng.u8(..),
        rng.u8(..),
        rng.u8(..),
        PATHS[rng.usize(..PATHS.len())],
        rng.u32(..100_000),
        [200, 200, 200, 201, 304, 404, 500][rng.usize(..7)],
        rng.u32(..50_000),
        AGENTS[rng.usize(..AGENTS.len())],
        rng.u32(..900),
    )
}

fn app_log(rng: &mut fastrand::Rng, n: u64) -> String {
    let service = SERVICES[rng.usize(..SERVICES.len())];
    let level = LEVELS[rng.usize(..LEVELS.len())];
    let pod = format!(
        "{service}-{:x}-{:05x}",
        rng.u32(..1 << 20),
        rng.u32(..1 << 20)
    );
    let mut stack = String::new();
    if level == "ERROR" || rng.u8(..4) == 0 {
        for depth in 0..8 {
            stack.push_str(&format!(
                "\\n\\tat com.example.{service}.Handler{}.process(Handler.java:{})",
                depth,
                rng.u16(40..900)
            ));
        }
    }
    format!(
        concat!(
            "{{\"@timestamp\":\"{ts}\",\"log.level\":\"{level}\",\"service.name\":\"{service}\",",
            "\"trace.id\":\"{t1:016x}{t2:016x}\",\"span.id\":\"{s:016x}\",",
            "\"message\":\"request {n} for customer {c} took {ms} ms; {items} items, total {cents} cents{stack}\",",
            "\"http\":{{\"request\":{{\"method\":\"POST\",\"path\":\"{path}\"}},\"response\":{{\"status_code\":{status}}}}},",
            "\"kubernetes\":{{\"namespace\":\"shop-prod\",\"pod\":{{\"name\":\"{pod}\",\"ip\":\"10.42.{a}.{b}\"}},",
            "\"node\":{{\"name\":\"ip-10-0-{a}-{b}.eu-west-1.compute.internal\"}},",
            "\"labels\":{{\"app\":\"{service}\",\"team\":\"commerce\",\"tier\":\"backend\",\"version\":\"1.{v}.0\",",
            "\"pod-template-hash\":\"{hash:x}\"}},\"container\":{{\"name\":\"{service}\",",
            "\"image\":\"registry.example.com/shop/{service}:1.{v}.0\"}}}},",
            "\"host\":{{\"name\":\"ip-10-0-{a}-{b}\",\"os\":{{\"type\":\"linux\",\"kernel\":\"6.8.0-1012-aws\"}}}},",
            "\"cloud\":{{\"provider\":\"aws\",\"region\":\"eu-west-1\",\"availability_zone\":\"eu-west-1{az}\",",
            "\"instance\":{{\"id\":\"i-{inst:017x}\"}}}},",
            "\"agent\":{{\"type\":\"filebeat\",\"version\":\"8.15.0\",\"id\":\"{agent:032x}\"}},",
            "\"event\":{{\"dataset\":\"{service}.log\",\"duration\":{dur},\"ingested\":\"{ts}\"}},",
            "\"user\":{{\"id\":\"u-{c}\",\"roles\":[\"customer\",\"beta\"]}},",
            "\"tags\":[\"prod\",\"eu\",\"{service}\",\"k8s\"],\"deploy\":{{\"env\":\"production\",\"cluster\":\"shop-eu-1\",",
            "\"build\":\"{build:040x}\"}}}}"
        ),
        ts = timestamp(n),
        level = level,
        service = service,
        t1 = rng.u64(..),
        t2 = rng.u64(..),
        s = rng.u64(..),
        n = n,
        c = rng.u32(..1_000_000),
        ms = rng.u32(..2_000),
        items = rng.u8(1..20),
        cents = rng.u32(..100_000),
        stack = stack,
        path = PATHS[rng.usize(..PATHS.len())],
        status = [200, 200, 201, 400, 500][rng.usize(..5)],
        pod = pod,
        a = rng.u8(..),
        b = rng.u8(..),
        v = rng.u8(..30),
        hash = rng.u32(..),
        az = ["a", "b", "c"][rng.usize(..3)],
        inst = rng.u64(..1 << 60),
        agent = rng.u128(..),
        dur = rng.u64(..2_000_000_000),
        build = 0x5eed_u128 * 0x1_0000_0001,
    )
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}
