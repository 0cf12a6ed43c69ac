//go:build prometheus

// Package prometheus runs the autoscaler's reading and decision against a real Prometheus
// (Debian's /usr/bin/prometheus, or $PROMETHEUS) scraping exporters this test serves on
// 127.0.0.1, one per member, whose counters grow at rates the test sets. Windows are seconds
// instead of minutes and Prometheus scrapes every second. Run by `make -C operator
// prometheus-test` (part of `make -C operator test`); the `prometheus` build tag keeps it out of
// `go test ./...`.
package prometheus

import (
	"context"
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
)

const (
	namespace = "it"
	scrape    = time.Second
	rateOver  = 5 * time.Second
	upWindow  = 4 * time.Second
	downWin   = 6 * time.Second
	evalEvery = 500 * time.Millisecond
)

// load is what a member does: CPU cores, disk busy fraction, disk queue depth, latency of every
// request (seconds) and requests per second.
type load struct{ cpu, disk, queue, latency, rps float64 }

// member is one fake levee node: a collector whose counters grow at the rates of its load.
type member struct {
	mu                                    sync.Mutex
	l                                     load
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

func (m *member) set(l load)         { m.mu.Lock(); m.advance(); m.l = l; m.mu.Unlock() }
func (m *member) setHideDisk(h bool) { m.mu.Lock(); m.hideDisk = h; m.mu.Unlock() }

func (m *member) advance() {
	now := time.Now()
	if !m.last.IsZero() {
		dt := now.Sub(m.last).Seconds()
		m.cpuTotal += m.l.cpu * dt
		m.diskTotal += m.l.disk * dt
		m.queueTotal += m.l.queue * dt
		m.reqs += m.l.rps * dt
	}
	m.last = now
}

// Describe sends nothing: an unchecked collector.
func (m *member) Describe(chan<- *prometheus.Desc) {}

func (m *member) Collect(ch chan<- prometheus.Metric) {
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
		if m.l.latency <= b {
			cum[b] = uint64(m.reqs)
		}
	}
	ch <- prometheus.MustNewConstHistogram(latDesc, uint64(m.reqs), m.reqs*m.l.latency, cum, "get")
}

// cluster is a KVCluster's worth of members, each served on its own loopback port.
type cluster struct {
	name    string
	profile kvv1.StorageProfile
	members []*member
	addrs   []string
}

func newCluster(t *testing.T, name string, profile kvv1.StorageProfile, n int, l load) *cluster {
	t.Helper()
	c := &cluster{name: name, profile: profile}
	for range n {
		m := &member{l: l}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		c.members = append(c.members, m)
		c.addrs = append(c.addrs, ln.Addr().String())
	}
	return c
}

func (c *cluster) set(l load) {
	for _, m := range c.members {
		m.set(l)
	}
}

// kv is the KVCluster the autoscaler reads its settings from.
func (c *cluster) kv() *kvv1.KVCluster {
	k := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: namespace}}
	k.Spec.Replicas = int32(len(c.members))
	k.Spec.Storage.Profile = c.profile
	k.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	k.Spec.Autoscaling = &kvv1.AutoscalingSpec{
		Enabled: true, MinReplicas: 3, MaxReplicas: 6, PrometheusURL: "http://unused",
		ScaleUpStabilization:   &metav1.Duration{Duration: upWindow},
		ScaleDownStabilization: &metav1.Duration{Duration: downWin},
	}
	return k
}

// startPrometheus writes a config scraping every member of every cluster every second, starts
// the binary on a loopback port and waits until it is ready.
func startPrometheus(t *testing.T, clusters ...*cluster) string {
	t.Helper()
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		bin = "/usr/bin/prometheus"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no Prometheus binary at %s (run `make -C operator prometheus-test`, which installs Debian's prometheus): %v", bin, err)
	}
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: 900ms\nscrape_configs:\n- job_name: levee\n  static_configs:\n", scrape)
	for _, c := range clusters {
		for i, a := range c.addrs {
			fmt.Fprintf(&cfg, "  - targets: [%q]\n    labels: {namespace: %q, service: %q, pod: \"%s-%d\"}\n", a, namespace, c.name+"-headless", c.name, i)
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

// autoscaler plays the operator's loop for one cluster: read, decide, record.
type autoscaler struct {
	client  *autoscale.Client
	queries autoscale.Queries
	spec    autoscale.Spec
	hist    autoscale.History
}

func newAutoscaler(t *testing.T, url string, c *cluster) *autoscaler {
	t.Helper()
	client, err := autoscale.NewClient(url, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tuning := autoscale.DefaultTuning()
	tuning.MaxSignalAge = 5 * time.Second
	tuning.MaxObservationGap = 3 * time.Second
	q := autoscale.QueriesFor(c.kv())
	q.Window = rateOver
	return &autoscaler{client: client, queries: q, spec: autoscale.SpecFrom(c.kv(), tuning)}
}

func (a *autoscaler) eval(t *testing.T) autoscale.Verdict {
	t.Helper()
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sig, err := a.client.Read(ctx, a.queries, now)
	if err != nil {
		t.Fatalf("reading Prometheus: %v", err)
	}
	v := autoscale.Decide(sig, a.spec, a.hist, now)
	a.hist = a.hist.Record(v.Observation, a.spec.Keep())
	return v
}

// until evaluates every evalEvery until done says so or timeout passes; it returns every verdict.
func (a *autoscaler) until(t *testing.T, timeout time.Duration, done func(autoscale.Verdict) bool) []autoscale.Verdict {
	t.Helper()
	var out []autoscale.Verdict
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		v := a.eval(t)
		out = append(out, v)
		if done(v) {
			return out
		}
		time.Sleep(evalEvery)
	}
	return out
}

func dump(vs []autoscale.Verdict) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s %s → %d: %s\n", v.Observation.At.Format("15:04:05.000"), v.Bottleneck, v.DesiredReplicas, v.Reason)
	}
	return b.String()
}

// firstStep checks that exactly one step happened, at the end of vs, at least window after the
// first observation of the pressure, and returns it.
func firstStep(t *testing.T, vs []autoscale.Verdict, cur int32, p autoscale.Pressure, window time.Duration) autoscale.Verdict {
	t.Helper()
	var since time.Time
	for i, v := range vs {
		if v.Observation.Pressure == p && since.IsZero() {
			since = v.Observation.At
		}
		if v.DesiredReplicas != cur {
			if i != len(vs)-1 {
				t.Fatalf("more than one step:\n%s", dump(vs))
			}
			if since.IsZero() || v.Observation.At.Sub(since) < window {
				t.Fatalf("stepped %s after the first %s observation, before the %s window:\n%s", v.Observation.At.Sub(since), p, window, dump(vs))
			}
			return v
		}
	}
	t.Fatalf("no step:\n%s", dump(vs))
	return autoscale.Verdict{}
}

// afterStep plays the step in flight for a while: every verdict must hold the replicas.
func (a *autoscaler) afterStep(t *testing.T, v autoscale.Verdict) {
	t.Helper()
	a.hist.LastScaleTime = v.Observation.At
	a.hist.InFlight.Step = true
	for _, w := range a.until(t, 2*time.Second, func(autoscale.Verdict) bool { return false }) {
		if w.DesiredReplicas != a.spec.Replicas || !strings.Contains(w.Reason, "no scaling while the previous scale step") {
			t.Fatalf("while the step is in flight: %s → %d: %s", w.Bottleneck, w.DesiredReplicas, w.Reason)
		}
	}
}

func TestAutoscalerWithRealPrometheus(t *testing.T) {
	start := time.Now()
	var (
		cpuLoad   = load{cpu: 0.9, disk: 0.2, queue: 0.5, latency: 0.002, rps: 200}
		diskLoad  = load{cpu: 0.3, disk: 0.95, queue: 12, latency: 0.02, rps: 200}
		shallow   = load{cpu: 0.3, disk: 0.95, queue: 1, latency: 0.002, rps: 200}
		idle      = load{cpu: 0.05, disk: 0.05, queue: 0.1, latency: 0.001, rps: 5}
		steadyCPU = load{cpu: 0.5, disk: 0.2, queue: 0.5, latency: 0.002, rps: 200}
	)
	cpu := newCluster(t, "cpu", kvv1.StorageHDD, 3, steadyCPU)
	disk := newCluster(t, "disk", kvv1.StorageHDD, 3, steadyCPU)
	nvme := newCluster(t, "nvme", kvv1.StorageNVMe, 3, shallow)
	idleC := newCluster(t, "idle", kvv1.StorageHDD, 4, idle)
	gap := newCluster(t, "gap", kvv1.StorageHDD, 3, cpuLoad)
	url := startPrometheus(t, cpu, disk, nvme, idleC, gap)
	ready := func(v autoscale.Verdict) bool { return v.Bottleneck != autoscale.BottleneckUnknown }

	t.Run("cpu-bound series scale out one step after the window", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, cpu)
		if vs := a.until(t, 20*time.Second, ready); !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		cpu.set(cpuLoad)
		vs := a.until(t, 25*time.Second, func(v autoscale.Verdict) bool { return v.DesiredReplicas != 3 })
		v := firstStep(t, vs, 3, autoscale.PressureHigh, upWindow)
		if v.Bottleneck != autoscale.BottleneckCPU || v.DesiredReplicas != 4 || !strings.Contains(v.Reason, "scaling out to 4: cpu-bound") {
			t.Fatalf("step: %s → %d: %s", v.Bottleneck, v.DesiredReplicas, v.Reason)
		}
		if p := autoscale.Percent(v.CPU); p < 80 || p > 100 {
			t.Errorf("CPU %d%%, want ~90%%", p)
		}
		t.Logf("step: %s", v.Reason)
		a.afterStep(t, v)
	})

	t.Run("disk-bound series give verdict disk and name the saturated disks", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, disk)
		if vs := a.until(t, 20*time.Second, ready); !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		disk.set(diskLoad)
		vs := a.until(t, 25*time.Second, func(v autoscale.Verdict) bool { return v.DesiredReplicas != 3 })
		v := firstStep(t, vs, 3, autoscale.PressureHigh, upWindow)
		if v.Bottleneck != autoscale.BottleneckDisk || strings.Join(v.DiskSaturated, ",") != "disk-0,disk-1,disk-2" {
			t.Fatalf("step: %s saturated %v: %s", v.Bottleneck, v.DiskSaturated, v.Reason)
		}
		t.Logf("step: %s", v.Reason)
	})

	t.Run("NVMe busy with a shallow queue is not disk-bound", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, nvme)
		vs := a.until(t, 20*time.Second, ready)
		if !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		vs = a.until(t, 2*upWindow, func(autoscale.Verdict) bool { return false })
		for _, v := range vs {
			if v.Bottleneck != autoscale.BottleneckNone || v.DesiredReplicas != 3 {
				t.Fatalf("shallow queue:\n%s", dump(vs))
			}
		}
		nvme.set(load{cpu: 0.3, disk: 0.95, queue: 12, latency: 0.02, rps: 200})
		vs = a.until(t, 15*time.Second, func(v autoscale.Verdict) bool { return v.Bottleneck == autoscale.BottleneckDisk })
		if v := vs[len(vs)-1]; v.Bottleneck != autoscale.BottleneckDisk || !strings.Contains(v.Reason, "disk-bound for") {
			t.Fatalf("deep queue never disk-bound:\n%s", dump(vs))
		}
	})

	t.Run("both low for the down window scale in one step", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, idleC)
		vs := a.until(t, 35*time.Second, func(v autoscale.Verdict) bool { return v.DesiredReplicas != 4 })
		v := firstStep(t, vs, 4, autoscale.PressureLow, downWin)
		if v.Bottleneck != autoscale.BottleneckNone || v.DesiredReplicas != 3 || !strings.Contains(v.Reason, "scaling in to 3: low") {
			t.Fatalf("step: %s → %d: %s", v.Bottleneck, v.DesiredReplicas, v.Reason)
		}
		t.Logf("step: %s", v.Reason)
		a.afterStep(t, v)
	})

	t.Run("a missing series means no action and names the series", func(t *testing.T) {
		t.Parallel()
		a := newAutoscaler(t, url, gap)
		if vs := a.until(t, 20*time.Second, ready); !ready(vs[len(vs)-1]) {
			t.Fatalf("signals never complete:\n%s", dump(vs))
		}
		gap.members[2].setHideDisk(true)
		vs := a.until(t, 2*upWindow+3*time.Second, func(autoscale.Verdict) bool { return false })
		for _, v := range vs {
			if v.DesiredReplicas != 3 {
				t.Fatalf("scaled with a series missing:\n%s", dump(vs))
			}
		}
		last := vs[len(vs)-1]
		want := "no action: series levee_disk_io_time_seconds_total missing for gap-2"
		if last.Bottleneck != autoscale.BottleneckUnknown || !strings.Contains(last.Reason, want) {
			t.Fatalf("last verdict %s: %q, want %q\n%s", last.Bottleneck, last.Reason, want, dump(vs))
		}
	})
	t.Cleanup(func() { t.Logf("real-Prometheus scenarios took %s", time.Since(start).Round(100*time.Millisecond)) })
}
