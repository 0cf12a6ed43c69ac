#!/usr/bin/env bash
# Keeps cargo's build output outside the checkout: makes engine/target a symlink to
# $LEVEE_CACHE/cargo/<hash of this checkout's path> when engine/target does not exist yet, so a
# fresh clone at the same path (CI's clean clone) reuses the dependencies compiled by the last one
# (the workspace's own crates still rebuild: their files are new). An existing engine/target
# (a directory or a link) is left alone; LEVEE_CARGO_IN_CLONE=1 skips the link. Run by the
# Makefile on every invocation; prints nothing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
link=$root/engine/target
if [ -e "$link" ] || [ -L "$link" ] || [ -n "${LEVEE_CARGO_IN_CLONE:-}" ]; then
  exit 0
fi
dir=${LEVEE_CACHE:-$HOME/.cache/levee}/cargo/$(printf %s "$root" | sha256sum | cut -c1-12)
mkdir -p "$dir"
ln -s "$dir" "$link"
