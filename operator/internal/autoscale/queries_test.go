package autoscale

import (
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/metricsdoc"
)

// documented is the metric contract: the names in docs/metrics.md.
func documented(t *testing.T) map[string]bool {
	t.Helper()
	names, err := metricsdoc.Names("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// Every metric name in every query the autoscaler sends is in docs/metrics.md.
func TestQueriesUseOnlyDocumentedMetrics(t *testing.T) {
	known := documented(t)
	ref := regexp.MustCompile(`\b(?:levee|process)_[a-zA-Z0-9_]+`)
	q := Queries{Namespace: "shop", Service: "orders-headless"}
	seen := map[string]bool{}
	for _, e := range q.All() {
		for _, name := range ref.FindAllString(e, -1) {
			seen[name] = true
			if !known[name] {
				t.Errorf("%s is not in docs/metrics.md (query %s)", name, e)
			}
		}
	}
	for _, m := range []string{MetricCPU, MetricDiskBusy, MetricDiskWeighted, MetricLatency + "_bucket", MetricLatency + "_count"} {
		if !seen[m] {
			t.Errorf("no query reads %s", m)
		}
	}
}

func TestQueries(t *testing.T) {
	q := Queries{Namespace: "shop", Service: "orders-headless"}
	sel := `{namespace="shop",service="orders-headless"}`
	want := map[string]string{
		q.PerPodRate(MetricCPU):       `sum by (pod) (rate(process_cpu_seconds_total` + sel + `[5m]))`,
		q.PerPodLastSample(MetricCPU): `max by (pod) (timestamp(process_cpu_seconds_total` + sel + `))`,
		q.P99():                       `histogram_quantile(0.99, sum by (le) (rate(levee_request_duration_seconds_bucket` + sel + `[5m])))`,
		q.LatencyLastSample():         `max(timestamp(levee_request_duration_seconds_count` + sel + `))`,
		Queries{Namespace: "a", Service: "b", Window: 4 * time.Second}.PerPodRate(MetricDiskBusy): `sum by (pod) (rate(levee_disk_io_time_seconds_total{namespace="a",service="b"}[4s]))`,
	}
	for got, w := range want {
		if got != w {
			t.Errorf("got  %s\nwant %s", got, w)
		}
	}
	if n := len(q.All()); n != 8 {
		t.Errorf("%d queries, want 8", n)
	}
	if strings.Contains(Queries{Namespace: `x"y`}.P99(), `x"y`) {
		t.Error("label values are not quoted")
	}
}

func TestSpecFrom(t *testing.T) {
	c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"}}
	c.Spec.Replicas = 4
	c.Spec.Autoscaling = &kvv1.AutoscalingSpec{Enabled: true, MaxReplicas: 9, CPUTarget: 65}
	c.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	s := SpecFrom(c, DefaultTuning())
	if !s.Enabled || s.Replicas != 4 || s.NVal != 3 || s.MinReplicas != 3 || s.MaxReplicas != 9 || !s.NVMe ||
		s.CPUTarget != 0.65 || s.DiskBusyTarget != 0.8 || s.ScaleUp != 5*time.Minute || s.ScaleDown != 30*time.Minute {
		t.Errorf("spec %+v", s)
	}
	if strings.Join(s.Members, ",") != "orders-0,orders-1,orders-2,orders-3" {
		t.Errorf("members %v", s.Members)
	}
	if s.CPURequest != 2 {
		t.Errorf("CPU request %v, want the limit 2 when no request is set", s.CPURequest)
	}
	c.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	c.Spec.Storage.Profile = kvv1.StorageHDD
	if s := SpecFrom(c, DefaultTuning()); s.CPURequest != 0.5 || s.NVMe {
		t.Errorf("CPU request %v NVMe %v, want the request 0.5 on hdd", s.CPURequest, s.NVMe)
	}
	if c.Spec.NVal != 0 {
		t.Error("SpecFrom changed the object it was given")
	}
	c.Spec.Autoscaling, c.Spec.Resources = nil, corev1.ResourceRequirements{}
	// Without resources the member runs with the operator's defaults, whose CPU request is
	// the denominator.
	if s := SpecFrom(c, DefaultTuning()); s.Enabled || s.CPURequest != 1 {
		t.Errorf("without autoscaling/resources: %+v, want the default CPU request 1", s)
	}
	if q := QueriesFor(c); q.Namespace != "shop" || q.Service != "orders-headless" || q.Window != DefaultWindow {
		t.Errorf("queries %+v", q)
	}
}
