package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestSetDefaultsKeepsUserValues(t *testing.T) {
	zero, seven := int32(0), int32(7)
	q := resource.MustParse("1Ti")
	f := false
	cases := []struct {
		name  string
		in    KVCluster
		check func(*testing.T, KVCluster)
	}{
		{"empty gets documented defaults", KVCluster{}, func(t *testing.T, c KVCluster) {
			s := c.Spec
			if s.Replicas != 3 || s.RingSize != 64 || s.NVal != 3 || s.Image != "levee:dev" || s.ImagePullPolicy != "IfNotPresent" ||
				s.Storage.Profile != StorageNVMe || s.Storage.Size.String() != "100Gi" || *s.Compaction.WindowEndHour != 6 ||
				*s.Compaction.RunsPerDay != 4 || s.AntiEntropy.RebuildSchedule != "0 7 * * 0" || !*s.Monitoring.ServiceMonitor ||
				s.Autoscaling != nil {
				t.Errorf("defaults = %+v", s)
			}
		}},
		{"explicit zero hour and runs stay zero", KVCluster{Spec: KVClusterSpec{Compaction: CompactionSpec{WindowEndHour: &zero, RunsPerDay: &zero}}},
			func(t *testing.T, c KVCluster) {
				if *c.Spec.Compaction.WindowEndHour != 0 || *c.Spec.Compaction.RunsPerDay != 0 {
					t.Errorf("zero values overwritten: %+v", c.Spec.Compaction)
				}
			}},
		{"user values kept", KVCluster{Spec: KVClusterSpec{Replicas: 9, RingSize: 256, Storage: StorageSpec{Profile: StorageHDD, Size: &q},
			Compaction: CompactionSpec{WindowStartHour: &seven}, Monitoring: MonitoringSpec{ServiceMonitor: &f}}},
			func(t *testing.T, c KVCluster) {
				s := c.Spec
				if s.Replicas != 9 || s.RingSize != 256 || s.Storage.Profile != StorageHDD || s.Storage.Size.String() != "1Ti" ||
					*s.Compaction.WindowStartHour != 7 || *s.Monitoring.ServiceMonitor {
					t.Errorf("user values overwritten: %+v", s)
				}
			}},
		{"autoscaling block gets its defaults", KVCluster{Spec: KVClusterSpec{Autoscaling: &AutoscalingSpec{Enabled: true}}},
			func(t *testing.T, c KVCluster) {
				a := c.Spec.Autoscaling
				if a.MinReplicas != 3 || a.MaxReplicas != 12 || a.CPUTarget != 70 || a.DiskBusyTarget != 80 ||
					a.ScaleUpStabilization.Duration.String() != "5m0s" || a.ScaleDownStabilization.Duration.String() != "30m0s" {
					t.Errorf("autoscaling defaults = %+v", a)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.in
			SetDefaults(&c)
			tc.check(t, c)
		})
	}
}
