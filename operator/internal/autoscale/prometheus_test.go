package autoscale

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fakeProm answers /api/v1/query from a table of query → {pod: value}; unknown queries get an
// empty vector.
func fakeProm(t *testing.T, answers map[string]map[string]float64, delay time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		if err := r.ParseForm(); err != nil {
			t.Error(err)
		}
		q := r.Form.Get("query")
		if q == "bad" || strings.Contains(q, "broken") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"parse error"}`)
			return
		}
		result := []map[string]any{}
		for pod, v := range answers[q] {
			metric := map[string]string{}
			if pod != "" {
				metric["pod"] = pod
			}
			result = append(result, map[string]any{"metric": metric, "value": []any{1700000000, fmt.Sprint(v)}})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestClientRead(t *testing.T) {
	q := Queries{Namespace: "shop", Service: "orders-headless"}
	at := 1700000000.5
	answers := map[string]map[string]float64{
		q.PerPodRate(MetricCPU):                {"orders-0": 0.8, "orders-1": 0.4, "orders-2": 0.1},
		q.PerPodLastSample(MetricCPU):          {"orders-0": at, "orders-1": at - 60}, // orders-2: rate only (series gone)
		q.PerPodRate(MetricDiskBusy):           {"orders-0": 0.9},
		q.PerPodLastSample(MetricDiskBusy):     {"orders-0": at, "orders-1": at}, // orders-1: single sample, no rate yet
		q.PerPodRate(MetricDiskWeighted):       {"orders-0": 3},
		q.PerPodLastSample(MetricDiskWeighted): {"orders-0": at},
		q.LatencyLastSample():                  {"": at},
		// no P99 answer: histogram_quantile over no requests
	}
	c, err := NewClient(fakeProm(t, answers, 0).URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := c.Read(context.Background(), q, time.Unix(1700000001, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Unix(1700000000, 5e8)
	m0 := sig.Members["orders-0"]
	if m0.CPU != (Sample{0.8, want}) || m0.DiskBusy != (Sample{0.9, want}) || m0.DiskQueue != (Sample{3, want}) {
		t.Errorf("orders-0: %+v", m0)
	}
	m1 := sig.Members["orders-1"]
	if m1.CPU != (Sample{0.4, want.Add(-time.Minute)}) || !m1.DiskBusy.Missing() {
		t.Errorf("orders-1: %+v", m1)
	}
	if _, ok := sig.Members["orders-2"]; ok {
		t.Errorf("orders-2 has no last sample, so no readings: %+v", sig.Members["orders-2"])
	}
	if !math.IsNaN(sig.P99.Value) || sig.P99.At != want {
		t.Errorf("p99 %+v, want NaN (no requests) at %v", sig.P99, want)
	}
	if sig.Unavailable != "" {
		t.Errorf("unavailable: %s", sig.Unavailable)
	}
}

func TestClientReadFails(t *testing.T) {
	q := Queries{Namespace: "shop", Service: "broken"}
	c, err := NewClient(fakeProm(t, nil, 0).URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := c.Read(context.Background(), q, time.Now())
	if err == nil || !strings.Contains(sig.Unavailable, "parse error") || !strings.Contains(sig.Unavailable, "process_cpu_seconds_total") {
		t.Fatalf("err %v, unavailable %q", err, sig.Unavailable)
	}
	v := Decide(sig, spec3(), History{}, time.Now())
	if v.Bottleneck != BottleneckUnknown || !strings.Contains(v.Reason, "cannot read Prometheus") {
		t.Errorf("verdict %+v", v)
	}
}

func TestClientTimeout(t *testing.T) {
	c, err := NewClient(fakeProm(t, nil, 600*time.Millisecond).URL, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sig, err := c.Read(context.Background(), Queries{Namespace: "a", Service: "b"}, time.Now())
	if err == nil || sig.Unavailable == "" {
		t.Fatal("no error from a Prometheus slower than the timeout")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("gave up after %s, want ~100ms", d)
	}
	if _, err := NewClient("://bad", 0); err == nil {
		t.Error("NewClient accepted a bad address")
	}
}
