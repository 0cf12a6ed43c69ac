# shellcheck shell=bash disable=SC2034
# Shared settings of the e2e cluster scripts (sourced by up.sh and down.sh).
LEVEE_CACHE=${LEVEE_CACHE:-$HOME/.cache/levee}
KUBE_VERSION=${KUBE_VERSION:-v1.31.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.11.3}
# Everything the cluster writes lives here; e2e-down removes it.
E2E_RUN=${E2E_RUN:-$LEVEE_CACHE/e2e/run}
K8S_BIN=$LEVEE_CACHE/k8s/$KUBE_VERSION
# CoreDNS is built from the wrapper module e2e/kube/coredns (the Corefile's plugins only); the name
# carries a hash of that module so a changed plugin list builds a new binary.
COREDNS_BUILD_ID=$(cat "$(dirname "${BASH_SOURCE[0]}")"/coredns/{go.mod,go.sum,main.go} | sha256sum | cut -c1-12)
COREDNS_BIN=$LEVEE_CACHE/bin/coredns-$COREDNS_VERSION-$COREDNS_BUILD_ID
IMAGES=$LEVEE_CACHE/e2e/images
KUBECONFIG_FILE=$E2E_RUN/kubeconfig
NODE_NAME=levee-e2e
# The node IP sits on its own interface, a dummy one or (no dummy module) a veth pair levee-e2e0/1:
# kubectl logs/exec need a non-loopback node address.
NODE_IF=levee-e2e0
NODE_IP=${E2E_NODE_IP:-10.213.0.1}
POD_BRIDGE=levee-cni0
POD_CIDR=10.244.0.0/16
POD_SUBNET=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
APISERVER_PORT=6443
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800
CONTAINERD_SOCK=$E2E_RUN/containerd/containerd.sock
CNI_BIN=/usr/lib/cni
SANDBOX_IMAGE=docker.io/library/levee-e2e-pause:1
# Static local PersistentVolumes per storage class (levee-nvme, levee-hdd).
E2E_PVS=${E2E_PVS:-6}
E2E_PV_CAPACITY=${E2E_PV_CAPACITY:-10Ti}

e2e_say() { printf '\033[1me2e:\033[0m %s\n' "$*"; }
e2e_ctr() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }
e2e_kubectl() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }
