package autoscale

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// The node's metrics the autoscaler reads. Names come from docs/metrics.md, the contract with the
// node; a test fails when one is not listed there. Every PromQL expression the operator sends is
// built in this file.
const (
	MetricCPU          = "process_cpu_seconds_total"
	MetricDiskBusy     = "levee_disk_io_time_seconds_total"
	MetricDiskWeighted = "levee_disk_io_weighted_seconds_total"
	MetricLatency      = "levee_request_duration_seconds"
)

// DefaultWindow is the rate window of the queries: long enough to smooth over a missed scrape at
// the ServiceMonitor's 30 s interval.
const DefaultWindow = 5 * time.Minute

// Queries builds the PromQL for one cluster. The selector is the one the operator's
// ServiceMonitor produces: the Prometheus Operator labels each series with the namespace, the
// Service it was discovered through (the headless Service) and the pod.
type Queries struct {
	Namespace string
	Service   string
	// Window of rate() and histogram_quantile(); DefaultWindow when zero.
	Window time.Duration
}

func (q Queries) selector(extra ...string) string {
	parts := append([]string{fmt.Sprintf("namespace=%q", q.Namespace), fmt.Sprintf("service=%q", q.Service)}, extra...)
	return "{" + strings.Join(parts, ",") + "}"
}

func (q Queries) window() string {
	w := q.Window
	if w <= 0 {
		w = DefaultWindow
	}
	return model.Duration(w).String()
}

// PerPodRate is each member's per-second increase of counter (cores for the CPU counter,
// busy fraction for the disk time, queue depth for the weighted disk time).
func (q Queries) PerPodRate(counter string) string {
	return fmt.Sprintf("sum by (pod) (rate(%s%s[%s]))", counter, q.selector(), q.window())
}

// PerPodLastSample is the Unix time of each member's newest sample of metric. rate() keeps
// answering for a whole window after a member stops being scraped; this does not (the series
// goes stale at the first failed scrape), so it is what staleness is judged on.
func (q Queries) PerPodLastSample(metric string) string {
	return fmt.Sprintf("max by (pod) (timestamp(%s%s))", metric, q.selector())
}

// P99 is the cluster's 99th percentile request latency in seconds, all operations together
// (NaN when no request was served in the window).
func (q Queries) P99() string {
	return fmt.Sprintf("histogram_quantile(0.99, sum by (le) (rate(%s_bucket%s[%s])))", MetricLatency, q.selector(), q.window())
}

// LatencyLastSample is the Unix time of the newest latency sample of the cluster.
func (q Queries) LatencyLastSample() string {
	return fmt.Sprintf("max(timestamp(%s_count%s))", MetricLatency, q.selector())
}

// All returns every expression (for tests and docs).
func (q Queries) All() []string {
	var out []string
	for _, m := range []string{MetricCPU, MetricDiskBusy, MetricDiskWeighted} {
		out = append(out, q.PerPodRate(m), q.PerPodLastSample(m))
	}
	return append(out, q.P99(), q.LatencyLastSample())
}
