#!/usr/bin/env bash
# Where a running process's threads are: samples each thread's state (R running or runnable,
# S sleeping, D in uninterruptible I/O) and kernel wait channel from /proc, then counts the
# pairs by thread name. docs/benchmarks.md ("Where the targets stand") quotes one such count.
#   hack/thread-states.sh PID [SAMPLES] [INTERVAL_S]   (default 300 samples, 0.1 s apart)
#   e.g. hack/thread-states.sh "$(pgrep -f 'levee-bench run')" 300
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,6p' "$0" >&2; exit 2; }
pid=$1 samples=${2:-300} interval=${3:-0.1}
[ -d "/proc/$pid" ] || { echo "no process $pid" >&2; exit 1; }
for _ in $(seq 1 "$samples"); do
  [ -d "/proc/$pid" ] || break
  for t in /proc/"$pid"/task/*; do
    # comm may hold spaces; the state is the field after the parenthesised name in stat.
    state=$(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f1) || continue
    echo "$(cat "$t/comm" 2>/dev/null) $state $(cat "$t/wchan" 2>/dev/null || true)"
  done
  sleep "$interval"
done | sort | uniq -c | sort -rn
