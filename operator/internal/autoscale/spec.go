package autoscale

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// SpecFrom reads what Decide needs from a KVCluster (defaults applied to a copy, so it works on
// objects that never went through the API server), with the given tuning.
func SpecFrom(c *kvv1.KVCluster, t Tuning) Spec {
	c = c.DeepCopy()
	kvv1.SetDefaults(c)
	s := c.Spec
	out := Spec{
		Replicas: s.Replicas,
		NVal:     s.NVal,
		NVMe:     s.Storage.Profile == kvv1.StorageNVMe,
		Tuning:   t,
	}
	for i := int32(0); i < s.Replicas; i++ {
		out.Members = append(out.Members, fmt.Sprintf("%s-%d", c.Name, i))
	}
	// The container's resources: the spec's, or the defaults the operator gives it.
	res := kvv1.MemberResources(c)
	if q, ok := res.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
		out.CPURequest = q.AsApproximateFloat64()
	} else if q, ok := res.Limits[corev1.ResourceCPU]; ok {
		out.CPURequest = q.AsApproximateFloat64()
	}
	if a := s.Autoscaling; a != nil {
		out.Enabled = a.Enabled
		out.MinReplicas, out.MaxReplicas = a.MinReplicas, a.MaxReplicas
		out.CPUTarget = float64(a.CPUTarget) / 100
		out.DiskBusyTarget = float64(a.DiskBusyTarget) / 100
		out.ScaleUp = a.ScaleUpStabilization.Duration
		out.ScaleDown = a.ScaleDownStabilization.Duration
	}
	return out
}

// QueriesFor returns the PromQL builder for a KVCluster's members (as scraped through its
// headless Service by the operator's ServiceMonitor).
func QueriesFor(c *kvv1.KVCluster) Queries {
	return Queries{Namespace: c.Namespace, Service: c.Name + "-headless", Window: DefaultWindow}
}
