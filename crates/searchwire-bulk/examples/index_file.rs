//! Bulk-index a file: every line of an NDJSON file becomes one `index` action, batched,
//! sent with several requests in flight, each item's answer read and failed items retried
//! by class; what fails for good is printed as a dead letter.
//!
//! ```sh
//! cargo run -p searchwire-bulk --example index_file -- http://localhost:9200 logs docs.ndjson
//! cargo run -p searchwire-bulk --example index_file -- --fake   # an in-process fake cluster
//! ```
//!
//! Ids: an action without `_id` gets a UUIDv7 in `add`, before its first send, so a retry
//! after a reset or timeout cannot write the document twice. `add` waits while the
//! indexer's buffers are full (back-pressure), so a file of any size runs in bounded
//! memory. `close` sends what is left and returns the final counts. For production use,
//! `searchwire ingest` does the same with resumable checkpoints and a dead-letter file.

use std::io::BufRead;
use std::path::Path;

use searchwire::Client;
use searchwire_bulk::{Action, BulkIndexer, FailedItem, SinkError, Stats};

/// Indexes every non-empty line of `path` (one JSON document each) into `index`.
pub async fn index_file(
    urls: &[String],
    index: &str,
    path: &Path,
) -> Result<Stats, Box<dyn std::error::Error>> {
    let client = Client::builder().nodes(urls.iter().cloned()).build()?;
    let indexer = BulkIndexer::builder(client)
        .dead_letter_sink(|item: &FailedItem| -> Result<(), SinkError> {
            eprintln!(
                "dead letter: {}",
                String::from_utf8_lossy(&item.to_json_line())
            );
            Ok(())
        })
        .build()?;
    let index: std::sync::Arc<str> = index.into();
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    for line in file.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        indexer
            .add(Action::index(index.clone()).source(line))
            .await?;
    }
    Ok(indexer.close().await)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let stats = match args.as_slice() {
        [flag] if flag == "--fake" => {
            let cluster = searchwire_fake::FakeCluster::start(3).await?;
            let bulk = searchwire_fake::FakeBulk::new();
            bulk.install(&cluster);
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("docs.ndjson");
            let docs: String = (0..1000)
                .map(|i| format!("{{\"message\":\"event {i}\"}}\n"))
                .collect();
            std::fs::write(&path, docs)?;
            let stats = index_file(&cluster.urls(), "logs", &path).await?;
            println!(
                "the fake cluster holds {} documents in logs",
                bulk.count("logs")
            );
            stats
        }
        [url, index, path] => {
            let urls: Vec<String> = url.split(',').map(str::to_string).collect();
            index_file(&urls, index, Path::new(path)).await?
        }
        _ => {
            eprintln!("usage: index_file URL[,URL...] INDEX FILE | index_file --fake");
            std::process::exit(2);
        }
    };
    println!(
        "{} indexed, {} dead letters",
        stats.indexed, stats.dead_lettered
    );
    Ok(())
}
