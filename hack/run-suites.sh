#!/usr/bin/env bash
# Runs the named make targets one after another (make test's suites), stops at the first that fails,
# and prints each one's wall time, so a slow `make test` says where its time went:
#   hack/run-suites.sh lint engine-test ...
# The table also goes to out/test-times.txt. MAKE (from the calling make) runs each target.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
make_cmd=${MAKE:-make}
times=()
total_start=$SECONDS
report() {
  local rc=$1
  {
    printf '\n%-16s %8s\n' suite seconds
    for t in "${times[@]}"; do printf '%-16s %8s\n' "${t% *}" "${t##* }"; done
    printf '%-16s %8s\n' total $((SECONDS - total_start))
  } | tee "$root/out/test-times.txt"
  exit "$rc"
}
mkdir -p "$root/out"
for suite in "$@"; do
  start=$SECONDS
  printf '\033[1m=== make %s\033[0m\n' "$suite"
  rc=0
  "$make_cmd" --no-print-directory -C "$root" "$suite" || rc=$?
  times+=("$suite $((SECONDS - start))")
  if [ "$rc" -ne 0 ]; then
    echo "make test: suite $suite failed (rc=$rc)" >&2
    report "$rc"
  fi
done
report 0
