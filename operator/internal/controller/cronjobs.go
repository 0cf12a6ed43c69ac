package controller

import (
	"fmt"

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

// CompactionCronJobName is the name of the i-th compaction CronJob.
func CompactionCronJobName(c *kvv1.KVCluster, i int) string {
	return fmt.Sprintf("%s-compact-%d", c.Name, i)
}

// AAECronJobName is the name of the AAE rebuild CronJob.
func AAECronJobName(c *kvv1.KVCluster) string { return c.Name + "-aae-rebuild" }

// CompactJournalArgs is the admin command compacting one member's journal.
func CompactJournalArgs(addr string) []string {
	return []string{"admin", "compact-journal", "--addr", addr}
}

// AAERebuildArgs is the admin command rebuilding one member's AAE trees.
func AAERebuildArgs(addr string, journalCheck bool) []string {
	a := []string{"admin", "aae-rebuild", "--addr", addr}
	if journalCheck {
		a = append(a, "--journal-check")
	}
	return a
}

// memberSteps turns one admin command per member into a pod that runs them one
// after another: members 0..n-2 as init containers (which run sequentially, each
// only after the previous one succeeded) and the last member as the main
// container. The image has no shell, so sequencing is done by Kubernetes.
func memberSteps(c *kvv1.KVCluster, args func(addr string) []string) (init []corev1.Container, main []corev1.Container) {
	n := c.Spec.Replicas
	for i := int32(0); i < n; i++ {
		ct := corev1.Container{
			Name:            fmt.Sprintf("member-%d", i),
			Image:           c.Spec.Image,
			ImagePullPolicy: c.Spec.ImagePullPolicy,
			Command:         []string{"levee"},
			Args:            args(MemberAddress(c, i)),
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
			ct.Env = []corev1.EnvVar{
				{Name: "LEVEE_TLS_CA", Value: TLSDir + "/ca.crt"},
				{Name: "LEVEE_TLS_CERT", Value: TLSDir + "/tls.crt"},
				{Name: "LEVEE_TLS_KEY", Value: TLSDir + "/tls.key"},
			}
		}
		if i < n-1 {
			init = append(init, ct)
		} else {
			main = append(main, ct)
		}
	}
	return init, main
}

func maintenanceCronJob(c *kvv1.KVCluster, name, kind, schedule, tz string, deadline *int64, args func(string) []string) *batchv1.CronJob {
	init, main := memberSteps(c, args)
	lbl := labelsWith(c, map[string]string{labelComponent: "maintenance", LabelMaintenance: kind})
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
				Spec: batchv1.JobSpec{
					BackoffLimit:            ptr(int32(2)),
					ActiveDeadlineSeconds:   deadline,
					TTLSecondsAfterFinished: ptr(int32(7 * 24 * 3600)),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: lbl},
						Spec: corev1.PodSpec{
							RestartPolicy:      corev1.RestartPolicyOnFailure,
							InitContainers:     init,
							Containers:         main,
							EnableServiceLinks: ptr(false),
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
				},
			},
		},
	}
}

// BuildCompactionCronJobs returns one CronJob per cron expression of the compaction
// plan; each Job compacts the journal of every member in turn and must finish
// before the next run starts (activeDeadlineSeconds = the slot length).
func BuildCompactionCronJobs(c *kvv1.KVCluster) ([]*batchv1.CronJob, error) {
	cp := c.Spec.Compaction
	plan, err := PlanCompaction(deref(cp.WindowStartHour), deref(cp.WindowEndHour), deref(cp.RunsPerDay))
	if err != nil {
		return nil, fmt.Errorf("cannot derive compaction schedule: %w", err)
	}
	out := make([]*batchv1.CronJob, 0, len(plan.Schedules))
	for i, s := range plan.Schedules {
		out = append(out, maintenanceCronJob(c, CompactionCronJobName(c, i), MaintenanceCompaction, s, cp.TimeZone,
			ptr(plan.SlotSeconds), CompactJournalArgs))
	}
	return out, nil
}

// BuildAAECronJob returns the CronJob rebuilding AAE trees member after member.
func BuildAAECronJob(c *kvv1.KVCluster) *batchv1.CronJob {
	ae := c.Spec.AntiEntropy
	return maintenanceCronJob(c, AAECronJobName(c), MaintenanceAAE, ae.RebuildSchedule, ae.TimeZone, nil,
		func(addr string) []string { return AAERebuildArgs(addr, ae.JournalCheck) })
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
