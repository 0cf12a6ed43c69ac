package envtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
	"github.com/levee-io/levee/operator/internal/controller"
	"github.com/levee-io/levee/operator/internal/testprom"
)

// The suite's operator evaluates autoscaling every half second with windows of seconds (see
// fastAutoscaler); these are the clusters' stabilization windows.
const (
	upWindow   = 4 * time.Second
	downWindow = 6 * time.Second
)

// fastAutoscaler is the suite operator's autoscaler: the real reading and decision with
// windows of seconds, for a Prometheus that scrapes every second.
func fastAutoscaler() *controller.Autoscaler {
	tuning := autoscale.DefaultTuning()
	tuning.MaxSignalAge = 5 * time.Second
	tuning.MaxObservationGap = 3 * time.Second
	return &controller.Autoscaler{Tuning: &tuning, Window: 5 * time.Second, Every: 500 * time.Millisecond, QueryTimeout: 2 * time.Second}
}

var (
	steady = testprom.Load{CPU: 0.5, Disk: 0.2, Queue: 0.5, Latency: 0.002, RPS: 200}
	hot    = testprom.Load{CPU: 0.9, Disk: 0.2, Queue: 0.5, Latency: 0.002, RPS: 200}
	busy   = testprom.Load{CPU: 0.3, Disk: 0.95, Queue: 12, Latency: 0.02, RPS: 200}
	idle   = testprom.Load{CPU: 0.05, Disk: 0.05, Queue: 0.1, Latency: 0.001, RPS: 5}
)

// autoscaled creates a KVCluster of the members' count with autoscaling on (bounds min..max)
// against the Prometheus at url, and plays its StatefulSet with every member ready.
func autoscaled(t *testing.T, tc *testprom.Cluster, url string, min, max int32) {
	t.Helper()
	createCluster(t, tc.Namespace, tc.Name, func(c *kvv1.KVCluster) {
		c.Spec.Replicas = int32(len(tc.Members))
		c.Spec.Storage.Profile = tc.Profile
		c.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		c.Spec.Autoscaling = &kvv1.AutoscalingSpec{
			Enabled: true, MinReplicas: min, MaxReplicas: max, PrometheusURL: url,
			ScaleUpStabilization:   &metav1.Duration{Duration: upWindow},
			ScaleDownStabilization: &metav1.Duration{Duration: downWindow},
		}
	})
	markStatefulSetReady(t, tc.Namespace, tc.Name, int32(len(tc.Members)))
}

// waitAutoscaler waits until status.autoscaler satisfies ok (within d) and returns the cluster.
func waitAutoscaler(t *testing.T, ns, name string, d time.Duration, what string, ok func(*kvv1.KVCluster) bool) *kvv1.KVCluster {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		c := getCluster(t, ns, name)
		if c.Status.Autoscaler != nil && ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: timed out after %s waiting for %s; replicas %d, autoscaler %s, conditions %s",
				ns, name, d, what, c.Spec.Replicas, dump(c.Status.Autoscaler), dump(c.Status.Conditions))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func event(t *testing.T, ns, object, reason, contains string) {
	t.Helper()
	eventually(t, fmt.Sprintf("a %s Event on %s containing %q", reason, object, contains), func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == object && e.Reason == reason && strings.Contains(e.Message, contains) {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events: %s", strings.Join(seen, "; "))
	})
}

// TestAutoscalerThroughTheOperator: the operator, against a real Prometheus scraping exporters
// the test controls, reads the signals, decides, writes status.autoscaler and the
// AutoscalerReady condition, scales spec.replicas one step after the window with an Event, and
// holds queued maintenance Jobs back while disks are saturated.
func TestAutoscalerThroughTheOperator(t *testing.T) {
	ns := newNamespace(t)
	cpu := testprom.NewCluster(t, ns, "as-cpu", kvv1.StorageHDD, 3, steady)
	disk := testprom.NewCluster(t, ns, "as-disk", kvv1.StorageHDD, 3, steady)
	low := testprom.NewCluster(t, ns, "as-idle", kvv1.StorageHDD, 4, idle)
	url := testprom.StartPrometheus(t, cpu, disk, low)
	autoscaled(t, cpu, url, 3, 5)
	autoscaled(t, disk, url, 3, 3) // at its maximum: only the maintenance deferral shows
	autoscaled(t, low, url, 3, 5)
	complete := func(c *kvv1.KVCluster) bool {
		cond := meta.FindStatusCondition(c.Status.Conditions, kvv1.ConditionAutoscaling)
		return cond != nil && cond.Status == metav1.ConditionTrue && c.Status.Autoscaler.Bottleneck != kvv1.Bottleneck(autoscale.BottleneckUnknown)
	}

	t.Run("a missing series: no action, condition False naming it, then True again", func(t *testing.T) {
		waitAutoscaler(t, ns, "as-cpu", 30*time.Second, "complete signals", complete)
		cpu.Members[2].HideDisk(true)
		c := waitAutoscaler(t, ns, "as-cpu", 20*time.Second, "AutoscalerReady False", func(c *kvv1.KVCluster) bool {
			cond := meta.FindStatusCondition(c.Status.Conditions, kvv1.ConditionAutoscaling)
			return cond != nil && cond.Status == metav1.ConditionFalse
		})
		cond := meta.FindStatusCondition(c.Status.Conditions, kvv1.ConditionAutoscaling)
		want := "series levee_disk_io_time_seconds_total missing for as-cpu-2"
		if cond.Reason != controller.ReasonSignalsUnavailable || !strings.Contains(cond.Message, want) ||
			c.Status.Autoscaler.Bottleneck != kvv1.Bottleneck(autoscale.BottleneckUnknown) || c.Spec.Replicas != 3 {
			t.Fatalf("condition %s, bottleneck %s, replicas %d; want %s naming %q", dump(cond), c.Status.Autoscaler.Bottleneck, c.Spec.Replicas,
				controller.ReasonSignalsUnavailable, want)
		}
		event(t, ns, "as-cpu", controller.ReasonSignalsUnavailable, want)
		cpu.Members[2].HideDisk(false)
		waitAutoscaler(t, ns, "as-cpu", 20*time.Second, "complete signals again", complete)
	})

	t.Run("cpu-bound: one member more after the window, with an Event, and no second step", func(t *testing.T) {
		cpu.Set(hot)
		hotSince := time.Now()
		c := waitAutoscaler(t, ns, "as-cpu", 30*time.Second, "spec.replicas 4", func(c *kvv1.KVCluster) bool { return c.Spec.Replicas != 3 })
		took := time.Since(hotSince)
		if c.Spec.Replicas != 4 {
			t.Fatalf("replicas %d, want 4", c.Spec.Replicas)
		}
		if took < upWindow {
			t.Fatalf("scaled %s after the load turned CPU-bound, before the %s window", took, upWindow)
		}
		c = waitAutoscaler(t, ns, "as-cpu", 10*time.Second, "status of the step", func(c *kvv1.KVCluster) bool {
			return c.Status.Autoscaler.LastScaleTime != nil && c.Status.Autoscaler.DesiredReplicas == 4
		})
		// Later evaluations rewrite the reason; the Event keeps the step's.
		event(t, ns, "as-cpu", controller.ReasonAutoscaled, "replicas 3 → 4: CPU 9")
		event(t, ns, "as-cpu", controller.ReasonAutoscaled, "scaling out to 4: cpu-bound")
		t.Logf("step after %s; status.autoscaler now: %s", took.Round(100*time.Millisecond), dump(c.Status.Autoscaler))
		// The new member never becomes ready here (no StatefulSet controller): the step stays in
		// flight, so the load, still hot, must not add a fifth member.
		time.Sleep(2 * upWindow)
		if c := getCluster(t, ns, "as-cpu"); c.Spec.Replicas != 4 || !strings.Contains(c.Status.Autoscaler.Reason, "no scaling while") {
			t.Fatalf("while the step is in flight: replicas %d, reason %q", c.Spec.Replicas, c.Status.Autoscaler.Reason)
		}
	})

	t.Run("saturated disks defer queued maintenance, which resumes once they calm down", func(t *testing.T) {
		waitAutoscaler(t, ns, "as-disk", 30*time.Second, "complete signals", complete)
		disk.Set(busy)
		waitAutoscaler(t, ns, "as-disk", 20*time.Second, "saturated disks", func(c *kvv1.KVCluster) bool {
			return c.Status.Autoscaler.Bottleneck == kvv1.Bottleneck(autoscale.BottleneckDisk)
		})
		startJob(t, ns, "as-disk-compact-0", "as-disk-compact-0-1")
		// Prometheus may have scraped the busy series of some members before the others: wait
		// until the deferral names all three.
		c := waitAutoscaler(t, ns, "as-disk", 20*time.Second, "status.maintenance.deferred naming every member", func(c *kvv1.KVCluster) bool {
			return c.Status.Maintenance != nil && strings.Contains(c.Status.Maintenance.Deferred, "as-disk-0, as-disk-1, as-disk-2")
		})
		if d := c.Status.Maintenance.Deferred; !strings.Contains(d, "saturated by foreground load") {
			t.Errorf("deferred = %q, want it to say the disks are saturated", d)
		}
		event(t, ns, "as-disk", controller.ReasonMaintenanceDeferred, "saturated by foreground load")
		time.Sleep(3 * time.Second)
		if !suspended(t, ns, "as-disk-compact-0-1") {
			t.Fatalf("the compaction Job was resumed while the disks were saturated")
		}
		if c := getCluster(t, ns, "as-disk"); c.Spec.Replicas != 3 {
			t.Fatalf("replicas %d at maxReplicas 3", c.Spec.Replicas)
		}
		disk.Set(steady)
		waitResumed(t, ns, "as-disk-compact-0-1")
		c = getCluster(t, ns, "as-disk")
		if c.Status.Maintenance != nil && c.Status.Maintenance.Deferred != "" {
			// The status patch may trail the Job's resumption by a reconcile.
			c = waitAutoscaler(t, ns, "as-disk", 10*time.Second, "deferral cleared", func(c *kvv1.KVCluster) bool {
				return c.Status.Maintenance == nil || c.Status.Maintenance.Deferred == ""
			})
		}
		event(t, ns, "as-disk", controller.ReasonMaintenanceResumed, "no longer saturated")
	})

	t.Run("low for the down window: one member fewer", func(t *testing.T) {
		c := waitAutoscaler(t, ns, "as-idle", 40*time.Second, "spec.replicas 3", func(c *kvv1.KVCluster) bool { return c.Spec.Replicas != 4 })
		if c.Spec.Replicas != 3 {
			t.Fatalf("replicas %d, want 3", c.Spec.Replicas)
		}
		waitAutoscaler(t, ns, "as-idle", 10*time.Second, "status of the step", func(c *kvv1.KVCluster) bool {
			return c.Status.Autoscaler.LastScaleTime != nil && c.Status.Autoscaler.DesiredReplicas == 3
		})
		event(t, ns, "as-idle", controller.ReasonAutoscaled, "replicas 4 → 3")
		event(t, ns, "as-idle", controller.ReasonAutoscaled, "scaling in to 3: low")
	})
}
