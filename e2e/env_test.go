//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// env is the cluster made by e2e/kube/up.sh and the paths of the repository (set by e2e.mk).
type env struct {
	t                                 *testing.T
	root, out, cache, runDir, version string
	kubeconfig, helm, sock            string
	loadSeconds, bigStoreGiB          int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	get := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	root, _ := filepath.Abs(get("E2E_ROOT", ".."))
	home, _ := os.UserHomeDir()
	cache := get("LEVEE_CACHE", filepath.Join(home, ".cache/levee"))
	run := get("E2E_RUN", filepath.Join(cache, "e2e/run"))
	secs, err := strconv.Atoi(get("E2E_LOAD_SECONDS", "60"))
	if err != nil {
		t.Fatalf("E2E_LOAD_SECONDS: %v", err)
	}
	big, err := strconv.Atoi(get("E2E_BIG_STORE_GIB", "3"))
	if err != nil {
		t.Fatalf("E2E_BIG_STORE_GIB: %v", err)
	}
	e := &env{bigStoreGiB: big, t: t, root: root, out: get("E2E_OUT", filepath.Join(root, "out/e2e")), cache: cache, runDir: run,
		version: get("E2E_VERSION", "0.1.0"), kubeconfig: filepath.Join(run, "kubeconfig"),
		helm: get("HELM", "helm"), sock: filepath.Join(run, "containerd/containerd.sock"), loadSeconds: secs}
	if _, err := os.Stat(e.kubeconfig); err != nil {
		t.Fatalf("no cluster: %v (run make e2e-up)", err)
	}
	return e
}

// step runs one stage of a scenario with its wall time in the log.
func (e *env) step(name string, f func()) {
	e.t.Helper()
	t0 := time.Now()
	e.t.Logf("=== %s", name)
	f()
	e.t.Logf("--- %s: ok (%.1f s)", name, time.Since(t0).Seconds())
}

func (e *env) exec(stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

func (e *env) run(name string, args ...string) string {
	e.t.Helper()
	out, err := e.exec("", name, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) kubectl(args ...string) string { e.t.Helper(); return e.run("kubectl", args...) }

func (e *env) kubectlIn(stdin string, args ...string) string {
	e.t.Helper()
	out, err := e.exec(stdin, "kubectl", args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) ctr(args ...string) string {
	e.t.Helper()
	return e.run("ctr", append([]string{"--address", e.sock, "--namespace", "k8s.io"}, args...)...)
}

// waitJob waits until the Job completes; a failed Job fails the test with its pods' logs.
func (e *env) waitJob(ns, name string, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, _ := e.exec("", "kubectl", "-n", ns, "get", "job", name, "-o",
			`jsonpath={range .status.conditions[*]}{.type}={.status};{end}`)
		switch {
		case strings.Contains(st, "Complete=True"):
			return
		case strings.Contains(st, "Failed=True"):
			logs, _ := e.exec("", "kubectl", "-n", ns, "logs", "job/"+name, "--all-containers", "--prefix", "--tail=50")
			e.t.Fatalf("Job %s/%s failed (%s); logs:\n%s", ns, name, st, logs)
		case time.Now().After(deadline):
			e.t.Fatalf("Job %s/%s not complete after %s (%s)", ns, name, timeout, st)
		}
		time.Sleep(2 * time.Second)
	}
}

// diagnose writes what a reader needs to see why a scenario failed.
func (e *env) diagnose(dir string, namespaces ...string) {
	_ = os.MkdirAll(dir, 0o755)
	save := func(file string, args ...string) {
		out, err := e.exec("", "kubectl", args...)
		if err != nil {
			out += "\n" + err.Error()
		}
		_ = os.WriteFile(filepath.Join(dir, file), []byte(out), 0o644)
	}
	save("nodes.txt", "describe", "nodes")
	save("pv.txt", "get", "pv,storageclass", "-o", "wide")
	for _, ns := range namespaces {
		save(ns+"-all.txt", "-n", ns, "get", "all,pvc,configmap,kvcluster", "-o", "wide")
		save(ns+"-describe.txt", "-n", ns, "describe", "pods,jobs,kvcluster,pvc")
		save(ns+"-events.txt", "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
		pods, _ := e.exec("", "kubectl", "-n", ns, "get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
		for _, p := range strings.Fields(pods) {
			save(ns+"-"+p+".log", "-n", ns, "logs", p, "--all-containers", "--prefix")
		}
	}
	e.t.Logf("diagnostics in %s", dir)
}
