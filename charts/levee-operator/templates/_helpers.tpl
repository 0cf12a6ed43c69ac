{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "levee-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: the release name when it already contains the chart name. */}}
{{- define "levee-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "levee-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "levee-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "levee-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "levee-operator.selectorLabels" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: levee
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "levee-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "levee-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false: name the existing ServiceAccount the operator runs as" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "levee-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Non-empty when the PrometheusRule with levee's rules is rendered: prometheusRule.enabled
true, or "auto" and the API server serves monitoring.coreos.com/v1 PrometheusRule (`helm template`
knows that only from --api-versions). */}}
{{- define "levee-operator.prometheusRule" -}}
{{- $e := .Values.prometheusRule.enabled }}
{{- if or (eq (toString $e) "true") (and (eq (toString $e) "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) }}true{{ end }}
{{- end }}

{{/* Input checks that the schema cannot express; each fails with a message naming the fix. */}}
{{- define "levee-operator.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: several operators would reconcile the same KVClusters at once; enable leader election or set replicaCount to 1" (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "serviceMonitor.enabled is true but metrics.enabled is false: there would be nothing to scrape; enable metrics or disable the ServiceMonitor" }}
{{- end }}
{{- if and .Values.serviceMonitor.prometheusServiceAccount.name (not .Values.serviceMonitor.prometheusServiceAccount.namespace) }}
{{- fail "serviceMonitor.prometheusServiceAccount.namespace is required with serviceMonitor.prometheusServiceAccount.name" }}
{{- end }}
{{- if eq (int .Values.metrics.port) (int .Values.healthProbePort) }}
{{- fail (printf "metrics.port and healthProbePort are both %d: give them different ports" (int .Values.metrics.port)) }}
{{- end }}
{{- end }}
