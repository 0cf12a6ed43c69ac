package envtest

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// TestInvalidSpecsRejected: the API server (CRD schema + CEL rules) rejects bad specs
// with messages a user understands.
func TestInvalidSpecsRejected(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*kvv1.KVCluster)
		want   []string
	}{
		{"ringSize 100", func(c *kvv1.KVCluster) { c.Spec.RingSize = 100 },
			[]string{"spec.ringSize", "ringSize must be a power of two between 8 and 4096, such as 64 or 128"}},
		{"ringSize 4", func(c *kvv1.KVCluster) { c.Spec.RingSize = 4 },
			[]string{"ringSize must be a power of two between 8 and 4096"}},
		{"nVal 5 with 3 replicas", func(c *kvv1.KVCluster) { c.Spec.NVal = 5; c.Spec.Replicas = 3 },
			[]string{"nVal must be less than or equal to replicas"}},
		{"nVal 5 with default replicas", func(c *kvv1.KVCluster) { c.Spec.NVal = 5 },
			[]string{"nVal must be less than or equal to replicas"}},
		{"compaction hour 24", func(c *kvv1.KVCluster) { c.Spec.Compaction.WindowStartHour = int32p(24) },
			[]string{"compaction.windowStartHour must be an hour of the day between 0 and 23"}},
		{"compaction end hour -1", func(c *kvv1.KVCluster) { c.Spec.Compaction.WindowEndHour = int32p(-1) },
			[]string{"compaction.windowEndHour must be an hour of the day between 0 and 23"}},
		{"thresholds out of order", func(c *kvv1.KVCluster) {
			c.Spec.Compaction.Thresholds.SingleFilePercent = int32p(80)
			c.Spec.Compaction.Thresholds.MaxRunPercent = int32p(60)
		}, []string{"singleFilePercent must be less than or equal to compaction.thresholds.maxRunPercent"}},
		{"single-file threshold above the default run threshold", func(c *kvv1.KVCluster) {
			c.Spec.Compaction.Thresholds.SingleFilePercent = int32p(90)
		}, []string{"singleFilePercent must be less than or equal to compaction.thresholds.maxRunPercent"}},
		{"autoscaling min > max", func(c *kvv1.KVCluster) {
			c.Spec.Autoscaling = &kvv1.AutoscalingSpec{MinReplicas: 6, MaxReplicas: 4}
		}, []string{"autoscaling.minReplicas must be less than or equal to autoscaling.maxReplicas"}},
		{"autoscaling without prometheus", func(c *kvv1.KVCluster) {
			c.Spec.Autoscaling = &kvv1.AutoscalingSpec{Enabled: true}
		}, []string{"autoscaling.prometheusURL is required when autoscaling.enabled is true"}},
		{"autoscaling min below nVal", func(c *kvv1.KVCluster) {
			c.Spec.Autoscaling = &kvv1.AutoscalingSpec{Enabled: true, MinReplicas: 2, MaxReplicas: 5, PrometheusURL: "http://prom:9090"}
		}, []string{"autoscaling.minReplicas must be at least nVal"}},
		{"bad cron", func(c *kvv1.KVCluster) { c.Spec.AntiEntropy.RebuildSchedule = "every sunday" },
			[]string{"antiEntropy.rebuildSchedule must be a 5-field cron expression"}},
		{"unknown storage profile", func(c *kvv1.KVCluster) { c.Spec.Storage.Profile = "ssd" },
			[]string{`spec.storage.profile: Unsupported value: "ssd"`, `"nvme"`, `"hdd"`}},
		{"journal segment too small", func(c *kvv1.KVCluster) { c.Spec.Engine.JournalSegmentBytes = 1000 },
			[]string{"engine.journalSegmentBytes must be between 1 MiB"}},
		{"unknown compression", func(c *kvv1.KVCluster) { c.Spec.Engine.Compression = "gzip" },
			[]string{`spec.engine.compression: Unsupported value: "gzip"`, `"lz4"`, `"zstd"`}},
		{"unknown compression point", func(c *kvv1.KVCluster) { c.Spec.Engine.CompressionPoint = "later" },
			[]string{`spec.engine.compressionPoint: Unsupported value: "later"`, `"onCompact"`}},
		{"zero replicas", func(c *kvv1.KVCluster) { c.Spec.Replicas = -1 },
			[]string{"spec.replicas"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}}
			tc.mutate(c)
			expectInvalid(t, k8sClient.Create(ctx, c), tc.want...)
		})
	}
	t.Run("name too long", func(t *testing.T) {
		c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 41), Namespace: ns}}
		expectInvalid(t, k8sClient.Create(ctx, c), "KVCluster names are limited to 40 characters")
	})
	t.Run("a valid spec passes", func(t *testing.T) {
		c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: ns}}
		c.Spec.RingSize = 128
		c.Spec.NVal = 5
		c.Spec.Replicas = 5
		c.Spec.Compaction.WindowStartHour = int32p(22)
		c.Spec.Compaction.WindowEndHour = int32p(4)
		if err := k8sClient.Create(ctx, c); err != nil {
			t.Fatalf("valid spec rejected: %v", err)
		}
	})
}

// TestImmutableFields: ringSize and the storage profile/size/class cannot change.
func TestImmutableFields(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "imm", nil)
	cases := []struct {
		name   string
		mutate func(*kvv1.KVCluster)
		want   string
	}{
		{"ringSize 64 -> 128", func(c *kvv1.KVCluster) { c.Spec.RingSize = 128 }, "ringSize is immutable"},
		{"profile nvme -> hdd", func(c *kvv1.KVCluster) { c.Spec.Storage.Profile = kvv1.StorageHDD }, "storage.profile is immutable"},
		{"size 100Gi -> 200Gi", func(c *kvv1.KVCluster) { q := resource.MustParse("200Gi"); c.Spec.Storage.Size = &q }, "storage.size is immutable"},
		{"storage class set", func(c *kvv1.KVCluster) { s := "gp3"; c.Spec.Storage.StorageClassName = &s }, "storage.storageClassName is immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectInvalid(t, updateCluster(t, ns, "imm", tc.mutate), tc.want)
		})
	}
	t.Run("mutable fields still change", func(t *testing.T) {
		if err := updateCluster(t, ns, "imm", func(c *kvv1.KVCluster) {
			c.Spec.Replicas = 4
			c.Spec.Engine.SyncOnWrite = true
		}); err != nil {
			t.Fatalf("update of mutable fields rejected: %v", err)
		}
	})
}
