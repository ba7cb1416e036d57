#!/usr/bin/env bash
# benchmarks/relay-overload.sh — the relay bounded under overload: a cluster that answers
# every bulk item 429 for the whole run (a stand-in that never takes a write), clients sending
# as fast as they can (far more than the zero the cluster takes), and the relay's
# --max-queue-bytes cap. Reports the relay's RSS (median and peak, sampled every second from
# /proc), the queue's estimated bytes against the cap, the share of answers that were 429,
# and documents lost: every item answered `queued` must be in the queue at the end (the
# cluster took none, so the backlog must equal the acknowledged count).
#
#   benchmarks/relay-overload.sh [SECONDS [CLIENTS [CAP]]]     defaults: 600 16 256MiB
#
# SEARCHWIRE_BIN picks the binary (default target/release/searchwire, built if missing;
# target/debug/searchwire works for a quick look). Ports are free loopback ports; everything
# started here is stopped by pid on exit. Results: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

secs="${1:-600}"
clients="${2:-16}"
cap="${3:-256MiB}"
bin="${SEARCHWIRE_BIN:-target/release/searchwire}"
if [ ! -x "$bin" ]; then
  cargo build --release -p searchwire-cli --bin searchwire
fi
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The cluster: GET / as OpenSearch 2.x, every _bulk item 429.
cport="$(free_port)"
python3 - "$cport" >"$work/cluster.log" 2>&1 <<'PY' &
import json, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def send(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        self.send(200, {"name": "n1", "cluster_name": "overload", "version": {"distribution": "opensearch", "number": "2.19.0"}, "tagline": "The OpenSearch Project: https://opensearch.org/"})
    do_HEAD = do_GET
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        lines = [l for l in self.rfile.read(n).split(b"\n") if l.strip()]
        items = []
        for i in range(0, len(lines), 2):
            a = json.loads(lines[i]); op = next(iter(a))
            items.append({op: {"_index": a[op].get("_index", "x"), "_id": a[op].get("_id", ""), "status": 429,
                               "error": {"type": "es_rejected_execution_exception", "reason": "rejected execution (queue capacity 200)"}}})
        self.send(200, {"took": 1, "errors": True, "items": items})
    do_PUT = do_POST
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
pids+=($!)

rport="$(free_port)"
: >"$work/relay.log"
"$bin" relay --url "http://127.0.0.1:$cport" --listen "127.0.0.1:$rport" \
  --queue-dir "$work/queue" --max-queue-bytes "$cap" --min-free-disk-bytes 0 \
  --live-budget 1s >"$work/relay.log" 2>&1 &
relay=$!
pids+=("$relay")
for _ in $(seq 100); do grep -q "listening on" "$work/relay.log" && break; sleep 0.1; done
grep -q "listening on" "$work/relay.log" || { cat "$work/relay.log"; exit 1; }

python3 - "$rport" "$relay" "$secs" "$clients" <<'PY'
import http.client, json, statistics, sys, threading, time, uuid
port, pid, secs, clients = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
doc = json.dumps({"message": "x" * 400, "level": "info", "service": "bench"})
stop = time.time() + secs
lock = threading.Lock()
tally = {"requests": 0, "429": 0, "other": 0, "queued": 0, "item_429": 0, "item_503": 0}
def client():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while time.time() < stop:
        body = "".join('{"index":{"_index":"bench","_id":"%s"}}\n%s\n' % (uuid.uuid4(), doc) for _ in range(100))
        try:
            c.request("POST", "/_bulk", body, {"Content-Type": "application/x-ndjson"})
            r = c.getresponse(); data = r.read()
        except Exception:
            c.close(); c = http.client.HTTPConnection("127.0.0.1", port, timeout=60); continue
        with lock:
            tally["requests"] += 1
            if r.status == 429:
                tally["429"] += 1
                continue
            if r.status != 200:
                tally["other"] += 1
                continue
            for it in json.loads(data)["items"]:
                s = it["index"]["status"]
                if s == 200 and it["index"].get("result") == "queued": tally["queued"] += 1
                elif s == 429: tally["item_429"] += 1
                elif s == 503: tally["item_503"] += 1
        if r.status == 429:
            time.sleep(float(r.getheader("Retry-After", "1")) / 50)
def health():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/health/retry-queue"); return json.loads(c.getresponse().read())
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads: t.start()
rss, qb = [], []
while time.time() < stop:
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"): rss.append(int(l.split()[1]) / 1024)
    try: qb.append(health()["queue_bytes"])
    except Exception: pass
    time.sleep(1)
for t in threads: t.join()
time.sleep(1.5)
h = health()
answers = tally["requests"]
lost = tally["queued"] - h["backlog"]
print(f"seconds {secs:.0f}, clients {clients}, requests {answers} of 100 items")
print(f"rss MiB: median {statistics.median(rss):.1f}, peak {max(rss):.1f}")
# Whether RSS levels off: the median of each minute (or of each tenth of a shorter run).
step = 60 if len(rss) >= 300 else max(len(rss) // 10, 1)
print("rss MiB per %d s: %s" % (step, " ".join(f"{statistics.median(rss[i:i+step]):.0f}" for i in range(0, len(rss), step))))
print(f"queue bytes: peak {max(qb)} of cap {h['max_queue_bytes']} ({100*max(qb)/h['max_queue_bytes']:.1f} %)")
print(f"answers 429: {tally['429']} of {answers} requests ({100*tally['429']/max(answers,1):.1f} %); items 429 in a 200: {tally['item_429']}; 503: {tally['item_503']}; other: {tally['other']}")
print(f"items queued (acknowledged): {tally['queued']}, backlog at the end: {h['backlog']}, lost: {max(lost,0)}")
sys.exit(1 if lost > 0 else 0)
PY
