//go:build e2e

// The smoke scenario of issue 13 (make e2e-smoke, and inside make test): on the real single-node
// cluster of e2e/kube, the images imported into the node's containerd, `helm install` of
// charts/levee-operator, the NVMe sample KVCluster (3 members; requests scaled down to fit a
// 2-core node) until Available, a levee-bench Job against the client Service for E2E_LOAD_SECONDS
// (60) with its results in out/e2e/smoke, one compaction Job created from the operator's
// CronJob, and the replacement of member 2 (kv.levee.io/replace-member: a new volume, rebuilt from
// the other replicas, keys read back; replace_test.go). The full set of scenarios is TestFull
// (full_test.go, make e2e). On failure the cluster's state is dumped into out/e2e/smoke/diagnostics.
package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nvmeCluster is metadata.name of the NVMe sample.
const nvmeCluster = "orders"

func TestSmoke(t *testing.T) {
	e := newEnv(t)
	out := e.scenarioDir("smoke", operatorNS, clusterNS)

	e.step("import images into the node's containerd", e.importImages)
	e.step("helm install charts/levee-operator", func() { e.helmInstall() })
	e.step("apply the NVMe sample KVCluster", func() { e.applySample("kv_v1alpha1_kvcluster_nvme.yaml") })
	e.step("KVCluster Available", func() { e.waitAvailable(nvmeCluster, 10*time.Minute) })
	e.step(fmt.Sprintf("in-cluster levee-bench load for %d s against the client Service", e.loadSeconds), func() {
		e.runLoad(out, "load", mixScenario(nvmeCluster, e.loadSeconds), time.Duration(e.loadSeconds+600)*time.Second, "get", "update")
	})
	e.step("compaction Job from the operator's CronJob", func() {
		cj := e.cronJobs(nvmeCluster, "compaction")
		if len(cj) == 0 {
			t.Fatal("the operator made no compaction CronJob")
		}
		logs := e.maintenanceJob(out, nvmeCluster, cj[0], "smoke-compact", "compaction", 15*time.Minute)
		if strings.Count(logs, "partition(s) done") != 3 {
			t.Fatalf("want one compaction summary per member (3):\n%s", logs)
		}
	})
	e.step("replace member orders-2 (annotation): new PVC and pod, rebuilt from its replicas, keys read back", func() {
		e.replaceMember(nvmeCluster, nvmeCluster+"-2")
	})
}

// mixScenario is the smoke load: 8 KB values, pareto keys, 5 GET : 1 UPDATE, 8 workers, through
// the client Service, after 5,000 keys preloaded.
func mixScenario(cluster string, seconds int) string {
	return grpcScenario("e2e load: 8 KB values, pareto keys, 5 GET : 1 UPDATE, through the client Service.",
		cluster, seconds, `[["get", 5], ["update", 1]]`, "pareto_int", 20000, 8192, 5000)
}

// failures sums the total and failed columns of basho_bench summary rows (elapsed, window,
// total, successful, failed); unparsable rows are skipped.
func failures(rows []string) (total, failed float64) {
	for _, l := range rows {
		f := strings.Split(l, ",")
		if len(f) < 5 {
			continue
		}
		n, err1 := strconv.ParseFloat(strings.TrimSpace(f[2]), 64)
		x, err2 := strconv.ParseFloat(strings.TrimSpace(f[4]), 64)
		if err1 == nil && err2 == nil {
			total += n
			failed += x
		}
	}
	return total, failed
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
