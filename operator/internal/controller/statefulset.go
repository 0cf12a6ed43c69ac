package controller

import (
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Security identity of the levee container (a static binary; no root needed).
// nodeUID matches the nonroot user of the levee image (image/mkimage).
const nodeUID int64 = 65532

// ShutdownDelaySeconds is how long a member keeps serving after SIGTERM while it already
// reports not ready (the node's LEVEE_SHUTDOWN_DELAY_SECS): the EndpointSlice and kube-proxy on
// every node stop routing new connections to a terminating pod a moment after it is deleted;
// closing the port at once refused the ones routed to it meanwhile (writes failed during
// rollouts). An environment variable, not a flag, so an older image ignores it instead of
// refusing to start. The default termination grace period (120 s) covers it and the drain.
const ShutdownDelaySeconds = 5

// NodeArgs is the node command line (contract with the levee binary).
func NodeArgs() []string {
	return []string{
		"serve",
		"--config", ConfigDir + "/" + ConfigFileName,
		"--data-dir", DataDir,
		"--listen", "0.0.0.0:" + strconv.Itoa(int(GRPCPort)),
		"--metrics-listen", "0.0.0.0:" + strconv.Itoa(int(MetricsPort)),
	}
}

// StorageClassName is the storage class of the data volumes.
func StorageClassName(c *kvv1.KVCluster) string {
	if c.Spec.Storage.StorageClassName != nil && *c.Spec.Storage.StorageClassName != "" {
		return *c.Spec.Storage.StorageClassName
	}
	return DefaultStorageClass(c.Spec.Storage.Profile)
}

// storageNodeAffinity requires nodes matching the storage profile label (or the override).
func storageNodeAffinity(c *kvv1.KVCluster) *corev1.Affinity {
	sel := c.Spec.Storage.NodeSelector
	if sel == nil {
		sel = map[string]string{kvv1.StorageNodeLabel: string(c.Spec.Storage.Profile)}
	}
	if len(sel) == 0 {
		return nil
	}
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var exprs []corev1.NodeSelectorRequirement
	for _, k := range keys {
		exprs = append(exprs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{sel[k]}})
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: exprs}},
		},
	}}
}

// TopologySpread returns the spread constraints: zones best effort, at most one
// member more per host than on any other host (required).
func TopologySpread(c *kvv1.KVCluster) []corev1.TopologySpreadConstraint {
	if len(c.Spec.Scheduling.TopologySpreadConstraints) > 0 {
		return c.Spec.Scheduling.TopologySpreadConstraints
	}
	sel := &metav1.LabelSelector{MatchLabels: SelectorLabels(c)}
	return []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: sel},
		{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel},
	}
}

func nodeContainer(c *kvv1.KVCluster) corev1.Container {
	mounts := []corev1.VolumeMount{
		{Name: DataVolumeName, MountPath: DataRoot},
		{Name: "config", MountPath: ConfigDir, ReadOnly: true},
	}
	if c.Spec.TLS.Enabled {
		mounts = append(mounts, corev1.VolumeMount{Name: "tls", MountPath: TLSDir, ReadOnly: true})
	}
	httpProbe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(MetricsPortName)}},
			PeriodSeconds:    period,
			TimeoutSeconds:   3,
			FailureThreshold: failures,
		}
	}
	return corev1.Container{
		Name:            ContainerName,
		Image:           c.Spec.Image,
		ImagePullPolicy: c.Spec.ImagePullPolicy,
		Command:         []string{"levee"},
		Args:            NodeArgs(),
		Ports: []corev1.ContainerPort{
			{Name: GRPCPortName, ContainerPort: GRPCPort, Protocol: corev1.ProtocolTCP},
			{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
		},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "LEVEE_ADVERTISE_ADDR", Value: "$(POD_NAME)." + HeadlessServiceName(c) + ".$(POD_NAMESPACE).svc:" + strconv.Itoa(int(GRPCPort))},
			{Name: "LEVEE_SHUTDOWN_DELAY_SECS", Value: strconv.Itoa(ShutdownDelaySeconds)},
		},
		Resources:    kvv1.MemberResources(c),
		VolumeMounts: mounts,
		// Journal replay after a crash may take minutes: the startup probe allows 10 min.
		StartupProbe:   httpProbe("/healthz", 10, 60),
		LivenessProbe:  httpProbe("/healthz", 10, 6),
		ReadinessProbe: httpProbe("/readyz", 5, 3),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// BuildStatefulSet returns the members' StatefulSet.
func BuildStatefulSet(c *kvv1.KVCluster) *appsv1.StatefulSet {
	sel := SelectorLabels(c)
	podLabels := labelsWith(c, sel)
	volumes := []corev1.Volume{{
		Name: "config",
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(c)},
		}},
	}}
	if c.Spec.TLS.Enabled {
		volumes = append(volumes, corev1.Volume{
			Name:         "tls",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: TLSSecretName(c)}},
		})
	}
	affinity := storageNodeAffinity(c)
	replicas := StatefulSetReplicas(c)
	return &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      StatefulSetName(c),
			Namespace: c.Namespace,
			Labels:    labelsWith(c, map[string]string{labelComponent: "node"}),
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         HeadlessServiceName(c),
			Selector:            &metav1.LabelSelector{MatchLabels: sel},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			// Data outlives the cluster's deletion (a volume is kept until its owner removes it).
			// A scale-in removes a pod only once the member has handed every partition over and
			// reports empty (PlanRing), so its volume holds nothing anyone needs; kept, it would
			// bring a stale ring back when the member returns.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: map[string]string{ConfigHashAnnotation: ConfigHash(c)},
				},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{nodeContainer(c)},
					Volumes:                       volumes,
					Affinity:                      affinity,
					NodeSelector:                  c.Spec.Scheduling.NodeSelector,
					Tolerations:                   c.Spec.Scheduling.Tolerations,
					PriorityClassName:             c.Spec.Scheduling.PriorityClassName,
					TopologySpreadConstraints:     TopologySpread(c),
					TerminationGracePeriodSeconds: c.Spec.Scheduling.TerminationGracePeriodSeconds,
					EnableServiceLinks:            ptr(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr(true),
						RunAsUser:      ptr(nodeUID),
						RunAsGroup:     ptr(nodeUID),
						FSGroup:        ptr(nodeUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
				ObjectMeta: metav1.ObjectMeta{
					Name:   DataVolumeName,
					Labels: labelsWith(c, map[string]string{labelComponent: "node"}),
				},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr(StorageClassName(c)),
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: storageSize(c)},
					},
				},
			}},
		},
	}
}

// StatefulSetReplicas is the number of pods the StatefulSet runs: spec.replicas, or more while
// members the published list no longer names (status.leavingMembers) still hold data, or while
// status.members names more (a scale-in not published yet). Computed from the stored status,
// so a smaller list is always recorded there before a pod goes.
func StatefulSetReplicas(c *kvv1.KVCluster) int32 {
	n := c.Spec.Replicas
	for _, a := range append(slices.Clone(c.Status.Members), c.Status.LeavingMembers...) {
		if i, ok := ordinalOf(a); ok && int32(i)+1 > n {
			n = int32(i) + 1
		}
	}
	return n
}

func storageSize(c *kvv1.KVCluster) resource.Quantity {
	if c.Spec.Storage.Size == nil {
		return resource.MustParse(kvv1.DefaultStorageSize)
	}
	return *c.Spec.Storage.Size
}
