package controller

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Prometheus Operator kinds (monitoring.coreos.com/v1). They are handled as
// unstructured objects so the operator has no compile-time dependency on the
// Prometheus Operator and works when its CRDs are absent.
var (
	MonitoringGV      = schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}
	ServiceMonitorGVK = MonitoringGV.WithKind("ServiceMonitor")
	// PrometheusRuleGVK is the kind of the per-cluster rules earlier operator versions created
	// (named like the cluster). The operator now only deletes such an object when it owns it:
	// the rules have one source, dashboards/alerts/levee.rules.yaml, shipped by the Helm chart.
	PrometheusRuleGVK = MonitoringGV.WithKind("PrometheusRule")
)

func newUnstructured(gvk schema.GroupVersionKind, c *kvv1.KVCluster, name string, extraLabels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	u.SetNamespace(c.Namespace)
	u.SetLabels(labelsWith(c, extraLabels))
	return u
}

func stringMap(m map[string]string) map[string]interface{} {
	out := make(map[string]interface{}, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// BuildServiceMonitor scrapes /metrics of every member through the headless Service.
func BuildServiceMonitor(c *kvv1.KVCluster) *unstructured.Unstructured {
	u := newUnstructured(ServiceMonitorGVK, c, c.Name, map[string]string{labelComponent: "monitoring"})
	sel := SelectorLabels(c)
	delete(sel, labelComponent)
	sel[LabelService] = "headless"
	u.Object["spec"] = map[string]interface{}{
		"selector":          map[string]interface{}{"matchLabels": stringMap(sel)},
		"namespaceSelector": map[string]interface{}{"matchNames": []interface{}{c.Namespace}},
		"endpoints": []interface{}{map[string]interface{}{
			"port":     MetricsPortName,
			"path":     "/metrics",
			"interval": "30s",
		}},
	}
	return u
}

// LegacyPrometheusRule names the PrometheusRule earlier operator versions created for c
// (same name and namespace as the cluster). Reconcile deletes it when c controls it. That
// cleanup (one GET per reconcile) goes away with spec.monitoring.prometheusRule in the next
// API version.
func LegacyPrometheusRule(c *kvv1.KVCluster) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{}}
	u.SetGroupVersionKind(PrometheusRuleGVK)
	u.SetName(c.Name)
	u.SetNamespace(c.Namespace)
	return u
}
