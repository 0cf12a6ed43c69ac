#!/usr/bin/env bash
# The local-cluster harness: N real `levee serve` processes on loopback, each with its own data
# directory and config, membership by one shared members file (JSON, docs/cluster.md). Used by the
# node's tests (engine/crates/node/tests/integration/local_cluster.rs) and by `make cluster-demo`.
#
#   local-cluster.sh up DIR N [--ring-size R] [--n-val V] [--sync] [--delete-delay-secs S]
#                             [--handoff-bytes-per-sec B] [--handoff-busy-percent P]
#                             [--aae-exchange-secs S]
#                             [--journal-segment-bytes B]
#                                   start n1..nN; prints one line per node: name address metrics pid
#   local-cluster.sh start DIR NAME start a stopped node again (same config, same ports)
#   local-cluster.sh add DIR NAME   prepare a new node (n1's config, free ports; not started,
#                                   not a member): name it in a members list, then start it
#   local-cluster.sh kill DIR NAME [SIGNAL]   signal one node (default KILL) and wait for it to exit
#   local-cluster.sh members DIR VERSION NAME...   rewrite the members file with these members
#   local-cluster.sh down DIR       stop every node (SIGTERM, then SIGKILL after 10 s)
#
# LEVEE_BIN names the binary (default: engine/target/release/levee). Everything lives under DIR:
# DIR/members.json, DIR/<name>/{levee.toml,data/,log,pid,ports}. Bucket types besides the default:
# `siblings` (conflict = "siblings") and, with n_val >= 2, `pair` (n_val = 2).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEVEE_BIN:-$here/engine/target/release/levee}

die() { echo "local-cluster: $*" >&2; exit 1; }
# alive PID: running and not a zombie (an orphan's zombie may wait for a reaper that never comes)
alive() { kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
usage() { sed -n '2,21p' "$0" >&2; exit 2; }

# free_port: a port nothing listens on now, chosen below the kernel's ephemeral range. A port
# from bind(0) is an ephemeral one, which the kernel hands to the next outgoing connection of any
# process (a test's client, another node) before the node binds it — the node then fails with
# "Address already in use", at start or when a killed node restarts on its ports.
free_port() {
  python3 - <<'PY'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except OSError:
    low = 32768
for _ in range(200):
    port = random.randrange(10000, low) if low > 11000 else 0
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        print(s.getsockname()[1])
        break
    except OSError:
        pass
    finally:
        s.close()
else:
    raise SystemExit("local-cluster: no free port below the ephemeral range")
PY
}

# members_json VERSION NAME... : the member list of the named nodes, from their ports files.
members_json() {
  local dir=$1 version=$2; shift 2
  local out="" sep=""
  for name in "$@"; do
    [ -f "$dir/$name/ports" ] || die "no node $name in $dir"
    read -r grpc _ < "$dir/$name/ports"
    out+="$sep{\"name\": \"$name\", \"address\": \"127.0.0.1:$grpc\", \"zone\": \"\"}"
    sep=", "
  done
  printf '{"version": %s, "members": [%s]}\n' "$version" "$out"
}

# write the members file atomically (the node may read it at any moment)
write_members() {
  local dir=$1; shift
  members_json "$dir" "$@" > "$dir/members.json.tmp"
  mv "$dir/members.json.tmp" "$dir/members.json"
}

start_node() {
  local dir=$1 name=$2
  local nd=$dir/$name
  [ -f "$nd/levee.toml" ] || die "no node $name in $dir"
  if [ -f "$nd/pid" ] && alive "$(cat "$nd/pid")"; then
    die "$name is already running (pid $(cat "$nd/pid"))"
  fi
  read -r grpc metrics < "$nd/ports"
  # setsid: its own process group, so a signal to the harness's caller does not reach it twice.
  setsid "$bin" serve --config "$nd/levee.toml" --data-dir "$nd/data" --node-name "$name" \
    --listen "127.0.0.1:$grpc" --metrics-listen "127.0.0.1:$metrics" \
    >> "$nd/log" 2>&1 < /dev/null &
  echo $! > "$nd/pid"
}

wait_ready() {
  local dir=$1 name=$2
  local nd=$dir/$name
  read -r grpc metrics < "$nd/ports"
  for _ in $(seq 1 300); do
    if ! alive "$(cat "$nd/pid")"; then
      echo "local-cluster: $name exited during start; its log:" >&2
      tail -n 30 "$nd/log" >&2
      # A port taken meanwhile (another process's listener): `up` tries again on other ports.
      grep -q "Address already in use" "$nd/log" && return 3
      exit 1
    fi
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$metrics/readyz', timeout=1)" 2>/dev/null; then
      echo "$name 127.0.0.1:$grpc 127.0.0.1:$metrics $(cat "$nd/pid")"
      return 0
    fi
    sleep 0.1
  done
  die "$name not ready after 30 s (log: $nd/log)"
}

cmd=${1:-}; [ -n "$cmd" ] || usage; shift
case "$cmd" in
  up)
    [ $# -ge 2 ] || usage
    dir=$1 n=$2; shift 2
    ring=64 nval=3 sync=false delete_delay=3600 handoff_rate='' handoff_busy='' aae_exchange='' segment_bytes=268435456
    while [ $# -gt 0 ]; do
      case "$1" in
        --ring-size) ring=$2; shift 2 ;;
        --n-val) nval=$2; shift 2 ;;
        --sync) sync=true; shift ;;
        --delete-delay-secs) delete_delay=$2; shift 2 ;;
        --handoff-bytes-per-sec) handoff_rate=$2; shift 2 ;;
        --handoff-busy-percent) handoff_busy=$2; shift 2 ;;
        --aae-exchange-secs) aae_exchange=$2; shift 2 ;;
        --journal-segment-bytes) segment_bytes=$2; shift 2 ;;
        *) die "unknown option $1" ;;
      esac
    done
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number, not '$n'"
    [ -x "$bin" ] || die "no levee binary at $bin (build it: cargo build --release -p levee-node, or set LEVEE_BIN)"
    mkdir -p "$dir"
    [ ! -e "$dir/members.json" ] || die "$dir already holds a cluster (run down, then remove it)"
    for attempt in 1 2 3; do
      names=()
      for i in $(seq 1 "$n"); do
        name=n$i
        names+=("$name")
        mkdir -p "$dir/$name"
        echo "$(free_port) $(free_port)" > "$dir/$name/ports"
        cat > "$dir/$name/levee.toml" <<EOF
# written by hack/local-cluster.sh
[cluster]
name = "local"
ring_size = $ring
n_val = $nval
members_file = "$dir/members.json"
delete_delay_secs = $delete_delay
[bucket_types.siblings]
conflict = "siblings"
[engine]
sync_on_write = $sync
aae_segments = 4096
journal_segment_bytes = $segment_bytes
EOF
        # A type on two replicas (AAE exchange keeps its keys on those two: tests/.../aae_exchange.rs).
        [ "$nval" -lt 2 ] || printf '[bucket_types.pair]\nn_val = 2\n' >> "$dir/$name/levee.toml"
        if [ -n "$handoff_rate$handoff_busy" ]; then
            printf '[handoff]\n' >> "$dir/$name/levee.toml"
            [ -z "$handoff_rate" ] || printf 'max_bytes_per_sec = %s\n' "$handoff_rate" >> "$dir/$name/levee.toml"
            [ -z "$handoff_busy" ] || printf 'busy_percent = %s\n' "$handoff_busy" >> "$dir/$name/levee.toml"
        fi
        [ -z "$aae_exchange" ] || printf '[aae]\nexchange_interval_secs = %s\n' "$aae_exchange" >> "$dir/$name/levee.toml"
      done
      # The list exists before any node starts: each commits it as its first list.
      write_members "$dir" 1 "${names[@]}"
      for name in "${names[@]}"; do start_node "$dir" "$name"; done
      ready=0
      for name in "${names[@]}"; do
        wait_ready "$dir" "$name" || { ready=$?; break; }
      done
      [ "$ready" -eq 0 ] && break
      echo "local-cluster: a port was taken; starting the cluster again on other ports (attempt $attempt)" >&2
      for name in "${names[@]}"; do
        pid=$(cat "$dir/$name/pid" 2>/dev/null) || continue
        kill -KILL "$pid" 2>/dev/null || true
        while alive "$pid"; do sleep 0.05; done
      done
      rm -rf "${dir:?}"/*
      [ "$attempt" -lt 3 ] || die "ports kept being taken; giving up after 3 attempts"
    done
    ;;
  start)
    [ $# -eq 2 ] || usage
    start_node "$1" "$2"
    wait_ready "$1" "$2"
    ;;
  add)
    [ $# -eq 2 ] || usage
    dir=$1 name=$2
    [ -f "$dir/n1/levee.toml" ] || die "no cluster in $dir (run up first)"
    [ ! -e "$dir/$name" ] || die "$dir/$name exists already"
    [[ "$name" =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "a node name is lower-case letters, digits and '-', not '$name'"
    mkdir -p "$dir/$name"
    echo "$(free_port) $(free_port)" > "$dir/$name/ports"
    cp "$dir/n1/levee.toml" "$dir/$name/levee.toml"
    ;;
  kill)
    [ $# -ge 2 ] || usage
    dir=$1 name=$2 sig=${3:-KILL}
    pid=$(cat "$dir/$name/pid" 2>/dev/null) || die "no node $name in $dir"
    kill -"$sig" "$pid" 2>/dev/null || die "$name (pid $pid) is not running"
    while alive "$pid"; do sleep 0.05; done
    ;;
  members)
    [ $# -ge 3 ] || usage
    dir=$1; shift
    write_members "$dir" "$@"
    ;;
  down)
    [ $# -eq 1 ] || usage
    dir=$1
    pids=()
    for p in "$dir"/*/pid; do
      [ -f "$p" ] || continue
      pid=$(cat "$p")
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    done
    for _ in $(seq 1 100); do
      left=0
      for pid in "${pids[@]}"; do alive "$pid" && left=1; done
      [ "$left" = 0 ] && break
      sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    ;;
  *) usage ;;
esac
