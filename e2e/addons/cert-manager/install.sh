#!/usr/bin/env bash
# Install cert-manager v1.11.5 into namespace cert-manager of the running e2e cluster (make e2e-up),
# from the images of ./build.sh (run first; cheap when cached):
#   - CRDs cert-manager.io / acme.cert-manager.io from the Go module cache (their Helm-template labels
#     stripped; never copied here)
#   - controller, cainjector and webhook Deployments with their RBAC, the webhook's Service and its
#     validating/mutating configurations (serving certificate made by the webhook itself, CA bundle
#     injected by the cainjector)
# Then a self-check (CM_SELFCHECK=0 skips it): a self-signed Issuer and a Certificate in a scratch
# namespace must become Ready with a Secret holding ca.crt, tls.crt and tls.key, and an invalid
# Certificate must be refused by the webhook. Idempotent: a second run re-applies and re-checks.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=SCRIPTDIR/../../kube/env.sh
. "$here/../../kube/env.sh"
# shellcheck disable=SC2034 # ADDON and TIMEOUT are read by lib.sh
ADDON=cert-manager
TIMEOUT=${CM_TIMEOUT:-300}            # seconds per wait
# shellcheck source=SCRIPTDIR/../lib.sh
. "$here/../lib.sh"
GO=${GO:-go}
CM_VERSION=v1.11.5
NS=cert-manager
SCRATCH=levee-cm-selfcheck
PART_OF=levee-e2e-cert-manager        # label on everything, cluster-scoped objects included
cache=$LEVEE_CACHE/e2e/addons/cert-manager-$CM_VERSION
t0=$SECONDS

diagnostics() {
  say "diagnostics ($NS)"
  k -n "$NS" get all -o wide || true
  k -n "$NS" get events --sort-by=.lastTimestamp | tail -n 30 || true
  for d in controller cainjector webhook; do
    k -n "$NS" logs "deploy/cert-manager-$d" --tail=40 || true
  done
  k -n "$SCRATCH" get issuers,certificates,certificaterequests -o wide 2>/dev/null || true
}
require_cluster

# 1. Images (built, cached, imported into the node's containerd).
"$here/build.sh"
# shellcheck source=/dev/null
. "$cache/images.env"

# 2. CRDs from the module cache, without the Helm-template label lines the chart fills in.
mod_dir=$(cd "$here/module" && "$GO" mod download -json "github.com/cert-manager/cert-manager@$CM_VERSION" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
crd_dir=$mod_dir/deploy/crds
[ -d "$crd_dir" ] || fail "no CRD folder $crd_dir"
apply_crds "$crd_dir"/crd-*.yaml

# 3. The three components. RBAC follows what each one reads and writes (the controller's is broad
# within cert-manager's own groups, as in its chart).
k apply -f - >/dev/null <<EOT
apiVersion: v1
kind: Namespace
metadata: {name: $NS, labels: {app.kubernetes.io/part-of: $PART_OF, cert-manager.io/disable-validation: "true"}}
---
# The webhook keeps its own serving CA in this Secret; nothing else in the namespace.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: cert-manager-webhook, namespace: $NS, labels: {app.kubernetes.io/part-of: $PART_OF}}
rules:
  - {apiGroups: [""], resources: [secrets], verbs: [create]}
  - {apiGroups: [""], resources: [secrets], resourceNames: [cert-manager-webhook-ca], verbs: [get, list, watch, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cert-manager-webhook, namespace: $NS, labels: {app.kubernetes.io/part-of: $PART_OF}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cert-manager-webhook}
subjects: [{kind: ServiceAccount, name: cert-manager-webhook, namespace: $NS}]
---
apiVersion: v1
kind: Service
metadata: {name: cert-manager-webhook, namespace: $NS, labels: {app.kubernetes.io/name: cert-manager-webhook, app.kubernetes.io/part-of: $PART_OF}}
spec:
  selector: {app.kubernetes.io/name: cert-manager-webhook}
  ports: [{name: https, port: 443, targetPort: https}]
EOT
env_ns='{name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}'
{
  account "$NS" cert-manager levee-e2e-cert-manager-controller "\
    - {apiGroups: [cert-manager.io, acme.cert-manager.io], resources: [\"*\"], verbs: [\"*\"]}
    - {apiGroups: [\"\"], resources: [secrets, configmaps, services, pods], verbs: [\"*\"]}
    - {apiGroups: [\"\"], resources: [events], verbs: [create, patch]}
    - {apiGroups: [networking.k8s.io], resources: [ingresses, ingresses/finalizers], verbs: [\"*\"]}
    - {apiGroups: [gateway.networking.k8s.io], resources: [\"*\"], verbs: [get, list, watch]}
    - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [\"*\"]}
    - {apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}
    - {apiGroups: [certificates.k8s.io], resources: [certificatesigningrequests, certificatesigningrequests/status], verbs: [get, list, watch, update]}
    - {apiGroups: [certificates.k8s.io], resources: [signers], verbs: [sign], resourceNames: [\"issuers.cert-manager.io/*\", \"clusterissuers.cert-manager.io/*\"]}"
  account "$NS" cert-manager-cainjector levee-e2e-cert-manager-cainjector "\
    - {apiGroups: [cert-manager.io], resources: [certificates], verbs: [get, list, watch]}
    - {apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch]}
    - {apiGroups: [\"\"], resources: [events], verbs: [create, patch]}
    - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [\"*\"]}
    - {apiGroups: [admissionregistration.k8s.io], resources: [validatingwebhookconfigurations, mutatingwebhookconfigurations], verbs: [get, list, watch, update, patch]}
    - {apiGroups: [apiregistration.k8s.io], resources: [apiservices], verbs: [get, list, watch, update, patch]}
    - {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get, list, watch, update, patch]}"
  account "$NS" cert-manager-webhook levee-e2e-cert-manager-webhook "\
    - {apiGroups: [authorization.k8s.io], resources: [subjectaccessreviews], verbs: [create]}"
  deployment "$NS" cert-manager-controller cert-manager controller "$CM_CONTROLLER_IMAGE" "\
          args: [--v=2, --cluster-resource-namespace=\$(POD_NAMESPACE), --leader-elect=false, --enable-certificate-owner-ref=true]
          env: [$env_ns, {name: GOGC, value: \"30\"}]
          ports: [{name: metrics, containerPort: 9402}]
          resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 256Mi}}"
  deployment "$NS" cert-manager-cainjector cert-manager-cainjector cainjector "$CM_CAINJECTOR_IMAGE" "\
          args: [--v=2, --leader-elect=false]
          env: [{name: GOGC, value: \"30\"}]
          resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 256Mi}}"
  deployment "$NS" cert-manager-webhook cert-manager-webhook webhook "$CM_WEBHOOK_IMAGE" "\
          args:
            - --v=2
            - --secure-port=10260
            - --dynamic-serving-ca-secret-namespace=\$(POD_NAMESPACE)
            - --dynamic-serving-ca-secret-name=cert-manager-webhook-ca
            - --dynamic-serving-dns-names=cert-manager-webhook,cert-manager-webhook.$NS,cert-manager-webhook.$NS.svc
          env: [$env_ns, {name: GOGC, value: \"30\"}]
          ports: [{name: https, containerPort: 10260}, {name: healthcheck, containerPort: 6080}]
          readinessProbe: {httpGet: {path: /healthz, port: 6080}, periodSeconds: 5}
          livenessProbe: {httpGet: {path: /livez, port: 6080}, initialDelaySeconds: 60, periodSeconds: 10}
          resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {memory: 128Mi}}"
} | k apply -f - >/dev/null
for d in controller cainjector webhook; do
  k -n "$NS" rollout status "deploy/cert-manager-$d" --timeout="${TIMEOUT}s" >/dev/null ||
    fail "Deployment cert-manager-$d not ready"
done
say "controller, cainjector and webhook ready"

# 4. Admission: the webhook validates every cert-manager object and mutates CertificateRequests.
# Its CA bundle comes from the cainjector, out of the Secret the webhook keeps.
# webhook_config KIND PATH RULES NAMESPACE_SELECTOR
webhook_config() {
  cat <<EOT
---
apiVersion: admissionregistration.k8s.io/v1
kind: $1
metadata:
  name: levee-e2e-cert-manager-webhook
  labels: {app.kubernetes.io/part-of: $PART_OF}
  annotations: {cert-manager.io/inject-ca-from-secret: $NS/cert-manager-webhook-ca}
webhooks:
  - name: webhook.cert-manager.io
    rules: $3
    namespaceSelector: $4
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
    clientConfig: {service: {name: cert-manager-webhook, namespace: $NS, path: $2}}
EOT
}
{
  webhook_config ValidatingWebhookConfiguration /validate \
    '[{apiGroups: [cert-manager.io, acme.cert-manager.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: ["*/*"]}]' \
    '{matchExpressions: [{key: cert-manager.io/disable-validation, operator: NotIn, values: ["true"]}]}'
  webhook_config MutatingWebhookConfiguration /mutate \
    '[{apiGroups: [cert-manager.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [certificaterequests]}]' '{}'
} | k apply -f - >/dev/null
ca_injected() {
  [ -n "$(k get validatingwebhookconfiguration levee-e2e-cert-manager-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ] &&
    [ -n "$(k get mutatingwebhookconfiguration levee-e2e-cert-manager-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]
}
wait_for "webhook CA bundle injected" ca_injected

# 5. Self-check: a Certificate from a self-signed Issuer becomes Ready with a complete Secret, and
# the webhook refuses a Certificate that names no subject (a rule the CRD schema cannot express).
if [ "${CM_SELFCHECK:-1}" = 1 ]; then
  k apply -f - >/dev/null <<EOT
apiVersion: v1
kind: Namespace
metadata: {name: $SCRATCH, labels: {app.kubernetes.io/part-of: $PART_OF}}
EOT
  apply_issuer() {
    k apply -f - <<EOT
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned, namespace: $SCRATCH}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: selfcheck, namespace: $SCRATCH}
spec:
  secretName: selfcheck
  commonName: selfcheck.$SCRATCH.svc
  dnsNames: [selfcheck.$SCRATCH.svc]
  isCA: true
  issuerRef: {name: selfsigned, kind: Issuer}
EOT
  }
  # The webhook may need a moment after its CA bundle lands before the API server trusts it.
  wait_for "self-check Issuer and Certificate admitted" apply_issuer
  cert_ready() {
    [ "$(k -n "$SCRATCH" get certificate selfcheck -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
  }
  wait_for "self-check Certificate Ready" cert_ready
  for key in ca.crt tls.crt tls.key; do
    [ -n "$(k -n "$SCRATCH" get secret selfcheck -o jsonpath="{.data.${key//./\\.}}")" ] ||
      fail "Secret $SCRATCH/selfcheck has no $key"
  done
  if out=$(k apply -f - 2>&1 <<EOT
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: invalid, namespace: $SCRATCH}
spec: {secretName: invalid, issuerRef: {name: selfsigned, kind: Issuer}}
EOT
  ); then
    fail "a Certificate without a subject was admitted: $out"
  fi
  case $out in
    *webhook.cert-manager.io*) say "self-check: the webhook refused a Certificate without a subject" ;;
    *) fail "a Certificate without a subject was refused, but not by the webhook: $out" ;;
  esac
  k delete namespace "$SCRATCH" --timeout="${TIMEOUT}s" >/dev/null
  say "self-check passed; namespace $SCRATCH deleted"
fi
say "installed in $((SECONDS - t0)) s"
