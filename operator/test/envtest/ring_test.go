package envtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

// stallAfter is the suite operator's transition stall time.
const stallAfter = 3 * time.Second

// memberReports plays the members' metrics for the suite operator (envtest runs no pods). By
// default every member is instant: it runs the cluster's published list, routes by it, and a
// leaving member is empty. A test takes over its namespace's members with set.
type memberReports struct {
	mu   sync.Mutex
	byNS map[string]func(c *kvv1.KVCluster, addr string) controller.MemberReport
}

var members = &memberReports{byNS: map[string]func(*kvv1.KVCluster, string) controller.MemberReport{}}

func (m *memberReports) set(ns string, f func(c *kvv1.KVCluster, addr string) controller.MemberReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byNS[ns] = f
}

// Probe answers for addresses <pod>.<cluster>-headless.<ns>.svc:<port>.
func (m *memberReports) Probe(ctx context.Context, addrs []string) map[string]controller.MemberReport {
	out := map[string]controller.MemberReport{}
	for _, a := range addrs {
		parts := strings.Split(a, ".")
		if len(parts) < 3 {
			out[a] = controller.MemberReport{Err: fmt.Errorf("unexpected member address %q", a)}
			continue
		}
		ns, name := parts[2], strings.TrimSuffix(parts[1], "-headless")
		c := &kvv1.KVCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
			out[a] = controller.MemberReport{Err: err}
			continue
		}
		m.mu.Lock()
		f := m.byNS[ns]
		m.mu.Unlock()
		if f != nil {
			out[a] = f(c, a)
			continue
		}
		out[a] = instant(c, a)
	}
	return out
}

// instant: the member runs the published list and routes by it; leaving members are empty.
func instant(c *kvv1.KVCluster, addr string) controller.MemberReport {
	r := controller.MemberReport{ListVersion: c.Status.RingVersion, RoutingVersion: c.Status.RingVersion, VnodesActive: 4}
	for _, l := range c.Status.LeavingMembers {
		if l == addr {
			r.VnodesActive = 0
		}
	}
	return r
}

func leaving(c *kvv1.KVCluster, addr string) bool {
	for _, l := range c.Status.LeavingMembers {
		if l == addr {
			return true
		}
	}
	return false
}

func statefulSetReplicas(t *testing.T, ns, name string) int32 {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sts); err != nil {
		t.Fatal(err)
	}
	return *sts.Spec.Replicas
}

func formed(t *testing.T, ns, name string, n int32) {
	t.Helper()
	createCluster(t, ns, name, func(c *kvv1.KVCluster) { c.Spec.Replicas = n })
	waitFor(t, &appsv1.StatefulSet{}, ns, name)
	markStatefulSetReady(t, ns, name, n)
	eventually(t, fmt.Sprintf("ring formed with %d members", n), func() error {
		if c := getCluster(t, ns, name); c.Status.Phase != kvv1.PhaseRunning || len(c.Status.Members) != int(n) {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		return nil
	})
}

// TestScaleInWaitsForEmptyMembers: a scale-in publishes the smaller list at once, keeps the
// leaving pods (StatefulSet replicas unchanged, status.leavingMembers, status.transition with
// per-member progress) while they report data, queues another size meanwhile, and shrinks the
// StatefulSet only once they report empty.
func TestScaleInWaitsForEmptyMembers(t *testing.T) {
	ns := newNamespace(t)
	formed(t, ns, "si", 5)
	var empty sync.Map // addr -> true once the leaving member reports empty
	members.set(ns, func(c *kvv1.KVCluster, addr string) controller.MemberReport {
		r := instant(c, addr)
		if leaving(c, addr) {
			if _, ok := empty.Load(addr); !ok {
				r.VnodesActive, r.VnodesHandoff, r.BytesSent = 0, 3, 4096
			}
		}
		return r
	})
	if out, err := kubectl("scale", "-n", ns, "kvcluster/si", "--replicas=3"); err != nil {
		t.Fatalf("scale-in of a settled cluster: %v\n%s", err, out)
	}
	var c *kvv1.KVCluster
	eventually(t, "smaller list published, leaving members kept", func() error {
		c = getCluster(t, ns, "si")
		if len(c.Status.Members) != 3 || c.Status.RingVersion != 2 || len(c.Status.LeavingMembers) != 2 || c.Status.Transition == nil ||
			!c.Status.RingChangeInProgress {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		for _, m := range c.Status.Transition.Members {
			if m.Leaving && m.State != kvv1.MemberDraining {
				return fmt.Errorf("leaving member %s is %s, want Draining", m.Name, m.State)
			}
		}
		return nil
	})
	if c.Status.Transition.FromMembers != 5 || c.Status.Transition.ToMembers != 3 || c.Status.Transition.BytesMoved != 2*4096 {
		t.Errorf("transition %s", dump(c.Status.Transition))
	}
	waitCondition(t, ns, "si", kvv1.ConditionProgressing, metav1.ConditionTrue, controller.ReasonRingTransition)
	// The nodes get the smaller list; the StatefulSet keeps all five pods while they drain.
	eventually(t, "members.json version 2 with 3 members", func() error {
		cm := &corev1.ConfigMap{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "si-config"}, cm); err != nil {
			return err
		}
		js := cm.Data[controller.MembersJSONFileName]
		if !strings.Contains(js, `"version": 2,`) || strings.Count(js, `"name"`) != 3 {
			return fmt.Errorf("members.json %s", js)
		}
		return nil
	})
	for i := 0; i < 10; i++ {
		if n := statefulSetReplicas(t, ns, "si"); n != 5 {
			t.Fatalf("StatefulSet shrank to %d while the leaving members still hold data", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	event(t, ns, "si", controller.ReasonRingTransitionStarted, "si-3, si-4 keep running until they have handed their partitions over")

	// Another size is queued meanwhile, and may be taken back.
	if out, err := kubectl("scale", "-n", ns, "kvcluster/si", "--replicas=4"); err != nil {
		t.Fatalf("scale-out during a transition: %v\n%s", err, out)
	}
	waitCondition(t, ns, "si", kvv1.ConditionProgressing, metav1.ConditionTrue, controller.ReasonScaleQueued)
	event(t, ns, "si", controller.ReasonScaleQueued, "spec.replicas 4 waits until the ring transition to 3 members completes")
	if out, err := kubectl("scale", "-n", ns, "kvcluster/si", "--replicas=3"); err != nil {
		t.Fatalf("taking a queued size back: %v\n%s", err, out)
	}

	// The leaving members report empty one by one: the pods go only when both are.
	empty.Store(controller.MemberAddress(c, 4), true)
	time.Sleep(1500 * time.Millisecond)
	if n := statefulSetReplicas(t, ns, "si"); n != 5 {
		t.Fatalf("StatefulSet shrank to %d with si-3 still draining", n)
	}
	empty.Store(controller.MemberAddress(c, 3), true)
	eventually(t, "StatefulSet at 3 once both are empty", func() error {
		if n := statefulSetReplicas(t, ns, "si"); n != 3 {
			return fmt.Errorf("replicas %d", n)
		}
		return nil
	})
	markStatefulSetReady(t, ns, "si", 3)
	eventually(t, "settled at 3", func() error {
		c = getCluster(t, ns, "si")
		if c.Status.Phase != kvv1.PhaseRunning || c.Status.RingChangeInProgress || c.Status.Transition != nil || len(c.Status.LeavingMembers) != 0 {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		return nil
	})
	event(t, ns, "si", controller.ReasonRingTransitionCompleted, "ring transition from 5 to 3 members completed")
}

// TestStalledTransitionRollsBack: a scale-out whose transition never advances is reported
// Degraded with the way back; a different scale-in is refused; restoring the old replica
// count publishes the old membership again, and the members that joined leave once empty.
func TestStalledTransitionRollsBack(t *testing.T) {
	ns := newNamespace(t)
	formed(t, ns, "rb", 3)
	members.set(ns, func(c *kvv1.KVCluster, addr string) controller.MemberReport {
		if c.Status.RingVersion == 2 { // stuck: every member has list 2, none can switch
			return controller.MemberReport{ListVersion: 2, RoutingVersion: 1, VnodesActive: 4, PartitionsToSend: 2}
		}
		return instant(c, addr)
	})
	if out, err := kubectl("scale", "-n", ns, "kvcluster/rb", "--replicas=5"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	eventually(t, "StatefulSet at 5", func() error {
		if n := statefulSetReplicas(t, ns, "rb"); n != 5 {
			return fmt.Errorf("replicas %d", n)
		}
		return nil
	})
	markStatefulSetReady(t, ns, "rb", 5)
	c := waitCondition(t, ns, "rb", kvv1.ConditionDegraded, metav1.ConditionTrue, controller.ReasonTransitionStalled)
	if len(c.Status.Members) != 5 || c.Status.RingVersion != 2 || c.Status.Transition == nil || c.Status.Transition.PartitionsPending != 10 {
		t.Fatalf("status %s", dump(c.Status))
	}
	event(t, ns, "rb", controller.ReasonTransitionStalled, "set spec.replicas to 3 to take it back")
	// Only the way back is accepted as a scale-in.
	out, err := kubectl("scale", "-n", ns, "kvcluster/rb", "--replicas=4")
	if err == nil || !strings.Contains(out, "cannot scale in while a ring change is in progress") {
		t.Fatalf("scale-in to 4 during the transition: err=%v\n%s", err, out)
	}
	if out, err := kubectl("scale", "-n", ns, "kvcluster/rb", "--replicas=3"); err != nil {
		t.Fatalf("taking the transition back: %v\n%s", err, out)
	}
	eventually(t, "old membership published again; joiners leave, then go", func() error {
		c = getCluster(t, ns, "rb")
		if len(c.Status.Members) != 3 || c.Status.RingVersion != 3 || statefulSetReplicas(t, ns, "rb") != 3 {
			return fmt.Errorf("sts %d, status %s", statefulSetReplicas(t, ns, "rb"), dump(c.Status))
		}
		return nil
	})
	markStatefulSetReady(t, ns, "rb", 3)
	eventually(t, "Running at 3", func() error {
		c = getCluster(t, ns, "rb")
		if c.Status.Phase != kvv1.PhaseRunning || c.Status.Transition != nil {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		return nil
	})
}
