#!/usr/bin/env bash
# Remove everything install.sh created: the Prometheus `levee` (first, while its operator still runs),
# the namespaces levee-monitoring and levee-prom-selfcheck, the cluster-scoped RBAC labelled
# app.kubernetes.io/part-of=levee-e2e-prometheus and the monitoring.coreos.com CRDs (which deletes
# every ServiceMonitor/PrometheusRule left in any namespace). Idempotent. The images stay in the
# node's containerd and the build cache stays in $LEVEE_CACHE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/../../kube/env.sh
. "$here/../../kube/env.sh"
NS=levee-monitoring
SCRATCH=levee-prom-selfcheck
PART_OF=levee-e2e-prometheus
# shellcheck disable=SC2034 # ADDON and TIMEOUT are read by lib.sh
ADDON=prometheus
TIMEOUT=${PROM_TIMEOUT:-180}
# shellcheck source=SCRIPTDIR/../lib.sh
. "$here/../lib.sh"
t0=$SECONDS

require_cluster

if k get crd prometheuses.monitoring.coreos.com >/dev/null 2>&1; then
  k -n "$NS" delete prometheus --all --ignore-not-found --timeout="${TIMEOUT}s" >/dev/null 2>&1 || true
fi
k delete namespace "$SCRATCH" "$NS" --ignore-not-found --timeout="${TIMEOUT}s"
k delete clusterrolebinding,clusterrole -l "app.kubernetes.io/part-of=$PART_OF" --ignore-not-found
remove_crds '\.monitoring\.coreos\.com$'
say "uninstalled in $((SECONDS - t0)) s"
