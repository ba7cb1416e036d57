//! The standing adversarial suite's raw-socket part: a hostile server that answers with
//! bytes no well-behaved HTTP server sends (endless and lying bodies, 10 MB headers,
//! HTTP/0.9, floods of 1xx answers, slowloris), each with an exact expectation. Real time
//! with short timeouts; no sleep synchronizes anything (the server's own pauses are the
//! misbehaviour under test). SECURITY.md lists these with the promise each proves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use searchwire::{Client, ErrorKind, OutcomeKind, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Script = fn(TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server that reads each request (head and a declared body) and then runs `script` on
/// the connection. Returns its URL and how many requests it read in full.
async fn hostile(script: Script) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let delivered = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&delivered);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                if read_request(&mut conn).await {
                    count.fetch_add(1, Ordering::SeqCst);
                    script(conn).await;
                }
            });
        }
    });
    (url, delivered)
}

/// Reads one request's head and its `content-length` body; false when the peer went away.
async fn read_request(conn: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + len {
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

fn client(url: &str) -> Client {
    Client::builder()
        .node(url)
        .attempt_timeout(Duration::from_millis(500))
        .max_retries(0)
        .max_response_bytes(1 << 20)
        .resurrection_timers(false)
        .health_refresh(false)
        .read_environment(false)
        .build()
        .unwrap()
}

/// Sends `GET /x` and returns the error, asserting how long it took at most.
async fn fails(url: &str, within: Duration) -> searchwire::Error {
    let t0 = tokio::time::Instant::now();
    let e = client(url).send(Request::get("/x")).await.unwrap_err();
    assert!(t0.elapsed() < within, "took {:?}: {e}", t0.elapsed());
    e
}

#[tokio::test]
async fn an_endless_chunked_body_is_cut_at_max_response_bytes() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
            while c.write_all(chunk.as_bytes()).await.is_ok() {}
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(5)).await;
    assert_eq!(e.kind(), ErrorKind::ResponseTooLarge, "{e}");
    assert_eq!(e.last_outcome(), Some(OutcomeKind::TooLarge));
}

/// A chunked body of `1 MiB + extra` bytes in 64 KiB chunks (the last one `extra` bytes
/// longer), then the end of the body.
async fn chunked_body_of_the_limit_plus(mut c: TcpStream, extra: usize) {
    let _ = c
        .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        .await;
    for i in 0..16u8 {
        let len = 64 * 1024 + if i == 15 { extra } else { 0 };
        let data = vec![b'a' + i; len];
        let _ = c.write_all(format!("{len:x}\r\n").as_bytes()).await;
        let _ = c.write_all(&data).await;
        let _ = c.write_all(b"\r\n").await;
    }
    let _ = c.write_all(b"0\r\n\r\n").await;
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn a_body_of_exactly_max_response_bytes_is_read_and_one_byte_more_is_too_large() {
    let (url, _) = hostile(|c| Box::pin(chunked_body_of_the_limit_plus(c, 0))).await;
    let r = client(&url).send(Request::get("/x")).await.unwrap();
    assert_eq!(r.body().len(), 1 << 20);
    // The chunks are joined in order.
    for (i, part) in r.body().chunks(64 * 1024).enumerate() {
        assert!(part.iter().all(|&b| b == b'a' + i as u8), "chunk {i}");
    }
    let (url, _) = hostile(|c| Box::pin(chunked_body_of_the_limit_plus(c, 1))).await;
    let e = fails(&url, Duration::from_secs(5)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::TooLarge), "{e}");
    assert!(e.to_string().contains("grew"), "{e}");
}

#[tokio::test]
async fn an_endless_body_without_a_length_is_cut_at_max_response_bytes() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
                .await;
            let block = vec![b'x'; 64 * 1024];
            while c.write_all(&block).await.is_ok() {}
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(5)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::TooLarge), "{e}");
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_is_a_lost_connection() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nonly this")
                .await;
            // Closing here: the body lied about its length.
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(2)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset), "{e}");
    assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_fails_before_the_body_is_read() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\nx")
                .await;
            // The rest never comes: only the declaration can fail the attempt this fast.
            std::future::pending::<()>().await;
        })
    })
    .await;
    let e = fails(&url, Duration::from_millis(450)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::TooLarge), "{e}");
}

#[tokio::test]
async fn ten_megabytes_of_headers_are_refused_without_reading_them_all() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\n").await;
            let line = format!("x-junk: {}\r\n", "a".repeat(8 * 1024));
            for _ in 0..(10 * 1024 / 8) {
                if c.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
            }
            let _ = c.write_all(b"content-length: 0\r\n\r\n").await;
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(2)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset), "{e}");
}

#[tokio::test]
async fn an_http_0_9_answer_is_a_lost_connection_not_a_response() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c.write_all(b"<html>hello from 1991</html>\n").await;
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(2)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset), "{e}");
}

#[tokio::test]
async fn a_flood_of_1xx_answers_then_a_response_is_read_as_the_response() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let flood = "HTTP/1.1 102 Processing\r\n\r\n".repeat(10_000);
            let _ = c.write_all(flood.as_bytes()).await;
            let _ = c
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                .await;
        })
    })
    .await;
    let r = client(&url).send(Request::get("/x")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.body().as_ref(), b"{}");
}

#[tokio::test]
async fn an_endless_flood_of_1xx_answers_ends_at_the_attempt_timeout() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let one = "HTTP/1.1 100 Continue\r\n\r\n".repeat(100);
            while c.write_all(one.as_bytes()).await.is_ok() {}
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(3)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Timeout), "{e}");
}

#[tokio::test]
async fn a_slowloris_head_ends_at_the_attempt_timeout() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\n").await;
            // One header byte every 50 ms, forever.
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if c.write_all(b"x").await.is_err() {
                    return;
                }
            }
        })
    })
    .await;
    let e = fails(&url, Duration::from_secs(2)).await;
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Timeout), "{e}");
    assert_eq!(e.kind(), ErrorKind::NoNodeReachable, "{e}");
}

#[tokio::test]
async fn a_post_is_delivered_once_when_the_server_resets_after_reading_it() {
    let (url, delivered) = hostile(|c| {
        Box::pin(async move {
            // Read in full, then the connection is dropped without an answer.
            drop(c);
        })
    })
    .await;
    let client = Client::builder()
        .node(url)
        .max_retries(5)
        .resurrection_timers(false)
        .health_refresh(false)
        .read_environment(false)
        .build()
        .unwrap();
    let e = client
        .send(Request::post("/i/_doc").body(r#"{"a":1}"#))
        .await
        .unwrap_err();
    assert_eq!(e.last_outcome(), Some(OutcomeKind::Reset), "{e}");
    assert_eq!(e.attempts().len(), 1, "never repeated: {e}");
    assert_eq!(delivered.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_in_several_chunks_with_trailers_arrives_whole() {
    let (url, _) = hostile(|mut c| {
        Box::pin(async move {
            let _ = c
                .write_all(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                      3\r\nabc\r\n1\r\nd\r\n4\r\nefgh\r\n0\r\nx-t: 1\r\n\r\n",
                )
                .await;
        })
    })
    .await;
    let resp = client(&url).send(Request::get("/x")).await.unwrap();
    assert_eq!(&resp.body()[..], b"abcdefgh");
}
