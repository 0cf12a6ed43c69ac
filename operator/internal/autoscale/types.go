// Package autoscale decides how many members a KVCluster should have from what Prometheus says
// about its members: CPU used against the CPU request, how busy the data disks are (and, on NVMe,
// how deep their queues run), and the p99 request latency as a guard on scale-in.
//
// The decision is the pure function Decide; reading Prometheus (prometheus.go, with every PromQL
// expression in queries.go) and acting on the verdict are separate, so every branch of the
// decision is table-tested without a cluster or a Prometheus.
package autoscale

import (
	"math"
	"time"
)

// Bottleneck is what limits the cluster, as far as the signals tell.
type Bottleneck string

const (
	// BottleneckCPU: members use more CPU than cpuTarget of their CPU request.
	BottleneckCPU Bottleneck = "cpu"
	// BottleneckDisk: the members' data disks are busier than diskBusyTarget (on NVMe, also queued deeper than the queue target).
	BottleneckDisk Bottleneck = "disk"
	// BottleneckNone: every signal is present, fresh and under its target.
	BottleneckNone Bottleneck = "none"
	// BottleneckUnknown: a signal is missing or stale, or autoscaling is off; nothing is done.
	BottleneckUnknown Bottleneck = "unknown"
)

// Sample is one value read from Prometheus and the time of the newest scraped sample behind it.
type Sample struct {
	Value float64
	// At is when the underlying series was last scraped; zero means the series is missing.
	At time.Time
}

// Missing reports whether the series had no sample at all.
func (s Sample) Missing() bool { return s.At.IsZero() }

// MemberSignals are one member's readings. They are plain numbers, whatever exports them: the
// levee node exports the disk counters itself, but node-exporter's
// node_disk_io_time_seconds_total / node_disk_io_time_weighted_seconds_total give the same two.
type MemberSignals struct {
	// CPU is the CPU the node process uses, in cores (rate of process_cpu_seconds_total).
	CPU Sample
	// DiskBusy is the fraction of time the data device was busy, 0–1 (rate of levee_disk_io_time_seconds_total).
	DiskBusy Sample
	// DiskQueue is the average number of requests queued on the data device (rate of levee_disk_io_weighted_seconds_total).
	DiskQueue Sample
}

// Signals are the readings of one evaluation.
type Signals struct {
	// Members by pod name. Members missing from the map are missing series.
	Members map[string]MemberSignals
	// P99 is the cluster's p99 request latency in seconds. A NaN value with a fresh At means
	// the series exist but no request was served in the window (nothing to guard).
	P99 Sample
	// Unavailable, when set, says why Prometheus could not be read at all (unreachable,
	// timeout, bad query); Decide then takes no action and repeats it as the reason.
	Unavailable string
}

// Spec is what Decide needs from the KVCluster (see SpecFrom) and the operator's tuning.
type Spec struct {
	Enabled bool
	// Replicas is spec.replicas, the member count the decision starts from.
	Replicas int32
	// Members are the pod names expected to report, one per replica.
	Members                  []string
	NVal                     int32
	MinReplicas, MaxReplicas int32
	// CPURequest is each member's CPU request in cores (the limit when no request is set);
	// 0 when neither is set: CPU utilisation cannot be computed and Decide takes no action.
	CPURequest float64
	// CPUTarget and DiskBusyTarget are fractions (cpuTarget/100, diskBusyTarget/100).
	CPUTarget, DiskBusyTarget float64
	// ScaleUp and ScaleDown are the stabilization windows.
	ScaleUp, ScaleDown time.Duration
	// NVMe selects the NVMe disk rule (busy time and queue depth, see Tuning.NVMeQueueTarget).
	NVMe   bool
	Tuning Tuning
}

// Tuning holds the settings that are not (yet) in the KVCluster spec.
type Tuning struct {
	// MaxSignalAge: a series whose newest sample is older than this is stale.
	MaxSignalAge time.Duration
	// MaxObservationGap: two observations further apart than this break a stabilization window
	// (the operator was not watching in between, so the condition was not seen to hold).
	MaxObservationGap time.Duration
	// ScaleInMargin: scale-in needs every member's CPU and disk, spread over one member fewer,
	// to stay under this fraction of their targets — so a scale-in never lands above a target.
	ScaleInMargin float64
	// NVMeQueueTarget: on NVMe the busy fraction reaches 100% long before the device is
	// saturated (it serves many requests in parallel), so a member's disk also needs an average
	// queue depth of at least this to count as busy.
	NVMeQueueTarget float64
	// P99Guard: no scale-in while the cluster's p99 request latency is above this.
	P99Guard time.Duration
}

// DefaultTuning is what the operator uses.
func DefaultTuning() Tuning {
	return Tuning{
		MaxSignalAge:      2 * time.Minute,
		MaxObservationGap: 3 * time.Minute,
		ScaleInMargin:     0.8,
		NVMeQueueTarget:   8,
		P99Guard:          100 * time.Millisecond,
	}
}

// Pressure is how one observation classified the cluster.
type Pressure string

const (
	// PressureHigh: CPU- or disk-bound (counts toward the scale-up window).
	PressureHigh Pressure = "high"
	// PressureLow: CPU and disk low enough to lose a member, latency under the guard
	// (counts toward the scale-down window).
	PressureLow Pressure = "low"
	// PressureSteady: in between.
	PressureSteady Pressure = "steady"
	// PressureUnknown: the signals were missing or stale.
	PressureUnknown Pressure = "unknown"
)

// Observation is what one evaluation saw; the caller records Verdict.Observation in History.
type Observation struct {
	At       time.Time
	Pressure Pressure
	// Gated observations were taken while something was in flight (ring change, maintenance
	// Job, a previous step); they never count toward a window, since the load they saw was
	// partly the transition's own.
	Gated bool
}

// InFlight is what is going on in the cluster now; any of it blocks scaling.
type InFlight struct {
	// RingChange: status.ringChangeInProgress (members joining or leaving, handoff running).
	RingChange bool
	// MaintenanceJob names a running compaction or AAE Job, if any.
	MaintenanceJob string
	// Step: a previous scale step is not reflected in the StatefulSet yet (spec.replicas differs
	// from the StatefulSet's replicas or from the settled membership).
	Step bool
}

// History is what Decide knows about the past: earlier observations, the last step, and what is
// in flight now.
type History struct {
	// Observations, oldest first (see Record).
	Observations []Observation
	// LastScaleTime is when the last step was taken; observations up to it do not count.
	LastScaleTime time.Time
	InFlight      InFlight
}

// Record appends o and drops observations older than keep before o.At.
func (h History) Record(o Observation, keep time.Duration) History {
	obs := make([]Observation, 0, len(h.Observations)+1)
	for _, p := range h.Observations {
		if o.At.Sub(p.At) <= keep {
			obs = append(obs, p)
		}
	}
	h.Observations = append(obs, o)
	return h
}

// Keep is how much history Decide can use for spec: the longer window plus one gap.
func (s Spec) Keep() time.Duration {
	return max(s.ScaleUp, s.ScaleDown) + s.Tuning.MaxObservationGap
}

// Verdict is the decision and the numbers behind it.
type Verdict struct {
	Bottleneck Bottleneck
	// DesiredReplicas is Spec.Replicas, or one more, or one fewer.
	DesiredReplicas int32
	// Reason explains the decision in one sentence, with the numbers.
	Reason string
	// CPU is the members' mean CPU use as a fraction of the request; NaN when unknown.
	CPU float64
	// DiskBusy is the members' mean disk busy fraction; NaN when unknown.
	DiskBusy float64
	// DiskSaturated are the members whose own disk is over the disk target (maintenance on
	// them should wait).
	DiskSaturated []string
	// Observation is to be recorded in History for the next evaluation.
	Observation Observation
}

// Percent turns a fraction into a whole percent for status (0 when unknown).
func Percent(f float64) int32 {
	if math.IsNaN(f) || f < 0 {
		return 0
	}
	return int32(math.Round(f * 100))
}
