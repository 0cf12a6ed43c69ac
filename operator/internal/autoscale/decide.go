package autoscale

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Decide returns the verdict for one evaluation at now. It is pure: the same inputs give the same
// verdict. The rules, in order:
//
//  1. autoscaling off → unknown, no action.
//  2. no CPU request/limit, Prometheus unreadable, or any needed series missing or older than
//     Tuning.MaxSignalAge → unknown, no action, and the reason names the series and members.
//  3. classify: CPU-bound when the members' mean CPU use ≥ cpuTarget of the request; disk-bound
//     when their mean disk busy fraction ≥ diskBusyTarget (on NVMe also a mean queue depth ≥
//     Tuning.NVMeQueueTarget); both → the one further over its target. Low when every member's
//     CPU and disk, spread over one member fewer, stay under Tuning.ScaleInMargin of their
//     targets and p99 latency is under Tuning.P99Guard.
//  4. a ring change, a maintenance Job or a previous step in flight → no action (the observation
//     is recorded as gated and never counts toward a window).
//  5. replicas outside [max(minReplicas, nVal), maxReplicas] → one step towards the range.
//  6. high for the whole scale-up window → one member more (up to maxReplicas); low for the whole
//     scale-down window → one member fewer (down to max(minReplicas, nVal)). A window holds
//     when consecutive ungated observations after the last step, no further apart than
//     Tuning.MaxObservationGap, all had that pressure and the earliest is at least the window old.
func Decide(sig Signals, spec Spec, hist History, now time.Time) Verdict {
	cur := spec.Replicas
	gate := hist.InFlight.describe()
	v := Verdict{
		Bottleneck:      BottleneckUnknown,
		DesiredReplicas: cur,
		CPU:             math.NaN(),
		DiskBusy:        math.NaN(),
		Observation:     Observation{At: now, Pressure: PressureUnknown, Gated: gate != ""},
	}
	if !spec.Enabled {
		v.Reason = "autoscaling is disabled"
		return v
	}
	if spec.CPURequest <= 0 {
		v.Reason = "no action: the levee container has no CPU request or limit, so CPU utilisation cannot be computed; set spec.resources.requests.cpu"
		return v
	}
	if sig.Unavailable != "" {
		v.Reason = "no action: cannot read Prometheus: " + sig.Unavailable
		return v
	}
	if gaps := missingSeries(sig, spec, now); gaps != "" {
		v.Reason = "no action: " + gaps
		if gate != "" {
			// A member added by a step in flight has no series yet: say what holds scaling too.
			v.Reason += "; no scaling while " + gate + " anyway"
		}
		return v
	}

	m := measure(sig, spec)
	v.CPU, v.DiskBusy, v.DiskSaturated = m.cpuMean, m.diskMean, m.saturated
	v.Bottleneck = m.bottleneck
	v.Observation.Pressure = m.pressure
	numbers := m.describe(spec)

	if gate != "" {
		v.Reason = fmt.Sprintf("%s; no scaling while %s", numbers, gate)
		return v
	}

	floor := max(spec.MinReplicas, spec.NVal)
	switch {
	case cur < floor:
		v.DesiredReplicas = cur + 1
		v.Reason = fmt.Sprintf("%s; scaling out to %d: below the floor max(minReplicas=%d, nVal=%d)", numbers, cur+1, spec.MinReplicas, spec.NVal)
		return v
	case cur > spec.MaxReplicas:
		v.DesiredReplicas = cur - 1
		v.Reason = fmt.Sprintf("%s; scaling in to %d: above maxReplicas=%d", numbers, cur-1, spec.MaxReplicas)
		return v
	}

	switch m.pressure {
	case PressureHigh:
		held := heldFor(hist, spec, now, PressureHigh)
		switch {
		case held < spec.ScaleUp:
			v.Reason = fmt.Sprintf("%s; %s-bound for %s of the %s scale-up window", numbers, m.bottleneck, round(held), spec.ScaleUp)
		case cur >= spec.MaxReplicas:
			v.Reason = fmt.Sprintf("%s; %s-bound for %s but already at maxReplicas=%d", numbers, m.bottleneck, round(held), spec.MaxReplicas)
		default:
			v.DesiredReplicas = cur + 1
			v.Reason = fmt.Sprintf("%s; scaling out to %d: %s-bound for %s (scale-up window %s)", numbers, cur+1, m.bottleneck, round(held), spec.ScaleUp)
		}
	case PressureLow:
		held := heldFor(hist, spec, now, PressureLow)
		switch {
		case cur <= floor:
			v.Reason = fmt.Sprintf("%s; low, already at the floor max(minReplicas=%d, nVal=%d)", numbers, spec.MinReplicas, spec.NVal)
		case held < spec.ScaleDown:
			v.Reason = fmt.Sprintf("%s; low for %s of the %s scale-down window", numbers, round(held), spec.ScaleDown)
		default:
			v.DesiredReplicas = cur - 1
			v.Reason = fmt.Sprintf("%s; scaling in to %d: low for %s (scale-down window %s)", numbers, cur-1, round(held), spec.ScaleDown)
		}
	default:
		v.Reason = fmt.Sprintf("%s; %s", numbers, m.steadyWhy)
	}
	return v
}

func (f InFlight) describe() string {
	var parts []string
	if f.RingChange {
		parts = append(parts, "a ring change is in progress")
	}
	if f.MaintenanceJob != "" {
		parts = append(parts, fmt.Sprintf("maintenance Job %s runs", f.MaintenanceJob))
	}
	if f.Step {
		parts = append(parts, "the previous scale step is not applied yet")
	}
	return strings.Join(parts, " and ")
}

// missingSeries names every needed series that is missing or stale, grouped by series.
func missingSeries(sig Signals, spec Spec, now time.Time) string {
	maxAge := spec.Tuning.MaxSignalAge
	var order []string
	seen := map[string]bool{}
	missing := map[string][]string{}
	stale := map[string][]string{}
	note := func(series, who string, s Sample) {
		if !seen[series] && (s.Missing() || math.IsNaN(s.Value) || now.Sub(s.At) > maxAge) {
			seen[series] = true
			order = append(order, series)
		}
		switch {
		case s.Missing() || math.IsNaN(s.Value):
			missing[series] = append(missing[series], who)
		case now.Sub(s.At) > maxAge:
			stale[series] = append(stale[series], fmt.Sprintf("%s (last sample %s ago)", who, round(now.Sub(s.At))))
		}
	}
	for _, name := range spec.Members {
		ms := sig.Members[name]
		note(MetricCPU, name, ms.CPU)
		note(MetricDiskBusy, name, ms.DiskBusy)
		if spec.NVMe {
			note(MetricDiskWeighted, name, ms.DiskQueue)
		}
	}
	// A NaN p99 with a fresh sample means no requests in the window, not a missing series.
	p99 := sig.P99
	if !p99.Missing() && math.IsNaN(p99.Value) {
		p99.Value = 0
	}
	note(MetricLatency, "the cluster", p99)
	var parts []string
	for _, series := range order {
		if ms := missing[series]; len(ms) > 0 {
			parts = append(parts, fmt.Sprintf("series %s missing for %s", series, strings.Join(ms, ", ")))
		}
		if ms := stale[series]; len(ms) > 0 {
			parts = append(parts, fmt.Sprintf("series %s stale for %s", series, strings.Join(ms, ", ")))
		}
	}
	return strings.Join(parts, "; ")
}

type measurement struct {
	cpuMean, diskMean, queueMean float64
	cpuMax, diskMax, queueMax    float64
	p99                          float64
	bottleneck                   Bottleneck
	pressure                     Pressure
	saturated                    []string
	steadyWhy                    string
}

func measure(sig Signals, spec Spec) measurement {
	var m measurement
	n := float64(len(spec.Members))
	t := spec.Tuning
	for _, name := range spec.Members {
		ms := sig.Members[name]
		cpu := ms.CPU.Value / spec.CPURequest
		m.cpuMean += cpu / n
		m.diskMean += ms.DiskBusy.Value / n
		m.queueMean += ms.DiskQueue.Value / n
		m.cpuMax = max(m.cpuMax, cpu)
		m.diskMax = max(m.diskMax, ms.DiskBusy.Value)
		m.queueMax = max(m.queueMax, ms.DiskQueue.Value)
		if diskBound(ms.DiskBusy.Value, ms.DiskQueue.Value, spec) {
			m.saturated = append(m.saturated, name)
		}
	}
	m.p99 = sig.P99.Value

	cpuHigh := m.cpuMean >= spec.CPUTarget
	diskHigh := diskBound(m.diskMean, m.queueMean, spec)
	switch {
	case cpuHigh && diskHigh:
		m.bottleneck = BottleneckCPU
		if m.diskMean/spec.DiskBusyTarget > m.cpuMean/spec.CPUTarget {
			m.bottleneck = BottleneckDisk
		}
	case cpuHigh:
		m.bottleneck = BottleneckCPU
	case diskHigh:
		m.bottleneck = BottleneckDisk
	default:
		m.bottleneck = BottleneckNone
	}
	if m.bottleneck != BottleneckNone {
		m.pressure = PressureHigh
		return m
	}

	// Low: the busiest member's load, spread over one member fewer, stays under the margin.
	m.pressure = PressureSteady
	if len(spec.Members) < 2 {
		m.steadyWhy = "within targets"
		return m
	}
	spread := n / (n - 1)
	cpuLow := m.cpuMax*spread <= t.ScaleInMargin*spec.CPUTarget
	diskLow := m.diskMax*spread <= t.ScaleInMargin*spec.DiskBusyTarget ||
		(spec.NVMe && m.queueMax*spread <= t.ScaleInMargin*t.NVMeQueueTarget)
	latencyOK := math.IsNaN(m.p99) || m.p99 <= t.P99Guard.Seconds()
	switch {
	case !cpuLow:
		m.steadyWhy = fmt.Sprintf("within targets; not low enough to scale in: busiest CPU %.0f%% would be %.0f%% on one member fewer (scale-in needs ≤ %.0f%%)",
			100*m.cpuMax, 100*m.cpuMax*spread, 100*t.ScaleInMargin*spec.CPUTarget)
	case !diskLow:
		m.steadyWhy = fmt.Sprintf("within targets; not low enough to scale in: busiest disk %.0f%% would be %.0f%% on one member fewer (scale-in needs ≤ %.0f%%)",
			100*m.diskMax, 100*m.diskMax*spread, 100*t.ScaleInMargin*spec.DiskBusyTarget)
	case !latencyOK:
		m.steadyWhy = fmt.Sprintf("within targets; no scale-in while p99 latency %s is above the %s guard",
			round(time.Duration(m.p99*float64(time.Second))), t.P99Guard)
	default:
		m.pressure = PressureLow
	}
	return m
}

// diskBound: busy over the target, and on NVMe also queued over the queue target.
func diskBound(busy, queue float64, spec Spec) bool {
	return busy >= spec.DiskBusyTarget && (!spec.NVMe || queue >= spec.Tuning.NVMeQueueTarget)
}

func (m measurement) describe(spec Spec) string {
	s := fmt.Sprintf("CPU %.0f%% of request (target %.0f%%, busiest %.0f%%), disk busy %.0f%% (target %.0f%%, busiest %.0f%%)",
		100*m.cpuMean, 100*spec.CPUTarget, 100*m.cpuMax, 100*m.diskMean, 100*spec.DiskBusyTarget, 100*m.diskMax)
	if spec.NVMe {
		s += fmt.Sprintf(", disk queue %.1f (target %.0f)", m.queueMean, spec.Tuning.NVMeQueueTarget)
	}
	if math.IsNaN(m.p99) {
		s += ", p99 n/a (no requests)"
	} else {
		s += fmt.Sprintf(", p99 %s", round(time.Duration(m.p99*float64(time.Second))))
	}
	if len(m.saturated) > 0 {
		s += ", saturated disks: " + strings.Join(m.saturated, ", ")
	}
	return s
}

// heldFor is how long the pressure p has held without a break up to now: walking back from now
// through ungated observations taken after the last step, each no further than MaxObservationGap
// from the next, all with pressure p. The current observation (at now) is assumed to have p.
func heldFor(h History, spec Spec, now time.Time, p Pressure) time.Duration {
	start, next := now, now
	for _, o := range slices.Backward(h.Observations) {
		if !o.At.Before(now) {
			continue // the current evaluation, or a clock step back
		}
		if !o.At.After(h.LastScaleTime) || o.Gated || o.Pressure != p || next.Sub(o.At) > spec.Tuning.MaxObservationGap {
			break
		}
		start, next = o.At, o.At
	}
	return now.Sub(start)
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
