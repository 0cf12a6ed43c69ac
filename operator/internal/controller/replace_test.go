package controller

import (
	"strings"
	"testing"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func TestPlanReplacement(t *testing.T) {
	formed := func(n int, nVal int32) func(*kvv1.KVCluster) {
		return func(c *kvv1.KVCluster) {
			c.Spec.Replicas = int32(n)
			c.Spec.NVal = nVal
			c.Status.Members = ringAddrs(n)
			c.Status.RingVersion = 3
		}
	}
	healthy := ReplaceFacts{PodExists: true, NodeName: "node-a", NodeReady: true, PVCExists: true}
	nodeGone := ReplaceFacts{PodExists: true, NodeName: "node-a", PVCExists: true}
	tests := []struct {
		name    string
		c       *kvv1.KVCluster
		member  string
		facts   ReplaceFacts
		refused string // contained in Refused ("" = not refused)
		want    ReplacePlan
		msg     []string // contained in Message
	}{
		{name: "node gone: PVC, then a forced pod deletion", c: cluster(formed(3, 3)), member: "kv-2", facts: nodeGone,
			want: ReplacePlan{DeletePVC: true, DeletePod: true, ForcePod: true},
			msg:  []string{"deleted PVC data-kv-2", "force-deleted pod kv-2 (its node node-a is gone or not Ready)", "rebuilds its partitions"}},
		{name: "node alive (lost disk): graceful pod deletion", c: cluster(formed(3, 3)), member: "kv-1", facts: healthy,
			want: ReplacePlan{DeletePVC: true, DeletePod: true}, msg: []string{"deleted PVC data-kv-1", "deleted pod kv-1"}},
		{name: "unscheduled pod is not forced", c: cluster(formed(3, 3)), member: "kv-1", facts: ReplaceFacts{PodExists: true, PVCExists: true},
			want: ReplacePlan{DeletePVC: true, DeletePod: true}, msg: []string{"deleted pod kv-1"}},
		{name: "PVC already deleting (a retry): only the pod", c: cluster(formed(3, 3)), member: "kv-0",
			facts: ReplaceFacts{PodExists: true, NodeName: "n", NodeReady: true, PVCExists: true, PVCDeleting: true},
			want:  ReplacePlan{DeletePod: true}, msg: []string{"PVC data-kv-0 was already being deleted", "deleted pod kv-0"}},
		{name: "both gone: nothing left to delete", c: cluster(formed(3, 3)), member: "kv-0", facts: ReplaceFacts{},
			want: ReplacePlan{}, msg: []string{"PVC data-kv-0 was already gone", "pod kv-0 was already gone"}},
		{name: "one other member down with nVal 3 (two nodes lost)", c: cluster(formed(5, 3)), member: "kv-4",
			facts: ReplaceFacts{PodExists: true, NodeName: "n", PVCExists: true, PeersDown: []string{"kv-3"}},
			want:  ReplacePlan{DeletePVC: true, DeletePod: true, ForcePod: true}},
		{name: "two other members down with nVal 3", c: cluster(formed(5, 3)), member: "kv-4",
			facts:   ReplaceFacts{PodExists: true, PVCExists: true, PeersDown: []string{"kv-1", "kv-3"}},
			refused: "kv-1, kv-3 are not ready or still rebuilding: with nVal 3, replacing kv-4 as well could leave partitions with no replica"},
		{name: "one other member down with nVal 2", c: cluster(formed(3, 2)), member: "kv-0",
			facts: ReplaceFacts{PodExists: true, PVCExists: true, PeersDown: []string{"kv-1"}}, refused: "kv-1 is not ready or still rebuilding: with nVal 2"},
		{name: "nVal 1: nothing to rebuild from", c: cluster(formed(3, 1)), member: "kv-0", facts: healthy, refused: "nVal is 1: no other replica holds kv-0's data"},
		{name: "not a member", c: cluster(formed(3, 3)), member: "kv-3", facts: healthy, refused: "kv-3 is not a member of the ring (members: kv-0, kv-1, kv-2)"},
		{name: "another cluster's pod", c: cluster(formed(3, 3)), member: "other-0", facts: healthy, refused: "other-0 is not a member of the ring"},
		{name: "empty annotation", c: cluster(formed(3, 3)), member: " ", facts: healthy, refused: "annotation kv.levee.io/replace-member is empty: set it to the pod name of one member (one of kv-0, kv-1, kv-2)"},
		{name: "ring not formed", c: cluster(func(c *kvv1.KVCluster) { c.Spec.Replicas = 3 }), member: "kv-0", facts: healthy, refused: "the ring has not formed yet"},
		{name: "during a transition", c: cluster(func(c *kvv1.KVCluster) {
			c.Spec.Replicas = 5
			c.Status = inTransition(3, 5, 4, ringT0)
		}), member: "kv-1", facts: healthy, refused: "a ring transition is running: replace kv-1 after it completes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanReplacement(tc.c, tc.member, tc.facts)
			if tc.refused != "" {
				if !strings.Contains(got.Refused, tc.refused) {
					t.Fatalf("Refused %q, want it to contain %q", got.Refused, tc.refused)
				}
				if got.DeletePVC || got.DeletePod || got.ForcePod {
					t.Errorf("a refused request deletes nothing, got %+v", got)
				}
				return
			}
			if got.Refused != "" {
				t.Fatalf("refused: %s", got.Refused)
			}
			msg := got.Message
			got.Message = ""
			if got != tc.want {
				t.Errorf("plan %+v, want %+v", got, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q lacks %q", msg, m)
				}
			}
		})
	}
}
