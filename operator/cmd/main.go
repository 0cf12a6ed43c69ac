// Command manager runs the levee operator.
package main

import (
	"flag"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

func main() {
	var metricsAddr, probeAddr string
	var leaderElect, metricsSecure bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the operator's own /metrics endpoint (0 disables)")
	flag.BoolVar(&metricsSecure, "metrics-secure", false,
		"serve /metrics over HTTPS (self-signed certificate) to callers whose token may `get` the non-resource URL /metrics (TokenReview + SubjectAccessReview)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.BoolVar(&leaderElect, "leader-elect", false, "enable leader election (run more than one replica)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(kvv1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOptions(metricsAddr, metricsSecure),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "operator.kv.levee.io",
		Cache:                  controller.CacheOptions(),
	})
	if err != nil {
		log.Error(err, "cannot create manager")
		os.Exit(1)
	}
	if err := (&controller.KVClusterReconciler{
		Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorderFor("levee-operator"),
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "cannot set up the KVCluster controller")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))
	log.Info("starting levee operator")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager exited")
		os.Exit(1)
	}
}

// metricsOptions: plain HTTP, or HTTPS with authentication and authorization of every scrape.
func metricsOptions(addr string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
