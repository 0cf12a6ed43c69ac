#!/usr/bin/env bash
# Builds a release binary of the engine workspace unless the one there is newer than every engine
# source (.rs, .proto, Cargo.toml, Cargo.lock):
#   hack/fresh-bin.sh BIN CARGO_BUILD_ARGS...     e.g. engine/target/release/levee -p levee-node --bin levee
# Why: make test's engine build (`cargo test --release --workspace`) makes engine/target/release/levee
# and levee-bench, but `cargo build -p <one crate>` resolves features for that crate alone, so cargo
# compiles the workspace's crates again with another feature set (about two minutes on each clean
# clone, for a binary that is already there and current).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:?usage: hack/fresh-bin.sh BIN CARGO_BUILD_ARGS...}
shift
if [ -x "$bin" ] && [ -z "$(find "$root/engine/crates" "$root/engine/Cargo.toml" "$root/engine/Cargo.lock" \
    \( -name '*.rs' -o -name '*.proto' -o -name Cargo.toml -o -name Cargo.lock \) -newer "$bin" -print -quit)" ]; then
  echo "$bin is newer than every engine source: not rebuilt"
  exit 0
fi
cd "$root/engine"
exec ${CARGO:-cargo} build --release "$@"
