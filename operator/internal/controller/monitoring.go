package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Prometheus Operator kinds (monitoring.coreos.com/v1). They are handled as
// unstructured objects so the operator has no compile-time dependency on the
// Prometheus Operator and works when its CRDs are absent.
var (
	ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}
	PrometheusRuleGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}
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

// AlertRule is one Prometheus alerting or recording rule.
type AlertRule struct {
	Alert, Record, Expr, For, Severity, Summary string
}

// Rules returns the alerting and recording rules of a cluster. Expressions use
// only metric names from docs/metrics.md (checked by a test).
func Rules(c *kvv1.KVCluster) []AlertRule {
	sel := fmt.Sprintf(`namespace=%q,service=%q`, c.Namespace, HeadlessServiceName(c))
	return []AlertRule{
		{Record: "levee:write_amplification:ratio5m",
			Expr: fmt.Sprintf(`(sum(rate(levee_journal_bytes_written_total{%[1]s}[5m])) + sum(rate(levee_ledger_bytes_written_total{%[1]s}[5m]))) / sum(rate(levee_user_bytes_written_total{%[1]s}[5m]))`, sel)},
		{Record: "levee:disk_busy:ratio5m",
			Expr: fmt.Sprintf(`max by (pod) (rate(levee_disk_io_time_seconds_total{%s}[5m]))`, sel)},
		{Alert: "LeveeMemberDown", For: "5m", Severity: "critical",
			Expr:    fmt.Sprintf(`up{%s} == 0`, sel),
			Summary: "levee member {{ $labels.pod }} has not been scraped for 5 minutes"},
		{Alert: "LeveeRequestErrors", For: "10m", Severity: "warning",
			Expr:    fmt.Sprintf(`sum(rate(levee_requests_total{%[1]s,result="error"}[5m])) / sum(rate(levee_requests_total{%[1]s}[5m])) > 0.01`, sel),
			Summary: "more than 1% of levee requests fail"},
		{Alert: "LeveeDiskSaturated", For: "15m", Severity: "warning",
			Expr:    fmt.Sprintf(`rate(levee_disk_io_time_seconds_total{%s}[5m]) > 0.9`, sel),
			Summary: "the data disk of {{ $labels.pod }} is busy more than 90% of the time"},
		{Alert: "LeveeWriteStalls", For: "10m", Severity: "warning",
			Expr:    fmt.Sprintf(`rate(levee_write_stall_seconds_total{%s}[5m]) > 0.05`, sel),
			Summary: "writers on {{ $labels.pod }} wait for ledger merges more than 5% of the time"},
		{Alert: "LeveeLedgerMergeBacklog", For: "30m", Severity: "warning",
			Expr:    fmt.Sprintf(`levee_ledger_merge_backlog{%s} >= 4`, sel),
			Summary: "the ledger of {{ $labels.pod }} is 4 or more files over its level targets"},
		{Alert: "LeveeCompactionStuck", For: "6h", Severity: "warning",
			Expr:    fmt.Sprintf(`levee_journal_compaction_active{%s} == 1`, sel),
			Summary: "a journal compaction on {{ $labels.pod }} has been running for 6 hours"},
		{Alert: "LeveeHandoffPending", For: "1h", Severity: "info",
			Expr:    fmt.Sprintf(`sum by (pod) (levee_vnodes{%s,state="handoff"}) > 0`, sel),
			Summary: "{{ $labels.pod }} has had vnodes in handoff for an hour"},
	}
}

// BuildPrometheusRule returns the PrometheusRule with Rules(c).
func BuildPrometheusRule(c *kvv1.KVCluster) *unstructured.Unstructured {
	u := newUnstructured(PrometheusRuleGVK, c, c.Name, map[string]string{labelComponent: "monitoring"})
	var rules []interface{}
	for _, r := range Rules(c) {
		m := map[string]interface{}{"expr": r.Expr}
		if r.Record != "" {
			m["record"] = r.Record
		} else {
			m["alert"] = r.Alert
			m["for"] = r.For
			m["labels"] = map[string]interface{}{"severity": r.Severity, "kvcluster": c.Name}
			m["annotations"] = map[string]interface{}{"summary": r.Summary}
		}
		rules = append(rules, m)
	}
	u.Object["spec"] = map[string]interface{}{
		"groups": []interface{}{map[string]interface{}{
			"name":  "levee." + c.Namespace + "." + c.Name,
			"rules": rules,
		}},
	}
	return u
}
