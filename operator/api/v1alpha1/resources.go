package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The memory a member needs, by what it holds (docs/node.md, "Memory and threads", says how
// each figure was measured). A member opens a store for every partition of the ring; only the
// partitions it owns take writes.
const (
	// MemberBaseMiB: a node's process before its stores (runtime, gRPC, metrics, the member
	// list): 14 MiB measured on a fresh ring-8 node, rounded up.
	MemberBaseMiB = 32
	// EmptyVnodeKiB: one store that holds nothing (manifest, active journal segment, empty
	// memtable; no thread, no AAE leaves): 13 KiB measured as the slope of idle RSS between
	// rings 8 and 256, rounded up with room for what a restart's allocator keeps (about 13 MiB
	// at ring 64).
	EmptyVnodeKiB = 256
	// OwnedVnodeMiB: one store taking writes: its memtable budget (the active memtable and
	// the frozen ones waiting for a flush, 3 × 16 MiB) and a full AAE tree (4 MiB of leaves
	// at 1 Mi segments, plus its 32 KiB chunk table).
	OwnedVnodeMiB = 3*16 + 5
	// PerGiBMiB: memory per GiB of data a member stores: the journal index of every segment a
	// read has touched (24 bytes a record) and the ledger's block indexes and bloom filters
	// (about 2 bytes a key), at 4 KiB objects. Smaller objects cost more per GiB.
	PerGiBMiB = 7
	// DefaultCPURequest is the CPU request of a member without resources: the denominator of
	// the autoscaler's CPU utilisation. No CPU limit is set (throttling shows as latency).
	DefaultCPURequest = "1"
)

// DefaultMemberResources is the levee container's resources when spec.resources is empty, for
// a member of a ring of ringSize partitions shared by at least minMembers members, with a data
// volume of storageBytes:
//
//	owned   = ceil(ringSize / minMembers)                 partitions a member owns, at most
//	working = MemberBaseMiB + ringSize × EmptyVnodeKiB
//	          + owned × OwnedVnodeMiB + storage GiB × PerGiBMiB
//	requests: memory = working, cpu = DefaultCPURequest
//	limits:   memory = 2 × working (the rest is page cache for journal reads; the kernel charges
//	          it to the pod and reclaims it before it kills the pod)
//
// Memory is rounded up to whole MiB.
func DefaultMemberResources(ringSize, minMembers int32, storageBytes int64) corev1.ResourceRequirements {
	if minMembers < 1 {
		minMembers = 1
	}
	owned := int64((ringSize + minMembers - 1) / minMembers)
	storageGiB := (storageBytes + (1<<30 - 1)) >> 30
	kib := int64(MemberBaseMiB)<<10 + int64(ringSize)*EmptyVnodeKiB +
		owned*OwnedVnodeMiB<<10 + storageGiB*PerGiBMiB<<10
	mib := (kib + 1023) >> 10
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(DefaultCPURequest),
			corev1.ResourceMemory: *resource.NewQuantity(mib<<20, resource.BinarySI),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: *resource.NewQuantity(2*mib<<20, resource.BinarySI),
		},
	}
}

// MemberResources is what the levee container runs with: spec.resources when it sets any
// request, limit or claim, else DefaultMemberResources for the spec (defaults applied). The
// smallest member count is nVal, or autoscaling.minReplicas when autoscaling is on and asks for
// more, never spec.replicas: the template must not change, and the members restart, each time
// the cluster scales.
func MemberResources(c *KVCluster) corev1.ResourceRequirements {
	r := c.Spec.Resources
	if len(r.Requests) > 0 || len(r.Limits) > 0 || len(r.Claims) > 0 {
		return r
	}
	c = c.DeepCopy()
	SetDefaults(c)
	s := c.Spec
	members := s.NVal
	if a := s.Autoscaling; a != nil && a.Enabled && a.MinReplicas > members {
		members = a.MinReplicas
	}
	return DefaultMemberResources(s.RingSize, members, s.Storage.Size.Value())
}
