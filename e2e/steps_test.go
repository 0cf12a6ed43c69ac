//go:build e2e

// Steps the scenarios share (TestSmoke in smoke_test.go, TestFull in full_test.go): each is what a
// user would type — ctr, helm, kubectl — wrapped with the checks that make it a test.
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	operatorNS = "levee-system"
	clusterNS  = "levee-e2e"
)

// scenarioDir empties out/e2e/<name> and dumps the namespaces' state there if the test fails.
func (e *env) scenarioDir(name string, namespaces ...string) string {
	t := e.t
	out := filepath.Join(e.out, name)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.diagnose(filepath.Join(out, "diagnostics"), namespaces...)
		}
	})
	// Scenarios start from an empty cluster: a kept one (E2E_KEEP=1) still holds the last run's
	// namespace and has used its local PVs (reclaim policy Retain).
	if _, err := e.exec("", "kubectl", "get", "namespace", clusterNS); err == nil {
		t.Fatalf("namespace %s exists from an earlier run: run make e2e-down first", clusterNS)
	}
	return out
}

// importImages puts the node, operator and bench images into the node's containerd.
func (e *env) importImages() {
	for _, a := range []string{
		filepath.Join(e.root, "out/image", "levee-"+e.version+".tar"),
		filepath.Join(e.root, "out/image", "levee-operator-"+e.version+".tar"),
		filepath.Join(e.cache, "e2e/images/bench.tar"),
	} {
		e.ctr("images", "import", a)
	}
}

// helmInstall installs (or upgrades) the operator chart with extra --set values.
func (e *env) helmInstall(set ...string) {
	args := []string{"upgrade", "--install", "levee-operator", filepath.Join(e.root, "charts/levee-operator"),
		"--namespace", operatorNS, "--create-namespace", "--set", "image.pullPolicy=Never", "--wait", "--timeout", "5m"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	e.run(e.helm, args...)
	e.kubectl("-n", operatorNS, "rollout", "status", "deployment", "--timeout=2m")
}

// smallRequests scales a sample's 2-4 CPUs and 8 GiB per member to a 2-core node shared by
// every member; everything else stays as shipped.
const smallRequests = `{"spec":{"imagePullPolicy":"Never","resources":{"requests":{"cpu":"100m","memory":"256Mi"},"limits":{"cpu":"1","memory":"2Gi"}}}}`

// applySample applies operator/config/samples/<file> into clusterNS after merge patches made
// with `kubectl patch --local` (smallRequests first).
func (e *env) applySample(file string, patches ...string) {
	sample := filepath.Join(e.root, "operator/config/samples", file)
	doc := e.kubectl("patch", "--local", "-f", sample, "--type", "merge", "-o", "yaml", "-p", smallRequests)
	for _, p := range patches {
		doc = e.kubectlIn(doc, "patch", "--local", "-f", "-", "--type", "merge", "-o", "yaml", "-p", p)
	}
	if _, err := e.exec("", "kubectl", "get", "namespace", clusterNS); err != nil {
		e.kubectl("create", "namespace", clusterNS)
	}
	e.kubectlIn(doc, "-n", clusterNS, "apply", "-f", "-")
}

func (e *env) waitAvailable(name string, timeout time.Duration) {
	e.kubectl("-n", clusterNS, "wait", "kvcluster/"+name, "--for=condition=Available", fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	e.t.Log(e.kubectl("-n", clusterNS, "get", "kvcluster,statefulset,pods,pvc,svc,cronjob", "-o", "wide"))
}

// loadRun is one in-cluster levee-bench Job's results.
type loadRun struct {
	dir               string // where the Job wrote its run directory (summary.csv, ...)
	log               string
	whole, secondHalf float64 // successful ops/s over the run and over its second half
	total, failed     float64 // operations, and failed ones, over the run
	rows              int
}

// runLoad runs levee-bench (grpc driver) in a Job with the given scenario and collects its
// basho_bench CSVs and summary.png into out/<name>/bench (through a hostPath volume: the image
// has no shell or tar for `kubectl cp`, and the test runs on the only node). ops are the
// operations whose latency files must exist.
func (e *env) runLoad(out, name, scenario string, deadline time.Duration, ops ...string) loadRun {
	e.t.Helper()
	return e.startLoad(out, name, scenario, deadline)(ops...)
}

// startLoad starts the load Job of runLoad and returns what waits for it and collects its
// results (call it on the test's goroutine).
func (e *env) startLoad(out, name, scenario string, deadline time.Duration) (wait func(ops ...string) loadRun) {
	t := e.t
	t.Helper()
	dir := filepath.Join(out, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scenario.toml"), []byte(scenario), 0o644); err != nil {
		t.Fatal(err)
	}
	e.kubectl("-n", clusterNS, "create", "configmap", name, "--from-file=scenario.toml="+filepath.Join(dir, "scenario.toml"))
	job := fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: %s, namespace: %s}
spec:
  backoffLimit: 0
  activeDeadlineSeconds: %d
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: bench
        image: docker.io/library/levee-bench:e2e
        imagePullPolicy: Never
        args: ["run", "/scenario/scenario.toml", "--out", "/out/bench", "--force", "--quiet"]
        securityContext: {runAsUser: 0}
        volumeMounts:
        - {name: scenario, mountPath: /scenario}
        - {name: out, mountPath: /out}
      volumes:
      - name: scenario
        configMap: {name: %s}
      - name: out
        hostPath: {path: %q, type: DirectoryOrCreate}
`, name, clusterNS, int(deadline.Seconds()), name, dir)
	e.kubectlIn(job, "apply", "-f", "-")
	return func(ops ...string) loadRun { t.Helper(); return e.collectLoad(name, dir, deadline, ops) }
}

func (e *env) collectLoad(name, dir string, deadline time.Duration, ops []string) loadRun {
	t := e.t
	t.Helper()
	e.waitJob(clusterNS, name, deadline)
	r := loadRun{dir: filepath.Join(dir, "bench")}
	r.log = e.kubectl("-n", clusterNS, "logs", "job/"+name)
	_ = os.WriteFile(filepath.Join(dir, "bench.log"), []byte(r.log), 0o644)
	files := []string{"summary.csv", "summary.png"}
	for _, op := range ops {
		files = append(files, op+"_latencies.csv")
	}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(r.dir, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("load Job %s wrote no %s (%v); log:\n%s", name, f, err, r.log)
		}
	}
	sum, _ := os.ReadFile(filepath.Join(r.dir, "summary.csv"))
	lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
	if len(lines) < 2 {
		t.Fatalf("%s: summary.csv has no data rows:\n%s", name, sum)
	}
	r.rows = len(lines) - 1
	r.whole, r.secondHalf = throughput(lines[1:])
	r.total, r.failed = failures(lines[1:])
	t.Logf("%s: summary.csv (%d rows), last: %s", name, r.rows, lines[len(lines)-1])
	t.Logf("%s: in-cluster load: %.0f ops/s over the run, %.0f ops/s over its second half (steady state)", name, r.whole, r.secondHalf)
	return r
}

// maintenanceJob starts a Job from one of the operator's maintenance CronJobs (`kubectl create job
// --from=cronjob/...`), waits for every member's pod, saves their logs to out/<job>.log and waits
// until the KVCluster's status reports the run as Succeeded. kind is "compaction" or "aaeRebuild"
// (the status field). Returns the pods' logs.
func (e *env) maintenanceJob(out, cluster, cronjob, job, kind string, timeout time.Duration) string {
	t := e.t
	t.Helper()
	e.kubectl("-n", clusterNS, "create", "job", job, "--from=cronjob/"+cronjob)
	e.waitJob(clusterNS, job, timeout)
	// One pod per member (an Indexed Job): keep every member's log, not just the first pod's.
	done := e.kubectl("-n", clusterNS, "get", "job", job, "-o", "jsonpath={.status.succeeded}/{.spec.completions}")
	logs := e.kubectl("-n", clusterNS, "logs", "-l", "job-name="+job, "--all-containers", "--prefix", "--tail=-1")
	_ = os.WriteFile(filepath.Join(out, job+".log"), []byte(logs), 0o644)
	t.Logf("Job %s from cronjob/%s succeeded (%s pods):\n%s", job, cronjob, done, logs)
	var phase string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		phase = e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o",
			fmt.Sprintf("jsonpath={.status.maintenance.%[1]s.job} {.status.maintenance.%[1]s.phase} {.status.maintenance.%[1]s.message}", kind))
		if strings.HasPrefix(phase, job+" Succeeded") {
			break
		}
	}
	if !strings.HasPrefix(phase, job+" Succeeded") {
		t.Fatalf("KVCluster status does not report Job %s as Succeeded: %q", job, phase)
	}
	t.Logf("KVCluster status.maintenance.%s: %s", kind, phase)
	return logs
}

// cronJobs lists the cluster's maintenance CronJobs of one kind (label kv.levee.io/maintenance).
func (e *env) cronJobs(cluster, kind string) []string {
	return strings.Fields(e.kubectl("-n", clusterNS, "get", "cronjob", "-l",
		"app.kubernetes.io/instance="+cluster+",kv.levee.io/maintenance="+kind, "-o", "jsonpath={.items[*].metadata.name}"))
}

// memberStats is `levee admin stats --json` of one member (run in its pod).
func (e *env) memberStats(pod string, tlsArgs ...string) map[string]float64 {
	args := append([]string{"-n", clusterNS, "exec", pod, "--", "levee", "admin", "stats", "--json"}, tlsArgs...)
	out := e.kubectl(args...)
	var m map[string]float64
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		e.t.Fatalf("%s: levee admin stats --json: %v\n%s", pod, err, out)
	}
	return m
}

// cli is the levee binary image.mk puts in the node image (E2E_CLI, set by e2e.mk), runnable on
// the host against pod and Service IPs.
func (e *env) cli() string {
	if c := os.Getenv("E2E_CLI"); c != "" {
		return c
	}
	return filepath.Join(e.root, "out/image/levee")
}

// background calls write(0), write(1), ... on a goroutine until the returned stop is called;
// stop returns once the write in progress has ended.
func background(write func(i int)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			write(i)
		}
	}()
	return func() { close(quit); <-done }
}

// grpcScenario is a levee-bench scenario file for the grpc driver against the cluster's client
// Service: 8 workers at full speed, a 10 s report interval, the given operations (TOML), keys
// from keyGen over n keys, fixed values of size bytes, and preload keys written first (0: none).
func grpcScenario(comment, cluster string, seconds int, ops, keyGen string, n, size, preload int) string {
	s := fmt.Sprintf(`# %s
driver = "grpc"
address = "%s.%s.svc:8087"
mode = "max"
concurrent = 8
duration = "%ds"
report_interval = "10s"
operations = %s
[key_generator]
type = %q
n = %d
[value_generator]
type = "fixed_bin"
size = %d
`, comment, cluster, clusterNS, seconds, ops, keyGen, n, size)
	if preload > 0 {
		s += fmt.Sprintf("[preload]\nkeys = %d\n", preload)
	}
	return s
}
