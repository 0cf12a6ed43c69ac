package controller

import (
	"reflect"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

type jobOpt func(*batchv1.Job)

func job(name, kind string, created time.Time, opts ...jobOpt) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{labelInstance: "kv", LabelMaintenance: kind}},
		Spec: batchv1.JobSpec{Suspend: ptr(true), Completions: ptr(int32(5))},
	}
	if kind == MaintenanceCompaction {
		j.Spec.ActiveDeadlineSeconds = ptr(int64(5400))
	}
	for _, o := range opts {
		o(j)
	}
	return j
}

func running(j *batchv1.Job) { j.Spec.Suspend = ptr(false) }

func cond(typ batchv1.JobConditionType, reason string) jobOpt {
	return func(j *batchv1.Job) {
		j.Spec.Suspend = ptr(false)
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason,
			LastTransitionTime: metav1.NewTime(t0)})
	}
}

func indexes(done, failed string) jobOpt {
	return func(j *batchv1.Job) {
		j.Status.CompletedIndexes = done
		if failed != "" {
			j.Status.FailedIndexes = ptr(failed)
		}
	}
}

func names(js []*batchv1.Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.Name)
	}
	return out
}

func TestPlanGate(t *testing.T) {
	cases := []struct {
		name     string
		jobs     []*batchv1.Job
		now      time.Time
		deferred string // the autoscaler's deferral
		resume   string
		deadline *int64
		drop     []string
		held     bool // the decision says it held a Job back for the deferral
	}{
		{name: "nothing queued", jobs: nil, now: t0},
		{name: "a fresh compaction Job runs at once with its full slot",
			jobs: []*batchv1.Job{job("c1", MaintenanceCompaction, t0)}, now: t0, resume: "c1"},
		{name: "compaction and AAE created in the same minute: the older runs, the other waits",
			jobs: []*batchv1.Job{job("a1", MaintenanceAAE, t0.Add(2*time.Second)), job("c1", MaintenanceCompaction, t0)},
			now:  t0.Add(2 * time.Second), resume: "c1", deadline: ptr(int64(5398))},
		{name: "a running AAE rebuild holds back a compaction run",
			jobs: []*batchv1.Job{job("a1", MaintenanceAAE, t0.Add(-time.Hour), running), job("c1", MaintenanceCompaction, t0)},
			now:  t0.Add(time.Minute)},
		{name: "a running compaction holds back the AAE rebuild",
			jobs: []*batchv1.Job{job("c1", MaintenanceCompaction, t0, running), job("a1", MaintenanceAAE, t0)},
			now:  t0},
		{name: "finished Jobs do not block; the queued compaction gets what is left of its slot",
			jobs: []*batchv1.Job{job("a1", MaintenanceAAE, t0.Add(-2*time.Hour), cond(batchv1.JobFailed, "FailedIndexes")),
				job("c1", MaintenanceCompaction, t0)},
			now: t0.Add(30 * time.Minute), resume: "c1", deadline: ptr(int64(5400 - 1800))},
		{name: "a compaction Job whose slot passed while it waited is dropped; the AAE Job behind it runs",
			jobs: []*batchv1.Job{job("c1", MaintenanceCompaction, t0), job("a1", MaintenanceAAE, t0.Add(time.Minute)),
				job("a0", MaintenanceAAE, t0.Add(-5*time.Hour), cond(batchv1.JobComplete, ""))},
			now: t0.Add(90 * time.Minute), resume: "a1", drop: []string{"c1"}},
		{name: "AAE Jobs never expire while queued",
			jobs: []*batchv1.Job{job("a1", MaintenanceAAE, t0.Add(-48*time.Hour))}, now: t0, resume: "a1"},
		{name: "same creation time: by name",
			jobs: []*batchv1.Job{job("kv-compact-1-x", MaintenanceCompaction, t0), job("kv-compact-0-x", MaintenanceCompaction, t0)},
			now:  t0, resume: "kv-compact-0-x"},
		{name: "deferred: a queued Job waits while disks are saturated",
			jobs: []*batchv1.Job{job("c1", MaintenanceCompaction, t0), job("a1", MaintenanceAAE, t0.Add(time.Minute))},
			now:  t0.Add(2 * time.Minute), deferred: "disks of kv-0 are saturated", held: true},
		{name: "deferred: an expired compaction is still dropped, the AAE Job behind it waits",
			jobs: []*batchv1.Job{job("c1", MaintenanceCompaction, t0), job("a1", MaintenanceAAE, t0.Add(time.Minute))},
			now:  t0.Add(90 * time.Minute), deferred: "disks of kv-0 are saturated", drop: []string{"c1"}, held: true},
		{name: "deferred with nothing queued holds nothing back",
			jobs: []*batchv1.Job{job("c1", MaintenanceCompaction, t0, running)}, now: t0, deferred: "disks of kv-0 are saturated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := PlanGate(tc.jobs, tc.now, tc.deferred)
			if held := d.Deferred != ""; held != tc.held || (held && d.Deferred != tc.deferred) {
				t.Errorf("deferred %q, want held %v (%q)", d.Deferred, tc.held, tc.deferred)
			}
			got := ""
			if d.Resume != nil {
				got = d.Resume.Name
			}
			if got != tc.resume {
				t.Errorf("resume %q, want %q", got, tc.resume)
			}
			if !reflect.DeepEqual(d.ResumeDeadline, tc.deadline) {
				t.Errorf("deadline %v, want %v", deref64(d.ResumeDeadline), deref64(tc.deadline))
			}
			if !reflect.DeepEqual(names(d.Drop), tc.drop) {
				t.Errorf("drop %v, want %v", names(d.Drop), tc.drop)
			}
		})
	}
}

func deref64(p *int64) interface{} {
	if p == nil {
		return nil
	}
	return *p
}

func TestRunStatus(t *testing.T) {
	cases := []struct {
		name string
		job  *batchv1.Job
		want kvv1.MaintenanceRun
	}{
		{name: "queued", job: job("c1", MaintenanceCompaction, t0),
			want: kvv1.MaintenanceRun{Job: "c1", Phase: kvv1.MaintenanceQueued, Message: "waiting for the cluster's other maintenance Job to finish"}},
		{name: "running", job: job("c1", MaintenanceCompaction, t0, running, indexes("0,1", "")),
			want: kvv1.MaintenanceRun{Job: "c1", Phase: kvv1.MaintenanceRunning, SucceededMembers: "0,1", Message: "2 of 5 members done"}},
		{name: "all members done", job: job("c1", MaintenanceCompaction, t0, indexes("0-4", ""), cond(batchv1.JobComplete, "")),
			want: kvv1.MaintenanceRun{Job: "c1", Phase: kvv1.MaintenanceSucceeded, SucceededMembers: "0-4", Message: "all 5 members done"}},
		{name: "a down member is reported, the others still ran",
			job: job("a1", MaintenanceAAE, t0, indexes("0,2-4", "1"), cond(batchv1.JobFailed, "FailedIndexes")),
			want: kvv1.MaintenanceRun{Job: "a1", Phase: kvv1.MaintenanceFailed, SucceededMembers: "0,2-4", FailedMembers: "1",
				CompletionTime: ptr(metav1.NewTime(t0)),
				Message:        "members 1 failed (their pods' logs, label job-name=a1, say why); members 0,2-4 succeeded (FailedIndexes)"}},
		{name: "the deadline passed before the last members",
			job: job("c1", MaintenanceCompaction, t0, indexes("0,1", "2"), cond(batchv1.JobFailed, "DeadlineExceeded"),
				func(j *batchv1.Job) { j.Status.Conditions[0].Message = "Job was active longer than specified deadline" }),
			want: kvv1.MaintenanceRun{Job: "c1", Phase: kvv1.MaintenanceFailed, SucceededMembers: "0,1", FailedMembers: "2", NotReachedMembers: "3,4",
				CompletionTime: ptr(metav1.NewTime(t0)),
				Message:        "members 2 failed (their pods' logs, label job-name=c1, say why); members 3,4 not reached; members 0,1 succeeded (DeadlineExceeded: Job was active longer than specified deadline)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := RunStatus(tc.job); !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestLatestRunPicksTheNewestJobOfItsKind(t *testing.T) {
	jobs := []*batchv1.Job{
		job("c-old", MaintenanceCompaction, t0.Add(-time.Hour), cond(batchv1.JobComplete, "")),
		job("c-new", MaintenanceCompaction, t0, running),
		job("a-1", MaintenanceAAE, t0.Add(time.Hour)),
	}
	if r := LatestRun(jobs, MaintenanceCompaction); r == nil || r.Job != "c-new" || r.Phase != kvv1.MaintenanceRunning {
		t.Errorf("compaction: %+v", r)
	}
	if r := LatestRun(jobs, MaintenanceAAE); r == nil || r.Job != "a-1" || r.Phase != kvv1.MaintenanceQueued {
		t.Errorf("aae: %+v", r)
	}
	if r := LatestRun(jobs[:1], MaintenanceAAE); r != nil {
		t.Errorf("no AAE Job: %+v", r)
	}
}

func TestIndexNotation(t *testing.T) {
	cases := []struct {
		in   string
		want []int
		out  string
	}{
		{"", nil, ""},
		{"0", []int{0}, "0"},
		{"0,1", []int{0, 1}, "0,1"},
		{"0-2,5,7-9", []int{0, 1, 2, 5, 7, 8, 9}, "0-2,5,7-9"},
	}
	for _, tc := range cases {
		got, err := ParseIndexes(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseIndexes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if s := FormatIndexes(got); s != tc.out {
			t.Errorf("FormatIndexes(%v) = %q, want %q", got, s, tc.out)
		}
	}
	for _, bad := range []string{"x", "3-1", "-1", "1-"} {
		if _, err := ParseIndexes(bad); err == nil {
			t.Errorf("ParseIndexes(%q) accepted", bad)
		}
	}
}
