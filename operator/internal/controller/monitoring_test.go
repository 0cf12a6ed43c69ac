package controller

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/metricsdoc"
)

// metricsDoc is the single list of metric names (contract with the levee node).
const metricsDoc = "../../../docs/metrics.md"

// documentedMetrics is the metric contract: the names in docs/metrics.md.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names, err := metricsdoc.Names(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var metricRef = regexp.MustCompile(`\b(?:levee|process)_[a-zA-Z0-9_]+`)

// undocumented returns the levee_*/process_* names in expr missing from the list.
func undocumented(expr string, known map[string]bool) []string {
	var bad []string
	for _, name := range metricRef.FindAllString(expr, -1) {
		if !known[name] {
			bad = append(bad, name)
		}
	}
	return bad
}

func ruleExprs(t *testing.T, u *unstructured.Unstructured) []string {
	t.Helper()
	groups, _, err := unstructured.NestedSlice(u.Object, "spec", "groups")
	if err != nil || len(groups) == 0 {
		t.Fatalf("no rule groups: %v", err)
	}
	var out []string
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]interface{}), "rules")
		for _, r := range rules {
			out = append(out, r.(map[string]interface{})["expr"].(string))
		}
	}
	return out
}

// TestPrometheusRuleUsesOnlyDocumentedMetrics: every levee_*/process_* name in the
// PrometheusRule the operator builds is in docs/metrics.md.
func TestPrometheusRuleUsesOnlyDocumentedMetrics(t *testing.T) {
	known := documentedMetrics(t)
	exprs := ruleExprs(t, BuildPrometheusRule(cluster(nil)))
	if len(exprs) < 5 {
		t.Fatalf("only %d rules", len(exprs))
	}
	used := 0
	for _, e := range exprs {
		if bad := undocumented(e, known); len(bad) > 0 {
			t.Errorf("expression uses metrics not in %s: %v\n  %s", metricsDoc, bad, e)
		}
		used += len(metricRef.FindAllString(e, -1))
	}
	if used == 0 {
		t.Fatal("no levee metric referenced at all: the check would be vacuous")
	}
}

// The checker itself must catch a renamed metric.
func TestUndocumentedMetricIsCaught(t *testing.T) {
	known := documentedMetrics(t)
	cases := []struct {
		expr string
		bad  []string
	}{
		{`rate(levee_requests_total[5m])`, nil},
		{`histogram_quantile(0.99, rate(levee_request_duration_seconds_bucket[5m]))`, nil},
		{`rate(levee_request_total[5m])`, []string{"levee_request_total"}},
		{`rate(process_cpu_seconds[5m]) + levee_disk_busy`, []string{"process_cpu_seconds", "levee_disk_busy"}},
		{`up{service="kv-headless"} == 0`, nil},
	}
	for _, tc := range cases {
		got := undocumented(tc.expr, known)
		if strings.Join(got, ",") != strings.Join(tc.bad, ",") {
			t.Errorf("%s: undocumented = %v, want %v", tc.expr, got, tc.bad)
		}
	}
}

func TestBuildPrometheusRule(t *testing.T) {
	u := BuildPrometheusRule(cluster(nil))
	if u.GetAPIVersion() != "monitoring.coreos.com/v1" || u.GetKind() != "PrometheusRule" || u.GetName() != "kv" {
		t.Fatalf("object %s %s %s", u.GetAPIVersion(), u.GetKind(), u.GetName())
	}
	for _, e := range ruleExprs(t, u) {
		if !strings.Contains(e, `namespace="ns",service="kv-headless"`) {
			t.Errorf("expression not scoped to this cluster: %s", e)
		}
	}
	for _, r := range Rules(cluster(nil)) {
		if (r.Alert == "") == (r.Record == "") {
			t.Errorf("rule must be exactly one of alert/record: %+v", r)
		}
		if r.Alert != "" && (r.For == "" || r.Severity == "" || r.Summary == "") {
			t.Errorf("alert lacks for/severity/summary: %+v", r)
		}
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
