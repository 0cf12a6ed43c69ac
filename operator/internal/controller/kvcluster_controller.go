package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// KVClusterReconciler applies the desired children of a KVCluster and reports status.
type KVClusterReconciler struct {
	client.Client
	Scheme    *runtime.Scheme
	Discovery discovery.DiscoveryInterface
	// Recorder emits Events explaining ring changes and errors (nil: none).
	Recorder record.EventRecorder
	// Now is the clock (tests may pin it); nil means time.Now.
	Now func() time.Time
	// APIReader reads objects the operator does not cache (the TLS Secret: get only, no
	// list/watch of Secrets). SetupWithManager sets it from the manager when nil.
	APIReader client.Reader
	// Autoscaler evaluates clusters with autoscaling enabled (nil: one with the defaults).
	Autoscaler *Autoscaler
	// Prober reads the members' ring reports while a transition runs (nil: MetricsProber).
	Prober MemberProber
	// TransitionStallAfter: see DefaultTransitionStallAfter (0: the default).
	TransitionStallAfter time.Duration
	// TransitionPoll is how often a running transition is looked at (0: 5 s).
	TransitionPoll time.Duration
}

// RBAC: only the verbs the code calls. Children are written with server-side apply (patch;
// create when they do not exist yet) and read from the cache (list, watch); only CronJobs
// (pruning), maintenance Jobs (dropping expired ones), the ServiceMonitor (monitoring turned off)
// and the PrometheusRule earlier versions created (get and delete only: the rules now ship with
// the Helm chart) are ever deleted, and a member's pod and PVC when a user asks for its
// replacement (ReplaceMemberAnnotation; pods, PVCs and nodes are read uncached, only then).
// Nothing is written with update. KVClusters are patched only
// by the autoscaler (spec.replicas, guarded by a JSON-patch test of the value it read) and to
// remove a handled ReplaceMemberAnnotation (guarded the same way).
// kvclusters/finalizers update: setting blockOwnerDeletion on children requires it.
// +kubebuilder:rbac:groups=kv.levee.io,resources=kvclusters,verbs=list;watch;patch
// +kubebuilder:rbac:groups=kv.levee.io,resources=kvclusters/status,verbs=patch
// +kubebuilder:rbac:groups=kv.levee.io,resources=kvclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list;watch;create;patch
// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=list;watch;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=get;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers;certificates,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch

// Reconcile is a thin wrapper: apply children, compute status, patch status once.
func (r *KVClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var c kvv1.KVCluster
	if err := r.Get(ctx, req.NamespacedName, &c); err != nil {
		if apierrors.IsNotFound(err) {
			forgetMetrics(req.Namespace, req.Name)
			r.autoscaler().Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		forgetMetrics(c.Namespace, c.Name)
		return ctrl.Result{}, nil // children carry owner references; the garbage collector removes them
	}
	orig := c.DeepCopy()
	kvv1.SetDefaults(&c) // the API server already defaulted; this guards builders against old objects
	if member, ok := c.Annotations[ReplaceMemberAnnotation]; ok {
		if err := r.replaceMember(ctx, &c, member); err != nil {
			return ctrl.Result{}, err
		}
	}

	// The autoscaler first: its verdict may defer maintenance Jobs this reconcile would resume.
	var scaled *AutoscaleOutcome
	if c.Spec.Autoscaling != nil && c.Spec.Autoscaling.Enabled {
		jobs, err := r.listMaintenanceJobs(ctx, &c)
		if err != nil {
			return ctrl.Result{}, err
		}
		scaled = r.autoscaler().Evaluate(ctx, &c, jobs, r.now())
	} else {
		r.autoscaler().Forget(req.NamespacedName)
	}
	obs := r.applyChildren(ctx, &c, MaintenanceDeferral(scaled))
	obs.Autoscale = scaled
	obs.TransitionStallAfter = r.TransitionStallAfter
	if ringMoving(c.Status) {
		obs.MemberReports = r.prober().Probe(ctx, append(slices.Clone(c.Status.Members), c.Status.LeavingMembers...))
	}
	now := metav1.NewTime(r.now())
	status, ring := computeStatus(&c, obs, now)
	r.explain(orig, status, obs)
	r.explainRing(orig, status, ring)
	recordMetrics(&c, status)
	recordAutoscaleMetrics(&c, scaled)
	if !equality.Semantic.DeepEqual(orig.Status, status) {
		patched := orig.DeepCopy()
		patched.Status = status
		if err := r.Status().Patch(ctx, patched, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return ctrl.Result{Requeue: true}, nil
			}
			return ctrl.Result{}, fmt.Errorf("cannot patch status of KVCluster %s: %w", req.NamespacedName, err)
		}
	}
	if obs.ApplyErr != nil {
		return ctrl.Result{}, obs.ApplyErr
	}
	// A running transition changes nothing the operator watches: look again soon.
	poll := r.TransitionPoll
	if poll <= 0 {
		poll = 5 * time.Second
	}
	if scaled == nil {
		if ringMoving(status) {
			return ctrl.Result{RequeueAfter: poll}, nil
		}
		return ctrl.Result{}, nil
	}
	if scaled.ScaleTo != nil {
		if err := r.scaleTo(ctx, &c, *scaled.ScaleTo); err != nil {
			return ctrl.Result{}, err
		}
		if r.Recorder != nil {
			r.Recorder.Eventf(&c, corev1.EventTypeNormal, ReasonAutoscaled, "replicas %d → %d: %s",
				c.Spec.Replicas, *scaled.ScaleTo, scaled.Verdict.Reason)
		}
	}
	every := r.autoscaler().every()
	if ringMoving(status) && poll < every {
		every = poll
	}
	return ctrl.Result{RequeueAfter: every}, nil
}

func (r *KVClusterReconciler) prober() MemberProber {
	if r.Prober == nil {
		r.Prober = MetricsProber{}
	}
	return r.Prober
}

// explainRing records the Events of ring transitions: started, queued scale, stalled, completed.
func (r *KVClusterReconciler) explainRing(c *kvv1.KVCluster, st kvv1.KVClusterStatus, ring RingPlan) {
	if r.Recorder == nil {
		return
	}
	if ring.Published && st.Transition != nil {
		t := st.Transition
		msg := fmt.Sprintf("published member list version %d: ring transition from %d to %d members", st.RingVersion, t.FromMembers, t.ToMembers)
		if len(st.LeavingMembers) > 0 {
			msg += fmt.Sprintf("; %s keep running until they have handed their partitions over", strings.Join(memberNames(st.LeavingMembers), ", "))
		}
		r.Recorder.Event(c, corev1.EventTypeNormal, ReasonRingTransitionStarted, msg)
	}
	if t := ring.Completed; t != nil {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, ReasonRingTransitionCompleted,
			"ring transition from %d to %d members completed in %s: %d bytes moved; every member routes by list version %d",
			t.FromMembers, t.ToMembers, ring.completedAfter(t).Round(time.Second), t.BytesMoved, c.Status.RingVersion)
	}
	prev := func(t string) *metav1.Condition { return meta.FindStatusCondition(c.Status.Conditions, t) }
	if ring.Queued != "" {
		if old := prev(kvv1.ConditionProgressing); old == nil || old.Reason != ReasonScaleQueued || old.Message != ring.Queued {
			r.Recorder.Event(c, corev1.EventTypeNormal, ReasonScaleQueued, ring.Queued)
		}
	}
	if ring.Stalled != "" {
		if old := prev(kvv1.ConditionDegraded); old == nil || old.Reason != ReasonTransitionStalled {
			r.Recorder.Event(c, corev1.EventTypeWarning, ReasonTransitionStalled, ring.Stalled)
		}
	}
}

func (r *KVClusterReconciler) autoscaler() *Autoscaler {
	if r.Autoscaler == nil {
		r.Autoscaler = &Autoscaler{}
	}
	return r.Autoscaler
}

// scaleTo sets spec.replicas, only if it still holds the value the verdict was made for (a
// user's change in between wins: the patch's test fails and the next evaluation starts over).
func (r *KVClusterReconciler) scaleTo(ctx context.Context, c *kvv1.KVCluster, n int32) error {
	patch := fmt.Sprintf(`[{"op":"test","path":"/spec/replicas","value":%d},{"op":"replace","path":"/spec/replicas","value":%d}]`, c.Spec.Replicas, n)
	if err := r.Patch(ctx, c.DeepCopy(), client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // changed or gone meanwhile: the next reconcile decides again
		}
		return fmt.Errorf("autoscaler: cannot set spec.replicas of KVCluster %s/%s to %d: %w", c.Namespace, c.Name, n, err)
	}
	return nil
}

// explain records Events for what changed in this reconcile.
func (r *KVClusterReconciler) explain(c *kvv1.KVCluster, st kvv1.KVClusterStatus, obs Observed) {
	if r.Recorder == nil {
		return
	}
	old, cur := c.Status.Maintenance, st.Maintenance
	if old == nil {
		old = &kvv1.MaintenanceStatus{}
	}
	if cur != nil {
		for _, p := range [][2]*kvv1.MaintenanceRun{{old.Compaction, cur.Compaction}, {old.AAERebuild, cur.AAERebuild}} {
			if !runFinishedNow(p[0], p[1]) {
				continue
			}
			if p[1].Phase == kvv1.MaintenanceFailed {
				r.Recorder.Eventf(c, corev1.EventTypeWarning, "MaintenanceFailed", "Job %s: %s", p[1].Job, p[1].Message)
			} else {
				r.Recorder.Eventf(c, corev1.EventTypeNormal, "MaintenanceSucceeded", "Job %s: %s", p[1].Job, p[1].Message)
			}
		}
	}
	oldDeferred := ""
	if c.Status.Maintenance != nil {
		oldDeferred = c.Status.Maintenance.Deferred
	}
	switch {
	case obs.MaintenanceDeferred != "" && oldDeferred == "":
		r.Recorder.Event(c, corev1.EventTypeNormal, ReasonMaintenanceDeferred, obs.MaintenanceDeferred)
	case obs.MaintenanceDeferred == "" && oldDeferred != "":
		r.Recorder.Event(c, corev1.EventTypeNormal, ReasonMaintenanceResumed, "disks are no longer saturated: queued maintenance Jobs may run")
	}
	if a := st.Autoscaler; a != nil && obs.Autoscale != nil && obs.Autoscale.ScaleTo == nil {
		old := meta.FindStatusCondition(c.Status.Conditions, kvv1.ConditionAutoscaling)
		now := meta.FindStatusCondition(st.Conditions, kvv1.ConditionAutoscaling)
		if now != nil && now.Status == metav1.ConditionFalse && (old == nil || old.Status != metav1.ConditionFalse) {
			r.Recorder.Event(c, corev1.EventTypeWarning, ReasonSignalsUnavailable, now.Message)
		}
	}
	for _, j := range obs.DroppedJobs {
		r.Recorder.Eventf(c, corev1.EventTypeWarning, "MaintenanceSkipped",
			"Job %s was dropped: it waited behind another maintenance Job until its compaction slot was over", j)
	}
	if st.RingVersion != c.Status.RingVersion && c.Status.RingVersion == 0 {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, "RingFormed",
			"ring formed with %d members (member list version %d)", len(st.Members), st.RingVersion)
	}
	if obs.LegacyPrometheusRuleDeleted {
		r.Recorder.Eventf(c, corev1.EventTypeNormal, ReasonPrometheusRuleRemoved,
			"deleted PrometheusRule %s, created by an earlier operator version: the operator no longer creates alert rules per cluster; "+
				"they ship with the Helm chart (value prometheusRule.enabled) or as dashboards/alerts/levee.rules.yaml", c.Name)
	}
	if obs.ApplyErr != nil {
		r.Recorder.Event(c, corev1.EventTypeWarning, ReasonReconcileError, obs.ApplyErr.Error())
	}
	if obs.MembersErr != nil {
		msg := MemberListInvalidMessage(obs.MembersErr)
		if old := meta.FindStatusCondition(c.Status.Conditions, kvv1.ConditionDegraded); old == nil || old.Reason != ReasonMemberListInvalid || old.Message != msg {
			r.Recorder.Event(c, corev1.EventTypeWarning, ReasonMemberListInvalid, msg)
		}
	}
}

func (r *KVClusterReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// apply server-side-applies obj as owned (controller=true, blockOwnerDeletion=true) by c.
// Forcing ownership takes fields back from anyone who edited them: that is the drift correction.
func (r *KVClusterReconciler) apply(ctx context.Context, c *kvv1.KVCluster, obj client.Object) error {
	if err := controllerutil.SetControllerReference(c, obj, r.Scheme); err != nil {
		return fmt.Errorf("cannot set owner of %s: %w", obj.GetName(), err)
	}
	if err := r.Patch(ctx, obj, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("cannot apply %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
	}
	return nil
}

func (r *KVClusterReconciler) applyChildren(ctx context.Context, c *kvv1.KVCluster, deferMaintenance string) Observed {
	var obs Observed
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	// members.json comes from the settled membership as stored in status (never from the status
	// this reconcile is about to write: a version must not reach the nodes before status records
	// it). A list the node would refuse is not written: the ConfigMap keeps the previous one and
	// the error shows as Degraded/MemberListInvalid.
	membersJSON, _, err := MembersJSON(c)
	if err != nil {
		obs.MembersErr = err
		membersJSON, err = r.currentMembersJSON(ctx, c)
	}
	if err != nil {
		add(err) // not knowing the previous list, do not apply: that could drop members.json
	} else {
		add(r.apply(ctx, c, BuildConfigMap(c, membersJSON)))
	}
	add(r.apply(ctx, c, BuildHeadlessService(c)))
	add(r.apply(ctx, c, BuildClientService(c)))
	sts := BuildStatefulSet(c)
	if err := r.apply(ctx, c, sts); err != nil {
		add(err)
		current := &appsv1.StatefulSet{}
		if err := r.Get(ctx, client.ObjectKeyFromObject(sts), current); err == nil {
			obs.StatefulSet = current
		}
	} else {
		obs.StatefulSet = sts // the apply response carries the live status
	}
	add(r.apply(ctx, c, BuildPDB(c)))

	// Maintenance CronJobs.
	compactions, err := BuildCompactionCronJobs(c)
	add(err)
	keep := map[string]bool{}
	for _, cj := range compactions {
		keep[cj.Name] = true
		if err := r.apply(ctx, c, cj); err != nil {
			add(err)
			continue
		}
		obs.LastCompaction = latest(obs.LastCompaction, cj.Status.LastSuccessfulTime)
	}
	add(r.pruneCronJobs(ctx, c, MaintenanceCompaction, keep))
	aae := BuildAAECronJob(c)
	if err := r.apply(ctx, c, aae); err != nil {
		add(err)
	} else {
		obs.LastAAERebuild = aae.Status.LastSuccessfulTime
	}

	maint, err := r.gateMaintenance(ctx, c, &obs, deferMaintenance)
	add(err)
	obs.Maintenance = maint

	// Optional integrations, detected at every reconcile (CRDs may come and go).
	monRes, err := r.servedResources(MonitoringGV)
	add(err)
	// The PrometheusRule earlier versions created per cluster would alert next to the rules the
	// Helm chart ships (one source: dashboards/alerts/levee.rules.yaml): delete it when this
	// cluster controls it. Done before the ServiceMonitor is applied, so a ServiceMonitor written
	// by this reconcile shows the cleanup has run.
	if monRes["prometheusrules"] {
		deleted, err := r.deleteIfControlled(ctx, c, LegacyPrometheusRule(c))
		add(err)
		obs.LegacyPrometheusRuleDeleted = deleted
	}
	obs.MonitoringCRDs = monRes["servicemonitors"]
	if obs.MonitoringCRDs {
		add(r.applyOrDelete(ctx, c, BuildServiceMonitor(c), boolOr(c.Spec.Monitoring.ServiceMonitor, true)))
	}
	cm, err := r.served(schema.GroupVersion{Group: "cert-manager.io", Version: "v1"}, "certificates", "issuers")
	add(err)
	obs.CertManagerCRDs = cm
	if cm && c.Spec.TLS.Enabled {
		for _, o := range BuildTLSObjects(c) {
			add(r.apply(ctx, c, o))
		}
	}
	if c.Spec.TLS.Enabled {
		missing, err := r.tlsSecretLacksCA(ctx, c)
		add(err)
		obs.TLSCAMissing = missing
	}
	obs.ApplyErr = errors.Join(errs...)
	return obs
}

// gateMaintenance lets at most one maintenance Job of the cluster run (see PlanGate) and
// reports the latest Job of each kind member by member.
func (r *KVClusterReconciler) gateMaintenance(ctx context.Context, c *kvv1.KVCluster, obs *Observed, deferred string) (*kvv1.MaintenanceStatus, error) {
	jobs, err := r.listMaintenanceJobs(ctx, c)
	if err != nil {
		return nil, err
	}
	d := PlanGate(jobs, r.now(), deferred)
	obs.MaintenanceDeferred = d.Deferred
	var errs []error
	for _, j := range d.Drop {
		if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("cannot delete expired maintenance Job %s: %w", j.Name, err))
			continue
		}
		obs.DroppedJobs = append(obs.DroppedJobs, j.Name)
		jobs = slices.DeleteFunc(jobs, func(x *batchv1.Job) bool { return x == j })
	}
	if j := d.Resume; j != nil {
		orig := j.DeepCopy()
		j.Spec.Suspend = ptr(false)
		if d.ResumeDeadline != nil {
			j.Spec.ActiveDeadlineSeconds = d.ResumeDeadline
		}
		if err := r.Patch(ctx, j, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("cannot resume maintenance Job %s: %w", j.Name, err))
			}
			*j = *orig // the next reconcile (the Job changed) decides again
		}
	}
	st := &kvv1.MaintenanceStatus{
		Compaction: LatestRun(jobs, MaintenanceCompaction),
		AAERebuild: LatestRun(jobs, MaintenanceAAE),
	}
	if st.Compaction == nil && st.AAERebuild == nil {
		st = nil
	}
	return st, errors.Join(errs...)
}

// currentMembersJSON returns the members.json the cluster's ConfigMap holds now ("" when there
// is none), read from the cache (the operator watches the ConfigMaps it owns).
func (r *KVClusterReconciler) currentMembersJSON(ctx context.Context, c *kvv1.KVCluster) (string, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ConfigMapName(c)}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("cannot read ConfigMap %s to keep its member list: %w", ConfigMapName(c), err)
	}
	return cm.Data[MembersJSONFileName], nil
}

// tlsSecretLacksCA reports whether the member certificate Secret exists without ca.crt. Members
// (mTLS: ca_file) and the maintenance Jobs' admin client (no system trust store) both need it;
// issuers such as ACME do not write it. A Secret not yet issued is not reported here.
func (r *KVClusterReconciler) tlsSecretLacksCA(ctx context.Context, c *kvv1.KVCluster) (bool, error) {
	if r.APIReader == nil {
		return false, nil
	}
	var sec corev1.Secret
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: TLSSecretName(c)}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("cannot read TLS Secret %s: %w", TLSSecretName(c), err)
	}
	return len(sec.Data[TLSCAKey]) == 0, nil
}

func latest(a, b *metav1.Time) *metav1.Time {
	if a == nil || (b != nil && b.After(a.Time)) {
		return b
	}
	return a
}

// applyOrDelete applies obj when wanted, otherwise deletes it if this cluster owns it.
func (r *KVClusterReconciler) applyOrDelete(ctx context.Context, c *kvv1.KVCluster, obj *unstructured.Unstructured, want bool) error {
	if want {
		return r.apply(ctx, c, obj)
	}
	_, err := r.deleteIfControlled(ctx, c, obj)
	return err
}

// deleteIfControlled deletes the object named like obj (kind, namespace, name) when c is its
// controller, and reports whether it deleted it. An object someone else created under that
// name is left alone.
func (r *KVClusterReconciler) deleteIfControlled(ctx context.Context, c *kvv1.KVCluster, obj *unstructured.Unstructured) (bool, error) {
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(obj.GroupVersionKind())
	if err := r.Get(ctx, client.ObjectKeyFromObject(obj), current); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(current, c) || current.GetDeletionTimestamp() != nil {
		return false, nil
	}
	if err := r.Delete(ctx, current, client.Preconditions{UID: ptr(current.GetUID())}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("cannot delete %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return true, nil
}

// pruneCronJobs deletes maintenance CronJobs of this cluster that are no longer desired
// (e.g. the compaction window now needs fewer cron expressions).
func (r *KVClusterReconciler) pruneCronJobs(ctx context.Context, c *kvv1.KVCluster, kind string, keep map[string]bool) error {
	var list batchv1.CronJobList
	if err := r.List(ctx, &list, client.InNamespace(c.Namespace),
		client.MatchingLabels{labelInstance: c.Name, LabelMaintenance: kind}); err != nil {
		return fmt.Errorf("cannot list %s CronJobs: %w", kind, err)
	}
	for i := range list.Items {
		cj := &list.Items[i]
		if keep[cj.Name] || !metav1.IsControlledBy(cj, c) {
			continue
		}
		if err := r.Delete(ctx, cj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("cannot delete stale CronJob %s: %w", cj.Name, err)
		}
	}
	return nil
}

// servedResources returns the resources the API server serves in gv (none when it does not
// serve the group version at all).
func (r *KVClusterReconciler) servedResources(gv schema.GroupVersion) (map[string]bool, error) {
	list, err := r.Discovery.ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return map[string]bool{}, fmt.Errorf("cannot discover %s: %w", gv, err)
	}
	have := map[string]bool{}
	for _, res := range list.APIResources {
		have[res.Name] = true
	}
	return have, nil
}

// served reports whether the API server serves all the named resources of gv.
func (r *KVClusterReconciler) served(gv schema.GroupVersion, resources ...string) (bool, error) {
	have, err := r.servedResources(gv)
	if err != nil {
		return false, err
	}
	for _, n := range resources {
		if !have[n] {
			return false, nil
		}
	}
	return true, nil
}

// optionalGroups are the API groups whose CRDs toggle optional integrations.
var optionalGroups = map[string]bool{"monitoring.coreos.com": true, "cert-manager.io": true}

// enqueueAll maps a CRD event of an optional group to every KVCluster, so
// installing the Prometheus Operator or cert-manager takes effect at once.
func (r *KVClusterReconciler) enqueueAll(ctx context.Context, obj client.Object) []reconcile.Request {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || !optionalGroups[crd.Spec.Group] {
		return nil
	}
	var list kvv1.KVClusterList
	if err := r.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "cannot list KVClusters after a CRD change")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return out
}

// maintenanceJobCluster maps a maintenance Job to its KVCluster (label app.kubernetes.io/instance).
func maintenanceJobCluster(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[labelInstance]
	if name == "" || obj.GetLabels()[LabelMaintenance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}

// SetupWithManager registers the controller.
func (r *KVClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Discovery == nil {
		d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("cannot create discovery client: %w", err)
		}
		r.Discovery = d
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	optionalCRD := predicate.NewPredicateFuncs(func(o client.Object) bool {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		return ok && optionalGroups[crd.Spec.Group]
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&kvv1.KVCluster{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&batchv1.CronJob{}).
		// Maintenance Jobs belong to the CronJobs; their label names the cluster.
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(maintenanceJobCluster),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				_, ok := o.GetLabels()[LabelMaintenance]
				return ok && o.GetLabels()[labelInstance] != ""
			}))).
		Watches(&apiextensionsv1.CustomResourceDefinition{}, handler.EnqueueRequestsFromMapFunc(r.enqueueAll),
			builder.WithPredicates(optionalCRD)).
		Named("kvcluster").
		Complete(r)
}

// CacheOptions restricts the manager's cache of Jobs to maintenance Jobs (label
// kv.levee.io/maintenance), so the operator does not hold every Job of the cluster in memory.
func CacheOptions() cache.Options {
	req, err := labels.NewRequirement(LabelMaintenance, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key: cannot fail
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&batchv1.Job{}: {Label: labels.NewSelector().Add(*req)},
	}}
}
