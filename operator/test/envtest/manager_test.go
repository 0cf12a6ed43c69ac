package envtest

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startManager builds cmd/ (the real entry point: flags, scheme, manager wiring) and runs it
// against the envtest API server with args until its controller starts workers. The returned
// stop sends SIGTERM and expects a clean exit.
func startManager(t *testing.T, args ...string) (stop func()) {
	t.Helper()
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	bin := filepath.Join(t.TempDir(), "manager")
	if out, err := exec.Command(goBin, "build", "-o", bin, "../../cmd").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `"Starting workers","controller":"kvcluster"`) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("manager did not start its controller within 30s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func() {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("manager exited with %v after SIGTERM:\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("manager did not stop within 30s of SIGTERM")
		}
	}
}

// TestManagerBinaryStarts runs the real binary until its controller starts workers, then
// stops it with SIGTERM and expects a clean exit.
func TestManagerBinaryStarts(t *testing.T) {
	startManager(t, "--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:0")()
}

// TestManagerServesSecureMetrics: with --metrics-secure (the chart's default) /metrics is HTTPS
// and answers only callers whose token the API server authenticates and authorizes for
// `get /metrics`: no token 401, a ServiceAccount without the right 403, with it 200.
func TestManagerServesSecureMetrics(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	stop := startManager(t, "--metrics-bind-address", addr, "--metrics-secure", "--health-probe-bind-address", "127.0.0.1:0")
	defer stop()

	ns := newNamespace(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	token := func(sa string) string {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token for %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("stranger")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}}}
	for _, o := range []client.Object{role, binding} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The operator's certificate is self-signed (as with the chart's ServiceMonitor).
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		who, tok string
		code     int
	}{{"no token", "", http.StatusUnauthorized}, {"unbound ServiceAccount", stranger, http.StatusForbidden}, {"metrics reader", reader, http.StatusOK}} {
		eventually(t, "metrics answer for "+tc.who, func() error {
			code, body := get(tc.tok)
			if code != tc.code {
				return fmt.Errorf("%s: HTTP %d, want %d: %.200s", tc.who, code, tc.code, body)
			}
			if code == http.StatusOK && !strings.Contains(body, "controller_runtime_reconcile_total") {
				return fmt.Errorf("no controller-runtime metrics in %.300s", body)
			}
			return nil
		})
	}
}
