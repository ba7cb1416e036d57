//! `searchwire ingest FILE|-`: NDJSON into the cluster through one `searchwire_bulk::BulkIndexer`.
//!
//! Input: plain documents (one JSON object per line, into `--index`) or bulk-format
//! action/source pairs. Every action gets an id before its first send (`--id-field`, the
//! action line's `_id`, a content hash, or a UUIDv7), plain documents are written with
//! `create`, and a 409 on `create` counts as already present — so a re-run or a resumed run
//! never writes a document twice.
//!
//! `--resume FILE` keeps a checkpoint: the input offset below which every line is finished
//! (acknowledged by the cluster, or written to the dead letters and flushed). A killed
//! ingest started again with the same `--resume FILE` continues from there; the lines after
//! the checkpoint that had landed already come back 409 and count as already present.
//!
//! The module, by concern: [`args`] (the command line and its `--help`), [`input`] (reading
//! and parsing the input), [`checkpoint`] (`--resume`), [`dead`] (dead letters),
//! [`queued`] (the durable retry queue and the drain), [`progress`] (stderr progress and the
//! periodic checkpoint), [`summary`] (the JSON summary); this file wires them into [`run`]
//! and decides the exit code.

mod args;
mod checkpoint;
mod dead;
mod input;
mod progress;
mod queued;
mod summary;

use std::io::Seek;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use searchwire_bulk::defaults as d;
use searchwire_bulk::{BulkIndexer, IdScheme, OpType};
use tokio::time::Instant;

pub use args::IngestArgs;
use args::{DocOp, Format};
use checkpoint::{final_checkpoint, read_checkpoint, Checkpoint, Tracker};
use dead::{sink, DeadLetters};
use input::{read_input, Input};
use progress::{clear_progress_line, report_loop};
use queued::{drain, open_queue};
use summary::{QueueSummary, Summary};

use crate::connect::{connect, start, Auth};
use crate::exit;
use crate::ingest_parse::ParseSpec;
use crate::output;
use crate::signals::Signals;

/// Exit code after Ctrl-C (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// What the reader, the indexer's sinks and the reporter share during one run.
struct Shared {
    tracker: Mutex<Tracker>,
    dead: Mutex<DeadLetters>,
    /// Credentials rejected or similar: stop reading.
    fatal: AtomicBool,
    malformed: AtomicU64,
    /// Input lines read in this run.
    lines: AtomicU64,
    /// With a queue: where undeliverable items go (the checkpoint waits for their appends).
    queue_sink: std::sync::OnceLock<searchwire_bulk::QueueSink>,
}

/// Runs the subcommand; returns the exit code.
pub async fn run(a: IngestArgs, auth: Auth) -> u8 {
    match run_inner(a, auth).await {
        Ok(code) => code,
        Err(msg) => {
            output::error_message(msg);
            exit::USAGE
        }
    }
}

async fn run_inner(a: IngestArgs, auth: Auth) -> Result<u8, String> {
    // Ctrl-C (SIGINT), or SIGTERM (a service manager stopping the ingest): registered
    // before anything is sent, so either one always means the clean stop.
    let mut signals = Signals::install();
    let docs = match a.format {
        Format::Docs if a.index.is_none() => {
            return Err("--format docs needs --index NAME".into());
        }
        Format::Docs => true,
        Format::Bulk => false,
        Format::Auto => a.index.is_some(),
    };
    if a.id_field.is_some() && !docs {
        return Err(
            "--id-field applies to plain documents (--index); bulk-format lines carry _id".into(),
        );
    }
    if a.resume.is_some() && a.input == "-" {
        return Err("--resume needs a FILE to seek in, not stdin".into());
    }
    let ids = if a.content_hash_ids || (a.resume.is_some() && a.id_field.is_none()) {
        IdScheme::ContentHash
    } else {
        IdScheme::UuidV7
    };

    // The checkpoint to resume from.
    let mut start_at = Checkpoint {
        input: a.input.clone(),
        ..Checkpoint::default()
    };
    if let Some(path) = &a.resume {
        if let Some(cp) = read_checkpoint(path)? {
            if cp.input != a.input {
                return Err(format!(
                    "the checkpoint {} is for input {}, not {}; use another --resume file",
                    path.display(),
                    searchwire::echo(&cp.input),
                    searchwire::echo(&a.input)
                ));
            }
            start_at = cp;
        }
    }

    let dead_file = match &a.dead_letter {
        Some(p) => {
            let mut o = std::fs::OpenOptions::new();
            o.create(true);
            if a.resume.is_some() {
                o.append(true);
            } else {
                o.write(true).truncate(true);
            }
            Some(std::io::BufWriter::new(o.open(p).map_err(|e| {
                format!("cannot open --dead-letter file {}: {e}", p.display())
            })?))
        }
        None => None,
    };

    let client = match start(a.metrics_addr, || {
        a.compress
            .apply(connect(&a.conn, auth)?)
            .build()
            .map_err(|e| e.to_string())
    }) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };

    // Every node once: an unreachable cluster or rejected credentials end the run before
    // any input is read, and the cluster name reaches the retry logs.
    let report = client.check_all().await;
    if report.reachable() == 0 && a.queue.configured() {
        output::error_message(
            "no node reachable: queueing what cannot be written (the cluster may come back)",
        );
    } else if report.reachable() == 0 {
        let why: Vec<String> = report
            .nodes
            .iter()
            .map(|n| format!("{}: {}", n.url, n.error.as_deref().unwrap_or("unreachable")))
            .collect();
        output::error_message(format!("no node reachable ({})", why.join("; ")));
        return Ok(exit::NO_NODE);
    }
    if report.all_reachable_rejected_credentials() {
        output::error_message("every reachable node rejected the credentials");
        return Ok(exit::AUTH);
    }

    let shared = Arc::new(Shared {
        tracker: Mutex::new(Tracker {
            pending: Default::default(),
            done: Checkpoint {
                input: a.input.clone(),
                offset: start_at.offset,
                line: start_at.line,
            },
        }),
        dead: Mutex::new(DeadLetters {
            file: dead_file,
            count: 0,
            worst: None,
        }),
        fatal: AtomicBool::new(false),
        malformed: AtomicU64::new(0),
        lines: AtomicU64::new(0),
        queue_sink: std::sync::OnceLock::new(),
    });

    let mut delivery = BulkIndexer::builder(client.clone())
        .conflict_is_present(true)
        .item_deadline(a.queue.queue_after);
    if let Some(n) = a.batch_actions {
        delivery = delivery.batch_actions(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(n) = a.concurrency {
        delivery = delivery.max_concurrency(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let mut b = BulkIndexer::builder(client.clone())
        .id_scheme(ids)
        .conflict_is_present(true)
        .dead_letter_sink(sink(shared.clone()));
    if let Some(n) = a.batch_actions {
        b = b.batch_actions(usize::try_from(n).unwrap_or(usize::MAX));
        b = b.max_pending_actions(
            usize::try_from(n)
                .unwrap_or(usize::MAX)
                .saturating_mul(a.concurrency.map_or(d::MAX_CONCURRENCY, |c| c as usize) + 1),
        );
    }
    if let Some(n) = a.batch_bytes {
        b = b.batch_bytes(n).max_pending_bytes(
            n.saturating_mul(a.concurrency.map_or(d::MAX_CONCURRENCY, |c| c as usize) + 1)
                .min(u32::MAX as usize),
        );
    }
    if let Some(d) = a.flush_interval {
        b = b.flush_interval(d);
    }
    if let Some(n) = a.concurrency {
        b = b.max_concurrency(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(d) = a.timeout {
        b = b.request_timeout(d);
    }
    if let Some(d) = a.item_deadline {
        b = b.item_deadline(d);
    }
    let mut policy = searchwire_bulk::RetryPolicy::default();
    if let Some(n) = a.throttle_retries {
        policy.throttled.max_retries = n;
    }
    if let Some(n) = a.unavailable_retries {
        policy.unavailable.max_retries = n;
    }
    if let Some(n) = a.connection_retries {
        policy.connection.max_retries = n;
    }
    let queue = match open_queue(&a.queue).await? {
        Some(q) => {
            let sink = searchwire_bulk::QueueSink::start(
                q.clone(),
                searchwire_bulk::QueueSinkConfig {
                    priority: a.queue.priority,
                    ..Default::default()
                },
                sink(shared.clone()),
            );
            b = b
                .retry_sink(sink.clone())
                .item_deadline(a.queue.queue_after);
            let _ = shared.queue_sink.set(sink);
            Some(q)
        }
        None => None,
    };
    let ix = Arc::new(b.retry_policy(policy).build().map_err(|e| e.to_string())?);

    let input = if a.input == "-" {
        Input::Stdin(std::io::stdin())
    } else {
        let mut f = std::fs::File::open(&a.input)
            .map_err(|e| format!("cannot open input {}: {e}", a.input))?;
        if start_at.offset > 0 {
            f.seek(std::io::SeekFrom::Start(start_at.offset))
                .map_err(|e| format!("cannot seek input {} to the checkpoint: {e}", a.input))?;
        }
        Input::File(f)
    };

    let started = Instant::now();
    let reporter = tokio::spawn(report_loop(
        ix.clone(),
        shared.clone(),
        a.resume.clone(),
        a.progress_every,
        a.checkpoint_every,
        started,
    ));

    let parse = ParseSpec {
        docs,
        index: a.index.as_deref().map(Arc::from),
        op: match a.op {
            DocOp::Create => OpType::Create,
            DocOp::Index => OpType::Index,
        },
        id_path: a
            .id_field
            .as_deref()
            .map(|f| f.split('.').map(str::to_owned).collect())
            .unwrap_or_default(),
        id_field: a.id_field.clone(),
    };
    let mut interrupted = false;
    let read_result = {
        let read = read_input(input, &parse, &ix, &shared, start_at.offset, start_at.line);
        tokio::pin!(read);
        tokio::select! {
            r = &mut read => r,
            _ = signals.recv() => {
                interrupted = true;
                output::error_message("interrupted: delivering what was read, then stopping (Ctrl-C again to quit now)");
                Ok(0)
            }
        }
    };
    let lines = shared.lines.load(Ordering::Relaxed);
    let stats = tokio::select! {
        s = ix.close() => s,
        _ = signals.recv() => {
            output::error_message("interrupted again: quitting; the checkpoint covers what was acknowledged");
            reporter.abort();
            final_checkpoint(&ix, &shared, a.resume.as_deref());
            return Ok(INTERRUPTED);
        }
    };
    let queued = match shared.queue_sink.get() {
        Some(q) => Some(q.close().await),
        None => None,
    };
    reporter.abort();
    let checkpoint = final_checkpoint(&ix, &shared, a.resume.as_deref());
    let drained = match &queue {
        Some(q) if !interrupted => Some(drain(q, &client, delivery, a.queue.drain_timeout).await),
        _ => None,
    };
    clear_progress_line();

    let elapsed = started.elapsed();
    let (dead_count, worst) = match shared.dead.lock() {
        Ok(d) => (d.count, d.worst),
        Err(_) => (0, None),
    };
    let left_queued = left_queued(queued.as_ref(), drained.as_ref());
    let summary = Summary {
        input: &a.input,
        lines,
        stats: &stats,
        malformed: shared.malformed.load(Ordering::Relaxed),
        dead_letters: dead_count,
        checkpoint: a.resume.as_ref().map(|_| checkpoint),
        elapsed_ms: output::ms(elapsed),
        docs_per_sec: if elapsed.as_secs_f64() > 0.0 {
            (stats.indexed as f64 / elapsed.as_secs_f64()).round()
        } else {
            0.0
        },
        interrupted,
        queue: queued.map(|q| QueueSummary {
            sink: q,
            delivery: drained.clone().and_then(Result::ok),
        }),
    };
    if let Some(Err(e)) = &drained {
        output::error_message(format!("delivering from the queue failed: {e}"));
    }
    output::stdout(output::to_json_line(&summary).as_bytes());
    if let Err(e) = read_result {
        output::error_message(e);
        return Ok(exit::USAGE);
    }
    Ok(if interrupted {
        INTERRUPTED
    } else if let Some(w) = worst {
        match w {
            "auth" => exit::AUTH,
            "unreachable" if stats.indexed == 0 => exit::NO_NODE,
            _ => exit::HTTP_ERROR,
        }
    } else if dead_count > 0 || stats.sink_errors > 0 {
        exit::HTTP_ERROR
    } else if left_queued {
        exit::QUEUED
    } else {
        exit::SUCCESS
    })
}

/// Whether messages are left in the queue after the drain ([`exit::QUEUED`]): the drain's
/// `left` (the queue's backlog; a shared Redis queue counts other producers' messages too),
/// or, when the drain failed, whether this run queued anything.
fn left_queued(
    queued: Option<&searchwire_bulk::QueueSinkReport>,
    drained: Option<&Result<searchwire_bulk::DeliveryReport, String>>,
) -> bool {
    match (queued, drained) {
        (_, Some(Ok(r))) => r.left > 0,
        (Some(q), _) => q.queued + q.duplicates > 0,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use searchwire_bulk::{DeliveryReport, QueueSinkReport};

    #[test]
    fn messages_left_after_the_drain_are_exit_code_6() {
        assert_eq!(exit::QUEUED, 6, "documented in README and --help");
        let queued = QueueSinkReport {
            queued: 3,
            ..Default::default()
        };
        let left = |n| {
            Ok(DeliveryReport {
                left: n,
                ..Default::default()
            })
        };
        assert!(left_queued(Some(&queued), Some(&left(3))));
        assert!(!left_queued(Some(&queued), Some(&left(0))), "all delivered");
        assert!(
            left_queued(Some(&queued), Some(&Err("redis gone".into()))),
            "the drain failed after this run queued"
        );
        assert!(!left_queued(
            Some(&QueueSinkReport::default()),
            Some(&Err("x".into()))
        ));
        assert!(left_queued(Some(&queued), None), "interrupted: no drain");
        assert!(!left_queued(None, None), "no queue");
    }
}
