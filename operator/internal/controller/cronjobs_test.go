package controller

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// command is the admin command line of a maintenance pod (one member per pod).
func command(cj *batchv1.CronJob) string {
	ps := cj.Spec.JobTemplate.Spec.Template.Spec
	if len(ps.InitContainers) != 0 || len(ps.Containers) != 1 {
		return fmt.Sprintf("want 1 container and no init containers, got %d + %d", len(ps.InitContainers), len(ps.Containers))
	}
	c := ps.Containers[0]
	return strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
}

// checkIndexedJob asserts the one-member-per-index shape every maintenance Job has.
func checkIndexedJob(t *testing.T, cj *batchv1.CronJob, members int32, memberTimeout int64) {
	t.Helper()
	js := cj.Spec.JobTemplate.Spec
	if js.CompletionMode == nil || *js.CompletionMode != batchv1.IndexedCompletion ||
		js.Completions == nil || *js.Completions != members || js.Parallelism == nil || *js.Parallelism != 1 {
		t.Errorf("%s: want an Indexed Job of %d completions, parallelism 1; got mode %v completions %v parallelism %v",
			cj.Name, members, js.CompletionMode, js.Completions, js.Parallelism)
	}
	if js.BackoffLimitPerIndex == nil || *js.BackoffLimitPerIndex != 1 || js.BackoffLimit != nil {
		t.Errorf("%s: a failing member must not fail the others: backoffLimitPerIndex %v backoffLimit %v", cj.Name, js.BackoffLimitPerIndex, js.BackoffLimit)
	}
	if js.Suspend == nil || !*js.Suspend {
		t.Errorf("%s: Jobs must be created suspended (the operator's gate resumes them)", cj.Name)
	}
	ps := js.Template.Spec
	if ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("%s: restartPolicy %s, want Never (required by backoffLimitPerIndex)", cj.Name, ps.RestartPolicy)
	}
	if ps.ActiveDeadlineSeconds == nil || *ps.ActiveDeadlineSeconds != memberTimeout+podDeadlineMargin {
		t.Errorf("%s: pod deadline %v, want %d", cj.Name, ps.ActiveDeadlineSeconds, memberTimeout+podDeadlineMargin)
	}
	env := ps.Containers[0].Env
	if len(env) == 0 || env[0].Name != MemberIndexEnv || env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef == nil ||
		env[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("%s: env = %+v, want %s from the completion-index annotation", cj.Name, env, MemberIndexEnv)
	}
}

func TestBuildCompactionCronJobs(t *testing.T) {
	cases := []struct {
		name      string
		mutate    func(*kvv1.KVCluster)
		schedules []string
		deadline  int64
		timeout   int64
		tz        string
		members   int32
	}{
		// 100 GiB at 100 MiB/s = 1024 s, + 300 s overhead.
		{name: "defaults", schedules: []string{"0 0,3 * * *", "30 1,4 * * *"}, deadline: 5400, timeout: 1324, tz: "UTC", members: 3},
		{name: "22->04 wraps midnight, 4 runs, time zone", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Compaction.WindowStartHour, c.Spec.Compaction.WindowEndHour = i32(22), i32(4)
			c.Spec.Compaction.TimeZone = "Asia/Tokyo"
			c.Spec.Replicas = 5
		}, schedules: []string{"0 1,22 * * *", "30 2,23 * * *"}, deadline: 5400, timeout: 1324, tz: "Asia/Tokyo", members: 5},
		// 100 GiB on HDD at 25 MiB/s = 4096 s + 300 s; the 90-minute slot does not cap it.
		{name: "hdd is sized at the slower rate", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Storage.Profile = kvv1.StorageHDD
		}, schedules: []string{"0 0,3 * * *", "30 1,4 * * *"}, deadline: 5400, timeout: 4396, tz: "UTC", members: 3},
		// 2 TiB on HDD needs 83,886 s: capped at the 15-minute slot minus the pod margin.
		{name: "a big volume is capped by the slot", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Storage.Profile = kvv1.StorageHDD
			q := resource.MustParse("2Ti")
			c.Spec.Storage.Size = &q
			c.Spec.Compaction.WindowStartHour, c.Spec.Compaction.WindowEndHour = i32(10), i32(11)
		}, schedules: []string{"0,15,30,45 10 * * *"}, deadline: 900, timeout: 840, tz: "UTC", members: 3},
		{name: "single member", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Replicas, c.Spec.NVal = 1, 1
			c.Spec.Compaction.RunsPerDay = i32(1)
		}, schedules: []string{"0 0 * * *"}, deadline: 6 * 3600, timeout: 1324, tz: "UTC", members: 1},
		// Paced at 50 %: 2048 s + 300 s, inside the 90-minute slot.
		{name: "a paced compaction gets a longer deadline", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Compaction.BusyPercent = i32(50)
		}, schedules: []string{"0 0,3 * * *", "30 1,4 * * *"}, deadline: 5400, timeout: 2348, tz: "UTC", members: 3},
		{name: "runsPerDay 0 disables compaction", mutate: func(c *kvv1.KVCluster) { c.Spec.Compaction.RunsPerDay = i32(0) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(tc.mutate)
			cjs, err := BuildCompactionCronJobs(c)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, cj := range cjs {
				got = append(got, cj.Spec.Schedule)
				if cj.Name != fmt.Sprintf("kv-compact-%d", i) || cj.Labels[LabelMaintenance] != MaintenanceCompaction {
					t.Errorf("name %s labels %v", cj.Name, cj.Labels)
				}
				if cj.Spec.JobTemplate.Labels[LabelMaintenance] != MaintenanceCompaction || cj.Spec.JobTemplate.Labels["app.kubernetes.io/instance"] != "kv" {
					t.Errorf("Job labels %v must name the kind and the cluster (the gate finds Jobs by them)", cj.Spec.JobTemplate.Labels)
				}
				if *cj.Spec.TimeZone != tc.tz || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
					*cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds != tc.deadline {
					t.Errorf("tz %s policy %s deadline %d", *cj.Spec.TimeZone, cj.Spec.ConcurrencyPolicy, *cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds)
				}
				want := "levee admin compact-journal --addr kv-$(LEVEE_MEMBER_INDEX).kv-headless.ns.svc:8087 --timeout " + strconv.FormatInt(tc.timeout, 10)
				if s := command(cj); s != want {
					t.Errorf("command = %q\nwant      %q", s, want)
				}
				checkIndexedJob(t, cj, tc.members, tc.timeout)
			}
			if !reflect.DeepEqual(got, tc.schedules) {
				t.Errorf("schedules = %q, want %q", got, tc.schedules)
			}
		})
	}
}

func TestBuildAAECronJob(t *testing.T) {
	cases := []struct {
		name     string
		mutate   func(*kvv1.KVCluster)
		schedule string
		tz       string
		flag     bool
		timeout  int64
		members  int32
	}{
		// The rebuild works 10 % of the time by default: 1024 s of work for 100 GiB, ten times.
		{name: "defaults", schedule: "0 7 * * 0", tz: "UTC", timeout: 10240 + 300, members: 3},
		{name: "unpaced rebuild", mutate: func(c *kvv1.KVCluster) { c.Spec.AntiEntropy.RebuildBusyPercent = i32(100) },
			schedule: "0 7 * * 0", tz: "UTC", timeout: 1324, members: 3},
		{name: "journal check, custom schedule, 1 TiB NVMe, 6 members", mutate: func(c *kvv1.KVCluster) {
			c.Spec.AntiEntropy.RebuildSchedule = "15 2 * * 1,4"
			c.Spec.AntiEntropy.TimeZone = "Europe/Paris"
			c.Spec.AntiEntropy.JournalCheck = true
			c.Spec.Replicas = 6
			q := resource.MustParse("1Ti")
			c.Spec.Storage.Size = &q
			c.Spec.AntiEntropy.RebuildBusyPercent = i32(50)
		}, schedule: "15 2 * * 1,4", tz: "Europe/Paris", flag: true, timeout: 2*10486 + 300, members: 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cj := BuildAAECronJob(cluster(tc.mutate))
			if cj.Name != "kv-aae-rebuild" || cj.Spec.Schedule != tc.schedule || *cj.Spec.TimeZone != tc.tz || cj.Labels[LabelMaintenance] != MaintenanceAAE {
				t.Errorf("cronjob %s %q %s %v", cj.Name, cj.Spec.Schedule, *cj.Spec.TimeZone, cj.Labels)
			}
			want := "levee admin aae-rebuild --addr kv-$(LEVEE_MEMBER_INDEX).kv-headless.ns.svc:8087 --timeout " + strconv.FormatInt(tc.timeout, 10)
			if tc.flag {
				want += " --journal-check"
			}
			if s := command(cj); s != want {
				t.Errorf("command = %q\nwant      %q", s, want)
			}
			checkIndexedJob(t, cj, tc.members, tc.timeout)
			// Every member twice (one retry each), one after another.
			wantDeadline := int64(tc.members) * 2 * (tc.timeout + podDeadlineMargin)
			if d := cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d != wantDeadline {
				t.Errorf("AAE Job deadline = %v, want %d", d, wantDeadline)
			}
		})
	}
}

func TestMemberTimeout(t *testing.T) {
	size := func(s string) func(*kvv1.KVCluster) {
		return func(c *kvv1.KVCluster) { q := resource.MustParse(s); c.Spec.Storage.Size = &q }
	}
	cases := []struct {
		name   string
		mutate func(*kvv1.KVCluster)
		limit  int64
		busy   int32
		want   int64
	}{
		{"100Gi nvme", nil, 0, 100, 1324},
		{"1Gi nvme: overhead dominates", size("1Gi"), 0, 100, 311},
		{"10Ti nvme", size("10Ti"), 0, 100, 104858 + 300},
		{"100Gi hdd", func(c *kvv1.KVCluster) { c.Spec.Storage.Profile = kvv1.StorageHDD }, 0, 100, 4396},
		{"capped by a slot", nil, 900, 100, 840},
		{"a tiny slot still leaves the minimum", nil, 90, 100, 60},
		// Paced work takes longer in proportion: 1024 s of work at 10 % is 10240 s.
		{"100Gi nvme at 10 % busy", nil, 0, 10, 10240 + 300},
		{"100Gi nvme at 30 % busy rounds up", nil, 0, 30, 3414 + 300},
		{"paced, still capped by a slot", nil, 900, 10, 840},
		{"a busy share out of range counts as unpaced", nil, 0, 0, 1324},
	}
	for _, tc := range cases {
		if got := MemberTimeout(cluster(tc.mutate), tc.limit, tc.busy); got != tc.want {
			t.Errorf("%s: MemberTimeout = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestMaintenanceJobsCarryTheMemberCertificateWithTLS(t *testing.T) {
	plain := BuildAAECronJob(cluster(nil))
	if v := plain.Spec.JobTemplate.Spec.Template.Spec.Volumes; len(v) != 0 {
		t.Errorf("no TLS: volumes = %v", v)
	}
	c := cluster(func(c *kvv1.KVCluster) { c.Spec.TLS.Enabled = true })
	jobs, err := BuildCompactionCronJobs(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, cj := range append(jobs, BuildAAECronJob(c)) {
		pod := cj.Spec.JobTemplate.Spec.Template.Spec
		if len(pod.Volumes) != 1 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "kv-tls" {
			t.Fatalf("%s: volumes = %+v", cj.Name, pod.Volumes)
		}
		for _, ct := range append(pod.InitContainers, pod.Containers...) {
			env := map[string]string{}
			for _, e := range ct.Env {
				env[e.Name] = e.Value
			}
			if env["LEVEE_TLS_CA"] != TLSDir+"/ca.crt" || env["LEVEE_CLIENT_TLS_CERT"] != TLSDir+"/tls.crt" || env["LEVEE_CLIENT_TLS_KEY"] != TLSDir+"/tls.key" {
				t.Errorf("%s/%s: env = %v", cj.Name, ct.Name, env)
			}
			if len(ct.VolumeMounts) != 1 || ct.VolumeMounts[0].MountPath != TLSDir || ct.VolumeMounts[0].Name != "tls" {
				t.Errorf("%s/%s: mounts = %v", cj.Name, ct.Name, ct.VolumeMounts)
			}
		}
	}
}

// cronField expands one field of a 5-field cron expression (numbers, lists, ranges, *, */n).
func cronField(t *testing.T, f string, lo, hi int) map[int]bool {
	t.Helper()
	out := map[int]bool{}
	for _, part := range strings.Split(f, ",") {
		step := 1
		if base, s, ok := strings.Cut(part, "/"); ok {
			var err error
			if step, err = strconv.Atoi(s); err != nil {
				t.Fatalf("cron field %q", f)
			}
			part = base
		}
		a, b := lo, hi
		if part != "*" {
			x, y, isRange := strings.Cut(part, "-")
			var err error
			if a, err = strconv.Atoi(x); err != nil {
				t.Fatalf("cron field %q", f)
			}
			b = a
			if isRange {
				if b, err = strconv.Atoi(y); err != nil {
					t.Fatalf("cron field %q", f)
				}
			}
		}
		for v := a; v <= b; v += step {
			out[v] = true
		}
	}
	return out
}

// weekMinutes lists the minutes of a week (0 = Sunday 00:00) a cron expression fires at
// (day-of-month and month are '*' in every schedule checked here).
func weekMinutes(t *testing.T, expr string) []int {
	t.Helper()
	f := strings.Fields(expr)
	if len(f) != 5 || f[2] != "*" || f[3] != "*" {
		t.Fatalf("unsupported cron expression %q", expr)
	}
	mins, hours, days := cronField(t, f[0], 0, 59), cronField(t, f[1], 0, 23), cronField(t, f[4], 0, 6)
	var out []int
	for d := 0; d < 7; d++ {
		for h := 0; h < 24; h++ {
			for m := 0; m < 60; m++ {
				if days[d] && hours[h] && mins[m] {
					out = append(out, d*1440+h*60+m)
				}
			}
		}
	}
	return out
}

// The default AAE rebuild must start neither in a minute a default compaction run starts in
// nor while one may still run (within its slot): both work on every member.
func TestDefaultAAEScheduleAvoidsDefaultCompaction(t *testing.T) {
	c := cluster(nil)
	compactions, err := BuildCompactionCronJobs(c)
	if err != nil {
		t.Fatal(err)
	}
	busy := map[int]string{}
	for _, cj := range compactions {
		slot := int(*cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds / 60)
		for _, start := range weekMinutes(t, cj.Spec.Schedule) {
			for m := start; m < start+slot; m++ {
				busy[m%(7*1440)] = fmt.Sprintf("%s (%q, started %dd %02d:%02d)", cj.Name, cj.Spec.Schedule, start/1440, start%1440/60, start%60)
			}
		}
	}
	aae := BuildAAECronJob(c)
	starts := weekMinutes(t, aae.Spec.Schedule)
	if len(starts) == 0 {
		t.Fatalf("AAE schedule %q never fires", aae.Spec.Schedule)
	}
	for _, m := range starts {
		if who, ok := busy[m]; ok {
			t.Errorf("default AAE rebuild (%q) starts on day %d at %02d:%02d while compaction %s runs", aae.Spec.Schedule, m/1440, m%1440/60, m%60, who)
		}
	}
}
