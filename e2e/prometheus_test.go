//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// promServiceAccount is the ServiceAccount of the Prometheus e2e/addons/prometheus installs: the
// chart binds it to the operator's metrics-reader role so scrapes of the secure endpoint pass.
const promServiceAccount = "prometheus-levee"

// promAPI is a Prometheus HTTP API path reached through the API server's service proxy.
func (e *env) promAPI(path string) []byte {
	raw := "/api/v1/namespaces/" + monitoringNS + "/services/prometheus-operated:9090/proxy" + path
	return []byte(e.kubectl("get", "--raw", raw))
}

type promTarget struct {
	Labels     map[string]string `json:"labels"`
	ScrapePool string            `json:"scrapePool"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
}

// prometheusSees waits until Prometheus scrapes every member of the cluster (namespace and pod
// labels from the operator's ServiceMonitor) and the operator itself with health "up", has loaded
// every rule group of dashboards/alerts/levee.rules.yaml (the chart's PrometheusRule), and has a
// levee_requests_total series from each member. Saves targets.json and rules.json in out.
func (e *env) prometheusSees(out, cluster string, members int) {
	t := e.t
	t.Helper()
	rules, err := os.ReadFile(filepath.Join(e.root, "dashboards/alerts/levee.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wantGroups []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- name: (\S+)`).FindAllStringSubmatch(string(rules), -1) {
		wantGroups = append(wantGroups, m[1])
	}
	if len(wantGroups) == 0 {
		t.Fatal("no rule groups in dashboards/alerts/levee.rules.yaml")
	}
	var missing []string
	deadline := time.Now().Add(4 * time.Minute)
	for {
		missing = nil
		var tg struct {
			Data struct {
				ActiveTargets []promTarget `json:"activeTargets"`
			} `json:"data"`
		}
		body := e.promAPI("/api/v1/targets?state=active")
		_ = os.WriteFile(filepath.Join(out, "targets.json"), body, 0o644)
		if err := json.Unmarshal(body, &tg); err != nil {
			t.Fatalf("targets: %v\n%s", err, body)
		}
		up := map[string]string{}
		for _, x := range tg.Data.ActiveTargets {
			k := x.Labels["namespace"] + "/" + x.Labels["pod"]
			if x.Labels["namespace"] == operatorNS {
				k = operatorNS + "/operator"
			}
			if up[k] != "up" {
				up[k] = strings.TrimSpace(x.Health + " " + x.LastError) // "up", or why not
			}
		}
		for i := 0; i < members; i++ {
			k := fmt.Sprintf("%s/%s-%d", clusterNS, cluster, i)
			if up[k] != "up" {
				missing = append(missing, fmt.Sprintf("target %s: %q", k, up[k]))
			}
		}
		if up[operatorNS+"/operator"] != "up" {
			missing = append(missing, fmt.Sprintf("target %s/operator: %q", operatorNS, up[operatorNS+"/operator"]))
		}
		var rg struct {
			Data struct {
				Groups []struct {
					Name  string            `json:"name"`
					Rules []json.RawMessage `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		body = e.promAPI("/api/v1/rules")
		_ = os.WriteFile(filepath.Join(out, "rules.json"), body, 0o644)
		if err := json.Unmarshal(body, &rg); err != nil {
			t.Fatalf("rules: %v\n%s", err, body)
		}
		loaded := map[string]int{}
		for _, g := range rg.Data.Groups {
			loaded[g.Name] = len(g.Rules)
		}
		for _, g := range wantGroups {
			if loaded[g] == 0 {
				missing = append(missing, "rule group "+g)
			}
		}
		if len(missing) == 0 {
			var series struct {
				Data struct {
					Result []struct {
						Metric map[string]string `json:"metric"`
					} `json:"result"`
				} `json:"data"`
			}
			q := fmt.Sprintf(`count by (pod) (levee_requests_total{namespace=%q})`, clusterNS)
			body = e.promAPI("/api/v1/query?query=" + url.QueryEscape(q))
			if err := json.Unmarshal(body, &series); err != nil {
				t.Fatalf("query: %v\n%s", err, body)
			}
			var pods []string
			for _, r := range series.Data.Result {
				pods = append(pods, r.Metric["pod"])
			}
			sort.Strings(pods)
			if len(pods) == members {
				t.Logf("Prometheus: %d members and the operator up; rule groups %v loaded; levee_requests_total from %v", members, wantGroups, pods)
				return
			}
			missing = append(missing, fmt.Sprintf("levee_requests_total series only from %v", pods))
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 4 min Prometheus still lacks:\n  %s", strings.Join(missing, "\n  "))
		}
		time.Sleep(5 * time.Second)
	}
}

// autoscalerVerdict waits until the operator's autoscaler has judged the cluster from the
// signals this Prometheus holds (status.autoscaler.bottleneck other than unknown, condition
// AutoscalerReady True) and saves the KVCluster's status in out/autoscaler.json.
func (e *env) autoscalerVerdict(out, cluster string) {
	t := e.t
	t.Helper()
	type status struct {
		Status struct {
			Autoscaler struct {
				Bottleneck      string `json:"bottleneck"`
				CPU             int    `json:"cpu"`
				DiskBusy        int    `json:"diskBusy"`
				DesiredReplicas int    `json:"desiredReplicas"`
				Reason          string `json:"reason"`
			} `json:"autoscaler"`
			Conditions []struct {
				Type, Status, Reason, Message string
			} `json:"conditions"`
		} `json:"status"`
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		body := e.kubectl("-n", clusterNS, "get", "kvcluster", cluster, "-o", "json")
		var c status
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatalf("kvcluster %s: %v", cluster, err)
		}
		ready := ""
		for _, cond := range c.Status.Conditions {
			if cond.Type == "AutoscalerReady" {
				ready = cond.Status + "/" + cond.Reason + ": " + cond.Message
			}
		}
		a := c.Status.Autoscaler
		if a.Bottleneck != "" && a.Bottleneck != "unknown" && strings.HasPrefix(ready, "True/") {
			_ = os.WriteFile(filepath.Join(out, "autoscaler.json"), []byte(body), 0o644)
			if a.DesiredReplicas != 3 {
				t.Fatalf("autoscaling is held at 3 members, but the verdict wants %d: %s", a.DesiredReplicas, a.Reason)
			}
			t.Logf("autoscaler: bottleneck %s, CPU %d%% of request, disk busy %d%%, desired %d: %s", a.Bottleneck, a.CPU, a.DiskBusy, a.DesiredReplicas, a.Reason)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 4 min the autoscaler has no verdict: status.autoscaler %+v, AutoscalerReady %q", a, ready)
		}
		time.Sleep(5 * time.Second)
	}
}
