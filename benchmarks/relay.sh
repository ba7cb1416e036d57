#!/usr/bin/env bash
# benchmarks/relay.sh — throughput and acknowledgement latency (p50/p99) of `searchwire relay`:
# first against the in-process fake cluster, then against three real OpenSearch nodes started
# here (default settings, 512 MB heap each) — direct to a node (no relay, no queue), the relay's
# live path with an embedded and with a Redis queue, and every item queued (embedded, Redis).
#
#   flock /work/wt/opensearch-cluster.lock benchmarks/relay.sh [CLIENTS REQUESTS BATCH]
#
# Hold the OpenSearch lock (ports 9201-9203 are shared by everyone on the machine). A private
# redis-server (scripts/redis, appendfsync always) gives the Redis rows; the nodes and the
# redis-server started here are stopped on exit. Results: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

if [ $# -ge 3 ]; then args=("$@"); else args=(8 200 100); fi

cargo build --release -p searchwire-relay --example relay_bench
bin=target/release/examples/relay_bench

export SEARCHWIRE_REDIS_DIR="${SEARCHWIRE_REDIS_DIR:-$PWD/.redis/bench}"
export SEARCHWIRE_CLUSTER_DIR="${SEARCHWIRE_CLUSTER_DIR:-$PWD/.cluster/bench}"
redis_url="$(scripts/redis start)"
cluster_started=0
cleanup() {
  if [ "$cluster_started" = 1 ]; then scripts/cluster stop || true; fi
  scripts/redis stop || true
}
trap cleanup EXIT

echo "## fake cluster"
SEARCHWIRE_TEST_REDIS="$redis_url" "$bin" "${args[@]}"

echo
echo "## three real OpenSearch nodes"
# The published relay figures are 2.19.6's: pinned (the harness default is 3.x).
scripts/cluster --version 2.19 build
urls="$(scripts/cluster --version 2.19 start 3 | paste -sd, -)"
cluster_started=1
SEARCHWIRE_BENCH_URLS="$urls" SEARCHWIRE_TEST_REDIS="$redis_url" "$bin" "${args[@]}"
