package envtest

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
)

// TestSamplesAndDeployManifests: config/default (CRD, RBAC, manager) passes server-side
// validation and both samples are accepted and reconciled into the expected children.
func TestSamplesAndDeployManifests(t *testing.T) {
	// A dry run cannot create the namespace the other objects live in: create it for real.
	if out, err := kubectl("create", "namespace", "levee-system"); err != nil && !strings.Contains(out, "AlreadyExists") {
		t.Fatalf("create levee-system: %v\n%s", err, out)
	}
	if out, err := kubectl("apply", "--server-side", "--dry-run=server", "-k", "../../config/default"); err != nil {
		t.Fatalf("config/default rejected by the API server: %v\n%s", err, out)
	} else if !strings.Contains(out, "deployment.apps/levee-operator serverside-applied (server dry run)") ||
		!strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/levee-operator") {
		t.Errorf("unexpected apply output:\n%s", out)
	}

	ns := newNamespace(t)
	if out, err := kubectl("apply", "-n", ns, "-k", "../../config/samples"); err != nil {
		t.Fatalf("samples rejected: %v\n%s", err, out)
	}
	cases := []struct {
		name, class, profile string
		replicas             int32
		schedules            []string
	}{
		{"orders", "levee-nvme", "nvme", 3, []string{"0 1,22 * * *", "30 2,23 * * *"}},
		{"archive", "levee-hdd", "hdd", 6, []string{"0 1,3 * * *"}},
	}
	for _, tc := range cases {
		sts := &appsv1.StatefulSet{}
		waitFor(t, sts, ns, tc.name)
		if *sts.Spec.Replicas != tc.replicas || *sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName != tc.class ||
			sts.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != tc.profile {
			t.Errorf("%s: statefulset %s", tc.name, dump(sts.Spec))
		}
		for i, s := range tc.schedules {
			cj := &batchv1.CronJob{}
			waitFor(t, cj, ns, fmt.Sprintf("%s-compact-%d", tc.name, i))
			if cj.Spec.Schedule != s {
				t.Errorf("%s compaction %d: schedule %q, want %q", tc.name, i, cj.Spec.Schedule, s)
			}
		}
	}
}
