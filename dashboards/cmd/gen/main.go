// Command gen writes levee's Grafana dashboards to a folder (default: ./grafana, run from
// dashboards/). With -chart it also writes the copies the Helm chart ships (Helm cannot read files
// outside the chart): the dashboards into <chart>/grafana and alerts/levee.rules.yaml into
// <chart>/alerts. `make dashboards-gen` runs it with -chart ../charts/levee-operator/files;
// dashboards-test fails when grafana/ is stale, dashboards-test and chart-test when the chart's
// copies differ from grafana/ and alerts/.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/levee-io/levee/dashboards/internal/exprs"
	"github.com/levee-io/levee/dashboards/internal/grafana"
)

func main() {
	out := flag.String("out", "grafana", "folder to write the dashboard JSON files into")
	chart := flag.String("chart", "", "also write the dashboards and the rules into this folder of the Helm chart (its grafana/ and alerts/)")
	flag.Parse()
	dirs := []string{*out}
	if *chart != "" {
		dirs = append(dirs, filepath.Join(*chart, exprs.GrafanaDir))
	}
	for _, dir := range dirs {
		if err := writeDashboards(dir); err != nil {
			fail(err)
		}
	}
	if *chart != "" {
		if err := copyRules(*chart); err != nil {
			fail(err)
		}
	}
}

// writeDashboards writes every dashboard into dir and removes other *.json files there (a
// dashboard dropped from the generator must not linger in the chart).
func writeDashboards(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	all := grafana.All()
	for name, d := range all {
		b, err := grafana.Marshal(d)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if all[filepath.Base(f)] == nil {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyRules copies alerts/levee.rules.yaml (found from the working directory) byte for byte.
func copyRules(chart string) error {
	root, err := exprs.Root()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(root, exprs.RulesFile))
	if err != nil {
		return err
	}
	dst := filepath.Join(chart, exprs.RulesFile)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}
