package controller

import (
	"reflect"
	"testing"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func TestNames(t *testing.T) {
	c := cluster(nil)
	cases := []struct{ got, want string }{
		{HeadlessServiceName(c), "kv-headless"},
		{ClientServiceName(c), "kv"},
		{ConfigMapName(c), "kv-config"},
		{StatefulSetName(c), "kv"},
		{TLSSecretName(c), "kv-tls"},
		{MemberAddress(c, 2), "kv-2.kv-headless.ns.svc:8087"},
		{Selector(c), "app.kubernetes.io/component=node,app.kubernetes.io/instance=kv,app.kubernetes.io/name=levee"},
		{DefaultStorageClass(kvv1.StorageNVMe), "levee-nvme"},
		{DefaultStorageClass(kvv1.StorageHDD), "levee-hdd"},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if got := MemberAddresses(c, 2); !reflect.DeepEqual(got, []string{"kv-0.kv-headless.ns.svc:8087", "kv-1.kv-headless.ns.svc:8087"}) {
		t.Errorf("MemberAddresses = %q", got)
	}
	if got := MemberAddresses(c, 0); len(got) != 0 {
		t.Errorf("MemberAddresses(0) = %q", got)
	}
}
