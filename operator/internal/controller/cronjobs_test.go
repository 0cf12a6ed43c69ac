package controller

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// steps returns the admin command lines of a maintenance pod in execution order.
func steps(cj *batchv1.CronJob) []string {
	ps := cj.Spec.JobTemplate.Spec.Template.Spec
	var out []string
	for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
		out = append(out, strings.Join(append(c.Command, c.Args...), " "))
	}
	return out
}

func TestBuildCompactionCronJobs(t *testing.T) {
	cases := []struct {
		name      string
		mutate    func(*kvv1.KVCluster)
		schedules []string
		deadline  int64
		tz        string
		members   int
	}{
		{name: "defaults", schedules: []string{"0 0,3 * * *", "30 1,4 * * *"}, deadline: 5400, tz: "UTC", members: 3},
		{name: "22->04 wraps midnight, 4 runs, time zone", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Compaction.WindowStartHour, c.Spec.Compaction.WindowEndHour = i32(22), i32(4)
			c.Spec.Compaction.TimeZone = "Asia/Tokyo"
			c.Spec.Replicas = 5
		}, schedules: []string{"0 1,22 * * *", "30 2,23 * * *"}, deadline: 5400, tz: "Asia/Tokyo", members: 5},
		{name: "single member has no init steps", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Replicas, c.Spec.NVal = 1, 1
			c.Spec.Compaction.RunsPerDay = i32(1)
		}, schedules: []string{"0 0 * * *"}, deadline: 6 * 3600, tz: "UTC", members: 1},
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
				if *cj.Spec.TimeZone != tc.tz || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent ||
					*cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds != tc.deadline {
					t.Errorf("tz %s policy %s deadline %d", *cj.Spec.TimeZone, cj.Spec.ConcurrencyPolicy, *cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds)
				}
				var want []string
				for m := 0; m < tc.members; m++ {
					want = append(want, fmt.Sprintf("levee admin compact-journal --addr kv-%d.kv-headless.ns.svc:8087", m))
				}
				if s := steps(cj); !reflect.DeepEqual(s, want) {
					t.Errorf("steps = %q\nwant %q", s, want)
				}
				ps := cj.Spec.JobTemplate.Spec.Template.Spec
				if len(ps.InitContainers) != tc.members-1 || ps.RestartPolicy != corev1.RestartPolicyOnFailure {
					t.Errorf("%d init containers, restart %s", len(ps.InitContainers), ps.RestartPolicy)
				}
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
	}{
		{name: "defaults", schedule: "0 3 * * 0", tz: "UTC"},
		{name: "journal check, custom schedule", mutate: func(c *kvv1.KVCluster) {
			c.Spec.AntiEntropy.RebuildSchedule = "15 2 * * 1,4"
			c.Spec.AntiEntropy.TimeZone = "Europe/Paris"
			c.Spec.AntiEntropy.JournalCheck = true
		}, schedule: "15 2 * * 1,4", tz: "Europe/Paris", flag: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cj := BuildAAECronJob(cluster(tc.mutate))
			if cj.Name != "kv-aae-rebuild" || cj.Spec.Schedule != tc.schedule || *cj.Spec.TimeZone != tc.tz || cj.Labels[LabelMaintenance] != MaintenanceAAE {
				t.Errorf("cronjob %s %q %s %v", cj.Name, cj.Spec.Schedule, *cj.Spec.TimeZone, cj.Labels)
			}
			s := steps(cj)
			if len(s) != 3 {
				t.Fatalf("steps = %q", s)
			}
			for i, step := range s {
				want := fmt.Sprintf("levee admin aae-rebuild --addr kv-%d.kv-headless.ns.svc:8087", i)
				if tc.flag {
					want += " --journal-check"
				}
				if step != want {
					t.Errorf("step %d = %q, want %q", i, step, want)
				}
			}
			if cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds != nil {
				t.Errorf("AAE rebuild should have no deadline")
			}
		})
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
			if env["LEVEE_TLS_CA"] != TLSDir+"/ca.crt" || env["LEVEE_TLS_CERT"] != TLSDir+"/tls.crt" || env["LEVEE_TLS_KEY"] != TLSDir+"/tls.key" {
				t.Errorf("%s/%s: env = %v", cj.Name, ct.Name, env)
			}
			if len(ct.VolumeMounts) != 1 || ct.VolumeMounts[0].MountPath != TLSDir || ct.VolumeMounts[0].Name != "tls" {
				t.Errorf("%s/%s: mounts = %v", cj.Name, ct.Name, ct.VolumeMounts)
			}
		}
	}
}
