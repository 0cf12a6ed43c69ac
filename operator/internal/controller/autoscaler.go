package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
	"github.com/levee-io/levee/operator/internal/autoscale"
)

// DefaultAutoscaleEvery is how often the autoscaler evaluates a cluster whose autoscaling is
// enabled (the reconcile is requeued after it).
const DefaultAutoscaleEvery = 30 * time.Second

// Autoscaler is the operator's autoscaling: it reads each cluster's signals from Prometheus,
// asks autoscale.Decide for a verdict and keeps the observations between reconciles. The zero
// value uses the defaults; tests shorten the windows through Tuning, Window and Every.
type Autoscaler struct {
	// Tuning of Decide (zero: autoscale.DefaultTuning()).
	Tuning *autoscale.Tuning
	// Window of every rate() (zero: autoscale.DefaultWindow).
	Window time.Duration
	// Every is the evaluation interval (zero: DefaultAutoscaleEvery).
	Every time.Duration
	// QueryTimeout bounds each Prometheus query (zero: autoscale.DefaultQueryTimeout).
	QueryTimeout time.Duration

	mu      sync.Mutex
	hist    map[types.NamespacedName]autoscale.History
	clients map[string]*autoscale.Client
}

// AutoscaleOutcome is what one evaluation found and decided, for status, Events and metrics.
type AutoscaleOutcome struct {
	Verdict autoscale.Verdict
	// ScaleTo is set when the verdict changes the replica count.
	ScaleTo *int32
	// LastScaleTime is the last step (this one when ScaleTo is set), zero if none is known.
	LastScaleTime time.Time
}

func (a *Autoscaler) every() time.Duration {
	if a == nil || a.Every <= 0 {
		return DefaultAutoscaleEvery
	}
	return a.Every
}

func (a *Autoscaler) tuning() autoscale.Tuning {
	if a.Tuning != nil {
		return *a.Tuning
	}
	return autoscale.DefaultTuning()
}

func (a *Autoscaler) client(url string) (*autoscale.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[url]; ok {
		return c, nil
	}
	c, err := autoscale.NewClient(url, a.QueryTimeout)
	if err != nil {
		return nil, err
	}
	if a.clients == nil {
		a.clients = map[string]*autoscale.Client{}
	}
	a.clients[url] = c
	return c, nil
}

// InFlightFor says what is going on in the cluster that blocks a scale step: a ring change, a
// running maintenance Job, members not all there and ready (a previous step not applied yet).
// Pure: from the cluster (its last status) and its maintenance Jobs.
func InFlightFor(c *kvv1.KVCluster, jobs []*batchv1.Job) autoscale.InFlight {
	f := autoscale.InFlight{
		RingChange: c.Status.RingChangeInProgress,
		Step:       c.Status.Replicas != c.Spec.Replicas || c.Status.ReadyReplicas != c.Spec.Replicas,
	}
	var running []string
	for _, j := range jobs {
		if !jobFinished(j) && !jobSuspended(j) && j.DeletionTimestamp == nil {
			running = append(running, j.Name)
		}
	}
	f.MaintenanceJob = strings.Join(running, ", ")
	return f
}

// Evaluate reads the cluster's signals and decides, recording the observation. Nil when
// autoscaling is disabled (its history is dropped).
func (a *Autoscaler) Evaluate(ctx context.Context, c *kvv1.KVCluster, jobs []*batchv1.Job, now time.Time) *AutoscaleOutcome {
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	if c.Spec.Autoscaling == nil || !c.Spec.Autoscaling.Enabled {
		a.Forget(key)
		return nil
	}
	spec := autoscale.SpecFrom(c, a.tuning())
	q := autoscale.QueriesFor(c)
	if a.Window > 0 {
		q.Window = a.Window
	}
	var sig autoscale.Signals
	if cl, err := a.client(c.Spec.Autoscaling.PrometheusURL); err != nil {
		sig.Unavailable = err.Error()
	} else {
		sig, _ = cl.Read(ctx, q, now) // a failure is in sig.Unavailable, which Decide reports
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hist == nil {
		a.hist = map[types.NamespacedName]autoscale.History{}
	}
	h := a.hist[key]
	if h.LastScaleTime.IsZero() && c.Status.Autoscaler != nil && c.Status.Autoscaler.LastScaleTime != nil {
		h.LastScaleTime = c.Status.Autoscaler.LastScaleTime.Time // after an operator restart
	}
	h.InFlight = InFlightFor(c, jobs)
	v := autoscale.Decide(sig, spec, h, now)
	h = h.Record(v.Observation, spec.Keep())
	out := &AutoscaleOutcome{Verdict: v, LastScaleTime: h.LastScaleTime}
	if v.DesiredReplicas != c.Spec.Replicas {
		to := v.DesiredReplicas
		out.ScaleTo = &to
		out.LastScaleTime = now
		h.LastScaleTime = now
	}
	a.hist[key] = h
	return out
}

// Forget drops a cluster's observations (autoscaling turned off, or the cluster deleted).
func (a *Autoscaler) Forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.hist, key)
}

// MaintenanceDeferral says why queued maintenance Jobs must wait ("" when they may run): the
// verdict found members whose disk is busy beyond the target with foreground load. Pure.
func MaintenanceDeferral(o *AutoscaleOutcome) string {
	if o == nil || len(o.Verdict.DiskSaturated) == 0 {
		return ""
	}
	return fmt.Sprintf("disks of %s are saturated by foreground load (disk busy %d%%); queued maintenance Jobs wait until they are not",
		strings.Join(o.Verdict.DiskSaturated, ", "), autoscale.Percent(o.Verdict.DiskBusy))
}

// listMaintenanceJobs returns the cluster's maintenance Jobs (from the cache).
func (r *KVClusterReconciler) listMaintenanceJobs(ctx context.Context, c *kvv1.KVCluster) ([]*batchv1.Job, error) {
	var list batchv1.JobList
	if err := r.List(ctx, &list, client.InNamespace(c.Namespace),
		client.MatchingLabels{labelInstance: c.Name}, client.HasLabels{LabelMaintenance}); err != nil {
		return nil, fmt.Errorf("cannot list maintenance Jobs: %w", err)
	}
	jobs := make([]*batchv1.Job, 0, len(list.Items))
	for i := range list.Items {
		jobs = append(jobs, &list.Items[i])
	}
	return jobs, nil
}
