package envtest

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

// TestReplaceMember: the kv.levee.io/replace-member annotation (envtest plays the members' pods,
// claims and nodes). Refused requests (not a member; two peers down with nVal 3) delete nothing
// and leave a Warning Event; a member whose node is gone loses its PVC and is force-deleted; a
// member on a Ready node is deleted gracefully. Every request removes the annotation.
func TestReplaceMember(t *testing.T) {
	ns := newNamespace(t)
	if err := k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil {
		t.Fatal(err) // no controller-manager creates it here; pods need it
	}
	c := createCluster(t, ns, "rp", nil)
	waitFor(t, &appsv1.StatefulSet{}, ns, "rp")
	markStatefulSetReady(t, ns, "rp", 3)
	eventually(t, "ring formed", func() error {
		if c = getCluster(t, ns, "rp"); len(c.Status.Members) != 3 {
			return fmt.Errorf("members %v", c.Status.Members)
		}
		return nil
	})

	readyNode := ns + "-alive" // cluster-scoped names: unique per test namespace
	goneNode := ns + "-gone"   // no Node object: the node was removed with its machine
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: readyNode}}
	if err := k8sClient.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, node) })
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := k8sClient.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	for i, nodeName := range []string{readyNode, readyNode, goneNode} {
		name := fmt.Sprintf("rp-%d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: controller.SelectorLabels(c)},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "levee", Image: "levee:test"}}},
		}
		if err := k8sClient.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		setPodReady(t, ns, name, nodeName == readyNode)
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data-" + name, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if err := k8sClient.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}

	// Not a member: refused, the annotation goes, nothing is deleted.
	annotateReplace(t, ns, "rp", "rp-7")
	waitReplaceEvent(t, ns, corev1.EventTypeWarning, controller.ReasonMemberReplaceRefused, "rp-7 is not a member of the ring")
	waitAnnotationRemoved(t, ns, "rp")

	// rp-2's node is gone; rp-1 is not Ready and rp-0 reports it is still rebuilding: with
	// nVal 3, replacing rp-2 too could leave partitions with no replica. Refused.
	setPodReady(t, ns, "rp-1", false)
	members.set(ns, func(c *kvv1.KVCluster, addr string) controller.MemberReport {
		r := instant(c, addr)
		if strings.HasPrefix(addr, "rp-0.") {
			r.RebuildPending = 5
		}
		return r
	})
	annotateReplace(t, ns, "rp", "rp-2")
	waitReplaceEvent(t, ns, corev1.EventTypeWarning, controller.ReasonMemberReplaceRefused,
		"replace rp-2: rp-0, rp-1 are not ready or still rebuilding: with nVal 3")
	waitAnnotationRemoved(t, ns, "rp")
	for _, name := range []string{"rp-0", "rp-1", "rp-2"} {
		if deleting(t, &corev1.Pod{}, ns, name) || deleting(t, &corev1.PersistentVolumeClaim{}, ns, "data-"+name) {
			t.Fatalf("a refused request deleted %s or its PVC", name)
		}
	}

	// rp-0 done rebuilding, rp-1 still down: one other member down is allowed with nVal 3.
	// rp-2's node is gone, so its pod is force-deleted (no kubelet would confirm a graceful one).
	members.set(ns, nil)
	annotateReplace(t, ns, "rp", "rp-2")
	waitReplaceEvent(t, ns, corev1.EventTypeNormal, controller.ReasonMemberReplacing,
		"deleted PVC data-rp-2; force-deleted pod rp-2 (its node "+goneNode+" is gone or not Ready)")
	waitAnnotationRemoved(t, ns, "rp")
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rp-2"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod rp-2 after a forced deletion: %v", err)
	}
	if !deleting(t, &corev1.PersistentVolumeClaim{}, ns, "data-rp-2") {
		t.Errorf("PVC data-rp-2 is not being deleted")
	}

	// rp-1's node is Ready (its disk failed): graceful deletion, the kubelet would finish it.
	// rp-2 is gone now (one peer down), which nVal 3 allows.
	setPodReady(t, ns, "rp-1", true)
	annotateReplace(t, ns, "rp", "rp-1")
	waitReplaceEvent(t, ns, corev1.EventTypeNormal, controller.ReasonMemberReplacing, "deleted PVC data-rp-1; deleted pod rp-1:")
	waitAnnotationRemoved(t, ns, "rp")
	if !deleting(t, &corev1.Pod{}, ns, "rp-1") {
		t.Errorf("pod rp-1 is not being deleted")
	}
	if deleting(t, &corev1.Pod{}, ns, "rp-0") || deleting(t, &corev1.PersistentVolumeClaim{}, ns, "data-rp-0") {
		t.Errorf("rp-0 was touched")
	}
}

func setPodReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	eventually(t, "pod status", func() error {
		pod := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
			return err
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		return k8sClient.Status().Update(ctx, pod)
	})
}

func annotateReplace(t *testing.T, ns, name, member string) {
	t.Helper()
	if err := updateCluster(t, ns, name, func(c *kvv1.KVCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[controller.ReplaceMemberAnnotation] = member
	}); err != nil {
		t.Fatal(err)
	}
}

func waitAnnotationRemoved(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "annotation "+controller.ReplaceMemberAnnotation+" removed", func() error {
		if v, ok := getCluster(t, ns, name).Annotations[controller.ReplaceMemberAnnotation]; ok {
			return fmt.Errorf("still %q", v)
		}
		return nil
	})
}

func waitReplaceEvent(t *testing.T, ns, typ, reason, msg string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s Event %s %q", typ, reason, msg), func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reason && e.Type == typ {
				if strings.Contains(e.Message, msg) {
					return nil
				}
				seen = append(seen, e.Message)
			}
		}
		return fmt.Errorf("none; %s Events seen: %q", reason, seen)
	})
}

// deleting reports whether obj ns/name is gone or has a deletion timestamp.
func deleting(t *testing.T, obj client.Object, ns, name string) bool {
	t.Helper()
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return true
		}
		t.Fatal(err)
	}
	return obj.GetDeletionTimestamp() != nil
}
