package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
			// The schedule belongs to the operator's CronJobs, not to the node's file; pacing at
			// the node's defaults is left out.
			notWant: []string{"[tls]", "window_start_hour", "window_end_hour", "runs_per_day", "time_zone",
				"busy_percent", "[handoff]", "[aae]", "max_bytes_per_sec", "nice"}},
		{name: "pacing away from the defaults", nMembers: 3, mutate: func(c *kvv1.KVCluster) {
			c.Spec.Compaction.BusyPercent = i32(40)
			c.Spec.AntiEntropy.RebuildBusyPercent = i32(25)
			c.Spec.Handoff.BusyPercent = i32(30)
		}, want: []string{"max_run_length = 4\nbusy_percent = 40\n",
			"[handoff]\nmax_bytes_per_sec = 33554432\nbusy_percent = 30\n", "[aae]\nrebuild_busy_percent = 25\n"}},
		// 0 is a value of its own (compact at the caller's priority), not "unset".
		{name: "compaction at the caller's priority", nMembers: 3, mutate: func(c *kvv1.KVCluster) {
			c.Spec.Compaction.Nice = i32(0)
		}, want: []string{"max_run_length = 4\nnice = 0\n"}, notWant: []string{"busy_percent", "[aae]"}},
		{name: "only the handoff byte limit", nMembers: 3, mutate: func(c *kvv1.KVCluster) {
			v := int64(0)
			c.Spec.Handoff.MaxBytesPerSec = &v
		}, want: []string{"[handoff]\nmax_bytes_per_sec = 0\nbusy_percent = 10\n"},
			notWant: []string{"[aae]", "max_run_length = 4\nbusy_percent"}},
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
		{"compaction busy share", func(c *kvv1.KVCluster) { c.Spec.Compaction.BusyPercent = i32(50) }, true},
		{"rebuild busy share", func(c *kvv1.KVCluster) { c.Spec.AntiEntropy.RebuildBusyPercent = i32(50) }, true},
		{"handoff busy share", func(c *kvv1.KVCluster) { c.Spec.Handoff.BusyPercent = i32(50) }, true},
		{"compaction nice", func(c *kvv1.KVCluster) { c.Spec.Compaction.Nice = i32(19) }, true},
		{"compaction nice at its default", func(c *kvv1.KVCluster) { c.Spec.Compaction.Nice = i32(kvv1.DefaultCompactionNice) }, false},
		// A cluster stored before the pacing fields existed (unset) and one at their defaults
		// render the same file: upgrading the operator restarts no member.
		{"pacing unset", func(c *kvv1.KVCluster) {
			c.Spec.Compaction.BusyPercent, c.Spec.AntiEntropy.RebuildBusyPercent = nil, nil
			c.Spec.Compaction.Nice = nil
			c.Spec.Handoff = kvv1.HandoffSpec{}
		}, false},
	}
	for _, tc := range cases {
		if got := ConfigHash(cluster(tc.mutate)) != base; got != tc.changes {
			t.Errorf("%s: hash changed = %v, want %v", tc.name, got, tc.changes)
		}
	}
}

// The engine part of levee.toml, with every setting the CRD carries away from its default, is
// a file a real `levee serve` starts with: the node refuses unknown keys and out-of-range
// values, so a misspelt or misplaced setting fails here rather than in a crash-looping pod.
func TestARealNodeStartsWithTheRenderedSettings(t *testing.T) {
	bin := leveeBin(t)
	c := cluster(func(c *kvv1.KVCluster) {
		c.Spec.Engine.SyncOnWrite = true
		c.Spec.Engine.JournalSegmentBytes = 1 << 20
		c.Spec.Engine.Compression = "zstd"
		c.Spec.Engine.CompressionPoint = "onCompact"
		c.Spec.Compaction.Thresholds.SingleFilePercent = i32(30)
		c.Spec.Compaction.BusyPercent = i32(40)
		c.Spec.Compaction.Nice = i32(19)
		c.Spec.AntiEntropy.RebuildBusyPercent = i32(25)
		c.Spec.Handoff.BusyPercent = i32(30)
		v := int64(0)
		c.Spec.Handoff.MaxBytesPerSec = &v
	})
	dir := t.TempDir()
	engine := EngineTOML(c)
	for _, w := range []string{"[compaction]", "busy_percent = 40", "nice = 19", "[handoff]", "[aae]", "compression_method = \"zstd\""} {
		if !strings.Contains(engine, w) {
			t.Fatalf("the rendered settings lack %q:\n%s", w, engine)
		}
	}
	// The members file the operator mounts is not here: point at one that does not exist yet
	// (the node then runs a provisional ring, as a member does before the operator's list).
	toml := strings.Replace(engine, ConfigDir+"/"+MembersJSONFileName, filepath.Join(dir, "members.json"), 1)
	cfg := filepath.Join(dir, "levee.toml")
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	metricsPort := freePort(t)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", metricsPort))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	prober := MetricsProber{Port: int32(metricsPort), Timeout: 2 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("levee serve refused the rendered levee.toml (%v):\n%s\n--- levee.toml:\n%s", err, stderr.String(), toml)
		default:
		}
		if r := prober.Probe(context.Background(), []string{"127.0.0.1:8087"})["127.0.0.1:8087"]; r.Err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("levee serve not answering after 30 s:\n%s", stderr.String())
		}
	}
}
