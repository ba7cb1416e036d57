//! The `--resume` checkpoint: which input records are finished (written, dead-lettered, or
//! durably queued), the offset below which every one is, and its atomic file.

use std::io::Write;
use std::path::{Path, PathBuf};

use searchwire_bulk::BulkIndexer;
use serde::{Deserialize, Serialize};

use super::Shared;
use crate::output;

/// The checkpoint file: everything before `offset` (line `line`) is finished.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Checkpoint {
    pub(super) input: String,
    pub(super) offset: u64,
    pub(super) line: u64,
}

/// One input record in flight: its end offset and line, and the action's sequence number
/// (`None` for malformed lines, finished as soon as they are dead-lettered).
pub(super) struct Pending {
    pub(super) seq: Option<u64>,
    pub(super) start_line: u64,
    pub(super) end_offset: u64,
    pub(super) end_line: u64,
}

/// Input records not known to be finished, in input order, and the checkpoint reached.
pub(super) struct Tracker {
    pub(super) pending: std::collections::VecDeque<Pending>,
    pub(super) done: Checkpoint,
}

impl Tracker {
    /// Advances the checkpoint over the finished prefix; returns whether it moved.
    pub(super) fn advance(&mut self, acknowledged_below: u64) -> bool {
        let mut moved = false;
        while let Some(p) = self.pending.front() {
            if p.seq.is_some_and(|s| s >= acknowledged_below) {
                break;
            }
            self.done.offset = p.end_offset;
            self.done.line = p.end_line;
            self.pending.pop_front();
            moved = true;
        }
        moved
    }

    pub(super) fn line_of(&self, seq: u64) -> Option<u64> {
        self.pending
            .iter()
            .find(|p| p.seq == Some(seq))
            .map(|p| p.start_line)
    }
}

pub(super) fn read_checkpoint(path: &Path) -> Result<Option<Checkpoint>, String> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            format!(
                "the checkpoint {} is not a searchwire checkpoint ({e}); delete it to start over",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "cannot read the checkpoint {}: {e}",
            path.display()
        )),
    }
}

/// Writes the checkpoint atomically (temporary file, fsync, rename).
pub(super) fn write_checkpoint(path: &Path, cp: &Checkpoint) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(output::to_json_line(cp).as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Advances and writes the checkpoint (dead letters flushed first); returns the offset.
pub(super) fn final_checkpoint(ix: &BulkIndexer, shared: &Shared, path: Option<&Path>) -> u64 {
    checkpoint_now(ix, shared, path, true).unwrap_or(0)
}

pub(super) fn checkpoint_now(
    ix: &BulkIndexer,
    shared: &Shared,
    path: Option<&Path>,
    force: bool,
) -> Option<u64> {
    let below = match shared.queue_sink.get() {
        Some(q) => q.acknowledged_below(ix),
        None => ix.acknowledged_below(),
    };
    let (moved, cp) = {
        let mut t = shared.tracker.lock().ok()?;
        let moved = t.advance(below);
        (
            moved,
            Checkpoint {
                input: t.done.input.clone(),
                offset: t.done.offset,
                line: t.done.line,
            },
        )
    };
    if let Some(path) = path {
        if moved || force {
            // The dead letters below the checkpoint must be on disk before it moves.
            if let Ok(mut d) = shared.dead.lock() {
                if let Err(e) = d.sync() {
                    output::error_message(format!(
                        "cannot write the dead letters: {e}; checkpoint not advanced"
                    ));
                    return None;
                }
            }
            if let Err(e) = write_checkpoint(path, &cp) {
                output::error_message(format!(
                    "cannot write the checkpoint {}: {e}",
                    path.display()
                ));
            }
        }
    }
    Some(cp.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_advances_over_the_finished_prefix_only() {
        let mut t = Tracker {
            pending: Default::default(),
            done: Checkpoint::default(),
        };
        for (seq, off) in [(Some(0), 10), (None, 11), (Some(1), 20), (Some(2), 30)] {
            t.pending.push_back(Pending {
                seq,
                start_line: off,
                end_offset: off,
                end_line: off,
            });
        }
        assert!(!t.advance(0));
        assert!(t.advance(1));
        assert_eq!(
            t.done.offset, 11,
            "the malformed line after seq 0 is finished too"
        );
        assert!(t.advance(3));
        assert_eq!(t.done.offset, 30);
    }
}
