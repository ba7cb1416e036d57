"""opensearch-py, unmodified, as an application uses it, pointed at one endpoint.

Usage: opensearch_py_client.py MODE URL INDEX

MODE is how the documents are written:
  bulk            helpers.bulk over the whole document stream, http_compress=True
  streaming_bulk  helpers.streaming_bulk, http_compress=True
  parallel_bulk   helpers.parallel_bulk (its 4 threads), http_compress=True
  single          one request per document, alternating client.index (op_type=create) and
                  client.create, http_compress=True
  sniff           sniff_on_start=True, then helpers.streaming_bulk: after sniffing, the
                  client must still be talking to URL only

Every mode first makes the ordinary calls an application makes at start-up: info(), an
index template for INDEX (3 shards, 1 replica, `id` keyword, `n` long) and the index
itself. It then writes documents {"id": "doc-NNNNNN", "n": N, "msg": ...} with `_id` =
"doc-NNNNNN" and the `create` action (see compat/README.md for why not `index`), about RATE (env COMPAT_RATE, default 100) per second, until a line "stop"
arrives on stdin (or 20,000 documents, or 300 s). When the client has answered for every
document it prints "written" and waits for a line "search" on stdin; then it refreshes the
index, searches it and counts it, prints a JSON summary as its last line, and exits 0.

The driving test (crates/searchwire-cli/tests/real_dropin_clients.rs) reads stdout:
  progress N     N documents handed to the client library so far
  acked ID       the client library reported the document ID as written
  written        every document has its answer; waiting for "search"
  {...}          the summary: the client's version, what each ordinary call answered
                 (a string starting with "error:" when it failed), errors, sniffed hosts
A call that fails is reported, not raised, so one missing route does not hide the rest.
"""
import json
import os
import sys
import threading
import time

import opensearchpy
from opensearchpy import OpenSearch, helpers

MAX_DOCS = 20_000
MAX_SECONDS = 300
# The one setting changed from the client's defaults: its 10 s read timeout is shorter than
# creating an index takes on the test clusters (six clients creating indices at once on two
# busy cores, each waiting for its shards: more than 10 s seen, directly or through the relay).
TIMEOUT = 60

out_lock = threading.Lock()


def emit(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def describe(e):
    """An exception as a short string, with the HTTP status and body when there is one."""
    status = getattr(e, "status_code", None)
    info = getattr(e, "info", None)
    text = "%s: %s" % (type(e).__name__, e)
    if status is not None:
        text = "%s (status %s, body %s)" % (text, status, json.dumps(info, default=str)[:400] if info else "")
    return "error: " + text[:800]


def attempt(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported in the summary
        return describe(e)


class Control:
    """The lines the driving test sends on stdin."""

    def __init__(self):
        self.stop = threading.Event()
        self.search = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in sys.stdin:
            word = line.strip()
            if word == "stop":
                self.stop.set()
            elif word == "search":
                self.search.set()
        # stdin closed: the test is gone; stop writing and do not wait for it.
        self.stop.set()
        self.search.set()


def documents(index, control, rate, op_type="create"):
    """Paced actions with ids doc-000000...; records how many were handed over."""
    start = time.monotonic()
    n = 0
    while not control.stop.is_set() and n < MAX_DOCS and time.monotonic() - start < MAX_SECONDS:
        doc_id = "doc-%06d" % n
        yield {
            "_op_type": op_type,
            "_index": index,
            "_id": doc_id,
            "_source": {"id": doc_id, "n": n, "msg": "small document %d" % n},
        }
        n += 1
        if n % 50 == 0:
            emit("progress %d" % n)
        # Pace by the clock, not by a fixed sleep, so slow answers do not lower the total.
        ahead = start + n / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    emit("progress %d" % n)


def write_single(client, index, control, rate):
    """client.index (op_type=create) for even documents, client.create for odd ones."""
    errors = []
    for action in documents(index, control, rate):
        doc_id, body = action["_id"], action["_source"]
        try:
            if body["n"] % 2 == 0:
                client.index(index=index, id=doc_id, body=body, op_type="create")
            else:
                client.create(index=index, id=doc_id, body=body)
            emit("acked " + doc_id)
        except Exception as e:  # noqa: BLE001
            errors.append({"id": doc_id, "error": describe(e)})
    return errors


def write_per_item(results):
    """streaming_bulk / parallel_bulk results: (ok, item) per document; returns the errors."""
    errors = []
    for ok, item in results:
        result = next(iter(item.values()))
        if ok:
            emit("acked " + result["_id"])
        else:
            errors.append(item)
    return errors


def main():
    mode, url, index = sys.argv[1], sys.argv[2], sys.argv[3]
    rate = float(os.environ.get("COMPAT_RATE", "100"))
    control = Control()
    summary = {"client": "opensearch-py " + opensearchpy.__versionstr__, "mode": mode}

    if mode == "sniff":
        try:
            client = OpenSearch(hosts=[url], sniff_on_start=True, timeout=TIMEOUT)
            summary["sniff"] = "ok"
        except Exception as e:  # noqa: BLE001
            # Reported; the rest runs on a client that does not sniff.
            summary["sniff"] = describe(e)
            client = OpenSearch(hosts=[url], timeout=TIMEOUT)
        summary["hosts"] = [
            c.host for c in client.transport.connection_pool.connections
        ]
    else:
        client = OpenSearch(hosts=[url], http_compress=True, timeout=TIMEOUT)

    info = attempt(client.info)
    summary["info"] = info if isinstance(info, str) else info.get("version", {}).get("number")
    summary["template"] = attempt(
        lambda: client.indices.put_index_template(
            name=index + "-template",
            body={
                "index_patterns": [index],
                "template": {
                    "settings": {"number_of_shards": 3, "number_of_replicas": 1},
                    "mappings": {"properties": {"id": {"type": "keyword"}, "n": {"type": "long"}}},
                },
            },
        ).get("acknowledged")
    )
    summary["create_index"] = attempt(lambda: client.indices.create(index=index).get("acknowledged"))

    errors = []
    try:
        if mode == "bulk":
            acked_ids = []

            def recorded():
                for action in documents(index, control, rate):
                    acked_ids.append(action["_id"])
                    yield action

            # The default raise_on_error=True: any failed item raises BulkIndexError.
            ok, errs = helpers.bulk(client, recorded())
            for doc_id in acked_ids:
                emit("acked " + doc_id)
            summary["bulk_ok"] = ok
            errors = errs
        elif mode in ("streaming_bulk", "sniff"):
            errors = write_per_item(
                helpers.streaming_bulk(client, documents(index, control, rate), raise_on_error=False)
            )
        elif mode == "parallel_bulk":
            errors = write_per_item(
                helpers.parallel_bulk(client, documents(index, control, rate), raise_on_error=False)
            )
        elif mode == "single":
            errors = write_single(client, index, control, rate)
        else:
            raise SystemExit("unknown mode " + mode)
    except Exception as e:  # noqa: BLE001
        errors.append(describe(e))
    summary["error_count"] = len(errors)
    summary["errors"] = [str(e)[:500] for e in errors[:5]]

    emit("written")
    control.search.wait()
    summary["refresh"] = attempt(lambda: bool(client.indices.refresh(index=index)))
    summary["search_total"] = attempt(
        lambda: client.search(
            index=index, body={"size": 0, "track_total_hits": True, "query": {"match_all": {}}}
        )["hits"]["total"]["value"]
    )
    summary["count"] = attempt(lambda: client.count(index=index)["count"])
    emit(json.dumps(summary))


if __name__ == "__main__":
    main()
