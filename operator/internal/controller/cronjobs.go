package controller

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Maintenance kinds (value of the kv.levee.io/maintenance label).
const (
	MaintenanceCompaction = "compaction"
	MaintenanceAAE        = "aae-rebuild"
)

// MemberIndexEnv holds the member ordinal a maintenance pod works on: the completion index
// of its Indexed Job (downward API), expanded into the --addr argument by the kubelet.
const MemberIndexEnv = "LEVEE_MEMBER_INDEX"

// jobCompletionIndexAnnotation is set by the Job controller on every pod of an Indexed Job.
const jobCompletionIndexAnnotation = "batch.kubernetes.io/job-completion-index"

// Sizing of the per-member deadline. A maintenance call may, at worst, read every byte of the
// member's data volume: journal compaction rewrites the live records of the runs it chooses,
// and the AAE rebuild folds the ledger (and, with journalCheck, looks up the journal). The
// rates are deliberately pessimistic — a deadline is a guard against a hung call, not a
// schedule — measured compaction on the development machine runs at several hundred MiB/s.
const (
	nvmeBytesPerSecond       = 100 << 20 // 100 MiB/s
	hddBytesPerSecond        = 25 << 20  // 25 MiB/s
	memberDeadlineOverhead   = 300       // connect, open snapshots, fsyncs: 5 min
	memberDeadlineMinSeconds = 60
	// podDeadlineMargin is how much longer the pod may live than the CLI's own --timeout,
	// so that the CLI reports its deadline itself instead of being killed silently.
	podDeadlineMargin = 60
	// backoffLimitPerIndex: a member's call is retried once, then the member counts as failed.
	backoffLimitPerIndex int32 = 1
)

// CompactionCronJobName is the name of the i-th compaction CronJob.
func CompactionCronJobName(c *kvv1.KVCluster, i int) string {
	return fmt.Sprintf("%s-compact-%d", c.Name, i)
}

// AAECronJobName is the name of the AAE rebuild CronJob.
func AAECronJobName(c *kvv1.KVCluster) string { return c.Name + "-aae-rebuild" }

// MemberAddressTemplate is the gRPC address of the member whose ordinal is in $LEVEE_MEMBER_INDEX
// (Kubernetes expands $(VAR) in container arguments; the image has no shell).
func MemberAddressTemplate(c *kvv1.KVCluster) string {
	return fmt.Sprintf("%s-$(%s).%s.%s.svc:%d", StatefulSetName(c), MemberIndexEnv, HeadlessServiceName(c), c.Namespace, GRPCPort)
}

// CompactJournalArgs is the admin command compacting one member's journal within timeout seconds.
func CompactJournalArgs(addr string, timeout int64) []string {
	return []string{"admin", "compact-journal", "--addr", addr, "--timeout", strconv.FormatInt(timeout, 10)}
}

// AAERebuildArgs is the admin command rebuilding one member's AAE trees within timeout seconds.
func AAERebuildArgs(addr string, timeout int64, journalCheck bool) []string {
	a := []string{"admin", "aae-rebuild", "--addr", addr, "--timeout", strconv.FormatInt(timeout, 10)}
	if journalCheck {
		a = append(a, "--journal-check")
	}
	return a
}

// MemberTimeout is the deadline (seconds) of one member's maintenance call, sized to the
// member's data volume at the storage profile's pessimistic rate, stretched by the work's
// busy share (busyPercent: a run that works 10 % of the time takes ten times as long), plus a
// fixed overhead. limit > 0 caps it (a compaction run must fit its slot).
func MemberTimeout(c *kvv1.KVCluster, limit int64, busyPercent int32) int64 {
	rate := int64(nvmeBytesPerSecond)
	if c.Spec.Storage.Profile == kvv1.StorageHDD {
		rate = hddBytesPerSecond
	}
	if busyPercent < 1 || busyPercent > 100 {
		busyPercent = 100
	}
	size := storageSize(c)
	work := (size.Value() + rate - 1) / rate
	t := (work*100+int64(busyPercent)-1)/int64(busyPercent) + memberDeadlineOverhead
	if limit > 0 && t > limit-podDeadlineMargin {
		t = limit - podDeadlineMargin
	}
	return max(t, memberDeadlineMinSeconds)
}

// maintenanceJobSpec is an Indexed Job with one index per member: index i runs the admin
// command against member i. Indexes run one at a time (parallelism 1), each index is retried
// once and then marked failed without failing the others (backoffLimitPerIndex), so a member
// that is down is reported in status.failedIndexes while the remaining members still run.
// The Job is created suspended: the operator's gate resumes it when no other maintenance Job
// of the cluster runs, so compaction and AAE rebuild never overlap on a member.
func maintenanceJobSpec(c *kvv1.KVCluster, lbl map[string]string, jobDeadline *int64, memberTimeout int64, args []string) batchv1.JobSpec {
	n := c.Spec.Replicas
	ct := corev1.Container{
		Name:            "admin",
		Image:           c.Spec.Image,
		ImagePullPolicy: c.Spec.ImagePullPolicy,
		Command:         []string{"levee"},
		Args:            args,
		Env: []corev1.EnvVar{{
			Name: MemberIndexEnv,
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.annotations['" + jobCompletionIndexAnnotation + "']",
			}},
		}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if c.Spec.TLS.Enabled {
		// Members serve TLS and require client certificates (ca_file is set): the admin
		// client trusts the cluster CA and presents the member certificate, whose
		// *.<headless>.<ns>.svc names and client-auth usage fit.
		ct.VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: TLSDir, ReadOnly: true}}
		ct.Env = append(ct.Env,
			corev1.EnvVar{Name: "LEVEE_TLS_CA", Value: TLSDir + "/ca.crt"},
			corev1.EnvVar{Name: "LEVEE_CLIENT_TLS_CERT", Value: TLSDir + "/tls.crt"},
			corev1.EnvVar{Name: "LEVEE_CLIENT_TLS_KEY", Value: TLSDir + "/tls.key"},
		)
	}
	return batchv1.JobSpec{
		CompletionMode:          ptr(batchv1.IndexedCompletion),
		Completions:             ptr(n),
		Parallelism:             ptr(int32(1)),
		BackoffLimitPerIndex:    ptr(backoffLimitPerIndex),
		Suspend:                 ptr(true),
		ActiveDeadlineSeconds:   jobDeadline,
		TTLSecondsAfterFinished: ptr(int32(7 * 24 * 3600)),
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: lbl},
			Spec: corev1.PodSpec{
				RestartPolicy:         corev1.RestartPolicyNever, // required by backoffLimitPerIndex
				ActiveDeadlineSeconds: ptr(memberTimeout + podDeadlineMargin),
				Containers:            []corev1.Container{ct},
				EnableServiceLinks:    ptr(false),
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:   ptr(true),
					RunAsUser:      ptr(nodeUID),
					RunAsGroup:     ptr(nodeUID),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Tolerations: c.Spec.Scheduling.Tolerations,
				Volumes:     maintenanceVolumes(c),
			},
		},
	}
}

func maintenanceCronJob(c *kvv1.KVCluster, name, kind, schedule, tz string, job batchv1.JobSpec) *batchv1.CronJob {
	lbl := maintenanceLabels(c, kind)
	return &batchv1.CronJob{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: c.Namespace,
			Labels:    lbl,
		},
		Spec: batchv1.CronJobSpec{
			Schedule:                   schedule,
			TimeZone:                   ptr(tz),
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			StartingDeadlineSeconds:    ptr(int64(600)),
			SuccessfulJobsHistoryLimit: ptr(int32(3)),
			FailedJobsHistoryLimit:     ptr(int32(3)),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec:       job,
			},
		},
	}
}

func maintenanceLabels(c *kvv1.KVCluster, kind string) map[string]string {
	return labelsWith(c, map[string]string{labelComponent: "maintenance", LabelMaintenance: kind})
}

// BuildCompactionCronJobs returns one CronJob per cron expression of the compaction
// plan. Each Job compacts the journal of every member, one member per index, and must
// finish before the next run starts (activeDeadlineSeconds = the slot length); each
// member's call is bounded by MemberTimeout, capped at the slot.
func BuildCompactionCronJobs(c *kvv1.KVCluster) ([]*batchv1.CronJob, error) {
	cp := c.Spec.Compaction
	plan, err := PlanCompaction(deref(cp.WindowStartHour), deref(cp.WindowEndHour), deref(cp.RunsPerDay))
	if err != nil {
		return nil, fmt.Errorf("cannot derive compaction schedule: %w", err)
	}
	timeout := MemberTimeout(c, plan.SlotSeconds, deref(cp.BusyPercent))
	out := make([]*batchv1.CronJob, 0, len(plan.Schedules))
	for i, s := range plan.Schedules {
		spec := maintenanceJobSpec(c, maintenanceLabels(c, MaintenanceCompaction), ptr(plan.SlotSeconds), timeout,
			CompactJournalArgs(MemberAddressTemplate(c), timeout))
		out = append(out, maintenanceCronJob(c, CompactionCronJobName(c, i), MaintenanceCompaction, s, cp.TimeZone, spec))
	}
	return out, nil
}

// BuildAAECronJob returns the CronJob rebuilding AAE trees, one member per index. The Job's
// deadline is every member's pod deadline, twice (each index may be tried twice), in sequence:
// the rebuild has no window to fit, the deadline only ends a Job that hangs.
func BuildAAECronJob(c *kvv1.KVCluster) *batchv1.CronJob {
	ae := c.Spec.AntiEntropy
	timeout := MemberTimeout(c, 0, deref(ae.RebuildBusyPercent))
	jobDeadline := int64(c.Spec.Replicas) * (1 + int64(backoffLimitPerIndex)) * (timeout + podDeadlineMargin)
	spec := maintenanceJobSpec(c, maintenanceLabels(c, MaintenanceAAE), ptr(jobDeadline), timeout,
		AAERebuildArgs(MemberAddressTemplate(c), timeout, ae.JournalCheck))
	return maintenanceCronJob(c, AAECronJobName(c), MaintenanceAAE, ae.RebuildSchedule, ae.TimeZone, spec)
}

// maintenanceVolumes mounts the member certificate Secret into maintenance pods
// when TLS is enabled (the admin client needs it to reach members).
func maintenanceVolumes(c *kvv1.KVCluster) []corev1.Volume {
	if !c.Spec.TLS.Enabled {
		return nil
	}
	return []corev1.Volume{{
		Name:         "tls",
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: TLSSecretName(c)}},
	}}
}
