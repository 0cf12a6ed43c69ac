package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// Ring changes (docs/operator.md, "Scaling"). The operator publishes member lists; the members
// move the partitions themselves (docs/cluster.md, "Ring transitions") and report through their
// metrics how far they are. PlanRing decides, from status, the desired membership, the pods and
// those reports, what to publish and when the StatefulSet may shrink:
//
//   - scale-out: the StatefulSet grows first; once every pod is ready the bigger list is
//     published and the transition runs until every member routes by it;
//   - scale-in: the smaller list is published while every pod still runs; the members it no
//     longer names (status.leavingMembers) stream their partitions away, and the StatefulSet
//     keeps them until each reports empty;
//   - a different size while a transition runs waits for it (queued), except the size the
//     transition started from, which takes it back (the nodes cancel: nothing moves back that
//     had not moved yet, and what a new member received goes back by handoff).

// DefaultTransitionStallAfter: a transition with no visible progress for this long is reported
// Degraded (reason TransitionStalled), with how to take it back.
const DefaultTransitionStallAfter = 10 * time.Minute

// MemberReport is what one member's metrics say about the ring (see MemberProber).
type MemberReport struct {
	// Err: the member could not be read (its other fields are zero).
	Err error
	// ListVersion is the member list version the member uses (levee_member_list_version);
	// RoutingVersion the version of the list its routing claim was made for
	// (levee_ring_routing_list_version): lower while a transition runs.
	ListVersion, RoutingVersion int64
	// VnodesActive and VnodesHandoff: levee_vnodes{state="active"} and {state="handoff"}.
	VnodesActive, VnodesHandoff int32
	// PartitionsToSend (levee_transition_partitions_to_send) and BytesSent
	// (levee_transition_bytes_sent) in the member's current transition.
	PartitionsToSend int32
	BytesSent        int64
	// RebuildPending (levee_rebuild_partitions_pending): vnodes still rebuilding after the member
	// came back with an empty data directory (docs/cluster.md §8).
	RebuildPending int32
}

// RingInput is what PlanRing decides from.
type RingInput struct {
	// Status as stored (members, ringVersion, leavingMembers, transition).
	Status kvv1.KVClusterStatus
	// Desired is the membership spec.replicas asks for (MemberAddresses).
	Desired []string
	// PodsReady: the StatefulSet runs every pod it should (StatefulSetReplicas), up to date and ready.
	PodsReady bool
	// Reports by member address, for status.members and status.leavingMembers (nil: not read).
	Reports map[string]MemberReport
	Now     metav1.Time
	// StallAfter: see DefaultTransitionStallAfter (0: the default).
	StallAfter time.Duration
}

// RingPlan is the membership part of the new status, and what to say about it.
type RingPlan struct {
	Members     []string
	RingVersion int64
	Leaving     []string
	Transition  *kvv1.RingTransitionStatus
	// InProgress: a change is wanted, published and running, or leaving members still hold data.
	InProgress bool
	// Forming: the ring has not formed yet.
	Forming bool
	// Reason and Message for the Progressing condition while InProgress or Forming.
	Reason, Message string
	// Stalled (non-empty) says why the transition is reported Degraded.
	Stalled string
	// Published: this plan publishes a new list (the transition it starts is Transition).
	Published bool
	// Completed is the transition this plan finished (nil: none).
	Completed *kvv1.RingTransitionStatus
	// Queued (non-empty) says why spec.replicas waits.
	Queued string
	// now is when the plan was made.
	now metav1.Time
}

// completedAfter is how long the completed transition t took.
func (p RingPlan) completedAfter(t *kvv1.RingTransitionStatus) time.Duration {
	return p.now.Sub(t.StartTime.Time)
}

// Reasons of the Progressing and Degraded conditions for ring changes.
const (
	ReasonRingTransition    = "RingTransition"
	ReasonScaleQueued       = "ScaleQueued"
	ReasonWaitingForPods    = "WaitingForPods"
	ReasonTransitionStalled = "TransitionStalled"
	// Events.
	ReasonRingTransitionStarted   = "RingTransitionStarted"
	ReasonRingTransitionCompleted = "RingTransitionCompleted"
)

// PlanRing decides the membership part of status. It is a pure function of its input.
func PlanRing(in RingInput) RingPlan {
	st := in.Status
	p := RingPlan{
		Members:     slices.Clone(st.Members),
		RingVersion: st.RingVersion,
		Leaving:     slices.Clone(st.LeavingMembers),
		Transition:  st.Transition.DeepCopy(),
		now:         in.Now,
	}
	if len(p.Members) == 0 {
		if in.PodsReady {
			p.Members, p.RingVersion = slices.Clone(in.Desired), st.RingVersion+1
			return p
		}
		p.Forming, p.Reason, p.Message = true, ReasonForming, "waiting for all members to be ready for the first time"
		return p
	}
	if p.moving() {
		p.follow(in)
	}
	running := p.moving()
	switch {
	case sameSet(in.Desired, p.Members):
		// Nothing to publish.
	case running && p.Transition != nil && sameSet(in.Desired, p.Transition.From):
		p.publish(in) // taking the transition back
	case running:
		p.Queued = fmt.Sprintf("spec.replicas %d waits until the ring transition to %d members completes (set replicas to %d to take it back)",
			len(in.Desired), len(p.Members), fromMembers(p.Transition, len(p.Members)))
	case !in.PodsReady:
		p.Reason = ReasonWaitingForPods
		if len(in.Desired) > len(p.Members) {
			p.Message = fmt.Sprintf("scaling out from %d to %d members: the new list is published once every pod is ready", len(p.Members), len(in.Desired))
		} else {
			p.Message = fmt.Sprintf("scaling in from %d to %d members: the smaller list is published once every pod is ready (a member that is down could not hand its partitions over)", len(p.Members), len(in.Desired))
		}
	default:
		p.publish(in)
	}
	p.InProgress = p.moving() || !sameSet(in.Desired, p.Members)
	switch {
	case p.Queued != "":
		p.Reason, p.Message = ReasonScaleQueued, p.Queued
	case p.Transition != nil && p.Reason == "":
		p.Reason, p.Message = ReasonRingTransition, transitionMessage(p.Transition, p.Leaving)
	}
	return p
}

// moving: a transition runs, or members that left still hold data.
func (p *RingPlan) moving() bool { return p.Transition != nil || len(p.Leaving) > 0 }

// ringMoving is RingPlan.moving for a stored status: the members are to be followed.
func ringMoving(st kvv1.KVClusterStatus) bool {
	return st.Transition != nil || len(st.LeavingMembers) > 0
}

// publish makes Desired the member list: a new version, a transition from the current list,
// and the members it drops leaving (with those still leaving from before).
func (p *RingPlan) publish(in RingInput) {
	from := p.Members
	leaving := []string{}
	for _, m := range append(slices.Clone(from), p.Leaving...) {
		if !slices.Contains(in.Desired, m) && !slices.Contains(leaving, m) {
			leaving = append(leaving, m)
		}
	}
	slices.SortFunc(leaving, compareMembers)
	p.Members, p.RingVersion, p.Leaving = slices.Clone(in.Desired), p.RingVersion+1, leaving
	if len(p.Leaving) == 0 {
		p.Leaving = nil
	}
	p.Transition = &kvv1.RingTransitionStatus{
		From:        slices.Clone(from),
		FromMembers: int32(len(from)),
		ToMembers:   int32(len(in.Desired)),
		StartTime:   in.Now,
		// The members have not read the list yet; follow fills this in from the next reports.
		LastProgressTime: in.Now,
	}
	p.Transition.Members = memberStates(p.Members, p.Leaving, nil, p.RingVersion)
	p.Published = true
	p.Reason = ReasonRingTransition
	p.Message = transitionMessage(p.Transition, p.Leaving)
}

// follow updates the running transition from the members' reports, and ends it when every
// member routes by the published list and every leaving member is empty.
func (p *RingPlan) follow(in RingInput) {
	states := memberStates(p.Members, p.Leaving, in.Reports, p.RingVersion)
	done := true
	var pending int32
	var bytes int64
	for _, m := range states {
		pending += m.PartitionsToSend
		bytes += m.BytesSent
		if (m.Leaving && m.State != kvv1.MemberEmpty) || (!m.Leaving && m.State != kvv1.MemberSwitched) {
			done = false
		}
	}
	t := p.Transition
	if t == nil { // leaving members without a transition (status written by hand): follow them anyway
		t = &kvv1.RingTransitionStatus{From: slices.Clone(p.Members), FromMembers: int32(len(p.Members)), ToMembers: int32(len(p.Members)),
			StartTime: in.Now, LastProgressTime: in.Now}
	}
	if !sameProgress(t.Members, states) || t.BytesMoved != bytes || t.PartitionsPending != pending {
		t.LastProgressTime = in.Now
	}
	t.Members, t.PartitionsPending, t.BytesMoved = states, pending, bytes
	if done {
		p.Completed, p.Transition, p.Leaving = t, nil, nil
		return
	}
	p.Transition = t
	stall := in.StallAfter
	if stall <= 0 {
		stall = DefaultTransitionStallAfter
	}
	if idle := in.Now.Sub(t.LastProgressTime.Time); idle >= stall {
		p.Stalled = fmt.Sprintf("the ring transition from %d to %d members has not advanced for %s (%s); set spec.replicas to %d to take it back",
			t.FromMembers, t.ToMembers, idle.Round(time.Second), waitingOn(states), t.FromMembers)
	}
}

// memberStates is each member's part in the transition to list version `version`, staying
// members first, then leaving ones, each in name order.
func memberStates(members, leaving []string, reports map[string]MemberReport, version int64) []kvv1.MemberTransitionStatus {
	var out []kvv1.MemberTransitionStatus
	add := func(addr string, isLeaving bool) {
		m := kvv1.MemberTransitionStatus{Name: memberName(addr), Leaving: isLeaving, State: kvv1.MemberBehind}
		r, ok := reports[addr]
		switch {
		case !ok: // not read yet (the list was just published)
		case r.Err != nil:
			m.State, m.Message = kvv1.MemberUnreachable, r.Err.Error()
		default:
			m.Vnodes = r.VnodesActive + r.VnodesHandoff
			if r.ListVersion >= version { // a member behind reports the transition before
				m.PartitionsToSend, m.BytesSent = r.PartitionsToSend, r.BytesSent
			}
			switch {
			case r.ListVersion < version:
				m.State = kvv1.MemberBehind
			case r.RoutingVersion < r.ListVersion:
				m.State = kvv1.MemberMoving
			case isLeaving && m.Vnodes == 0:
				m.State = kvv1.MemberEmpty
			case isLeaving:
				m.State = kvv1.MemberDraining
			default:
				m.State = kvv1.MemberSwitched
			}
		}
		out = append(out, m)
	}
	for _, a := range sortedMembers(members) {
		add(a, false)
	}
	for _, a := range sortedMembers(leaving) {
		add(a, true)
	}
	return out
}

// sameProgress compares what shows progress (not the messages of unreachable members).
func sameProgress(a, b []kvv1.MemberTransitionStatus) bool {
	return slices.EqualFunc(a, b, func(x, y kvv1.MemberTransitionStatus) bool {
		return x.Name == y.Name && x.State == y.State && x.PartitionsToSend == y.PartitionsToSend &&
			x.BytesSent == y.BytesSent && x.Vnodes == y.Vnodes
	})
}

func transitionMessage(t *kvv1.RingTransitionStatus, leaving []string) string {
	msg := fmt.Sprintf("ring transition from %d to %d members: %d partitions to send, %d bytes moved",
		t.FromMembers, t.ToMembers, t.PartitionsPending, t.BytesMoved)
	if len(leaving) > 0 {
		msg += fmt.Sprintf("; leaving members keep running until empty: %s", strings.Join(memberNames(leaving), ", "))
	}
	if w := waitingOn(t.Members); w != "" {
		msg += "; waiting on " + w
	}
	return msg
}

// waitingOn lists the members the transition waits for, with their state.
func waitingOn(ms []kvv1.MemberTransitionStatus) string {
	var w []string
	for _, m := range ms {
		if (m.Leaving && m.State == kvv1.MemberEmpty) || (!m.Leaving && m.State == kvv1.MemberSwitched) {
			continue
		}
		s := m.Name + " " + m.State
		if m.Message != "" {
			s += " (" + m.Message + ")"
		}
		w = append(w, s)
	}
	return strings.Join(w, ", ")
}

func fromMembers(t *kvv1.RingTransitionStatus, def int) int32 {
	if t == nil {
		return int32(def)
	}
	return t.FromMembers
}

// memberName is the pod name of a member address (<pod>.<headless>.<ns>.svc:<port>).
func memberName(addr string) string {
	name, _, _ := strings.Cut(addr, ".")
	return name
}

func memberNames(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range sortedMembers(addrs) {
		out = append(out, memberName(a))
	}
	return out
}

func sortedMembers(addrs []string) []string {
	s := slices.Clone(addrs)
	slices.SortFunc(s, compareMembers)
	return s
}

// compareMembers orders member addresses by ordinal (pod-10 after pod-9), then by text.
func compareMembers(a, b string) int {
	oa, oka := ordinalOf(a)
	ob, okb := ordinalOf(b)
	if oka && okb && oa != ob {
		return oa - ob
	}
	return strings.Compare(a, b)
}

// ordinalOf is the StatefulSet ordinal of a member address (the number after the pod name's
// last '-').
func ordinalOf(addr string) (int, bool) {
	name := memberName(addr)
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0, false
	}
	n := 0
	for _, ch := range name[i+1:] {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int(ch-'0')
	}
	return n, i+1 < len(name)
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}
