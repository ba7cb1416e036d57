#!/usr/bin/env bash
# benchmarks/bulk.sh — searchwire's bulk indexer (`searchwire ingest`) against opensearch-go
# v4.8.1's opensearchutil.BulkIndexer (benchmarks/go/cmd/bulkpeer), on the same documents and
# the same instant-answering bulk server (benchmarks/go/cmd/bulkserver), so only client cost is
# compared. Both clients are measured from the outside with GNU time (user+system CPU, peak RSS).
# The server honours `filter_path` as OpenSearch does: searchwire asks for a small response,
# opensearch-go's BulkIndexer cannot and gets the full one (docs/benchmarks.md, issue 11).
#
#   benchmarks/bulk.sh              # 200 B and 2 KB documents, 3 rounds each, a table
#   benchmarks/bulk.sh memory [GB]  # peak RSS of `ingest -` fed GB (default 3) on the fly
#
# Environment: DOCS_SMALL (default 300000), DOCS_LARGE (default 60000), ROUNDS (default 3).
# Needs Go (the module proxy serves opensearch-go) and cargo. Takes 2–4 minutes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf 'bulk.sh: %s\n' "$*" >&2; }

say "building the Go programs and the release CLI"
(cd "$root/benchmarks/go" && go build -o "$work/" ./cmd/...)
cargo build --release -q -p searchwire-cli --manifest-path "$root/Cargo.toml"
sw="${CARGO_TARGET_DIR:-$root/target}/release/searchwire"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
"$work/bulkserver" -listen "127.0.0.1:$port" >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 50); do curl -sf "$url/" >/dev/null && break; sleep 0.1; done

# measure NAME CMD...: runs CMD under GNU time; prints "wall cpu rss_kib" and keeps stdout.
measure() {
  local name="$1"; shift
  /usr/bin/time -f '%e %U %S %M' -o "$work/$name.time" "$@" >"$work/$name.out" 2>"$work/$name.err"
  awk '{printf "%s %.3f %s\n", $1, $2+$3, $4}' "$work/$name.time"
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

if [ "${1:-}" = memory ]; then
  gb="${2:-3}"
  n=$(( gb * 1024 * 1024 * 1024 / 2000 ))
  say "memory: $gb GB of 2 KB documents ($n) generated on the fly into 'ingest -'"
  /usr/bin/time -f '%e %U %S %M' -o "$work/mem.time" \
    bash -c "'$work/gendocs' -n $n -size 2000 | '$sw' ingest - --index bench --id-field id --url '$url' --progress-every 60s >'$work/mem.out' 2>'$work/mem.err'"
  read -r wall u s rss <"$work/mem.time"
  # The pipeline's peak RSS is the largest of its processes (gendocs is small).
  printf 'documents %s  wall %ss  peak RSS %s MiB\n' "$n" "$wall" "$((rss / 1024))"
  tail -c 600 "$work/mem.out"
  exit 0
fi

rounds="${ROUNDS:-3}"
printf '| documents | client | docs/s (median) | CPU s (median) | docs per CPU-second | peak RSS MiB |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: |\n'
for spec in "200 ${DOCS_SMALL:-300000}" "2000 ${DOCS_LARGE:-60000}"; do
  read -r size n <<<"$spec"
  docs="$work/docs-$size.ndjson"
  "$work/gendocs" -n "$n" -size "$size" >"$docs"
  for client in searchwire opensearch-go; do
    : >"$work/rates"; : >"$work/cpus"; : >"$work/rss"
    for r in $(seq "$rounds"); do
      if [ "$client" = searchwire ]; then
        read -r wall cpu rss < <(measure "sw-$size-$r" "$sw" ingest "$docs" --index bench \
          --id-field id --url "$url" --progress-every 60s)
      else
        read -r wall cpu rss < <(measure "go-$size-$r" "$work/bulkpeer" -url "$url" -file "$docs" -index bench)
      fi
      awk -v n="$n" -v w="$wall" 'BEGIN {printf "%.0f\n", n / w}' >>"$work/rates"
      echo "$cpu" >>"$work/cpus"
      echo "$rss" >>"$work/rss"
    done
    rate="$(median <"$work/rates")"; cpu="$(median <"$work/cpus")"; rss="$(median <"$work/rss")"
    printf '| %s × %s B | %s | %s | %s | %.0f | %s |\n' "$n" "$size" "$client" "$rate" "$cpu" \
      "$(awk -v n="$n" -v c="$cpu" 'BEGIN {print n / c}')" "$((rss / 1024))"
  done
done
say "server accepted: $(kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null; cat "$work/server.out")"
server_pid=""
