//go:build tools

// Package tools pins the Kubernetes commands envtest needs (only kube-apiserver;
// etcd comes from Debian's etcd-server and kubectl from the system).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
