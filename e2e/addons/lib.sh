# Shared by the e2e add-on scripts (cert-manager/, prometheus/). Source after ../kube/env.sh with
# ADDON (the name in messages) and TIMEOUT (seconds per wait) set; a script may define
# diagnostics() to print its state when it fails.
# shellcheck shell=bash

say() { printf '\033[1maddon-%s:\033[0m %s\n' "$ADDON" "$*"; }
k() { e2e_kubectl "$@"; }

fail() {
  echo "addon-$ADDON: FAILED: $*" >&2
  if declare -F diagnostics >/dev/null; then diagnostics >&2; fi
  exit 1
}

require_cluster() {
  k get --raw /readyz >/dev/null || { echo "no cluster at $KUBECONFIG_FILE (make e2e-up)" >&2; exit 1; }
}

# wait_for WHAT CMD...: runs CMD every 3 s until it succeeds, printing progress every 30 s.
wait_for() {
  local what=$1 start=$SECONDS next=30
  shift
  until "$@" >/dev/null 2>&1; do
    if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then fail "timed out after ${TIMEOUT}s waiting for $what"; fi
    if [ $((SECONDS - start)) -ge "$next" ]; then say "  still waiting for $what ($((SECONDS - start)) s)"; next=$((next + 30)); fi
    sleep 3
  done
  say "$what ($((SECONDS - start)) s)"
}

# go_build CACHE NAME MODULE_DIR PACKAGE [LDFLAGS...]: a static, stripped binary CACHE/NAME from the
# wrapper module MODULE_DIR, at low priority (the node's 2 cores also run the cluster); kept once built.
go_build() {
  local cache=$1 name=$2 dir=$3 pkg=$4 bin=$1/$2 s
  shift 4
  if [ -x "$bin" ]; then
    say "$name cached ($bin)"
    return
  fi
  say "building $name from the Go module proxy (cold: a few minutes)"
  s=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 nice -n 10 "${GO:-go}" build -trimpath -ldflags "-s -w $*" -o "$bin.tmp.$$" "$pkg")
  mv -f "$bin.tmp.$$" "$bin"
  say "$name built in $((SECONDS - s)) s"
}

# oci_image CACHE NAME REF ENTRYPOINT FILE...: writes CACHE/NAME.tar (user 65534) with e2e/kube/ociimage
# unless it is newer than its inputs and was written for REF. FILE is SRC or SRC=DEST.
oci_image() {
  local cache=$1 name=$2 ref=$3 entry=$4 tar=$1/$2.tar stale=0 f
  shift 4
  [ -f "$tar" ] && [ "$(cat "$cache/$name.ref" 2>/dev/null)" = "$ref" ] || stale=1
  for f in "$@"; do
    [ "$tar" -nt "${f%%=*}" ] || stale=1
  done
  if [ "$stale" = 0 ]; then
    say "image $ref cached ($tar)"
    return
  fi
  local tools=$LEVEE_CACHE/e2e/tools
  mkdir -p "$tools"
  (cd "$E2E_ADDONS/.." && "${GO:-go}" build -trimpath -o "$tools/ociimage" ./kube/ociimage)
  "$tools/ociimage" -out "$tar.tmp.$$" -ref "$ref" -entrypoint "$entry" -user 65534:65534 "$@"
  mv -f "$tar.tmp.$$" "$tar"
  printf '%s\n' "$ref" >"$cache/$name.ref"
  say "image $ref written ($tar)"
}

# import_images CACHE NAME...: CACHE/NAME.tar into the node's containerd, unless no cluster runs
# or ADDON_IMPORT=0.
import_images() {
  local cache=$1 name
  shift
  if [ "${ADDON_IMPORT:-1}" = 1 ] && [ -S "$CONTAINERD_SOCK" ]; then
    for name in "$@"; do
      e2e_ctr images import "$cache/$name.tar" >/dev/null
    done
    say "imported into the node's containerd ($CONTAINERD_SOCK)"
  else
    say "not imported (no $CONTAINERD_SOCK or ADDON_IMPORT=0)"
  fi
}

# apply_crds FILE...: applies the CRD manifests server-side (some exceed the client-side annotation
# limit) with each file's Helm-template lines dropped, labels them part-of=$PART_OF and waits until
# they are Established.
apply_crds() {
  local f crds=()
  for f in "$@"; do
    sed -e '/{{/d' "$f" | k apply --server-side --force-conflicts --field-manager=levee-e2e -f - >/dev/null
    crds+=("crd/$(sed -n 's/^  name: \(.*\)$/\1/p' "$f" | head -n1)")
  done
  k label --overwrite "${crds[@]}" "app.kubernetes.io/part-of=$PART_OF" >/dev/null
  k wait --for=condition=Established --timeout="${TIMEOUT}s" "${crds[@]}" >/dev/null
  say "${#crds[@]} CRDs established (from ${1%/*})"
}

# account NAMESPACE SERVICE_ACCOUNT CLUSTER_ROLE RULES: the ServiceAccount, a ClusterRole with RULES
# (YAML list items, indented 2 spaces) and the binding between them, all labelled part-of=$PART_OF.
account() {
  cat <<EOT
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: $2, namespace: $1, labels: {app.kubernetes.io/part-of: $PART_OF}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: $3, labels: {app.kubernetes.io/part-of: $PART_OF}}
rules:
$4
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: $3, labels: {app.kubernetes.io/part-of: $PART_OF}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $3}
subjects: [{kind: ServiceAccount, name: $2, namespace: $1}]
EOT
}

# remove_crds REGEX: deletes every CRD whose name matches (by group, not by label: CRDs applied by
# hand or by an older install go too), and with them every object of theirs left in any namespace.
remove_crds() {
  local names
  names=$(k get crd -o name | grep -E "$1" || true)
  if [ -n "$names" ]; then
    # shellcheck disable=SC2086 # one name per word
    k delete --timeout="${TIMEOUT}s" $names
  fi
}

# deployment NAMESPACE NAME SERVICE_ACCOUNT CONTAINER IMAGE FIELDS: a one-replica Deployment, labelled
# app.kubernetes.io/name=NAME and part-of=$PART_OF, running IMAGE (never pulled) as 65534 without
# privileges on a read-only root. FIELDS: the container's other fields, indented 10 spaces.
deployment() {
  cat <<EOT
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: $2, namespace: $1, labels: {app.kubernetes.io/name: $2, app.kubernetes.io/part-of: $PART_OF}}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: $2}}
  template:
    metadata: {labels: {app.kubernetes.io/name: $2, app.kubernetes.io/part-of: $PART_OF}}
    spec:
      serviceAccountName: $3
      securityContext: {runAsNonRoot: true, runAsUser: 65534, runAsGroup: 65534, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: $4
          image: $5
          imagePullPolicy: Never
$6
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
EOT
}

E2E_ADDONS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
