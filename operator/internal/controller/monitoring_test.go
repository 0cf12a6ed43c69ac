package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// The alert rules are not built here: they have one source, dashboards/alerts/levee.rules.yaml,
// shipped by the Helm chart (tested by dashboards-test and chart-test). The operator only
// deletes the PrometheusRule earlier versions created (test/envtest TestOptionalIntegrations).
func TestLegacyPrometheusRule(t *testing.T) {
	u := LegacyPrometheusRule(cluster(func(c *kvv1.KVCluster) { c.Namespace, c.Name = "prod", "orders" }))
	if u.GetAPIVersion() != "monitoring.coreos.com/v1" || u.GetKind() != "PrometheusRule" || u.GetNamespace() != "prod" || u.GetName() != "orders" {
		t.Fatalf("legacy PrometheusRule is %s %s %s/%s, want monitoring.coreos.com/v1 PrometheusRule prod/orders",
			u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
	}
}

func TestBuildServiceMonitor(t *testing.T) {
	cases := []struct {
		name string
		c    *kvv1.KVCluster
	}{{"default", cluster(nil)}, {"other namespace", cluster(func(c *kvv1.KVCluster) { c.Namespace = "prod"; c.Name = "orders" })}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := BuildServiceMonitor(tc.c)
			sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
			s := labels.SelectorFromSet(sel)
			if !s.Matches(labels.Set(BuildHeadlessService(tc.c).Labels)) {
				t.Errorf("ServiceMonitor selector %v misses the headless Service", sel)
			}
			if s.Matches(labels.Set(BuildClientService(tc.c).Labels)) {
				t.Errorf("ServiceMonitor selector %v also matches the client Service (members would be scraped twice)", sel)
			}
			ns, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "namespaceSelector", "matchNames")
			eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
			if len(ns) != 1 || ns[0] != tc.c.Namespace || len(eps) != 1 {
				t.Fatalf("namespaces %v endpoints %v", ns, eps)
			}
			ep := eps[0].(map[string]interface{})
			if ep["port"] != "metrics" || ep["path"] != "/metrics" {
				t.Errorf("endpoint = %v", ep)
			}
		})
	}
}
