#!/usr/bin/env bash
# Build (once) the binaries the e2e cluster runs and cache them OUTSIDE the clone:
#   $LEVEE_CACHE/k8s/<KUBE_VERSION>/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy}
#       from the wrapper module operator/hack/k8s-bins (Go module proxy; ~8 min cold on 2 cores)
#   $LEVEE_CACHE/bin/coredns-<COREDNS_VERSION>-<build id>   CoreDNS with the Corefile's plugins only, from the
#       wrapper module e2e/kube/coredns (~2 min cold; the id is a hash of that module, env.sh)
# Built with CGO_ENABLED=0 and -trimpath like every Go build of make test (Makefile), so the packages
# they share with the operator's kube-apiserver and tests come from Go's build cache.
# A binary already in the cache is not rebuilt. Builds run under `nice` (other work shares the cores).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=e2e/kube/env.sh
. "$here/env.sh"
GO=${GO:-go}
NICE=${NICE:-nice -n 10}
k8s_dir=$K8S_BIN

say() { printf '\033[1me2e-build:\033[0m %s\n' "$*"; }

# The wrapper pins k8s.io/kubernetes; refuse a KUBE_VERSION it does not pin (the cache key would lie).
pinned=$(sed -n 's/^require k8s.io\/kubernetes \(v[^ ]*\)$/\1/p' "$here/../../operator/hack/k8s-bins/go.mod")
[ "$pinned" = "$KUBE_VERSION" ] || { echo "operator/hack/k8s-bins pins k8s.io/kubernetes $pinned, not KUBE_VERSION=$KUBE_VERSION" >&2; exit 1; }
minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"

mkdir -p "$k8s_dir" "$(dirname "$COREDNS_BIN")"
todo=()
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  [ -x "$k8s_dir/$c" ] || todo+=("$c")
done
# kube-apiserver may already be built by the operator's envtest target (same version; E2E_REUSE_APISERVER=0 builds it).
if [ "${E2E_REUSE_APISERVER:-1}" = 1 ] && [[ " ${todo[*]-} " == *" kube-apiserver "* ]] && [ -x "$here/../../operator/bin/k8s/kube-apiserver" ] &&
   "$here/../../operator/bin/k8s/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes $KUBE_VERSION"; then
  say "reusing operator/bin/k8s/kube-apiserver ($KUBE_VERSION)"
  cp "$here/../../operator/bin/k8s/kube-apiserver" "$k8s_dir/kube-apiserver.tmp" && mv "$k8s_dir/kube-apiserver.tmp" "$k8s_dir/kube-apiserver"
  todo=("${todo[@]/kube-apiserver}")
fi
pkgs=()
for c in "${todo[@]-}"; do [ -n "$c" ] && pkgs+=("k8s.io/kubernetes/cmd/$c"); done
if [ "${#pkgs[@]}" -gt 0 ]; then
  say "building ${pkgs[*]##*/} $KUBE_VERSION into $k8s_dir (cold: several minutes)"
  start=$SECONDS
  tmp=$(mktemp -d "$k8s_dir/.build.XXXXXX"); trap 'rm -rf "$tmp"' EXIT
  (cd "$here/../../operator/hack/k8s-bins" && CGO_ENABLED=0 $NICE "$GO" build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  for p in "${pkgs[@]}"; do mv "$tmp/${p##*/}" "$k8s_dir/"; done
  say "built in $((SECONDS - start)) s"
else
  say "kubernetes $KUBE_VERSION binaries cached in $k8s_dir"
fi

pinned=$(sed -n 's/^require github.com\/coredns\/coredns \(v[^ ]*\)$/\1/p' "$here/coredns/go.mod")
[ "$pinned" = "$COREDNS_VERSION" ] || { echo "e2e/kube/coredns pins coredns $pinned, not COREDNS_VERSION=$COREDNS_VERSION" >&2; exit 1; }
if [ ! -x "$COREDNS_BIN" ]; then
  say "building coredns $COREDNS_VERSION with the e2e Corefile's plugins (cold: ~2 min)"
  start=$SECONDS
  (cd "$here/coredns" && CGO_ENABLED=0 $NICE "$GO" build -mod=readonly -trimpath -ldflags "-s -w" -o "$COREDNS_BIN.tmp.$$" .)
  mv "$COREDNS_BIN.tmp.$$" "$COREDNS_BIN"
  say "built in $((SECONDS - start)) s"
else
  say "coredns cached at $COREDNS_BIN"
fi
