#!/usr/bin/env bash
# Alternated A/B runs of levee alone: one scenario, two levee-bench binaries (an old and a new
# build), PAIRS pairs run old then new, each printing ops/s over the run and its second half.
# Alternating spreads the machine's drift over both sides (docs/benchmarks.md quotes such pairs).
#   hack/ab-levee.sh OLD_BIN NEW_BIN SCENARIO DURATION PAIRS [OUT]
#   e.g. hack/ab-levee.sh /tmp/levee-bench.old engine/target/release/levee-bench \
#          e2e/scenarios/16k_nosync.toml 60s 2
# Build the old side first (check it out, `make bench-build`, copy engine/target/release/levee-bench
# away), then the new one. Run nothing else meanwhile. OUT (default out/ab) keeps each run's CSVs.
# OLD_ARGS / NEW_ARGS: extra `levee-bench run` options for one side (one binary, two settings:
#   OLD_ARGS="--journal-spares 0" hack/ab-levee.sh B B e2e/scenarios/8k_sync.toml 60s 3).
# AB_DEVICE=vda: also print the GB that block device wrote during each run (/sys/block/*/stat).
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
old=$1 new=$2 scenario=$3 duration=$4 pairs=$5 out=${6:-out/ab}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "$b is not an executable" >&2; exit 1; }; done
[ -f "$scenario" ] || { echo "no scenario $scenario" >&2; exit 1; }
case $pairs in ''|*[!0-9]*|0) echo "PAIRS must be a positive number, not '$pairs'" >&2; exit 1;; esac
stem=$(basename "$scenario" .toml)
# Sectors the block device has written (512 bytes each; 0 without AB_DEVICE).
sectors() { if [ -n "${AB_DEVICE:-}" ]; then awk '{print $7}' "/sys/block/$AB_DEVICE/stat"; else echo 0; fi; }
for i in $(seq 1 "$pairs"); do
  for side in old new; do
    bin=$old; [ "$side" = new ] && bin=$new
    dir=$out/$stem-$side-$i
    mkdir -p "$out"
    args=${OLD_ARGS:-}; [ "$side" = new ] && args=${NEW_ARGS:-}
    s0=$(sectors)
    # shellcheck disable=SC2086 # the extra options are words
    "$bin" run "$scenario" --driver levee --duration "$duration" --quiet --out "$dir" --force $args \
      > /dev/null 2> "$dir.stderr" || { cat "$dir.stderr" >&2; exit 1; }
    s1=$(sectors)
    rm -rf "$dir/data"
    # summary.csv: elapsed, window, total, successful, failed (basho_bench's columns).
    awk -F, -v side="$side" -v i="$i" -v dev="${AB_DEVICE:-}" -v s0="$s0" -v s1="$s1" '
      NR > 1 { t[NR] = $1; w[NR] = $2; ok[NR] = $4; n = NR }
      END {
        half = t[n] / 2
        for (r = 2; r <= n; r++) {
          sw += w[r]; so += ok[r]
          if (t[r] > half) { hw += w[r]; ho += ok[r] }
        }
        printf "%s %d: run %.1f k ops/s, 2nd half %.1f k ops/s", side, i, so / sw / 1000, ho / hw / 1000
        if (dev != "") printf ", %s wrote %.1f GB", dev, (s1 - s0) * 512 / 1e9
        printf "\n"
      }' "$dir/summary.csv"
  done
done
