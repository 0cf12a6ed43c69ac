package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDefaultMemberResources(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		name          string
		ring, members int32
		storage       int64
		wantMiB       int64
	}{
		// 32 + 64 × 0.25 + ceil(64/3) = 22 × 53 + 100 × 7
		{"defaults: ring 64, 3 members, 100Gi", 64, 3, 100 * gi, 32 + 16 + 22*53 + 700},
		// more members own fewer partitions each
		{"ring 64, 8 members", 64, 8, 100 * gi, 32 + 16 + 8*53 + 700},
		// a node alone owns the ring
		{"ring 64, 1 member, 10Gi", 64, 1, 10 * gi, 32 + 16 + 64*53 + 70},
		// members below 1 count as 1
		{"ring 8, 0 members", 8, 0, 1 * gi, 32 + 2 + 8*53 + 7},
		// a storage size that is not whole GiB rounds up
		{"ring 256, 3 members, 1.5Gi", 256, 3, gi + gi/2, 32 + 64 + 86*53 + 14},
		{"ring 4096, 3 members, 500Gi", 4096, 3, 500 * gi, 32 + 1024 + 1366*53 + 3500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := DefaultMemberResources(tc.ring, tc.members, tc.storage)
			mem := r.Requests[corev1.ResourceMemory]
			if mem.Value() != tc.wantMiB<<20 {
				t.Errorf("memory request %s (%d MiB), want %d MiB", mem.String(), mem.Value()>>20, tc.wantMiB)
			}
			lim := r.Limits[corev1.ResourceMemory]
			if lim.Value() != 2*mem.Value() {
				t.Errorf("memory limit %s, want twice the request", lim.String())
			}
			if cpu := r.Requests[corev1.ResourceCPU]; !cpu.Equal(resource.MustParse("1")) {
				t.Errorf("cpu request %s, want 1", cpu.String())
			}
			if _, ok := r.Limits[corev1.ResourceCPU]; ok {
				t.Error("a CPU limit is set; throttling would show as latency")
			}
		})
	}
}

func TestMemberResources(t *testing.T) {
	c := &KVCluster{}
	want := DefaultMemberResources(DefaultRingSize, DefaultNVal, 100<<30)
	if got := MemberResources(c); !equalResources(got, want) {
		t.Errorf("unset: %+v, want the defaults %+v", got, want)
	}
	// Replicas do not count (scaling must not change the pod template); autoscaling's floor does.
	c.Spec.Replicas = 12
	if got := MemberResources(c); !equalResources(got, want) {
		t.Errorf("replicas changed the defaults: %+v", got)
	}
	c.Spec.Autoscaling = &AutoscalingSpec{Enabled: true, MinReplicas: 6}
	if got, w := MemberResources(c), DefaultMemberResources(DefaultRingSize, 6, 100<<30); !equalResources(got, w) {
		t.Errorf("autoscaling from 6: %+v, want %+v", got, w)
	}
	if c.Spec.RingSize != 0 || c.Spec.Storage.Size != nil {
		t.Error("MemberResources changed the object it was given")
	}
	// Anything the user sets is taken as it is.
	user := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}}
	c.Spec.Resources = user
	if got := MemberResources(c); !equalResources(got, user) {
		t.Errorf("set: %+v, want the user's %+v", got, user)
	}
}

func equalResources(a, b corev1.ResourceRequirements) bool {
	eq := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for k, q := range x {
			if p, ok := y[k]; !ok || !p.Equal(q) {
				return false
			}
		}
		return true
	}
	return eq(a.Requests, b.Requests) && eq(a.Limits, b.Limits)
}
