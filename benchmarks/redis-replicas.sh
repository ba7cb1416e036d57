#!/usr/bin/env bash
# benchmarks/redis-replicas.sh — the Redis queue's append + lease + ack rate and CPU per
# message (benches/throughput.rs) side by side in one run: a single redis-server; the
# primary of a Sentinel set (2 replicas, 3 Sentinels) at its address; the same found through
# its Sentinels (the link that checks ROLE and writes a receipt per append call) without
# waiting; and that with every append and lease confirmed by one replica (`WAIT 1`,
# RedisConfig::min_replicas 1).
#
#   benchmarks/redis-replicas.sh [CONFIGS [N [RUNS]]]     # default: 1x64,100x8 3000 3
#
# CONFIGS is QUEUE_BENCH_CONFIGS (batch x tasks). Every server runs with `appendonly yes`,
# `appendfsync always` (scripts/redis); all are started here and stopped on exit (by pid).
# Ports: SEARCHWIRE_REDIS_PORT_BASE (6 for the Sentinel set) if set, else free ones.
# Results: docs/benchmarks.md, "Redis queue: appends confirmed by a replica".
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

configs="${1:-1x64,100x8}" n="${2:-3000}" runs="${3:-3}"
export SEARCHWIRE_REDIS_DIR="${SEARCHWIRE_REDIS_DIR:-$PWD/.redis/bench-replicas}"
cleanup() {
  scripts/redis sentinel-stop || true
  scripts/redis stop || true
}
trap cleanup EXIT

cargo bench -p searchwire-queue --bench throughput --no-run
single="$(scripts/redis start)"
set_lines="$(scripts/redis sentinel-start)"
primary="redis://$(awk '$1 == "primary" {print $2}' <<<"$set_lines")"
sentinels="$(awk '$1 == "sentinels" {print $2}' <<<"$set_lines")"

for row in "single server|$single||0" "the primary, direct, no wait|$primary||0" \
  "through Sentinels, no wait|$primary|$sentinels|0" \
  "through Sentinels, WAIT 1|$primary|$sentinels|1"; do
  IFS='|' read -r name url via min <<<"$row"
  echo "## $name ($url, min_replicas $min)"
  QUEUE_BENCH_BACKENDS=redis QUEUE_BENCH_CONFIGS="$configs" QUEUE_BENCH_N="$n" \
    QUEUE_BENCH_RUNS="$runs" QUEUE_BENCH_MIN_REPLICAS="$min" QUEUE_BENCH_SENTINEL="$via" \
    SEARCHWIRE_TEST_REDIS="$url" cargo bench -p searchwire-queue --bench throughput
done
