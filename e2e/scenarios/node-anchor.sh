#!/usr/bin/env bash
# The node path against its anchor, back to back on this machine: the same scenario through the
# `grpc` driver against a fresh `levee serve` (default config, its own data directory), then
# against `levee-bench anchor` (levee.v1.KV answered from memory by a bare tonic server with the
# node's transport settings). Prints ops/s over the run and its second half for each, the
# node ÷ anchor ratios and each side's CPU seconds (the server's, from /proc).
#   e2e/scenarios/node-anchor.sh [scenario] [levee-bench run args...]
#   default: e2e/scenarios/8k_nosync.toml; e.g. --duration 60s
# NODE_ARGS: more `levee serve` options, e.g. NODE_ARGS="--sync-on-write true" (a node alone runs
# n_val 1: one vnode write per PUT, one HEAD and one GET per read).
# Binaries: engine/target/release/{levee,levee-bench} (`make bench-build`), or LEVEE / LEVEE_BENCH.
set -euo pipefail
scenario=${1:-e2e/scenarios/8k_nosync.toml}
shift $(( $# < 1 ? $# : 1 ))
bench=${LEVEE_BENCH:-engine/target/release/levee-bench}
levee=${LEVEE:-engine/target/release/levee}
for b in "$bench" "$levee"; do
  [ -x "$b" ] || { echo "$b is missing: run make bench-build" >&2; exit 1; }
done
work=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# utime + stime of a pid, in seconds.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# Start "$@" with stdout to a file, wait for its first line; sets server (pid) and addr.
start() {
  local log=$work/$1.out; shift
  "$@" > "$log" 2> "$work/server.err" &
  server=$!
  for _ in $(seq 100); do [ -s "$log" ] && break; sleep 0.1; done
  [ -s "$log" ] || { echo "the server printed nothing; its stderr:" >&2; cat "$work/server.err" >&2; exit 1; }
  addr=$(sed -n '1{s/.*gRPC on \([^, ]*\).*/\1/;s/^anchor listening on //;p}' "$log")
}

# ops/s over the run and over its second half (the windows that start at or after half time;
# 0 when the run is a single window), from a run's summary.csv.
rates() {
  awk -F, 'NR > 1 { t[NR] = $1; w[NR] = $2; ok[NR] = $4; n = NR } END {
    total = 0; for (i = 2; i <= n; i++) total += ok[i];
    s = 0; d = 0; for (i = 2; i <= n; i++) if (t[i] - w[i] >= t[n] / 2 - 0.001) { s += ok[i]; d += w[i] }
    printf "%.0f %.0f", total / t[n], (d > 0 ? s / d : 0) }' "$1/summary.csv"
}

declare -A run cpu_s
for side in node anchor; do
  if [ "$side" = node ]; then
    start node "$levee" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$work/data" ${NODE_ARGS:-}
  else
    start anchor "$bench" anchor --listen 127.0.0.1:0
  fi
  before=$(cpu "$server")
  "$bench" run "$scenario" --driver grpc --address "http://$addr" --quiet --out "$work/$side" "$@" > /dev/null
  cpu_s[$side]=$(awk -v a="$(cpu "$server")" -v b="$before" 'BEGIN { printf "%.1f", a - b }')
  kill "$server"; wait "$server" 2>/dev/null || true; server=
  run[$side]=$(rates "$work/$side")
  mkdir -p out && rm -rf "out/node-anchor-$side" && cp -r "$work/$side" "out/node-anchor-$side"
done
read -r n_all n_half <<< "${run[node]}"
read -r a_all a_half <<< "${run[anchor]}"
printf '%-8s %10s %12s %12s\n' side "ops/s" "2nd half" "server CPU s"
printf '%-8s %10s %12s %12s\n' node "$n_all" "$n_half" "${cpu_s[node]}"
printf '%-8s %10s %12s %12s\n' anchor "$a_all" "$a_half" "${cpu_s[anchor]}"
awk -v a="$n_all" -v b="$a_all" -v c="$n_half" -v d="$a_half" \
  'BEGIN { printf "node / anchor: %.2fx over the run, %.2fx over the second half\n", a / b, (d > 0 ? c / d : 0) }'
echo "runs kept in out/node-anchor-node and out/node-anchor-anchor"
