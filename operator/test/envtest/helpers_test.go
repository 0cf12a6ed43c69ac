package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

var ctx = context.Background()

// createCluster creates a KVCluster relying on the API server's defaults for everything
// mutate does not set, and returns it as stored (defaulted).
func createCluster(t *testing.T, ns, name string, mutate func(*kvv1.KVCluster)) *kvv1.KVCluster {
	t.Helper()
	c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if mutate != nil {
		mutate(c)
	}
	if err := k8sClient.Create(ctx, c); err != nil {
		t.Fatalf("create KVCluster %s/%s: %v", ns, name, err)
	}
	return c
}

func getCluster(t *testing.T, ns, name string) *kvv1.KVCluster {
	t.Helper()
	c := &kvv1.KVCluster{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
		t.Fatalf("get KVCluster %s/%s: %v", ns, name, err)
	}
	return c
}

// waitFor polls until obj (ns/name) exists, then returns.
func waitFor(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s/%s to exist", obj, ns, name), func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	})
}

// assertControlled checks obj carries the controller reference the garbage collector
// uses to delete it with its KVCluster (envtest itself runs no garbage collector).
func assertControlled(t *testing.T, obj client.Object, c *kvv1.KVCluster) {
	t.Helper()
	for _, r := range obj.GetOwnerReferences() {
		if r.UID != c.UID {
			continue
		}
		if r.APIVersion != "kv.levee.io/v1alpha1" || r.Kind != "KVCluster" || r.Name != c.Name {
			t.Errorf("%T %s: owner reference %+v does not name the KVCluster", obj, obj.GetName(), r)
		}
		if r.Controller == nil || !*r.Controller || r.BlockOwnerDeletion == nil || !*r.BlockOwnerDeletion {
			t.Errorf("%T %s: owner reference must have controller=true and blockOwnerDeletion=true, got %+v", obj, obj.GetName(), r)
		}
		return
	}
	t.Errorf("%T %s has no owner reference to KVCluster %s (uid %s): %+v", obj, obj.GetName(), c.Name, c.UID, obj.GetOwnerReferences())
}

// waitCondition polls until the cluster has condition typ with the given status and reason.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *kvv1.KVCluster {
	t.Helper()
	var c *kvv1.KVCluster
	eventually(t, fmt.Sprintf("condition %s=%s (%s) on %s/%s", typ, status, reason, ns, name), func() error {
		c = &kvv1.KVCluster{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil {
			return fmt.Errorf("no %s condition yet: %s", typ, dump(c.Status.Conditions))
		}
		if cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("%s is %s/%s: %s", typ, cond.Status, cond.Reason, cond.Message)
		}
		return nil
	})
	return c
}

// markStatefulSetReady plays the StatefulSet controller (absent in envtest): it reports
// `ready` pods, all up to date, at the StatefulSet's current generation.
func markStatefulSetReady(t *testing.T, ns, name string, ready int32) {
	t.Helper()
	eventually(t, "StatefulSet status update", func() error {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sts); err != nil {
			return err
		}
		n := *sts.Spec.Replicas
		sts.Status.ObservedGeneration = sts.Generation
		sts.Status.Replicas = n
		sts.Status.UpdatedReplicas = n
		sts.Status.CurrentReplicas = n
		sts.Status.ReadyReplicas = ready
		sts.Status.AvailableReplicas = ready
		return k8sClient.Status().Update(ctx, sts)
	})
}

// expectInvalid asserts err is an Invalid error whose message contains every part.
func expectInvalid(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected the API server to reject the object with %q, but it was accepted", parts)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("expected an Invalid error, got %v", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err.Error(), p)
		}
	}
}

func int32p(v int32) *int32 { return &v }

// updateCluster applies mutate to the latest KVCluster and updates it, retrying when the
// operator's status patches win the race (Conflict); it returns the final error.
func updateCluster(t *testing.T, ns, name string, mutate func(*kvv1.KVCluster)) error {
	t.Helper()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCluster(t, ns, name)
		mutate(c)
		return k8sClient.Update(ctx, c)
	})
}
