#!/usr/bin/env bash
# image-test: prove the levee image archive is importable and runs, without Docker.
#   image/test.sh ARCHIVE IMAGE_REF [OPERATOR_ARCHIVE OPERATOR_REF]
# Starts a private containerd (own root, state and socket under a temp dir, CRI plugin disabled),
# `ctr -n k8s.io images import`s the archive, checks `ctr images ls`, then runs the image with runc:
#   1. `levee --version` (command override);
#   2. the image's default command (`levee serve`: gRPC :8087, metrics :8098, data under
#      /var/lib/levee/data) in its own network namespace, as uid 65532; from inside the container
#      (`ctr task exec`) the levee CLI puts, gets and reads the status; /readyz answers 200;
#      SIGTERM stops it with exit 0 after flushing the stores;
#   3. with OPERATOR_ARCHIVE: imports the operator image and runs its entrypoint (`/manager --help`,
#      which needs no API server) and checks it lists its flags.
# Everything (containerd, shims, containers, mounts, the temp dir) is torn down on exit.
# Needs root; installs the Debian packages containerd and runc when missing.
set -euo pipefail

archive=${1:?usage: image/test.sh ARCHIVE IMAGE_REF}
ref=${2:?usage: image/test.sh ARCHIVE IMAGE_REF}
op_archive=${3:-}
op_ref=${4:-}
ns=k8s.io
name=levee-image-test-$$

say() { printf 'image-test: %s\n' "$*"; }
fail() { printf 'image-test: FAIL: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (containerd and runc)"
[ -f "$archive" ] || fail "no archive $archive (run make image)"
if [ -n "$op_archive" ]; then
  [ -n "$op_ref" ] || fail "usage: image/test.sh ARCHIVE IMAGE_REF [OPERATOR_ARCHIVE OPERATOR_REF]"
  [ -f "$op_archive" ] || fail "no archive $op_archive (run make image)"
fi

missing=""
for p in containerd runc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing$missing"
  apt-get install -y $missing || { apt-get update && apt-get install -y $missing; }
fi

# containerd 1.6 keeps shim sockets and runc state under /run/containerd, and ctr puts containers in
# the <namespace> cgroup: remove those afterwards when this script created them.
new_run_dir=""
[ -e /run/containerd ] || new_run_dir=/run/containerd
new_cgroups=()
for c in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do [ -e "$c$ns" ] || new_cgroups+=("$c$ns"); done

tmp=$(mktemp -d /tmp/levee-ctrd.XXXXXX)
sock=$tmp/containerd.sock
containerd_pid=""
run_pid=""
ctr() { command ctr --address "$sock" --namespace "$ns" "$@"; }

cleanup() {
  local rc=$?
  set +e
  if [ -n "$containerd_pid" ]; then
    ctr task kill -s SIGKILL "$name" >/dev/null 2>&1
    [ -n "$run_pid" ] && wait "$run_pid" 2>/dev/null
    ctr task delete -f "$name" >/dev/null 2>&1
    ctr containers delete "$name" >/dev/null 2>&1
    for c in $(ctr containers list -q 2>/dev/null); do
      ctr task delete -f "$c" >/dev/null 2>&1; ctr containers delete "$c" >/dev/null 2>&1
    done
    kill "$containerd_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$containerd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$containerd_pid" 2>/dev/null
    wait "$containerd_pid" 2>/dev/null
  fi
  # Snapshot and rootfs mounts left under the temp dir, deepest first.
  grep -o " $tmp[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$tmp"
  [ -n "$new_run_dir" ] && find "$new_run_dir" -depth -type d -empty -delete 2>/dev/null
  for c in "${new_cgroups[@]}"; do [ -d "$c" ] && rmdir "$c" 2>/dev/null; done
  [ $rc = 0 ] || { say "containerd log (last 20 lines):"; tail -n 20 "$tmp.log" 2>/dev/null; }
  rm -f "$tmp.log"
  exit $rc
}
trap cleanup EXIT

cat >"$tmp/config.toml" <<EOF
version = 2
root = "$tmp/root"
state = "$tmp/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$tmp/opt"
EOF

start=$EPOCHREALTIME
containerd --config "$tmp/config.toml" >"$tmp.log" 2>&1 &
containerd_pid=$!
for _ in $(seq 100); do
  ctr version >/dev/null 2>&1 && break
  kill -0 "$containerd_pid" 2>/dev/null || fail "containerd exited"
  sleep 0.1
done
ctr version >/dev/null 2>&1 || fail "containerd did not answer on $sock"
say "private containerd up in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s ($sock)"

ctr images import "$archive"
ctr images ls | tee "$tmp/images" | sed 's/^/  /'
grep -q "^$ref " "$tmp/images" || fail "$ref not listed by ctr images ls"

# 1. A command override: the binary runs from the image.
version=$(ctr run --rm "$ref" "$name-v" levee --version)
say "in the container: $version"
[[ $version == levee\ * ]] || fail "unexpected version output: $version"

# 2. The default command, detached from this shell through a background ctr run.
ctr run --rm "$ref" "$name" >"$tmp/serve.out" 2>"$tmp/serve.err" &
run_pid=$!
for _ in $(seq 100); do
  grep -q 'serving gRPC on' "$tmp/serve.out" 2>/dev/null && break
  kill -0 "$run_pid" 2>/dev/null || { cat "$tmp/serve.err" >&2; fail "levee serve exited"; }
  sleep 0.1
done
grep -q 'serving gRPC on 0.0.0.0:8087, metrics on 0.0.0.0:8098' "$tmp/serve.out" \
  || { cat "$tmp/serve.out" "$tmp/serve.err" >&2; fail "default command did not serve on :8087/:8098"; }
say "$(head -n1 "$tmp/serve.out")"

pid=$(ctr task ls | awk -v n="$name" '$1 == n { print $2 }')
[ -n "$pid" ] || fail "no task pid"
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = 65532 ] || fail "node runs as uid $uid, want 65532"
say "node runs as uid $uid"

# ctr sets up no network: the container's namespace has only a loopback, and it starts down.
nsenter -t "$pid" -n ip link set lo up

ex() { ctr task exec --exec-id "x$RANDOM" "$name" levee "$@"; }
ex put smoke hello world >/dev/null
got=$(ex get smoke hello)
[ "$got" = world ] || fail "get returned '$got'"
ex admin status | sed 's/^/  /'
ready=$(nsenter -t "$pid" -n bash -c 'exec 3<>/dev/tcp/127.0.0.1/8098; printf "GET /readyz HTTP/1.0\r\n\r\n" >&3; head -n1 <&3')
[[ $ready == *" 200 "* ]] || fail "/readyz: $ready"
say "put/get through the CLI in the container, /readyz: ${ready%$'\r'}"

ctr task kill -s SIGTERM "$name"
rc=0
wait "$run_pid" || rc=$?
run_pid=""
[ $rc = 0 ] || { cat "$tmp/serve.err" >&2; fail "levee serve exited $rc after SIGTERM"; }
grep -q 'stores flushed and closed' "$tmp/serve.err" || fail "no clean shutdown in the log"
say "SIGTERM: exit 0, stores flushed and closed"
say "OK: $archive imports and runs"

if [ -n "$op_archive" ]; then
  ctr images import "$op_archive"
  # Listed into a file first: with pipefail, `grep -q` quitting early can SIGPIPE ctr and fail a
  # pipeline whose image is there.
  ctr images ls -q > "$tmp/op-images"
  grep -qx "$op_ref" "$tmp/op-images" || fail "$op_ref not listed by ctr images ls"
  # The image's entrypoint with --help: Go's flag package prints the flags and exits 0.
  help=$(ctr run --rm "$op_ref" "$name-op" /manager --help 2>&1) || fail "/manager --help failed: $help"
  for f in -leader-elect -metrics-bind-address -metrics-secure -health-probe-bind-address; do
    grep -q -- "$f" <<<"$help" || fail "/manager --help does not list $f:"$'\n'"$help"
  done
  say "operator image: /manager --help lists its flags"
  say "OK: $op_archive imports and runs"
fi
