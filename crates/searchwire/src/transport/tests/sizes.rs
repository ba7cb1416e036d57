//! The size of the futures a request moves: a future is moved — copied byte by
//! byte — each time it is wrapped or awaited from a new place, so its size is per-request
//! CPU. The bounds are a little above what the current code measures (printed with
//! `--nocapture`); a change that makes the hot path's futures grow fails here.

use std::time::SystemTime;

use tokio::time::Instant;

use crate::testing::{client, Scripted};
use crate::transport::run::RequestId;
use crate::Request;

#[tokio::test]
async fn the_request_futures_stay_small() {
    let c = Scripted::default();
    let cl = client(1, &c, |b| b);
    let send = cl.send(Request::get("/"));
    let request = Request::get("/");
    let id = RequestId::new(|| SystemTime::UNIX_EPOCH);
    let execute = crate::transport::run::execute(&cl.inner, &request, &id, Instant::now());
    let (send, execute) = (size_of_val(&send), size_of_val(&execute));
    eprintln!("future sizes: Client::send {send} bytes, execute {execute} bytes");
    // 1,216 and 488 bytes (test profile, rustc 1.95), from 2,104 and 1,424 before the first
    // attempt ran inline with its retry path boxed, the attempt timer was kept, a future
    // layer went and the retry id became lazy.
    assert!(send <= 1_300, "Client::send's future is {send} bytes");
    assert!(execute <= 560, "execute's future is {execute} bytes");
}

#[test]
fn an_attempts_header_map_has_room_for_what_hyper_adds() {
    // Hyper inserts `content-length` (and `Host` when unset) into the map it is handed; a
    // full map reallocates on that insert, on every request.
    let c = Scripted::default();
    // 12 headers in all (Host, User-Agent, 8 defaults, 2 of the request's): a map grown
    // insert by insert would hold exactly 12.
    let cl = client(1, &c, |b| {
        ["x-a", "x-b", "x-c", "x-d", "x-e", "x-f", "x-g", "x-h"]
            .into_iter()
            .fold(b, |b, name| b.header(name, "1"))
    });
    let request = Request::get("/").header("x-i", "1").header("x-j", "1");
    let node = &cl.inner.pool.topology().nodes[0];
    let http = crate::transport::run::build_http(&cl.inner, &request, &node.addr, "")
        .expect("a valid request");
    let headers = http.headers();
    assert_eq!(headers.len(), 12, "{headers:?}");
    assert!(
        headers.capacity() >= headers.len() + 3,
        "{} headers, room for {}",
        headers.len(),
        headers.capacity()
    );
}
