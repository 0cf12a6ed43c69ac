package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// MemberProber reads what members report about the ring, by member address
// (<pod>.<headless>.<ns>.svc:<grpc port>). Tests inject their own.
type MemberProber interface {
	Probe(ctx context.Context, addrs []string) map[string]MemberReport
}

// MetricsProber reads each member's Prometheus endpoint (plain HTTP on MetricsPort, the port the
// ServiceMonitor scrapes), all members at once, each within Timeout.
type MetricsProber struct {
	Client  *http.Client
	Timeout time.Duration
	// Port overrides MetricsPort (tests).
	Port int32
}

// Probe reads every member; a member that cannot be read gets a report with Err.
func (p MetricsProber) Probe(ctx context.Context, addrs []string) map[string]MemberReport {
	out := make(map[string]MemberReport, len(addrs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := p.probe(ctx, a)
			mu.Lock()
			out[a] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (p MetricsProber) probe(ctx context.Context, addr string) MemberReport {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return MemberReport{Err: fmt.Errorf("member address %q: %w", addr, err)}
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	port := p.Port
	if port == 0 {
		port = MetricsPort
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return MemberReport{Err: err}
	}
	client := p.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return MemberReport{Err: fmt.Errorf("GET %s: %w", url, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return MemberReport{Err: fmt.Errorf("GET %s: %s", url, resp.Status)}
	}
	r, err := ParseMemberReport(resp.Body)
	if err != nil {
		return MemberReport{Err: fmt.Errorf("GET %s: %w", url, err)}
	}
	return r
}

// The node metrics a MemberReport is read from (docs/metrics.md).
const (
	metricListVersion      = "levee_member_list_version"
	metricRoutingVersion   = "levee_ring_routing_list_version"
	metricVnodes           = "levee_vnodes"
	metricPartitionsToSend = "levee_transition_partitions_to_send"
	metricTransitionBytes  = "levee_transition_bytes_sent"
	metricRebuildPending   = "levee_rebuild_partitions_pending"
)

// ReportMetrics are the node metrics a MemberReport needs; the metric-contract test checks
// that docs/metrics.md lists them.
var ReportMetrics = []string{metricListVersion, metricRoutingVersion, metricVnodes, metricPartitionsToSend, metricTransitionBytes, metricRebuildPending}

// ParseMemberReport reads a member's report from its Prometheus text exposition. Every metric
// of ReportMetrics must be there: a node too old to report its transition is not taken for one
// that finished it.
func ParseMemberReport(body io.Reader) (MemberReport, error) {
	var parser expfmt.TextParser
	fams, err := parser.TextToMetricFamilies(body)
	if err != nil {
		return MemberReport{}, fmt.Errorf("metrics do not parse: %w", err)
	}
	one := func(name string) (float64, error) {
		f, ok := fams[name]
		if !ok || len(f.Metric) != 1 {
			return 0, fmt.Errorf("the node does not export %s (a node version without ring transitions?)", name)
		}
		return value(f.Metric[0]), nil
	}
	var v [5]float64
	for i, name := range []string{metricListVersion, metricRoutingVersion, metricPartitionsToSend, metricTransitionBytes, metricRebuildPending} {
		if v[i], err = one(name); err != nil {
			return MemberReport{}, err
		}
	}
	r := MemberReport{ListVersion: int64(v[0]), RoutingVersion: int64(v[1]), PartitionsToSend: int32(v[2]), BytesSent: int64(v[3]), RebuildPending: int32(v[4])}
	f, ok := fams[metricVnodes]
	if !ok {
		return MemberReport{}, fmt.Errorf("the node does not export %s", metricVnodes)
	}
	seen := map[string]bool{}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() != "state" {
				continue
			}
			seen[l.GetValue()] = true
			switch l.GetValue() {
			case "active":
				r.VnodesActive = int32(value(m))
			case "handoff":
				r.VnodesHandoff = int32(value(m))
			}
		}
	}
	if !seen["active"] || !seen["handoff"] {
		return MemberReport{}, fmt.Errorf("%s lacks state=\"active\" or state=\"handoff\"", metricVnodes)
	}
	return r, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
