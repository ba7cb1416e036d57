//! Request compression through the attempt loop: compressed once, before the first attempt.

use crate::testing::{client, Scripted, Step};
use crate::Request;

fn ndjson(docs: usize) -> String {
    (0..docs)
        .map(|i| format!("{{\"index\":{{\"_id\":\"{i}\"}}}}\n{{\"message\":\"line {i}\"}}\n"))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_attempt_sends_the_one_compressed_copy() {
    let c = Scripted::default();
    c.push(1, Step::Status(429));
    c.push(1, Step::Status(429));
    let cl = client(1, &c, |b| b.compress_requests(64));
    let body = ndjson(200);
    let r = cl
        .send(Request::post("/_bulk").body(body.clone()))
        .await
        .unwrap();
    assert_eq!(r.attempts().len(), 3);
    let sent = c.sent();
    assert_eq!(sent.len(), 3);
    // The very same bytes (one allocation), not three compressions of the body.
    for s in &sent {
        assert_eq!(s.body.as_ptr(), sent[0].body.as_ptr());
        assert_eq!(s.headers["content-encoding"], "gzip");
        assert_eq!(s.headers["accept-encoding"], "gzip");
    }
    let inflated = crate::http::gzip::gunzip_bounded(&sent[0].body, 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(inflated, body.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_large_body_is_compressed_off_the_async_workers_and_one_gzip_does_not_shrink_is_sent_plain(
) {
    let c = Scripted::default();
    let cl = client(1, &c, |b| b.compress_requests(0));
    // Over BLOCKING_FROM: compressed on the blocking pool, same result.
    let big = ndjson(5_000);
    assert!(big.len() > crate::http::gzip::BLOCKING_FROM);
    cl.send(Request::post("/_bulk").body(big.clone()))
        .await
        .unwrap();
    // Random bytes do not compress: sent as they are, without a Content-Encoding.
    let mut rng = fastrand::Rng::with_seed(7);
    let noise: Vec<u8> = (0..4096).map(|_| rng.u8(..)).collect();
    cl.send(Request::put("/blob/_doc/1").body(noise.clone()))
        .await
        .unwrap();
    let sent = c.sent();
    assert_eq!(sent[0].headers["content-encoding"], "gzip");
    assert_eq!(
        crate::http::gzip::gunzip_bounded(&sent[0].body, 1 << 24)
            .unwrap()
            .unwrap(),
        big.as_bytes()
    );
    assert!(!sent[1].headers.contains_key("content-encoding"));
    assert_eq!(&sent[1].body[..], &noise[..]);
}
