#!/usr/bin/env bash
# The idle footprint of a fresh node: starts `levee serve` alone (no member list) on an empty
# data directory with the given ring size and otherwise default settings (1 Mi AAE segments per
# vnode, as a pod gets them), waits until /readyz answers and SETTLE seconds more, then prints
# VmRSS and Threads from /proc/<pid>/status and stops the node. docs/node.md ("Memory and
# threads") quotes its output.
#
#   hack/footprint.sh [RING_SIZE (64)] [SETTLE_SECS (5)]
#
# LEVEE_BIN names the binary (default: engine/target/release/levee). With KEEP=DIR the node's
# directory is DIR and the node is left running (its pid is printed), e.g. to write data into it
# and read the figures again.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEVEE_BIN:-$here/engine/target/release/levee}
ring=${1:-64}
settle=${2:-5}
dir=${KEEP:-$(mktemp -d)}
mkdir -p "$dir"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
grpc=$(port)
metrics=$(port)
cat > "$dir/levee.toml" <<EOF
[cluster]
ring_size = $ring
EOF
"$bin" serve --config "$dir/levee.toml" --data-dir "$dir/data" --node-name footprint \
  --listen "127.0.0.1:$grpc" --metrics-listen "127.0.0.1:$metrics" > "$dir/log" 2>&1 &
pid=$!
stop() { kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; }
[ -n "${KEEP:-}" ] || trap 'stop; rm -rf "$dir"' EXIT
for _ in $(seq 1 600); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$metrics/readyz', timeout=1)" 2>/dev/null; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || { tail -n 20 "$dir/log" >&2; exit 1; }
  sleep 0.1
done
sleep "$settle"
echo "ring_size=$ring settle=${settle}s pid=$pid grpc=127.0.0.1:$grpc metrics=127.0.0.1:$metrics"
grep -E '^(VmRSS|RssAnon|RssFile|Threads):' "/proc/$pid/status"
