// CoreDNS for the e2e cluster, built with only the plugins e2e/kube/up.sh's Corefile uses.
//
// `go install github.com/coredns/coredns` compiles every plugin CoreDNS ships (the cloud DNS
// providers' SDKs, etcd, dnstap, gRPC, ...), about three minutes on 2 cores; the e2e cluster needs
// seven of them. This follows CoreDNS's documented way of building with a chosen plugin set: import
// the plugins and set dnsserver.Directives. A directive in the Corefile that is not listed here
// makes CoreDNS refuse to start with "unknown directive", so a missing plugin cannot pass silently.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives in the order of CoreDNS's plugin.cfg, which is the order a query passes them
// (cache before kubernetes and forward, so answers of both are cached).
var directives = []string{"bind", "ready", "health", "errors", "cache", "kubernetes", "forward"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
