// Package metricsdoc reads the metric contract with the levee node: the metric table of
// docs/metrics.md. Tests use it to check that every query the operator renders names only
// documented metrics.
package metricsdoc

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
)

var row = regexp.MustCompile("^\\|\\s*`([a-z_:][a-z0-9_:]*)`\\s*\\|\\s*([a-z]+)\\s*\\|")

// Names returns the metric names in the first column of the table in the file at path. A
// histogram also allows its _bucket, _sum and _count series. Fewer than 10 names is an error: the
// table was not found.
func Names(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the metric list: %w", err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		out[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m[1]+s] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(out) < 10 {
		return nil, fmt.Errorf("parsed only %d names from %s", len(out), path)
	}
	return out, nil
}
