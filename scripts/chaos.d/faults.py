#!/usr/bin/env python3
"""Network faults between searchwire and three real OpenSearch nodes, through Toxiproxy
(run by `scripts/chaos`; not meant to be run alone).

A proxy per node; every client (the read load, the relay) reaches the nodes only through
them, while the nodes talk to each other directly, so the cluster stays whole and only the
client's path to node 1 suffers. Each fault is applied to node 1 alone:

    partition    `timeout` toxic: connections open, nothing flows either way
    latency      `latency` 300 ms, jitter 250 ms on answers
    bandwidth    `bandwidth` 16 KB/s on answers
    reset_peer   `reset_peer` after 20 ms on 30 % of connections (mid-response)
    slow_close   `slow_close` 2 s on answers

Under the read load (`searchwire request --for SECS --concurrency 8 --rate 50`, default
settings) the goal is no failed read while two nodes are healthy; the p99 of each scenario is
reported (the goal for a partition is p99 <= 1 s). Under the relay's write load (4 senders of
50-document `create` requests) the goal is every acknowledged document in the index exactly
once (`_count`, and `_mget`: found with `_version` 1).

    faults.py BIN TOXIPROXY_URL NODE_URLS WORK_DIR SECS [SCENARIO...]

Prints a table and one JSON line per scenario; exits 1 when a read failed or a write goal
did not hold.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

BIN, TOXI, URLS, WORK, SECS = sys.argv[1:6]
SECS = int(SECS)
NODES = URLS.split(",")
ONLY = sys.argv[6:]
READ_INDEX = "chaos-reads"
WRITE_INDEX = "chaos-writes"
SENDERS = 4
BATCH = 50

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

FAULTS = {
    "baseline": None,
    "partition": {"type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}},
    "latency": {"type": "latency", "stream": "downstream",
                "attributes": {"latency": 300, "jitter": 250}},
    "bandwidth": {"type": "bandwidth", "stream": "downstream", "attributes": {"rate": 16}},
    "reset_peer": {"type": "reset_peer", "stream": "downstream", "toxicity": 0.3,
                   "attributes": {"timeout": 20}},
    "slow_close": {"type": "slow_close", "stream": "downstream", "attributes": {"delay": 2000}},
}


def http(method, url, body=None, timeout=30.0, ctype="application/json"):
    """(status, parsed JSON body or None); raises OSError-family errors when unanswered."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", ctype)
    try:
        with OPENER.open(req, timeout=timeout) as r:
            code, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, raw = e.code, e.read()
    try:
        return code, json.loads(raw) if raw else None
    except ValueError:
        return code, None


def must(method, url, body=None, timeout=60.0):
    code, resp = http(method, url, body, timeout)
    if code >= 300:
        raise SystemExit(f"chaos: {method} {url} answered {code}: {resp}")
    return resp


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_proxies():
    urls = []
    for i, node in enumerate(NODES, 1):
        upstream = node.split("://", 1)[1]
        listen = f"127.0.0.1:{free_port()}"
        http("DELETE", f"{TOXI}/proxies/n{i}")
        must("POST", f"{TOXI}/proxies",
             json.dumps({"name": f"n{i}", "listen": listen, "upstream": upstream}))
        urls.append(f"http://{listen}")
    return urls


def fault_on(name):
    spec = FAULTS[name]
    if spec is not None:
        must("POST", f"{TOXI}/proxies/n1/toxics", json.dumps({"name": name, **spec}))


def fault_off(name):
    if FAULTS[name] is not None:
        http("DELETE", f"{TOXI}/proxies/n1/toxics/{name}")


def setup_reads(node):
    http("DELETE", f"{node}/{READ_INDEX}")
    must("PUT", f"{node}/{READ_INDEX}", json.dumps(
        {"settings": {"number_of_shards": 3, "number_of_replicas": 1}}))
    body = "".join(json.dumps({"index": {"_id": str(i)}}) + "\n"
                   + json.dumps({"n": i, "msg": f"doc {i}"}) + "\n" for i in range(200))
    # The test cluster's write pool (1 thread, queue of 1) may answer items 429 while its
    # shards start: the same ids are sent again, a few times, before this counts as failed.
    for _ in range(10):
        code, resp = http("POST", f"{node}/{READ_INDEX}/_bulk?refresh=true", body,
                          ctype="application/x-ndjson")
        if code == 200 and not (resp or {}).get("errors"):
            break
        time.sleep(0.5)
    else:
        raise SystemExit(f"chaos: seeding {READ_INDEX} failed: {code}")
    must("GET", f"{node}/_cluster/health/{READ_INDEX}?wait_for_status=green&timeout=60s")


def read_load(proxies):
    """The summary of `searchwire request --for` with default settings."""
    r = subprocess.run(
        [BIN, "request", "GET", f"/{READ_INDEX}/_search?size=5", "--url", ",".join(proxies),
         "--for", f"{SECS}s", "--concurrency", "8", "--rate", "50", "--json"],
        capture_output=True, text=True, timeout=SECS + 120)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"chaos: the read load printed no summary: {r.stderr[-2000:]}")
    return json.loads(lines[-1])


class Relay:
    def __init__(self, proxies):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(WORK, "relay.log"), "ab")
        self.proc = subprocess.Popen(
            [BIN, "relay", "--listen", f"127.0.0.1:{self.port}", "--url", ",".join(proxies),
             "--queue-dir", os.path.join(WORK, "queue")],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        for _ in range(200):
            try:
                if http("GET", self.url + "/health/live", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("chaos: the relay did not start")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def drained(self, limit):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                code, h = http("GET", self.url + "/health/retry-queue", timeout=2)
                if isinstance(h, dict) and h.get("backlog") == 0:
                    return True
            except OSError:
                pass
            time.sleep(0.5)
        return False


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = []
        self.refused = {}
        self.unanswered = 0


def sender(k, relay, tally, stop, tag):
    seq = 0
    while not stop.is_set():
        ids = [f"{tag}-{k}-{seq + i:06d}" for i in range(BATCH)]
        seq += BATCH
        body = "".join(json.dumps({"create": {"_index": WRITE_INDEX, "_id": i}}) + "\n"
                       + json.dumps({"n": i}) + "\n" for i in ids)
        while True:  # until answered: these ids may have been written already
            try:
                code, resp = http("POST", relay.url + "/_bulk", body, timeout=120,
                                  ctype="application/x-ndjson")
            except OSError:
                with tally.lock:
                    tally.unanswered += 1
                time.sleep(0.1)
                continue
            if code >= 500 or not isinstance(resp, dict) or "items" not in resp:
                time.sleep(0.2)
                continue
            break
        with tally.lock:
            for item in resp["items"]:
                op = item.get("create", {})
                st = op.get("status")
                if st in (200, 201):
                    tally.acked.append(op.get("_id"))
                elif st == 409:
                    # Unique ids: an earlier attempt of this very body wrote it.
                    tally.acked.append(op.get("_id"))
                else:
                    tally.refused[st] = tally.refused.get(st, 0) + 1
        time.sleep(0.25)


def write_load(relay, name):
    tally, stop = Tally(), threading.Event()
    threads = [threading.Thread(target=sender, args=(k, relay, tally, stop, name))
               for k in range(SENDERS)]
    for t in threads:
        t.start()
    time.sleep(SECS)
    stop.set()
    for t in threads:
        t.join()
    return tally


def exactly_once(node, ids):
    """(found once with _version 1, missing or rewritten)."""
    bad = 0
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        resp = must("POST", f"{node}/{WRITE_INDEX}/_mget", json.dumps({"ids": chunk}))
        bad += sum(1 for d in resp["docs"] if not d.get("found") or d.get("_version") != 1)
    return len(ids) - bad, bad


def main():
    os.makedirs(WORK, exist_ok=True)
    node = NODES[0]
    http("POST", f"{TOXI}/reset")
    proxies = make_proxies()
    names = [n for n in FAULTS if not ONLY or n in ONLY]
    failed = False
    print(f"chaos: {len(NODES)} nodes behind Toxiproxy, faults on node 1, {SECS} s each",
          flush=True)

    setup_reads(node)
    print(f"\n  reads: searchwire request --for {SECS}s --concurrency 8 --rate 50 (defaults)")
    print(f"  {'scenario':12s} {'requests':>8s} {'ok':>6s} {'failed':>6s} "
          f"{'p50 ms':>8s} {'p99 ms':>9s} {'max ms':>9s}")
    for name in names:
        fault_on(name)
        try:
            s = read_load(proxies)
        finally:
            fault_off(name)
        lat = s.get("latency_ms", {})
        print(f"  {name:12s} {s['requests']:8d} {s['ok']:6d} {s['failed']:6d} "
              f"{lat.get('p50') or 0:8.1f} {lat.get('p99') or 0:9.1f} {lat.get('max') or 0:9.1f}",
              flush=True)
        print(json.dumps({"load": "read", "scenario": name, "requests": s["requests"],
                          "ok": s["ok"], "failed": s["failed"], "latency_ms": lat,
                          "errors": s.get("errors")}), flush=True)
        if s["failed"] > 0:
            failed = True

    http("DELETE", f"{node}/{WRITE_INDEX}")
    must("PUT", f"{node}/{WRITE_INDEX}", json.dumps(
        {"settings": {"number_of_shards": 3, "number_of_replicas": 1}}))
    must("GET", f"{node}/_cluster/health/{WRITE_INDEX}?wait_for_status=green&timeout=60s")
    relay = Relay(proxies)
    print(f"\n  writes: searchwire relay, {SENDERS} senders of {BATCH}-document creates")
    print(f"  {'scenario':12s} {'acked':>7s} {'in index once':>13s} {'missing/rewritten':>17s} "
          f"{'refused':>8s}")
    total = []
    try:
        for name in names:
            fault_on(name)
            try:
                tally = write_load(relay, name)
            finally:
                fault_off(name)
            if not relay.drained(120):
                print(f"  {name}: the relay's backlog did not drain within 120 s")
                failed = True
            must("POST", f"{node}/{WRITE_INDEX}/_refresh")
            once, bad = exactly_once(node, tally.acked)
            total += tally.acked
            print(f"  {name:12s} {len(tally.acked):7d} {once:13d} {bad:17d} "
                  f"{sum(tally.refused.values()):8d}", flush=True)
            print(json.dumps({"load": "write", "scenario": name, "acked": len(tally.acked),
                              "exactly_once": once, "bad": bad, "refused": tally.refused,
                              "unanswered_sends": tally.unanswered}), flush=True)
            if bad or tally.refused:
                failed = True
    finally:
        relay.stop()
    count = must("GET", f"{node}/{WRITE_INDEX}/_count")["count"]
    print(f"  _count {count}, acknowledged {len(total)} ({len(set(total))} distinct)")
    if count != len(set(total)) or len(total) != len(set(total)):
        failed = True
    print("\nchaos: " + ("FAILED" if failed else "every goal held"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
