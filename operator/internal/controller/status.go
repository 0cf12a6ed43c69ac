package controller

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
)

// Observed is what one reconcile saw and did; ComputeStatus turns it into status.
type Observed struct {
	// StatefulSet as read back after applying (nil if it does not exist).
	StatefulSet *appsv1.StatefulSet
	// ApplyErr is the first error applying children (nil when all were applied).
	ApplyErr error
	// MonitoringCRDs / CertManagerCRDs tell whether the optional CRDs are installed.
	MonitoringCRDs  bool
	CertManagerCRDs bool
	// Last successful maintenance Jobs (from the CronJobs' status).
	LastCompaction, LastAAERebuild *metav1.Time
	// Maintenance is the latest maintenance Job of each kind (nil: no Job exists).
	Maintenance *kvv1.MaintenanceStatus
	// TLSCAMissing: the TLS Secret exists but has no ca.crt.
	TLSCAMissing bool
	// DroppedJobs are queued compaction Jobs deleted because their slot was over.
	DroppedJobs []string
	// MembersErr: the settled membership in status is not a member list the node accepts, so
	// members.json was not written (the ConfigMap keeps the previous one).
	MembersErr error
	// LegacyPrometheusRuleDeleted: this reconcile deleted the PrometheusRule an earlier
	// operator version created for the cluster.
	LegacyPrometheusRuleDeleted bool
	// Autoscale is the autoscaler's evaluation (nil: autoscaling disabled).
	Autoscale *AutoscaleOutcome
	// MaintenanceDeferred says why queued maintenance Jobs were held back ("" when not).
	MaintenanceDeferred string
	// MemberReports are the members' ring reports (nil: not read, no transition runs).
	MemberReports map[string]MemberReport
	// TransitionStallAfter: see DefaultTransitionStallAfter (0: the default).
	TransitionStallAfter time.Duration
}

// Condition reasons.
const (
	ReasonMembersReady        = "MembersReady"
	ReasonMembersNotReady     = "MembersNotReady"
	ReasonForming             = "Forming"
	ReasonRollingOut          = "RollingOut"
	ReasonRingChange          = "RingChange"
	ReasonRolloutComplete     = "RolloutComplete"
	ReasonReconcileError      = "ReconcileError"
	ReasonAsExpected          = "AsExpected"
	ReasonPrometheusOpMissing = "PrometheusOperatorNotInstalled"
	ReasonCertManagerMissing  = "CertManagerNotInstalled"
	ReasonCreated             = "Created"
	ReasonDisabled            = "Disabled"
	ReasonCAMissing           = "CACertificateMissing"
	ReasonMemberListInvalid   = "MemberListInvalid"
	// Autoscaler: the verdict rests on complete signals / took no action for want of them;
	// the Event of a scale step; maintenance held back for saturated disks, and released.
	ReasonSignalsComplete     = "SignalsComplete"
	ReasonSignalsUnavailable  = "SignalsUnavailable"
	ReasonScalingHeld         = "ScalingHeld"
	ReasonAutoscaled          = "Autoscaled"
	ReasonMaintenanceDeferred = "MaintenanceDeferred"
	ReasonMaintenanceResumed  = "MaintenanceResumed"
	// ReasonPrometheusRuleRemoved: the Event of deleting the PrometheusRule an earlier operator
	// version created for the cluster.
	ReasonPrometheusRuleRemoved = "PrometheusRuleRemoved"
)

// PrometheusRuleDeprecated is added to the MonitoringReady message while the deprecated field
// spec.monitoring.prometheusRule is set.
const PrometheusRuleDeprecated = "spec.monitoring.prometheusRule is deprecated and ignored: the operator creates no PrometheusRule; " +
	"the alert rules ship with the Helm chart (value prometheusRule.enabled) or as dashboards/alerts/levee.rules.yaml"

// MemberListInvalidMessage explains a settled membership the node would refuse (Degraded
// condition and Warning Event).
func MemberListInvalidMessage(err error) string {
	return fmt.Sprintf("%s in the ConfigMap was not updated (nodes keep the previous member list): the settled membership in status.members is not a member list the levee node accepts: %v", MembersJSONFileName, err)
}

// rolloutApplied: the StatefulSet controller has observed the latest spec and runs
// the number of up-to-date pods the operator asked for (ready or not).
func rolloutApplied(c *kvv1.KVCluster, sts *appsv1.StatefulSet) bool {
	n := StatefulSetReplicas(c)
	return sts != nil && sts.Status.ObservedGeneration >= sts.Generation &&
		sts.Status.Replicas == n && sts.Status.UpdatedReplicas == n
}

// ComputeStatus derives the new status from the current one and what the reconcile observed.
// Membership (status.members, ringVersion, leavingMembers, transition) is PlanRing's: the ring
// forms when every member is first ready; a scale-out publishes the bigger list once the new
// pods are ready, a scale-in publishes the smaller list at once and keeps the leaving pods until
// they report empty.
func ComputeStatus(c *kvv1.KVCluster, obs Observed, now metav1.Time) kvv1.KVClusterStatus {
	st, _ := computeStatus(c, obs, now)
	return st
}

// computeStatus is ComputeStatus, with the ring plan it made (for the Events).
func computeStatus(c *kvv1.KVCluster, obs Observed, now metav1.Time) (kvv1.KVClusterStatus, RingPlan) {
	st := *c.Status.DeepCopy()
	spec := c.Spec
	st.ObservedGeneration = c.Generation
	st.Selector = Selector(c)
	st.Replicas, st.ReadyReplicas = 0, 0
	if sts := obs.StatefulSet; sts != nil {
		st.Replicas = sts.Status.Replicas
		st.ReadyReplicas = sts.Status.ReadyReplicas
	}
	applied := rolloutApplied(c, obs.StatefulSet)
	wantPods := StatefulSetReplicas(c)

	ring := PlanRing(RingInput{
		Status:     c.Status,
		Desired:    MemberAddresses(c, spec.Replicas),
		PodsReady:  applied && st.ReadyReplicas == wantPods,
		Reports:    obs.MemberReports,
		Now:        now,
		StallAfter: obs.TransitionStallAfter,
	})
	st.Members, st.RingVersion, st.LeavingMembers, st.Transition = ring.Members, ring.RingVersion, ring.Leaving, ring.Transition
	st.RingChangeInProgress = ring.InProgress
	forming := ring.Forming

	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: c.Generation, LastTransitionTime: now,
		})
	}

	need := max(1, spec.Replicas-1)
	readyMsg := fmt.Sprintf("%d of %d members ready (at least %d needed)", st.ReadyReplicas, spec.Replicas, need)
	if st.ReadyReplicas >= need {
		set(kvv1.ConditionAvailable, true, ReasonMembersReady, readyMsg)
	} else {
		set(kvv1.ConditionAvailable, false, ReasonMembersNotReady, readyMsg)
	}

	switch {
	case forming:
		set(kvv1.ConditionProgressing, true, ReasonForming, "waiting for all members to be ready for the first time: "+readyMsg)
	case st.RingChangeInProgress && ring.Reason != "":
		set(kvv1.ConditionProgressing, true, ring.Reason, ring.Message)
	case st.RingChangeInProgress:
		set(kvv1.ConditionProgressing, true, ReasonRingChange,
			fmt.Sprintf("ring membership changing from %d to %d members", len(st.Members), spec.Replicas))
	case !applied:
		set(kvv1.ConditionProgressing, true, ReasonRollingOut, "StatefulSet rollout in progress")
	default:
		set(kvv1.ConditionProgressing, false, ReasonRolloutComplete, "all members run the desired spec")
	}

	degraded := false
	switch {
	case obs.ApplyErr != nil:
		degraded = true
		set(kvv1.ConditionDegraded, true, ReasonReconcileError, obs.ApplyErr.Error())
	case obs.MembersErr != nil:
		degraded = true
		set(kvv1.ConditionDegraded, true, ReasonMemberListInvalid, MemberListInvalidMessage(obs.MembersErr))
	case ring.Stalled != "":
		degraded = true
		set(kvv1.ConditionDegraded, true, ReasonTransitionStalled, ring.Stalled)
	case applied && !forming && !st.RingChangeInProgress && st.ReadyReplicas < wantPods:
		degraded = true
		set(kvv1.ConditionDegraded, true, ReasonMembersNotReady, readyMsg)
	default:
		set(kvv1.ConditionDegraded, false, ReasonAsExpected, "no errors; "+readyMsg)
	}

	// spec.monitoring.prometheusRule is deprecated and ignored; say so where users look.
	monNote := ""
	if spec.Monitoring.PrometheusRule != nil {
		monNote = "; " + PrometheusRuleDeprecated
	}
	switch {
	case !boolOr(spec.Monitoring.ServiceMonitor, true):
		set(kvv1.ConditionMonitoring, true, ReasonDisabled, "monitoring.serviceMonitor is false"+monNote)
	case obs.MonitoringCRDs:
		set(kvv1.ConditionMonitoring, true, ReasonCreated, fmt.Sprintf("ServiceMonitor %s applied", c.Name)+monNote)
	default:
		set(kvv1.ConditionMonitoring, false, ReasonPrometheusOpMissing,
			"the Prometheus Operator CRDs are not installed (monitoring.coreos.com/v1 ServiceMonitor is not served), so no ServiceMonitor was created; install the Prometheus Operator to get it"+monNote)
	}

	switch {
	case !spec.TLS.Enabled:
		meta.RemoveStatusCondition(&st.Conditions, kvv1.ConditionTLS)
	case obs.TLSCAMissing:
		set(kvv1.ConditionTLS, false, ReasonCAMissing,
			fmt.Sprintf("Secret %s has no %s: members require client certificates signed by that CA and the maintenance Jobs verify members with it; use an issuer that writes %s (CA, self-signed or Vault issuers do; ACME does not), or leave tls.issuerRef empty so the operator creates a cluster CA", TLSSecretName(c), TLSCAKey, TLSCAKey))
	case obs.CertManagerCRDs:
		set(kvv1.ConditionTLS, true, ReasonCreated, fmt.Sprintf("cert-manager Certificate %s applied (Secret %s)", CertificateName(c), TLSSecretName(c)))
	default:
		set(kvv1.ConditionTLS, false, ReasonCertManagerMissing,
			fmt.Sprintf("tls.enabled is true but the cert-manager CRDs (cert-manager.io/v1 Certificate, Issuer) are not installed: install cert-manager, or create Secret %s (tls.crt, tls.key, ca.crt) yourself; members wait for it", TLSSecretName(c)))
	}

	switch {
	case degraded:
		st.Phase = kvv1.PhaseDegraded
	case forming:
		st.Phase = kvv1.PhaseCreating
	case st.RingChangeInProgress:
		st.Phase = kvv1.PhaseScaling
	case !applied:
		st.Phase = kvv1.PhaseUpdating
	default:
		st.Phase = kvv1.PhaseRunning
	}
	if obs.LastCompaction != nil {
		st.LastCompaction = obs.LastCompaction
	}
	if obs.LastAAERebuild != nil {
		st.LastAAERebuild = obs.LastAAERebuild
	}
	switch o := obs.Autoscale; {
	case o == nil:
		st.Autoscaler = nil
		meta.RemoveStatusCondition(&st.Conditions, kvv1.ConditionAutoscaling)
	default:
		st.Autoscaler = AutoscalerStatus(o)
		switch {
		case o.Verdict.Observation.Gated:
			// A step, ring change or maintenance Job in flight: a member being added has no
			// series yet, which is no fault of the signals.
			set(kvv1.ConditionAutoscaling, true, ReasonScalingHeld, o.Verdict.Reason)
		case o.Verdict.Bottleneck == autoscale.BottleneckUnknown:
			set(kvv1.ConditionAutoscaling, false, ReasonSignalsUnavailable, o.Verdict.Reason)
		default:
			set(kvv1.ConditionAutoscaling, true, ReasonSignalsComplete, o.Verdict.Reason)
		}
	}
	// Finished Jobs are removed after a week (TTL) or by the CronJob history limit: the last
	// report stays until a newer Job replaces it.
	if m := obs.Maintenance; m != nil {
		if st.Maintenance == nil {
			st.Maintenance = &kvv1.MaintenanceStatus{}
		}
		if m.Compaction != nil {
			st.Maintenance.Compaction = m.Compaction
		}
		if m.AAERebuild != nil {
			st.Maintenance.AAERebuild = m.AAERebuild
		}
	}
	switch {
	case obs.MaintenanceDeferred != "":
		if st.Maintenance == nil {
			st.Maintenance = &kvv1.MaintenanceStatus{}
		}
		st.Maintenance.Deferred = obs.MaintenanceDeferred
	case st.Maintenance != nil:
		st.Maintenance.Deferred = ""
	}
	return st, ring
}

// AutoscalerStatus is status.autoscaler for an evaluation.
func AutoscalerStatus(o *AutoscaleOutcome) *kvv1.AutoscalerStatus {
	v := o.Verdict
	st := &kvv1.AutoscalerStatus{
		Bottleneck:      kvv1.Bottleneck(v.Bottleneck),
		CPU:             autoscale.Percent(v.CPU),
		DiskBusy:        autoscale.Percent(v.DiskBusy),
		DesiredReplicas: v.DesiredReplicas,
		Reason:          v.Reason,
	}
	if !o.LastScaleTime.IsZero() {
		t := metav1.NewTime(o.LastScaleTime)
		st.LastScaleTime = &t
	}
	return st
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
