// Command pause is the e2e cluster's pod sandbox image: it sleeps until SIGTERM or SIGINT and
// exits 0. Built static (CGO off) and packed into an image by e2e/kube/images.sh; containerd's
// sandbox_image points at it (no registry is reachable, so registry.k8s.io/pause cannot be pulled).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
