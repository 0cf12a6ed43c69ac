#!/usr/bin/env bash
# Remove everything install.sh created: the webhook configurations first (so nothing is refused while
# the rest goes), the namespaces cert-manager and levee-cm-selfcheck, the cluster-scoped RBAC
# labelled app.kubernetes.io/part-of=levee-e2e-cert-manager and the cert-manager CRDs (which deletes
# every Certificate/Issuer left in any namespace). Idempotent. Images stay in the node's containerd
# and the build cache in $LEVEE_CACHE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/../../kube/env.sh
. "$here/../../kube/env.sh"
# shellcheck disable=SC2034 # ADDON and TIMEOUT are read by lib.sh
ADDON=cert-manager
TIMEOUT=${CM_TIMEOUT:-180}
# shellcheck source=SCRIPTDIR/../lib.sh
. "$here/../lib.sh"
PART_OF=levee-e2e-cert-manager
t0=$SECONDS

require_cluster

k delete validatingwebhookconfiguration,mutatingwebhookconfiguration -l "app.kubernetes.io/part-of=$PART_OF" --ignore-not-found
k delete namespace levee-cm-selfcheck cert-manager --ignore-not-found --timeout="${TIMEOUT}s"
k delete clusterrolebinding,clusterrole -l "app.kubernetes.io/part-of=$PART_OF" --ignore-not-found
remove_crds '\.(acme\.)?cert-manager\.io$'
say "uninstalled in $((SECONDS - t0)) s"
