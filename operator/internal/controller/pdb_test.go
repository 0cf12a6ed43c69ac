package controller

import (
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func TestBuildPDB(t *testing.T) {
	c := cluster(nil)
	p := BuildPDB(c)
	if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 || p.Spec.MinAvailable != nil {
		t.Errorf("pdb spec = %+v", p.Spec)
	}
	if p.Name != "kv" || p.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "node" {
		t.Errorf("pdb = %+v", p)
	}
	sel, _ := labels.ValidatedSelectorFromSet(p.Spec.Selector.MatchLabels)
	if !sel.Matches(labels.Set(BuildStatefulSet(c).Spec.Template.Labels)) {
		t.Errorf("pdb selector does not match the member pods")
	}
}
