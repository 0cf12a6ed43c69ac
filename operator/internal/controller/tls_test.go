package controller

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func TestBuildTLSObjects(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*kvv1.KVCluster)
		want   []string // Kind/name in order
		issuer map[string]interface{}
	}{
		{name: "disabled", want: nil},
		{name: "own CA", mutate: func(c *kvv1.KVCluster) { c.Spec.TLS.Enabled = true },
			want:   []string{"Issuer/kv-selfsigned", "Certificate/kv-ca", "Issuer/kv-ca", "Certificate/kv-tls"},
			issuer: map[string]interface{}{"name": "kv-ca", "kind": "Issuer", "group": "cert-manager.io"}},
		{name: "user issuer", mutate: func(c *kvv1.KVCluster) {
			c.Spec.TLS.Enabled = true
			c.Spec.TLS.IssuerRef = &kvv1.IssuerRef{Name: "corp-ca", Kind: "ClusterIssuer"}
		}, want: []string{"Certificate/kv-tls"},
			issuer: map[string]interface{}{"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := BuildTLSObjects(cluster(tc.mutate))
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
				if o.GetAPIVersion() != "cert-manager.io/v1" || o.GetNamespace() != "ns" {
					t.Errorf("%s: apiVersion %s ns %s", o.GetName(), o.GetAPIVersion(), o.GetNamespace())
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("objects = %q, want %q", got, tc.want)
			}
			if len(objs) == 0 {
				return
			}
			cert := objs[len(objs)-1]
			ref, _, _ := unstructured.NestedMap(cert.Object, "spec", "issuerRef")
			if !reflect.DeepEqual(ref, tc.issuer) {
				t.Errorf("issuerRef = %v, want %v", ref, tc.issuer)
			}
			secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
			dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if secret != "kv-tls" || !reflect.DeepEqual(dns, []string{"kv", "kv.ns.svc", "kv.ns.svc.cluster.local",
				"*.kv-headless.ns.svc", "*.kv-headless.ns.svc.cluster.local"}) {
				t.Errorf("secret %s dns %q", secret, dns)
			}
		})
	}
}
