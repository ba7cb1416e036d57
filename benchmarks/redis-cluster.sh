#!/usr/bin/env bash
# benchmarks/redis-cluster.sh — the Redis queue on a Redis Cluster (3 primaries, 3 replicas,
# the queue's 8 shards) against one redis-server, side by side in one run: append + lease +
# ack rate and the summed redis-server CPU per message (benches/throughput.rs, `server
# µs/msg`, read as utime + stime from /proc/PID/stat before and after each run): of the one
# server; of the Cluster's 3 primaries (the same work, sharded); of all 6 nodes (with the
# replicas' copy of it); and of the 3 primaries with the queue in one shard (the Cluster
# link's own cost — cluster mode, a receipt per append, replication — without the
# spreading).
#
#   benchmarks/redis-cluster.sh [CONFIGS [N [ROUNDS]]]   # default: 1x64,100x8 3000 5
#   REDIS_BENCH_FSYNC=everysec benchmarks/redis-cluster.sh   # every server's appendfsync set
#                                                            # to this after start
#   SHARDS=3 benchmarks/redis-cluster.sh ...    # the sharded queue with 3 shards, not 8
#
# The four setups take turns: each round runs every setup once (one run per configuration),
# so a machine whose speed drifts over minutes (a shared VM) moves all four alike, and each
# ratio is taken within a round, then the median over the rounds is printed (a summary
# table after the raw lines).
#
# CONFIGS is QUEUE_BENCH_CONFIGS (batch x tasks). Every server runs with `appendonly yes`,
# `appendfsync always` (scripts/redis); all are started here and stopped on exit (by pid).
# Ports: SEARCHWIRE_REDIS_PORT_BASE (6, and their bus ports -10000) if set, else free ones.
# Results: docs/benchmarks.md, "Redis queue: on a Redis Cluster".
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

configs="${1:-1x64,100x8}" n="${2:-3000}" rounds="${3:-5}"
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

bench() { # NAME PIDS ALSO_PIDS [CLUSTER [SHARDS]]: one run per configuration, lines prefixed NAME
  QUEUE_BENCH_SHARDS="${5:-8}" QUEUE_BENCH_BACKENDS=redis QUEUE_BENCH_CONFIGS="$configs" QUEUE_BENCH_N="$n" \
    QUEUE_BENCH_RUNS=1 QUEUE_BENCH_SERVER_PIDS="$2" QUEUE_BENCH_SERVER_PIDS_ALSO="$3" QUEUE_BENCH_CLUSTER="${4:-}" \
    SEARCHWIRE_TEST_REDIS="$single" cargo bench -q -p searchwire-queue --bench throughput 2>/dev/null |
    awk -v name="$1" '$1 == "redis" || $1 ~ /^cluster/ {print name, $0}'
}
wait_sync() { # wait until the replica reports its link up
  for _ in $(seq 1 100); do
    redis-cli -p "${replica##*:}" info replication | grep -q '^master_link_status:up' && return 0
    sleep 0.1
  done
  echo "redis-cluster.sh: the one server's replica did not sync" >&2; exit 1
}
raw="$(mktemp)"
for round in $(seq 1 "$rounds"); do
  redis-cli -p "${replica##*:}" replicaof 127.0.0.1 "$single_port" >/dev/null
  wait_sync
  bench replicated "$single_pid" "$single_pid,$replica_pid" | tee -a "$raw"
  redis-cli -p "${replica##*:}" replicaof no one >/dev/null
  bench alone "$single_pid" "" | tee -a "$raw"
  bench cluster8 "$primaries" "$every" "$nodes" "${SHARDS:-8}" | tee -a "$raw"
  bench cluster1 "$primaries" "" "$nodes" 1 | tee -a "$raw"
  echo "round $round of $rounds done" >&2
done

# Columns of a raw line: NAME backend batch tasks msgs append+ack/s append/s ack/s syncs
# msgs/sync cpu server [also]. Per configuration: medians over the rounds, and the median
# of each round's ratio.
echo
echo "medians of $rounds rounds, $n messages; server µs/msg (ratios: median of each round's)"
awk '
  function median(list,   v, k, m, i, j, t) {
    m = split(list, v, " ")
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  {
    cfg = $3 "x" $4
    if (!(cfg in seen)) { seen[cfg] = 1; order[++ncfg] = cfg }
    round[$1, cfg]++
    r = round[$1, cfg]
    server[$1, cfg, r] = $12; also[$1, cfg, r] = $13; rate[$1, cfg, r] = $6
  }
  END {
    printf "%-10s %10s %10s %10s %12s %10s %10s %10s %12s\n", "config", "one server", "with repl.", "repl. both", "Cluster " S "/3p", S "/all 6", "1/3p", S "/3p ÷ one", S "/6 ÷ both"
    for (c = 1; c <= ncfg; c++) {
      cfg = order[c]; n = round["alone", cfg]
      a = ""; rp = ""; rb = ""; c8 = ""; c8a = ""; c1 = ""; q1 = ""; q2 = ""; q3 = ""; q4 = ""
      for (r = 1; r <= n; r++) {
        a = a " " server["alone", cfg, r]; rp = rp " " server["replicated", cfg, r]
        rb = rb " " also["replicated", cfg, r]; c8 = c8 " " server["cluster8", cfg, r]
        c8a = c8a " " also["cluster8", cfg, r]; c1 = c1 " " server["cluster1", cfg, r]
        q1 = q1 " " server["cluster8", cfg, r] / server["alone", cfg, r]
        q2 = q2 " " also["cluster8", cfg, r] / also["replicated", cfg, r]
        q3 = q3 " " server["cluster1", cfg, r] / server["alone", cfg, r]
        q4 = q4 " " server["cluster8", cfg, r] / server["replicated", cfg, r]
      }
      printf "%-10s %10.1f %10.1f %10.1f %12.1f %10.1f %10.1f %9.2fx %11.2fx\n", cfg, median(a), median(rp), median(rb), median(c8), median(c8a), median(c1), median(q1), median(q2)
      printf "%-10s ratios: Cluster %s shards / one server with its replica (the server only) %.2fx; 1 shard / one server %.2fx\n", "", S, median(q4), median(q3)
    }
  }' S="${SHARDS:-8}" "$raw"
rm -f "$raw"
