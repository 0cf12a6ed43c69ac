package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

func ringAddrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = ringAddr(i)
	}
	return out
}

func ringAddr(i int) string { return fmt.Sprintf("kv-%d.kv-headless.shop.svc:8087", i) }

var ringT0 = metav1.NewTime(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))

func at(d time.Duration) metav1.Time { return metav1.NewTime(ringT0.Add(d)) }

// switched: a member that routes by list version v (a leaving one holding `vnodes`).
func switched(v int64, vnodes int32) MemberReport {
	return MemberReport{ListVersion: v, RoutingVersion: v, VnodesActive: vnodes}
}

// moving: a member on list v still routing by v-1, with partitions and bytes to report.
func moving(v int64, toSend int32, bytes int64) MemberReport {
	return MemberReport{ListVersion: v, RoutingVersion: v - 1, VnodesActive: 4, PartitionsToSend: toSend, BytesSent: bytes}
}

// running: status with list version v naming `to` members, in transition from `from` members.
func inTransition(from, to int, v int64, lastProgress metav1.Time) kvv1.KVClusterStatus {
	st := kvv1.KVClusterStatus{Members: ringAddrs(to), RingVersion: v, Transition: &kvv1.RingTransitionStatus{
		From: ringAddrs(from), FromMembers: int32(from), ToMembers: int32(to), StartTime: ringT0, LastProgressTime: lastProgress,
	}}
	if from > to {
		st.LeavingMembers = ringAddrs(from)[to:]
	}
	return st
}

func TestPlanRing(t *testing.T) {
	type want struct {
		members    int
		version    int64
		leaving    []int
		transition bool // a transition runs afterwards
		from       int  // its FromMembers
		inProgress bool
		reason     string
		msg        string // contained in Message (or Queued/Stalled when those are set)
		published  bool
		completed  bool
		stalled    bool
		queued     bool
	}
	cases := []struct {
		name string
		in   RingInput
		want want
	}{
		{"forming, pods not ready", RingInput{Desired: ringAddrs(3)},
			want{reason: ReasonForming, msg: "ready for the first time"}},
		{"forming, every pod ready: the ring forms without a transition", RingInput{Desired: ringAddrs(3), PodsReady: true},
			want{members: 3, version: 1}},
		{"settled, nothing asked", RingInput{Status: kvv1.KVClusterStatus{Members: ringAddrs(3), RingVersion: 4}, Desired: ringAddrs(3), PodsReady: true},
			want{members: 3, version: 4}},
		{"scale-out waits for the new pods", RingInput{Status: kvv1.KVClusterStatus{Members: ringAddrs(3), RingVersion: 4}, Desired: ringAddrs(5)},
			want{members: 3, version: 4, inProgress: true, reason: ReasonWaitingForPods, msg: "scaling out from 3 to 5 members"}},
		{"scale-out publishes once every pod is ready", RingInput{Status: kvv1.KVClusterStatus{Members: ringAddrs(3), RingVersion: 4}, Desired: ringAddrs(5), PodsReady: true},
			want{members: 5, version: 5, transition: true, from: 3, inProgress: true, reason: ReasonRingTransition, msg: "from 3 to 5 members", published: true}},
		{"scale-in publishes the smaller list; the dropped members leave", RingInput{Status: kvv1.KVClusterStatus{Members: ringAddrs(5), RingVersion: 4}, Desired: ringAddrs(3), PodsReady: true},
			want{members: 3, version: 5, leaving: []int{3, 4}, transition: true, from: 5, inProgress: true, reason: ReasonRingTransition, msg: "leaving members keep running until empty: kv-3, kv-4", published: true}},
		{"scale-in waits while a pod is not ready", RingInput{Status: kvv1.KVClusterStatus{Members: ringAddrs(5), RingVersion: 4}, Desired: ringAddrs(3)},
			want{members: 5, version: 4, inProgress: true, reason: ReasonWaitingForPods, msg: "could not hand its partitions over"}},
		{"transition: members behind and moving", RingInput{Status: inTransition(3, 5, 5, ringT0), Desired: ringAddrs(5), Now: at(time.Minute),
			Reports: map[string]MemberReport{ringAddr(0): moving(5, 3, 1000), ringAddr(1): moving(5, 2, 500), ringAddr(2): {ListVersion: 4, RoutingVersion: 4, BytesSent: 9999, PartitionsToSend: 7},
				ringAddr(3): moving(5, 0, 0), ringAddr(4): moving(5, 0, 0)}},
			want{members: 5, version: 5, transition: true, from: 3, inProgress: true, reason: ReasonRingTransition, msg: "5 partitions to send, 1500 bytes moved; waiting on kv-0 Moving, kv-1 Moving, kv-2 Behind"}},
		{"transition: an unreachable member is waited for, with why", RingInput{Status: inTransition(3, 5, 5, ringT0), Desired: ringAddrs(5), Now: at(time.Minute),
			Reports: func() map[string]MemberReport {
				r := reportsFor(ringAddrs(5), switched(5, 4))
				r[ringAddr(4)] = MemberReport{Err: errors.New("connection refused")}
				return r
			}()},
			want{members: 5, version: 5, transition: true, from: 3, inProgress: true, reason: ReasonRingTransition, msg: "waiting on kv-4 Unreachable (connection refused)"}},
		{"transition completes when every member switched", RingInput{Status: inTransition(3, 5, 5, ringT0), Desired: ringAddrs(5), Now: at(time.Minute),
			Reports: reportsFor(ringAddrs(5), switched(5, 4))},
			want{members: 5, version: 5, completed: true}},
		{"scale-in: a leaving member that switched but still holds data keeps the transition open", RingInput{Status: inTransition(5, 3, 5, ringT0), Desired: ringAddrs(3), Now: at(time.Minute),
			Reports: func() map[string]MemberReport {
				r := reportsFor(ringAddrs(5), switched(5, 6))
				r[ringAddr(3)], r[ringAddr(4)] = switched(5, 0), MemberReport{ListVersion: 5, RoutingVersion: 5, VnodesHandoff: 2}
				return r
			}()},
			want{members: 3, version: 5, leaving: []int{3, 4}, transition: true, from: 5, inProgress: true, reason: ReasonRingTransition, msg: "waiting on kv-4 Draining"}},
		{"scale-in completes when the leaving members are empty: the pods may go", RingInput{Status: inTransition(5, 3, 5, ringT0), Desired: ringAddrs(3), Now: at(time.Minute),
			Reports: func() map[string]MemberReport {
				r := reportsFor(ringAddrs(3), switched(5, 6))
				r[ringAddr(3)], r[ringAddr(4)] = switched(5, 0), switched(5, 0)
				return r
			}()},
			want{members: 3, version: 5, completed: true}},
		{"no progress for the stall time: reported, with the way back", RingInput{Status: func() kvv1.KVClusterStatus {
			st := inTransition(3, 5, 5, ringT0)
			st.Transition.Members = memberStates(ringAddrs(5), nil, reportsFor(ringAddrs(5), MemberReport{ListVersion: 5, RoutingVersion: 4}), 5)
			return st
		}(), Desired: ringAddrs(5), Now: at(11 * time.Minute), StallAfter: 10 * time.Minute,
			Reports: reportsFor(ringAddrs(5), MemberReport{ListVersion: 5, RoutingVersion: 4})},
			want{members: 5, version: 5, transition: true, from: 3, inProgress: true, reason: ReasonRingTransition, stalled: true, msg: "has not advanced for 11m0s (kv-0 Moving"}},
		{"another size while a transition runs is queued", RingInput{Status: inTransition(3, 5, 5, ringT0), Desired: ringAddrs(6), PodsReady: true, Now: at(time.Minute),
			Reports: reportsFor(ringAddrs(5), MemberReport{ListVersion: 5, RoutingVersion: 4})},
			want{members: 5, version: 5, transition: true, from: 3, inProgress: true, reason: ReasonScaleQueued, queued: true, msg: "spec.replicas 6 waits until the ring transition to 5 members completes (set replicas to 3 to take it back)"}},
		{"the size a scale-out started from takes it back: the new members leave", RingInput{Status: inTransition(3, 5, 5, ringT0), Desired: ringAddrs(3), Now: at(time.Minute),
			Reports: reportsFor(ringAddrs(5), MemberReport{ListVersion: 5, RoutingVersion: 4})},
			want{members: 3, version: 6, leaving: []int{3, 4}, transition: true, from: 5, inProgress: true, reason: ReasonRingTransition, published: true}},
		{"the size a scale-in started from takes it back: nobody leaves", RingInput{Status: inTransition(5, 3, 5, ringT0), Desired: ringAddrs(5), Now: at(time.Minute),
			Reports: reportsFor(ringAddrs(5), MemberReport{ListVersion: 5, RoutingVersion: 4, VnodesActive: 3})},
			want{members: 5, version: 6, transition: true, from: 3, inProgress: true, reason: ReasonRingTransition, published: true}},
		{"a queued size is published once the transition completes", RingInput{Status: inTransition(5, 3, 5, ringT0), Desired: ringAddrs(4), PodsReady: true, Now: at(time.Minute),
			Reports: func() map[string]MemberReport {
				r := reportsFor(ringAddrs(3), switched(5, 6))
				r[ringAddr(3)], r[ringAddr(4)] = switched(5, 0), switched(5, 0)
				return r
			}()},
			want{members: 4, version: 6, transition: true, from: 3, inProgress: true, reason: ReasonRingTransition, published: true, completed: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanRing(tc.in)
			w := tc.want
			var leaving []string
			for _, i := range w.leaving {
				leaving = append(leaving, ringAddr(i))
			}
			if !slices.Equal(p.Members, ringAddrs(w.members)) || p.RingVersion != w.version || !slices.Equal(p.Leaving, leaving) {
				t.Errorf("members %v version %d leaving %v; want %d members, version %d, leaving %v", p.Members, p.RingVersion, p.Leaving, w.members, w.version, leaving)
			}
			if (p.Transition != nil) != w.transition || (w.transition && p.Transition.FromMembers != int32(w.from)) {
				t.Errorf("transition %+v; want running=%v from %d", p.Transition, w.transition, w.from)
			}
			if p.Transition != nil && !slices.Equal(p.Transition.From, ringAddrs(w.from)) {
				t.Errorf("transition.from = %v", p.Transition.From)
			}
			if p.InProgress != w.inProgress || p.Reason != w.reason || p.Published != w.published || (p.Completed != nil) != w.completed ||
				(p.Stalled != "") != w.stalled || (p.Queued != "") != w.queued {
				t.Errorf("inProgress %v reason %q published %v completed %v stalled %q queued %q; want %+v", p.InProgress, p.Reason, p.Published, p.Completed != nil, p.Stalled, p.Queued, w)
			}
			text := p.Message
			switch {
			case p.Stalled != "":
				text = p.Stalled
			case p.Queued != "":
				text = p.Queued
			}
			if !strings.Contains(text, w.msg) {
				t.Errorf("message %q does not contain %q", text, w.msg)
			}
		})
	}
}

// Progress moves the stall clock; reports that stay the same do not (nor a changing error text).
func TestPlanRingProgressClock(t *testing.T) {
	st := inTransition(3, 5, 5, ringT0)
	first := PlanRing(RingInput{Status: st, Desired: ringAddrs(5), Now: at(time.Minute), Reports: reportsFor(ringAddrs(5), moving(5, 2, 100))})
	if !first.Transition.LastProgressTime.Equal(ptr(at(time.Minute))) {
		t.Fatalf("first reports: last progress %v", first.Transition.LastProgressTime)
	}
	st.Transition = first.Transition
	same := PlanRing(RingInput{Status: st, Desired: ringAddrs(5), Now: at(2 * time.Minute), Reports: reportsFor(ringAddrs(5), moving(5, 2, 100))})
	if !same.Transition.LastProgressTime.Equal(ptr(at(time.Minute))) {
		t.Errorf("unchanged reports moved the clock to %v", same.Transition.LastProgressTime)
	}
	if same.Transition.PartitionsPending != 10 || same.Transition.BytesMoved != 500 {
		t.Errorf("sums: %d partitions, %d bytes; want 10, 500", same.Transition.PartitionsPending, same.Transition.BytesMoved)
	}
	more := PlanRing(RingInput{Status: st, Desired: ringAddrs(5), Now: at(3 * time.Minute), Reports: reportsFor(ringAddrs(5), moving(5, 2, 101))})
	if !more.Transition.LastProgressTime.Equal(ptr(at(3 * time.Minute))) {
		t.Errorf("a byte moved but the clock stayed at %v", more.Transition.LastProgressTime)
	}
	down := func(msg string) map[string]MemberReport {
		r := reportsFor(ringAddrs(5), moving(5, 2, 100))
		r[ringAddr(4)] = MemberReport{Err: errors.New(msg)}
		return r
	}
	st.Transition = PlanRing(RingInput{Status: st, Desired: ringAddrs(5), Now: at(4 * time.Minute), Reports: down("timeout 1")}).Transition
	again := PlanRing(RingInput{Status: st, Desired: ringAddrs(5), Now: at(5 * time.Minute), Reports: down("timeout 2")})
	if !again.Transition.LastProgressTime.Equal(ptr(at(4 * time.Minute))) {
		t.Errorf("a changed error text counted as progress: %v", again.Transition.LastProgressTime)
	}
}

func TestStatefulSetReplicasKeepsLeavingMembers(t *testing.T) {
	c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: "shop"}}
	for _, tc := range []struct {
		spec             int32
		members, leaving []string
		want             int32
	}{
		{3, nil, nil, 3},                                 // forming
		{5, ringAddrs(3), nil, 5},                        // scale-out: pods first
		{3, ringAddrs(5), nil, 5},                        // scale-in not published yet
		{3, ringAddrs(3), ringAddrs(5)[3:], 5},           // leaving members still hold data
		{3, ringAddrs(3), []string{ringAddr(11)}, 12},    // the highest ordinal counts
		{3, ringAddrs(3), []string{"not-an-address"}, 3}, // no ordinal: nothing to keep
	} {
		c.Spec.Replicas, c.Status.Members, c.Status.LeavingMembers = tc.spec, tc.members, tc.leaving
		if got := StatefulSetReplicas(c); got != tc.want {
			t.Errorf("spec %d members %d leaving %v: %d pods, want %d", tc.spec, len(tc.members), tc.leaving, got, tc.want)
		}
	}
}
