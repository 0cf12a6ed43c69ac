#!/usr/bin/env bash
# Install the Prometheus Operator v0.76.2 and one Prometheus (`levee`) into namespace levee-monitoring
# of the running e2e cluster (make e2e-up), from the images of ./build.sh (run first; cheap when cached).
#   - CRDs monitoring.coreos.com: applied server-side from the Go module cache (never copied here)
#   - the operator: our own ServiceAccount, ClusterRole, Deployment and Service (metrics on :8080)
#   - Prometheus `levee`: selects every ServiceMonitor, PodMonitor, Probe, ScrapeConfig and
#     PrometheusRule in every namespace; 15 s scrape/evaluation interval; emptyDir storage
# Then a self-check (PROM_SELFCHECK=0 skips it): a ServiceMonitor and a PrometheusRule in a scratch
# namespace must show up as a healthy target and a loaded rule group, queried through the API
# server's service proxy. Idempotent: a second run re-applies and re-checks.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/../../kube/env.sh
. "$here/../../kube/env.sh"
# shellcheck disable=SC2034 # ADDON and TIMEOUT are read by lib.sh
ADDON=prometheus
TIMEOUT=${PROM_TIMEOUT:-300}          # seconds per wait
# shellcheck source=SCRIPTDIR/../lib.sh
. "$here/../lib.sh"
GO=${GO:-go}
PROM_OPERATOR_VERSION=v0.76.2
NS=levee-monitoring
SCRATCH=levee-prom-selfcheck
PART_OF=levee-e2e-prometheus          # label on everything, cluster-scoped objects included
cache=$LEVEE_CACHE/e2e/addons/prometheus-operator-$PROM_OPERATOR_VERSION
PROXY=/api/v1/namespaces/$NS/services/prometheus-operated:9090/proxy
t0=$SECONDS

diagnostics() {
  say "diagnostics ($NS)"
  k -n "$NS" get all,prometheus,servicemonitors,prometheusrules -o wide || true
  k -n "$NS" describe pods || true
  k -n "$NS" get events --sort-by=.lastTimestamp | tail -n 30 || true
  k -n "$NS" logs deploy/prometheus-operator --tail=60 || true
  for c in prometheus config-reloader; do
    k -n "$NS" logs prometheus-levee-0 -c "$c" --tail=40 || true
  done
}
# prom_get PATH: a GET on the Prometheus HTTP API through the API server's service proxy.
prom_get() { k get --raw "$PROXY$1"; }

require_cluster

# 1. Images (built, cached, imported into the node's containerd).
"$here/build.sh"
# shellcheck source=/dev/null
. "$cache/images.env"

# 2. CRDs from the module cache; server-side apply (they exceed the client-side annotation limit).
crd_dir=$(cd "$here/module" && "$GO" mod download -json "github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR_VERSION" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')/example/prometheus-operator-crd
[ -d "$crd_dir" ] || fail "no CRD folder $crd_dir"
apply_crds "$crd_dir"/monitoring.coreos.com_*.yaml

# 3. The operator. It watches monitoring objects in every namespace and runs Prometheus,
# Alertmanager and ThanosRuler instances only in $NS.
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS, labels: {app.kubernetes.io/part-of: $PART_OF}}
---
apiVersion: v1
kind: Service
metadata: {name: prometheus-operator, namespace: $NS, labels: {app.kubernetes.io/name: prometheus-operator, app.kubernetes.io/part-of: $PART_OF}}
spec:
  selector: {app.kubernetes.io/name: prometheus-operator}
  ports: [{name: http, port: 8080, targetPort: http}]
EOF
{
  account "$NS" prometheus-operator levee-monitoring-operator "\
    # its own API; Prometheus pods are a StatefulSet with generated config Secrets and rule ConfigMaps
    - {apiGroups: [monitoring.coreos.com], resources: [\"*\"], verbs: [\"*\"]}
    - {apiGroups: [apps], resources: [statefulsets], verbs: [\"*\"]}
    - {apiGroups: [\"\"], resources: [configmaps, secrets], verbs: [\"*\"]}
    - {apiGroups: [\"\"], resources: [pods], verbs: [list, delete]}
    - {apiGroups: [\"\"], resources: [services, services/finalizers, endpoints], verbs: [get, create, update, delete]}
    - {apiGroups: [\"\"], resources: [namespaces], verbs: [get, list, watch]}
    - {apiGroups: [\"\"], resources: [events], verbs: [create, patch]}
    - {apiGroups: [storage.k8s.io], resources: [storageclasses], verbs: [get]}"
  deployment "$NS" prometheus-operator prometheus-operator operator "$PROM_OPERATOR_IMAGE" "\
          args:
            - --prometheus-config-reloader=$PROM_RELOADER_IMAGE
            - --prometheus-instance-namespaces=$NS
            - --alertmanager-instance-namespaces=$NS
            - --thanos-ruler-instance-namespaces=$NS
          env: [{name: GOGC, value: \"30\"}]
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 5}
          resources: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 256Mi}}"
} | k apply -f - >/dev/null
k -n "$NS" rollout status deploy/prometheus-operator --timeout="${TIMEOUT}s" >/dev/null ||
  fail "operator Deployment not ready"
say "operator ready ($PROM_OPERATOR_IMAGE)"

# 4. Prometheus `levee`: discovery in every namespace needs cluster-wide read access.
account "$NS" prometheus-levee levee-monitoring-prometheus "\
  - {apiGroups: [\"\"], resources: [services, endpoints, pods, nodes, nodes/metrics], verbs: [get, list, watch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}
  - {apiGroups: [\"\"], resources: [configmaps], verbs: [get]}
  - {nonResourceURLs: [/metrics], verbs: [get]}" | k apply -f - >/dev/null
k apply -f - >/dev/null <<EOF
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: levee, namespace: $NS, labels: {app.kubernetes.io/part-of: $PART_OF}}
spec:
  image: $PROM_IMAGE
  version: $PROM_VERSION              # the operator passes only flags this version knows
  imagePullPolicy: Never              # also used for the config-reloader containers
  replicas: 1
  serviceAccountName: prometheus-levee
  scrapeInterval: 15s
  evaluationInterval: 15s
  retention: 1d
  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {}
  podMonitorSelector: {}
  podMonitorNamespaceSelector: {}
  probeSelector: {}
  probeNamespaceSelector: {}
  scrapeConfigSelector: {}
  scrapeConfigNamespaceSelector: {}
  ruleSelector: {}
  ruleNamespaceSelector: {}
  storage: {emptyDir: {sizeLimit: 2Gi}}
  resources: {requests: {cpu: 10m, memory: 64Mi}, limits: {memory: 256Mi}}
  securityContext: {runAsNonRoot: true, runAsUser: 65534, runAsGroup: 65534, fsGroup: 65534}
EOF
say "Prometheus levee applied ($PROM_IMAGE, $PROM_VERSION)"

pod_ready() {
  [ "$(k -n "$NS" get pod prometheus-levee-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "pod prometheus-levee-0 Ready" pod_ready
wait_for "Prometheus API answers through $PROXY" prom_get /-/ready
build=$(prom_get /api/v1/status/buildinfo | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"]["version"])')
say "Prometheus $build answers at $PROXY/api/v1/..."

# 5. Self-check: a ServiceMonitor (on the operator's metrics Service) and a PrometheusRule from
# another namespace reach Prometheus (config Secret -> reloader -> reload), and the target is up.
if [ "${PROM_SELFCHECK:-1}" = 1 ]; then
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $SCRATCH, labels: {app.kubernetes.io/part-of: $PART_OF}}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: selfcheck, namespace: $SCRATCH}
spec:
  namespaceSelector: {matchNames: [$NS]}
  selector: {matchLabels: {app.kubernetes.io/name: prometheus-operator}}
  endpoints: [{port: http, interval: 15s}]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: selfcheck, namespace: $SCRATCH}
spec:
  groups:
    - name: levee-selfcheck
      rules: [{record: "levee:selfcheck_up:sum", expr: "sum(up)"}]
EOF
  target_up() {
    prom_get /api/v1/targets | python3 -c '
import json, sys
ts = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if any(t["scrapePool"].startswith("serviceMonitor/'"$SCRATCH"'/selfcheck/") and t["health"] == "up" for t in ts) else 1)'
  }
  rule_loaded() {
    prom_get /api/v1/rules | python3 -c '
import json, sys
gs = json.load(sys.stdin)["data"]["groups"]
sys.exit(0 if any(g["name"] == "levee-selfcheck" for g in gs) else 1)'
  }
  wait_for "self-check: ServiceMonitor target health up" target_up
  wait_for "self-check: PrometheusRule group levee-selfcheck loaded" rule_loaded
  k delete namespace "$SCRATCH" --timeout="${TIMEOUT}s" >/dev/null
  say "self-check passed; namespace $SCRATCH deleted"
fi
say "installed in $((SECONDS - t0)) s; query: kubectl get --raw $PROXY/api/v1/query?query=up"
