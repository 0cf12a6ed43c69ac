package envtest

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

// TestScaleAndRingChange walks a cluster through formation, `kubectl scale` through
// the /scale subresource, a scale-out that waits for its pods (and is changed meanwhile), its
// ring transition, and a scale-in accepted afterwards.
func TestScaleAndRingChange(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "sc", nil)
	waitFor(t, &appsv1.StatefulSet{}, ns, "sc")

	// All 3 members ready: the ring forms, the cluster is Available and Running.
	markStatefulSetReady(t, ns, "sc", 3)
	c := waitCondition(t, ns, "sc", kvv1.ConditionAvailable, metav1.ConditionTrue, controller.ReasonMembersReady)
	eventually(t, "phase Running with 3 members", func() error {
		c = getCluster(t, ns, "sc")
		if c.Status.Phase != kvv1.PhaseRunning || len(c.Status.Members) != 3 || c.Status.RingVersion != 1 || c.Status.ReadyReplicas != 3 {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		return nil
	})

	// The settled membership reaches the node's member list (members.json), version 1.
	membersJSON := func(want string) string {
		t.Helper()
		var got string
		eventually(t, "members.json "+want, func() error {
			cm := &corev1.ConfigMap{}
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sc-config"}, cm); err != nil {
				return err
			}
			got = cm.Data[controller.MembersJSONFileName]
			c := getCluster(t, ns, "sc")
			js, _, err := controller.MembersJSON(c)
			if err != nil {
				return err
			}
			if got != js || !strings.Contains(got, want) {
				return fmt.Errorf("members.json = %q, want the settled list %q (%s)", got, js, want)
			}
			return nil
		})
		return got
	}
	membersJSON(`"version": 1,`)
	template := func() corev1.PodTemplateSpec {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sc"}, sts); err != nil {
			t.Fatal(err)
		}
		return sts.Spec.Template
	}
	formedTemplate := template()

	// Printer columns.
	out, err := kubectl("get", "kvclusters", "-n", ns)
	if err != nil {
		t.Fatalf("kubectl get: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME REPLICAS READY PHASE AGE" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "sc 3 3 Running ") {
		t.Errorf("kubectl get kvclusters:\n%s", out)
	}

	// kubectl scale goes through /scale; the operator grows the StatefulSet and membership list.
	if out, err := kubectl("scale", "-n", ns, "kvcluster/sc", "--replicas=5"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	if got := getCluster(t, ns, "sc").Spec.Replicas; got != 5 {
		t.Fatalf("spec.replicas after kubectl scale = %d, want 5", got)
	}
	eventually(t, "StatefulSet at 5, member list still at 3", func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sc"}, sts); err != nil {
			return err
		}
		cm := &corev1.ConfigMap{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sc-config"}, cm); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 5 || strings.Count(cm.Data[controller.MembersJSONFileName], `"name"`) != 3 {
			return fmt.Errorf("sts replicas %d, members %q", *sts.Spec.Replicas, cm.Data[controller.MembersJSONFileName])
		}
		return nil
	})
	// Only 3 of 5 ready: the bigger list waits for the new pods.
	markStatefulSetReady(t, ns, "sc", 3)
	eventually(t, "ring change in progress with 5 pods, 3 ready", func() error {
		c = getCluster(t, ns, "sc")
		if !c.Status.RingChangeInProgress || c.Status.Phase != kvv1.PhaseScaling || c.Status.Replicas != 5 || c.Status.ReadyReplicas != 3 || len(c.Status.Members) != 3 {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		return nil
	})
	waitCondition(t, ns, "sc", kvv1.ConditionProgressing, metav1.ConditionTrue, controller.ReasonWaitingForPods)

	// The /scale subresource reports the selector and the observed replicas.
	scale := &autoscalingv1.Scale{}
	if err := k8sClient.SubResource("scale").Get(ctx, c, scale); err != nil {
		t.Fatalf("get /scale: %v", err)
	}
	if scale.Spec.Replicas != 5 || scale.Status.Replicas != 5 || scale.Status.Selector != controller.Selector(c) {
		t.Errorf("/scale = %s", dump(scale))
	}

	// A scale-out not published yet may be taken back part of the way (no member leaves), or
	// grown further.
	if out, err := kubectl("scale", "-n", ns, "kvcluster/sc", "--replicas=4"); err != nil {
		t.Fatalf("shrinking a scale-out not published yet: %v\n%s", err, out)
	}
	if out, err := kubectl("scale", "-n", ns, "kvcluster/sc", "--replicas=6"); err != nil {
		t.Fatalf("scale-out during ring change refused: %v\n%s", err, out)
	}

	// All 6 ready: the list is published (version 2), the members move partitions (instant in
	// this suite), and scale-in is accepted again.
	eventually(t, "StatefulSet at 6", func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sc"}, sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 6 {
			return fmt.Errorf("replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
	markStatefulSetReady(t, ns, "sc", 6)
	eventually(t, "ring settled at 6 members", func() error {
		c = getCluster(t, ns, "sc")
		if c.Status.RingChangeInProgress || len(c.Status.Members) != 6 || c.Status.RingVersion != 2 || c.Status.Phase != kvv1.PhaseRunning {
			return fmt.Errorf("status %s", dump(c.Status))
		}
		return nil
	})
	// The new list (version 2, 6 members) is in members.json; the pod template did not change,
	// so no member restarts for a membership change.
	if js := membersJSON(`"version": 2,`); strings.Count(js, `"name"`) != 6 {
		t.Errorf("members.json after the ring settled at 6: %s", js)
	}
	if now := template(); !equality.Semantic.DeepEqual(formedTemplate, now) {
		t.Errorf("the membership change changed the pod template (members would restart):\nbefore %s\nafter %s", dump(formedTemplate), dump(now))
	}
	if out, err := kubectl("scale", "-n", ns, "kvcluster/sc", "--replicas=4"); err != nil {
		t.Fatalf("scale-in after the ring settled: %v\n%s", err, out)
	}
	// Every ring decision is explained by an Event on the KVCluster.
	eventually(t, "ring Events", func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]string{}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "KVCluster" && e.InvolvedObject.Name == "sc" {
				seen[e.Reason] = e.Message
			}
		}
		if !strings.Contains(seen["RingFormed"], "ring formed with 3 members") ||
			!strings.Contains(seen[controller.ReasonRingTransitionStarted], "published member list version 2: ring transition from 3 to 6 members") ||
			!strings.Contains(seen[controller.ReasonRingTransitionCompleted], "ring transition from 3 to 6 members completed") {
			return fmt.Errorf("events = %v", seen)
		}
		return nil
	})
	// nVal (3) <= replicas is enforced through /scale too.
	out, err = kubectl("scale", "-n", ns, "kvcluster/sc", "--replicas=2")
	if err == nil || !strings.Contains(out, "nVal must be less than or equal to replicas") {
		t.Fatalf("scale below nVal: err=%v\n%s", err, out)
	}
}

// TestDegradedWhenMembersNotReady: a rolled-out cluster with a member down is Degraded
// but still Available (one member may be down).
func TestDegradedWhenMembersNotReady(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "dg", nil)
	waitFor(t, &appsv1.StatefulSet{}, ns, "dg")
	markStatefulSetReady(t, ns, "dg", 3)
	eventually(t, "phase Running", func() error {
		if c := getCluster(t, ns, "dg"); c.Status.Phase != kvv1.PhaseRunning {
			return fmt.Errorf("phase %s", c.Status.Phase)
		}
		return nil
	})
	waitCondition(t, ns, "dg", kvv1.ConditionDegraded, metav1.ConditionFalse, controller.ReasonAsExpected)
	markStatefulSetReady(t, ns, "dg", 2)
	c := waitCondition(t, ns, "dg", kvv1.ConditionDegraded, metav1.ConditionTrue, controller.ReasonMembersNotReady)
	if c.Status.Phase != kvv1.PhaseDegraded {
		t.Errorf("phase = %s", c.Status.Phase)
	}
	waitCondition(t, ns, "dg", kvv1.ConditionAvailable, metav1.ConditionTrue, controller.ReasonMembersReady)
	markStatefulSetReady(t, ns, "dg", 1)
	waitCondition(t, ns, "dg", kvv1.ConditionAvailable, metav1.ConditionFalse, controller.ReasonMembersNotReady)
}

// TestInvalidMemberList: a settled membership the node would refuse is not written to
// members.json (the ConfigMap keeps the previous list); the KVCluster says why (Degraded
// MemberListInvalid and a Warning Event).
func TestInvalidMemberList(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "iv", nil)
	waitFor(t, &appsv1.StatefulSet{}, ns, "iv")
	markStatefulSetReady(t, ns, "iv", 3)
	var good string
	eventually(t, "members.json of the formed ring", func() error {
		cm := &corev1.ConfigMap{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "iv-config"}, cm); err != nil {
			return err
		}
		good = cm.Data[controller.MembersJSONFileName]
		if !strings.Contains(good, `"version": 1,`) {
			return fmt.Errorf("members.json = %q", good)
		}
		return nil
	})
	// A member down (so the operator does not settle the ring again), then status.members is
	// corrupted: an underscore is not allowed in a host name.
	markStatefulSetReady(t, ns, "iv", 2)
	waitCondition(t, ns, "iv", kvv1.ConditionDegraded, metav1.ConditionTrue, controller.ReasonMembersNotReady)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns, "iv")
		c.Status.Members = append(c.Status.Members[:2:2], "iv_2.iv-headless."+ns+".svc:8087")
		c.Status.RingVersion = 2
		return k8sClient.Status().Update(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	c := waitCondition(t, ns, "iv", kvv1.ConditionDegraded, metav1.ConditionTrue, controller.ReasonMemberListInvalid)
	if cond := meta.FindStatusCondition(c.Status.Conditions, kvv1.ConditionDegraded); !strings.Contains(cond.Message, `member "iv_2" has a bad address`) {
		t.Errorf("Degraded message = %q", cond.Message)
	}
	cm := &corev1.ConfigMap{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "iv-config"}, cm); err != nil {
		t.Fatal(err)
	}
	if got := cm.Data[controller.MembersJSONFileName]; got != good {
		t.Errorf("members.json changed to a list the node refuses:\n%s", got)
	}
	eventually(t, "MemberListInvalid Event", func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "iv" && e.Reason == controller.ReasonMemberListInvalid && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Message, "iv_2") {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event %s among %d", controller.ReasonMemberListInvalid, len(evs.Items))
	})
}
