package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestBuildServices(t *testing.T) {
	c := cluster(nil)
	cases := []struct {
		svc        *corev1.Service
		name       string
		clusterIP  string
		notReady   bool
		ports      []int32
		serviceTag string
	}{
		{BuildHeadlessService(c), "kv-headless", corev1.ClusterIPNone, true, []int32{8087, 8098}, "headless"},
		{BuildClientService(c), "kv", "", false, []int32{8087}, "client"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.svc
			if s.Name != tc.name || s.Spec.ClusterIP != tc.clusterIP || s.Spec.PublishNotReadyAddresses != tc.notReady {
				t.Errorf("service = %+v", s)
			}
			if len(s.Spec.Ports) != len(tc.ports) {
				t.Fatalf("ports = %+v", s.Spec.Ports)
			}
			for i, p := range tc.ports {
				if s.Spec.Ports[i].Port != p || s.Spec.Ports[i].TargetPort.StrVal == "" {
					t.Errorf("port %d = %+v", i, s.Spec.Ports[i])
				}
			}
			if s.Labels[LabelService] != tc.serviceTag {
				t.Errorf("label %s = %q", LabelService, s.Labels[LabelService])
			}
			// The selector must match the member pods of the StatefulSet.
			podLabels := labels.Set(BuildStatefulSet(c).Spec.Template.Labels)
			if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
				t.Errorf("selector %v does not match pod labels %v", s.Spec.Selector, podLabels)
			}
		})
	}
}
