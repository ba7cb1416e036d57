#!/usr/bin/env bash
# benchmarks/requests.sh — searchwire's transport (`searchwire request --for`) against the Go
# peers opensearch-go v4.8.1 and go-elasticsearch v8 (benchmarks/go/cmd/requestpeer), running
# the same closed-loop `GET /` load against the same fake cluster (3 nodes, searchwire-fake's
# `fake_cluster` example, one process per run, one core), scenario by scenario:
#
#   steady       every node answers
#   one-down     node 0 is down (connection refused)
#   all-503      every node answers every request 503
#   throttle-30  30 % of the answers are 429 with Retry-After: 1
#
# and, when named in SCENARIOS (not run by default), the fake cluster's load-model scenarios
# slow-node (node 0 answers 50 ms later), slow-recovers (for the first 20 s) and pause-300
# (node 0 stalls 300 ms every 3 s);
#
# clients: searchwire, opensearch-go (its default round robin), opensearch-go-router (the same
# peer with OPENSEARCH_GO_ROUTER=true: its opt-in router, which scores nodes by a probed RTT
# bucket × requests in flight), go-elasticsearch; CLIENTS picks some;
#
# and prints one table: requests/s, p50/p99 latency, failed requests, server-side attempts per
# request (requests the fake cluster received, health checks included, / requests the client
# made), client CPU-seconds (getrusage user+system over the load, reported by each tool itself)
# and requests per CPU-second. Every client number comes from the client's own summary.
#
#   benchmarks/requests.sh
#   FOR=5s CONCURRENCY=64 SCENARIOS="steady one-down" CLIENTS="searchwire opensearch-go" benchmarks/requests.sh
#
# Environment: FOR (default 10s per run), CONCURRENCY (default 8), SCENARIOS, CLIENTS,
# ROUNDS (default 1; with more, the table shows the run with the median requests/s).
# Needs Go (the module proxy serves the peers), cargo and python3. Takes about
# scenarios × clients × rounds × FOR plus the builds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dur="${FOR:-10s}"
conc="${CONCURRENCY:-8}"
scenarios="${SCENARIOS:-steady one-down all-503 throttle-30}"
clients="${CLIENTS:-searchwire opensearch-go opensearch-go-router go-elasticsearch}"
rounds="${ROUNDS:-1}"
work="$(mktemp -d)"
fake_pid=""
cleanup() {
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf 'requests.sh: %s\n' "$*" >&2; }

say "building the Go peer, the release CLI and the fake cluster"
(cd "$root/benchmarks/go" && go build -o "$work/" ./cmd/requestpeer)
cargo build --release -q -p searchwire-cli --manifest-path "$root/Cargo.toml"
cargo build --release -q -p searchwire-fake --example fake_cluster --manifest-path "$root/Cargo.toml"
target="${CARGO_TARGET_DIR:-$root/target}/release"

# run SCENARIO CLIENT ROUND: one fake cluster, one client run; writes $work/S.C.R.{json,fake}.
run() {
  local s="$1" c="$2" r="$3" urls
  local out="$work/$s.$c.$r"
  rm -f "$work/ctl"; mkfifo "$work/ctl"
  "$target/examples/fake_cluster" "$s" <"$work/ctl" >"$out.fake" 2>"$out.fake.err" &
  fake_pid=$!
  exec 3>"$work/ctl"  # the fake serves until this is closed
  for _ in $(seq 100); do [ -s "$out.fake" ] && break; sleep 0.05; done
  urls="$(head -1 "$out.fake")"
  [ -n "$urls" ] || { cat "$out.fake.err" >&2; say "the fake cluster did not start"; exit 1; }
  case "$c" in
    searchwire)
      "$target/searchwire" request GET / --url "$urls" --for "$dur" --concurrency "$conc" --json \
        >"$out.json" 2>"$out.err" || true ;;
    opensearch-go-router)
      OPENSEARCH_GO_ROUTER=true "$work/requestpeer" -client opensearch-go -urls "$urls" \
        -for "$dur" -concurrency "$conc" >"$out.json" 2>"$out.err" || true ;;
    *)
      "$work/requestpeer" -client "$c" -urls "$urls" -for "$dur" -concurrency "$conc" \
        >"$out.json" 2>"$out.err" || true ;;
  esac
  exec 3>&-
  wait "$fake_pid" || true
  fake_pid=""
  [ -s "$out.json" ] || { cat "$out.err" >&2; say "$c printed no summary in $s"; exit 1; }
}

for s in $scenarios; do
  for r in $(seq "$rounds"); do
    for c in $clients; do
      say "$s: $c (round $r, $dur at concurrency $conc)"
      run "$s" "$c" "$r"
    done
  done
done

python3 - "$work" "$dur" "$conc" "$rounds" $scenarios -- $clients <<'PY'
import json, sys, statistics
work, dur, conc, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rest = sys.argv[5:]
scenarios, clients = rest[:rest.index("--")], rest[rest.index("--") + 1:]
print(f"closed loop, GET /, {conc} in flight, {dur} per run, 3-node fake cluster")
head = ("scenario", "client", "req/s", "p50 ms", "p99 ms", "failed", "attempts/req", "CPU s", "req/CPU-s")
fmt = "{:<13} {:<20} {:>9} {:>8} {:>8} {:>14} {:>12} {:>7} {:>10}"
print(fmt.format(*head))
for s in scenarios:
    for c in clients:
        runs = []
        for r in range(1, rounds + 1):
            base = f"{work}/{s}.{c}.{r}"
            summary = json.loads(open(base + ".json").read().strip().splitlines()[-1])
            fake = json.loads(open(base + ".fake").read().strip().splitlines()[-1])
            runs.append((summary, fake))
        runs.sort(key=lambda x: x[0]["requests_per_s"])
        summary, fake = runs[len(runs) // 2]
        n = summary["requests"]
        lat = summary["latency_ms"]
        cpu = summary["cpu_s"]["total"]
        print(fmt.format(
            s, c, f"{summary['requests_per_s']:.0f}",
            f"{lat['p50']:.2f}" if lat["p50"] is not None else "-",
            f"{lat['p99']:.2f}" if lat["p99"] is not None else "-",
            f"{summary['failed']} ({100 * summary['failed'] / max(n, 1):.0f} %)",
            f"{fake['requests'] / max(n, 1):.2f}",
            f"{cpu:.2f}",
            f"{summary['requests_per_cpu_s']:.0f}" if summary.get("requests_per_cpu_s") else "-",
        ))
PY
