#!/usr/bin/env bash
# benchmarks/redis-cluster.sh — the Redis queue on a Redis Cluster (3 primaries, 3 replicas,
# the queue's 8 shards) against one redis-server, side by side in one run: append + lease +
# ack rate and the summed redis-server CPU per message (benches/throughput.rs, `server
# µs/msg`, read as utime + stime from /proc/PID/stat before and after each run): of the one
# server; of the Cluster's 3 primaries (the same work, sharded); of all 6 nodes (with the
# replicas' copy of it); and of the 3 primaries with the queue in one shard (the Cluster
# link's own cost — cluster mode, ROLE and receipt per append, replication — without the
# spreading).
#
#   benchmarks/redis-cluster.sh [CONFIGS [N [RUNS]]]     # default: 1x64,100x8 3000 3
#   REDIS_BENCH_FSYNC=everysec benchmarks/redis-cluster.sh   # every server's appendfsync set
#                                                            # to this after start
#
# CONFIGS is QUEUE_BENCH_CONFIGS (batch x tasks). Every server runs with `appendonly yes`,
# `appendfsync always` (scripts/redis); all are started here and stopped on exit (by pid).
# Ports: SEARCHWIRE_REDIS_PORT_BASE (6, and their bus ports +10000) if set, else free ones.
# Results: docs/benchmarks.md, "Redis queue: on a Redis Cluster".
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

configs="${1:-1x64,100x8}" n="${2:-3000}" runs="${3:-3}"
export SEARCHWIRE_REDIS_DIR="${SEARCHWIRE_REDIS_DIR:-$PWD/.redis/bench-cluster}"
cleanup() {
  scripts/redis cluster-stop || true
  SEARCHWIRE_REDIS_DIR="$SEARCHWIRE_REDIS_DIR/replica" scripts/redis stop || true
  scripts/redis stop || true
}
trap cleanup EXIT

cargo bench -p searchwire-queue --bench throughput --no-run
single="$(scripts/redis start)"
single_pid="$(cat "$SEARCHWIRE_REDIS_DIR/pid")"
# A replica of the one server (a second redis-server following it, like each Cluster
# primary's one replica): the baseline that does the same replicated work as the Cluster.
replica="$(SEARCHWIRE_REDIS_DIR="$SEARCHWIRE_REDIS_DIR/replica" scripts/redis start)"
replica_pid="$(cat "$SEARCHWIRE_REDIS_DIR/replica/pid")"
single_port="${single##*:}"
redis-cli -p "${replica##*:}" replicaof 127.0.0.1 "$single_port" >/dev/null
lines="$(scripts/redis cluster-start)"
nodes="$(awk '$1 == "cluster" {print $2}' <<<"$lines")"
primaries="$(awk '$1 == "primary" {print $3}' <<<"$lines" | paste -sd,)"
every="$(awk '$1 == "primary" || $1 == "replica" {print $3}' <<<"$lines" | paste -sd,)"
if [[ -n "${REDIS_BENCH_FSYNC:-}" ]]; then
  for addr in "${single#redis://}" ${nodes//,/ }; do
    redis-cli -p "${addr##*:}" config set appendfsync "$REDIS_BENCH_FSYNC" >/dev/null
  done
fi

bench() { # NAME PIDS [CLUSTER [SHARDS]]
  echo "## $1 (server µs/msg: pids $2)"
  QUEUE_BENCH_SHARDS="${4:-8}" QUEUE_BENCH_BACKENDS=redis QUEUE_BENCH_CONFIGS="$configs" QUEUE_BENCH_N="$n" \
    QUEUE_BENCH_RUNS="$runs" QUEUE_BENCH_SERVER_PIDS="$2" QUEUE_BENCH_CLUSTER="${3:-}" \
    SEARCHWIRE_TEST_REDIS="$single" cargo bench -p searchwire-queue --bench throughput
}
wait_sync() { # wait until the replica reports its link up
  for _ in $(seq 1 100); do
    redis-cli -p "${replica##*:}" info replication | grep -q '^master_link_status:up' && return 0
    sleep 0.1
  done
  echo "redis-cluster.sh: the one server's replica did not sync" >&2; exit 1
}
wait_sync
bench "one server with its replica, CPU of the one server" "$single_pid"
bench "one server with its replica, CPU of both" "$single_pid,$replica_pid"
redis-cli -p "${replica##*:}" replicaof no one >/dev/null
bench "one server" "$single_pid"
bench "Cluster, CPU of the 3 primaries" "$primaries" "$nodes"
bench "Cluster, CPU of all 6 nodes" "$every" "$nodes"
bench "Cluster, one shard, CPU of the 3 primaries" "$primaries" "$nodes" 1
