package envtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

// startJob plays the CronJob controller (absent in envtest): it creates the Job of a
// maintenance CronJob from its template, as `kubectl create job --from=cronjob/...` does.
func startJob(t *testing.T, ns, cronJob, name string) *batchv1.Job {
	t.Helper()
	cj := &batchv1.CronJob{}
	waitFor(t, cj, ns, cronJob)
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: cj.Spec.JobTemplate.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID}}},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	if err := k8sClient.Create(ctx, j); err != nil {
		t.Fatalf("create Job %s from CronJob %s: %v", name, cronJob, err)
	}
	return j
}

func suspended(t *testing.T, ns, name string) bool {
	t.Helper()
	j := &batchv1.Job{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j); err != nil {
		t.Fatalf("get Job %s: %v", name, err)
	}
	return j.Spec.Suspend != nil && *j.Spec.Suspend
}

func waitResumed(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "Job "+name+" resumed by the operator", func() error {
		if suspended(t, ns, name) {
			return fmt.Errorf("still suspended")
		}
		return nil
	})
}

// finishJob plays the Job controller: it ends the Job with the given member results.
func finishJob(t *testing.T, ns, name, done, failed string) {
	t.Helper()
	j := &batchv1.Job{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-time.Minute))
	j.Status.StartTime = &start
	j.Status.CompletedIndexes = done
	if failed == "" {
		j.Status.Succeeded = *j.Spec.Completions
		j.Status.CompletionTime = &now
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
		}
	} else {
		j.Status.FailedIndexes = &failed
		j.Status.Succeeded = int32(strings.Count(done, ",") + 1)
		j.Status.Failed = 2
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "FailedIndexes", Message: "Job has failed indexes", LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "FailedIndexes", Message: "Job has failed indexes", LastTransitionTime: now},
		}
	}
	if err := k8sClient.Status().Update(ctx, j); err != nil {
		t.Fatalf("finish Job %s: %v", name, err)
	}
}

// TestMaintenanceJobsNeverOverlap: the CronJobs create suspended Jobs; the operator resumes one
// at a time, so an AAE rebuild created while a compaction runs waits for it. A member that was
// down is reported member by member in status and in a Warning Event, and does not hide the
// members that succeeded.
func TestMaintenanceJobsNeverOverlap(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "mt", nil)

	startJob(t, ns, "mt-compact-0", "mt-compact-0-100")
	waitResumed(t, ns, "mt-compact-0-100")

	// The AAE rebuild fires while compaction runs: it stays queued.
	startJob(t, ns, "mt-aae-rebuild", "mt-aae-rebuild-100")
	eventually(t, "status reporting the queued AAE rebuild", func() error {
		m := getCluster(t, ns, "mt").Status.Maintenance
		if m == nil || m.AAERebuild == nil || m.AAERebuild.Phase != kvv1.MaintenanceQueued ||
			m.Compaction == nil || m.Compaction.Phase != kvv1.MaintenanceRunning {
			return fmt.Errorf("maintenance status = %s", dump(m))
		}
		return nil
	})
	if !suspended(t, ns, "mt-aae-rebuild-100") {
		t.Fatalf("the AAE rebuild was resumed while a compaction Job of the cluster ran")
	}

	// Member 1 was down: its index failed, members 0 and 2 were compacted.
	finishJob(t, ns, "mt-compact-0-100", "0,2", "1")
	waitResumed(t, ns, "mt-aae-rebuild-100")
	c := getCluster(t, ns, "mt")
	eventually(t, "per-member compaction report", func() error {
		c = getCluster(t, ns, "mt")
		r := c.Status.Maintenance.Compaction
		if r == nil || r.Job != "mt-compact-0-100" || r.Phase != kvv1.MaintenanceFailed ||
			r.SucceededMembers != "0,2" || r.FailedMembers != "1" || r.NotReachedMembers != "" {
			return fmt.Errorf("compaction report = %s", dump(r))
		}
		return nil
	})
	if !strings.Contains(c.Status.Maintenance.Compaction.Message, "members 1 failed") {
		t.Errorf("message = %q", c.Status.Maintenance.Compaction.Message)
	}
	eventually(t, "a MaintenanceFailed Event naming the member", func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "MaintenanceFailed" && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "mt" &&
				strings.Contains(e.Message, "mt-compact-0-100") && strings.Contains(e.Message, "members 1 failed") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none MaintenanceFailed for mt-compact-0-100", len(evs.Items))
	})

	// The next compaction run queues behind the running AAE rebuild, then runs after it.
	startJob(t, ns, "mt-compact-1", "mt-compact-1-200")
	time.Sleep(time.Second) // give the operator the chance to get it wrong
	if !suspended(t, ns, "mt-compact-1-200") {
		t.Fatalf("a compaction Job was resumed while the AAE rebuild ran")
	}
	finishJob(t, ns, "mt-aae-rebuild-100", "0-2", "")
	waitResumed(t, ns, "mt-compact-1-200")
	eventually(t, "AAE report", func() error {
		r := getCluster(t, ns, "mt").Status.Maintenance.AAERebuild
		if r == nil || r.Phase != kvv1.MaintenanceSucceeded || r.SucceededMembers != "0-2" {
			return fmt.Errorf("aae report = %s", dump(r))
		}
		return nil
	})
}

// TestTLSSecretWithoutCA: with an external issuer the Secret may lack ca.crt, which members
// (client-certificate CA) and the maintenance Jobs (server CA) need: the operator says so.
func TestTLSSecretWithoutCA(t *testing.T) {
	ns := newNamespace(t)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ext-tls", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")},
	}
	if err := k8sClient.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	createCluster(t, ns, "ext", func(c *kvv1.KVCluster) {
		c.Spec.TLS.Enabled = true
		c.Spec.TLS.IssuerRef = &kvv1.IssuerRef{Name: "letsencrypt", Kind: "ClusterIssuer"}
	})
	c := waitCondition(t, ns, "ext", kvv1.ConditionTLS, metav1.ConditionFalse, controller.ReasonCAMissing)
	if msg := condMessage(c, kvv1.ConditionTLS); !strings.Contains(msg, "Secret ext-tls has no ca.crt") {
		t.Errorf("TLSReady message = %q", msg)
	}
}
