#!/usr/bin/env bash
# Build the e2e cluster's own images (OCI archives, no container engine) into $LEVEE_CACHE/e2e/images:
#   pause.tar        docker.io/library/levee-e2e-pause:1   the pod sandbox (containerd's sandbox_image)
#   bench.tar        docker.io/library/levee-bench:e2e     levee-bench (engine/crates/bench) for the
#                    in-cluster load Job; only with `images.sh bench BENCH_BIN`
# The bench binary is the release build of bench.mk (dynamically linked: RocksDB, LevelDB, libstdc++),
# so its shared libraries (ldd), the dynamic loader and a TTF font for summary.png go into the layer too.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LEVEE_CACHE=${LEVEE_CACHE:-$HOME/.cache/levee}
GO=${GO:-go}
out=$LEVEE_CACHE/e2e/images
tools=$LEVEE_CACHE/e2e/tools
mkdir -p "$out" "$tools"
say() { printf '\033[1me2e-images:\033[0m %s\n' "$*"; }

# The tools are rebuilt when their source changes (cheap: Go build cache).
(cd "$here/.." && "$GO" build -trimpath -o "$tools/ociimage" ./kube/ociimage &&
  CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$tools/pause" ./kube/pause)

if [ ! -f "$out/pause.tar" ] || ! cmp -s "$tools/pause" "$out/pause.bin"; then
  cp "$tools/pause" "$out/pause.bin"
  "$tools/ociimage" -out "$out/pause.tar" -ref docker.io/library/levee-e2e-pause:1 -entrypoint /pause -user 65535:65535 "$tools/pause=/pause"
else
  say "pause image cached"
fi

if [ "${1:-}" = bench ]; then
  bin=${2:?usage: images.sh bench BENCH_BIN}
  [ -x "$bin" ] || { echo "no $bin (run make bench-build)" >&2; exit 1; }
  if [ -f "$out/bench.tar" ] && [ "$out/bench.tar" -nt "$bin" ]; then
    say "bench image cached ($out/bench.tar newer than $bin)"
  else
    files=("$bin=/usr/local/bin/levee-bench")
    # ldd lines: "libx.so => /lib/.../libx.so (0x...)" and the loader "/lib64/ld-linux-x86-64.so.2 (0x...)".
    while read -r lib; do files+=("$lib"); done < <(ldd "$bin" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^\s*\(\/[^ ]*\) (0x.*/\1/p' | sort -u)
    font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
    [ -f "$font" ] || "$here/../../hack/ensure-debs.sh" fonts-dejavu-core
    files+=("$font")
    "$tools/ociimage" -out "$out/bench.tar" -ref docker.io/library/levee-bench:e2e -entrypoint /usr/local/bin/levee-bench \
      -env LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu -env LEVEE_BENCH_FONT=$font "${files[@]}"
  fi
fi
