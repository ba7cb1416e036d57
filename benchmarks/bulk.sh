#!/usr/bin/env bash
# benchmarks/bulk.sh — searchwire's bulk indexer (`searchwire ingest`) against opensearch-go
# v4.8.1's opensearchutil.BulkIndexer (benchmarks/go/cmd/bulkpeer), on the same documents and
# the same instant-answering bulk server (benchmarks/go/cmd/bulkserver), so only client cost is
# compared. Both clients are measured from the outside with GNU time (user+system CPU, peak RSS).
# The server honours `filter_path` as OpenSearch does: searchwire asks for a small response,
# opensearch-go's BulkIndexer cannot and gets the full one (docs/benchmarks.md, "Bulk indexing").
#
#   benchmarks/bulk.sh              # 200 B and 2 KB documents, 5 interleaved rounds, a table
#   benchmarks/bulk.sh memory [GB]  # peak RSS of `ingest -` fed GB (default 3) on the fly
#
# The clients run interleaved (each round runs searchwire, then opensearch-go), so a change in
# the machine's load hits both alike; the table gives medians and the ratio of docs per
# CPU-second in the worst round (each round's searchwire run against that round's Go run).
#
# Environment: DOCS_SMALL (default 300000), DOCS_LARGE (default 60000), ROUNDS (default 5),
# SIZES (default "200 2000"), SEARCHWIRE_BIN (a built `searchwire`: skips the cargo build),
# SEARCHWIRE_BIN_B (a second `searchwire`, e.g. the code before a change: a third interleaved
# client, "searchwire B"), GO_BIN_DIR (built bulkpeer/bulkserver/gendocs: skips the go build),
# KEEP_DIR (copy the per-run GNU time files there).
# Needs Go (the module proxy serves opensearch-go) and cargo. Takes 2–5 minutes.
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

if [ -n "${GO_BIN_DIR:-}" ]; then
  for p in bulkpeer bulkserver gendocs; do cp "$GO_BIN_DIR/$p" "$work/"; done
else
  say "building the Go programs"
  (cd "$root/benchmarks/go" && go build -o "$work/" ./cmd/...)
fi
if [ -n "${SEARCHWIRE_BIN:-}" ]; then
  sw="$SEARCHWIRE_BIN"
else
  say "building the release CLI"
  cargo build --release -q -p searchwire-cli --manifest-path "$root/Cargo.toml"
  sw="${CARGO_TARGET_DIR:-$root/target}/release/searchwire"
fi
sw_b="${SEARCHWIRE_BIN_B:-}"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
"$work/bulkserver" -listen "127.0.0.1:$port" >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 50); do curl -sf "$url/" >/dev/null && break; sleep 0.1; done

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

rounds="${ROUNDS:-5}"
clients="searchwire opensearch-go"
[ -n "$sw_b" ] && clients="searchwire searchwire-B opensearch-go"
# run CLIENT NAME DOCS: one measured run; prints "wall user sys rss_kib".
run() {
  local client="$1" name="$2" docs="$3" sw_bin="$sw"
  [ "$client" = searchwire-B ] && sw_bin="$sw_b"
  case "$client" in
    searchwire*) /usr/bin/time -f '%e %U %S %M' -o "$work/$name.time" "$sw_bin" ingest "$docs" \
      --index bench --id-field id --url "$url" --progress-every 60s >"$work/$name.out" 2>"$work/$name.err" ;;
    *) /usr/bin/time -f '%e %U %S %M' -o "$work/$name.time" "$work/bulkpeer" -url "$url" \
      -file "$docs" -index bench >"$work/$name.out" 2>"$work/$name.err" ;;
  esac
  cat "$work/$name.time"
}
say "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| documents | client | docs/s | user s | system s | CPU s | docs per CPU-second | vs opensearch-go (median; worst round) | peak RSS MiB |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for size in ${SIZES:-200 2000}; do
  if [ "$size" = 200 ]; then n="${DOCS_SMALL:-300000}"; else n="${DOCS_LARGE:-60000}"; fi
  docs="$work/docs-$size.ndjson"
  "$work/gendocs" -n "$n" -size "$size" >"$docs"
  for client in $clients; do : >"$work/runs-$client"; done
  for r in $(seq "$rounds"); do
    for client in $clients; do
      run "$client" "$client-$size-$r" "$docs" >>"$work/runs-$client"
    done
  done
  # Per round: docs per CPU-second of each client; the Go one is the reference of its round.
  for client in $clients; do
    awk -v n="$n" '{printf "%.3f %.3f %.3f %.3f %s %.0f\n", $1, $2, $3, $2+$3, $4, n/($2+$3)}' \
      "$work/runs-$client" >"$work/per-$client"
  done
  for client in $clients; do
    med() { awk -v c="$1" '{print $c}' "$work/per-$client" | median; }
    wall="$(med 1)"; user="$(med 2)"; sys="$(med 3)"; cpu="$(med 4)"; rss="$(med 5)"
    ratios="$(paste -d' ' "$work/per-$client" "$work/per-opensearch-go" | awk '{printf "%.3f\n", $6/$12}')"
    ratio_med="$(echo "$ratios" | median)"; ratio_min="$(echo "$ratios" | sort -g | head -1)"
    printf '| %s × %s B | %s | %.0f | %s | %s | %s | %.0f | %.2f×; %.2f× | %s |\n' "$n" "$size" "$client" \
      "$(awk -v n="$n" -v w="$wall" 'BEGIN {print n / w}')" "$user" "$sys" "$cpu" \
      "$(awk -v n="$n" -v c="$cpu" 'BEGIN {print n / c}')" "$ratio_med" "$ratio_min" "$((rss / 1024))"
    say "$client $size B per round (wall user sys cpu rss docs/cpu-s): $(tr '\n' ';' <"$work/per-$client")"
  done
  if [ -n "${KEEP_DIR:-}" ]; then
    mkdir -p "$KEEP_DIR"
    for c in $clients; do cp "$work/per-$c" "$KEEP_DIR/per-$c-$size"; done
  fi
done
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
say "server accepted: $(kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null; cat "$work/server.out")"
server_pid=""
