package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetDefaults fills unset fields with the same defaults the CRD schema applies
// (the API server defaults objects it stores; this function lets pure builders
// and unit tests work on objects that never went through it). A test creates a
// minimal KVCluster in a real API server and checks both agree.
func SetDefaults(c *KVCluster) {
	s := &c.Spec
	if s.Replicas == 0 {
		s.Replicas = DefaultReplicas
	}
	if s.Image == "" {
		s.Image = DefaultImage
	}
	if s.ImagePullPolicy == "" {
		s.ImagePullPolicy = "IfNotPresent"
	}
	if s.RingSize == 0 {
		s.RingSize = DefaultRingSize
	}
	if s.NVal == 0 {
		s.NVal = DefaultNVal
	}
	if s.Storage.Profile == "" {
		s.Storage.Profile = StorageNVMe
	}
	if s.Storage.Size == nil {
		q := resource.MustParse(DefaultStorageSize)
		s.Storage.Size = &q
	}
	if s.Engine.JournalSegmentBytes == 0 {
		s.Engine.JournalSegmentBytes = DefaultJournalSegmentBytes
	}
	if s.Engine.Compression == "" {
		s.Engine.Compression = "none"
	}
	if s.Engine.CompressionPoint == "" {
		s.Engine.CompressionPoint = "onReceipt"
	}
	cp := &s.Compaction
	setInt(&cp.WindowStartHour, DefaultWindowStartHour)
	setInt(&cp.WindowEndHour, DefaultWindowEndHour)
	setInt(&cp.RunsPerDay, DefaultRunsPerDay)
	if cp.TimeZone == "" {
		cp.TimeZone = DefaultTimeZone
	}
	setInt(&cp.Thresholds.SingleFilePercent, DefaultSingleFilePercent)
	setInt(&cp.Thresholds.MaxRunPercent, DefaultMaxRunPercent)
	if cp.Thresholds.MaxRunLength == 0 {
		cp.Thresholds.MaxRunLength = DefaultMaxRunLength
	}
	setInt(&cp.BusyPercent, DefaultCompactionBusyPercent)
	setInt(&cp.Nice, DefaultCompactionNice)
	setInt(&s.AntiEntropy.RebuildBusyPercent, DefaultRebuildBusyPercent)
	if s.Handoff.MaxBytesPerSec == nil {
		v := DefaultHandoffMaxBytesPerSec
		s.Handoff.MaxBytesPerSec = &v
	}
	setInt(&s.Handoff.BusyPercent, DefaultHandoffBusyPercent)
	if s.AntiEntropy.RebuildSchedule == "" {
		s.AntiEntropy.RebuildSchedule = DefaultRebuildSchedule
	}
	if s.AntiEntropy.TimeZone == "" {
		s.AntiEntropy.TimeZone = DefaultTimeZone
	}
	if a := s.Autoscaling; a != nil {
		if a.MinReplicas == 0 {
			a.MinReplicas = 3
		}
		if a.MaxReplicas == 0 {
			a.MaxReplicas = 12
		}
		if a.CPUTarget == 0 {
			a.CPUTarget = DefaultCPUTarget
		}
		if a.DiskBusyTarget == 0 {
			a.DiskBusyTarget = DefaultDiskBusyTarget
		}
		if a.ScaleUpStabilization == nil {
			a.ScaleUpStabilization = &metav1.Duration{Duration: 5 * time.Minute}
		}
		if a.ScaleDownStabilization == nil {
			a.ScaleDownStabilization = &metav1.Duration{Duration: 30 * time.Minute}
		}
	}
	if r := s.TLS.IssuerRef; r != nil {
		if r.Kind == "" {
			r.Kind = "Issuer"
		}
		if r.Group == "" {
			r.Group = "cert-manager.io"
		}
	}
	if s.Monitoring.ServiceMonitor == nil {
		t := true
		s.Monitoring.ServiceMonitor = &t
	}
	if s.Scheduling.TerminationGracePeriodSeconds == nil {
		g := int64(120)
		s.Scheduling.TerminationGracePeriodSeconds = &g
	}
}

func setInt(p **int32, v int32) {
	if *p == nil {
		*p = &v
	}
}
