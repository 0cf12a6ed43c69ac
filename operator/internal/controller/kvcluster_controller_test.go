package controller

// The reconciler itself is exercised against a real API server in test/envtest.
// These are narrow branch tests of its helpers.

import (
	"context"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func TestServed(t *testing.T) {
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{
		{GroupVersion: "monitoring.coreos.com/v1", APIResources: []metav1.APIResource{{Name: "servicemonitors"}}},
		{GroupVersion: "cert-manager.io/v1", APIResources: []metav1.APIResource{{Name: "certificates"}, {Name: "issuers"}}},
	}}}
	r := &KVClusterReconciler{Discovery: disc}
	cases := []struct {
		gv        schema.GroupVersion
		resources []string
		want      bool
	}{
		{schema.GroupVersion{Group: "cert-manager.io", Version: "v1"}, []string{"certificates", "issuers"}, true},
		// PrometheusRule CRD missing although ServiceMonitor exists: not served as a whole.
		{schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}, []string{"servicemonitors", "prometheusrules"}, false},
		{schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}, []string{"servicemonitors"}, true},
		{schema.GroupVersion{Group: "example.com", Version: "v1"}, []string{"things"}, false},
	}
	for _, tc := range cases {
		got, err := r.served(tc.gv, tc.resources...)
		if err != nil {
			t.Errorf("%s: %v", tc.gv, err)
		}
		if got != tc.want {
			t.Errorf("served(%s, %v) = %v, want %v", tc.gv, tc.resources, got, tc.want)
		}
	}
}

func TestEnqueueAllOnlyForOptionalGroups(t *testing.T) {
	s := runtime.NewScheme()
	_ = kvv1.AddToScheme(s)
	_ = apiextensionsv1.AddToScheme(s)
	a := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "x"}}
	b := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "y"}}
	r := &KVClusterReconciler{Client: fake.NewClientBuilder().WithScheme(s).WithObjects(a, b).Build()}
	crd := func(group string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group}}
	}
	cases := []struct {
		group string
		n     int
	}{{"monitoring.coreos.com", 2}, {"cert-manager.io", 2}, {"example.com", 0}, {"kv.levee.io", 0}}
	for _, tc := range cases {
		if got := r.enqueueAll(context.Background(), crd(tc.group)); len(got) != tc.n {
			t.Errorf("%s: %d requests, want %d", tc.group, len(got), tc.n)
		}
	}
}
