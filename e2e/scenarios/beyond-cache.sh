#!/usr/bin/env bash
# Run a levee-bench scenario inside a memory cgroup (v1) whose limit covers the page cache too, so
# the data set outgrows the cache as in the seeds' "beyond the cache" phase:
#   e2e/scenarios/beyond-cache.sh [scenario] [driver] [limit] [extra levee-bench args...]
#   defaults: e2e/scenarios/beyond_cache.toml levee 1G
# Needs root and a writable /sys/fs/cgroup/memory. The bench binary is engine/target/release/levee-bench
# (`make bench-build`).
set -euo pipefail
scenario=${1:-e2e/scenarios/beyond_cache.toml}
driver=${2:-levee}
limit=${3:-1G}
shift $(( $# < 3 ? $# : 3 ))
bin=${LEVEE_BENCH:-engine/target/release/levee-bench}
root=/sys/fs/cgroup/memory
if [ ! -w "$root" ]; then
  echo "memory cgroup v1 not writable at $root (need root on a cgroup-v1 host)" >&2
  exit 1
fi
cg=$root/levee-bench-$$
mkdir "$cg"
cleanup() { rmdir "$cg" 2>/dev/null || true; }
trap cleanup EXIT
echo "$limit" > "$cg/memory.limit_in_bytes"
# Start the bench in the cgroup (the subshell moves itself in before exec), then report what the
# cgroup saw: peak usage and how often the limit was hit.
( echo $BASHPID > "$cg/cgroup.procs"; exec "$bin" run "$scenario" --driver "$driver" --out "out/beyond-cache-$driver" "$@" )
echo "cgroup $limit: peak $(( $(cat "$cg/memory.max_usage_in_bytes") >> 20 )) MiB, limit hit $(cat "$cg/memory.failcnt") times"
