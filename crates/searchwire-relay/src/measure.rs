//! Measuring what bounds the relay under overload ([`crate::admission`]): the queue's counts
//! and the free disk, every [`REFRESH`], into the admission state and the queue's gauges.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;

use std::time::Duration;

use crate::admission::{disk, stored_bytes, RECORD_OVERHEAD, REFRESH};
use crate::state::Shared;

/// Measures the queue and the disk once.
pub(crate) async fn refresh(shared: &Shared) {
    let mut last = shared.admission.measuring.lock().await;
    measure(shared, &mut last).await;
}

/// Measures again unless a measurement that began at most `max_age` ago is there (or one
/// under way: its end is waited for and taken).
pub(crate) async fn fresh(shared: &Shared, max_age: Duration) {
    let mut last = shared.admission.measuring.lock().await;
    if last.is_some_and(|t| t.elapsed() <= max_age) {
        return;
    }
    measure(shared, &mut last).await;
}

/// Measures the queue and the disk once (the caller holds `Admission::measuring`, whose
/// value `last` becomes when this began).
async fn measure(shared: &Shared, last: &mut Option<tokio::time::Instant>) {
    *last = Some(tokio::time::Instant::now());
    let a = &shared.admission;
    // What was reserved before the count was taken is in the count once it returns.
    let reserved = a.reserved.load(Ordering::Relaxed);
    let stats = shared.queue.stats().await;
    if let Ok(s) = &stats {
        // The queue's gauges, fresh at every scrape (health and the idle delivery loop set
        // them too).
        metrics::gauge!("searchwire_relay_backlog").set(s.backlog as f64);
        metrics::gauge!("searchwire_relay_dead_letters").set(s.dead_letters as f64);
        metrics::gauge!("searchwire_relay_oldest_age_seconds")
            .set(s.oldest_age.map_or(0.0, |d| d.as_secs_f64()));
        let messages = s.backlog + s.dead_letters;
        let mean = match a.mean() {
            Some(m) => m,
            None if messages > 0 => sample(shared).await,
            None => 0,
        };
        a.measured
            .store(messages.saturating_mul(mean), Ordering::Relaxed);
        let _ = a
            .reserved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                Some(r.saturating_sub(reserved))
            });
    }
    if let Some(path) = &a.config.disk_path {
        let path = path.clone();
        if let Ok(Some(d)) = tokio::task::spawn_blocking(move || disk(&path)).await {
            a.free_disk.store(d.free, Ordering::Relaxed);
            metrics::gauge!("searchwire_relay_free_disk_bytes").set(d.free as f64);
        }
    }
    metrics::gauge!("searchwire_relay_queue_bytes").set(a.queue_bytes() as f64);
    if let Some(m) = a.config.max_queue_bytes {
        metrics::gauge!("searchwire_relay_max_queue_bytes").set(m as f64);
    }
    // Updates the high-water state (and its gauge) from the fresh numbers.
    let _ = a.overloaded();
}

/// The mean stored size of the oldest queued messages (a relay that restarts on a backlog
/// has appended nothing yet); seeds the mean.
async fn sample(shared: &Shared) -> u64 {
    let page = shared.queue.list(None, 100).await.unwrap_or_default();
    let n = page.len() as u64;
    if n == 0 {
        return RECORD_OVERHEAD;
    }
    let bytes: u64 = page
        .iter()
        .map(|m| {
            stored_bytes(
                m.payload.len(),
                m.index.as_ref().map_or(0, String::len),
                m.last_error.as_ref().map_or(0, String::len),
            )
        })
        .sum();
    shared.admission.appended(n, bytes);
    bytes / n
}

/// Refreshes every [`REFRESH`] until `stop`.
pub(crate) async fn refresh_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = stop.changed() => return,
        }
        refresh(&shared).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::admission::AdmissionConfig;
    use searchwire_queue::{EmbeddedConfig, NewMessage, Queue};

    #[tokio::test]
    async fn a_measurement_older_than_asked_is_taken_again_and_a_fresh_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let queue = Queue::open_embedded(EmbeddedConfig::new(dir.path())).unwrap();
        let backlog: Vec<_> = (0..3)
            .map(|i| NewMessage::new(format!("{i}:{}", "x".repeat(1000))).index("acct"))
            .collect();
        queue.append(backlog).await.unwrap();
        let client = searchwire::Client::builder()
            .nodes(["http://127.0.0.1:9"])
            .build()
            .unwrap();
        let cfg = crate::RelayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..crate::RelayConfig::default()
        };
        let relay = crate::Relay::bind(cfg, client, queue.clone())
            .await
            .unwrap()
            .admission(AdmissionConfig {
                max_queue_bytes: Some(2_400),
                min_free_disk_bytes: 0,
                disk_path: None,
            });
        let shared = &relay.shared;
        refresh(shared).await;
        assert!(
            shared.admission.overloaded().is_some(),
            "3 × ~1.1 KB over 2,400"
        );
        // Delivered by another consumer.
        let ids: Vec<_> = queue
            .lease(10)
            .await
            .unwrap()
            .iter()
            .map(|l| l.id())
            .collect();
        assert_eq!(queue.ack(&ids).await.unwrap(), 3);
        // (Real time: the embedded queue's work lets a paused clock jump to the client's
        // timers. An hour and zero leave no doubt which side of the age a measurement is.)
        fresh(shared, Duration::from_secs(3600)).await;
        assert!(
            shared.admission.overloaded().is_some(),
            "a measurement younger than asked is kept"
        );
        fresh(shared, Duration::ZERO).await;
        assert_eq!(shared.admission.overloaded(), None, "measured again: empty");
        assert_eq!(shared.admission.queue_bytes(), 0);
    }
}
