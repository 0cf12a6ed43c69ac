//go:build tools

// Package tools pins the Prometheus server that ../build.sh builds from this module. It is a module
// of its own because Prometheus needs a different klog shim than the operator (../module).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
