#!/usr/bin/env bash
# make cluster-demo: three local nodes from hack/local-cluster.sh. Shows the member list one node
# runs with, checks that every node computes the same claim, kills one node with SIGKILL and starts
# it again, then stops the cluster. Replication (the coordinator) is not built yet: each node still
# serves the whole ring from its own stores.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEVEE_BIN:-$here/engine/target/release/levee}
dir=${CLUSTER_DIR:-$here/out/cluster-demo}
lc=$here/hack/local-cluster.sh

[ ! -e "$dir/members.json" ] || "$lc" down "$dir" || true
rm -rf "$dir"
trap '"$lc" down "$dir"' EXIT
echo "== starting 3 nodes in $dir (ring_size 64, n_val 3)"
mapfile -t nodes < <("$lc" up "$dir" 3 --ring-size 64 --n-val 3)
printf '   %s\n' "${nodes[@]}"
addr() { echo "${nodes[$1]}" | awk '{print $2}'; }

echo "== the member list n1 runs with"
"$bin" admin members --addr "$(addr 0)"

echo "== the claim on each node"
ref=$("$bin" admin ring --json --addr "$(addr 0)")
for i in 0 1 2; do
  got=$("$bin" admin ring --json --addr "$(addr "$i")")
  [ "$got" = "$ref" ] || { echo "n$((i + 1)) computes another claim:"; echo "$got"; exit 1; }
  echo "   n$((i + 1)): same claim as n1"
done

echo "== SIGKILL n2, start it again"
"$lc" kill "$dir" n2
"$lc" start "$dir" n2 | sed 's/^/   /'
[ "$("$bin" admin ring --json --addr "$(addr 1)")" = "$ref" ] && echo "   n2: same claim after the restart"
echo "== done; logs and data in $dir"
