#!/usr/bin/env python3
"""The write-path demo (run by `scripts/demo`; not meant to be run alone).

Starts `searchwire relay` on an embedded queue in front of the three nodes, sends a steady
stream of `create` bulk requests through it (ids known up front), and meanwhile SIGKILLs and
restarts node 3, SIGKILLs the relay and restarts it at once on the same queue, SIGTERMs it and
restarts it, and stops every node with SIGSTOP for a while. Prints a timeline with
`/health/retry-queue` samples. At the end it waits for the backlog to drain, refreshes, and
checks that every acknowledged document is in the index exactly once (`_mget`: found,
`_version` 1; `_count` equals the number acknowledged). Exit 0 only if so.

    write_path.py BIN URLS CLUSTER_SCRIPT WORK_DIR

A request that got no answer (the relay was killed mid-request) acknowledged nothing, so the
generator sends the same body again until it is answered; a `create` answered 409 on such a
resend means the earlier attempt landed, which counts as acknowledged.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

BIN, URLS, CLUSTER, WORK = sys.argv[1:5]
NODES = URLS.split(",")
INDEX = "demo-writes"
THREADS = 4
BATCH = int(os.environ.get("DEMO_BATCH", "250"))
# Each sender thread sends one bulk request per PACE seconds.
PACE = float(os.environ.get("DEMO_PACE", "1.0"))
STALL_SECS = int(os.environ.get("DEMO_STALL_SECS", "15"))

# Loopback only: never go through an http_proxy from the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
T0 = time.monotonic()
PRINT = threading.Lock()


def now():
    return time.monotonic() - T0


def line(who, what):
    with PRINT:
        print(f"  {now():7.1f}s  {who:7s} {what}", flush=True)


def http(method, url, body=None, timeout=30.0, ctype="application/json"):
    """(status, parsed JSON body or None); raises OSError-family errors when unanswered."""
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", ctype)
    try:
        with OPENER.open(req, timeout=timeout) as r:
            raw = r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        code = e.code
    try:
        return code, json.loads(raw) if raw else None
    except ValueError:
        return code, None


def cluster(method, path, body=None):
    """A request to the first node that answers (the demo's own setup and checks)."""
    last = None
    for _ in range(60):
        for n in NODES:
            try:
                return http(method, n + path, body)
            except OSError as e:
                last = e
        time.sleep(1)
    raise SystemExit(f"demo: no OpenSearch node answered {method} {path}: {last}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.queue_dir = os.path.join(WORK, "queue")
        self.log = open(os.path.join(WORK, "relay.log"), "ab")
        self.proc = None

    def start(self):
        args = [BIN, "relay", "--url", URLS, "--listen", f"127.0.0.1:{self.port}",
                "--queue-dir", self.queue_dir]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log)
        t = time.monotonic()
        while time.monotonic() - t < 30:
            if self.proc.poll() is not None:
                raise SystemExit(f"demo: the relay exited with {self.proc.returncode} at start "
                                 f"(log: {self.log.name})")
            try:
                http("GET", self.url + "/health/live", timeout=1)
                return time.monotonic() - t
            except OSError:
                time.sleep(0.02)
        raise SystemExit(f"demo: the relay did not listen within 30 s (log: {self.log.name})")

    def signal(self, sig):
        """Sends sig to the relay we started and waits for it to exit; its exit status."""
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.acked = []          # ids answered 200/201 (indexed or queued)
        self.queued = 0          # of those, answered "queued"
        self.already = []        # ids answered 409 "document already exists" (see `sender`)
        self.resent_409 = 0      # of those, on a resend of an unanswered request
        self.failed = {}         # status -> count (anything else is a failure of the demo)
        self.failed_sample = None
        self.requests = 0
        self.resends = 0         # sends of a body again after no answer
        self.sent = 0            # distinct ids sent


def sender(k, relay, tally, stop):
    seq = 0
    next_at = time.monotonic()
    while not stop.is_set():
        ids = [f"t{k}-{seq + i:07d}" for i in range(BATCH)]
        seq += BATCH
        body = "".join(
            json.dumps({"create": {"_index": INDEX, "_id": i}}) + "\n"
            + json.dumps({"n": i, "sender": k, "at": round(now(), 3)}) + "\n"
            for i in ids).encode()
        with tally.lock:
            tally.sent += len(ids)
        resent = False
        while True:  # until answered, even after `stop`: these ids are already counted as sent
            try:
                code, resp = http("POST", relay.url + "/_bulk", body, timeout=60,
                                  ctype="application/x-ndjson")
            except OSError:
                with tally.lock:
                    tally.resends += 1
                resent = True
                time.sleep(0.05)
                continue
            if code >= 500 or resp is None or "items" not in resp:
                # Answered without per-item results (e.g. 503 while draining): nothing was
                # acknowledged, so the same body goes again.
                with tally.lock:
                    tally.resends += 1
                resent = True
                time.sleep(0.2)
                continue
            break
        with tally.lock:
            tally.requests += 1
            for item in resp["items"]:
                op = item.get("create", {})
                st = op.get("status")
                if st in (200, 201):
                    tally.acked.append(op.get("_id"))
                    if op.get("result") == "queued":
                        tally.queued += 1
                elif st == 409 and (op.get("error") or {}).get("type") == \
                        "version_conflict_engine_exception":
                    # Our ids are unique and never reused, so the document is there, written
                    # by this very body: by an earlier send that got no answer, or by
                    # OpenSearch itself re-running a shard's bulk request on the new primary
                    # after the old one died (node 3) — the rerun finds the first write.
                    tally.already.append(op.get("_id"))
                    tally.resent_409 += 1 if resent else 0
                else:
                    tally.failed[st] = tally.failed.get(st, 0) + 1
                    tally.failed_sample = tally.failed_sample or op
        next_at = max(next_at + PACE, time.monotonic())
        time.sleep(max(0.0, next_at - time.monotonic()))


def poller(relay, tally, stop, samples):
    last_print, last_key = -100.0, None
    while not stop.is_set():
        try:
            code, h = http("GET", relay.url + "/health/retry-queue", timeout=2)
            h = h if isinstance(h, dict) else {}
            backlog = h.get("backlog")
            key = (code, backlog == 0)
            samples.append((now(), code, backlog))
            t = now()
            if key != last_key or (backlog and t - last_print >= 2) or t - last_print >= 10:
                with tally.lock:
                    acked, queued = len(tally.acked), tally.queued
                line("queue", f"/health/retry-queue {code}: backlog {backlog}, "
                     f"breaker {h.get('breaker')}, dead letters {h.get('dead_letters')}  "
                     f"| acknowledged {acked} ({queued} queued)")
                last_print, last_key = t, key
        except OSError:
            if last_key != "down":
                line("queue", "/health/retry-queue: no answer (relay down)")
                last_key = "down"
        time.sleep(0.25)


def run_cluster(*args):
    r = subprocess.run([CLUSTER, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"demo: scripts/cluster {' '.join(args)} failed: {r.stderr.strip()}")


def main():
    code, _ = cluster("DELETE", f"/{INDEX}")
    code, resp = cluster("PUT", f"/{INDEX}", json.dumps(
        {"settings": {"number_of_shards": 3, "number_of_replicas": 1}}).encode())
    if code != 200:
        raise SystemExit(f"demo: creating index {INDEX} failed: {code} {resp}")
    cluster("GET", "/_cluster/health?wait_for_status=green&timeout=60s")

    relay = Relay()
    tally = Tally()
    stop_send, stop_poll = threading.Event(), threading.Event()
    samples = []
    paused = []
    print(f"\n=== write path: {THREADS} senders x {BATCH} docs/{PACE:g}s through searchwire relay "
          f"-> {URLS} ===", flush=True)
    print("timeline (seconds since the relay started):", flush=True)
    try:
        took = relay.start()
        global T0
        T0 = time.monotonic() - took
        line("relay", f"started on {relay.url}, embedded queue in {relay.queue_dir} "
             f"(listening after {took * 1000:.0f} ms)")
        threads = [threading.Thread(target=sender, args=(k, relay, tally, stop_send))
                   for k in range(THREADS)]
        pt = threading.Thread(target=poller, args=(relay, tally, stop_poll, samples))
        for t in threads + [pt]:
            t.start()

        time.sleep(8)
        run_cluster("kill", "3")
        line("demo", "node 3 killed (SIGKILL)")
        time.sleep(4)
        line("demo", "restarting node 3")
        run_cluster("restart", "3")
        line("demo", "node 3 is back")

        time.sleep(4)
        relay.signal(signal.SIGKILL)
        line("demo", "relay killed (SIGKILL); restarting it at once on the same queue")
        took = relay.start()
        line("relay", f"listening again after {took * 1000:.0f} ms")

        time.sleep(6)
        t = time.monotonic()
        status = relay.signal(signal.SIGTERM)
        line("demo", f"relay SIGTERM: exit {status} after {(time.monotonic() - t) * 1000:.0f} ms; "
             "restarting it")
        took = relay.start()
        line("relay", f"listening again after {took * 1000:.0f} ms")

        time.sleep(5)
        for n in ("1", "2", "3"):
            run_cluster("pause", n)
            paused.append(n)
        line("demo", f"every node stopped (SIGSTOP) for {STALL_SECS} s: the cluster takes nothing")
        time.sleep(STALL_SECS)
        for n in list(paused):
            run_cluster("resume", n)
            paused.remove(n)
        line("demo", "every node resumed (SIGCONT)")

        time.sleep(8)
        stop_send.set()
        for t in threads:
            t.join()
        line("demo", f"load stopped: {len(tally.acked)} documents acknowledged")

        deadline = time.monotonic() + 300
        while True:
            try:
                code, h = http("GET", relay.url + "/health/retry-queue", timeout=5)
            except OSError as e:
                code, h = None, {"error": str(e)}
            h = h if isinstance(h, dict) else {}
            if code == 200 and h.get("backlog") == 0:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: the backlog did not drain within 300 s: {h}")
            time.sleep(0.5)
        stop_poll.set()
        pt.join()
        line("queue", f"/health/retry-queue {code}: backlog 0, dead letters {h.get('dead_letters')}"
             " — drained")
        dead_letters = h.get("dead_letters")
        t = time.monotonic()
        final_exit = relay.signal(signal.SIGTERM)
        line("relay", f"stopped (SIGTERM, exit {final_exit}, {(time.monotonic() - t) * 1000:.0f} ms)")
    finally:
        stop_send.set()
        stop_poll.set()
        for n in paused:
            subprocess.run([CLUSTER, "resume", n], capture_output=True)
        relay.stop()

    # The check: every acknowledged document present exactly once.
    cluster("POST", f"/{INDEX}/_refresh")
    acked = tally.acked + tally.already
    unique = set(acked)
    missing = rewritten = 0
    for i in range(0, len(acked), 5000):
        code, resp = cluster("POST", f"/{INDEX}/_mget?_source=false",
                             json.dumps({"ids": acked[i:i + 5000]}).encode())
        if code != 200:
            raise SystemExit(f"demo: _mget failed: {code} {resp}")
        for d in resp["docs"]:
            if not d.get("found"):
                missing += 1
            elif d.get("_version") != 1:
                rewritten += 1
    code, resp = cluster("GET", f"/{INDEX}/_count")
    count = resp.get("count") if isinstance(resp, dict) else None
    max_backlog = max((b or 0 for _, _, b in samples), default=0)
    not_ready = sum(1 for _, c, _ in samples if c == 503)

    print("\n=== searchwire write-path demo ===")
    print(f"documents sent {tally.sent} in {tally.requests} bulk requests "
          f"({tally.resends} resends of unanswered requests)")
    print(f"acknowledged {len(tally.acked)} (indexed at once {len(tally.acked) - tally.queued}, "
          f"queued {tally.queued}); answered 409 'document already exists' {len(tally.already)} "
          f"({tally.resent_409} on a resend); refused {sum(tally.failed.values())}")
    if tally.already:
        print("  (a 409 on a `create` with an id used once means the write landed already: on a "
              "resend, or when OpenSearch re-ran a shard's bulk request on a new primary after "
              "node 3 died; checked below like the rest)")
    print(f"/health/retry-queue: max backlog {max_backlog}, {not_ready} of {len(samples)} "
          f"samples answered 503, final: backlog 0, dead letters {dead_letters}; relay exit {final_exit} on SIGTERM")
    print(f"index {INDEX}: _count {count}; of the {len(acked)} ids answered: {missing} missing, "
          f"{rewritten} with _version > 1, {len(acked) - len(unique)} answered twice")
    ok = (not tally.failed and missing == 0 and rewritten == 0 and len(unique) == len(acked)
          and count == len(acked) and len(acked) == tally.sent and dead_letters == 0
          and final_exit == 0)
    if tally.failed:
        print(f"refused items by status: {tally.failed}; e.g. {tally.failed_sample}")
    if ok:
        print("OK: every document sent, acknowledged or already there, is in the index exactly once")
        return 0
    print("FAILED: the index does not hold every acknowledged document exactly once")
    return 1


if __name__ == "__main__":
    sys.exit(main())
