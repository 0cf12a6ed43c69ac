// Package envtest runs the operator against a real kube-apiserver and etcd
// (controller-runtime envtest). The binaries are built by `make envtest-bins`
// into operator/bin/k8s; when they are missing every test here FAILS (no skip).
//
// envtest runs no kube-controller-manager: there is no StatefulSet controller
// (tests write StatefulSet status themselves to play its part) and no garbage
// collector (tests assert the owner references the collector acts on).
package envtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

var (
	cfg        *rest.Config
	k8sClient  client.Client
	scheme     = runtime.NewScheme()
	testEnv    *envtest.Environment
	kubeconfig string // for kubectl
	assetsDir  string
	nsCounter  atomic.Int64
	logLevel   = uberzap.NewAtomicLevel()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false), zap.Level(logLevel)))
	logLevel.SetLevel(zapLevel())
	assetsDir = os.Getenv("KUBEBUILDER_ASSETS")
	if assetsDir == "" {
		assetsDir, _ = filepath.Abs("../../bin/k8s")
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assetsDir, b)); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: envtest binary %s missing in %s (%v).\n"+
				"Run `make -C operator envtest-bins` (or `make -C operator test`) to build kube-apiserver and link etcd/kubectl.\n", b, assetsDir, err)
			return 1
		}
	}

	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(kvv1.AddToScheme(scheme))

	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assetsDir,
	}
	var err error
	cfg, err = testEnv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start envtest (kube-apiserver + etcd from %s): %v\n", assetsDir, err)
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "warning: envtest stop: %v\n", err)
		}
	}()

	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: client: %v\n", err)
		return 1
	}
	if kubeconfig, err = writeKubeconfig(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: kubeconfig: %v\n", err)
		return 1
	}

	// The operator runs with only the generated ClusterRole (config/rbac/role.yaml), so
	// every test also proves the RBAC markers grant what the reconciler needs.
	operatorCfg, err := operatorConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: operator identity: %v\n", err)
		return 1
	}
	mgr, err := ctrl.NewManager(operatorCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: manager: %v\n", err)
		return 1
	}
	disc, err := discovery.NewDiscoveryClientForConfig(operatorCfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: discovery: %v\n", err)
		return 1
	}
	if err := (&controller.KVClusterReconciler{
		Client: mgr.GetClient(), Scheme: scheme, Discovery: disc, Recorder: mgr.GetEventRecorderFor("levee-operator"),
		Autoscaler: fastAutoscaler(),
		Prober:     members, TransitionPoll: 300 * time.Millisecond, TransitionStallAfter: stallAfter,
	}).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	// Quiet the expected "context canceled" noise of the shutdown.
	logLevel.SetLevel(zapcore.FatalLevel)
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintf(os.Stderr, "manager stopped with error: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("LEVEE_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// operatorConfig returns credentials of a user bound only to the generated ClusterRole.
func operatorConfig() (*rest.Config, error) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return nil, fmt.Errorf("parse role.yaml: %w", err)
	}
	if len(role.Rules) == 0 {
		return nil, fmt.Errorf("role.yaml has no rules")
	}
	if err := k8sClient.Create(context.Background(), role); err != nil {
		return nil, err
	}
	const user = "levee-operator-test"
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "levee-operator-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}
	if err := k8sClient.Create(context.Background(), binding); err != nil {
		return nil, err
	}
	u, err := testEnv.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		return nil, err
	}
	oc := u.Config()
	oc.QPS, oc.Burst = cfg.QPS, cfg.Burst // same client rate limits as the envtest admin
	return oc, nil
}

func writeKubeconfig() (string, error) {
	user, err := testEnv.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "levee-envtest-kubeconfig-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.Write(data)
	return f.Name(), err
}

// kubectl runs /usr/bin/kubectl (linked into the assets dir) against the envtest server.
func kubectl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(assetsDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// newNamespace creates a fresh namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	name = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-")
	if err := k8sClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// eventually polls f until it returns nil or the timeout passes, then fails with f's last error.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dump(v interface{}) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
