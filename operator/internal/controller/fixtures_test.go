package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// cluster returns a defaulted KVCluster ns/kv after applying mutate.
func cluster(mutate func(*kvv1.KVCluster)) *kvv1.KVCluster {
	c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: "ns", UID: "uid-1", Generation: 1}}
	if mutate != nil {
		mutate(c)
	}
	kvv1.SetDefaults(c)
	return c
}

func i32(v int32) *int32 { return &v }
