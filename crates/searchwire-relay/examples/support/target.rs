//! Where the relay benchmarks send their load: the real nodes named in
//! `SEARCHWIRE_BENCH_URLS` (comma-separated), or else the in-process fake cluster.

use std::net::SocketAddr;

/// The URLs of `SEARCHWIRE_BENCH_URLS` and the address of the first one (the "direct"
/// rows' target), or `None` when it is not set.
pub fn real_nodes() -> Option<(Vec<String>, SocketAddr)> {
    let urls: Vec<String> = std::env::var("SEARCHWIRE_BENCH_URLS")
        .ok()?
        .split(',')
        .map(str::to_owned)
        .collect();
    let addr: SocketAddr = urls[0]
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .unwrap();
    Some((urls, addr))
}
