#!/usr/bin/env bash
# Throughput and CPU per operation of levee over gRPC: one node (n_val 1) against a 3-node local
# cluster (n_val 3, w = r = 2: the default quorums), same box, same scenario, one after the other.
#
#   hack/cluster-bench.sh [SCENARIO] [OUT]     (make bench-cluster)
#
# SCENARIO defaults to e2e/scenarios/cluster_mix.toml, OUT to out/cluster-bench. Prints a table:
# whole-run and second-half ops/s, and the nodes' CPU seconds (user + system, all node processes)
# per 1,000 operations. The client (levee-bench) runs on the same cores.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
scenario=${1:-$here/e2e/scenarios/cluster_mix.toml}
out=${2:-$here/out/cluster-bench}
levee=${LEVEE_BIN:-$here/engine/target/release/levee}
bench=${LEVEE_BENCH_BIN:-$here/engine/target/release/levee-bench}
[ -x "$levee" ] || { echo "cluster-bench: build $levee first (cargo build --release -p levee-node)" >&2; exit 1; }
[ -x "$bench" ] || { echo "cluster-bench: build $bench first (cargo build --release -p levee-bench)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'LEVEE_BIN=$levee bash "$here/hack/local-cluster.sh" down "$tmp/c" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
mkdir -p "$out"

# cpu_ticks PID... : user + system clock ticks of the processes.
cpu_ticks() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}

# second_half DIR: ops/s over the second half of the run (summary.csv windows).
second_half() {
  awk -F', *' 'NR > 1 { t[NR] = $1; n[NR] = $4; last = NR }
    END { half = t[last] / 2; s = 0; d = 0
          for (i = 2; i <= last; i++) if (t[i] > half) { s += n[i]; d += t[i] - t[i-1] }
          printf "%.0f", s / d }' "$1/summary.csv"
}

run_case() { # NAME NODES NVAL
  local name=$1 nodes=$2 nval=$3
  echo "== $name: $nodes node(s), n_val $nval" >&2
  LEVEE_BIN=$levee bash "$here/hack/local-cluster.sh" up "$tmp/c" "$nodes" --ring-size 16 --n-val "$nval" > "$tmp/up"
  local addrs pids
  addrs=$(awk '{print $2}' "$tmp/up" | paste -sd,)
  pids=$(awk '{print $4}' "$tmp/up")
  local before after
  before=$(cpu_ticks $pids)
  "$bench" run "$scenario" --driver grpc --address "$addrs" --out "$out/$name" --force --quiet > "$tmp/run.txt"
  after=$(cpu_ticks $pids)
  LEVEE_BIN=$levee bash "$here/hack/local-cluster.sh" down "$tmp/c" >/dev/null
  rm -rf "$tmp/c"
  local ops secs
  ops=$(awk -F= '$1 == "successful" {print $2}' "$out/$name/meta.txt")
  secs=$(awk -F= '$1 == "seconds" {print $2}' "$out/$name/meta.txt")
  local hz; hz=$(getconf CLK_TCK)
  awk -v n="$name" -v ops="$ops" -v s="$secs" -v half="$(second_half "$out/$name")" \
      -v ticks="$((after - before))" -v hz="$hz" -v err="$(awk -F= '$1 == "failed" {print $2}' "$out/$name/meta.txt")" \
    'BEGIN { printf "| %s | %.0f | %s | %s | %.2f |\n", n, ops / s, half, err, (ticks / hz) / (ops / 1000) }'
}

{
  echo "scenario: $(basename "$scenario"); $(nproc) cores; client and nodes on the same box"
  echo
  echo "| setup | ops/s (whole run) | ops/s (second half) | errors | node CPU s per 1,000 ops |"
  echo "|---|---:|---:|---:|---:|"
  run_case one-node 1 1
  run_case three-nodes-n3 3 3
} | tee "$out/table.md"
