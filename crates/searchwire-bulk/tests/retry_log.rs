//! The bulk retry log line, in a test binary of its own: a scoped `tracing` subscriber
//! (`set_default`) misses events while other tests of the same process run beside it
//! (tracing's global interest and level caches are shared), so it is not among the
//! retry-count tests of `retries.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use searchwire_bulk::Action;
use searchwire_fake::BulkFault;
use support::{doc, indexer, retrying_client};

/// The retry log line carries the reference 004 ch. 5 retry context: `retry_id`, `attempt`,
/// `cluster`, `index`, `failed_docs`, plus `class` and `delay_ms`.
#[tokio::test(start_paused = true)]
async fn every_retry_decision_logs_one_line_with_the_retry_context() {
    let (_cluster, bulk, client) = retrying_client(1).await;
    let ix = indexer(&client).build().unwrap();
    let lines = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(lines.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    bulk.item_faults([BulkFault::Ok, BulkFault::Throttle, BulkFault::Throttle]);
    for (i, index) in ["a", "b", "c"].into_iter().enumerate() {
        ix.add(Action::create(index).id(format!("{i}")).json(&doc(i)))
            .await
            .unwrap();
    }
    ix.close().await;
    let text = lines.text();
    let retry_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("bulk items will be retried"))
        .collect();
    assert_eq!(retry_lines.len(), 1, "{text}");
    let line = retry_lines[0];
    for field in [
        "attempt=1",
        "cluster=",
        "index=b,c",
        "failed_docs=2",
        "class=\"throttled\"",
        "delay_ms=100",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    let id = line
        .split("retry_id=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "retry_id {id} is a UUID");
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}
