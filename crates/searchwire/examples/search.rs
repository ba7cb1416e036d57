//! Search with a deadline: one `_search` request that must be answered within 2 s overall,
//! with each attempt bounded at 500 ms, retried on another node when one fails.
//!
//! ```sh
//! cargo run -p searchwire --example search -- http://localhost:9200 logs error
//! cargo run -p searchwire --example search -- --fake          # an in-process fake cluster
//! ```
//!
//! The deadline is the request's whole budget: attempts, backoff sleeps and failovers all
//! count against it, and when it passes the attempt in flight is cancelled and the error's
//! kind is `DeadlineExceeded`. The attempt timeout bounds one attempt; a node that does not
//! answer within it is checked and the request fails over. Idempotent requests (a search
//! is) are retried on another node; a write would only be retried when it certainly was not
//! processed.

use std::time::Duration;

use searchwire::{Client, ErrorKind, Request};
use serde_json::{json, Value};

/// The request's whole budget.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// One attempt's budget.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);

/// Searches `index` for documents whose `message` matches `text`, within [`DEADLINE`].
/// Returns the hits, or the error with a message that says what went wrong and what to do.
pub async fn search(
    urls: &[String],
    index: &str,
    text: &str,
) -> Result<Vec<Value>, searchwire::Error> {
    let client = Client::builder().nodes(urls.iter().cloned()).build()?;
    let request = Request::post(format!("/{index}/_search"))
        .json(&json!({ "query": { "match": { "message": text } }, "size": 10 }))
        .timeout(DEADLINE)
        .attempt_timeout(ATTEMPT_TIMEOUT);
    let response = client.send(request).await?;
    let body: Value = response.json()?;
    Ok(body["hits"]["hits"].as_array().cloned().unwrap_or_default())
}

/// An in-process fake cluster of three nodes whose `/logs/_search` answers one hit; node 2
/// is down, so some searches fail over to another node.
pub async fn fake_cluster() -> std::io::Result<searchwire_fake::FakeCluster> {
    use searchwire_fake::{Behavior, FakeCluster, Match};
    let cluster = FakeCluster::start(3).await?;
    let answer =
        json!({ "hits": { "hits": [ { "_id": "1", "_source": { "message": "an error" } } ] } });
    for node in cluster.nodes() {
        node.on(
            Match::Path("/logs/_search".into()),
            Behavior::json(200, answer.clone()),
        );
    }
    cluster.node(2).kill().await;
    Ok(cluster)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let _cluster;
    let (urls, index, text) = match args.as_slice() {
        [flag] if flag == "--fake" => {
            let cluster = fake_cluster().await?;
            let urls = cluster.urls();
            _cluster = cluster;
            (urls, "logs".to_string(), "error".to_string())
        }
        [url, index, text] => (
            url.split(',').map(str::to_string).collect(),
            index.clone(),
            text.clone(),
        ),
        _ => {
            eprintln!("usage: search URL[,URL...] INDEX TEXT | search --fake");
            std::process::exit(2);
        }
    };
    match search(&urls, &index, &text).await {
        Ok(hits) => {
            println!("{} hits", hits.len());
            for hit in hits {
                println!("{hit}");
            }
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::DeadlineExceeded => {
            eprintln!("no answer within {DEADLINE:?}: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("search failed: {e}");
            std::process::exit(1);
        }
    }
}
