//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// dashboardVar is a Grafana template variable of the dashboards (query variables only).
type dashboardVar struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query string `json:"query"`
	Regex string `json:"regex"`
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type dashboard struct {
	Title      string           `json:"title"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []dashboardVar `json:"list"`
	} `json:"templating"`
}

// labelValuesRE reads the variables' `label_values(selector, label)` queries.
var labelValuesRE = regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`)

// panelsHaveData evaluates every panel query of dashboards/grafana/*.json in the Prometheus of
// e2e/addons/prometheus, the way Grafana would: the namespace, cluster and member variables
// resolved through their own label_values queries (the cluster's regex applied) and required to
// offer this scenario's namespace, cluster and members; then each query with the variables set to
// them, $__rate_interval = 1m and $__range = since. A query with no series fails the step (an
// empty panel). Results in out/panels.txt.
func (e *env) panelsHaveData(out, cluster string, members int, since time.Duration) {
	t := e.t
	t.Helper()
	files, err := filepath.Glob(filepath.Join(e.root, "dashboards/grafana/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in dashboards/grafana (%v)", err)
	}
	wantMembers := make([]string, members)
	for i := range wantMembers {
		wantMembers[i] = fmt.Sprintf("%s-%d", cluster, i)
	}
	values := map[string]string{
		"namespace":       clusterNS,
		"cluster":         cluster,
		"member":          "(" + strings.Join(wantMembers, "|") + ")",
		"__rate_interval": "1m",
		"__range":         fmt.Sprintf("%ds", int(since.Seconds())),
	}
	subst := func(q string) string {
		for _, name := range []string{"__rate_interval", "__range", "namespace", "cluster", "member"} {
			q = strings.ReplaceAll(q, "${"+name+"}", values[name])
			q = strings.ReplaceAll(q, "$"+name, values[name])
		}
		return q
	}
	var report, empty []string
	panels := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// The variables first: each must offer what this scenario runs.
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			m := labelValuesRE.FindStringSubmatch(v.Query)
			if m == nil {
				t.Fatalf("%s: variable %s: query %q is not label_values(selector, label)", d.Title, v.Name, v.Query)
			}
			got := e.promLabelValues(m[2], subst(m[1]))
			if v.Regex != "" {
				re := regexp.MustCompile(strings.Trim(v.Regex, "/"))
				var kept []string
				for _, g := range got {
					if sm := re.FindStringSubmatch(g); sm != nil {
						kept = append(kept, sm[len(sm)-1])
					}
				}
				got = kept
			}
			want := []string{values[v.Name]}
			if v.Name == "member" {
				want = wantMembers
			}
			for _, w := range want {
				if !contains(got, w) {
					t.Fatalf("%s: variable %s offers %v, not %q", d.Title, v.Name, got, w)
				}
			}
		}
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				continue // rows and text panels
			}
			panels++
			series, nan := 0, 0
			for _, tg := range p.Targets {
				n, nans := e.promInstant(subst(tg.Expr))
				series += n
				nan += nans
			}
			line := fmt.Sprintf("%s / %s: %d series (%d NaN)", d.Title, p.Title, series, nan)
			report = append(report, line)
			if series == 0 {
				empty = append(empty, line)
			}
		}
	}
	sort.Strings(report)
	_ = os.WriteFile(filepath.Join(out, "panels.txt"), []byte(strings.Join(report, "\n")+"\n"), 0o644)
	if len(empty) > 0 {
		t.Fatalf("%d of %d panels show no data:\n  %s", len(empty), panels, strings.Join(empty, "\n  "))
	}
	t.Logf("all %d panels of %d dashboards return data (out/…/panels.txt)", panels, len(files))
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// promLabelValues is Prometheus' /api/v1/label/<label>/values for series matching selector.
func (e *env) promLabelValues(label, selector string) []string {
	body := e.promAPI("/api/v1/label/" + label + "/values?match[]=" + url.QueryEscape(selector))
	var r struct {
		Status string   `json:"status"`
		Data   []string `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		e.t.Fatalf("label values of %s for %s: %v\n%s", label, selector, err, body)
	}
	return r.Data
}

// promInstant evaluates q now: how many series it returned, and how many of them are NaN.
func (e *env) promInstant(q string) (series, nan int) {
	body := e.promAPI("/api/v1/query?query=" + url.QueryEscape(q))
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		e.t.Fatalf("query %s: %v\n%s", q, err, body)
	}
	for _, s := range r.Data.Result {
		if v, ok := s.Value[1].(string); ok {
			if f, err := strconv.ParseFloat(v, 64); err != nil || math.IsNaN(f) {
				nan++
			}
		}
	}
	return len(r.Data.Result), nan
}
