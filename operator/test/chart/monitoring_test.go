//go:build chart

package chart

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The single sources of the dashboards and the rules the chart ships (dashboards/ of the repo).
const (
	sourceDashboards = "../../../dashboards/grafana"
	sourceRules      = "../../../dashboards/alerts/levee.rules.yaml"
	// What `helm install` finds by discovery when the Prometheus Operator CRDs are installed.
	prometheusRuleAPI = "monitoring.coreos.com/v1/PrometheusRule"
)

// The chart's copies (files/, written by `make dashboards-gen`; Helm reads no file outside the
// chart) are the files of dashboards/ byte for byte, and there is no other dashboard.
func TestChartFilesMatchDashboards(t *testing.T) {
	src, err := filepath.Glob(filepath.Join(sourceDashboards, "*.json"))
	if err != nil || len(src) < 3 {
		t.Fatalf("dashboards in %s: %v %v", sourceDashboards, src, err)
	}
	chart, _ := filepath.Glob(filepath.Join(chartDir(t), "files", "grafana", "*.json"))
	if names(chart) != names(src) {
		t.Errorf("charts/levee-operator/files/grafana has %s, dashboards/grafana %s: run `make dashboards-gen`", names(chart), names(src))
	}
	pairs := [][2]string{{sourceRules, filepath.Join(chartDir(t), "files", "alerts", "levee.rules.yaml")}}
	for _, f := range src {
		pairs = append(pairs, [2]string{f, filepath.Join(chartDir(t), "files", "grafana", filepath.Base(f))})
	}
	for _, p := range pairs {
		want, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p[1])
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (err %v): run `make dashboards-gen`", p[1], p[0], err)
		}
	}
}

func names(paths []string) string {
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// dashboardConfigMaps returns the rendered ConfigMaps holding dashboards, by name.
func dashboardConfigMaps(objs map[string]*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for k, u := range objs {
		if strings.HasPrefix(k, "ConfigMap/") && strings.Contains(u.GetName(), "-dashboard-") {
			out[u.GetName()] = u
		}
	}
	return out
}

func TestDashboardConfigMaps(t *testing.T) {
	src, _ := filepath.Glob(filepath.Join(sourceDashboards, "*.json"))
	t.Run("default: one ConfigMap per dashboard for the Grafana sidecar", func(t *testing.T) {
		cms := dashboardConfigMaps(render(t))
		if len(cms) != len(src) || len(src) == 0 {
			t.Fatalf("%d dashboard ConfigMaps for %d dashboards", len(cms), len(src))
		}
		for _, f := range src {
			base := filepath.Base(f)
			name := "lv-levee-operator-dashboard-" + strings.TrimPrefix(strings.TrimSuffix(base, ".json"), "levee-")
			cm := cms[name]
			if cm == nil {
				t.Errorf("no ConfigMap %s for %s among %v", name, base, kinds(cms))
				continue
			}
			if cm.GetNamespace() != "levee-system" || cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetLabels()["app.kubernetes.io/instance"] != "lv" {
				t.Errorf("%s: namespace %s labels %v", name, cm.GetNamespace(), cm.GetLabels())
			}
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			want, _ := os.ReadFile(f)
			if len(data) != 1 || data[base] != string(want) {
				t.Errorf("%s: data keys %v; %s is not dashboards/grafana/%s byte for byte", name, mapKeys(data), base, base)
			}
			var d struct{ UID, Title string }
			if err := json.Unmarshal([]byte(data[base]), &d); err != nil || d.UID == "" {
				t.Errorf("%s: not a dashboard: %v %+v", name, err, d)
			}
		}
	})
	t.Run("sidecar label, namespace, folder annotation", func(t *testing.T) {
		cms := dashboardConfigMaps(render(t, "dashboards.label=grafana.com/dashboard", "dashboards.labelValue=levee",
			"dashboards.namespace=monitoring", "dashboards.annotations.grafana_folder=levee", "dashboards.labels.team=storage"))
		if len(cms) != len(src) {
			t.Fatalf("%d dashboard ConfigMaps", len(cms))
		}
		for name, cm := range cms {
			l := cm.GetLabels()
			if cm.GetNamespace() != "monitoring" || l["grafana.com/dashboard"] != "levee" || l["grafana_dashboard"] != "" || l["team"] != "storage" ||
				cm.GetAnnotations()["grafana_folder"] != "levee" {
				t.Errorf("%s: namespace %s labels %v annotations %v", name, cm.GetNamespace(), l, cm.GetAnnotations())
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		if cms := dashboardConfigMaps(render(t, "dashboards.enabled=false")); len(cms) != 0 {
			t.Errorf("dashboards.enabled=false still renders %v", kinds(cms))
		}
	})
}

func TestPrometheusRule(t *testing.T) {
	const key = "PrometheusRule/lv-levee-operator-rules"
	withCRD := []string{prometheusRuleAPI}
	for _, tc := range []struct {
		name string
		api  []string
		sets []string
		want bool
	}{
		{"auto without the Prometheus Operator", nil, nil, false},
		{"auto with the Prometheus Operator", withCRD, nil, true},
		{"auto set explicitly", withCRD, []string{"prometheusRule.enabled=auto"}, true},
		{"true without discovery (helm template, GitOps)", nil, []string{"prometheusRule.enabled=true"}, true},
		{"false with the Prometheus Operator", withCRD, []string{"prometheusRule.enabled=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderAPI(t, tc.api, tc.sets...)
			if got := objs[key] != nil; got != tc.want {
				t.Fatalf("%s rendered: %v, want %v (objects %q)", key, got, tc.want, kinds(objs))
			}
			for k := range objs {
				if strings.HasPrefix(k, "PrometheusRule/") && k != key {
					t.Errorf("unexpected %s", k)
				}
			}
		})
	}

	t.Run("content is dashboards/alerts/levee.rules.yaml", func(t *testing.T) {
		pr := renderAPI(t, withCRD)[key]
		if pr.GetAPIVersion() != "monitoring.coreos.com/v1" || pr.GetNamespace() != "levee-system" {
			t.Errorf("%s %s/%s", pr.GetAPIVersion(), pr.GetNamespace(), pr.GetName())
		}
		src, err := os.ReadFile(sourceRules)
		if err != nil {
			t.Fatal(err)
		}
		var want, got interface{}
		if err := yaml.Unmarshal(src, &want); err != nil {
			t.Fatal(err)
		}
		b, _ := yaml.Marshal(pr.Object["spec"])
		if err := yaml.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("PrometheusRule spec differs from %s:\n--- rendered\n%s", sourceRules, b)
		}
		// Not vacuous: the alerts and recording rules are there, with their templates untouched.
		var alerts, records []string
		groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
		for _, g := range groups {
			rules, _, _ := unstructured.NestedSlice(g.(map[string]interface{}), "rules")
			for _, r := range rules {
				m := r.(map[string]interface{})
				if a, ok := m["alert"].(string); ok {
					alerts = append(alerts, a)
				}
				if rec, ok := m["record"].(string); ok {
					records = append(records, rec)
				}
			}
		}
		if !slices.Contains(alerts, "LeveeMemberDown") || !slices.Contains(alerts, "LeveeMemberMissing") || len(records) < 3 {
			t.Errorf("alerts %v records %v", alerts, records)
		}
		if !strings.Contains(string(b), "{{ $labels.pod }}") {
			t.Errorf("alert templates were expanded by Helm:\n%s", b)
		}
	})

	t.Run("labels, annotations, namespace", func(t *testing.T) {
		pr := renderAPI(t, withCRD, "prometheusRule.labels.release=prometheus", "prometheusRule.annotations.team=storage",
			"prometheusRule.namespace=monitoring")[key]
		if pr.GetLabels()["release"] != "prometheus" || pr.GetAnnotations()["team"] != "storage" || pr.GetNamespace() != "monitoring" {
			t.Errorf("labels %v annotations %v namespace %s", pr.GetLabels(), pr.GetAnnotations(), pr.GetNamespace())
		}
	})
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
