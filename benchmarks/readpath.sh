#!/usr/bin/env bash
# benchmarks/readpath.sh — hedged reads and the adaptive concurrency limit against the fake
# cluster's load model (3 nodes, searchwire-fake's `fake_cluster` example, one core), each
# run side by side with the same load without the feature:
#
#   healthy          3 nodes, no fault: the all-healthy latency the pause runs compare with
#   pause-300        node 0 stops for 300 ms every 3 s; `_search` at RATE/s from CONCURRENCY
#                    callers, without and with `--hedge` (p95), with the default latency-aware
#                    selection and with `--selection round-robin`
#   all-503          every node answers 503; with `--hedge`: attempts per offered request
#   spread           3 healthy nodes whose latencies spread as searches' do (log-normal,
#                    10 ms median, sigma 0.5; nothing queues), SPREAD_RATE/s (default 1,500)
#                    from SPREAD_CONCURRENCY (64) callers, without and with
#                    `--adaptive-concurrency`: a limit must refuse nothing here
#   unloaded         the capacity model below at RATE/s: the unloaded latency
#   overload         OVERLOAD_NODES (default 1) node(s) serving CAPACITY requests at once (1 ms
#                    each, the rest queue): the offered rate is 2x the capacity
#                    (OVERLOAD_NODES x 1000 x CAPACITY/s), without and with
#                    `--adaptive-concurrency` (one node keeps the fake below one core, so
#                    its model, not the CPU, is the bound)
#
# and prints one table: requests offered, ok, goodput/s, p50/p99 of the successful requests,
# attempts the cluster received per offered request (health checks included). Every client
# number comes from the CLI's own --json summary; the server count from the fake's.
#
#   benchmarks/readpath.sh
#   FOR=15s RATE=150 CONCURRENCY=8 CAPACITY=1 benchmarks/readpath.sh
#   ONLY=overload benchmarks/readpath.sh     # a subset: groups (healthy, pause, outage,
#                                            # spread, overload = unloaded + both overload
#                                            # runs) or run names, space-separated
#   ONLY="unloaded overload-limit" KEEP=/tmp/rp benchmarks/readpath.sh   # keep the outputs
#
# Needs cargo and python3; builds the release CLI and the fake cluster. Takes about
# 11 runs × FOR plus the builds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dur="${FOR:-15s}"
rate="${RATE:-150}"
conc="${CONCURRENCY:-8}"
capacity="${CAPACITY:-1}"
over_nodes="${OVERLOAD_NODES:-1}"
over_conc="${OVERLOAD_CONCURRENCY:-256}"
spread_rate="${SPREAD_RATE:-1500}"
spread_conc="${SPREAD_CONCURRENCY:-64}"
only="${ONLY:-healthy pause outage spread overload}"
work="$(mktemp -d)"
fake_pid=""
cleanup() {
  [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf 'readpath.sh: %s\n' "$*" >&2; }

say "building the release CLI and the fake cluster"
cargo build --release -q -p searchwire-cli --manifest-path "$root/Cargo.toml"
cargo build --release -q -p searchwire-fake --example fake_cluster --manifest-path "$root/Cargo.toml"
target="${CARGO_TARGET_DIR:-$root/target}/release"

# The group a run belongs to (for ONLY).
group() {
  case "$1" in
    healthy) echo healthy ;;
    pause-*) echo pause ;;
    all-503*) echo outage ;;
    spread*) echo spread ;;
    *) echo overload ;;
  esac
}
runs="healthy pause-300 pause-300-hedge pause-300-rr pause-300-rr-hedge all-503-hedge spread spread-limit unloaded overload overload-limit"
selected() {
  case " $only " in *" $(group "$1") "* | *" $1 "*) return 0 ;; *) return 1 ;; esac
}
for g in $only; do
  case " healthy pause outage spread overload $runs " in *" $g "*) ;; *) say "ONLY: unknown $g"; exit 2 ;; esac
done

# run NAME SCENARIO FAKE_ARGS -- CLI_ARGS...: one fake cluster, one client run (when its
# group is selected).
run() {
  local name="$1" scenario="$2" fake_args="$3"; shift 4
  selected "$name" || return 0
  local out="$work/$name" urls
  rm -f "$work/ctl"; mkfifo "$work/ctl"
  # shellcheck disable=SC2086
  "$target/examples/fake_cluster" $fake_args "$scenario" <"$work/ctl" >"$out.fake" 2>"$out.fake.err" &
  fake_pid=$!
  exec 3>"$work/ctl"
  for _ in $(seq 100); do [ -s "$out.fake" ] && break; sleep 0.05; done
  urls="$(head -1 "$out.fake")"
  [ -n "$urls" ] || { cat "$out.fake.err" >&2; say "the fake cluster did not start"; exit 1; }
  say "$name: $*"
  "$target/searchwire" request GET /bench/_search --url "$urls" --for "$dur" --json "$@" \
    >"$out.json" 2>"$out.err" || true
  exec 3>&-
  wait "$fake_pid" || true
  fake_pid=""
  [ -s "$out.json" ] || { cat "$out.err" >&2; say "no summary from $name"; exit 1; }
}

over_rate=$(( 2 * over_nodes * 1000 * capacity ))
run healthy steady "" -- --rate "$rate" --concurrency "$conc"
run pause-300 pause-300 "" -- --rate "$rate" --concurrency "$conc"
run pause-300-hedge pause-300 "" -- --rate "$rate" --concurrency "$conc" --hedge
run pause-300-rr pause-300 "" -- --rate "$rate" --concurrency "$conc" --selection round-robin
run pause-300-rr-hedge pause-300 "" -- --rate "$rate" --concurrency "$conc" \
  --selection round-robin --hedge
run all-503-hedge all-503 "" -- --rate "$rate" --concurrency "$conc" --hedge
run spread spread "" -- --rate "$spread_rate" --concurrency "$spread_conc"
run spread-limit spread "" -- --rate "$spread_rate" --concurrency "$spread_conc" \
  --adaptive-concurrency
run unloaded steady "--nodes $over_nodes --capacity $capacity" -- --rate "$rate" --concurrency "$conc"
run overload steady "--nodes $over_nodes --capacity $capacity" -- --rate "$over_rate" --concurrency "$over_conc" \
  --attempt-timeout 2s
run overload-limit steady "--nodes $over_nodes --capacity $capacity" -- --rate "$over_rate" --concurrency "$over_conc" \
  --attempt-timeout 2s --adaptive-concurrency

python3 - "$work" "$dur" "$rate" "$conc" "$capacity" "$over_rate" "$over_conc" "$over_nodes" \
  "$spread_rate" "$spread_conc" <<'PY'
import json, os, sys
work, dur, rate, conc, cap, over_rate, over_conc, nodes, spread_rate, spread_conc = sys.argv[1:]
print(f"FOR={dur}; pause/503 runs: 3 nodes, RATE={rate}/s, CONCURRENCY={conc}; capacity runs: "
      f"{nodes} node(s) serving {cap} at once (1 ms each = {1000 * int(cap) * int(nodes)}/s), "
      f"overload offered {over_rate}/s from {over_conc} callers; spread runs: 3 nodes, "
      f"{spread_rate}/s from {spread_conc} callers")
print("| run | offered | ok | goodput/s | p50 ms (ok) | p99 ms (ok) | max ms (ok) | cluster attempts / offered |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for name in ["healthy", "pause-300", "pause-300-hedge", "pause-300-rr", "pause-300-rr-hedge",
             "all-503-hedge", "spread", "spread-limit", "unloaded", "overload",
             "overload-limit"]:
    if not os.path.exists(f"{work}/{name}.json"):
        continue
    s = json.loads(open(f"{work}/{name}.json").read().strip().splitlines()[-1])
    fake = json.loads(open(f"{work}/{name}.fake").read().strip().splitlines()[-1])
    lat = s.get("ok_latency_ms") or s["latency_ms"]
    per = fake["requests"] / s["requests"] if s["requests"] else 0
    print(f"| {name} | {s['requests']} | {s['ok']} | {s['ok'] / s['wall_s']:.0f} | "
          f"{lat['p50']} | {lat['p99']} | {lat['max']} | {per:.3f} |")
PY
if [ -n "${KEEP:-}" ]; then
  mkdir -p "$KEEP" && find "$work" -maxdepth 1 -type f -exec cp {} "$KEEP"/ \;
fi
