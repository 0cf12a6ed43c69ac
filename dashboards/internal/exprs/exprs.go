// Package exprs collects every PromQL expression levee's dashboards and alert rules use, parses
// them with Prometheus' own parser and names the metrics they read. The tests of dashboards/ and
// the metric contract test share it.
package exprs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
)

// Expr is one expression and where it comes from (file, panel or rule).
type Expr struct {
	Where string
	Query string
	// Panel is true for a dashboard panel's query (which must carry the template matchers).
	Panel bool
}

// Root is the dashboards/ folder, found from the working directory of a test or a tool run
// anywhere below it.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "alerts", "levee.rules.yaml")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no dashboards/ folder (with alerts/levee.rules.yaml) above %s", dir)
		}
	}
}

// RulesFile and GrafanaDir are the single sources, relative to Root().
const (
	RulesFile  = "alerts/levee.rules.yaml"
	GrafanaDir = "grafana"
)

type dashboardJSON struct {
	Title  string      `json:"title"`
	Panels []panelJSON `json:"panels"`
	Templ  struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panelJSON struct {
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []panelJSON `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// Dashboards returns the queries of every panel of every dashboard in dir, and the series
// selectors of the dashboards' label_values() variables.
func Dashboards(dir string) ([]Expr, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no dashboards in %s", dir)
	}
	var out []Expr
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var d dashboardJSON
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		var walk func(ps []panelJSON)
		walk = func(ps []panelJSON) {
			for _, p := range ps {
				for _, t := range p.Targets {
					out = append(out, Expr{Where: fmt.Sprintf("%s: panel %q query %s", filepath.Base(f), p.Title, t.RefID), Query: t.Expr, Panel: true})
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
		for _, v := range d.Templ.List {
			if v.Type != "query" {
				continue
			}
			q, _ := v.Query.(string)
			if m, ok := v.Query.(map[string]any); ok {
				q, _ = m["query"].(string)
			}
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				return nil, fmt.Errorf("%s: variable %s: query %q is not label_values(selector, label)", filepath.Base(f), v.Name, q)
			}
			out = append(out, Expr{Where: fmt.Sprintf("%s: variable %s", filepath.Base(f), v.Name), Query: m[1]})
		}
	}
	return out, nil
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string `yaml:"alert"`
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// Rules returns every rule expression of a Prometheus rules file and the names it records.
func Rules(path string) (exprs []Expr, recorded []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if r.Record != "" {
				name = r.Record
				recorded = append(recorded, r.Record)
			}
			exprs = append(exprs, Expr{Where: fmt.Sprintf("%s: rule %s", filepath.Base(path), name), Query: r.Expr})
		}
	}
	if len(exprs) == 0 {
		return nil, nil, fmt.Errorf("%s: no rules", path)
	}
	return exprs, recorded, nil
}

// All returns the expressions of the dashboards and the rules under root, and the recorded names.
func All(root string) ([]Expr, []string, error) {
	d, err := Dashboards(filepath.Join(root, GrafanaDir))
	if err != nil {
		return nil, nil, err
	}
	r, rec, err := Rules(filepath.Join(root, RulesFile))
	if err != nil {
		return nil, nil, err
	}
	return append(d, r...), rec, nil
}

// Grafana's interval variables, replaced by sample durations before parsing.
var intervals = map[string]string{
	"__rate_interval": "5m", "__interval": "1m", "__range": "6h",
}

var variable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[A-Za-z]+)?\}|\$([A-Za-z0-9_]+)`)

// Substitute replaces Grafana's interval variables by durations and, when all is true, every other
// variable by `.+` (what a multi-value "All" variable expands to in a regex matcher).
func Substitute(q string, all bool) string {
	return variable.ReplaceAllStringFunc(q, func(v string) string {
		m := variable.FindStringSubmatch(v)
		name := m[1] + m[2]
		if d, ok := intervals[name]; ok {
			return d
		}
		if all {
			return ".+"
		}
		return v
	})
}

// Parse parses a dashboard or rule expression the way Prometheus would after Grafana expanded it.
func Parse(q string) (parser.Expr, error) {
	return parser.ParseExpr(Substitute(q, true))
}

// Selectors returns the vector selectors of an expression.
func Selectors(e parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// MetricNames returns the sorted metric names an expression reads.
func MetricNames(e parser.Expr) []string {
	seen := map[string]bool{}
	for _, vs := range Selectors(e) {
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			name = "{" + vs.String() + "}" // a selector without a metric name: callers reject it
		}
		seen[name] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Family maps a series name to its metric family: a histogram's _bucket, _sum and _count series
// belong to the histogram. It returns the name itself when no such family is known.
func Family(name string, known func(string) bool) string {
	if known(name) {
		return name
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok && known(base) {
			return base
		}
	}
	return name
}

var docRow = regexp.MustCompile("^\\|\\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\\s*\\|")

// OperatorHeading starts the section of docs/metrics.md listing the operator's own metrics
// (levee_operator_*); the node's metrics are the table rows before it.
const OperatorHeading = "## Operator metrics"

// OperatorPrefix names the operator's metrics: a dashboard or rule that reads one is checked
// against the operator's section (the operator's TestOperatorMetricsAreDocumented checks that
// section against what the operator registers).
const OperatorPrefix = "levee_operator_"

// Documented returns the node's metric names: the first column of the table rows of
// docs/metrics.md before OperatorHeading.
func Documented(metricsMD string) (map[string]bool, error) {
	node, _, err := documented(metricsMD)
	return node, err
}

// DocumentedOperator returns the names of the table rows after OperatorHeading.
func DocumentedOperator(metricsMD string) (map[string]bool, error) {
	_, op, err := documented(metricsMD)
	return op, err
}

func documented(metricsMD string) (node, operator map[string]bool, err error) {
	b, err := os.ReadFile(metricsMD)
	if err != nil {
		return nil, nil, err
	}
	node, operator = map[string]bool{}, map[string]bool{}
	in := node
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, OperatorHeading) {
			in = operator
		}
		if m := docRow.FindStringSubmatch(l); m != nil {
			in[m[1]] = true
		}
	}
	if len(node) < 10 {
		return nil, nil, fmt.Errorf("%s: only %d metric rows found; has the table's format changed?", metricsMD, len(node))
	}
	if len(operator) == 0 {
		return nil, nil, fmt.Errorf("%s: no operator metric rows under %q", metricsMD, OperatorHeading)
	}
	return node, operator, nil
}

// Synthetic are series Prometheus makes itself for every target: no exporter exports them.
var Synthetic = map[string]bool{"up": true}
