//! The ingest's durable retry queue: opening `--queue-dir` or `--redis`, and the drain
//! after the input (`--drain-timeout`).

use std::time::Duration;

use tokio::time::Instant;

use super::args::IngestQueueArgs;
use crate::output;

/// Opens the queue of `--queue-dir` or `--redis`, if one is given.
pub(super) async fn open_queue(
    a: &IngestQueueArgs,
) -> Result<Option<searchwire_queue::Queue>, String> {
    use searchwire_queue::{EmbeddedConfig, Queue};
    if let Some(dir) = a.queue_dir.clone() {
        let shown = dir.display().to_string();
        let q = tokio::task::spawn_blocking(move || Queue::open_embedded(EmbeddedConfig::new(dir)))
            .await
            .map_err(|e| format!("opening the queue {shown} failed: {e}"))?
            .map_err(|e| format!("cannot open the queue {shown}: {e}"))?;
        return Ok(Some(q));
    }
    if let Some(mut c) = a.redis_ha.config(a.redis.as_deref()) {
        c.stream = a.redis_stream.clone();
        let q = Queue::connect_redis(c)
            .await
            .map_err(|e| format!("cannot connect to the Redis queue: {e}"))?;
        return Ok(Some(q));
    }
    Ok(None)
}

/// After the input: delivers from the queue for up to `timeout`, then gives back what
/// this process still holds (due at once, for the next consumer).
pub(super) async fn drain(
    queue: &searchwire_queue::Queue,
    client: &searchwire::Client,
    builder: searchwire_bulk::BulkIndexerBuilder,
    timeout: Duration,
) -> Result<searchwire_bulk::DeliveryReport, String> {
    let report = if timeout.is_zero() {
        Ok(searchwire_bulk::DeliveryReport {
            left: queue.stats().await.map_err(|e| e.to_string())?.backlog,
            ..Default::default()
        })
    } else {
        crate::queue::deliver_with(queue, client, builder, Some(Instant::now() + timeout), None)
            .await
    };
    if let Err(e) = queue.release().await {
        output::error_message(format!("cannot release the queue's leases: {e}"));
    }
    if let searchwire_queue::Queue::Embedded(q) = queue {
        let _ = q.close().await;
    }
    report
}
