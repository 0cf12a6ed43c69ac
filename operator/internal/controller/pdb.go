package controller

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// BuildPDB allows at most one member down for voluntary disruptions (drains):
// with nVal >= 3 every key keeps a quorum of replicas.
func BuildPDB(c *kvv1.KVCluster) *policyv1.PodDisruptionBudget {
	one := intstr.FromInt32(1)
	return &policyv1.PodDisruptionBudget{
		TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      c.Name,
			Namespace: c.Namespace,
			Labels:    labelsWith(c, map[string]string{labelComponent: "node"}),
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &one,
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
		},
	}
}
