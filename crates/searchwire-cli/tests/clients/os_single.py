"""opensearch-py's single-document calls through `searchwire relay`, unmodified.

Usage: os_single.py LIVE_URL DOWN_URL INDEX

LIVE_URL is a relay in front of a real cluster, DOWN_URL a relay whose cluster cannot be
reached. Prints one JSON object: what each call returned (its `result`, or the status and
error type of the exception it raised).
"""

import json
import sys

from opensearchpy import OpenSearch, exceptions


def outcome(call):
    try:
        r = call()
        return {"result": r.get("result"), "_id": r.get("_id"), "_version": r.get("_version")}
    except exceptions.TransportError as e:
        return {"status": e.status_code, "error": e.error}


def main():
    live_url, down_url, index = sys.argv[1], sys.argv[2], sys.argv[3]
    out = {}
    for name, url in [("live", live_url), ("down", down_url)]:
        c = OpenSearch(hosts=[url], http_compress=False, timeout=60, max_retries=0)
        out[name] = {
            "index": outcome(lambda: c.index(index=index, id=name + "-1", body={"n": 1})),
            "index_auto_id": outcome(lambda: c.index(index=index, body={"n": 2})),
            "create": outcome(lambda: c.create(index=index, id=name + "-2", body={"n": 3})),
            "create_again": outcome(lambda: c.create(index=index, id=name + "-2", body={"n": 3})),
            "update": outcome(
                lambda: c.update(index=index, id=name + "-1", body={"doc": {"n": 4}})
            ),
            "delete": outcome(lambda: c.delete(index=index, id=name + "-2")),
            "delete_missing": outcome(lambda: c.delete(index=index, id=name + "-missing")),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
