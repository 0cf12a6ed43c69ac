package envtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/controller"
)

// Real CRDs, shipped inside these Go modules (fetched through the Go module proxy).
const (
	prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.77.2"
	certManagerModule        = "github.com/cert-manager/cert-manager@v1.16.2"
)

// moduleDir downloads a module (or finds it in the module cache) and returns its directory.
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "mod", "download", "-json", modVersion)
	cmd.Dir = t.TempDir() // outside any module: does not touch go.mod/go.sum
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	_ = json.Unmarshal(out, &info)
	if err != nil || info.Dir == "" {
		t.Fatalf("cannot download %s for its CRD YAMLs: %v %s\n%s", modVersion, err, info.Error, out)
	}
	return info.Dir
}

// installCRD loads a CRD YAML from a module and creates it. cert-manager ships its
// CRDs as Helm templates whose template parts sit in comments and in label values:
// the labels and annotations are dropped, the schema is used unchanged.
func installCRD(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatalf("parse CRD %s: %v", path, err)
	}
	if crd.Spec.Group == "" || len(crd.Spec.Versions) == 0 {
		t.Fatalf("%s is not a CRD", path)
	}
	crd.Labels, crd.Annotations = nil, nil
	if err := k8sClient.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD %s: %v", crd.Name, err)
	}
	eventually(t, "CRD "+crd.Name+" established", func() error {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: crd.Name}, cur); err != nil {
			return err
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not established")
	})
}

func getU(gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
}

// TestOptionalIntegrations: without the Prometheus Operator and cert-manager CRDs the
// operator creates none of their objects and explains why in conditions; once the
// real CRDs are installed, ServiceMonitor, Issuers and Certificates appear (and are
// accepted by the real CRD schemas). No PrometheusRule is created (the alert rules ship with
// the Helm chart); one an earlier operator version created for a cluster is deleted, with an
// Event, while a PrometheusRule of the same name that the cluster does not own is left alone.
func TestOptionalIntegrations(t *testing.T) {
	ns := newNamespace(t)
	createCluster(t, ns, "tls", func(c *kvv1.KVCluster) {
		c.Spec.TLS.Enabled = true
		c.Spec.Monitoring.PrometheusRule = ptrTo(true) // deprecated: accepted, ignored
	})
	createCluster(t, ns, "plain", func(c *kvv1.KVCluster) {
		c.Spec.Monitoring.ServiceMonitor = new(bool) // false: no monitoring objects at all
	})

	// Phase 1: CRDs absent.
	c := waitCondition(t, ns, "tls", kvv1.ConditionMonitoring, metav1.ConditionFalse, controller.ReasonPrometheusOpMissing)
	if msg := condMessage(c, kvv1.ConditionMonitoring); !strings.Contains(msg, "Prometheus Operator CRDs") || !strings.Contains(msg, controller.PrometheusRuleDeprecated) {
		t.Errorf("monitoring condition message = %q", msg)
	}
	if c.Spec.Monitoring.PrometheusRule == nil || !*c.Spec.Monitoring.PrometheusRule {
		t.Errorf("the API server dropped the deprecated spec.monitoring.prometheusRule: %s", dump(c.Spec.Monitoring))
	}
	if p := getCluster(t, ns, "plain"); p.Spec.Monitoring.PrometheusRule != nil {
		t.Errorf("spec.monitoring.prometheusRule was defaulted: %s", dump(p.Spec.Monitoring))
	}
	waitCondition(t, ns, "plain", kvv1.ConditionMonitoring, metav1.ConditionTrue, controller.ReasonDisabled)
	c = waitCondition(t, ns, "tls", kvv1.ConditionTLS, metav1.ConditionFalse, controller.ReasonCertManagerMissing)
	if msg := condMessage(c, kvv1.ConditionTLS); !strings.Contains(msg, "cert-manager CRDs") || !strings.Contains(msg, "tls-tls") {
		t.Errorf("tls condition message = %q", msg)
	}
	// Missing optional CRDs do not degrade the cluster.
	waitCondition(t, ns, "tls", kvv1.ConditionDegraded, metav1.ConditionFalse, controller.ReasonAsExpected)
	sts := &appsv1.StatefulSet{}
	waitFor(t, sts, ns, "tls")
	if v := sts.Spec.Template.Spec.Volumes; len(v) != 2 || v[1].Secret == nil || v[1].Secret.SecretName != "tls-tls" {
		t.Errorf("TLS secret volume missing: %s", dump(v))
	}
	if _, err := getU(controller.ServiceMonitorGVK, ns, "tls"); err == nil {
		t.Fatalf("ServiceMonitor exists before its CRD")
	}
	plain := getCluster(t, ns, "plain")
	for _, cond := range plain.Status.Conditions {
		if cond.Type == kvv1.ConditionTLS {
			t.Errorf("TLS condition reported although TLS is disabled: %+v", cond)
		}
	}

	// Phase 2: install the real CRDs from the Prometheus Operator and cert-manager modules.
	prom := moduleDir(t, prometheusOperatorModule)
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		installCRD(t, filepath.Join(prom, "example", "prometheus-operator-crd", f))
	}
	cm := moduleDir(t, certManagerModule)
	for _, f := range []string{"crd-issuers.yaml", "crd-certificates.yaml"} {
		installCRD(t, filepath.Join(cm, "deploy", "crds", f))
	}

	waitCondition(t, ns, "tls", kvv1.ConditionMonitoring, metav1.ConditionTrue, controller.ReasonCreated)
	waitCondition(t, ns, "tls", kvv1.ConditionTLS, metav1.ConditionTrue, controller.ReasonCreated)
	owner := getCluster(t, ns, "tls")
	for _, o := range []struct {
		gvk  schema.GroupVersionKind
		name string
	}{
		{controller.ServiceMonitorGVK, "tls"},
		{controller.IssuerGVK, "tls-selfsigned"}, {controller.IssuerGVK, "tls-ca"},
		{controller.CertificateGVK, "tls-ca"}, {controller.CertificateGVK, "tls-tls"},
	} {
		var u *unstructured.Unstructured
		eventually(t, o.gvk.Kind+" "+o.name, func() (err error) { u, err = getU(o.gvk, ns, o.name); return err })
		assertControlled(t, u, owner)
	}
	cert, _ := getU(controller.CertificateGVK, ns, "tls-tls")
	if s, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); s != "tls-tls" {
		t.Errorf("certificate secretName = %q", s)
	}
	if dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames"); !contains(dns, "*.tls-headless."+ns+".svc") {
		t.Errorf("certificate dnsNames = %q", dns)
	}
	sm, _ := getU(controller.ServiceMonitorGVK, ns, "tls")
	if port, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints"); len(port) != 1 || port[0].(map[string]interface{})["port"] != "metrics" {
		t.Errorf("servicemonitor endpoints = %v", port)
	}

	for _, name := range []string{"tls", "plain"} {
		if _, err := getU(controller.PrometheusRuleGVK, ns, name); !apierrors.IsNotFound(err) {
			t.Errorf("PrometheusRule %s: err=%v, want NotFound (the operator creates none)", name, err)
		}
	}

	// The second cluster opted out of the ServiceMonitor and has TLS off.
	waitCondition(t, ns, "plain", kvv1.ConditionMonitoring, metav1.ConditionTrue, controller.ReasonDisabled)
	if _, err := getU(controller.ServiceMonitorGVK, ns, "plain"); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceMonitor of the plain cluster: err=%v, want NotFound", err)
	}
	if _, err := getU(controller.CertificateGVK, ns, "plain-tls"); !apierrors.IsNotFound(err) {
		t.Errorf("Certificate of the TLS-less cluster: err=%v, want NotFound", err)
	}

	// Upgrade from an operator version that created a PrometheusRule per cluster: the one the
	// tls cluster controls goes, the one named like the plain cluster but not owned by it stays.
	legacy := legacyPrometheusRule(ns, "tls", owner)
	if err := k8sClient.Create(ctx, legacy); err != nil {
		t.Fatalf("create the legacy PrometheusRule: %v", err)
	}
	foreign := legacyPrometheusRule(ns, "plain", nil)
	if err := k8sClient.Create(ctx, foreign); err != nil {
		t.Fatalf("create a PrometheusRule the cluster does not own: %v", err)
	}

	// Turning the ServiceMonitor off deletes it (and this reconcile removes the legacy rule).
	if err := updateCluster(t, ns, "tls", func(c *kvv1.KVCluster) { c.Spec.Monitoring.ServiceMonitor = new(bool) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ServiceMonitor deleted after monitoring.serviceMonitor=false", func() error {
		if _, err := getU(controller.ServiceMonitorGVK, ns, "tls"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})
	eventually(t, "legacy PrometheusRule of the tls cluster deleted", func() error {
		if _, err := getU(controller.PrometheusRuleGVK, ns, "tls"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})
	eventually(t, "a PrometheusRuleRemoved Event", func() error {
		var evs corev1.EventList
		if err := k8sClient.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == controller.ReasonPrometheusRuleRemoved && e.Type == corev1.EventTypeNormal && e.InvolvedObject.Name == "tls" &&
				strings.Contains(e.Message, "Helm chart") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none %s for tls", len(evs.Items), controller.ReasonPrometheusRuleRemoved)
	})

	// The plain cluster's reconcile that applies its ServiceMonitor has passed the cleanup step
	// (which runs first): the PrometheusRule it does not own must still be there.
	if err := updateCluster(t, ns, "plain", func(c *kvv1.KVCluster) { c.Spec.Monitoring.ServiceMonitor = ptrTo(true) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ServiceMonitor of the plain cluster", func() error { _, err := getU(controller.ServiceMonitorGVK, ns, "plain"); return err })
	if u, err := getU(controller.PrometheusRuleGVK, ns, "plain"); err != nil || u.GetDeletionTimestamp() != nil {
		t.Errorf("the PrometheusRule the plain cluster does not own was deleted (err %v)", err)
	}
}

// legacyPrometheusRule is a PrometheusRule as earlier operator versions created it for a
// cluster (named like it, controlled by it), or, with owner nil, one someone else created.
func legacyPrometheusRule(ns, name string, owner *kvv1.KVCluster) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"spec": map[string]interface{}{"groups": []interface{}{map[string]interface{}{
			"name":  "levee." + ns + "." + name,
			"rules": []interface{}{map[string]interface{}{"alert": "LeveeMemberDown", "expr": `up{service="` + name + `-headless"} == 0`, "for": "5m"}},
		}}},
	}}
	u.SetGroupVersionKind(controller.PrometheusRuleGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	if owner != nil {
		u.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(owner, kvv1.GroupVersion.WithKind("KVCluster"))})
	}
	return u
}

func ptrTo[T any](v T) *T { return &v }

func condMessage(c *kvv1.KVCluster, typ string) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == typ {
			return cond.Message
		}
	}
	return ""
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
