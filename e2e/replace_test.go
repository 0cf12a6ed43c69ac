//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// replaceMember: keys written through the client Service, then `kubectl annotate kvcluster
// <cluster> kv.levee.io/replace-member=<pod>`. The operator deletes the member's PVC and pod; the
// StatefulSet creates both again (a new claim, so a new, empty volume); the member rebuilds its
// partitions from the other replicas (levee_rebuild_partitions_pending back to 0, objects pulled)
// and every key reads back. The annotation is gone and an Event says what was deleted.
func (e *env) replaceMember(cluster, pod string) {
	t := e.t
	const keys = 200
	e.checkedKeys(cluster, keys, true)
	claim := "data-" + pod
	uid := func() string {
		out, err := e.exec("", "kubectl", "-n", clusterNS, "get", "pvc", claim, "-o", "jsonpath={.metadata.uid} {.status.phase}")
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	before := uid()
	if !strings.HasSuffix(before, " Bound") {
		t.Fatalf("PVC %s before the replacement: %q", claim, before)
	}
	e.kubectl("-n", clusterNS, "annotate", "kvcluster", cluster, "kv.levee.io/replace-member="+pod)

	deadline := time.Now().Add(5 * time.Minute)
	for {
		now := uid()
		if now != "" && now != before && strings.HasSuffix(now, " Bound") {
			t.Logf("PVC %s: %s -> %s", claim, before, now)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PVC %s not recreated and bound within 5 min (now %q):\n%s", claim, now,
				e.kubectl("-n", clusterNS, "get", "events", "--sort-by=.lastTimestamp"))
		}
		time.Sleep(2 * time.Second)
	}
	e.kubectl("-n", clusterNS, "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=300s")
	ev := e.kubectl("-n", clusterNS, "get", "events", "--field-selector", "reason=MemberReplacing", "-o", "jsonpath={.items[*].message}")
	if !strings.Contains(ev, "deleted PVC "+claim) || !strings.Contains(ev, "pod "+pod) {
		t.Fatalf("no MemberReplacing Event naming %s and %s: %q", claim, pod, ev)
	}
	if a := e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", `jsonpath={.metadata.annotations.kv\.levee\.io/replace-member}`); a != "" {
		t.Fatalf("annotation still set: %q", a)
	}

	// The member rebuilds from its replicas: pending back to 0, objects pulled.
	deadline = time.Now().Add(5 * time.Minute)
	for {
		m := e.podMetrics(pod)
		pending, pulled := m["levee_rebuild_partitions_pending"], m["levee_rebuild_objects_total"]
		if pending == 0 && pulled >= keys {
			t.Logf("%s rebuilt: %.0f objects, %.1f MB pulled from its replicas", pod, pulled, m["levee_rebuild_bytes_total"]/1e6)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not rebuilt within 5 min: %.0f partitions pending, %.0f objects pulled", pod, pending, pulled)
		}
		time.Sleep(2 * time.Second)
	}
	e.waitAvailable(cluster, 5*time.Minute)
	if bad := e.checkedKeys(cluster, keys, false); len(bad) > 0 {
		t.Fatalf("%d of %d keys missing or wrong after the replacement: %v", len(bad), keys, bad)
	}
}

// podMetrics reads a member's /metrics through the API server's pod proxy: samples without
// labels, by name (a metric that is not there reads 0).
func (e *env) podMetrics(pod string) map[string]float64 {
	out := e.kubectl("get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:8098/proxy/metrics", clusterNS, pod))
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m
}
