package envtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

// TestCreateBuildsChildren: a KVCluster yields ConfigMap, Services, StatefulSet, PDB and
// CronJobs with the expected fields, for both storage profiles (and an overridden one).
func TestCreateBuildsChildren(t *testing.T) {
	cases := []struct {
		name         string
		mutate       func(*kvv1.KVCluster)
		storageClass string
		nodeLabel    [2]string
		size         string
		timeout      int // per-member compaction deadline: 100 GiB at the profile's rate + 300 s
		// per-member AAE rebuild deadline: the same work at the API server's default
		// rebuildBusyPercent (10 %) takes ten times as long, + 300 s
		aaeTimeout int
	}{
		{name: "nvme-defaults", mutate: nil, storageClass: "levee-nvme", nodeLabel: [2]string{"levee.io/storage", "nvme"}, size: "100Gi", timeout: 1324, aaeTimeout: 10540},
		{name: "hdd", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Storage.Profile = kvv1.StorageHDD
			c.Spec.Replicas = 4
		}, storageClass: "levee-hdd", nodeLabel: [2]string{"levee.io/storage", "hdd"}, size: "100Gi", timeout: 4396, aaeTimeout: 41260},
		{name: "hdd-overrides", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Storage.Profile = kvv1.StorageHDD
			sc := "st1-throughput"
			c.Spec.Storage.StorageClassName = &sc
			c.Spec.Storage.NodeSelector = map[string]string{"node.kubernetes.io/instance-type": "d3.xlarge"}
			c.Spec.Image = "registry.example/levee:1.2.3"
			c.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}
		}, storageClass: "st1-throughput", nodeLabel: [2]string{"node.kubernetes.io/instance-type", "d3.xlarge"}, size: "100Gi", timeout: 4396, aaeTimeout: 41260},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			c := createCluster(t, ns, "kv", tc.mutate)
			n := c.Spec.Replicas

			sts := &appsv1.StatefulSet{}
			waitFor(t, sts, ns, "kv")
			assertControlled(t, sts, c)
			if *sts.Spec.Replicas != n {
				t.Errorf("replicas = %d, want %d", *sts.Spec.Replicas, n)
			}
			if sts.Spec.ServiceName != "kv-headless" {
				t.Errorf("serviceName = %q", sts.Spec.ServiceName)
			}
			vct := sts.Spec.VolumeClaimTemplates
			if len(vct) != 1 || vct[0].Name != "data" || *vct[0].Spec.StorageClassName != tc.storageClass {
				t.Fatalf("volumeClaimTemplates = %s, want one 'data' claim of class %s", dump(vct), tc.storageClass)
			}
			if q := vct[0].Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != tc.size {
				t.Errorf("volume size = %s, want %s", q.String(), tc.size)
			}
			terms := sts.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 ||
				terms[0].MatchExpressions[0].Key != tc.nodeLabel[0] || !slices.Equal(terms[0].MatchExpressions[0].Values, []string{tc.nodeLabel[1]}) {
				t.Errorf("node affinity = %s, want %s=%s", dump(terms), tc.nodeLabel[0], tc.nodeLabel[1])
			}
			pod := sts.Spec.Template.Spec
			ct := pod.Containers[0]
			if ct.Image != c.Spec.Image || ct.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("image = %s/%s", ct.Image, ct.ImagePullPolicy)
			}
			wantArgs := "serve --config /etc/levee/levee.toml --data-dir /var/lib/levee/data --listen 0.0.0.0:8087 --metrics-listen 0.0.0.0:8098"
			if got := strings.Join(append(ct.Command, ct.Args...), " "); got != "levee "+wantArgs {
				t.Errorf("command = %q", got)
			}
			if ct.LivenessProbe.HTTPGet.Path != "/healthz" || ct.ReadinessProbe.HTTPGet.Path != "/readyz" ||
				ct.ReadinessProbe.HTTPGet.Port.StrVal != "metrics" {
				t.Errorf("probes = %s / %s", dump(ct.LivenessProbe), dump(ct.ReadinessProbe))
			}
			// The user's resources as they are; without them, the defaults for the spec.
			if want := kvv1.MemberResources(c); !equality.Semantic.DeepEqual(ct.Resources, want) ||
				(len(c.Spec.Resources.Requests) == 0) != ct.Resources.Requests.Cpu().Equal(resource.MustParse(kvv1.DefaultCPURequest)) {
				t.Errorf("resources = %s, want %s", dump(ct.Resources), dump(want))
			}
			if len(pod.TopologySpreadConstraints) != 2 || *pod.TerminationGracePeriodSeconds != 120 {
				t.Errorf("spread %s, grace %d", dump(pod.TopologySpreadConstraints), *pod.TerminationGracePeriodSeconds)
			}

			for _, name := range []string{"kv", "kv-headless"} {
				svc := &corev1.Service{}
				waitFor(t, svc, ns, name)
				assertControlled(t, svc, c)
				if name == "kv-headless" && (svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses) {
					t.Errorf("headless service: clusterIP %q publishNotReady %v", svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
				}
				if svc.Spec.Ports[0].Port != 8087 || svc.Spec.Ports[0].Name != "grpc" {
					t.Errorf("service %s ports = %s", name, dump(svc.Spec.Ports))
				}
			}

			cm := &corev1.ConfigMap{}
			waitFor(t, cm, ns, "kv-config")
			assertControlled(t, cm, c)
			toml := cm.Data["levee.toml"]
			for _, want := range []string{"ring_size = 64", "n_val = 3", "sync_on_write = false", "journal_segment_bytes = 268435456",
				fmt.Sprintf(`"kv-%d.kv-headless.%s.svc:8087"`, n-1, ns)} {
				if !strings.Contains(toml, want) {
					t.Errorf("levee.toml lacks %q:\n%s", want, toml)
				}
			}
			if got := strings.Count(cm.Data["members"], "\n"); got != int(n) {
				t.Errorf("members file has %d lines, want %d", got, n)
			}
			// No settled membership before the ring forms: no members.json yet.
			if js, ok := cm.Data[controller.MembersJSONFileName]; ok {
				t.Errorf("members.json before the ring formed: %q", js)
			}

			pdb := &policyv1.PodDisruptionBudget{}
			waitFor(t, pdb, ns, "kv")
			assertControlled(t, pdb, c)
			if pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("pdb maxUnavailable = %s", pdb.Spec.MaxUnavailable.String())
			}

			// Default window 00-06, 4 runs -> two cron expressions.
			for i, sched := range []string{"0 0,3 * * *", "30 1,4 * * *"} {
				cj := &batchv1.CronJob{}
				waitFor(t, cj, ns, fmt.Sprintf("kv-compact-%d", i))
				assertControlled(t, cj, c)
				if cj.Spec.Schedule != sched || *cj.Spec.TimeZone != "UTC" {
					t.Errorf("compaction cronjob %d schedule = %q tz %v, want %q", i, cj.Spec.Schedule, cj.Spec.TimeZone, sched)
				}
				// One Indexed Job, one member per index: the API server accepted the shape.
				js := cj.Spec.JobTemplate.Spec
				ps := js.Template.Spec
				if len(ps.InitContainers) != 0 || len(ps.Containers) != 1 || *js.Completions != n || *js.CompletionMode != batchv1.IndexedCompletion {
					t.Fatalf("compaction Job: %d init + %d containers, %v completions (%v), want one container per pod and %d indexes",
						len(ps.InitContainers), len(ps.Containers), *js.Completions, *js.CompletionMode, n)
				}
				want := fmt.Sprintf("admin compact-journal --addr kv-$(LEVEE_MEMBER_INDEX).kv-headless.%s.svc:8087 --timeout %d", ns, tc.timeout)
				if got := strings.Join(ps.Containers[0].Args, " "); got != want {
					t.Errorf("member step = %q, want %q", got, want)
				}
			}
			aae := &batchv1.CronJob{}
			waitFor(t, aae, ns, "kv-aae-rebuild")
			assertControlled(t, aae, c)
			if aae.Spec.Schedule != "0 7 * * 0" {
				t.Errorf("aae schedule = %q", aae.Spec.Schedule)
			}
			step := aae.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
			if want := fmt.Sprintf("admin aae-rebuild --addr kv-$(LEVEE_MEMBER_INDEX).kv-headless.%s.svc:8087 --timeout %d", ns, tc.aaeTimeout); strings.Join(step.Args, " ") != want {
				t.Errorf("aae step = %q, want %q", strings.Join(step.Args, " "), want)
			}

			// Status: first reconcile reports the forming cluster.
			got := waitCondition(t, ns, "kv", kvv1.ConditionProgressing, metav1.ConditionTrue, controller.ReasonForming)
			if got.Status.ObservedGeneration != got.Generation || got.Status.Phase != kvv1.PhaseCreating ||
				got.Status.Selector != "app.kubernetes.io/component=node,app.kubernetes.io/instance=kv,app.kubernetes.io/name=levee" {
				t.Errorf("status = %s", dump(got.Status))
			}
		})
	}
}

// TestDefaultsMatchGo: specs defaulted by the API server (CRD schema defaults) equal
// the Go SetDefaults result the builders rely on.
func TestDefaultsMatchGo(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*kvv1.KVCluster)
	}{
		{"empty", nil},
		{"optional blocks", func(c *kvv1.KVCluster) {
			c.Spec.Autoscaling = &kvv1.AutoscalingSpec{}
			c.Spec.TLS.IssuerRef = &kvv1.IssuerRef{Name: "corp"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			createCluster(t, ns, "d-"+strings.ReplaceAll(tc.name, " ", "-"), tc.mutate)
			stored := getCluster(t, ns, "d-"+strings.ReplaceAll(tc.name, " ", "-"))
			want := &kvv1.KVCluster{}
			if tc.mutate != nil {
				tc.mutate(want)
			}
			kvv1.SetDefaults(want)
			if normalize(stored.Spec) != normalize(want.Spec) {
				t.Fatalf("API-server defaults differ from SetDefaults:\nserver: %s\ngo:     %s", dump(stored.Spec), dump(want.Spec))
			}
			if stored.Spec.Replicas != 3 || stored.Spec.RingSize != 64 || stored.Spec.NVal != 3 || stored.Spec.Storage.Profile != kvv1.StorageNVMe {
				t.Fatalf("unexpected defaults %s", dump(stored.Spec))
			}
		})
	}
}

func normalize(s kvv1.KVClusterSpec) string { return dump(s) }

// TestOwnerReferences: every child is controlled by its KVCluster (controller=true,
// blockOwnerDeletion=true), which is what lets the garbage collector delete the children with
// the cluster. envtest runs no garbage collector, so the deletion itself is left to the
// real-cluster e2e; this checks the references, on the children expected by name and on every
// object of a kind the operator owns in the namespace, so a new child without them fails here.
func TestOwnerReferences(t *testing.T) {
	ns := newNamespace(t)
	c := createCluster(t, ns, "gc", nil)
	children := map[string]client.Object{
		"gc": &appsv1.StatefulSet{}, "gc-headless": &corev1.Service{}, "gc-config": &corev1.ConfigMap{},
		"gc-aae-rebuild": &batchv1.CronJob{}, "gc-compact-0": &batchv1.CronJob{},
	}
	for name, obj := range children {
		waitFor(t, obj, ns, name)
		assertControlled(t, obj, c)
	}
	for _, obj := range []client.Object{&corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
		waitFor(t, obj, ns, "gc")
		assertControlled(t, obj, c)
	}
	owned := []client.ObjectList{
		&corev1.ConfigMapList{}, &corev1.ServiceList{}, &appsv1.StatefulSetList{},
		&policyv1.PodDisruptionBudgetList{}, &batchv1.CronJobList{},
	}
	n := 0
	for _, list := range owned {
		if err := k8sClient.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			obj := item.(client.Object)
			if obj.GetName() == "kube-root-ca.crt" { // published into every namespace by Kubernetes
				continue
			}
			assertControlled(t, obj, c)
			n++
		}
	}
	if n < len(children)+2 {
		t.Errorf("listed %d owned objects in %s, expected at least %d", n, ns, len(children)+2)
	}
}

// TestDriftCorrection: edits to children are reverted and deleted children recreated.
func TestDriftCorrection(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "drift", nil)
	sts := &appsv1.StatefulSet{}
	waitFor(t, sts, ns, "drift")

	// Someone scales the StatefulSet directly.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sts), sts); err != nil {
			return err
		}
		seven := int32(7)
		sts.Spec.Replicas = &seven
		sts.Spec.Template.Spec.Containers[0].Image = "evil:latest"
		return k8sClient.Update(ctx, sts)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "StatefulSet replicas and image restored", func() error {
		cur := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(sts), cur); err != nil {
			return err
		}
		if *cur.Spec.Replicas != 3 || cur.Spec.Template.Spec.Containers[0].Image != "levee:dev" {
			return fmt.Errorf("replicas %d image %s", *cur.Spec.Replicas, cur.Spec.Template.Spec.Containers[0].Image)
		}
		return nil
	})

	// Someone edits the node config.
	cm := &corev1.ConfigMap{}
	waitFor(t, cm, ns, "drift-config")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			return err
		}
		cm.Data["levee.toml"] = "ring_size = 8\n"
		return k8sClient.Update(ctx, cm)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ConfigMap restored", func() error {
		cur := &corev1.ConfigMap{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), cur); err != nil {
			return err
		}
		if !strings.Contains(cur.Data["levee.toml"], "ring_size = 64") {
			return fmt.Errorf("levee.toml = %q", cur.Data["levee.toml"])
		}
		return nil
	})

	// Someone deletes the client Service.
	svc := &corev1.Service{}
	waitFor(t, svc, ns, "drift")
	if err := k8sClient.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "client Service recreated", func() error {
		cur := &corev1.Service{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(svc), cur); err != nil {
			return err
		}
		if cur.UID == svc.UID {
			return fmt.Errorf("still the deleted object")
		}
		return nil
	})
}

// TestCompactionCronJobsFollowSpec: changing the window re-derives the CronJobs and
// deletes the ones no longer needed; the Job deadline is the slot between runs. Changing
// the schedule (window, runsPerDay, timeZone, AAE schedule) restarts no member: the
// StatefulSet's pod template, and so its generation, stays as it was.
func TestCompactionCronJobsFollowSpec(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "cj", func(c *kvv1.KVCluster) {
		c.Spec.Compaction.WindowStartHour = int32p(22)
		c.Spec.Compaction.WindowEndHour = int32p(4)
		c.Spec.Compaction.RunsPerDay = int32p(4)
		c.Spec.Compaction.TimeZone = "Europe/Berlin"
	})
	for i, sched := range []string{"0 1,22 * * *", "30 2,23 * * *"} {
		cj := &batchv1.CronJob{}
		waitFor(t, cj, ns, fmt.Sprintf("cj-compact-%d", i))
		if cj.Spec.Schedule != sched || *cj.Spec.TimeZone != "Europe/Berlin" || *cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds != 90*60 {
			t.Errorf("cronjob %d: schedule %q tz %s deadline %d", i, cj.Spec.Schedule, *cj.Spec.TimeZone, *cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds)
		}
	}
	sts := &appsv1.StatefulSet{}
	waitFor(t, sts, ns, "cj")
	gen, hash := sts.Generation, sts.Spec.Template.Annotations[controller.ConfigHashAnnotation]
	if err := updateCluster(t, ns, "cj", func(c *kvv1.KVCluster) {
		c.Spec.Compaction.WindowStartHour = int32p(1)
		c.Spec.Compaction.WindowEndHour = int32p(5)
		c.Spec.Compaction.TimeZone = "UTC"
		c.Spec.AntiEntropy.RebuildSchedule = "30 12 * * 6"
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one compaction CronJob with the new schedule", func() error {
		var list batchv1.CronJobList
		if err := k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{controller.LabelMaintenance: "compaction"}); err != nil {
			return err
		}
		var got []string
		for _, cj := range list.Items {
			if cj.DeletionTimestamp == nil {
				got = append(got, cj.Name+"="+cj.Spec.Schedule)
			}
		}
		if !slices.Equal(got, []string{"cj-compact-0=0 1,2,3,4 * * *"}) {
			return fmt.Errorf("compaction cronjobs = %q", got)
		}
		return nil
	})
	// The reconcile that re-derived the CronJobs has applied the StatefulSet too (it comes first).
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cj"}, sts); err != nil {
		t.Fatal(err)
	}
	if sts.Generation != gen || sts.Spec.Template.Annotations[controller.ConfigHashAnnotation] != hash {
		t.Errorf("a schedule change touched the StatefulSet: generation %d -> %d, config hash %s -> %s (members would restart)",
			gen, sts.Generation, hash, sts.Spec.Template.Annotations[controller.ConfigHashAnnotation])
	}
}
