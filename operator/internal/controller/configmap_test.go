package controller

import (
	"strings"
	"testing"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func TestBuildConfigMap(t *testing.T) {
	cases := []struct {
		name     string
		mutate   func(*kvv1.KVCluster)
		want     []string
		notWant  []string
		nMembers int
	}{
		{name: "defaults", nMembers: 3,
			want: []string{"ring_size = 64\n", "n_val = 3\n", "sync_on_write = false\n", "journal_segment_bytes = 268435456\n",
				"compression_method = \"none\"\n", "compression_point = \"on_receipt\"\n",
				"[compaction]\nscheduler = \"external\"\n", "single_file_percent = 25\n", "max_run_percent = 75\n", "max_run_length = 4\n",
				`members_file = "/etc/levee/members.json"`, "[membership]\nmembers = [\n  \"kv-0.kv-headless.ns.svc:8087\",\n  \"kv-1.kv-headless.ns.svc:8087\",\n  \"kv-2.kv-headless.ns.svc:8087\",\n]\n"},
			// The schedule belongs to the operator's CronJobs, not to the node's file.
			notWant: []string{"[tls]", "window_start_hour", "window_end_hour", "runs_per_day", "time_zone"}},
		{name: "engine settings and wrap-around window", nMembers: 5, mutate: func(c *kvv1.KVCluster) {
			c.Spec.Replicas = 5
			c.Spec.RingSize = 256
			c.Spec.NVal = 5
			c.Spec.Engine.SyncOnWrite = true
			c.Spec.Engine.JournalSegmentBytes = 1 << 29
			c.Spec.Engine.Compression = "zstd"
			c.Spec.Engine.CompressionPoint = "onCompact"
			c.Spec.Compaction.WindowStartHour = i32(22)
			c.Spec.Compaction.WindowEndHour = i32(4)
			c.Spec.Compaction.TimeZone = "America/New_York"
		}, want: []string{"ring_size = 256\n", "n_val = 5\n", "sync_on_write = true\n", "journal_segment_bytes = 536870912\n",
			"compression_method = \"zstd\"\n", "compression_point = \"on_compact\"\n",
			`"kv-4.kv-headless.ns.svc:8087"`},
			notWant: []string{"= 22", "America/New_York"}},
		{name: "tls paths", nMembers: 3, mutate: func(c *kvv1.KVCluster) { c.Spec.TLS.Enabled = true },
			want: []string{"[tls]\n", `cert_file = "/etc/levee/tls/tls.crt"`, `ca_file = "/etc/levee/tls/ca.crt"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(tc.mutate)
			cm := BuildConfigMap(c, "")
			if cm.Name != "kv-config" || cm.Namespace != "ns" || cm.Labels["app.kubernetes.io/instance"] != "kv" {
				t.Errorf("meta = %+v", cm.ObjectMeta)
			}
			toml := cm.Data["levee.toml"]
			for _, w := range tc.want {
				if !strings.Contains(toml, w) {
					t.Errorf("levee.toml lacks %q:\n%s", w, toml)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(toml, w) {
					t.Errorf("levee.toml should not contain %q", w)
				}
			}
			members := strings.Split(strings.TrimSuffix(cm.Data["members"], "\n"), "\n")
			if len(members) != tc.nMembers || members[0] != "kv-0.kv-headless.ns.svc:8087" {
				t.Errorf("members = %q", members)
			}
		})
	}
}

// Membership and maintenance-schedule changes must not restart members; engine changes must.
func TestConfigHash(t *testing.T) {
	base := ConfigHash(cluster(nil))
	cases := []struct {
		name    string
		mutate  func(*kvv1.KVCluster)
		changes bool
	}{
		{"replicas (membership only)", func(c *kvv1.KVCluster) { c.Spec.Replicas = 7 }, false},
		{"image", func(c *kvv1.KVCluster) { c.Spec.Image = "levee:2" }, false},
		{"syncOnWrite", func(c *kvv1.KVCluster) { c.Spec.Engine.SyncOnWrite = true }, true},
		{"segment size", func(c *kvv1.KVCluster) { c.Spec.Engine.JournalSegmentBytes = 1 << 20 }, true},
		{"compression", func(c *kvv1.KVCluster) { c.Spec.Engine.Compression = "lz4" }, true},
		{"compaction window", func(c *kvv1.KVCluster) {
			c.Spec.Compaction.WindowStartHour, c.Spec.Compaction.WindowEndHour = i32(22), i32(4)
		}, false},
		{"runsPerDay", func(c *kvv1.KVCluster) { c.Spec.Compaction.RunsPerDay = i32(12) }, false},
		{"compaction timeZone", func(c *kvv1.KVCluster) { c.Spec.Compaction.TimeZone = "Europe/Berlin" }, false},
		{"AAE schedule", func(c *kvv1.KVCluster) { c.Spec.AntiEntropy.RebuildSchedule = "5 1 * * *" }, false},
		{"thresholds", func(c *kvv1.KVCluster) { c.Spec.Compaction.Thresholds.MaxRunPercent = i32(80) }, true},
		{"tls", func(c *kvv1.KVCluster) { c.Spec.TLS.Enabled = true }, true},
	}
	for _, tc := range cases {
		if got := ConfigHash(cluster(tc.mutate)) != base; got != tc.changes {
			t.Errorf("%s: hash changed = %v, want %v", tc.name, got, tc.changes)
		}
	}
}
