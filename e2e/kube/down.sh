#!/usr/bin/env bash
# make e2e-down: stop and remove everything e2e/kube/up.sh started. Idempotent: safe to run when the
# cluster is down, half up, or its processes crashed.
#   pods' processes (every process in the node's kubepods cgroups) and containerd shims of our socket;
#   kubelet, kube-proxy, coredns, containerd, scheduler, controller-manager, apiserver, etcd (pid files);
#   mounts under the run directory and dead CNI network namespaces; the pod bridge and the dummy
#   interface; the iptables chains kube-proxy, kubelet and the CNI plugins made (KUBE-*, CNI-*);
#   the kubepods cgroups; the sysctls up.sh changed (restored); the run directory.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/env.sh
. "$here/env.sh"
[ "$(id -u)" = 0 ] || { echo "e2e-down needs root" >&2; exit 1; }
t0=$SECONDS
pids=$E2E_RUN/pids

# stop NAME...: SIGTERM to each (only the pids this run recorded), up to 10 s for all, then SIGKILL.
stop() {
  local name p t=$SECONDS
  local -A live=() killed=()
  for name in "$@"; do
    [ -f "$pids/$name.pid" ] || continue
    p=$(cat "$pids/$name.pid")
    rm -f "$pids/$name.pid"
    if kill -0 "$p" 2>/dev/null && grep -q . "/proc/$p/cmdline" 2>/dev/null; then
      kill "$p" 2>/dev/null && live[$name]=$p && killed[$name]=$p
    fi
  done
  for _ in $(seq 100); do
    for name in "${!live[@]}"; do kill -0 "${live[$name]}" 2>/dev/null || unset "live[$name]"; done
    [ ${#live[@]} = 0 ] && break
    sleep 0.1
  done
  for name in "${!live[@]}"; do
    kill -9 "${live[$name]}" 2>/dev/null && e2e_say "killed $name (pid ${live[$name]}): no exit 10 s after SIGTERM"
  done
  local stopped=("${!killed[@]}")
  [ ${#stopped[@]} = 0 ] || e2e_say "stopped ${stopped[*]} ($((SECONDS - t)) s)"
}

# kubepods cgroups of every v1 controller (and the unified/systemd named hierarchies).
kubepods_dirs() { for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do [ -d "$c" ] && echo "$c"; done; }

stop kubelet kube-proxy

# Pods: kill the containers through containerd while it runs, then sweep what is left in kubepods.
if [ -S "$CONTAINERD_SOCK" ] && e2e_ctr version >/dev/null 2>&1; then
  for t in $(e2e_ctr tasks ls -q 2>/dev/null); do e2e_ctr tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1; done
  sleep 1
  for t in $(e2e_ctr tasks ls -q 2>/dev/null); do e2e_ctr tasks delete -f "$t" >/dev/null 2>&1; done
fi
for round in 1 2 3; do
  left=$(for d in $(kubepods_dirs); do find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -u)
  [ -z "$left" ] && break
  [ $round = 1 ] && e2e_say "killing $(echo "$left" | wc -w) leftover pod processes"
  # shellcheck disable=SC2086 # one pid per word
  kill -9 $left 2>/dev/null
  sleep 0.5
done
# containerd-shim-runc-v2 processes serving our containerd (their -address is our socket).
for p in $(ps -eo pid=,args= | awk -v s="$CONTAINERD_SOCK" 'index($0, "containerd-shim") && index($0, s) {print $1}'); do
  kill -9 "$p" 2>/dev/null && e2e_say "killed shim $p"
done

stop coredns containerd kube-scheduler kube-controller-manager
stop kube-apiserver
stop etcd

# Mounts under the run directory (container rootfs, pod volumes, sandbox shm), deepest first.
if [ -d "$E2E_RUN" ]; then
  n=0
  while read -r m; do umount -l "$m" 2>/dev/null && n=$((n + 1)); done < <(awk -v r="$E2E_RUN" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r)
  [ $n -gt 0 ] && e2e_say "unmounted $n mounts"
fi
# CNI network namespaces of containerd's CRI that no process uses any more.
for ns in /run/netns/cni-*; do
  [ -e "$ns" ] || continue
  name=${ns##*/}
  if [ -z "$(ip netns pids "$name" 2>/dev/null)" ]; then
    umount -l "$ns" 2>/dev/null; rm -f "$ns" && e2e_say "removed netns $name"
  fi
done

for l in "$POD_BRIDGE" "$NODE_IF"; do
  ip link show "$l" >/dev/null 2>&1 && ip link del "$l" && e2e_say "deleted interface $l"
done

# iptables: kube-proxy's cleanup, then any KUBE-*/CNI-* chain (kubelet canaries, CNI masquerade and
# portmap chains) and the rules that jump to them. Nothing else on these machines uses those prefixes.
sweep() { # IPT
  local ipt=$1 t
  command -v "$ipt" >/dev/null || return 0
  for t in filter nat mangle; do
    "$ipt-save" -t "$t" 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | grep -vE '^-A (KUBE|CNI)-' | sed 's/^-A /-D /' |
      while read -r rule; do eval "$ipt -t $t $rule" 2>/dev/null; done
    for c in $("$ipt-save" -t "$t" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do "$ipt" -t "$t" -F "$c" 2>/dev/null; done
    for c in $("$ipt-save" -t "$t" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do "$ipt" -t "$t" -X "$c" 2>/dev/null; done
  done
}
# (Read the rules first: `iptables-save | grep -q` trips pipefail when grep exits early.)
rules=$( { iptables-save; ip6tables-save; } 2>/dev/null || true)
if grep -qE '^:(KUBE|CNI)-' <<<"$rules"; then
  [ -x "$K8S_BIN/kube-proxy" ] && "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1
  sweep iptables; sweep ip6tables
  e2e_say "removed KUBE-*/CNI-* iptables chains"
fi

# kubepods cgroups, deepest first (empty now).
for d in $(kubepods_dirs); do find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
left=$(kubepods_dirs)
[ -z "$left" ] || e2e_say "WARNING: cgroups not removed: $left"

if [ -f "$E2E_RUN/sysctl.saved" ]; then
  while read -r s v; do echo "$v" >"/proc/sys/$s"; done <"$E2E_RUN/sysctl.saved"
  e2e_say "restored sysctls ($(tr '\n' ' ' <"$E2E_RUN/sysctl.saved"))"
fi
if [ -d "$E2E_RUN" ]; then
  if awk -v r="$E2E_RUN" 'index($2, r) == 1' /proc/mounts | grep -q .; then
    echo "e2e-down: mounts still under $E2E_RUN; not removing it" >&2; exit 1
  fi
  rm -rf --one-file-system "$E2E_RUN"
  e2e_say "removed $E2E_RUN"
fi
e2e_say "down ($((SECONDS - t0)) s)"
