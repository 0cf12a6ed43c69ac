package dashboards_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/levee-io/levee/dashboards/internal/exprs"
	"github.com/levee-io/levee/dashboards/internal/grafana"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := exprs.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDashboardFilesAreGenerated: the JSON in grafana/ is exactly what the generator produces, and
// nothing else is there.
func TestDashboardFilesAreGenerated(t *testing.T) {
	dir := filepath.Join(root(t), exprs.GrafanaDir)
	want := grafana.All()
	for name, d := range want {
		b, err := grafana.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v (run `make dashboards-gen`)", name, err)
			continue
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s differs from the generator's output: edit internal/grafana and run `make dashboards-gen`", name)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, f := range files {
		if want[filepath.Base(f)] == nil {
			t.Errorf("%s is not produced by the generator", f)
		}
	}
}

// TestChartCopiesAreCurrent: the Helm chart ships copies of the dashboards and the rules (Helm
// reads no file outside the chart); they are these files byte for byte. chart-test checks the same
// and what the chart renders from them.
func TestChartCopiesAreCurrent(t *testing.T) {
	r := root(t)
	chart := filepath.Join(r, "..", "charts", "levee-operator", "files")
	src, _ := filepath.Glob(filepath.Join(r, exprs.GrafanaDir, "*.json"))
	copies, _ := filepath.Glob(filepath.Join(chart, exprs.GrafanaDir, "*.json"))
	if len(copies) != len(src) {
		t.Errorf("charts/levee-operator/files/%s has %d dashboards, %s %d: run `make dashboards-gen`", exprs.GrafanaDir, len(copies), exprs.GrafanaDir, len(src))
	}
	for _, rel := range append([]string{exprs.RulesFile}, relPaths(t, r, src)...) {
		want, err := os.ReadFile(filepath.Join(r, rel))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chart, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/levee-operator/files/%s differs from dashboards/%s (err %v): run `make dashboards-gen`", rel, rel, err)
		}
	}
}

func relPaths(t *testing.T, base string, paths []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		rel, err := filepath.Rel(base, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rel)
	}
	return out
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  json.RawMessage `json:"datasource"`
	GridPos     struct{ H, W, X, Y int }
	FieldConfig *struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Editable      bool    `json:"editable"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource json.RawMessage `json:"datasource"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

const templDS = `{"type":"prometheus","uid":"${datasource}"}`

// TestDashboardModel checks what Grafana and the linter do not: the three template variables, one
// templated Prometheus data source everywhere, units and descriptions, and a grid without overlaps.
func TestDashboardModel(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root(t), exprs.GrafanaDir, "*.json"))
	if len(files) < 3 {
		t.Fatalf("want the Overview, Node resources and Maintenance dashboards, found %v", files)
	}
	uids := map[string]string{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := filepath.Base(f)
		if d.SchemaVersion != grafana.SchemaVersion {
			t.Errorf("%s: schemaVersion %d, want %d", name, d.SchemaVersion, grafana.SchemaVersion)
		}
		if prev, dup := uids[d.UID]; dup || d.UID == "" {
			t.Errorf("%s: uid %q empty or also used by %s", name, d.UID, prev)
		}
		uids[d.UID] = name
		vars := map[string]bool{}
		for _, v := range d.Templating.List {
			vars[v.Name] = true
			switch v.Name {
			case "datasource":
				if v.Type != "datasource" || string(v.Query) != `"prometheus"` {
					t.Errorf("%s: variable datasource is %s %s, want a Prometheus data source variable", name, v.Type, v.Query)
				}
			default:
				if v.Type != "query" || compact(v.Datasource) != templDS || !v.Multi || !v.IncludeAll {
					t.Errorf("%s: variable %s must be a multi-value query variable with All on the templated data source", name, v.Name)
				}
			}
		}
		for _, v := range []string{"datasource", "namespace", "cluster", "member"} {
			if !vars[v] {
				t.Errorf("%s: no %s variable", name, v)
			}
		}
		ids := map[int]bool{}
		var cells [][24]bool
		for _, p := range d.Panels {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d used twice", name, p.ID)
			}
			ids[p.ID] = true
			g := p.GridPos
			if g.X < 0 || g.W <= 0 || g.X+g.W > 24 || g.H <= 0 {
				t.Errorf("%s: panel %q is off the 24-column grid: %+v", name, p.Title, g)
				continue
			}
			for y := g.Y; y < g.Y+g.H; y++ {
				for len(cells) <= y {
					cells = append(cells, [24]bool{})
				}
				for x := g.X; x < g.X+g.W; x++ {
					if cells[y][x] {
						t.Errorf("%s: panel %q overlaps another at (%d,%d)", name, p.Title, x, y)
					}
					cells[y][x] = true
				}
			}
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || p.Description == "" {
				t.Errorf("%s: panel %d needs a title and a description", name, p.ID)
			}
			if compact(p.Datasource) != templDS {
				t.Errorf("%s: panel %q uses data source %s, want %s", name, p.Title, p.Datasource, templDS)
			}
			if p.FieldConfig == nil || p.FieldConfig.Defaults.Unit == "" {
				t.Errorf("%s: panel %q has no unit", name, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", name, p.Title)
			}
			for _, q := range p.Targets {
				if compact(q.Datasource) != templDS || strings.TrimSpace(q.Expr) == "" {
					t.Errorf("%s: panel %q: a query is empty or not on the templated data source", name, p.Title)
				}
			}
		}
	}
}

func compact(b json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return string(b)
	}
	return buf.String()
}

// TestExpressionsParse: every panel query, every variable's selector and every rule expression is
// valid PromQL for Prometheus' own parser, once Grafana's variables are expanded.
func TestExpressionsParse(t *testing.T) {
	all, _, err := exprs.All(root(t))
	if err != nil {
		t.Fatal(err)
	}
	panels := 0
	for _, e := range all {
		if _, err := exprs.Parse(e.Query); err != nil {
			t.Errorf("%s does not parse: %v\n  %s", e.Where, err, e.Query)
		}
		if e.Panel {
			panels++
		}
	}
	if panels < 30 {
		t.Errorf("only %d panel queries found: the check is nearly vacuous", panels)
	}
}

// TestPanelQueriesAreScoped: every series selector in every panel carries the namespace, cluster
// and member matchers, so the template variables really choose what a panel shows.
func TestPanelQueriesAreScoped(t *testing.T) {
	all, _, err := exprs.All(root(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"namespace": "$namespace", "service": "${cluster}-headless", "pod": "$member"}
	wantOp := map[string]string{"kvcluster_namespace": "$namespace", "kvcluster": "$cluster"}
	for _, e := range all {
		if !e.Panel {
			continue
		}
		// Parse with only the interval variables expanded, to see the matchers as written.
		raw, err := parser.ParseExpr(exprs.Substitute(e.Query, false))
		if err != nil {
			t.Errorf("%s: %v", e.Where, err)
			continue
		}
		for _, vs := range exprs.Selectors(raw) {
			want := want
			if strings.HasPrefix(vs.Name, exprs.OperatorPrefix) {
				want = wantOp // the operator's series name the cluster by its own labels
			}
			for l, v := range want {
				ok := false
				for _, m := range vs.LabelMatchers {
					if m.Name == l && m.Type == labels.MatchRegexp && m.Value == v {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%s: selector %s lacks %s=~%q", e.Where, vs, l, v)
				}
			}
		}
	}
}

// TestUsesOnlyDocumentedMetrics: docs/metrics.md says dashboards and alerts may only use the names
// it lists. (TestMetricContract in contract/ checks them against a running node as well.)
func TestUsesOnlyDocumentedMetrics(t *testing.T) {
	r := root(t)
	doc, err := exprs.Documented(filepath.Join(r, "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	opDoc, err := exprs.DocumentedOperator(filepath.Join(r, "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for n := range opDoc {
		doc[n] = true
	}
	all, recorded, err := exprs.All(r)
	if err != nil {
		t.Fatal(err)
	}
	rec := map[string]bool{}
	for _, n := range recorded {
		rec[n] = true
	}
	known := func(n string) bool { return doc[n] || rec[n] || exprs.Synthetic[n] }
	used := map[string]bool{}
	for _, e := range all {
		ast, err := exprs.Parse(e.Query)
		if err != nil {
			continue
		}
		for _, n := range exprs.MetricNames(ast) {
			if f := exprs.Family(n, known); !known(f) {
				t.Errorf("%s uses %s, which docs/metrics.md does not list", e.Where, n)
			} else {
				used[f] = true
			}
		}
	}
	if len(used) < 15 {
		t.Errorf("only %d distinct metrics used: %v", len(used), keys(used))
	}
}

// TestMetricNames: the name extraction the contract relies on sees through functions, binary
// operators, histograms and Grafana variables, and reports names it does not know.
func TestMetricNames(t *testing.T) {
	cases := []struct{ q, want string }{
		{`sum by (op) (rate(levee_requests_total{namespace=~"$namespace", result="error"}[$__rate_interval]))`, "levee_requests_total"},
		{`histogram_quantile(0.99, sum by (le) (rate(levee_request_duration_seconds_bucket[5m]))) > 0.25`, "levee_request_duration_seconds_bucket"},
		{`up == 0 and on (namespace) present_over_time(levee_vnodes[1d])`, "levee_vnodes,up"},
		{`(rate(a_total[5m]) + rate(b_total[5m])) / rate(c_total[5m])`, "a_total,b_total,c_total"},
		{`{__name__="levee_vnodes", state="active"}`, "levee_vnodes"},
		{`absent(levee_vnode)`, "levee_vnode"},
	}
	for _, c := range cases {
		ast, err := exprs.Parse(c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		if got := strings.Join(exprs.MetricNames(ast), ","); got != c.want {
			t.Errorf("%s: names %s, want %s", c.q, got, c.want)
		}
	}
	known := func(n string) bool { return n == "levee_request_duration_seconds" }
	if f := exprs.Family("levee_request_duration_seconds_bucket", known); f != "levee_request_duration_seconds" {
		t.Errorf("family of the _bucket series: %s", f)
	}
	if f := exprs.Family("levee_request_latency_bucket", known); known(f) {
		t.Errorf("an unknown histogram was taken for a known one")
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
