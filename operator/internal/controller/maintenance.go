package controller

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Maintenance Jobs are created suspended (the CronJobs' template says so). The gate below
// decides which one may run: at most one maintenance Job of a cluster runs at a time, so a
// journal compaction and an AAE rebuild never work on the same member together, whatever
// their schedules. Queued Jobs run oldest first. A compaction Job that waited so long that
// its slot is over is dropped (the next run of the window picks up the work).

// GateDecision is what the gate does with a cluster's maintenance Jobs in this reconcile.
type GateDecision struct {
	// Resume is the Job to unsuspend (nil: none). ResumeDeadline is its new
	// activeDeadlineSeconds: what is left of its slot (nil: leave unchanged).
	Resume         *batchv1.Job
	ResumeDeadline *int64
	// Drop are queued Jobs whose time has passed; they are deleted and reported.
	Drop []*batchv1.Job
	// Deferred: a Job could have been resumed but maintenance is deferred (the reason).
	Deferred string
}

// minResumeSeconds: a queued compaction Job with less of its slot left is dropped.
const minResumeSeconds = 60

// jobFinished reports whether the Job has a Complete or Failed condition.
func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func jobSuspended(j *batchv1.Job) bool { return j.Spec.Suspend != nil && *j.Spec.Suspend }

// PlanGate decides which maintenance Job of one cluster may run now. jobs are the
// cluster's maintenance Jobs (any order); now is the clock; deferred, when not empty, holds
// every queued Job back (the autoscaler found disks saturated by foreground load) — a
// compaction whose slot runs out meanwhile is still dropped.
func PlanGate(jobs []*batchv1.Job, now time.Time, deferred string) GateDecision {
	var queued []*batchv1.Job
	for _, j := range jobs {
		switch {
		case jobFinished(j) || j.DeletionTimestamp != nil:
		case !jobSuspended(j):
			return GateDecision{} // one runs already: everyone else waits
		default:
			queued = append(queued, j)
		}
	}
	sort.Slice(queued, func(a, b int) bool {
		ta, tb := queued[a].CreationTimestamp, queued[b].CreationTimestamp
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		return queued[a].Name < queued[b].Name
	})
	var d GateDecision
	for _, j := range queued {
		var deadline *int64
		if j.Labels[LabelMaintenance] == MaintenanceCompaction && j.Spec.ActiveDeadlineSeconds != nil {
			waited := int64(now.Sub(j.CreationTimestamp.Time) / time.Second)
			left := *j.Spec.ActiveDeadlineSeconds - max(waited, 0)
			if left < minResumeSeconds {
				d.Drop = append(d.Drop, j)
				continue
			}
			if waited > 0 {
				deadline = ptr(left)
			}
		}
		if deferred != "" {
			d.Deferred = deferred
			continue
		}
		d.Resume, d.ResumeDeadline = j, deadline
		return d
	}
	return d
}

// LatestRun summarizes the newest Job of the given maintenance kind (nil when there is none).
func LatestRun(jobs []*batchv1.Job, kind string) *kvv1.MaintenanceRun {
	var latest *batchv1.Job
	for _, j := range jobs {
		if j.Labels[LabelMaintenance] != kind {
			continue
		}
		if latest == nil || latest.CreationTimestamp.Before(&j.CreationTimestamp) ||
			(latest.CreationTimestamp.Equal(&j.CreationTimestamp) && latest.Name < j.Name) {
			latest = j
		}
	}
	if latest == nil {
		return nil
	}
	return RunStatus(latest)
}

// RunStatus reports one maintenance Job member by member: index i of the Indexed Job is member i.
func RunStatus(j *batchv1.Job) *kvv1.MaintenanceRun {
	r := &kvv1.MaintenanceRun{
		Job:              j.Name,
		StartTime:        j.Status.StartTime,
		CompletionTime:   j.Status.CompletionTime,
		SucceededMembers: j.Status.CompletedIndexes,
	}
	if j.Status.FailedIndexes != nil {
		r.FailedMembers = *j.Status.FailedIndexes
	}
	var failed *batchv1.JobCondition
	complete := false
	for i := range j.Status.Conditions {
		c := &j.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobFailed:
			failed = c
		case batchv1.JobComplete:
			complete = true
		}
	}
	switch {
	case complete:
		r.Phase = kvv1.MaintenanceSucceeded
		r.Message = fmt.Sprintf("all %d members done", completions(j))
	case failed != nil:
		r.Phase = kvv1.MaintenanceFailed
		if r.CompletionTime == nil {
			t := failed.LastTransitionTime
			r.CompletionTime = &t
		}
		r.NotReachedMembers = FormatIndexes(missingIndexes(completions(j), r.SucceededMembers, r.FailedMembers))
		r.Message = failureMessage(j, r, failed)
	case jobSuspended(j):
		r.Phase = kvv1.MaintenanceQueued
		r.Message = "waiting for the cluster's other maintenance Job to finish"
	default:
		r.Phase = kvv1.MaintenanceRunning
		r.Message = fmt.Sprintf("%d of %d members done", len(mustParse(r.SucceededMembers)), completions(j))
	}
	return r
}

func completions(j *batchv1.Job) int32 {
	if j.Spec.Completions == nil {
		return 1
	}
	return *j.Spec.Completions
}

func failureMessage(j *batchv1.Job, r *kvv1.MaintenanceRun, c *batchv1.JobCondition) string {
	var parts []string
	if r.FailedMembers != "" {
		parts = append(parts, fmt.Sprintf("members %s failed (their pods' logs, label job-name=%s, say why)", r.FailedMembers, j.Name))
	}
	if r.NotReachedMembers != "" {
		parts = append(parts, fmt.Sprintf("members %s not reached", r.NotReachedMembers))
	}
	if r.SucceededMembers != "" {
		parts = append(parts, fmt.Sprintf("members %s succeeded", r.SucceededMembers))
	}
	reason := c.Reason
	if c.Message != "" {
		reason += ": " + c.Message
	}
	return strings.Join(parts, "; ") + " (" + reason + ")"
}

// missingIndexes are the indexes 0..n-1 in neither list.
func missingIndexes(n int32, lists ...string) []int {
	seen := map[int]bool{}
	for _, l := range lists {
		for _, i := range mustParse(l) {
			seen[i] = true
		}
	}
	var out []int
	for i := 0; i < int(n); i++ {
		if !seen[i] {
			out = append(out, i)
		}
	}
	return out
}

func mustParse(s string) []int {
	v, _ := ParseIndexes(s) // the Job controller writes these; a malformed list counts as empty
	return v
}

// ParseIndexes reads the Job controller's index notation ("1,3-5,7").
func ParseIndexes(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad index %q in %q", part, s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad index range %q in %q", part, s)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// FormatIndexes writes sorted indexes in the Job controller's notation, ranges of 3+ as a-b.
func FormatIndexes(v []int) string {
	var parts []string
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(v[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(v[i]), strconv.Itoa(v[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", v[i], v[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// runFinishedNow reports whether a maintenance run reached a final phase it had not reported before.
func runFinishedNow(old, cur *kvv1.MaintenanceRun) bool {
	if cur == nil || (cur.Phase != kvv1.MaintenanceSucceeded && cur.Phase != kvv1.MaintenanceFailed) {
		return false
	}
	return old == nil || old.Job != cur.Job || old.Phase != cur.Phase
}
