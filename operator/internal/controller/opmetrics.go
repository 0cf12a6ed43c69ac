package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
)

// The operator's own metrics (docs/metrics.md, "Operator metrics"), served on the manager's
// metrics endpoint next to controller-runtime's. Labels name the KVCluster as kvcluster_namespace
// and kvcluster: a scrape of the operator already carries namespace (the operator's own).
var (
	kvclusterReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "levee_operator_kvcluster_replicas",
		Help: "Members of a KVCluster: desired (spec.replicas), current (pods the StatefulSet runs), ready, listed (members in the published member list)",
	}, []string{"kvcluster_namespace", "kvcluster", "kind"})
	maintenanceFailed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "levee_operator_maintenance_failed",
		Help: "1 when the latest maintenance Job of this kind (compaction, aae-rebuild) of a KVCluster failed, else 0",
	}, []string{"kvcluster_namespace", "kvcluster", "kind"})

	autoscalerDesired = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "levee_operator_autoscaler_desired_replicas",
		Help: "Members the autoscaler's latest verdict wants for a KVCluster (clusters with autoscaling enabled)",
	}, []string{"kvcluster_namespace", "kvcluster"})
	autoscalerBottleneck = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "levee_operator_autoscaler_bottleneck",
		Help: "1 for the bottleneck (cpu, disk, none, unknown) of the autoscaler's latest verdict, 0 for the others",
	}, []string{"kvcluster_namespace", "kvcluster", "bottleneck"})
	autoscalerUtilisation = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "levee_operator_autoscaler_utilisation_ratio",
		Help: "What the autoscaler's latest verdict measured: mean CPU use over the CPU request (resource cpu), mean disk busy fraction (resource disk); NaN when unknown",
	}, []string{"kvcluster_namespace", "kvcluster", "resource"})
	autoscalerSteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "levee_operator_autoscaler_steps_total",
		Help: "Scale steps the autoscaler made, by direction (out, in)",
	}, []string{"kvcluster_namespace", "kvcluster", "direction"})
)

// Bottlenecks are the bottleneck label values of levee_operator_autoscaler_bottleneck.
var Bottlenecks = []autoscale.Bottleneck{autoscale.BottleneckCPU, autoscale.BottleneckDisk, autoscale.BottleneckNone, autoscale.BottleneckUnknown}

func init() {
	metrics.Registry.MustRegister(kvclusterReplicas, maintenanceFailed,
		autoscalerDesired, autoscalerBottleneck, autoscalerUtilisation, autoscalerSteps)
}

// recordAutoscaleMetrics sets the autoscaler's metrics of a KVCluster from an evaluation (nil:
// autoscaling disabled, its series are dropped).
func recordAutoscaleMetrics(c *kvv1.KVCluster, o *AutoscaleOutcome) {
	labels := prometheus.Labels{"kvcluster_namespace": c.Namespace, "kvcluster": c.Name}
	if o == nil {
		for _, v := range []interface {
			DeletePartialMatch(prometheus.Labels) int
		}{autoscalerDesired, autoscalerBottleneck, autoscalerUtilisation, autoscalerSteps} {
			v.DeletePartialMatch(labels)
		}
		return
	}
	v := o.Verdict
	autoscalerDesired.WithLabelValues(c.Namespace, c.Name).Set(float64(v.DesiredReplicas))
	for _, b := range Bottlenecks {
		val := 0.0
		if b == v.Bottleneck {
			val = 1
		}
		autoscalerBottleneck.WithLabelValues(c.Namespace, c.Name, string(b)).Set(val)
	}
	autoscalerUtilisation.WithLabelValues(c.Namespace, c.Name, "cpu").Set(v.CPU)
	autoscalerUtilisation.WithLabelValues(c.Namespace, c.Name, "disk").Set(v.DiskBusy)
	out, in := autoscalerSteps.WithLabelValues(c.Namespace, c.Name, "out"), autoscalerSteps.WithLabelValues(c.Namespace, c.Name, "in")
	if o.ScaleTo != nil {
		if *o.ScaleTo > c.Spec.Replicas {
			out.Inc()
		} else {
			in.Inc()
		}
	}
}

// ReplicaKinds are the kind label values of levee_operator_kvcluster_replicas.
var ReplicaKinds = []string{"desired", "current", "ready", "listed"}

// MetricSample is one value the operator exports for a KVCluster.
type MetricSample struct {
	Metric string
	Kind   string
	Value  float64
}

// StatusMetrics is what the operator exports for a KVCluster with this spec and status: a pure
// function of the two, so the values can be table-tested.
func StatusMetrics(c *kvv1.KVCluster, st kvv1.KVClusterStatus) []MetricSample {
	out := []MetricSample{
		{"levee_operator_kvcluster_replicas", "desired", float64(c.Spec.Replicas)},
		{"levee_operator_kvcluster_replicas", "current", float64(st.Replicas)},
		{"levee_operator_kvcluster_replicas", "ready", float64(st.ReadyReplicas)},
		{"levee_operator_kvcluster_replicas", "listed", float64(len(st.Members))},
	}
	failed := func(r *kvv1.MaintenanceRun) float64 {
		if r != nil && r.Phase == kvv1.MaintenanceFailed {
			return 1
		}
		return 0
	}
	var comp, aae *kvv1.MaintenanceRun
	if st.Maintenance != nil {
		comp, aae = st.Maintenance.Compaction, st.Maintenance.AAERebuild
	}
	return append(out,
		MetricSample{"levee_operator_maintenance_failed", MaintenanceCompaction, failed(comp)},
		MetricSample{"levee_operator_maintenance_failed", MaintenanceAAE, failed(aae)})
}

// recordMetrics sets the operator's metrics of a KVCluster from its new status.
func recordMetrics(c *kvv1.KVCluster, st kvv1.KVClusterStatus) {
	for _, s := range StatusMetrics(c, st) {
		vec := kvclusterReplicas
		if s.Metric == "levee_operator_maintenance_failed" {
			vec = maintenanceFailed
		}
		vec.WithLabelValues(c.Namespace, c.Name, s.Kind).Set(s.Value)
	}
}

// forgetMetrics drops a deleted KVCluster's series.
func forgetMetrics(namespace, name string) {
	labels := prometheus.Labels{"kvcluster_namespace": namespace, "kvcluster": name}
	kvclusterReplicas.DeletePartialMatch(labels)
	maintenanceFailed.DeletePartialMatch(labels)
	recordAutoscaleMetrics(&kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, nil)
}
