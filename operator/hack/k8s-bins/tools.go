//go:build tools

// Package tools pins the Kubernetes commands built from this module: kube-apiserver for envtest
// (etcd comes from Debian's etcd-server, kubectl from the system), and with it the four the e2e
// cluster also runs (e2e/kube/up.sh, built by e2e/kube/build-bins.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
