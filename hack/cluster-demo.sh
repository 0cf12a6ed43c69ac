#!/usr/bin/env bash
# make cluster-demo: three local nodes from hack/local-cluster.sh (n_val 3). Shows the member list
# one node runs with, checks that every node computes the same claim, writes through one node and
# reads through the others, kills one node with SIGKILL, writes while it is down, starts it again
# and reads the write through it (hinted handoff), shows concurrent writes kept as siblings, then
# stops the cluster.
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

echo "== put through n1, get through n2 and n3"
"$bin" put demo greeting hello --addr "$(addr 0)" | sed 's/^/   n1: /'
for i in 1 2; do
  echo "   n$((i + 1)): $("$bin" get demo greeting --addr "$(addr "$i")")"
done

echo "== SIGKILL n2; a write at w=2 while it is down"
"$lc" kill "$dir" n2
"$bin" put demo greeting "hello again" --w 2 --addr "$(addr 0)" | sed 's/^/   n1: /'
echo "== start n2 again: the write reaches it (hinted handoff from n1/n3)"
"$lc" start "$dir" n2 | sed 's/^/   /'
[ "$("$bin" admin ring --json --addr "$(addr 1)")" = "$ref" ] && echo "   n2: same claim after the restart"
sleep 2
echo "   n2 (r=1: the first replica to answer): $("$bin" get demo greeting --r 1 --addr "$(addr 1)")"

echo "== concurrent blind writes through two nodes under the siblings type (bucket type 'siblings')"
"$bin" put carts alice apples --bucket-type siblings --addr "$(addr 0)" > /dev/null
"$bin" put carts alice pears --bucket-type siblings --addr "$(addr 2)" > /dev/null
"$bin" get carts alice --bucket-type siblings --json --addr "$(addr 1)" | sed 's/^/   /'
echo "== done; logs and data in $dir"
