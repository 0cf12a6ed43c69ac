// Command gen writes levee's Grafana dashboards to a folder (default: ./grafana, run from
// dashboards/). `make dashboards-gen` runs it; dashboards-test fails when the files are stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/levee-io/levee/dashboards/internal/grafana"
)

func main() {
	out := flag.String("out", "grafana", "folder to write the dashboard JSON files into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for name, d := range grafana.All() {
		b, err := grafana.Marshal(d)
		if err == nil {
			err = os.WriteFile(filepath.Join(*out, name), b, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gen: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}
