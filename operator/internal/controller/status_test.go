package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func sts(gen, observed int64, replicas, updated, ready int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{}
	s.Generation = gen
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, ReadyReplicas: ready}
	return s
}

func TestComputeStatus(t *testing.T) {
	three := MemberAddresses(cluster(nil), 3)
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	type conds map[string]string // type -> "True/Reason"
	cases := []struct {
		name        string
		mutate      func(*kvv1.KVCluster)
		obs         Observed
		phase       string
		members     int
		ringVersion int64
		ringChange  bool
		leaving     int
		conds       conds
		noTLS       bool
	}{
		{name: "no StatefulSet yet", obs: Observed{}, phase: kvv1.PhaseCreating,
			conds: conds{"Available": "False/MembersNotReady", "Progressing": "True/Forming", "Degraded": "False/AsExpected",
				"MonitoringReady": "False/PrometheusOperatorNotInstalled"}, noTLS: true},
		{name: "formed: all ready for the first time", obs: Observed{StatefulSet: sts(1, 1, 3, 3, 3), MonitoringCRDs: true},
			phase: kvv1.PhaseRunning, members: 3, ringVersion: 1,
			conds: conds{"Available": "True/MembersReady", "Progressing": "False/RolloutComplete", "Degraded": "False/AsExpected", "MonitoringReady": "True/Created"}},
		{name: "one member down after forming", mutate: func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = three, 1 },
			obs: Observed{StatefulSet: sts(1, 1, 3, 3, 2)}, phase: kvv1.PhaseDegraded, members: 3, ringVersion: 1,
			conds: conds{"Available": "True/MembersReady", "Degraded": "True/MembersNotReady", "Progressing": "False/RolloutComplete"}},
		{name: "two members down", mutate: func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = three, 1 },
			obs: Observed{StatefulSet: sts(1, 1, 3, 3, 1)}, phase: kvv1.PhaseDegraded, members: 3, ringVersion: 1,
			conds: conds{"Available": "False/MembersNotReady", "Degraded": "True/MembersNotReady"}},
		{name: "scale out in progress", mutate: func(c *kvv1.KVCluster) { c.Spec.Replicas = 5; c.Status.Members, c.Status.RingVersion = three, 1 },
			obs: Observed{StatefulSet: sts(2, 2, 5, 5, 3)}, phase: kvv1.PhaseScaling, members: 3, ringVersion: 1, ringChange: true,
			conds: conds{"Progressing": "True/WaitingForPods", "Degraded": "False/AsExpected", "Available": "False/MembersNotReady"}},
		{name: "scale out published once the pods are ready", mutate: func(c *kvv1.KVCluster) { c.Spec.Replicas = 5; c.Status.Members, c.Status.RingVersion = three, 1 },
			obs: Observed{StatefulSet: sts(2, 2, 5, 5, 5)}, phase: kvv1.PhaseScaling, members: 5, ringVersion: 2, ringChange: true,
			conds: conds{"Progressing": "True/RingTransition", "Available": "True/MembersReady", "Degraded": "False/AsExpected"}},
		{name: "scale out complete when every member switched", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Replicas = 5
			c.Status.Members, c.Status.RingVersion = MemberAddresses(c, 5), 2
			c.Status.Transition = &kvv1.RingTransitionStatus{From: three, FromMembers: 3, ToMembers: 5, StartTime: now, LastProgressTime: now}
		}, obs: Observed{StatefulSet: sts(2, 2, 5, 5, 5), MemberReports: reportsFor(MemberAddresses(cluster(nil), 5), MemberReport{ListVersion: 2, RoutingVersion: 2, VnodesActive: 3})},
			phase: kvv1.PhaseRunning, members: 5, ringVersion: 2,
			conds: conds{"Progressing": "False/RolloutComplete", "Available": "True/MembersReady", "Degraded": "False/AsExpected"}},
		{name: "scale in publishes the smaller list; the StatefulSet keeps the leaving pods", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Replicas = 3
			c.Status.Members, c.Status.RingVersion = MemberAddresses(c, 5), 2
		}, obs: Observed{StatefulSet: sts(2, 2, 5, 5, 5)}, phase: kvv1.PhaseScaling, members: 3, ringVersion: 3, ringChange: true, leaving: 2,
			conds: conds{"Progressing": "True/RingTransition", "Available": "True/MembersReady", "Degraded": "False/AsExpected"}},
		{name: "a transition without progress is Degraded", mutate: func(c *kvv1.KVCluster) {
			c.Spec.Replicas = 3
			c.Status.Members, c.Status.RingVersion, c.Status.LeavingMembers = three, 3, MemberAddresses(c, 5)[3:]
			long := metav1.NewTime(now.Add(-time.Hour))
			c.Status.Transition = &kvv1.RingTransitionStatus{From: MemberAddresses(c, 5), FromMembers: 5, ToMembers: 3, StartTime: long, LastProgressTime: long,
				Members: memberStates(three, MemberAddresses(c, 5)[3:], nil, 3)}
		}, obs: Observed{StatefulSet: sts(2, 2, 5, 5, 4)}, phase: kvv1.PhaseDegraded, members: 3, ringVersion: 3, ringChange: true, leaving: 2,
			conds: conds{"Progressing": "True/RingTransition", "Degraded": "True/TransitionStalled"}},
		{name: "StatefulSet not yet observed new spec", mutate: func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = three, 1 },
			obs: Observed{StatefulSet: sts(3, 2, 3, 1, 3)}, phase: kvv1.PhaseUpdating, members: 3, ringVersion: 1,
			conds: conds{"Progressing": "True/RollingOut", "Degraded": "False/AsExpected"}},
		{name: "apply error", mutate: func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = three, 1 },
			obs:   Observed{StatefulSet: sts(1, 1, 3, 3, 3), ApplyErr: errors.New("cannot apply CronJob kv-compact-0: bad time zone")},
			phase: kvv1.PhaseDegraded, members: 3, ringVersion: 1, conds: conds{"Degraded": "True/ReconcileError"}},
		{name: "tls without cert-manager", mutate: func(c *kvv1.KVCluster) { c.Spec.TLS.Enabled = true },
			obs: Observed{}, phase: kvv1.PhaseCreating, conds: conds{"TLSReady": "False/CertManagerNotInstalled"}},
		{name: "tls with cert-manager", mutate: func(c *kvv1.KVCluster) { c.Spec.TLS.Enabled = true },
			obs: Observed{CertManagerCRDs: true}, phase: kvv1.PhaseCreating, conds: conds{"TLSReady": "True/Created"}},
		{name: "tls with an issuer that wrote no ca.crt", mutate: func(c *kvv1.KVCluster) {
			c.Spec.TLS.Enabled = true
			c.Spec.TLS.IssuerRef = &kvv1.IssuerRef{Name: "acme", Kind: "ClusterIssuer"}
		}, obs: Observed{CertManagerCRDs: true, TLSCAMissing: true}, phase: kvv1.PhaseCreating, conds: conds{"TLSReady": "False/CACertificateMissing"}},
		{name: "monitoring disabled", mutate: func(c *kvv1.KVCluster) {
			f := false
			c.Spec.Monitoring.ServiceMonitor = &f
		}, obs: Observed{}, phase: kvv1.PhaseCreating, conds: conds{"MonitoringReady": "True/Disabled"}},
		// The deprecated prometheusRule neither asks for monitoring nor turns it off.
		{name: "prometheusRule alone does not enable monitoring", mutate: func(c *kvv1.KVCluster) {
			f, tr := false, true
			c.Spec.Monitoring.ServiceMonitor, c.Spec.Monitoring.PrometheusRule = &f, &tr
		}, obs: Observed{MonitoringCRDs: true}, phase: kvv1.PhaseCreating, conds: conds{"MonitoringReady": "True/Disabled"}},
		{name: "prometheusRule false does not disable the ServiceMonitor", mutate: func(c *kvv1.KVCluster) {
			f := false
			c.Spec.Monitoring.PrometheusRule = &f
		}, obs: Observed{MonitoringCRDs: true}, phase: kvv1.PhaseCreating, conds: conds{"MonitoringReady": "True/Created"}},
		{name: "prometheus operator missing", obs: Observed{}, phase: kvv1.PhaseCreating,
			conds: conds{"MonitoringReady": "False/PrometheusOperatorNotInstalled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(tc.mutate)
			c.Generation = 7
			st := ComputeStatus(c, tc.obs, now)
			if st.Phase != tc.phase || len(st.Members) != tc.members || st.RingVersion != tc.ringVersion || st.RingChangeInProgress != tc.ringChange ||
				len(st.LeavingMembers) != tc.leaving {
				t.Errorf("phase %s members %d ring v%d change %v leaving %d; want %s %d v%d %v %d",
					st.Phase, len(st.Members), st.RingVersion, st.RingChangeInProgress, len(st.LeavingMembers), tc.phase, tc.members, tc.ringVersion, tc.ringChange, tc.leaving)
			}
			if st.ObservedGeneration != 7 || st.Selector != Selector(c) {
				t.Errorf("observedGeneration %d selector %q", st.ObservedGeneration, st.Selector)
			}
			for typ, want := range tc.conds {
				cond := meta.FindStatusCondition(st.Conditions, typ)
				if cond == nil {
					t.Errorf("no %s condition", typ)
					continue
				}
				if got := string(cond.Status) + "/" + cond.Reason; got != want {
					t.Errorf("%s = %s (%s), want %s", typ, got, cond.Message, want)
				}
				if cond.ObservedGeneration != 7 || cond.Message == "" {
					t.Errorf("%s: observedGeneration %d message %q", typ, cond.ObservedGeneration, cond.Message)
				}
			}
			if tc.noTLS && meta.FindStatusCondition(st.Conditions, kvv1.ConditionTLS) != nil {
				t.Errorf("TLS condition present with TLS disabled")
			}
		})
	}
}

// A KVCluster that still sets the deprecated spec.monitoring.prometheusRule (objects stored by
// earlier versions have it defaulted to true) is told, in MonitoringReady, that it is ignored.
func TestDeprecatedPrometheusRuleIsExplained(t *testing.T) {
	f, tr := false, true
	for _, tc := range []struct {
		name  string
		set   *bool
		sm    *bool
		obs   Observed
		noted bool
	}{
		{"unset", nil, nil, Observed{MonitoringCRDs: true}, false},
		{"true, ServiceMonitor applied", &tr, nil, Observed{MonitoringCRDs: true}, true},
		{"false, no Prometheus Operator", &f, nil, Observed{}, true},
		{"true, monitoring disabled", &tr, &f, Observed{}, true},
	} {
		c := cluster(func(c *kvv1.KVCluster) {
			c.Spec.Monitoring.PrometheusRule = tc.set
			if tc.sm != nil {
				c.Spec.Monitoring.ServiceMonitor = tc.sm
			}
		})
		cond := meta.FindStatusCondition(ComputeStatus(c, tc.obs, metav1.NewTime(time.Unix(100, 0))).Conditions, kvv1.ConditionMonitoring)
		if got := strings.Contains(cond.Message, PrometheusRuleDeprecated); got != tc.noted {
			t.Errorf("%s: message %q mentions the deprecation: %v, want %v", tc.name, cond.Message, got, tc.noted)
		}
	}
}

// Status must be stable: recomputing from the same observation changes nothing
// (otherwise every reconcile would patch status and trigger another reconcile).
func TestComputeStatusIsIdempotent(t *testing.T) {
	c := cluster(nil)
	obs := Observed{StatefulSet: sts(1, 1, 3, 3, 3)}
	first := ComputeStatus(c, obs, metav1.NewTime(time.Unix(100, 0)))
	c.Status = first
	second := ComputeStatus(c, obs, metav1.NewTime(time.Unix(200, 0)))
	if len(first.Conditions) != len(second.Conditions) {
		t.Fatalf("conditions changed")
	}
	for i := range first.Conditions {
		if first.Conditions[i] != second.Conditions[i] {
			t.Errorf("condition %d changed: %+v -> %+v", i, first.Conditions[i], second.Conditions[i])
		}
	}
	if second.RingVersion != first.RingVersion {
		t.Errorf("ring version bumped without a membership change")
	}
}

func TestLastMaintenanceTimes(t *testing.T) {
	a, b := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	if got := latest(latest(nil, &a), &b); !got.Equal(&b) {
		t.Errorf("latest = %v", got)
	}
	if got := latest(&b, &a); !got.Equal(&b) {
		t.Errorf("latest = %v", got)
	}
	st := ComputeStatus(cluster(nil), Observed{LastCompaction: &a, LastAAERebuild: &b}, b)
	if !st.LastCompaction.Equal(&a) || !st.LastAAERebuild.Equal(&b) {
		t.Errorf("last maintenance = %v %v", st.LastCompaction, st.LastAAERebuild)
	}
}

// The last report of each maintenance kind stays when its Job is gone (TTL, history limit)
// and is replaced by a newer one.
func TestMaintenanceStatusKeepsTheLastReport(t *testing.T) {
	c := cluster(nil)
	old := &kvv1.MaintenanceRun{Job: "kv-compact-0-1", Phase: kvv1.MaintenanceFailed, FailedMembers: "1"}
	c.Status.Maintenance = &kvv1.MaintenanceStatus{Compaction: old}
	now := metav1.NewTime(time.Unix(100, 0))
	st := ComputeStatus(c, Observed{}, now)
	if st.Maintenance == nil || st.Maintenance.Compaction == nil || st.Maintenance.Compaction.Job != old.Job {
		t.Fatalf("report lost: %+v", st.Maintenance)
	}
	aae := &kvv1.MaintenanceRun{Job: "kv-aae-rebuild-1", Phase: kvv1.MaintenanceRunning}
	st = ComputeStatus(c, Observed{Maintenance: &kvv1.MaintenanceStatus{AAERebuild: aae}}, now)
	if st.Maintenance.Compaction.Job != old.Job || st.Maintenance.AAERebuild.Job != aae.Job {
		t.Errorf("got %+v", st.Maintenance)
	}
	if c.Status.Maintenance.AAERebuild != nil {
		t.Errorf("ComputeStatus modified its input")
	}
}

func reportsFor(addrs []string, r MemberReport) map[string]MemberReport {
	out := map[string]MemberReport{}
	for _, a := range addrs {
		out[a] = r
	}
	return out
}
