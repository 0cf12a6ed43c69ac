#!/usr/bin/env bash
# make e2e-up: a real single-node Kubernetes on this machine, no Docker, no kind.
#   etcd (Debian etcd-server, loopback) -> kube-apiserver (token auth, RBAC, own CA + serving cert,
#   service-account keys) -> kube-controller-manager, kube-scheduler -> containerd (CRI, restrict_oom_score_adj,
#   sandbox image = the local pause image) -> CNI bridge conflist -> CoreDNS (host process on the node IP,
#   kubelet's clusterDNS) -> kube-proxy (iptables) -> kubelet (cgroupfs, node IP on a dummy interface)
#   -> StorageClasses levee-nvme / levee-hdd with static local PersistentVolumes.
# Every file it writes is under $E2E_RUN (default ~/.cache/levee/e2e/run); `make e2e-down` undoes all of it.
# Idempotent: when the cluster is already up and healthy it only prints the kubeconfig.
# Needs root (containerd, kubelet, interfaces, iptables).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/env.sh
. "$here/env.sh"
start_all=$SECONDS

[ "$(id -u)" = 0 ] || { echo "e2e-up needs root" >&2; exit 1; }

healthy() {
  [ -f "$KUBECONFIG_FILE" ] && e2e_kubectl get --raw /readyz >/dev/null 2>&1 &&
    e2e_kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}
if healthy; then
  e2e_say "cluster already up (node $NODE_NAME Ready)"
  e2e_say "KUBECONFIG=$KUBECONFIG_FILE"
  exit 0
fi
if [ -e "$E2E_RUN" ]; then
  e2e_say "found a stale run directory $E2E_RUN: tearing it down first"
  "$here/down.sh"
fi

e2e_say "Debian packages"
"$here/../../hack/ensure-debs.sh" containerd runc containernetworking-plugins etcd-server iptables conntrack openssl
e2e_say "binaries (cached in $LEVEE_CACHE)"
"$here/build-bins.sh"
"$here/images.sh"

mkdir -p "$E2E_RUN"/{logs,pids,pki,etcd,apiserver,kubelet,containerd,cni/net.d,cni/ipam,volumes,pod-logs,coredns}
logs=$E2E_RUN/logs pids=$E2E_RUN/pids pki=$E2E_RUN/pki

# start NAME CMD...: a daemon in its own session, output in logs/NAME.log, pid in pids/NAME.pid.
start() {
  local name=$1; shift
  setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name.pid"
}
# wait_for WHAT SECONDS CMD...: poll until CMD succeeds; on timeout show the log and fail.
wait_for() {
  local what=$1 secs=$2; shift 2
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if [ $((SECONDS - t0)) -ge "$secs" ]; then
      echo "e2e-up: $what not ready after ${secs}s; last lines of $logs/$what.log:" >&2
      tail -n 30 "$logs/$what.log" >&2 || true
      exit 1
    fi
    if [ -f "$pids/$what.pid" ] && ! kill -0 "$(cat "$pids/$what.pid")" 2>/dev/null; then
      echo "e2e-up: $what exited; last lines of $logs/$what.log:" >&2
      tail -n 30 "$logs/$what.log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  e2e_say "$what ready ($((SECONDS - t0)) s)"
}
on_exit() {
  local rc=$?
  [ $rc = 0 ] || echo "e2e-up failed (rc $rc): state left in $E2E_RUN for inspection; make e2e-down removes it" >&2
}
trap on_exit EXIT

# ---- host networking ------------------------------------------------------------------------
e2e_say "host: sysctls, node interface $NODE_IF ($NODE_IP)"
: >"$E2E_RUN/sysctl.saved"
for s in net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables; do
  [ -e /proc/sys/$s ] || continue
  echo "$s $(cat /proc/sys/$s)" >>"$E2E_RUN/sysctl.saved"
  echo 1 >/proc/sys/$s
done
# A dummy interface when the kernel has the module; these VMs lack it, so a veth pair otherwise.
if ! ip link add "$NODE_IF" type dummy 2>/dev/null; then
  ip link add "$NODE_IF" type veth peer name "${NODE_IF%0}1"
  ip link set "${NODE_IF%0}1" up
fi
ip addr add "$NODE_IP/32" dev "$NODE_IF"
ip link set "$NODE_IF" up

# ---- PKI: a CA, the apiserver serving cert, service-account keys, static tokens ---------------
e2e_say "pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=levee-e2e-ca" \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
cat >"$pki/apiserver.ext" <<EXT
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$SERVICE_IP
extendedKeyUsage=serverAuth
EXT
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
  -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
token=$(openssl rand -hex 24)
# One admin identity (group system:masters) for the control plane, kubelet, kube-proxy, CoreDNS and
# the test driver; the operator runs with its own ServiceAccount and the chart's RBAC.
echo "$token,levee-e2e-admin,levee-e2e-admin,system:masters" >"$pki/tokens.csv"
chmod 600 "$pki"/*.key "$pki/tokens.csv"
write_kubeconfig() { # FILE SERVER
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: levee-e2e
  cluster: {server: "$2", certificate-authority: "$pki/ca.crt"}
users:
- name: admin
  user: {token: "$token"}
contexts:
- name: levee-e2e
  context: {cluster: levee-e2e, user: admin, namespace: default}
current-context: levee-e2e
KC
  chmod 600 "$1"
}
write_kubeconfig "$KUBECONFIG_FILE" "https://127.0.0.1:$APISERVER_PORT"

# ---- etcd, apiserver, controller-manager, scheduler --------------------------------------------
e2e_say "etcd (127.0.0.1:$ETCD_CLIENT_PORT)"
start etcd etcd --name levee-e2e --data-dir "$E2E_RUN/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "levee-e2e=http://127.0.0.1:$ETCD_PEER_PORT"
wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

e2e_say "kube-apiserver $KUBE_VERSION (:$APISERVER_PORT)"
start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --bind-address=0.0.0.0 --secure-port="$APISERVER_PORT" --advertise-address="$NODE_IP" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --cert-dir="$E2E_RUN/apiserver" \
  --client-ca-file="$pki/ca.crt" --token-auth-file="$pki/tokens.csv" --authorization-mode=RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
  --kubelet-preferred-address-types=InternalIP,Hostname --profiling=false
wait_for kube-apiserver 120 e2e_kubectl get --raw /readyz

write_kubeconfig "$E2E_RUN/components.kubeconfig" "https://127.0.0.1:$APISERVER_PORT"
e2e_say "kube-controller-manager, kube-scheduler"
start kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig="$E2E_RUN/components.kubeconfig" \
  --authentication-kubeconfig="$E2E_RUN/components.kubeconfig" --authorization-kubeconfig="$E2E_RUN/components.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1 --secure-port=10257 \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
  --cluster-name=levee-e2e --profiling=false
start kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig="$E2E_RUN/components.kubeconfig" \
  --authentication-kubeconfig="$E2E_RUN/components.kubeconfig" --authorization-kubeconfig="$E2E_RUN/components.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1 --secure-port=10259 --profiling=false
wait_for kube-controller-manager 60 curl -skf https://127.0.0.1:10257/healthz
wait_for kube-scheduler 60 curl -skf https://127.0.0.1:10259/healthz

# ---- containerd (CRI) + CNI -------------------------------------------------------------------
e2e_say "containerd (CRI; socket $CONTAINERD_SOCK)"
cat >"$E2E_RUN/containerd/config.toml" <<TOML
version = 2
root = "$E2E_RUN/containerd/root"
state = "$E2E_RUN/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  # The machines lack CAP_SYS_RESOURCE: without this every sandbox fails ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$E2E_RUN/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$E2E_RUN/cni/net.d"
TOML
cat >"$E2E_RUN/cni/net.d/10-levee-e2e.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "levee-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$POD_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$E2E_RUN/cni/ipam", "ranges": [[{"subnet": "$POD_SUBNET"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
start containerd containerd --config "$E2E_RUN/containerd/config.toml"
wait_for containerd 30 e2e_ctr version
e2e_ctr images import "$IMAGES/pause.tar" >/dev/null
e2e_say "imported $SANDBOX_IMAGE"

# ---- CoreDNS on the node IP (kubelet's clusterDNS) --------------------------------------------
e2e_say "coredns $COREDNS_VERSION ($NODE_IP:53)"
cat >"$E2E_RUN/coredns/Corefile" <<CF
.:53 {
    bind $NODE_IP
    errors
    health $NODE_IP:8180
    ready $NODE_IP:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $E2E_RUN/components.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
    cache 5
}
CF
start coredns "$COREDNS_BIN" -conf "$E2E_RUN/coredns/Corefile"
wait_for coredns 60 curl -sf "http://$NODE_IP:8181/ready"

# ---- kube-proxy (Services: ClusterIP of the API server for in-cluster clients, client Services) --
e2e_say "kube-proxy (iptables)"
start kube-proxy "$K8S_BIN/kube-proxy" --kubeconfig="$E2E_RUN/components.kubeconfig" --hostname-override="$NODE_NAME" \
  --proxy-mode=iptables --cluster-cidr="$POD_CIDR" --iptables-localhost-nodeports=false \
  --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
  --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249
# (kube-proxy reports healthy once it has seen its Node: waited for after the kubelet registers it.)

# ---- kubelet ------------------------------------------------------------------------------------
e2e_say "kubelet (node $NODE_NAME, $NODE_IP)"
cat >"$E2E_RUN/kubelet/config.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDNS: ["$NODE_IP"]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $E2E_RUN/pod-logs
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
address: $NODE_IP
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
KCFG
start kubelet "$K8S_BIN/kubelet" --config="$E2E_RUN/kubelet/config.yaml" --kubeconfig="$E2E_RUN/components.kubeconfig" \
  --root-dir="$E2E_RUN/kubelet/root" --cert-dir="$E2E_RUN/kubelet/pki" \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --node-labels="levee.io/storage=nvme"
node_ready() { e2e_kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for kubelet 180 node_ready
wait_for kube-proxy 60 curl -sf http://127.0.0.1:10256/healthz

# ---- storage: levee-nvme / levee-hdd, static local PVs -----------------------------------------
e2e_say "storage classes levee-nvme, levee-hdd with $E2E_PVS local PVs each (directories under $E2E_RUN/volumes)"
{
  for sc in levee-nvme levee-hdd; do
    cat <<SC
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $sc
  annotations: {levee.io/e2e: "static local PersistentVolumes made by e2e/kube/up.sh"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
SC
    for i in $(seq 0 $((E2E_PVS - 1))); do
      mkdir -p "$E2E_RUN/volumes/$sc-$i"
      cat <<PV
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $sc-$i
  labels: {levee.io/e2e: "true"}
spec:
  capacity: {storage: $E2E_PV_CAPACITY}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $sc
  volumeMode: Filesystem
  local: {path: "$E2E_RUN/volumes/$sc-$i"}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}
PV
    done
  done
} | e2e_kubectl apply -f - >/dev/null
# Pods need the default ServiceAccount (made by the controller-manager) before they can be created.
sa_ready() { e2e_kubectl get serviceaccount default -n default; }
wait_for kube-controller-manager 60 sa_ready

trap - EXIT
e2e_say "cluster up in $((SECONDS - start_all)) s: node $NODE_NAME Ready, $(e2e_kubectl get pv --no-headers | wc -l) PVs"
e2e_say "state in $E2E_RUN; logs in $logs"
e2e_say "export KUBECONFIG=$KUBECONFIG_FILE"
