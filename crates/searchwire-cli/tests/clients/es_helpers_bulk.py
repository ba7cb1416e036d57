"""The official Elasticsearch Python client (elasticsearch 8.x) against `searchwire relay`.

Usage: es_helpers_bulk.py URL INDEX DOCS

Checks who it talks to the way the client does on every answer (X-Elastic-Product), pings,
reads GET /, then sends DOCS documents with helpers.streaming_bulk (create, ids
doc-000000...) and prints one JSON line: what GET / said, how many items were ok, how many
the relay queued, and the errors. The Rust test (tests/real_es.rs) checks the index.
"""
import json
import sys

import elasticsearch
from elasticsearch import Elasticsearch, helpers


def main():
    url, index, docs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # The client's own retries are off: every answer the relay gives must be good as it is.
    es = Elasticsearch(url, request_timeout=120, max_retries=0)
    pinged = es.ping()
    info = es.info().body

    def actions():
        for i in range(docs):
            doc_id = "doc-%06d" % i
            yield {
                "_op_type": "create",
                "_index": index,
                "_id": doc_id,
                "_source": {"id": doc_id, "n": i, "msg": "small document %d" % i},
            }

    ok = queued = 0
    errors = []
    for success, item in helpers.streaming_bulk(
        es, actions(), chunk_size=500, max_retries=0, raise_on_error=False
    ):
        result = next(iter(item.values()))
        if success:
            ok += 1
            if result.get("result") == "queued":
                queued += 1
        else:
            errors.append(item)
    print(
        json.dumps(
            {
                "client": elasticsearch.__versionstr__,
                "ping": pinged,
                "info": info,
                "ok": ok,
                "queued": queued,
                "error_count": len(errors),
                "errors": errors[:5],
            }
        )
    )


if __name__ == "__main__":
    main()
