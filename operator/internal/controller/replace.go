package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// ReplaceMemberAnnotation on a KVCluster asks the operator to replace one member whose data is
// lost or whose node is gone: `kubectl annotate kvcluster orders kv.levee.io/replace-member=orders-2`.
// The operator deletes the member's PersistentVolumeClaim and then its pod (forcefully when the
// pod's node is gone or not Ready, as the kubelet there can no longer confirm the deletion); the
// StatefulSet creates both again, the new volume is empty, and the member rebuilds its partitions
// from the other replicas before it answers reads for them (docs/cluster.md §8). The annotation is
// removed once the deletions are issued, or when the request is refused (a Warning Event says why).
const ReplaceMemberAnnotation = "kv.levee.io/replace-member"

// Events of a member replacement.
const (
	ReasonMemberReplacing      = "MemberReplacing"
	ReasonMemberReplaceRefused = "MemberReplaceRefused"
)

// ReplaceFacts is what the operator read about the member to replace and its peers.
type ReplaceFacts struct {
	// PodExists: the member's pod exists (a pod stuck terminating on a lost node is force-deleted
	// through NodeReady).
	PodExists bool
	// NodeName is the pod's node ("" when unscheduled); NodeReady whether that Node object exists
	// and its Ready condition is True.
	NodeName  string
	NodeReady bool
	// PVCExists, PVCDeleting: the member's data volume claim (data-<pod>).
	PVCExists, PVCDeleting bool
	// PeersDown are the other members (pod names) that cannot give the member its data now: pod
	// missing or not Ready, metrics unreadable, or still rebuilding themselves.
	PeersDown []string
}

// ReplacePlan is what to do for one replace request: either Refused (nothing is deleted) or the
// deletions, PVC first (the pvc-protection finalizer keeps it until the pod is gone, and the
// StatefulSet controller does not create the pod again while its claim is being deleted).
type ReplacePlan struct {
	Refused   string
	DeletePVC bool
	DeletePod bool
	// ForcePod deletes the pod with a zero grace period: its node cannot confirm the deletion.
	ForcePod bool
	// Message describes what was done, for the Event.
	Message string
}

// PlanReplacement decides what a replace request for member (a pod name) does. It refuses
// when the name is not a member of the ring, while a ring transition runs, or when some of the
// member's partitions could have no replica left to rebuild from: every partition has nVal
// replicas on distinct members, so the member and the peers that are down must be at most
// nVal-1 (nVal 1: never; nVal 3: one other member may be down, as when two nodes were lost and
// the members are replaced one after the other).
func PlanReplacement(c *kvv1.KVCluster, member string, f ReplaceFacts) ReplacePlan {
	names := memberNames(c.Status.Members)
	switch {
	case strings.TrimSpace(member) == "":
		return ReplacePlan{Refused: fmt.Sprintf("annotation %s is empty: set it to the pod name of one member (one of %s)", ReplaceMemberAnnotation, strings.Join(names, ", "))}
	case !slices.Contains(names, member):
		if len(names) == 0 {
			return ReplacePlan{Refused: fmt.Sprintf("%s is not a member: the ring has not formed yet", member)}
		}
		return ReplacePlan{Refused: fmt.Sprintf("%s is not a member of the ring (members: %s); the annotation takes one pod name", member, strings.Join(names, ", "))}
	case ringMoving(c.Status):
		return ReplacePlan{Refused: fmt.Sprintf("a ring transition is running: replace %s after it completes, or take the transition back first", member)}
	case c.Spec.NVal <= 1:
		return ReplacePlan{Refused: fmt.Sprintf("nVal is %d: no other replica holds %s's data, so a new volume would stay empty; delete its PVC and pod by hand if losing that data is intended", c.Spec.NVal, member)}
	case int32(len(f.PeersDown)) > c.Spec.NVal-2:
		return ReplacePlan{Refused: fmt.Sprintf("%s not ready or still rebuilding: with nVal %d, replacing %s as well could leave partitions with no replica to rebuild from; try again when fewer members are down",
			plural(f.PeersDown), c.Spec.NVal, member)}
	}
	p := ReplacePlan{DeletePVC: f.PVCExists && !f.PVCDeleting, DeletePod: f.PodExists}
	var did []string
	switch {
	case p.DeletePVC:
		did = append(did, "deleted PVC "+DataClaimName(c, member))
	case f.PVCDeleting:
		did = append(did, "PVC "+DataClaimName(c, member)+" was already being deleted")
	default:
		did = append(did, "PVC "+DataClaimName(c, member)+" was already gone")
	}
	if f.PodExists {
		p.ForcePod = f.NodeName != "" && !f.NodeReady
		switch {
		case p.ForcePod:
			did = append(did, fmt.Sprintf("force-deleted pod %s (its node %s is gone or not Ready)", member, f.NodeName))
		default:
			did = append(did, "deleted pod "+member)
		}
	} else {
		did = append(did, "pod "+member+" was already gone")
	}
	p.Message = strings.Join(did, "; ") + fmt.Sprintf(": the StatefulSet creates both again and %s rebuilds its partitions from the other replicas before it answers reads for them", member)
	return p
}

// DataClaimName is the PersistentVolumeClaim of a member's data volume (the StatefulSet's claim
// template "data" and the pod name).
func DataClaimName(c *kvv1.KVCluster, member string) string { return DataVolumeName + "-" + member }

func plural(names []string) string {
	if len(names) == 1 {
		return names[0] + " is"
	}
	return strings.Join(names, ", ") + " are"
}

// replaceTarget is what replaceMember read besides the facts: the UIDs its deletions are
// conditioned on (a pod or claim created again meanwhile is never the one deleted).
type replaceTarget struct {
	podUID, pvcUID types.UID
}

// replaceMember carries out the request in ReplaceMemberAnnotation (PlanReplacement decides),
// then removes the annotation and records an Event. An API error leaves the annotation for the
// next reconcile.
func (r *KVClusterReconciler) replaceMember(ctx context.Context, c *kvv1.KVCluster, member string) error {
	member = strings.TrimSpace(member)
	facts, target, err := r.replaceFacts(ctx, c, member)
	if err != nil {
		return err
	}
	plan := PlanReplacement(c, member, facts)
	if plan.Refused == "" {
		if plan.DeletePVC {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: DataClaimName(c, member)}}
			if err := r.Delete(ctx, pvc, client.Preconditions{UID: &target.pvcUID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("replace %s: cannot delete PVC %s: %w", member, pvc.Name, err)
			}
		}
		if plan.DeletePod {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: member}}
			opts := []client.DeleteOption{client.Preconditions{UID: &target.podUID}}
			if plan.ForcePod {
				opts = append(opts, client.GracePeriodSeconds(0))
			}
			if err := r.Delete(ctx, pod, opts...); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("replace %s: cannot delete pod: %w", member, err)
			}
		}
	}
	// Remove the annotation only if it still asks for this member (a new request meanwhile stays).
	value, _ := json.Marshal(c.Annotations[ReplaceMemberAnnotation])
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(ReplaceMemberAnnotation, "~", "~0"), "/", "~1")
	patch := fmt.Sprintf(`[{"op":"test","path":%q,"value":%s},{"op":"remove","path":%q}]`, path, value, path)
	if err := r.Patch(ctx, c.DeepCopy(), client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil &&
		!apierrors.IsInvalid(err) && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("replace %s: cannot remove annotation %s: %w", member, ReplaceMemberAnnotation, err)
	}
	if r.Recorder != nil {
		if plan.Refused != "" {
			r.Recorder.Event(c, corev1.EventTypeWarning, ReasonMemberReplaceRefused, "replace "+member+": "+plan.Refused)
		} else {
			r.Recorder.Event(c, corev1.EventTypeNormal, ReasonMemberReplacing, plan.Message)
		}
	}
	return nil
}

// replaceFacts reads the member's pod, its node and claim, and whether its peers can serve a
// rebuild (pods Ready, metrics readable, not rebuilding themselves). Reads go to the API server,
// not the cache: the operator does not watch pods, claims or nodes.
func (r *KVClusterReconciler) replaceFacts(ctx context.Context, c *kvv1.KVCluster, member string) (ReplaceFacts, replaceTarget, error) {
	var f ReplaceFacts
	var t replaceTarget
	if !slices.Contains(memberNames(c.Status.Members), member) {
		return f, t, nil // refused by the plan: nothing to read
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var pod corev1.Pod
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: member}, &pod); {
	case err == nil:
		f.PodExists, f.NodeName, t.podUID = true, pod.Spec.NodeName, pod.UID
	case !apierrors.IsNotFound(err):
		return f, t, fmt.Errorf("replace %s: cannot read its pod: %w", member, err)
	}
	if f.NodeName != "" {
		var node corev1.Node
		switch err := reader.Get(ctx, client.ObjectKey{Name: f.NodeName}, &node); {
		case err == nil:
			f.NodeReady = nodeReady(&node)
		case !apierrors.IsNotFound(err):
			return f, t, fmt.Errorf("replace %s: cannot read node %s: %w", member, f.NodeName, err)
		}
	}
	var pvc corev1.PersistentVolumeClaim
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: DataClaimName(c, member)}, &pvc); {
	case err == nil:
		f.PVCExists, f.PVCDeleting, t.pvcUID = true, pvc.DeletionTimestamp != nil, pvc.UID
	case !apierrors.IsNotFound(err):
		return f, t, fmt.Errorf("replace %s: cannot read PVC %s: %w", member, pvc.Name, err)
	}
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(SelectorLabels(c))); err != nil {
		return f, t, fmt.Errorf("replace %s: cannot list the members' pods: %w", member, err)
	}
	ready := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		ready[p.Name] = p.DeletionTimestamp == nil && podReady(p)
	}
	var peers []string
	for _, a := range c.Status.Members {
		if memberName(a) != member {
			peers = append(peers, a)
		}
	}
	reports := r.prober().Probe(ctx, peers)
	for _, a := range sortedMembers(peers) {
		rep, ok := reports[a]
		if !ready[memberName(a)] || !ok || rep.Err != nil || rep.RebuildPending > 0 {
			f.PeersDown = append(f.PeersDown, memberName(a))
		}
	}
	return f, t, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
