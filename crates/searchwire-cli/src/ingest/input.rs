//! Reading the input: chunks of the file or stdin read on a blocking thread, lines cut out
//! of them without a copy, parsed, and added to the indexer (with the queue's
//! back-pressure), each record tracked for the checkpoint.

use std::io::Read;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use searchwire_bulk::{AddError, BulkIndexer};

use super::checkpoint::Pending;
use super::dead::malformed;
use super::Shared;
use crate::ingest_parse::{trim_line, Line, LineParser, ParseSpec};
use crate::output;

/// How much of the input is read at once: lines are cut out of this buffer without a copy.
const READ_CHUNK: usize = 256 * 1024;

/// Reads the input from `offset` (line `line`), adding each record to the indexer.
/// Returns the number of lines read.
pub(super) async fn read_input(
    input: Input,
    spec: &ParseSpec,
    ix: &BulkIndexer,
    shared: &Shared,
    mut offset: u64,
    mut line: u64,
) -> Result<u64, String> {
    let mut input = Some(input);
    // Lines are split off this buffer as `Bytes` that share it: `fill` reads into it, and a
    // document's bytes are copied from it only into the request body (see `fill`).
    let mut chunk = Bytes::new();
    let mut scanned = 0;
    let mut eof = false;
    let mut lines_read = 0u64;
    let mut parser = LineParser::new(spec);
    loop {
        if shared.fatal.load(Ordering::Relaxed) {
            output::error_message("stopping: the cluster rejected the credentials");
            break;
        }
        let buf = match memchr::memchr(b'\n', &chunk[scanned..]) {
            Some(i) => {
                let n = scanned + i + 1;
                scanned = 0;
                chunk.split_to(n)
            }
            None if eof && chunk.is_empty() => break,
            None if eof => {
                scanned = 0;
                std::mem::take(&mut chunk)
            }
            None => {
                scanned = chunk.len();
                let (r, filled, n) = fill(input.take(), chunk).await;
                input = r;
                chunk = filled;
                let n =
                    n.map_err(|e| format!("cannot read the input at line {}: {e}", line + 1))?;
                eof = n == 0;
                continue;
            }
        };
        let n = buf.len();
        offset += n as u64;
        line += 1;
        lines_read += 1;
        shared.lines.store(lines_read, Ordering::Relaxed);
        let text = buf.slice_ref(trim_line(&buf));
        let record = match parser.feed(&text, line) {
            // Blank lines finish immediately.
            Line::Blank => {
                push_pending(shared, None, line, offset, line);
                continue;
            }
            Line::Pending => continue,
            Line::Record(record) => record,
        };
        match record {
            Ok((action, start_line)) => match add(ix, shared, action).await {
                Ok(seq) => push_pending(shared, Some(seq), start_line, offset, line),
                Err(AddError::Invalid(reason)) => {
                    malformed(
                        shared,
                        start_line,
                        &text,
                        &format!("invalid action: {reason}"),
                    );
                    push_pending(shared, None, start_line, offset, line);
                }
                Err(e) => return Err(format!("cannot add line {start_line}: {e}")),
            },
            Err(reason) => {
                malformed(shared, line, &text, &reason);
                push_pending(shared, None, line, offset, line);
            }
        }
    }
    if let Some(start) = parser.finish() {
        malformed(
            shared,
            start,
            b"",
            "the input ends after an action line without its source line",
        );
        push_pending(shared, None, start, offset, line);
    }
    Ok(lines_read)
}

/// The input: a file, or stdin.
pub(super) enum Input {
    File(std::fs::File),
    Stdin(std::io::Stdin),
}

/// One read of the input into the buffer holding the partial line `chunk`, on a blocking
/// thread (a file or pipe read blocks; `tokio::fs` and `tokio::io::stdin` would read into
/// a buffer of their own and copy from it). Returns the input and the buffer for the next
/// read.
///
/// The lines cut from the buffer are sent as they are (the request body is their only
/// copy), so they keep it alive while their batch is in flight: each read fills a fresh
/// buffer, after the partial line copied to its front. A file is read with `read_to_end`
/// (up to `READ_CHUNK` bytes), which reads into the buffer's free capacity without zeroing
/// it first; stdin is read once into zeroed capacity, as `read_to_end` would wait for
/// `READ_CHUNK` bytes of a slow pipe before the lines already there could be sent.
async fn fill(
    input: Option<Input>,
    partial: Bytes,
) -> (Option<Input>, Bytes, std::io::Result<usize>) {
    let Some(mut input) = input else {
        return (None, partial, Ok(0));
    };
    let joined = tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(partial.len() + READ_CHUNK);
        buf.extend_from_slice(&partial);
        let n = loop {
            let r = match &mut input {
                Input::File(f) => f.take(READ_CHUNK as u64).read_to_end(&mut buf),
                Input::Stdin(s) => {
                    let len = buf.len();
                    buf.resize(len + READ_CHUNK, 0);
                    let r = s.read(&mut buf[len..]);
                    buf.truncate(len + *r.as_ref().unwrap_or(&0));
                    r
                }
            };
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        (Some(input), Bytes::from(buf), n)
    })
    .await;
    match joined {
        Ok(r) => r,
        Err(e) => (
            None,
            Bytes::new(),
            Err(std::io::Error::other(format!(
                "the input reader stopped: {e}"
            ))),
        ),
    }
}

fn push_pending(
    shared: &Shared,
    seq: Option<u64>,
    start_line: u64,
    end_offset: u64,
    end_line: u64,
) {
    if let Ok(mut t) = shared.tracker.lock() {
        t.pending.push_back(Pending {
            seq,
            start_line,
            end_offset,
            end_line,
        });
    }
}

/// Adds after waiting for room in the queue's appender (back-pressure while everything is
/// being queued).
async fn add(
    ix: &BulkIndexer,
    shared: &Shared,
    action: searchwire_bulk::Action,
) -> Result<u64, AddError> {
    if let Some(q) = shared.queue_sink.get() {
        q.room().await;
    }
    ix.add(action).await
}
