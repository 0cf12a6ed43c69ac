//go:build prometheus

// Package prometheus runs the autoscaler's reading and decision against a real Prometheus
// (Debian's /usr/bin/prometheus, or $PROMETHEUS) scraping exporters this test serves on
// 127.0.0.1, one per member, whose counters grow at rates the test sets. Windows are seconds
// instead of minutes and Prometheus scrapes every second. Run by `make -C operator
// prometheus-test` (part of `make -C operator test`); the `prometheus` build tag keeps it out of
// `go test ./...`.
package prometheus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
	"github.com/levee-io/levee/operator/internal/testprom"
)

const (
	namespace = "it"
	rateOver  = 5 * time.Second
	upWindow  = 4 * time.Second
	downWin   = 6 * time.Second
	evalEvery = 500 * time.Millisecond
)

type (
	load    = testprom.Load
	cluster = testprom.Cluster
)

func newCluster(t *testing.T, name string, profile kvv1.StorageProfile, n int, l load) *cluster {
	return testprom.NewCluster(t, namespace, name, profile, n, l)
}

// kv is the KVCluster the autoscaler reads its settings from.
func kv(c *cluster) *kvv1.KVCluster {
	k := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: namespace}}
	k.Spec.Replicas = int32(len(c.Members))
	k.Spec.Storage.Profile = c.Profile
	k.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	k.Spec.Autoscaling = &kvv1.AutoscalingSpec{
		Enabled: true, MinReplicas: 3, MaxReplicas: 6, PrometheusURL: "http://unused",
		ScaleUpStabilization:   &metav1.Duration{Duration: upWindow},
		ScaleDownStabilization: &metav1.Duration{Duration: downWin},
	}
	return k
}

// autoscaler plays the operator's loop for one cluster: read, decide, record.
type autoscaler struct {
	client  *autoscale.Client
	queries autoscale.Queries
	spec    autoscale.Spec
	hist    autoscale.History
}

func newAutoscaler(t *testing.T, url string, c *cluster) *autoscaler {
	t.Helper()
	client, err := autoscale.NewClient(url, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tuning := autoscale.DefaultTuning()
	tuning.MaxSignalAge = 5 * time.Second
	tuning.MaxObservationGap = 3 * time.Second
	q := autoscale.QueriesFor(kv(c))
	q.Window = rateOver
	return &autoscaler{client: client, queries: q, spec: autoscale.SpecFrom(kv(c), tuning)}
}

func (a *autoscaler) eval(t *testing.T) autoscale.Verdict {
	t.Helper()
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sig, err := a.client.Read(ctx, a.queries, now)
	if err != nil {
		t.Fatalf("reading Prometheus: %v", err)
	}
	v := autoscale.Decide(sig, a.spec, a.hist, now)
	a.hist = a.hist.Record(v.Observation, a.spec.Keep())
	return v
}

// until evaluates every evalEvery until done says so or timeout passes; it returns every verdict.
func (a *autoscaler) until(t *testing.T, timeout time.Duration, done func(autoscale.Verdict) bool) []autoscale.Verdict {
	t.Helper()
	var out []autoscale.Verdict
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		v := a.eval(t)
		out = append(out, v)
		if done(v) {
			return out
		}
		time.Sleep(evalEvery)
	}
	return out
}

func dump(vs []autoscale.Verdict) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s %s → %d: %s\n", v.Observation.At.Format("15:04:05.000"), v.Bottleneck, v.DesiredReplicas, v.Reason)
	}
	return b.String()
}

// firstStep checks that exactly one step happened, at the end of vs, at least window after the
// first observation of the pressure, and returns it.
func firstStep(t *testing.T, vs []autoscale.Verdict, cur int32, p autoscale.Pressure, window time.Duration) autoscale.Verdict {
	t.Helper()
	var since time.Time
	for i, v := range vs {
		if v.Observation.Pressure == p && since.IsZero() {
			since = v.Observation.At
		}
		if v.DesiredReplicas != cur {
			if i != len(vs)-1 {
				t.Fatalf("more than one step:\n%s", dump(vs))
			}
			if since.IsZero() || v.Observation.At.Sub(since) < window {
				t.Fatalf("stepped %s after the first %s observation, before the %s window:\n%s", v.Observation.At.Sub(since), p, window, dump(vs))
			}
			return v
		}
	}
	t.Fatalf("no step:\n%s", dump(vs))
	return autoscale.Verdict{}
}

// afterStep plays the step in flight for a while: every verdict must hold the replicas.
func (a *autoscaler) afterStep(t *testing.T, v autoscale.Verdict) {
	t.Helper()
	a.hist.LastScaleTime = v.Observation.At
	a.hist.InFlight.Step = true
	for _, w := range a.until(t, 2*time.Second, func(autoscale.Verdict) bool { return false }) {
		if w.DesiredReplicas != a.spec.Replicas || !strings.Contains(w.Reason, "no scaling while the previous scale step") {
			t.Fatalf("while the step is in flight: %s → %d: %s", w.Bottleneck, w.DesiredReplicas, w.Reason)
		}
	}
}

func TestAutoscalerWithRealPrometheus(t *testing.T) {
	start := time.Now()
	var (
		cpuLoad   = load{CPU: 0.9, Disk: 0.2, Queue: 0.5, Latency: 0.002, RPS: 200}
		diskLoad  = load{CPU: 0.3, Disk: 0.95, Queue: 12, Latency: 0.02, RPS: 200}
		shallow   = load{CPU: 0.3, Disk: 0.95, Queue: 1, Latency: 0.002, RPS: 200}
		idle      = load{CPU: 0.05, Disk: 0.05, Queue: 0.1, Latency: 0.001, RPS: 5}
		steadyCPU = load{CPU: 0.5, Disk: 0.2, Queue: 0.5, Latency: 0.002, RPS: 200}
	)
	cpu := newCluster(t, "cpu", kvv1.StorageHDD, 3, steadyCPU)
	disk := newCluster(t, "disk", kvv1.StorageHDD, 3, steadyCPU)
	nvme := newCluster(t, "nvme", kvv1.StorageNVMe, 3, shallow)
	idleC := newCluster(t, "idle", kvv1.StorageHDD, 4, idle)
	gap := newCluster(t, "gap", kvv1.StorageHDD, 3, cpuLoad)
	url := testprom.StartPrometheus(t, cpu, disk, nvme, idleC, gap)
	ready := func(v autoscale.Verdict) bool { return v.Bottleneck != autoscale.BottleneckUnknown }

	t.Run("cpu-bound series scale out one step after the window", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, cpu)
		if vs := a.until(t, 20*time.Second, ready); !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		cpu.Set(cpuLoad)
		vs := a.until(t, 25*time.Second, func(v autoscale.Verdict) bool { return v.DesiredReplicas != 3 })
		v := firstStep(t, vs, 3, autoscale.PressureHigh, upWindow)
		if v.Bottleneck != autoscale.BottleneckCPU || v.DesiredReplicas != 4 || !strings.Contains(v.Reason, "scaling out to 4: cpu-bound") {
			t.Fatalf("step: %s → %d: %s", v.Bottleneck, v.DesiredReplicas, v.Reason)
		}
		if p := autoscale.Percent(v.CPU); p < 80 || p > 100 {
			t.Errorf("CPU %d%%, want ~90%%", p)
		}
		t.Logf("step: %s", v.Reason)
		a.afterStep(t, v)
	})

	t.Run("disk-bound series give verdict disk and name the saturated disks", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, disk)
		if vs := a.until(t, 20*time.Second, ready); !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		disk.Set(diskLoad)
		vs := a.until(t, 25*time.Second, func(v autoscale.Verdict) bool { return v.DesiredReplicas != 3 })
		v := firstStep(t, vs, 3, autoscale.PressureHigh, upWindow)
		if v.Bottleneck != autoscale.BottleneckDisk || strings.Join(v.DiskSaturated, ",") != "disk-0,disk-1,disk-2" {
			t.Fatalf("step: %s saturated %v: %s", v.Bottleneck, v.DiskSaturated, v.Reason)
		}
		t.Logf("step: %s", v.Reason)
	})

	t.Run("NVMe busy with a shallow queue is not disk-bound", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, nvme)
		vs := a.until(t, 20*time.Second, ready)
		if !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		vs = a.until(t, 2*upWindow, func(autoscale.Verdict) bool { return false })
		for _, v := range vs {
			if v.Bottleneck != autoscale.BottleneckNone || v.DesiredReplicas != 3 {
				t.Fatalf("shallow queue:\n%s", dump(vs))
			}
		}
		nvme.Set(load{CPU: 0.3, Disk: 0.95, Queue: 12, Latency: 0.02, RPS: 200})
		vs = a.until(t, 15*time.Second, func(v autoscale.Verdict) bool { return v.Bottleneck == autoscale.BottleneckDisk })
		if v := vs[len(vs)-1]; v.Bottleneck != autoscale.BottleneckDisk || !strings.Contains(v.Reason, "disk-bound for") {
			t.Fatalf("deep queue never disk-bound:\n%s", dump(vs))
		}
	})

	t.Run("both low for the down window scale in one step", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, idleC)
		vs := a.until(t, 35*time.Second, func(v autoscale.Verdict) bool { return v.DesiredReplicas != 4 })
		v := firstStep(t, vs, 4, autoscale.PressureLow, downWin)
		if v.Bottleneck != autoscale.BottleneckNone || v.DesiredReplicas != 3 || !strings.Contains(v.Reason, "scaling in to 3: low") {
			t.Fatalf("step: %s → %d: %s", v.Bottleneck, v.DesiredReplicas, v.Reason)
		}
		t.Logf("step: %s", v.Reason)
		a.afterStep(t, v)
	})

	t.Run("a missing series means no action and names the series", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, gap)
		if vs := a.until(t, 20*time.Second, ready); !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		gap.Members[2].HideDisk(true)
		vs := a.until(t, 2*upWindow+3*time.Second, func(autoscale.Verdict) bool { return false })
		for _, v := range vs {
			if v.DesiredReplicas != 3 {
				t.Fatalf("scaled with a series missing:\n%s", dump(vs))
			}
		}
		last := vs[len(vs)-1]
		want := "no action: series levee_disk_io_time_seconds_total missing for gap-2"
		if last.Bottleneck != autoscale.BottleneckUnknown || !strings.Contains(last.Reason, want) {
			t.Fatalf("last verdict %s: %q, want %q\n%s", last.Bottleneck, last.Reason, want, dump(vs))
		}
	})
	t.Cleanup(func() { t.Logf("real-Prometheus scenarios took %s", time.Since(start).Round(100*time.Millisecond)) })
}
