#!/usr/bin/env bash
# Build the Prometheus add-on of the e2e cluster without a container engine or registry:
#   operator                    prometheus-operator v0.76.2 cmd/operator (wrapper module ./module)
#   prometheus-config-reloader  the sidecar the operator puts into every Prometheus pod (same module)
#   prometheus                  the Prometheus server v2.54.0 (wrapper module ./server; Debian's
#                               package lacks Kubernetes service discovery, which ServiceMonitors need)
# into one OCI archive each, imported into the node's containerd (skipped when no cluster runs, or
# with ADDON_IMPORT=0). Binaries and archives are cached in
# $LEVEE_CACHE/e2e/addons/prometheus-operator-v0.76.2/, so a second run only re-imports. Writes
# images.env there for install.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/../../kube/env.sh
. "$here/../../kube/env.sh"
# shellcheck disable=SC2034 # ADDON and TIMEOUT are read by lib.sh
ADDON=prometheus TIMEOUT=0
# shellcheck source=SCRIPTDIR/../lib.sh
. "$here/../lib.sh"
PROM_OPERATOR_VERSION=v0.76.2
PROM_VERSION=v2.54.0          # Go module github.com/prometheus/prometheus v0.54.0 (./server/go.mod)
cache=$LEVEE_CACHE/e2e/addons/prometheus-operator-$PROM_OPERATOR_VERSION
mkdir -p "$cache"
t0=$SECONDS

operator_ref=docker.io/library/levee-e2e-prometheus-operator:$PROM_OPERATOR_VERSION
reloader_ref=docker.io/library/levee-e2e-prometheus-config-reloader:$PROM_OPERATOR_VERSION
prometheus_ref=docker.io/library/levee-e2e-prometheus:$PROM_VERSION

for cmd in operator prometheus-config-reloader; do
  go_build "$cache" "$cmd" "$here/module" "github.com/prometheus-operator/prometheus-operator/cmd/$cmd"
done
go_build "$cache" "prometheus-$PROM_VERSION" "$here/server" github.com/prometheus/prometheus/cmd/prometheus \
  "-X github.com/prometheus/common/version.Version=${PROM_VERSION#v}"

oci_image "$cache" operator "$operator_ref" /bin/operator "$cache/operator=/bin/operator"
oci_image "$cache" prometheus-config-reloader "$reloader_ref" /bin/prometheus-config-reloader \
  "$cache/prometheus-config-reloader=/bin/prometheus-config-reloader"
oci_image "$cache" prometheus "$prometheus_ref" /bin/prometheus "$cache/prometheus-$PROM_VERSION=/bin/prometheus"

cat >"$cache/images.env.tmp.$$" <<EOT
PROM_OPERATOR_IMAGE=$operator_ref
PROM_RELOADER_IMAGE=$reloader_ref
PROM_IMAGE=$prometheus_ref
PROM_VERSION=$PROM_VERSION
EOT
mv -f "$cache/images.env.tmp.$$" "$cache/images.env"
import_images "$cache" operator prometheus-config-reloader prometheus
say "done in $((SECONDS - t0)) s: $operator_ref $reloader_ref $prometheus_ref"
