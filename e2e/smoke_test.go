//go:build e2e

// The smoke scenario of issue 13 on the real single-node cluster of e2e/kube (make e2e-smoke):
// images imported into the node's containerd, `helm install` of charts/levee-operator, the NVMe
// sample KVCluster (3 members; requests scaled down to fit a 2-core node) until Available, a 60 s
// levee-bench Job against the client Service with its results copied to out/e2e/smoke, and one
// compaction Job created from the operator's CronJob. Everything goes through kubectl, helm and ctr
// (the same commands a user would type). On failure the cluster's state is dumped into
// out/e2e/smoke/diagnostics.
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	operatorNS  = "levee-system"
	clusterNS   = "levee-e2e"
	clusterName = "orders" // metadata.name of the NVMe sample
)

func TestSmoke(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.out, "smoke")
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.diagnose(filepath.Join(out, "diagnostics"), operatorNS, clusterNS)
		}
	})

	// The scenario starts from an empty cluster: a kept one (E2E_KEEP=1) still holds the last run's
	// namespace and has used its local PVs (reclaim policy Retain).
	if _, err := e.exec("", "kubectl", "get", "namespace", clusterNS); err == nil {
		t.Fatalf("namespace %s exists from an earlier run: run make e2e-down first", clusterNS)
	}

	e.step("import images into the node's containerd", func() {
		for _, a := range []string{
			filepath.Join(e.root, "out/image", "levee-"+e.version+".tar"),
			filepath.Join(e.root, "out/image", "levee-operator-"+e.version+".tar"),
			filepath.Join(e.cache, "e2e/images/bench.tar"),
		} {
			e.ctr("images", "import", a)
		}
	})

	e.step("helm install charts/levee-operator", func() {
		e.run(e.helm, "upgrade", "--install", "levee-operator", filepath.Join(e.root, "charts/levee-operator"),
			"--namespace", operatorNS, "--create-namespace", "--set", "image.pullPolicy=Never",
			"--wait", "--timeout", "5m")
		e.kubectl("-n", operatorNS, "rollout", "status", "deployment", "--timeout=2m")
	})

	e.step("apply the NVMe sample KVCluster", func() {
		e.kubectl("create", "namespace", clusterNS)
		sample := filepath.Join(e.root, "operator/config/samples/kv_v1alpha1_kvcluster_nvme.yaml")
		// The sample asks for 2-4 CPUs and 8 GiB per member: scale the requests to a 2-core node
		// (everything else as shipped: 3 members, ring 64, nVal 3, storage profile nvme).
		patched := e.kubectl("patch", "--local", "-f", sample, "--type", "merge", "-o", "yaml", "-p",
			`{"spec":{"imagePullPolicy":"Never","resources":{"requests":{"cpu":"100m","memory":"256Mi"},"limits":{"cpu":"1","memory":"2Gi"}}}}`)
		e.kubectlIn(patched, "-n", clusterNS, "apply", "-f", "-")
	})

	e.step("KVCluster Available", func() {
		e.kubectl("-n", clusterNS, "wait", "kvcluster/"+clusterName, "--for=condition=Available", "--timeout=10m")
		t.Log(e.kubectl("-n", clusterNS, "get", "kvcluster,statefulset,pods,pvc,svc,cronjob", "-o", "wide"))
	})

	e.step("malformed KVClusters are refused by the API server with their messages", func() {
		sample := filepath.Join(e.root, "operator/config/samples/kv_v1alpha1_kvcluster_nvme.yaml")
		for _, c := range []struct{ patch, want string }{
			{`{"metadata":{"name":"bad-ring"},"spec":{"ringSize":100}}`, "ringSize must be a power of two"},
			{`{"metadata":{"name":"bad-nval"},"spec":{"replicas":3,"nVal":5}}`, "nVal must be less than or equal to replicas"},
			{`{"metadata":{"name":"bad-hour"},"spec":{"compaction":{"windowStartHour":24}}}`, "compaction.windowStartHour must be an hour of the day between 0 and 23"},
		} {
			bad := e.kubectl("patch", "--local", "-f", sample, "--type", "merge", "-o", "yaml", "-p", c.patch)
			out, err := e.exec(bad, "kubectl", "-n", clusterNS, "apply", "--dry-run=server", "-f", "-")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: want a refusal saying %q, got err=%v:\n%s", c.patch, c.want, err, out)
			}
		}
		// An update the CRD forbids: the ring size of a running cluster.
		out, err := e.exec("", "kubectl", "-n", clusterNS, "patch", "kvcluster", clusterName, "--type", "merge", "-p", `{"spec":{"ringSize":128}}`)
		if err == nil || !strings.Contains(err.Error(), "ringSize is immutable") {
			t.Fatalf("ringSize change: want 'ringSize is immutable', got err=%v:\n%s", err, out)
		}
	})

	e.step("every member runs the operator's member list (members.json, version 1, 3 members)", func() {
		for i := 0; i < 3; i++ {
			pod := fmt.Sprintf("%s-%d", clusterName, i)
			var got struct {
				Version uint64 `json:"version"`
				Members []struct {
					Name       string `json:"name"`
					Partitions int    `json:"partitions"`
				} `json:"members"`
			}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				out := e.kubectl("-n", clusterNS, "exec", pod, "--", "levee", "admin", "members", "--json")
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Fatalf("%s: levee admin members --json: %v\n%s", pod, err, out)
				}
				if got.Version >= 1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(2 * time.Second)
			}
			if got.Version != 1 || len(got.Members) != 3 {
				t.Fatalf("%s runs member list version %d with %d members, want version 1 with 3", pod, got.Version, len(got.Members))
			}
			total := 0
			for _, m := range got.Members {
				total += m.Partitions
			}
			if total != 64 {
				t.Fatalf("%s: the claim covers %d partitions, want 64", pod, total)
			}
		}
	})

	e.step(fmt.Sprintf("in-cluster levee-bench load for %d s against the client Service", e.loadSeconds), func() {
		scenario := fmt.Sprintf(`# e2e smoke load: 8 KB values, pareto keys, 5 GET : 1 UPDATE, through the client Service.
driver = "grpc"
address = "%s.%s.svc:8087"
mode = "max"
concurrent = 8
duration = "%ds"
report_interval = "10s"
operations = [["get", 5], ["update", 1]]
[key_generator]
type = "pareto_int"
n = 20000
[value_generator]
type = "fixed_bin"
size = 8192
[preload]
keys = 5000
`, clusterName, clusterNS, e.loadSeconds)
		if err := os.WriteFile(filepath.Join(out, "scenario.toml"), []byte(scenario), 0o644); err != nil {
			t.Fatal(err)
		}
		e.kubectl("-n", clusterNS, "create", "configmap", "smoke-load", "--from-file=scenario.toml="+filepath.Join(out, "scenario.toml"))
		// Single-node cluster: the Job writes its run directory through a hostPath volume straight
		// into out/e2e/smoke/bench (the image has no shell or tar for `kubectl cp`).
		job := fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: smoke-load, namespace: %s}
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
        args: ["run", "/scenario/scenario.toml", "--out", "/out/bench", "--quiet"]
        securityContext: {runAsUser: 0}
        volumeMounts:
        - {name: scenario, mountPath: /scenario}
        - {name: out, mountPath: /out}
      volumes:
      - name: scenario
        configMap: {name: smoke-load}
      - name: out
        hostPath: {path: %q, type: DirectoryOrCreate}
`, clusterNS, e.loadSeconds+600, out)
		e.kubectlIn(job, "apply", "-f", "-")
		e.waitJob(clusterNS, "smoke-load", time.Duration(e.loadSeconds+600)*time.Second)
		logs := e.kubectl("-n", clusterNS, "logs", "job/smoke-load")
		_ = os.WriteFile(filepath.Join(out, "bench.log"), []byte(logs), 0o644)
		for _, f := range []string{"summary.csv", "get_latencies.csv", "update_latencies.csv", "summary.png"} {
			st, err := os.Stat(filepath.Join(out, "bench", f))
			if err != nil || st.Size() == 0 {
				t.Fatalf("load Job wrote no %s (%v); log:\n%s", f, err, logs)
			}
		}
		sum, _ := os.ReadFile(filepath.Join(out, "bench", "summary.csv"))
		lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
		if len(lines) < 2 {
			t.Fatalf("summary.csv has no data rows:\n%s", sum)
		}
		t.Logf("summary.csv (%d rows), last: %s", len(lines)-1, lines[len(lines)-1])
		whole, second := throughput(lines[1:])
		t.Logf("in-cluster load: %.0f ops/s over the run, %.0f ops/s over its second half (steady state)", whole, second)
	})

	e.step("compaction Job from the operator's CronJob", func() {
		cj := strings.Fields(e.kubectl("-n", clusterNS, "get", "cronjob", "-l", "kv.levee.io/maintenance=compaction",
			"-o", "jsonpath={.items[*].metadata.name}"))
		if len(cj) == 0 {
			t.Fatal("the operator made no compaction CronJob")
		}
		e.kubectl("-n", clusterNS, "create", "job", "smoke-compact", "--from=cronjob/"+cj[0])
		e.waitJob(clusterNS, "smoke-compact", 15*time.Minute)
		// One pod per member (an Indexed Job): keep every member's log, not just the first pod's.
		done := e.kubectl("-n", clusterNS, "get", "job", "smoke-compact", "-o", "jsonpath={.status.succeeded}/{.spec.completions}")
		logs := e.kubectl("-n", clusterNS, "logs", "-l", "job-name=smoke-compact", "--all-containers", "--prefix", "--tail=-1")
		_ = os.WriteFile(filepath.Join(out, "compaction.log"), []byte(logs), 0o644)
		t.Logf("compaction Job from cronjob/%s succeeded (%s pods):\n%s", cj[0], done, logs)
		// The operator reports the run member by member in the KVCluster's status.
		var phase string
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			phase = e.kubectl("-n", clusterNS, "get", "kvcluster", clusterName, "-o",
				"jsonpath={.status.maintenance.compaction.job} {.status.maintenance.compaction.phase} {.status.maintenance.compaction.message}")
			if strings.HasPrefix(phase, "smoke-compact Succeeded") {
				break
			}
		}
		if !strings.HasPrefix(phase, "smoke-compact Succeeded") {
			t.Fatalf("KVCluster status does not report the compaction Job as Succeeded: %q", phase)
		}
		t.Logf("KVCluster status.maintenance.compaction: %s", phase)
	})

	e.step("AAE rebuild Job from the operator's CronJob", func() {
		e.kubectl("-n", clusterNS, "create", "job", "smoke-aae", "--from=cronjob/"+clusterName+"-aae-rebuild")
		e.waitJob(clusterNS, "smoke-aae", 15*time.Minute)
		logs := e.kubectl("-n", clusterNS, "logs", "-l", "job-name=smoke-aae", "--all-containers", "--prefix", "--tail=-1")
		_ = os.WriteFile(filepath.Join(out, "aae-rebuild.log"), []byte(logs), 0o644)
		if !strings.Contains(logs, "rebuilt") {
			t.Fatalf("the AAE rebuild Job's pods did not report a rebuild:\n%s", logs)
		}
		t.Logf("AAE rebuild Job succeeded:\n%s", logs)
	})

	e.step("change the image tag under load: one member at a time, each Ready before the next", func() {
		// levee:dev and levee:<version> are the same image under two tags: a new tag rolls the
		// StatefulSet without changing what runs. Load through the client Service meanwhile.
		cli := filepath.Join(e.root, "engine/target/x86_64-unknown-linux-musl/release/levee")
		svc := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "svc", clusterName, "-o", "jsonpath={.spec.clusterIP}"))
		stop, done := make(chan struct{}), make(chan struct{})
		var ok, failed atomic.Int64
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.exec("", cli, "put", "e2e-rollout", fmt.Sprintf("k%d", i%500), "v", "--addr", svc+":8087", "--timeout", "2"); err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
		e.kubectl("-n", clusterNS, "patch", "kvcluster", clusterName, "--type", "merge", "-p",
			fmt.Sprintf(`{"spec":{"image":"levee:%s"}}`, e.version))
		// Poll the pods: never more than one member not Ready, and the order of the restarts.
		var order []string
		seen := map[string]bool{}
		maxDown := 0
		deadline := time.Now().Add(10 * time.Minute)
		for {
			out := e.kubectl("-n", clusterNS, "get", "pods", "-l", "app.kubernetes.io/instance="+clusterName+",app.kubernetes.io/component=node",
				"-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
			down, updated := 0, 0
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(l)
				if len(f) < 3 || f[2] != "True" {
					down++
				}
				if len(f) >= 2 && strings.HasSuffix(f[1], ":"+e.version) {
					if !seen[f[0]] {
						seen[f[0]] = true
						order = append(order, f[0])
					}
					if len(f) >= 3 && f[2] == "True" {
						updated++
					}
				}
			}
			// Pods missing from the list (between delete and create) count as down too.
			if n := len(strings.Split(strings.TrimSpace(out), "\n")); n < 3 {
				down += 3 - n
			}
			if down > maxDown {
				maxDown = down
			}
			if updated == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rollout not done in 10 min; restarted so far %v; pods:\n%s", order, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
		close(stop)
		<-done
		msg := fmt.Sprintf("rolled %v; at most %d member(s) not Ready at once; %d writes ok, %d failed during the rollout",
			order, maxDown, ok.Load(), failed.Load())
		_ = os.WriteFile(filepath.Join(out, "rollout.txt"), []byte(msg+"\n"), 0o644)
		if maxDown > 1 || len(order) != 3 {
			t.Fatal(msg)
		}
		e.kubectl("-n", clusterNS, "wait", "kvcluster/"+clusterName, "--for=condition=Available", "--timeout=5m")
		t.Log(msg)
	})

	e.step("delete a member under write load: every acknowledged write reads back through it and through another member", func() {
		// Writes go straight to one member (its pod IP, from the host), which coordinates them
		// (n_val 3, w=2). The pod is deleted (SIGTERM, graceful) while the writer runs; the
		// StatefulSet brings it back on the same volume, maybe with another IP. Every
		// acknowledged write is then read through the returned member and through another one
		// (replication, and the returned member's catch-up by handoff or read repair).
		pod := clusterName + "-1"
		cli := filepath.Join(e.root, "engine/target/x86_64-unknown-linux-musl/release/levee")
		podIP := func() string {
			return strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"))
		}
		ip := podIP()
		var acked []int
		var failed atomic.Int64 // read by this goroutine while the writer runs
		attempts := 0
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				attempts++
				if _, err := e.exec("", cli, "put", "e2e-faults", fmt.Sprintf("k%06d", i), fmt.Sprintf("v%d", i),
					"--addr", ip+":8087", "--timeout", "2"); err != nil {
					failed.Add(1)
					time.Sleep(200 * time.Millisecond)
					if cur, err := e.exec("", "kubectl", "-n", clusterNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"); err == nil && strings.TrimSpace(cur) != "" {
						ip = strings.TrimSpace(cur)
					}
					continue
				}
				acked = append(acked, i)
			}
		}()
		time.Sleep(5 * time.Second)
		e.kubectl("-n", clusterNS, "delete", "pod", pod, "--wait=false")
		// The new pod, Ready (not the old one still terminating).
		deadline := time.Now().Add(5 * time.Minute)
		for {
			uid := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", pod, "-o", "jsonpath={.metadata.deletionTimestamp}"))
			ready := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", pod, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`))
			if uid == "" && ready == "True" && failed.Load() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not back and Ready within 5 min (writes failed meanwhile: %d)", pod, failed.Load())
			}
			time.Sleep(time.Second)
		}
		time.Sleep(5 * time.Second) // writes to the returned member
		close(stop)
		<-done
		ip = podIP()
		other := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", clusterName+"-0", "-o", "jsonpath={.status.podIP}"))
		var lost []string
		for _, i := range acked {
			for _, via := range []string{ip, other} {
				out, err := e.exec("", cli, "get", "e2e-faults", fmt.Sprintf("k%06d", i), "--addr", via+":8087", "--timeout", "5")
				if err != nil || strings.TrimSpace(out) != fmt.Sprintf("v%d", i) {
					lost = append(lost, fmt.Sprintf("k%06d via %s (%q, %v)", i, via, strings.TrimSpace(out), err))
				}
			}
		}
		msg := fmt.Sprintf("%d writes attempted, %d acknowledged, %d failed while %s was away; %d reads of acknowledged writes (through it and through %s-0) missing after it returned",
			attempts, len(acked), failed.Load(), pod, len(lost), clusterName)
		_ = os.WriteFile(filepath.Join(out, "pod-delete.txt"), []byte(msg+"\n"+strings.Join(lost, "\n")+"\n"), 0o644)
		if len(acked) == 0 || len(lost) > 0 {
			t.Fatalf("%s: %v", msg, lost)
		}
		t.Log(msg)
	})
}

// throughput reads basho_bench summary rows (elapsed, window, total, successful, failed) and
// returns the successful operations per second over the whole run and over its second half.
// Unparsable rows are skipped: this only informs the log.
func throughput(rows []string) (whole, secondHalf float64) {
	type row struct{ end, window, ok float64 }
	var rs []row
	for _, l := range rows {
		f := strings.Split(l, ",")
		if len(f) < 4 {
			continue
		}
		var r row
		var err error
		for i, dst := range []*float64{&r.end, &r.window, nil, &r.ok} {
			if dst == nil {
				continue
			}
			if *dst, err = strconv.ParseFloat(strings.TrimSpace(f[i]), 64); err != nil {
				break
			}
		}
		if err == nil {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return 0, 0
	}
	end := rs[len(rs)-1].end
	var all, late, lateSecs float64
	for _, r := range rs {
		all += r.ok
		if r.end-r.window >= end/2-1e-9 {
			late += r.ok
			lateSecs += r.window
		}
	}
	whole = all / end
	if lateSecs > 0 {
		secondHalf = late / lateSecs
	}
	return whole, secondHalf
}
