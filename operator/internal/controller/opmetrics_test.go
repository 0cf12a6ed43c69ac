package controller

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
	"github.com/levee-io/levee/operator/internal/metricsdoc"
)

func TestStatusMetrics(t *testing.T) {
	failed := &kvv1.MaintenanceRun{Phase: kvv1.MaintenanceFailed}
	ok := &kvv1.MaintenanceRun{Phase: kvv1.MaintenanceSucceeded}
	cases := []struct {
		name string
		st   kvv1.KVClusterStatus
		want map[string]float64 // metric/kind → value
	}{
		{"new cluster, nothing run", kvv1.KVClusterStatus{},
			map[string]float64{"replicas/desired": 3, "replicas/current": 0, "replicas/ready": 0, "replicas/listed": 0,
				"failed/compaction": 0, "failed/aae-rebuild": 0}},
		{"running, compaction failed, rebuild fine",
			kvv1.KVClusterStatus{Replicas: 3, ReadyReplicas: 2, Members: []string{"a", "b", "c"},
				Maintenance: &kvv1.MaintenanceStatus{Compaction: failed, AAERebuild: ok}},
			map[string]float64{"replicas/desired": 3, "replicas/current": 3, "replicas/ready": 2, "replicas/listed": 3,
				"failed/compaction": 1, "failed/aae-rebuild": 0}},
		{"rebuild failed, no compaction yet",
			kvv1.KVClusterStatus{Replicas: 4, ReadyReplicas: 4, Members: []string{"a", "b", "c"},
				Maintenance: &kvv1.MaintenanceStatus{AAERebuild: failed}},
			map[string]float64{"replicas/desired": 3, "replicas/current": 4, "replicas/ready": 4, "replicas/listed": 3,
				"failed/compaction": 0, "failed/aae-rebuild": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]float64{}
			for _, s := range StatusMetrics(cluster(nil), tc.st) {
				short := strings.TrimPrefix(strings.TrimPrefix(s.Metric, "levee_operator_kvcluster_"), "levee_operator_maintenance_")
				got[short+"/"+s.Kind] = s.Value
			}
			if len(got) != len(tc.want) {
				t.Fatalf("samples %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
				}
			}
		})
	}
}

// The operator's metrics, as the manager serves them (controller-runtime's registry), are exactly
// the ones docs/metrics.md lists under "Operator metrics"; a deleted cluster's series go away.
func TestOperatorMetricsAreDocumented(t *testing.T) {
	c := cluster(func(c *kvv1.KVCluster) { c.Namespace, c.Name = "docs", "contract" })
	recordMetrics(c, kvv1.KVClusterStatus{Replicas: 3, ReadyReplicas: 3,
		Maintenance: &kvv1.MaintenanceStatus{Compaction: &kvv1.MaintenanceRun{Phase: kvv1.MaintenanceFailed}}})
	to := int32(4)
	recordAutoscaleMetrics(c, &AutoscaleOutcome{ScaleTo: &to, Verdict: autoscale.Verdict{
		Bottleneck: autoscale.BottleneckCPU, DesiredReplicas: 4, CPU: 0.9, DiskBusy: 0.2}})
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "levee_") {
			exported[f.GetName()] = true
		}
	}
	doc, err := metricsdoc.OperatorNames("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	for n := range exported {
		if !doc[n] {
			t.Errorf("the operator exports %s, which docs/metrics.md (Operator metrics) does not document", n)
		}
	}
	for n := range doc {
		if !exported[n] {
			t.Errorf("docs/metrics.md documents operator metric %s, which the operator does not export (exports %v)", n, keys(exported))
		}
	}
	if v := testutil.ToFloat64(maintenanceFailed.WithLabelValues("docs", "contract", MaintenanceCompaction)); v != 1 {
		t.Errorf("maintenance_failed{compaction} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(autoscalerBottleneck.WithLabelValues("docs", "contract", "cpu")); v != 1 {
		t.Errorf("autoscaler_bottleneck{cpu} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(autoscalerSteps.WithLabelValues("docs", "contract", "out")); v != 1 {
		t.Errorf("autoscaler_steps_total{out} = %v, want 1", v)
	}
	forgetMetrics("docs", "contract")
	fams, err = metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kvcluster" && l.GetValue() == "contract" {
					t.Errorf("%s still has a series of the forgotten cluster: %v", f.GetName(), m.GetLabel())
				}
			}
		}
	}
}
