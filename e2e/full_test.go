//go:build e2e

// TestFull (make e2e): every scenario of issue 13 on the real single-node cluster of e2e/kube.
// cert-manager and the Prometheus Operator with one Prometheus are installed from source builds
// (e2e/addons), then the operator chart with its ServiceMonitor and PrometheusRule. The NVMe
// sample (3 members): Available; malformed KVClusters refused by the API server; every member
// runs the operator's member list; a levee-bench load Job (results in out/e2e/full/load);
// Prometheus scrapes every member and the operator and has loaded levee's rules; under load the
// autoscaler scales the CPU-bound cluster to 4 and the ring transition completes, then a
// scale-in back to 3 keeps the leaving member until it is empty; a store of
// several GiB per member, then the compaction and AAE rebuild Jobs on it; an image change under
// load rolls one member at a time; a member deleted under write load loses no acknowledged write.
// Then the HDD sample (6 members, TLS from a platform ClusterIssuer of cert-manager): Available,
// client traffic over mTLS (plaintext and certificate-less clients refused), and both maintenance
// Jobs over mTLS. On failure the state of every namespace involved is in out/e2e/full/diagnostics.
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	hddCluster   = "archive" // metadata.name of the HDD sample
	monitoringNS = "levee-monitoring"
	certNS       = "cert-manager"
)

func TestFull(t *testing.T) {
	e := newEnv(t)
	out := e.scenarioDir("full", operatorNS, clusterNS, monitoringNS, certNS)

	e.step("import images into the node's containerd", e.importImages)
	e.step("cert-manager (e2e/addons/cert-manager)", func() {
		e.run("bash", filepath.Join(e.root, "e2e/addons/cert-manager/install.sh"))
	})
	e.step("Prometheus Operator and a Prometheus (e2e/addons/prometheus)", func() {
		e.run("bash", filepath.Join(e.root, "e2e/addons/prometheus/install.sh"))
	})
	e.step("helm install charts/levee-operator with its ServiceMonitor and PrometheusRule", func() {
		e.helmInstall("serviceMonitor.enabled=true", "prometheusRule.enabled=true",
			"serviceMonitor.prometheusServiceAccount.name="+promServiceAccount,
			"serviceMonitor.prometheusServiceAccount.namespace="+monitoringNS)
	})

	// The NVMe sample, without TLS.
	cluster := nvmeCluster
	// 16 MiB journal segments: each of a member's 64 partitions has its own journal, so the
	// sample's 1 GiB segments would need 64 GiB per member before the first one closes and
	// compaction may touch it; the big-store step writes a few GiB.
	applied := time.Now()
	// Autoscaling on, held at 3 members until the scale step lets it go to 4, so the operator
	// reads this Prometheus and reports verdicts.
	e.step("apply the NVMe sample KVCluster (16 MiB journal segments, autoscaling held at 3)", func() {
		e.applySample("kv_v1alpha1_kvcluster_nvme.yaml", `{"spec":{"engine":{"journalSegmentBytes":16777216}}}`,
			fmt.Sprintf(`{"spec":{"autoscaling":{"enabled":true,"minReplicas":3,"maxReplicas":3,"prometheusURL":"http://prometheus-operated.%s.svc:9090"}}}`, monitoringNS))
	})
	e.step("KVCluster Available", func() { e.waitAvailable(cluster, 10*time.Minute) })
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
		out, err := e.exec("", "kubectl", "-n", clusterNS, "patch", "kvcluster", cluster, "--type", "merge", "-p", `{"spec":{"ringSize":128}}`)
		if err == nil || !strings.Contains(err.Error(), "ringSize is immutable") {
			t.Fatalf("ringSize change: want 'ringSize is immutable', got err=%v:\n%s", err, out)
		}
	})
	e.step("every member runs the operator's member list (members.json, version 1, 3 members)", func() {
		for i := 0; i < 3; i++ {
			pod := fmt.Sprintf("%s-%d", cluster, i)
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
		e.runLoad(out, "load", mixScenario(cluster, e.loadSeconds), time.Duration(e.loadSeconds+600)*time.Second, "get", "update")
	})
	e.step("Prometheus scrapes every member and the operator, and has loaded levee's rules", func() {
		e.prometheusSees(out, cluster, 3)
	})
	e.step("the operator's autoscaler reads Prometheus: a verdict in status.autoscaler, AutoscalerReady True", func() {
		e.autoscalerVerdict(out, cluster)
	})
	e.step("under load the autoscaler scales the CPU-bound cluster to 4; the ring transition completes; a scale-in back to 3 waits for the leaving member to empty", func() {
		e.autoscaleOutAndIn(out, cluster)
	})
	e.step(fmt.Sprintf("a store of at least %d GiB per member (64 KiB values written and overwritten)", e.bigStoreGiB), func() {
		e.fillStore(out, cluster, 3)
	})
	e.step("compaction Job on the big store: every member reclaims space", func() {
		before := map[int]float64{}
		for i := 0; i < 3; i++ {
			before[i] = e.memberStats(fmt.Sprintf("%s-%d", cluster, i))["journal_disk_bytes"]
		}
		logs := e.maintenanceJob(out, cluster, e.cronJobs(cluster, "compaction")[0], "big-compact", "compaction", 60*time.Minute)
		e.reclaimed(logs, 3)
		for i := 0; i < 3; i++ {
			after := e.memberStats(fmt.Sprintf("%s-%d", cluster, i))["journal_disk_bytes"]
			t.Logf("%s-%d: journal %.2f GiB before compaction, %.2f GiB after", cluster, i, before[i]/(1<<30), after/(1<<30))
			if after >= before[i] {
				t.Fatalf("%s-%d: the journal did not shrink (%.0f -> %.0f bytes)", cluster, i, before[i], after)
			}
		}
	})
	e.step("AAE rebuild Job on the big store", func() {
		logs := e.maintenanceJob(out, cluster, cluster+"-aae-rebuild", "big-aae", "aaeRebuild", 60*time.Minute)
		if n := strings.Count(logs, "rebuilt 64 of 64 AAE tree(s)"); n != 3 {
			t.Fatalf("want every member to rebuild all 64 trees (3 summaries), got %d:\n%s", n, logs)
		}
	})
	e.step("every panel of the Grafana dashboards returns data from Prometheus", func() {
		e.panelsHaveData(out, cluster, 3, time.Since(applied))
	})
	e.step("change the image tag under load: one member at a time, each Ready before the next", func() {
		// levee:dev and levee:<version> are the same image under two tags: a new tag rolls the
		// StatefulSet without changing what runs. Load through the client Service meanwhile.
		cli := e.cli()
		svc := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "svc", cluster, "-o", "jsonpath={.spec.clusterIP}"))
		var ok, failed atomic.Int64
		var firstErrs []string // the first few failures, for rollout.txt (one goroutine writes)
		stop := background(func(i int) {
			if _, err := e.exec("", cli, "put", "e2e-rollout", fmt.Sprintf("k%d", i%500), "v", "--addr", svc+":8087", "--timeout", "2"); err != nil {
				if failed.Add(1) <= 5 {
					firstErrs = append(firstErrs, time.Now().Format("15:04:05.000")+" "+strings.TrimSpace(err.Error()))
				}
			} else {
				ok.Add(1)
			}
		})
		e.kubectl("-n", clusterNS, "patch", "kvcluster", cluster, "--type", "merge", "-p",
			fmt.Sprintf(`{"spec":{"image":"levee:%s"}}`, e.version))
		// Poll the pods: never more than one member not Ready, and the order of the restarts.
		var order []string
		seen := map[string]bool{}
		maxDown := 0
		deadline := time.Now().Add(10 * time.Minute)
		for {
			out := e.kubectl("-n", clusterNS, "get", "pods", "-l", "app.kubernetes.io/instance="+cluster+",app.kubernetes.io/component=node",
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
		stop()
		msg := fmt.Sprintf("rolled %v; at most %d member(s) not Ready at once; %d writes ok, %d failed during the rollout",
			order, maxDown, ok.Load(), failed.Load())
		report := msg + "\n"
		for _, f := range firstErrs {
			report += "  failed: " + f + "\n"
		}
		_ = os.WriteFile(filepath.Join(out, "rollout.txt"), []byte(report), 0o644)
		if maxDown > 1 || len(order) != 3 {
			t.Fatal(msg)
		}
		e.kubectl("-n", clusterNS, "wait", "kvcluster/"+cluster, "--for=condition=Available", "--timeout=5m")
		t.Log(msg)
	})
	e.step("delete a member under write load: every acknowledged write reads back through it and through another member", func() {
		// Writes go straight to one member (its pod IP, from the host), which coordinates them
		// (n_val 3, w=2). The pod is deleted (SIGTERM, graceful) while the writer runs; the
		// StatefulSet brings it back on the same volume, maybe with another IP. Every
		// acknowledged write is then read through the returned member and through another one
		// (replication, and the returned member's catch-up by handoff or read repair).
		pod := cluster + "-1"
		cli := e.cli()
		podIP := func() string {
			return strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"))
		}
		ip := podIP()
		var acked []int
		var failed atomic.Int64 // read by this goroutine while the writer runs
		attempts := 0
		stop := background(func(i int) {
			attempts++
			if _, err := e.exec("", cli, "put", "e2e-faults", fmt.Sprintf("k%06d", i), fmt.Sprintf("v%d", i),
				"--addr", ip+":8087", "--timeout", "2"); err != nil {
				failed.Add(1)
				time.Sleep(200 * time.Millisecond)
				if cur, err := e.exec("", "kubectl", "-n", clusterNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}"); err == nil && strings.TrimSpace(cur) != "" {
					ip = strings.TrimSpace(cur)
				}
				return
			}
			acked = append(acked, i)
		})
		time.Sleep(5 * time.Second)
		e.kubectl("-n", clusterNS, "delete", "pod", pod, "--wait=false")
		// The new pod, Ready (not the old one still terminating). Between the old pod's removal
		// and the StatefulSet creating the new one there is no pod of that name: not back yet.
		deadline := time.Now().Add(5 * time.Minute)
		for {
			state, err := e.exec("", "kubectl", "-n", clusterNS, "get", "pod", pod, "-o",
				`jsonpath={.metadata.deletionTimestamp}/{.status.conditions[?(@.type=="Ready")].status}`)
			if err == nil && strings.TrimSpace(state) == "/True" && failed.Load() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not back and Ready within 5 min (writes failed meanwhile: %d)", pod, failed.Load())
			}
			time.Sleep(time.Second)
		}
		time.Sleep(5 * time.Second) // writes to the returned member
		stop()
		ip = podIP()
		other := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "pod", cluster+"-0", "-o", "jsonpath={.status.podIP}"))
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
			attempts, len(acked), failed.Load(), pod, len(lost), cluster)
		_ = os.WriteFile(filepath.Join(out, "pod-delete.txt"), []byte(msg+"\n"+strings.Join(lost, "\n")+"\n"), 0o644)
		if len(acked) == 0 || len(lost) > 0 {
			t.Fatalf("%s: %v", msg, lost)
		}
		t.Log(msg)
	})
	e.step("delete the NVMe cluster", func() {
		e.kubectl("-n", clusterNS, "delete", "kvcluster", cluster, "--wait=true", "--timeout=5m")
		e.kubectl("-n", clusterNS, "wait", "pod", "-l", "app.kubernetes.io/instance="+cluster, "--for=delete", "--timeout=5m")
	})

	// The HDD sample: 6 members, TLS from the platform's ClusterIssuer.
	e.step("a platform ClusterIssuer (platform-ca) and the node labelled for HDD", func() {
		e.platformIssuer()
		e.kubectl("label", "node", "levee-e2e", "levee.io/storage=hdd", "--overwrite")
		t.Cleanup(func() {
			_, _ = e.exec("", "kubectl", "label", "node", "levee-e2e", "levee.io/storage=nvme", "--overwrite")
		})
	})
	e.step("apply the HDD sample KVCluster (6 members, TLS by issuerRef)", func() { e.applySample("kv_v1alpha1_kvcluster_hdd.yaml") })
	e.step("HDD KVCluster Available", func() { e.waitAvailable(hddCluster, 15*time.Minute) })
	e.step("client traffic over mTLS; plaintext and certificate-less clients refused", func() {
		e.mtlsTraffic(out, hddCluster, 6)
	})
	e.step("compaction and AAE rebuild Jobs over mTLS", func() {
		logs := e.maintenanceJob(out, hddCluster, e.cronJobs(hddCluster, "compaction")[0], "tls-compact", "compaction", 15*time.Minute)
		if n := strings.Count(logs, "128 of 128 partition(s) done"); n != 6 {
			t.Fatalf("want all 128 partitions compacted on every member (6 summaries), got %d:\n%s", n, logs)
		}
		logs = e.maintenanceJob(out, hddCluster, hddCluster+"-aae-rebuild", "tls-aae", "aaeRebuild", 15*time.Minute)
		if n := strings.Count(logs, "rebuilt 128 of 128 AAE tree(s)"); n != 6 {
			t.Fatalf("want all 128 trees rebuilt on every member (6 summaries), got %d:\n%s", n, logs)
		}
	})
}
