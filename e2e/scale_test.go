//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ringStatus is the part of a KVCluster's status a ring change shows in.
type ringStatus struct {
	Spec struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
	Status struct {
		Phase          string   `json:"phase"`
		Members        []string `json:"members"`
		RingVersion    int      `json:"ringVersion"`
		LeavingMembers []string `json:"leavingMembers"`
		Transition     *struct {
			FromMembers       int   `json:"fromMembers"`
			ToMembers         int   `json:"toMembers"`
			PartitionsPending int   `json:"partitionsPending"`
			BytesMoved        int64 `json:"bytesMoved"`
			Members           []struct {
				Name  string `json:"name"`
				State string `json:"state"`
			} `json:"members"`
		} `json:"transition"`
	} `json:"status"`
}

func (e *env) ring(cluster string) ringStatus {
	var r ringStatus
	out := e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", "json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		e.t.Fatalf("kubectl get kvcluster %s -o json: %v", cluster, err)
	}
	return r
}

// settledAt waits until the cluster runs n members with no transition and no leaving member,
// logging the transition's progress as it goes; returns the last status.
func (e *env) settledAt(cluster string, n int, timeout time.Duration) ringStatus {
	t := e.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		r := e.ring(cluster)
		s := r.Status
		if s.Phase == "Running" && len(s.Members) == n && s.Transition == nil && len(s.LeavingMembers) == 0 {
			return r
		}
		if s.Transition != nil {
			var states []string
			for _, m := range s.Transition.Members {
				states = append(states, m.Name+" "+m.State)
			}
			if msg := fmt.Sprintf("transition %d -> %d: %d partitions to send, %d bytes moved; %s; leaving %v",
				s.Transition.FromMembers, s.Transition.ToMembers, s.Transition.PartitionsPending, s.Transition.BytesMoved,
				strings.Join(states, ", "), s.LeavingMembers); msg != last {
				t.Log(msg)
				last = msg
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled at %d members within %s: %s", n, timeout, e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", "yaml"))
		}
		time.Sleep(2 * time.Second)
	}
}

// checkedKeys writes n keys through the client Service (or reads them back and reports those
// missing or wrong).
func (e *env) checkedKeys(cluster string, n int, write bool) []string {
	cli := e.cli()
	svc := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "svc", cluster, "-o", "jsonpath={.spec.clusterIP}"))
	var bad []string
	for i := 0; i < n; i++ {
		k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
		if write {
			if out, err := e.exec("", cli, "put", "e2e-scale", k, v, "--addr", svc+":8087", "--timeout", "5"); err != nil {
				e.t.Fatalf("put %s: %v\n%s", k, err, out)
			}
			continue
		}
		out, err := e.exec("", cli, "get", "e2e-scale", k, "--addr", svc+":8087", "--timeout", "5")
		if err != nil || strings.TrimSpace(out) != v {
			bad = append(bad, fmt.Sprintf("%s (%q, %v)", k, strings.TrimSpace(out), err))
		}
	}
	return bad
}

// autoscaleOutAndIn: under an in-cluster load the CPU-bound cluster (100m CPU requests) is
// scaled to 4 members by the operator's autoscaler; the bigger list is published once the new
// pod is ready and the ring transition completes under the load, with the numbers in status and
// Events. Then a scale-in back to 3: the smaller list is published while member 3 keeps
// running until it reports empty, then its pod and volume go. Keys written before are all read
// back after both changes.
func (e *env) autoscaleOutAndIn(out, cluster string) {
	t := e.t
	const keys = 300
	e.checkedKeys(cluster, keys, true)
	e.kubectl("-n", clusterNS, "patch", "kvcluster", cluster, "--type", "merge", "-p",
		`{"spec":{"autoscaling":{"maxReplicas":4,"scaleUpStabilization":"60s"}}}`)
	wait := e.startLoad(out, "scale-load", mixScenario(cluster, 420), 20*time.Minute)
	start := time.Now()
	deadline := start.Add(10 * time.Minute)
	for e.ring(cluster).Spec.Replicas != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the autoscaler did not scale to 4 within 10 min: %s", e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", "jsonpath={.status.autoscaler}"))
		}
		time.Sleep(3 * time.Second)
	}
	t.Logf("autoscaler set replicas 4 after %.0f s: %s", time.Since(start).Seconds(),
		e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", "jsonpath={.status.autoscaler.reason}"))
	r := e.settledAt(cluster, 4, 15*time.Minute)
	t.Logf("ring settled at 4 members (list version %d) %.0f s after the load started", r.Status.RingVersion, time.Since(start).Seconds())
	load := wait("get", "update")
	events := e.kubectl("-n", clusterNS, "get", "events", "--field-selector", "involvedObject.kind=KVCluster,involvedObject.name="+cluster,
		"-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
	yaml := e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", "yaml")
	_ = os.WriteFile(filepath.Join(out, "scale-out-events.txt"), []byte(events), 0o644)
	_ = os.WriteFile(filepath.Join(out, "scale-out-kvcluster.yaml"), []byte(yaml), 0o644)
	for _, want := range []string{"Autoscaled: replicas 3 → 4", "RingTransitionStarted: published member list version", "RingTransitionCompleted: ring transition from 3 to 4 members completed"} {
		if !strings.Contains(events, want) {
			t.Fatalf("no Event %q among:\n%s", want, events)
		}
	}
	for _, l := range strings.Split(events, "\n") {
		if strings.HasPrefix(l, "RingTransitionCompleted") || strings.HasPrefix(l, "Autoscaled") {
			t.Log(l)
		}
	}
	msg := fmt.Sprintf("load during the scale-out: %.0f operations, %.0f failed; %.0f ops/s over the run, %.0f over its second half",
		load.total, load.failed, load.whole, load.secondHalf)
	t.Log(msg)
	_ = os.WriteFile(filepath.Join(out, "scale-out.txt"), []byte(msg+"\n"), 0o644)
	if load.total == 0 || load.failed > load.total/1000 {
		t.Fatalf("%s (more than 0.1%% failed)", msg)
	}
	for i := 0; i < 4; i++ {
		var m struct {
			Version        int `json:"version"`
			RoutingVersion int `json:"routing_version"`
			Members        []struct {
				Partitions int `json:"partitions"`
			} `json:"members"`
		}
		pod := fmt.Sprintf("%s-%d", cluster, i)
		js := e.kubectl("-n", clusterNS, "exec", pod, "--", "levee", "admin", "members", "--json")
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			t.Fatalf("%s: levee admin members --json: %v\n%s", pod, err, js)
		}
		if m.Version != r.Status.RingVersion || m.RoutingVersion != m.Version || len(m.Members) != 4 || m.Members[3].Partitions == 0 {
			t.Fatalf("%s after the scale-out: %s", pod, js)
		}
	}
	if bad := e.checkedKeys(cluster, keys, false); len(bad) > 0 {
		t.Fatalf("after the scale-out, %d of %d keys missing or wrong: %v", len(bad), keys, bad)
	}

	// Scale-in, by hand (the autoscaler off, so it does not scale out again under the next
	// steps' load); then autoscaling back on, held at 3.
	e.kubectl("-n", clusterNS, "patch", "kvcluster", cluster, "--type", "merge", "-p", `{"spec":{"autoscaling":{"enabled":false}}}`)
	e.kubectl("-n", clusterNS, "scale", "kvcluster/"+cluster, "--replicas=3")
	sawLeaving := false
	deadline = time.Now().Add(5 * time.Minute)
	for !sawLeaving {
		s := e.ring(cluster).Status
		pods := strings.TrimSpace(e.kubectl("-n", clusterNS, "get", "statefulset", cluster, "-o", "jsonpath={.spec.replicas}"))
		switch {
		case len(s.LeavingMembers) == 1 && len(s.Members) == 3:
			if pods != "4" {
				t.Fatalf("the StatefulSet has %s replicas while %v still leaves", pods, s.LeavingMembers)
			}
			sawLeaving = true
		case len(s.Members) == 3 && s.Transition == nil:
			t.Fatalf("the smaller list was published and settled without member 3 ever leaving: %+v", s)
		case time.Now().After(deadline):
			t.Fatalf("no leaving member within 5 min: %+v", s)
		}
		time.Sleep(time.Second)
	}
	r = e.settledAt(cluster, 3, 15*time.Minute)
	e.kubectl("-n", clusterNS, "wait", "pod/"+cluster+"-3", "--for=delete", "--timeout=3m")
	pvc, _ := e.exec("", "kubectl", "-n", clusterNS, "get", "pvc", "data-"+cluster+"-3", "-o", "name")
	for deadline := time.Now().Add(2 * time.Minute); strings.TrimSpace(pvc) != "" && time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		pvc, _ = e.exec("", "kubectl", "-n", clusterNS, "get", "pvc", "data-"+cluster+"-3", "-o", "name")
	}
	if strings.TrimSpace(pvc) != "" {
		t.Fatalf("the emptied member's volume %s was kept", pvc)
	}
	events = e.kubectl("-n", clusterNS, "get", "events", "--field-selector", "involvedObject.kind=KVCluster,involvedObject.name="+cluster,
		"-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
	_ = os.WriteFile(filepath.Join(out, "scale-in-events.txt"), []byte(events), 0o644)
	if !strings.Contains(events, "ring transition from 4 to 3 members completed") {
		t.Fatalf("no RingTransitionCompleted for 4 -> 3 among:\n%s", events)
	}
	if bad := e.checkedKeys(cluster, keys, false); len(bad) > 0 {
		t.Fatalf("after the scale-in, %d of %d keys missing or wrong: %v", len(bad), keys, bad)
	}
	t.Logf("scale-in settled at 3 members (list version %d); member 3's pod and volume removed; all %d keys read back", r.Status.RingVersion, keys)
	e.kubectl("-n", clusterNS, "patch", "kvcluster", cluster, "--type", "merge", "-p", `{"spec":{"autoscaling":{"enabled":true,"maxReplicas":3}}}`)
}
