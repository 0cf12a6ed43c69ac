package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// DefaultQueryTimeout bounds each query (client side and, passed as `timeout`, server side).
const DefaultQueryTimeout = 10 * time.Second

// Client reads Signals from Prometheus through its HTTP API.
type Client struct {
	api     promv1.API
	timeout time.Duration
}

// NewClient returns a client of the Prometheus at address (http(s)://host:port[/prefix]); each
// query is given timeout (DefaultQueryTimeout when zero).
func NewClient(address string, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultQueryTimeout
	}
	rt := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
	}
	c, err := api.NewClient(api.Config{Address: address, Client: &http.Client{Transport: rt, Timeout: timeout}})
	if err != nil {
		return nil, fmt.Errorf("cannot create Prometheus client for %q: %w", address, err)
	}
	return &Client{api: promv1.NewAPI(c), timeout: timeout}, nil
}

// Read evaluates every query of q at now and turns the results into Signals. A failed query
// leaves Signals.Unavailable set (Decide then takes no action and says why) and is returned as
// the error too; series that are simply absent are left missing for Decide to name.
func (c *Client) Read(ctx context.Context, q Queries, now time.Time) (Signals, error) {
	sig := Signals{Members: map[string]MemberSignals{}}
	fail := func(err error) (Signals, error) {
		sig.Unavailable = err.Error()
		return sig, err
	}
	type field func(*MemberSignals) *Sample
	for _, f := range []struct {
		metric string
		field  field
	}{
		{MetricCPU, func(m *MemberSignals) *Sample { return &m.CPU }},
		{MetricDiskBusy, func(m *MemberSignals) *Sample { return &m.DiskBusy }},
		{MetricDiskWeighted, func(m *MemberSignals) *Sample { return &m.DiskQueue }},
	} {
		rates, err := c.vector(ctx, q.PerPodRate(f.metric), now)
		if err != nil {
			return fail(err)
		}
		last, err := c.vector(ctx, q.PerPodLastSample(f.metric), now)
		if err != nil {
			return fail(err)
		}
		// A member counts only with both a rate and a last-sample time: the rate alone outlives
		// the series by a window, the time alone (a single sample) gives no rate.
		for pod, at := range last {
			v, ok := rates[pod]
			if !ok {
				continue
			}
			m := sig.Members[pod]
			*f.field(&m) = Sample{Value: v, At: unixTime(at)}
			sig.Members[pod] = m
		}
	}
	p99, err := c.vector(ctx, q.P99(), now)
	if err != nil {
		return fail(err)
	}
	last, err := c.vector(ctx, q.LatencyLastSample(), now)
	if err != nil {
		return fail(err)
	}
	if at, ok := last[""]; ok {
		v, ok := p99[""]
		if !ok {
			v = math.NaN()
		}
		sig.P99 = Sample{Value: v, At: unixTime(at)}
	}
	return sig, nil
}

// vector runs an instant query and returns its samples by their pod label ("" when absent).
func (c *Client) vector(ctx context.Context, query string, now time.Time) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	val, _, err := c.api.Query(ctx, query, now, promv1.WithTimeout(c.timeout))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("query %s timed out after %s", query, c.timeout)
		}
		return nil, fmt.Errorf("query %s: %w", query, err)
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: want an instant vector, got %s", query, val.Type())
	}
	out := make(map[string]float64, len(vec))
	for _, s := range vec {
		out[string(s.Metric["pod"])] = float64(s.Value)
	}
	return out, nil
}

func unixTime(sec float64) time.Time {
	whole, frac := math.Modf(sec)
	return time.Unix(int64(whole), int64(frac*1e9))
}
