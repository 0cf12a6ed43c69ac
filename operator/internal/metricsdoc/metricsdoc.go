// Package metricsdoc reads the metric contract with the levee node: the metric table of
// docs/metrics.md. Tests use it to check that every query the operator renders names only
// documented metrics.
package metricsdoc

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

var row = regexp.MustCompile("^\\|\\s*`([a-z_:][a-z0-9_:]*)`\\s*\\|\\s*([a-z]+)\\s*\\|")

// OperatorHeading starts the section of docs/metrics.md that lists the operator's own metrics;
// the node's metrics are the table rows before it.
const OperatorHeading = "## Operator metrics"

// Names returns the node's metric names: the first column of the table rows in the file at path
// before OperatorHeading. A histogram also allows its _bucket, _sum and _count series. Fewer than
// 10 names is an error: the table was not found.
func Names(path string) (map[string]bool, error) {
	return names(path, false)
}

// OperatorNames returns the metric names of the table rows after OperatorHeading.
func OperatorNames(path string) (map[string]bool, error) {
	return names(path, true)
}

func names(path string, operator bool) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the metric list: %w", err)
	}
	defer f.Close()
	out := map[string]bool{}
	inOperator := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), OperatorHeading) {
			inOperator = true
		}
		if inOperator != operator {
			continue
		}
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
	if operator && len(out) == 0 {
		return nil, fmt.Errorf("no operator metrics under %q in %s", OperatorHeading, path)
	}
	if !operator && len(out) < 10 {
		return nil, fmt.Errorf("parsed only %d names from %s", len(out), path)
	}
	return out, nil
}
