//! The `_bulk` store: NDJSON parsed, documents stored per index and id, `create` honoured,
//! scripted item faults and a reset after the batch was applied.

mod support;

use searchwire_fake::{BulkFault, FakeBulk, FakeCluster};
use support::{Conn, TestResult};

async fn bulk(conn: &mut Conn, query: &str, body: &str) -> std::io::Result<support::Response> {
    let head = format!(
        "POST /_bulk{query} HTTP/1.1\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.send(format!("{head}{body}").as_bytes()).await?;
    conn.read_response().await
}

#[tokio::test]
async fn stores_documents_and_answers_create_conflicts_per_item() -> TestResult {
    let cluster = FakeCluster::start(2).await?;
    let store = FakeBulk::new();
    store.install(&cluster);
    let body = "{\"create\":{\"_index\":\"i\",\"_id\":\"1\"}}\n{\"a\":1}\n\
                {\"index\":{\"_index\":\"i\",\"_id\":\"2\"}}\n{\"a\":2}\n";
    let r = bulk(&mut Conn::open(cluster.node(0)).await?, "", body).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["errors"], false);
    assert_eq!(r.json()["items"][0]["create"]["status"], 201);
    // The other node shares the store: the same create conflicts there.
    let r = bulk(
        &mut Conn::open(cluster.node(1)).await?,
        "?filter_path=items.*.status,items.*.error.type",
        body,
    )
    .await?;
    let items = r.json()["items"].clone();
    assert_eq!(items[0]["create"]["status"], 409);
    assert_eq!(
        items[0]["create"]["error"]["type"],
        "version_conflict_engine_exception"
    );
    assert_eq!(items[1]["index"]["status"], 200);
    assert!(
        items[1]["index"].get("_index").is_none(),
        "filter_path reduces items"
    );
    assert_eq!(store.count("i"), 2);
    assert_eq!((store.writes("i", "1"), store.writes("i", "2")), (1, 2));
    assert_eq!(store.batch_sizes(), vec![2, 2]);
    Ok(())
}

#[tokio::test]
async fn scripted_faults_and_a_reset_after_applying() -> TestResult {
    let cluster = FakeCluster::start(1).await?;
    let store = FakeBulk::new();
    store.install(&cluster);
    store.item_faults([BulkFault::Throttle, BulkFault::Ok, BulkFault::Unavailable]);
    let body: String = (0..3)
        .map(|i| format!("{{\"index\":{{\"_index\":\"f\",\"_id\":\"{i}\"}}}}\n{{}}\n"))
        .collect();
    let r = bulk(&mut Conn::open(cluster.node(0)).await?, "", &body).await?;
    let statuses: Vec<u64> = (0..3)
        .map(|i| {
            r.json()["items"][i]["index"]["status"]
                .as_u64()
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(statuses, [429, 201, 503]);
    assert_eq!(store.ids("f"), ["1"]);

    store.reset_after_apply(1);
    let mut conn = Conn::open(cluster.node(0)).await?;
    assert!(
        bulk(&mut conn, "", &body).await.is_err(),
        "no answer: reset"
    );
    assert_eq!(store.count("f"), 3, "…but the batch was applied");
    Ok(())
}
