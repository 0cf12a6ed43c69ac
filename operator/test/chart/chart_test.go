//go:build chart

// Package chart tests the Helm chart charts/levee-operator with the real helm binary: lint,
// and `helm template` with the values users change, asserted on the rendered objects. It also
// keeps the chart in step with what `make manifests` generates (CRDs, the manager's RBAC).
// Run by `make chart-test` (HELM and CHART are set there); the `chart` build tag keeps it out of
// `go test ./...`, which has no helm.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func helmBin(t *testing.T) string {
	t.Helper()
	h := os.Getenv("HELM")
	if h == "" {
		t.Fatal("HELM is not set: run `make chart-test`, which installs helm and sets it")
	}
	return h
}

func chartDir(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("CHART"); c != "" {
		return c
	}
	d, err := filepath.Abs("../../../charts/levee-operator")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// render runs helm template with --set pairs and returns the objects by "Kind/name".
func render(t *testing.T, sets ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	return renderAPI(t, nil, sets...)
}

// renderAPI is render on an API server that also serves apiVersions (helm's --api-versions,
// what `helm install` finds by discovery), e.g. monitoring.coreos.com/v1/PrometheusRule.
func renderAPI(t *testing.T, apiVersions []string, sets ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	args := renderArgs(t, sets...)
	for _, v := range apiVersions {
		args = append(args, "--api-versions", v)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

func renderArgs(t *testing.T, sets ...string) []string {
	args := []string{"template", "lv", chartDir(t), "--namespace", "levee-system", "--kube-version", "1.31.4"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return args
}

func decode(t *testing.T, manifest string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]interface{}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, manifest)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		key := u.GetKind() + "/" + u.GetName()
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = u
	}
}

func into(t *testing.T, u *unstructured.Unstructured, v interface{}) {
	t.Helper()
	if u == nil {
		t.Fatalf("object missing")
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s %s is not a valid %T: %v", u.GetKind(), u.GetName(), v, err)
	}
}

func deployment(t *testing.T, objs map[string]*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	into(t, objs["Deployment/lv-levee-operator"], d)
	return d
}

func kinds(objs map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range objs {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestLint(t *testing.T) {
	for _, sets := range [][]string{
		nil,
		{"replicaCount=2", "serviceMonitor.enabled=true", "serviceMonitor.prometheusServiceAccount.name=prometheus",
			"serviceMonitor.prometheusServiceAccount.namespace=monitoring"},
		{"metrics.secure=false", "rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=ops"},
		{"dashboards.enabled=false", "prometheusRule.enabled=true", "prometheusRule.labels.release=prometheus"},
		{"dashboards.label=grafana_dashboard_levee", "dashboards.namespace=monitoring", "dashboards.annotations.grafana_folder=levee"},
	} {
		args := []string{"lint", chartDir(t), "--strict", "--kube-version", "1.31.4"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// The chart's CRDs are the ones `make manifests` generates (it copies them into crds/).
func TestCRDsMatchGenerated(t *testing.T) {
	gen, err := filepath.Glob("../../config/crd/bases/*.yaml")
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	chart, _ := filepath.Glob(filepath.Join(chartDir(t), "crds", "*.yaml"))
	if len(chart) != len(gen) {
		t.Errorf("chart has %d CRD files, operator/config/crd/bases %d: run `make manifests`", len(chart), len(gen))
	}
	for _, g := range gen {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Join(chartDir(t), "crds", filepath.Base(g)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/levee-operator/crds/%s differs from %s (err %v): run `make manifests`", filepath.Base(g), g, err)
		}
	}
}

// The manager's ClusterRole grants exactly the generated rules (from the +kubebuilder:rbac
// markers, the role the envtest suite runs the operator with), plus the secure-metrics reviews.
func TestClusterRoleMatchesGeneratedRBAC(t *testing.T) {
	data, err := os.ReadFile("../../config/rbac/role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var gen rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &gen); err != nil {
		t.Fatal(err)
	}
	reviews := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	for _, tc := range []struct {
		name string
		sets []string
		want []rbacv1.PolicyRule
	}{
		{"secure metrics (default)", nil, append(slices.Clone(gen.Rules), reviews...)},
		{"plain metrics", []string{"metrics.secure=false"}, gen.Rules},
		{"no metrics", []string{"metrics.enabled=false"}, gen.Rules},
	} {
		var role rbacv1.ClusterRole
		into(t, render(t, tc.sets...)["ClusterRole/lv-levee-operator"], &role)
		if !reflect.DeepEqual(role.Rules, tc.want) {
			gotY, _ := yaml.Marshal(role.Rules)
			wantY, _ := yaml.Marshal(tc.want)
			t.Errorf("%s: chart ClusterRole rules differ from operator/config/rbac/role.yaml (edit templates/rbac.yaml after `make manifests`):\n--- chart\n%s--- want\n%s", tc.name, gotY, wantY)
		}
	}
	// No verb the operator never calls: in particular no update on anything but finalizers.
	for _, r := range gen.Rules {
		if slices.Contains(r.Verbs, "update") && !slices.Equal(r.Resources, []string{"kvclusters/finalizers"}) {
			t.Errorf("generated role grants update on %v, which the operator never calls", r.Resources)
		}
		if slices.Contains(r.Verbs, "*") {
			t.Errorf("wildcard verbs on %v", r.Resources)
		}
	}
}

func TestDefaults(t *testing.T) {
	objs := render(t)
	// No PrometheusRule: `helm template` without --api-versions has no Prometheus Operator CRDs.
	want := []string{"ClusterRole/lv-levee-operator", "ClusterRole/lv-levee-operator-metrics-reader", "ClusterRoleBinding/lv-levee-operator",
		"ConfigMap/lv-levee-operator-dashboard-autoscaler",
		"ConfigMap/lv-levee-operator-dashboard-maintenance", "ConfigMap/lv-levee-operator-dashboard-overview",
		"ConfigMap/lv-levee-operator-dashboard-resources",
		"Deployment/lv-levee-operator", "Role/lv-levee-operator-leader-election", "RoleBinding/lv-levee-operator-leader-election",
		"Service/lv-levee-operator-metrics", "ServiceAccount/lv-levee-operator"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Errorf("objects = %q\nwant      %q", got, want)
	}
	d := deployment(t, objs)
	if *d.Spec.Replicas != 1 || d.Namespace != "levee-system" || d.Spec.Template.Spec.ServiceAccountName != "lv-levee-operator" {
		t.Errorf("deployment %s/%s replicas %d sa %s", d.Namespace, d.Name, *d.Spec.Replicas, d.Spec.Template.Spec.ServiceAccountName)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "levee-operator:0.1.0" || !slices.Equal(c.Command, []string{"/manager"}) {
		t.Errorf("image %s command %v", c.Image, c.Command)
	}
	wantArgs := []string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443", "--metrics-secure=true", "--zap-log-level=info"}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args = %q\nwant   %q", c.Args, wantArgs)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Port.String() != "health" {
		t.Errorf("probes %+v %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().String() != "10m" || c.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources %+v", c.Resources)
	}
	sc, psc := c.SecurityContext, d.Spec.Template.Spec.SecurityContext
	if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*psc.RunAsNonRoot || *psc.RunAsUser != 65532 {
		t.Errorf("security contexts %+v %+v", sc, psc)
	}
	var svc struct {
		Spec struct {
			Ports []struct {
				Port       int    `json:"port"`
				TargetPort string `json:"targetPort"`
			} `json:"ports"`
		} `json:"spec"`
	}
	b, _ := yaml.Marshal(objs["Service/lv-levee-operator-metrics"].Object)
	_ = yaml.Unmarshal(b, &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || svc.Spec.Ports[0].TargetPort != "metrics" {
		t.Errorf("metrics service %s", b)
	}
	var le rbacv1.Role
	into(t, objs["Role/lv-levee-operator-leader-election"], &le)
	if le.Namespace != "levee-system" || !slices.Equal(le.Rules[0].Resources, []string{"leases"}) || !slices.Equal(le.Rules[0].Verbs, []string{"get", "create", "update"}) {
		t.Errorf("leader election role %+v", le)
	}
}

// The values users change, each asserted on what it renders.
func TestValuesUsersChange(t *testing.T) {
	t.Run("image", func(t *testing.T) {
		c := deployment(t, render(t, "image.repository=registry.example/levee-operator", "image.tag=1.2.3", "image.pullPolicy=Never")).Spec.Template.Spec.Containers[0]
		if c.Image != "registry.example/levee-operator:1.2.3" || c.ImagePullPolicy != "Never" {
			t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
		}
	})
	t.Run("two replicas keep leader election", func(t *testing.T) {
		d := deployment(t, render(t, "replicaCount=2"))
		if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Args[0] != "--leader-elect" {
			t.Errorf("replicas %d args %v", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Args)
		}
	})
	t.Run("single replica without leader election", func(t *testing.T) {
		objs := render(t, "leaderElection.enabled=false")
		if slices.Contains(deployment(t, objs).Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
			t.Errorf("--leader-elect still passed")
		}
		if objs["Role/lv-levee-operator-leader-election"] != nil {
			t.Errorf("leader election Role rendered without leader election")
		}
	})
	t.Run("service monitor", func(t *testing.T) {
		objs := render(t, "serviceMonitor.enabled=true", "serviceMonitor.interval=15s", "serviceMonitor.labels.release=prometheus",
			"serviceMonitor.prometheusServiceAccount.name=prometheus-k8s", "serviceMonitor.prometheusServiceAccount.namespace=monitoring")
		sm := objs["ServiceMonitor/lv-levee-operator"]
		if sm == nil {
			t.Fatalf("no ServiceMonitor in %q", kinds(objs))
		}
		ep, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		e := ep[0].(map[string]interface{})
		if e["port"] != "metrics" || e["scheme"] != "https" || e["interval"] != "15s" || e["bearerTokenFile"] == nil || sm.GetLabels()["release"] != "prometheus" {
			t.Errorf("ServiceMonitor %v labels %v", e, sm.GetLabels())
		}
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		svc := objs["Service/lv-levee-operator-metrics"]
		for k, v := range sel {
			if svc.GetLabels()[k] != v {
				t.Errorf("ServiceMonitor selects %s=%s, the metrics Service has %v", k, v, svc.GetLabels())
			}
		}
		var rb rbacv1.ClusterRoleBinding
		into(t, objs["ClusterRoleBinding/lv-levee-operator-metrics-reader"], &rb)
		if rb.RoleRef.Name != "lv-levee-operator-metrics-reader" || rb.Subjects[0].Name != "prometheus-k8s" || rb.Subjects[0].Namespace != "monitoring" {
			t.Errorf("metrics reader binding %+v", rb)
		}
	})
	t.Run("plain http metrics", func(t *testing.T) {
		objs := render(t, "metrics.secure=false", "metrics.port=8080", "serviceMonitor.enabled=true")
		args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "--metrics-bind-address=:8080") || !slices.Contains(args, "--metrics-secure=false") {
			t.Errorf("args %v", args)
		}
		ep, _, _ := unstructured.NestedSlice(objs["ServiceMonitor/lv-levee-operator"].Object, "spec", "endpoints")
		if e := ep[0].(map[string]interface{}); e["scheme"] != "http" || e["bearerTokenFile"] != nil {
			t.Errorf("endpoint %v", e)
		}
		if objs["ClusterRole/lv-levee-operator-metrics-reader"] != nil {
			t.Errorf("metrics-reader role rendered for plain metrics")
		}
	})
	t.Run("metrics off", func(t *testing.T) {
		objs := render(t, "metrics.enabled=false")
		if !slices.Contains(deployment(t, objs).Spec.Template.Spec.Containers[0].Args, "--metrics-bind-address=0") || objs["Service/lv-levee-operator-metrics"] != nil {
			t.Errorf("metrics still served: %q", kinds(objs))
		}
	})
	t.Run("resources, placement, pod metadata", func(t *testing.T) {
		d := deployment(t, render(t, "resources.limits.cpu=500m", "resources.limits.memory=1Gi", "nodeSelector.role=infra",
			"tolerations[0].key=infra", "tolerations[0].operator=Exists", "priorityClassName=system-cluster-critical",
			"podAnnotations.team=storage", "podLabels.tier=control", "logLevel=debug", "imagePullSecrets[0].name=regcred"))
		ps := d.Spec.Template.Spec
		c := ps.Containers[0]
		if c.Resources.Limits.Cpu().String() != "500m" || c.Resources.Limits.Memory().String() != "1Gi" || ps.NodeSelector["role"] != "infra" ||
			len(ps.Tolerations) != 1 || ps.PriorityClassName != "system-cluster-critical" || d.Spec.Template.Annotations["team"] != "storage" ||
			d.Spec.Template.Labels["tier"] != "control" || !slices.Contains(c.Args, "--zap-log-level=debug") || ps.ImagePullSecrets[0].Name != "regcred" {
			t.Errorf("pod spec %+v", ps)
		}
	})
	t.Run("existing service account, no RBAC", func(t *testing.T) {
		objs := render(t, "serviceAccount.create=false", "serviceAccount.name=ops", "rbac.create=false", "dashboards.enabled=false")
		if got := kinds(objs); !slices.Equal(got, []string{"Deployment/lv-levee-operator", "Service/lv-levee-operator-metrics"}) {
			t.Errorf("objects = %q", got)
		}
		if sa := deployment(t, objs).Spec.Template.Spec.ServiceAccountName; sa != "ops" {
			t.Errorf("serviceAccountName %s", sa)
		}
	})
	t.Run("fullnameOverride", func(t *testing.T) {
		objs := render(t, "fullnameOverride=levee")
		if objs["Deployment/levee"] == nil || objs["ClusterRole/levee"] == nil {
			t.Errorf("objects = %q", kinds(objs))
		}
	})
}

// Bad values fail `helm template` with a message that names the value and the fix.
func TestBadValuesAreRejected(t *testing.T) {
	cases := []struct {
		sets []string
		msg  string
	}{
		{[]string{"replicaCount=2", "leaderElection.enabled=false"}, "enable leader election or set replicaCount to 1"},
		{[]string{"serviceAccount.create=false"}, "serviceAccount.name is required when serviceAccount.create is false"},
		{[]string{"serviceMonitor.enabled=true", "metrics.enabled=false"}, "there would be nothing to scrape"},
		{[]string{"serviceMonitor.prometheusServiceAccount.name=prom"}, "serviceMonitor.prometheusServiceAccount.namespace is required"},
		{[]string{"metrics.port=8081"}, "metrics.port and healthProbePort are both 8081"},
		{[]string{"replicaCount=two"}, "replicaCount"},
		{[]string{"image.pullPolicy=Sometimes"}, "pullPolicy"},
		{[]string{"metrics.port=70000"}, "metrics.port"},
		{[]string{"serviceMonitor.interval=often"}, "interval"},
		{[]string{"logLevel=verbose"}, "logLevel"},
		{[]string{"metrcs.enabled=false"}, "metrcs"},
		{[]string{"prometheusRule.enabled=maybe"}, "prometheusRule.enabled"},
		{[]string{"dashboards.label=grafana dashboard"}, "dashboards.label"},
		{[]string{"dashboards.labelValue=-1-"}, "dashboards.labelValue"},
		{[]string{"dashboards.labels.team=1"}, "dashboards.labels.team"},
	}
	for _, tc := range cases {
		_, err := helm(t, renderArgs(t, tc.sets...)...)
		if err == nil {
			t.Errorf("%v: accepted, want an error mentioning %q", tc.sets, tc.msg)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: error does not mention %q:\n%v", tc.sets, tc.msg, err)
		}
	}
}
