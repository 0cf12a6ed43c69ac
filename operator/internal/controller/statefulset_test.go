package controller

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func TestBuildStatefulSet(t *testing.T) {
	cases := []struct {
		name         string
		mutate       func(*kvv1.KVCluster)
		replicas     int32
		storageClass string
		size         string
		affinity     map[string]string // required node labels; nil = no affinity
		tls          bool
		spreadKeys   []string
	}{
		{name: "nvme defaults", replicas: 3, storageClass: "levee-nvme", size: "100Gi",
			affinity: map[string]string{"levee.io/storage": "nvme"}, spreadKeys: []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}},
		{name: "hdd", mutate: func(c *kvv1.KVCluster) { c.Spec.Storage.Profile = kvv1.StorageHDD; c.Spec.Replicas = 6 },
			replicas: 6, storageClass: "levee-hdd", size: "100Gi",
			affinity: map[string]string{"levee.io/storage": "hdd"}, spreadKeys: []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}},
		{name: "overridden class, size and node labels", mutate: func(c *kvv1.KVCluster) {
			sc := "gp3"
			q := resource.MustParse("2Ti")
			c.Spec.Storage.StorageClassName = &sc
			c.Spec.Storage.Size = &q
			c.Spec.Storage.NodeSelector = map[string]string{"b": "2", "a": "1"}
		}, replicas: 3, storageClass: "gp3", size: "2Ti", affinity: map[string]string{"a": "1", "b": "2"},
			spreadKeys: []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}},
		{name: "empty node selector disables the node requirement", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Storage.NodeSelector = map[string]string{}
		}, replicas: 3, storageClass: "levee-nvme", size: "100Gi", affinity: nil,
			spreadKeys: []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"}},
		{name: "tls and custom spread", mutate: func(c *kvv1.KVCluster) {
			c.Spec.TLS.Enabled = true
			c.Spec.Scheduling.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
		}, replicas: 3, storageClass: "levee-nvme", size: "100Gi", affinity: map[string]string{"levee.io/storage": "nvme"},
			tls: true, spreadKeys: []string{"rack"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(tc.mutate)
			s := BuildStatefulSet(c)
			if *s.Spec.Replicas != tc.replicas || s.Spec.ServiceName != "kv-headless" {
				t.Errorf("replicas %d serviceName %s", *s.Spec.Replicas, s.Spec.ServiceName)
			}
			vct := s.Spec.VolumeClaimTemplates[0]
			if *vct.Spec.StorageClassName != tc.storageClass {
				t.Errorf("storage class = %s, want %s", *vct.Spec.StorageClassName, tc.storageClass)
			}
			if q := vct.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != tc.size {
				t.Errorf("size = %s, want %s", q.String(), tc.size)
			}
			pod := s.Spec.Template.Spec
			if tc.affinity == nil {
				if pod.Affinity != nil {
					t.Errorf("affinity = %+v, want none", pod.Affinity)
				}
			} else {
				got := map[string]string{}
				for _, e := range pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions {
					if e.Operator != corev1.NodeSelectorOpIn || len(e.Values) != 1 {
						t.Errorf("expression %+v", e)
					}
					got[e.Key] = e.Values[0]
				}
				if !reflect.DeepEqual(got, tc.affinity) {
					t.Errorf("affinity = %v, want %v", got, tc.affinity)
				}
			}
			var keys []string
			for _, sp := range pod.TopologySpreadConstraints {
				keys = append(keys, sp.TopologyKey)
			}
			if !reflect.DeepEqual(keys, tc.spreadKeys) {
				t.Errorf("spread keys = %v, want %v", keys, tc.spreadKeys)
			}
			ct := pod.Containers[0]
			hasTLS := false
			for _, m := range ct.VolumeMounts {
				if m.MountPath == "/etc/levee/tls" {
					hasTLS = true
				}
			}
			if hasTLS != tc.tls || (len(pod.Volumes) == 2) != tc.tls {
				t.Errorf("tls mount %v, volumes %d, want tls %v", hasTLS, len(pod.Volumes), tc.tls)
			}
			if s.Spec.Template.Annotations[ConfigHashAnnotation] != ConfigHash(c) {
				t.Errorf("config hash annotation missing")
			}
		})
	}
}

// The node command line, ports and probes are contracts with the levee binary.
func TestNodeContainerContract(t *testing.T) {
	c := cluster(func(c *kvv1.KVCluster) {
		c.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	})
	ct := BuildStatefulSet(c).Spec.Template.Spec.Containers[0]
	want := "levee serve --config /etc/levee/levee.toml --data-dir /var/lib/levee/data --listen 0.0.0.0:8087 --metrics-listen 0.0.0.0:8098"
	if got := strings.Join(append(ct.Command, ct.Args...), " "); got != want {
		t.Errorf("command = %q\nwant      %q", got, want)
	}
	if ct.Image != "levee:dev" || ct.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s %s", ct.Image, ct.ImagePullPolicy)
	}
	ports := map[string]int32{}
	for _, p := range ct.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !reflect.DeepEqual(ports, map[string]int32{"grpc": 8087, "metrics": 8098}) {
		t.Errorf("ports = %v", ports)
	}
	probes := []struct {
		p    *corev1.Probe
		path string
	}{{ct.LivenessProbe, "/healthz"}, {ct.ReadinessProbe, "/readyz"}, {ct.StartupProbe, "/healthz"}}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port.StrVal != "metrics" {
			t.Errorf("probe %s = %+v", pr.path, pr.p)
		}
	}
	env := map[string]string{}
	for _, e := range ct.Env {
		env[e.Name] = e.Value
	}
	if env["LEVEE_SHUTDOWN_DELAY_SECS"] != "5" {
		t.Errorf("LEVEE_SHUTDOWN_DELAY_SECS = %q, want 5 (serve on while endpoints drop the member)", env["LEVEE_SHUTDOWN_DELAY_SECS"])
	}
	if !ct.Resources.Limits.Cpu().Equal(resource.MustParse("2")) {
		t.Errorf("resources not passed through: %+v", ct.Resources)
	}
	mounts := map[string]string{}
	for _, m := range ct.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["data"] != "/var/lib/levee" || mounts["config"] != "/etc/levee" {
		t.Errorf("mounts = %v", mounts)
	}
	pod := BuildStatefulSet(c).Spec.Template.Spec
	if *pod.TerminationGracePeriodSeconds != 120 || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("grace %d nonroot %v", *pod.TerminationGracePeriodSeconds, *pod.SecurityContext.RunAsNonRoot)
	}
}

// Without spec.resources the levee container gets the formula's requests and limits (for the
// spec's ring, nVal and volume size); with them, exactly the user's.
func TestNodeContainerDefaultResources(t *testing.T) {
	c := cluster(func(c *kvv1.KVCluster) {
		c.Spec.RingSize = 128
		q := resource.MustParse("200Gi")
		c.Spec.Storage.Size = &q
	})
	got := BuildStatefulSet(c).Spec.Template.Spec.Containers[0].Resources
	want := kvv1.DefaultMemberResources(128, 3, 200<<30)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unset: %+v\nwant the defaults %+v", got, want)
	}
	if got.Requests.Cpu().IsZero() || got.Requests.Memory().IsZero() || got.Limits.Memory().IsZero() {
		t.Errorf("defaults leave a request or the memory limit unset: %+v", got)
	}
	user := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	c.Spec.Resources = user
	if got := BuildStatefulSet(c).Spec.Template.Spec.Containers[0].Resources; !reflect.DeepEqual(got, user) {
		t.Errorf("set: %+v\nwant the user's %+v", got, user)
	}
}
