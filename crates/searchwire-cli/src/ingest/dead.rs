//! Dead letters: the file (or stderr) they go to, the indexer's dead-letter sink (with each
//! item's input line number), and malformed input lines.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use searchwire_bulk::{FailedItem, SinkError};
use serde::Serialize;

use super::Shared;
use crate::output;

/// Where dead letters go: a file (buffered; flushed before each checkpoint) or stderr.
pub(super) struct DeadLetters {
    pub(super) file: Option<std::io::BufWriter<std::fs::File>>,
    pub(super) count: u64,
    /// The most telling request-level failure seen, for the exit code.
    pub(super) worst: Option<&'static str>,
}

impl DeadLetters {
    pub(super) fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.count += 1;
        match &mut self.file {
            Some(f) => f.write_all(line),
            None => {
                output::stderr(&format!("dead letter: {}", String::from_utf8_lossy(line)));
                Ok(())
            }
        }
    }

    pub(super) fn sync(&mut self) -> std::io::Result<()> {
        if let Some(f) = &mut self.file {
            f.flush()?;
            f.get_ref().sync_data()?;
        }
        Ok(())
    }
}

/// The dead-letter sink: one NDJSON line per item, with its input line number.
pub(super) fn sink(
    shared: Arc<Shared>,
) -> impl Fn(&FailedItem) -> Result<(), SinkError> + Send + Sync + 'static {
    move |item: &FailedItem| {
        let line = shared.tracker.lock().ok().and_then(|t| t.line_of(item.seq));
        let mut json = item.to_json_line();
        if let Some(n) = line {
            // {"line":N, ...the item...}
            let mut with_line = format!("{{\"line\":{n},").into_bytes();
            with_line.extend_from_slice(json.get(1..).unwrap_or_default());
            json = with_line;
        }
        let worst = match (item.reason.error_type.as_str(), item.reason.retry_class) {
            ("auth", _) => Some("auth"),
            (_, Some("connection")) => Some("unreachable"),
            _ => None,
        };
        let mut d = shared
            .dead
            .lock()
            .map_err(|_| SinkError("dead-letter writer poisoned".into()))?;
        if worst == Some("auth") {
            shared.fatal.store(true, Ordering::Relaxed);
        }
        if d.worst != Some("auth") {
            d.worst = worst.or(d.worst);
        }
        d.write(&json)
            .map_err(|e| SinkError(format!("cannot write the dead-letter file: {e}")))
    }
}

/// Reports a malformed line on stderr and writes it to the dead letters.
pub(super) fn malformed(shared: &Shared, line: u64, text: &[u8], reason: &str) {
    shared.malformed.fetch_add(1, Ordering::Relaxed);
    output::error_message(format!(
        "line {line}: {reason} (written to the dead letters)"
    ));
    #[derive(Serialize)]
    struct Bad<'a> {
        line: u64,
        error_type: &'static str,
        reason: &'a str,
        text: String,
    }
    let shown = String::from_utf8_lossy(&text[..text.len().min(64 * 1024)]).into_owned();
    let json = output::to_json_line(&Bad {
        line,
        error_type: "malformed_input",
        reason,
        text: shown,
    });
    if let Ok(mut d) = shared.dead.lock() {
        if let Err(e) = d.write(json.as_bytes()) {
            output::error_message(format!("cannot write the dead-letter file: {e}"));
        }
    }
}
