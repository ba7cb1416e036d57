//! Progress on stderr (a live line on a terminal, a plain line every `--progress-every`
//! otherwise) and the periodic `--resume` checkpoint.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use searchwire_bulk::BulkIndexer;
use tokio::time::Instant;

use super::checkpoint::checkpoint_now;
use super::Shared;
use crate::output;

pub(super) async fn report_loop(
    ix: Arc<BulkIndexer>,
    shared: Arc<Shared>,
    resume: Option<PathBuf>,
    progress_every: Duration,
    checkpoint_every: Duration,
    started: Instant,
) {
    let tty = std::io::stderr().is_terminal();
    let tick = if tty {
        checkpoint_every.min(Duration::from_millis(500))
    } else {
        checkpoint_every.min(progress_every)
    };
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_progress = started;
    let mut last_checkpoint = started;
    loop {
        interval.tick().await;
        let now = Instant::now();
        if now.duration_since(last_checkpoint) >= checkpoint_every {
            last_checkpoint = now;
            checkpoint_now(&ix, &shared, resume.as_deref(), false);
        }
        if tty || now.duration_since(last_progress) >= progress_every {
            last_progress = now;
            let s = ix.stats();
            let secs = now.duration_since(started).as_secs_f64().max(0.001);
            let dead = shared.dead.lock().map(|d| d.count).unwrap_or(0);
            let line = format!(
                "ingest: {} indexed ({:.0} docs/s), {} retries, {} dead letters, {}/{} requests in flight, {:.1}s",
                s.indexed,
                s.indexed as f64 / secs,
                s.retried(),
                dead,
                s.in_flight,
                s.concurrency,
                secs
            );
            if tty {
                output::stderr(&format!("\r\x1b[2K{line}"));
            } else {
                output::stderr(&format!("{line}\n"));
            }
        }
    }
}

pub(super) fn clear_progress_line() {
    if std::io::stderr().is_terminal() {
        output::stderr("\r\x1b[2K");
    }
}
