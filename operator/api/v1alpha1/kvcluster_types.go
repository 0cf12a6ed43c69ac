package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StorageProfile selects the kind of node and volume a KVCluster runs on.
// +kubebuilder:validation:Enum=nvme;hdd
type StorageProfile string

const (
	// StorageNVMe places members on nodes labelled levee.io/storage=nvme with local NVMe volumes.
	StorageNVMe StorageProfile = "nvme"
	// StorageHDD places members on nodes labelled levee.io/storage=hdd with HDD-backed volumes.
	StorageHDD StorageProfile = "hdd"
)

// Defaults shared by the CRD markers below and by SetDefaults (kept in step by a test).
const (
	DefaultReplicas            int32 = 3
	DefaultImage                     = "levee:dev"
	DefaultRingSize            int32 = 64
	DefaultNVal                int32 = 3
	DefaultStorageSize               = "100Gi"
	DefaultJournalSegmentBytes int64 = 268435456
	DefaultWindowStartHour     int32 = 0
	DefaultWindowEndHour       int32 = 6
	DefaultRunsPerDay          int32 = 4
	DefaultTimeZone                  = "UTC"
	DefaultSingleFilePercent   int32 = 25
	DefaultMaxRunPercent       int32 = 75
	DefaultMaxRunLength        int32 = 4
	// The pacing defaults are the node's own (docs/node.md, levee.toml): a setting at its
	// default is left out of levee.toml, so adding these fields restarted no member.
	DefaultCompactionBusyPercent int32 = 100
	DefaultCompactionNice        int32 = 10
	DefaultRebuildBusyPercent    int32 = 10
	DefaultHandoffMaxBytesPerSec int64 = 33554432
	DefaultHandoffBusyPercent    int32 = 10
	// DefaultRebuildSchedule: Sundays 07:00, an hour after the default compaction window
	// (00:00–06:00) has closed, so the default AAE rebuild never starts in a minute a default
	// compaction run starts in (and the operator's gate queues one behind the other anyway).
	DefaultRebuildSchedule       = "0 7 * * 0"
	DefaultCPUTarget       int32 = 70
	DefaultDiskBusyTarget  int32 = 80
	// StorageNodeLabel is the node label the Terraform module sets (values nvme, hdd).
	StorageNodeLabel = "levee.io/storage"
)

// StorageSpec describes the data volume of every member.
// +kubebuilder:validation:XValidation:rule="!has(self.profile) || !has(oldSelf.profile) || self.profile == oldSelf.profile",message="storage.profile is immutable: members cannot move between NVMe and HDD nodes in place; create a new KVCluster and migrate the data"
// +kubebuilder:validation:XValidation:rule="!has(self.size) || !has(oldSelf.size) || self.size == oldSelf.size",message="storage.size is immutable: StatefulSet volume claim templates cannot change; create a new KVCluster or expand the PVCs yourself"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage.storageClassName is immutable: StatefulSet volume claim templates cannot change"
type StorageSpec struct {
	// Profile is nvme (local NVMe volumes on levee.io/storage=nvme nodes) or hdd
	// (levee.io/storage=hdd nodes). Immutable.
	// +kubebuilder:default=nvme
	// +optional
	Profile StorageProfile `json:"profile,omitempty"`
	// StorageClassName of the data volumes. Defaults to levee-nvme or levee-hdd by profile. Immutable.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// Size of each member's data volume. Immutable.
	// +kubebuilder:default="100Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
	// NodeSelector replaces the default node requirement (levee.io/storage=<profile>).
	// Every key/value pair becomes a required node-affinity match.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// EngineSpec holds engine settings written to levee.toml.
type EngineSpec struct {
	// SyncOnWrite makes every write fdatasync the journal before it is acknowledged.
	// +optional
	SyncOnWrite bool `json:"syncOnWrite,omitempty"`
	// JournalSegmentBytes is the size at which a journal segment rolls (1 MiB – 4 GiB).
	// +kubebuilder:default=268435456
	// +kubebuilder:validation:XValidation:rule="self >= 1048576 && self <= 4294967296",message="engine.journalSegmentBytes must be between 1 MiB (1048576) and 4 GiB (4294967296)"
	// +optional
	JournalSegmentBytes int64 `json:"journalSegmentBytes,omitempty"`
	// Compression of values in the journal: none, lz4 or zstd (level 3). Records written under
	// another setting stay readable, so it may be changed at any time (members restart).
	// +kubebuilder:default=none
	// +kubebuilder:validation:Enum=none;lz4;zstd
	// +optional
	Compression string `json:"compression,omitempty"`
	// CompressionPoint is when values are compressed: onReceipt (as writes arrive) or onCompact
	// (only when journal compaction rewrites them, keeping writes as cheap as without).
	// +kubebuilder:default=onReceipt
	// +kubebuilder:validation:Enum=onReceipt;onCompact
	// +optional
	CompressionPoint string `json:"compressionPoint,omitempty"`
}

// CompactionThresholds decide which journal runs are worth compacting (percent of live bytes).
// +kubebuilder:validation:XValidation:rule="!has(self.singleFilePercent) || !has(self.maxRunPercent) || self.singleFilePercent <= self.maxRunPercent",message="compaction.thresholds.singleFilePercent must be less than or equal to compaction.thresholds.maxRunPercent (default 75): a single journal file must not need a higher score than a full run"
type CompactionThresholds struct {
	// SingleFilePercent is the score target for a run of one file.
	// +kubebuilder:default=25
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	SingleFilePercent *int32 `json:"singleFilePercent,omitempty"`
	// MaxRunPercent is the score target for a run of maxRunLength files.
	// +kubebuilder:default=75
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxRunPercent *int32 `json:"maxRunPercent,omitempty"`
	// MaxRunLength is the longest run of adjacent journal files compacted together.
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	MaxRunLength int32 `json:"maxRunLength,omitempty"`
}

// CompactionSpec schedules journal compaction inside a daily window.
type CompactionSpec struct {
	// WindowStartHour is the first hour (0–23, in TimeZone) compaction may start.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= 23",message="compaction.windowStartHour must be an hour of the day between 0 and 23"
	// +optional
	WindowStartHour *int32 `json:"windowStartHour,omitempty"`
	// WindowEndHour is the hour (0–23) the window closes; it may be smaller than the
	// start to wrap midnight (22 → 4). Equal to the start means the whole day.
	// +kubebuilder:default=6
	// +kubebuilder:validation:XValidation:rule="self >= 0 && self <= 23",message="compaction.windowEndHour must be an hour of the day between 0 and 23 (a window may wrap midnight, e.g. 22 to 4)"
	// +optional
	WindowEndHour *int32 `json:"windowEndHour,omitempty"`
	// RunsPerDay spreads this many compaction runs evenly across the window; 0 disables them.
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=96
	// +optional
	RunsPerDay *int32 `json:"runsPerDay,omitempty"`
	// TimeZone (IANA name) the window hours are in.
	// +kubebuilder:default="UTC"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Thresholds decide which runs are compacted.
	// +kubebuilder:default={}
	// +optional
	Thresholds CompactionThresholds `json:"thresholds"`
	// BusyPercent is the share of wall time a compaction run works (1–100; 100: unpaced).
	// Below 100 a run pauses between batches: it takes longer (the Job's per-member deadline
	// grows to match) and takes less disk and CPU from requests meanwhile.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	BusyPercent *int32 `json:"busyPercent,omitempty"`
	// Nice is the CPU priority (Linux nice value, 0–19) of the thread a compaction run works on,
	// so that requests come first for the CPU; 0 runs it at the priority of the thread that
	// asked. Higher yields more and risks compaction falling behind sustained overwrites.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=19
	// +optional
	Nice *int32 `json:"nice,omitempty"`
}

// AntiEntropySpec schedules active anti-entropy (AAE) tree rebuilds.
type AntiEntropySpec struct {
	// RebuildSchedule is a 5-field cron expression; members are rebuilt one after another.
	// A rebuild never runs while a compaction Job of the cluster runs: the later one waits.
	// +kubebuilder:default="0 7 * * 0"
	// +kubebuilder:validation:XValidation:rule="self.matches('^\\\\s*\\\\S+(\\\\s+\\\\S+){4}\\\\s*$') && !self.contains('TZ')",message="antiEntropy.rebuildSchedule must be a 5-field cron expression such as '0 3 * * 0' (set the time zone with antiEntropy.timeZone, not TZ=)"
	// +optional
	RebuildSchedule string `json:"rebuildSchedule,omitempty"`
	// TimeZone (IANA name) of RebuildSchedule.
	// +kubebuilder:default="UTC"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// JournalCheck makes the rebuild also verify that every ledger entry is present in the journal.
	// +optional
	JournalCheck bool `json:"journalCheck,omitempty"`
	// RebuildBusyPercent is the share of wall time a vnode's tree rebuild works (1–100; 100:
	// unpaced). The Job's per-member deadline grows as it shrinks.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	RebuildBusyPercent *int32 `json:"rebuildBusyPercent,omitempty"`
}

// HandoffSpec paces what members send each other: hinted handoff to an owner that is back, and
// the partitions a ring transition moves (docs/cluster.md §5 and §7).
type HandoffSpec struct {
	// MaxBytesPerSec limits the bytes per second of each transfer; 0: no byte limit.
	// +kubebuilder:default=33554432
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxBytesPerSec *int64 `json:"maxBytesPerSec,omitempty"`
	// BusyPercent is the share of wall time transfers may work (1–100; 100: no limit). Higher
	// moves data faster on a scale and takes more from requests meanwhile.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	BusyPercent *int32 `json:"busyPercent,omitempty"`
}

// AutoscalingSpec configures the CPU-versus-disk autoscaler (internal/autoscale; docs/operator.md "Autoscaler").
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="autoscaling.minReplicas must be less than or equal to autoscaling.maxReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !self.enabled || has(self.prometheusURL)",message="autoscaling.prometheusURL is required when autoscaling.enabled is true: the autoscaler reads CPU and disk busyness from Prometheus"
type AutoscalingSpec struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`
	// +kubebuilder:default=12
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
	// PrometheusURL the autoscaler queries, e.g. http://prometheus.monitoring:9090.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	PrometheusURL string `json:"prometheusURL,omitempty"`
	// CPUTarget is the members' mean CPU use (percent of the CPU request, or of the limit when no
	// request is set) at or above which the cluster counts as CPU-bound.
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	CPUTarget int32 `json:"cpuTarget,omitempty"`
	// DiskBusyTarget is the members' mean disk busyness (percent of time the data device is busy) at
	// or above which the cluster counts as disk-bound (on nvme, with a deep queue too).
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	DiskBusyTarget int32 `json:"diskBusyTarget,omitempty"`
	// ScaleUpStabilization is how long a bottleneck must persist before scaling out.
	// +kubebuilder:default="5m"
	// +optional
	ScaleUpStabilization *metav1.Duration `json:"scaleUpStabilization,omitempty"`
	// ScaleDownStabilization is how long the cluster must be idle before scaling in.
	// +kubebuilder:default="30m"
	// +optional
	ScaleDownStabilization *metav1.Duration `json:"scaleDownStabilization,omitempty"`
}

// IssuerRef names a cert-manager issuer.
type IssuerRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:default=Issuer
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:default="cert-manager.io"
	// +optional
	Group string `json:"group,omitempty"`
}

// TLSSpec enables TLS on the gRPC port.
type TLSSpec struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// IssuerRef signs the member certificate. Empty: the operator creates a self-signed CA
	// Issuer for this cluster (requires cert-manager).
	// +optional
	IssuerRef *IssuerRef `json:"issuerRef,omitempty"`
}

// MonitoringSpec controls the Prometheus Operator objects (created only when its CRDs exist).
type MonitoringSpec struct {
	// ServiceMonitor creates a ServiceMonitor that scrapes every member's /metrics (when the
	// Prometheus Operator CRDs exist); false deletes it.
	// +kubebuilder:default=true
	// +optional
	ServiceMonitor *bool `json:"serviceMonitor,omitempty"`
	// PrometheusRule is deprecated and ignored: the operator no longer creates a PrometheusRule
	// per cluster (and deletes the one it created before). The alerting and recording rules,
	// one copy for every cluster, ship with the Helm chart (value prometheusRule.enabled) and
	// as dashboards/alerts/levee.rules.yaml. Still accepted so that existing manifests apply;
	// it will be removed from the next API version.
	// +optional
	PrometheusRule *bool `json:"prometheusRule,omitempty"`
}

// SchedulingSpec holds extra pod placement settings.
type SchedulingSpec struct {
	// NodeSelector is added to the member pods (in addition to the storage node requirement).
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// TopologySpreadConstraints replace the default spread (zones: best effort, hosts: required).
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// TerminationGracePeriodSeconds lets a member hand off and flush before it is killed.
	// +kubebuilder:default=120
	// +kubebuilder:validation:Minimum=0
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// KVClusterSpec is the desired state of a levee cluster.
// +kubebuilder:validation:XValidation:rule="!has(self.nVal) || !has(self.replicas) || self.nVal <= self.replicas",message="nVal must be less than or equal to replicas: every key is stored on nVal distinct members, so a cluster needs at least nVal members"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.autoscaling.enabled) || !self.autoscaling.enabled || self.autoscaling.minReplicas >= self.nVal",message="autoscaling.minReplicas must be at least nVal so every key keeps nVal distinct members"
type KVClusterSpec struct {
	// Replicas is the number of members (levee nodes).
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Image of the levee node.
	// +kubebuilder:default="levee:dev"
	// +optional
	Image string `json:"image,omitempty"`
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// RingSize is the number of partitions: a power of two from 8 to 4096. Immutable.
	// +kubebuilder:default=64
	// +kubebuilder:validation:XValidation:rule="self in [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]",message="ringSize must be a power of two between 8 and 4096, such as 64 or 128"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ringSize is immutable: changing it would move every key to a new partition; create a new KVCluster and migrate"
	// +optional
	RingSize int32 `json:"ringSize,omitempty"`
	// NVal is the number of replicas of every key (on distinct members).
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	// +optional
	NVal int32 `json:"nVal,omitempty"`
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage"`
	// Resources of the levee container. Empty: the operator sets them from the spec
	// (DefaultMemberResources; docs/node.md "Memory and threads" has the measurements):
	// requests.memory = 32 MiB + ringSize × 256 KiB + ceil(ringSize / m) × 53 MiB
	// + storage.size in GiB × 7 MiB, where m is nVal (autoscaling.minReplicas when autoscaling
	// is on and larger), so scaling never changes the pod template; limits.memory = twice that
	// (page cache for journal reads); requests.cpu = 1 (the autoscaler's CPU denominator), no CPU
	// limit. Anything set here (a request, limit or claim) is used as it is, instead.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// +kubebuilder:default={}
	// +optional
	Engine EngineSpec `json:"engine"`
	// +kubebuilder:default={}
	// +optional
	Compaction CompactionSpec `json:"compaction"`
	// +kubebuilder:default={}
	// +optional
	AntiEntropy AntiEntropySpec `json:"antiEntropy"`
	// +kubebuilder:default={}
	// +optional
	Handoff HandoffSpec `json:"handoff"`
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`
	// +optional
	TLS TLSSpec `json:"tls,omitempty"`
	// +kubebuilder:default={}
	// +optional
	Monitoring MonitoringSpec `json:"monitoring"`
	// +kubebuilder:default={}
	// +optional
	Scheduling SchedulingSpec `json:"scheduling"`
}

// Bottleneck classifies what limits the cluster; unknown when a signal is missing or stale.
// +kubebuilder:validation:Enum=cpu;disk;none;unknown
type Bottleneck string

// AutoscalerStatus explains the last autoscaler decision.
type AutoscalerStatus struct {
	// +optional
	Bottleneck Bottleneck `json:"bottleneck,omitempty"`
	// CPU is the members' mean CPU use, percent of the CPU request.
	// +optional
	CPU int32 `json:"cpu,omitempty"`
	// DiskBusy, percent of time the data device is busy.
	// +optional
	DiskBusy int32 `json:"diskBusy,omitempty"`
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
}

// Condition types reported in status.conditions.
const (
	ConditionAvailable   = "Available"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
	// ConditionMonitoring is False when the Prometheus Operator CRDs are missing.
	ConditionMonitoring = "MonitoringReady"
	// ConditionTLS is False when TLS is enabled but cert-manager CRDs are missing.
	ConditionTLS = "TLSReady"
	// ConditionAutoscaling is True while the autoscaler can judge the cluster from its signals,
	// False (reason SignalsUnavailable) when it takes no action for want of them; absent while
	// autoscaling is disabled.
	ConditionAutoscaling = "AutoscalerReady"
)

// Phases reported in status.phase.
const (
	PhaseCreating = "Creating"
	PhaseRunning  = "Running"
	PhaseScaling  = "Scaling"
	PhaseUpdating = "Updating"
	PhaseDegraded = "Degraded"
)

// Maintenance run phases (status.maintenance.*.phase).
const (
	// MaintenanceQueued: the Job exists but waits for another maintenance Job of the cluster.
	MaintenanceQueued = "Queued"
	// MaintenanceRunning: the Job's pods are working through the members.
	MaintenanceRunning = "Running"
	// MaintenanceSucceeded: every member succeeded.
	MaintenanceSucceeded = "Succeeded"
	// MaintenanceFailed: the Job ended with failed members or members it did not reach.
	MaintenanceFailed = "Failed"
)

// MaintenanceRun reports the latest Job of one maintenance kind, member by member. Member
// lists use the Job's index notation: ordinals and ranges, such as "0-2,5".
type MaintenanceRun struct {
	// Job is the name of the Job.
	Job string `json:"job"`
	// Phase is Queued, Running, Succeeded or Failed.
	Phase string `json:"phase"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// SucceededMembers are the members whose call succeeded.
	// +optional
	SucceededMembers string `json:"succeededMembers,omitempty"`
	// FailedMembers are the members whose call failed on every attempt (e.g. a member that is down).
	// +optional
	FailedMembers string `json:"failedMembers,omitempty"`
	// NotReachedMembers are the members a finished Job never ran (its deadline passed first).
	// +optional
	NotReachedMembers string `json:"notReachedMembers,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// MaintenanceStatus reports the latest compaction and AAE rebuild Jobs.
type MaintenanceStatus struct {
	// +optional
	Compaction *MaintenanceRun `json:"compaction,omitempty"`
	// +optional
	AAERebuild *MaintenanceRun `json:"aaeRebuild,omitempty"`
	// Deferred says why queued maintenance Jobs are held back now (the autoscaler found members'
	// disks saturated by foreground load); empty when they may run.
	// +optional
	Deferred string `json:"deferred,omitempty"`
}

// RingTransitionStatus reports a ring transition: the members named by status.members take
// over the partitions of the list before it (From), streamed by their current owners
// (docs/cluster.md, "Ring transitions"). Progress is read from every member's metrics.
type RingTransitionStatus struct {
	// From is the membership (gRPC addresses) the transition started from: setting
	// spec.replicas back to its size takes the transition back.
	From []string `json:"from"`
	// FromMembers and ToMembers are the member counts before and after.
	FromMembers int32 `json:"fromMembers"`
	ToMembers   int32 `json:"toMembers"`
	// StartTime is when the list was published.
	StartTime metav1.Time `json:"startTime"`
	// PartitionsPending is the number of partitions their current owners still have to send
	// (levee_transition_partitions_to_send summed over the members that answered).
	// +optional
	PartitionsPending int32 `json:"partitionsPending,omitempty"`
	// BytesMoved is what the members streamed in this transition so far
	// (levee_transition_bytes_sent summed).
	// +optional
	BytesMoved int64 `json:"bytesMoved,omitempty"`
	// LastProgressTime is when the operator last saw the transition advance (bytes moved,
	// partitions sent, members switched or emptied).
	LastProgressTime metav1.Time `json:"lastProgressTime"`
	// Members is the progress of each member involved, staying and leaving.
	// +optional
	Members []MemberTransitionStatus `json:"members,omitempty"`
}

// Member states in a ring transition (status.transition.members[].state).
const (
	// MemberMoving: the member has the new list and still routes by the old claim.
	MemberMoving = "Moving"
	// MemberSwitched: the member routes by the new claim.
	MemberSwitched = "Switched"
	// MemberDraining: a leaving member that switched and still holds partitions or handoff data.
	MemberDraining = "Draining"
	// MemberEmpty: a leaving member holding nothing: its pod may be removed.
	MemberEmpty = "Empty"
	// MemberBehind: the member has not read the published list yet.
	MemberBehind = "Behind"
	// MemberUnreachable: the operator could not read the member's metrics.
	MemberUnreachable = "Unreachable"
)

// MemberTransitionStatus is one member's part in a ring transition.
type MemberTransitionStatus struct {
	// Name is the member's pod name.
	Name string `json:"name"`
	// Leaving is true for a member the new list no longer names.
	// +optional
	Leaving bool `json:"leaving,omitempty"`
	// State is Moving, Switched, Draining, Empty, Behind or Unreachable.
	State string `json:"state"`
	// PartitionsToSend this member still streams to their next owners.
	// +optional
	PartitionsToSend int32 `json:"partitionsToSend,omitempty"`
	// BytesSent this member streamed in this transition.
	// +optional
	BytesSent int64 `json:"bytesSent,omitempty"`
	// Vnodes this member still holds data for (active plus handoff).
	// +optional
	Vnodes int32 `json:"vnodes,omitempty"`
	// Message explains an Unreachable member.
	// +optional
	Message string `json:"message,omitempty"`
}

// KVClusterStatus is the observed state of a levee cluster.
type KVClusterStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the number of member pods the StatefulSet runs (the /scale status).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// Selector is the label selector of the member pods (for /scale and HPA).
	// +optional
	Selector string `json:"selector,omitempty"`
	// +optional
	Phase string `json:"phase,omitempty"`
	// Members is the settled ring membership (gRPC addresses).
	// +optional
	Members []string `json:"members,omitempty"`
	// RingVersion increases every time Members changes.
	// +optional
	RingVersion int64 `json:"ringVersion,omitempty"`
	// RingChangeInProgress is true while the desired membership differs from Members, or the
	// members still move partitions for the last change (Transition), or members that left still
	// hold data (LeavingMembers). A scale-in is refused meanwhile, except the one that takes the
	// running transition back (replicas = transition.fromMembers).
	// +optional
	RingChangeInProgress bool `json:"ringChangeInProgress,omitempty"`
	// LeavingMembers are members (gRPC addresses) the published list no longer names whose pods
	// keep running until they report empty (every partition handed to its new owner); only then
	// does the StatefulSet shrink.
	// +optional
	LeavingMembers []string `json:"leavingMembers,omitempty"`
	// Transition reports the ring transition the last published list started (absent when none
	// runs): the members move partitions to their new owners.
	// +optional
	Transition *RingTransitionStatus `json:"transition,omitempty"`
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastCompaction is the last successful journal-compaction Job.
	// +optional
	LastCompaction *metav1.Time `json:"lastCompaction,omitempty"`
	// LastAAERebuild is the last successful AAE-rebuild Job.
	// +optional
	LastAAERebuild *metav1.Time `json:"lastAAERebuild,omitempty"`
	// Maintenance reports the latest maintenance Jobs member by member.
	// +optional
	Maintenance *MaintenanceStatus `json:"maintenance,omitempty"`
	// +optional
	Autoscaler *AutoscalerStatus `json:"autoscaler,omitempty"`
}

// KVCluster is a levee key-value cluster.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=kvc,categories=levee
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40",message="KVCluster names are limited to 40 characters so that child names such as <name>-compact-0 and <name>-aae-rebuild fit Kubernetes limits"
// Scale-in is refused while a ring change runs (the operator reports one, or the stored
// replicas already differ from the settled membership: a change the operator has not picked
// up yet), except a scale-in that does not go below the published membership (taking back a
// scale-out not published yet) and the one back to the size the running transition started
// from (taking it back).
// +kubebuilder:validation:XValidation:rule="self.spec.replicas >= oldSelf.spec.replicas || !has(oldSelf.status) || (has(oldSelf.status.members) && self.spec.replicas >= size(oldSelf.status.members)) || (has(oldSelf.status.transition) && self.spec.replicas == oldSelf.status.transition.fromMembers) || ((!has(oldSelf.status.ringChangeInProgress) || !oldSelf.status.ringChangeInProgress) && (!has(oldSelf.status.members) || size(oldSelf.status.members) == oldSelf.spec.replicas))",message="cannot scale in while a ring change is in progress (status.transition, status.leavingMembers): wait until it has finished, or set replicas to status.transition.fromMembers to take it back"
type KVCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	Spec   KVClusterSpec   `json:"spec,omitempty"`
	Status KVClusterStatus `json:"status,omitempty"`
}

// KVClusterList contains a list of KVCluster.
// +kubebuilder:object:root=true
type KVClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&KVCluster{}, &KVClusterList{})
}
