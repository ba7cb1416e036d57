//! Reading the input: chunks of the file or stdin read on a blocking thread, lines cut out
//! of them without a copy, parsed, and added to the indexer (with the queue's
//! back-pressure), each record tracked for the checkpoint.

use std::collections::VecDeque;
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

/// How much of stdin is read at once. A pipe returns at most its capacity (64 KiB on Linux)
/// per read, and the lines cut from a buffer keep all of it alive while they are in flight:
/// with [`READ_CHUNK`] buffers, every 64 KiB of pending lines from a pipe pinned 256 KiB,
/// up to 4× the indexer's pending-bytes bound (peak RSS 72–79 MiB for 3 GB into `ingest -`).
const STDIN_CHUNK: usize = 64 * 1024;

/// The most free read buffers [`ReadBuffers`] keeps besides the one it hands out: free
/// buffers beyond these are let go, so reuse never holds more than this much memory that
/// the lines in flight do not already hold.
const SPARE_BUFFERS: usize = 2;

/// The most read buffers [`ReadBuffers`] watches for reuse. The lines of a buffer keep it
/// alive until their requests are answered, so the live buffers are about the indexer's
/// pending bytes over [`READ_CHUNK`] (~24 at the defaults); a buffer past this bound is
/// only no longer reused, never kept longer.
const WATCHED_BUFFERS: usize = 64;

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
    let mut buffers = ReadBuffers::default();
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
                let size = match &input {
                    Some(Input::Stdin(_)) => STDIN_CHUNK,
                    _ => READ_CHUNK,
                };
                let buf = buffers.take(chunk.len() + size);
                let (r, filled, n) = fill(input.take(), chunk, buf).await;
                input = r;
                buffers.watch(&filled);
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

/// The input's read buffers, reused once every line cut from them is dropped.
///
/// The lines cut from a buffer are sent as they are (the request body is their only copy),
/// so they keep it alive while their batch is in flight, and the next read needs another
/// buffer. A fresh 256 KiB allocation per read faulted its pages in anew on every read
/// (a quarter of `searchwire ingest`'s page faults at ~2 KB documents); instead, a handle
/// on each buffer is watched, and a read goes into the oldest buffer nothing else holds any
/// more (its requests were answered). A reused buffer keeps no old line alive: it is only
/// taken when its handle here is the last one.
#[derive(Default)]
struct ReadBuffers {
    /// Handles on whole read buffers, oldest first.
    watched: VecDeque<Bytes>,
}

impl ReadBuffers {
    /// An empty buffer with room for `capacity` bytes: the oldest free one, else a new one.
    /// At most [`SPARE_BUFFERS`] other free buffers stay watched; older free ones are let go.
    fn take(&mut self, capacity: usize) -> Vec<u8> {
        let mut free = 0;
        let mut reuse = None;
        self.watched.retain(|b| {
            if !b.is_unique() {
                return true;
            }
            free += 1;
            if free == 1 {
                reuse = Some(b.clone());
                return false;
            }
            free <= SPARE_BUFFERS + 1
        });
        // `reuse` is the only handle left once the list let go of it.
        if let Some(b) = reuse {
            if let Ok(m) = b.try_into_mut() {
                let mut v = Vec::from(m);
                v.clear();
                v.reserve(capacity);
                return v;
            }
        }
        Vec::with_capacity(capacity)
    }

    /// Watches a buffer just read into, for a later [`take`](Self::take).
    fn watch(&mut self, whole: &Bytes) {
        if whole.is_empty() {
            return;
        }
        if self.watched.len() >= WATCHED_BUFFERS {
            self.watched.pop_front();
        }
        self.watched.push_back(whole.clone());
    }
}

/// One read of the input into `buf` after the partial line `partial`, on a blocking thread
/// (a file or pipe read blocks; `tokio::fs` and `tokio::io::stdin` would read into a buffer
/// of their own and copy from it). Returns the input and the buffer for the next read.
///
/// `buf` is empty, from [`ReadBuffers`]; the partial line is copied to its front. A file is
/// read with `read_to_end` (up to `READ_CHUNK` bytes), which reads into the buffer's free
/// capacity without zeroing it first; stdin is read once into `STDIN_CHUNK` bytes of zeroed
/// capacity, as `read_to_end` would wait for a full buffer from a slow pipe before the lines
/// already there could be sent.
async fn fill(
    input: Option<Input>,
    partial: Bytes,
    mut buf: Vec<u8>,
) -> (Option<Input>, Bytes, std::io::Result<usize>) {
    let Some(mut input) = input else {
        return (None, partial, Ok(0));
    };
    let joined = tokio::task::spawn_blocking(move || {
        buf.extend_from_slice(&partial);
        drop(partial);
        let n = loop {
            let r = match &mut input {
                Input::File(f) => f.take(READ_CHUNK as u64).read_to_end(&mut buf),
                Input::Stdin(s) => {
                    let len = buf.len();
                    buf.resize(len + STDIN_CHUNK, 0);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer as `fill` returns it: `data` read into a buffer from `buffers`.
    fn read(buffers: &mut ReadBuffers, data: &[u8]) -> Bytes {
        let mut v = buffers.take(READ_CHUNK);
        v.extend_from_slice(data);
        let whole = Bytes::from(v);
        buffers.watch(&whole);
        whole
    }

    #[test]
    fn a_read_buffer_is_reused_once_its_lines_are_dropped() {
        let mut buffers = ReadBuffers::default();
        let mut chunk = read(&mut buffers, b"{\"a\":1}\n{\"b\":2}\n");
        let ptr = chunk.as_ptr();
        let first = chunk.split_to(8);
        let second = chunk.split_to(8);
        drop(chunk);
        // A line still in flight: the buffer is not reused.
        let other = buffers.take(READ_CHUNK);
        assert_ne!(other.as_ptr(), ptr);
        assert_eq!(&first[..], b"{\"a\":1}\n");
        drop(first);
        let other = buffers.take(READ_CHUNK);
        assert_ne!(other.as_ptr(), ptr);
        assert_eq!(&second[..], b"{\"b\":2}\n");
        // Every line answered: the next read goes into the same memory, empty.
        drop(second);
        let again = buffers.take(READ_CHUNK);
        assert_eq!(again.as_ptr(), ptr);
        assert!(again.is_empty());
        assert!(again.capacity() >= READ_CHUNK);
    }

    #[test]
    fn the_oldest_free_buffer_is_taken_and_the_watch_list_is_bounded() {
        let mut buffers = ReadBuffers::default();
        let held = read(&mut buffers, b"x\n");
        let free = read(&mut buffers, b"y\n");
        let free_ptr = free.as_ptr();
        drop(free);
        let taken = buffers.take(16);
        assert_eq!(taken.as_ptr(), free_ptr);
        assert_eq!(&held[..], b"x\n");
        // Free buffers beyond the spares are let go at the next take.
        let frees: Vec<Bytes> = (0..5).map(|_| read(&mut buffers, b"f\n")).collect();
        drop(frees);
        let _reused = buffers.take(16);
        let unique = buffers.watched.iter().filter(|b| b.is_unique()).count();
        assert_eq!(unique, SPARE_BUFFERS);
        let mut kept = Vec::new();
        for _ in 0..WATCHED_BUFFERS + 10 {
            kept.push(read(&mut buffers, b"z\n"));
        }
        assert_eq!(buffers.watched.len(), WATCHED_BUFFERS);
    }
}
