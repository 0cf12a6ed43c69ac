// Package testprom is a test harness shared by the operator's real-Prometheus tests: fake levee
// members (exporters on 127.0.0.1 whose counters grow at rates a test sets) and a real
// Prometheus (Debian's /usr/bin/prometheus, or $PROMETHEUS) scraping them every second with the
// labels the operator's ServiceMonitor gives. Only tests import it.
package testprom

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
)

// Scrape is the scrape interval of the Prometheus StartPrometheus runs.
const Scrape = time.Second

// Load is what a member does: CPU cores, disk busy fraction, disk queue depth, latency of every
// request (seconds) and requests per second.
type Load struct{ CPU, Disk, Queue, Latency, RPS float64 }

// Member is one fake levee node: a collector whose counters grow at the rates of its load.
type Member struct {
	mu                                    sync.Mutex
	l                                     Load
	last                                  time.Time
	cpuTotal, diskTotal, queueTotal, reqs float64
	hideDisk                              bool
}

var (
	cpuDesc   = prometheus.NewDesc(autoscale.MetricCPU, "CPU time", nil, nil)
	diskDesc  = prometheus.NewDesc(autoscale.MetricDiskBusy, "disk busy time", nil, nil)
	queueDesc = prometheus.NewDesc(autoscale.MetricDiskWeighted, "weighted disk time", nil, nil)
	latDesc   = prometheus.NewDesc(autoscale.MetricLatency, "request latency", []string{"op"}, nil)
	buckets   = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
)

// Set changes what the member does from now on.
func (m *Member) Set(l Load) { m.mu.Lock(); m.advance(); m.l = l; m.mu.Unlock() }

// HideDisk stops (or resumes) exporting the disk series, as a member that lost them would.
func (m *Member) HideDisk(h bool) { m.mu.Lock(); m.hideDisk = h; m.mu.Unlock() }

func (m *Member) advance() {
	now := time.Now()
	if !m.last.IsZero() {
		dt := now.Sub(m.last).Seconds()
		m.cpuTotal += m.l.CPU * dt
		m.diskTotal += m.l.Disk * dt
		m.queueTotal += m.l.Queue * dt
		m.reqs += m.l.RPS * dt
	}
	m.last = now
}

// Describe sends nothing: an unchecked collector.
func (m *Member) Describe(chan<- *prometheus.Desc) {}

// Collect exports the counters as they are now.
func (m *Member) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advance()
	ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, m.cpuTotal)
	if !m.hideDisk {
		ch <- prometheus.MustNewConstMetric(diskDesc, prometheus.CounterValue, m.diskTotal)
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.CounterValue, m.queueTotal)
	}
	cum := map[float64]uint64{}
	for _, b := range buckets {
		if m.l.Latency <= b {
			cum[b] = uint64(m.reqs)
		}
	}
	ch <- prometheus.MustNewConstHistogram(latDesc, uint64(m.reqs), m.reqs*m.l.Latency, cum, "get")
}

// Cluster is a KVCluster's worth of members, each served on its own loopback port and scraped as
// namespace Namespace, service <Name>-headless, pod <Name>-<i>.
type Cluster struct {
	Namespace, Name string
	Profile         kvv1.StorageProfile
	Members         []*Member
	Addrs           []string
}

// NewCluster serves n members doing l until the test ends.
func NewCluster(t testing.TB, namespace, name string, profile kvv1.StorageProfile, n int, l Load) *Cluster {
	t.Helper()
	c := &Cluster{Namespace: namespace, Name: name, Profile: profile}
	for range n {
		m := &Member{l: l}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		c.Members = append(c.Members, m)
		c.Addrs = append(c.Addrs, ln.Addr().String())
	}
	return c
}

// Set changes what every member does from now on.
func (c *Cluster) Set(l Load) {
	for _, m := range c.Members {
		m.Set(l)
	}
}

// StartPrometheus writes a config scraping every member of every cluster every Scrape, starts
// the binary on a loopback port, waits until it is ready and returns its URL. It is killed when
// the test ends (its log is printed if the test failed).
func StartPrometheus(t testing.TB, clusters ...*Cluster) string {
	t.Helper()
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		bin = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no Prometheus binary at %s (`make -C operator test` installs Debian's prometheus): %v", bin, err)
	}
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: 900ms\nscrape_configs:\n- job_name: levee\n  static_configs:\n", Scrape)
	for _, c := range clusters {
		for i, a := range c.Addrs {
			fmt.Fprintf(&cfg, "  - targets: [%q]\n    labels: {namespace: %q, service: %q, pod: \"%s-%d\"}\n", a, c.Namespace, c.Name+"-headless", c.Name, i)
		}
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready after 20s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
