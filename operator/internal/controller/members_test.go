package controller

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// The contract with the node: the Rust test engine/crates/cluster/tests/integration/operator_members_fixture.rs
// parses this file with levee_cluster::MemberList::parse. Regenerate it after a deliberate
// format change with: go test ./internal/controller -run TestMembersJSONFixture -update-members-fixture
var updateMembersFixture = flag.Bool("update-members-fixture", false, "rewrite the member list fixture shared with the Rust parser")

const membersFixture = "../../../engine/crates/cluster/tests/fixtures/operator-members.json"

// fixtureCluster is the input of the fixture: KVCluster default/orders, ring settled at 3
// members, version 7.
func fixtureCluster() *kvv1.KVCluster {
	c := &kvv1.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "default"}}
	kvv1.SetDefaults(c)
	c.Status.Members = MemberAddresses(c, 3)
	c.Status.RingVersion = 7
	return c
}

func TestMembersJSONFixture(t *testing.T) {
	got, ok, err := MembersJSON(fixtureCluster())
	if err != nil || !ok {
		t.Fatalf("MembersJSON = ok %v, err %v", ok, err)
	}
	if *updateMembersFixture {
		if err := os.WriteFile(membersFixture, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(membersFixture)
	if err != nil {
		t.Fatalf("the fixture shared with the Rust parser is missing: %v", err)
	}
	if got != string(want) {
		t.Errorf("MembersJSON differs from %s, which the node's parser is tested against (after a deliberate change: -update-members-fixture, then run the Rust test operator_members_fixture):\ngot:\n%s\nfixture:\n%s",
			filepath.Clean(membersFixture), got, want)
	}
}

func TestSettledMemberList(t *testing.T) {
	addr := func(pod string) string { return pod + ".kv-headless.ns.svc:8087" }
	entry := func(pod string) MemberEntry { return MemberEntry{Name: pod, Address: addr(pod)} }
	cases := []struct {
		name    string
		members []string
		version int64
		ok      bool
		want    []MemberEntry
		err     string
	}{
		{name: "forming: no settled membership, no list", ok: false},
		{name: "formed", members: MemberAddresses(cluster(nil), 3), version: 1, ok: true,
			want: []MemberEntry{entry("kv-0"), entry("kv-1"), entry("kv-2")}},
		{name: "sorted by name as the node keeps them", members: MemberAddresses(cluster(nil), 11), version: 4, ok: true,
			want: []MemberEntry{entry("kv-0"), entry("kv-1"), entry("kv-10"), entry("kv-2"), entry("kv-3"), entry("kv-4"),
				entry("kv-5"), entry("kv-6"), entry("kv-7"), entry("kv-8"), entry("kv-9")}},
		{name: "address of another Service", members: []string{addr("kv-0"), "kv-1.other.ns.svc:8087"}, version: 1,
			err: `status.members entry "kv-1.other.ns.svc:8087" is not <pod>.kv-headless.ns.svc:8087`},
		{name: "address without a pod", members: []string{".kv-headless.ns.svc:8087"}, version: 1, err: "is not <pod>"},
		{name: "a pod name the node refuses", members: []string{addr("kv_0")}, version: 1,
			err: `member "kv_0" has a bad address "kv_0.kv-headless.ns.svc:8087": the host name may only hold`},
		{name: "a member twice", members: []string{addr("kv-0"), addr("kv-1"), addr("kv-0")}, version: 2,
			err: `member "kv-0" is listed twice`},
		{name: "negative version", members: []string{addr("kv-0")}, version: -1, err: "status.ringVersion -1 is negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = tc.members, tc.version })
			doc, ok, err := SettledMemberList(c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || ok {
					t.Fatalf("err = %v (ok %v), want %q", err, ok, tc.err)
				}
				if js, _, jerr := MembersJSON(c); js != "" || jerr == nil {
					t.Errorf("MembersJSON = %q, %v: an invalid list must not be rendered", js, jerr)
				}
				return
			}
			if err != nil || ok != tc.ok {
				t.Fatalf("ok %v err %v, want ok %v", ok, err, tc.ok)
			}
			if !ok {
				if js, _, _ := MembersJSON(c); js != "" {
					t.Errorf("MembersJSON while forming = %q, want none", js)
				}
				return
			}
			if doc.Version != uint64(tc.version) || !reflect.DeepEqual(doc.Members, tc.want) {
				t.Errorf("doc = %+v, want version %d members %+v", doc, tc.version, tc.want)
			}
		})
	}
}

func TestMembersJSONFormat(t *testing.T) {
	c := cluster(func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = MemberAddresses(c, 2), 3 })
	got, _, err := MembersJSON(c)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 3,
  "members": [
    {
      "name": "kv-0",
      "address": "kv-0.kv-headless.ns.svc:8087",
      "zone": ""
    },
    {
      "name": "kv-1",
      "address": "kv-1.kv-headless.ns.svc:8087",
      "zone": ""
    }
  ]
}
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Every rule of levee_cluster::MemberList::new, with the member it names.
func TestMemberListValidate(t *testing.T) {
	m := func(name, address, zone string) MemberEntry {
		return MemberEntry{Name: name, Address: address, Zone: zone}
	}
	long := strings.Repeat("a", 254)
	cases := []struct {
		name    string
		members []MemberEntry
		err     string // "" = valid
	}{
		{"valid", []MemberEntry{m("a", "a.example:1", "eu-west-1a"), m("b_2.x", "10.0.0.1:8087", ""), m("C", "[::1]:65535", "Z_1.b")}, ""},
		{"253-character name and zone", []MemberEntry{m(long[:253], "h:1", long[:253])}, ""},
		{"empty list", nil, "member list version 5 has no members"},
		{"empty name", []MemberEntry{m("", "h:1", "")}, `member name "": empty`},
		{"name with a space", []MemberEntry{m("a b", "h:1", "")}, `member name "a b": only A-Z a-z 0-9 - . _ are allowed`},
		{"name with a slash", []MemberEntry{m("a/b", "h:1", "")}, "only A-Z a-z 0-9 - . _"},
		{"non-ASCII name", []MemberEntry{m("nœud", "h:1", "")}, "only A-Z a-z 0-9 - . _"},
		{"254-character name", []MemberEntry{m(long, "h:1", "")}, "longer than 253 characters"},
		{"zone with a space", []MemberEntry{m("a", "h:1", "zone a")}, `member "a" has a bad zone "zone a": only A-Z`},
		{"254-character zone", []MemberEntry{m("a", "h:1", long)}, "bad zone"},
		{"bad address", []MemberEntry{m("a", "h", "")}, `member "a" has a bad address "h": expected host:port (port missing)`},
		{"duplicate name", []MemberEntry{m("a", "h1:1", ""), m("b", "h2:1", ""), m("a", "h3:1", "")}, `member "a" is listed twice`},
		{"duplicate address", []MemberEntry{m("b", "h:1", ""), m("a", "h:1", "")}, `members "a" and "b" have the same address "h:1"`},
		{"addresses compare exactly", []MemberEntry{m("a", "H:1", ""), m("b", "h:1", "")}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := MemberListDoc{Version: 5, Members: tc.members}.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// The node's address table (members.rs address_table) and the cases where Go's parsers are
// more permissive than the node's.
func TestCheckMemberAddress(t *testing.T) {
	good := []string{
		"orders-0.orders-headless.default.svc:8087",
		"localhost:1",
		"node.:65535",
		"10.1.2.3:8087",
		"[::1]:8087",
		"[fe80::1]:8087",
		"[::ffff:10.0.0.1]:80",
		"host:0080",
		"a-b.c:80",
		"1a.example:80",
		strings.Repeat("a", 63) + ".b:1",
	}
	for _, a := range good {
		if err := CheckMemberAddress(a); err != nil {
			t.Errorf("%s refused: %v", a, err)
		}
	}
	bad := []struct{ address, why string }{
		{"orders-0", "port missing"},
		{":8087", "empty"},
		{"host:0", "port"},
		{"host:65536", "port"},
		{"host:+80", "port"},
		{"host:-80", "port"},
		{"host:", "port"},
		{"host:8o", "port"},
		{"::1:8087", "brackets"},
		{"[::1:8087", "unclosed"},
		{"[nope]:8087", "IPv6"},
		{"[10.0.0.1]:8087", "IPv6"},
		{"[fe80::1%eth0]:8087", "IPv6"},
		{"-bad.example:80", "start or end"},
		{"bad-.example:80", "start or end"},
		{"a..b:80", "1 to 63"},
		{".:80", "1 to 63"},
		{strings.Repeat("a", 64) + ".b:1", "1 to 63"},
		{strings.Repeat("abcdefg.", 32) + "x:1", "longer than 253"},
		{"under_score:80", "may only hold"},
		{"10.0.0.256:80", "IPv4"},
		{"010.0.0.1:80", "IPv4"},
		{"1.2.3:80", "IPv4"},
		{"http://h:80", "scheme"},
	}
	for _, tc := range bad {
		err := CheckMemberAddress(tc.address)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: err = %v, want %q", tc.address, err, tc.why)
		}
	}
}

// The version is status.ringVersion: recomputing status without a membership change leaves
// members.json byte for byte as it was; a settled change raises the version.
func TestMembersJSONFollowsTheSettledRing(t *testing.T) {
	c := cluster(nil)
	obs := Observed{StatefulSet: sts(1, 1, 3, 3, 3)}
	render := func() string {
		js, _, err := MembersJSON(c)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	if js := render(); js != "" {
		t.Fatalf("before the ring formed: %q", js)
	}
	c.Status = ComputeStatus(c, obs, metav1.NewTime(time.Unix(100, 0)))
	first := render()
	if !strings.Contains(first, `"version": 1,`) || strings.Count(first, `"name"`) != 3 {
		t.Fatalf("formed: %s", first)
	}
	for i := range 3 {
		c.Status = ComputeStatus(c, obs, metav1.NewTime(time.Unix(int64(200+i), 0)))
		if js := render(); js != first {
			t.Fatalf("reconcile %d without a membership change rewrote members.json:\n%s", i, js)
		}
	}
	// Scale out: while the new members are not ready, the settled list (and the file) stays.
	c.Spec.Replicas = 5
	c.Generation = 2
	c.Status = ComputeStatus(c, Observed{StatefulSet: sts(2, 2, 5, 5, 3)}, metav1.NewTime(time.Unix(300, 0)))
	if js := render(); js != first {
		t.Fatalf("ring change in progress rewrote members.json:\n%s", js)
	}
	c.Status = ComputeStatus(c, Observed{StatefulSet: sts(2, 2, 5, 5, 5)}, metav1.NewTime(time.Unix(400, 0)))
	if js := render(); !strings.Contains(js, `"version": 2,`) || strings.Count(js, `"name"`) != 5 {
		t.Fatalf("settled at 5: %s", js)
	}
}

// A membership change must not roll the pods: the pod template (and its config hash) does not
// depend on the member list; only the ConfigMap's members files change.
func TestMembershipChangeLeavesPodTemplate(t *testing.T) {
	before := cluster(func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = MemberAddresses(c, 3), 1 })
	after := cluster(func(c *kvv1.KVCluster) {
		c.Spec.Replicas = 5
		c.Status.Members, c.Status.RingVersion = MemberAddresses(c, 5), 2
	})
	if a, b := BuildStatefulSet(before).Spec.Template, BuildStatefulSet(after).Spec.Template; !equality.Semantic.DeepEqual(a, b) {
		t.Errorf("a member list change changed the pod template:\nbefore %+v\nafter  %+v", a, b)
	}
	if ConfigHash(before) != ConfigHash(after) {
		t.Errorf("config hash changed with the member list")
	}
	jsBefore, _, _ := MembersJSON(before)
	jsAfter, _, _ := MembersJSON(after)
	cmBefore, cmAfter := BuildConfigMap(before, jsBefore), BuildConfigMap(after, jsAfter)
	if cmBefore.Data[ConfigFileName] == cmAfter.Data[ConfigFileName] || cmBefore.Data[MembersJSONFileName] == cmAfter.Data[MembersJSONFileName] {
		t.Errorf("the ConfigMap should carry the new member lists")
	}
}

func TestComputeStatusMemberListInvalid(t *testing.T) {
	c := cluster(func(c *kvv1.KVCluster) { c.Status.Members, c.Status.RingVersion = MemberAddresses(c, 3), 1 })
	st := ComputeStatus(c, Observed{StatefulSet: sts(1, 1, 3, 3, 3), MembersErr: errors.New(`member "kv_0" has a bad address`)}, metav1.Now())
	var cond *metav1.Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == kvv1.ConditionDegraded {
			cond = &st.Conditions[i]
		}
	}
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ReasonMemberListInvalid ||
		!strings.Contains(cond.Message, `members.json in the ConfigMap was not updated`) || !strings.Contains(cond.Message, `"kv_0"`) {
		t.Fatalf("Degraded = %+v", cond)
	}
	if st.Phase != kvv1.PhaseDegraded {
		t.Errorf("phase = %s", st.Phase)
	}
	// An apply error wins: it is reported first.
	st = ComputeStatus(c, Observed{StatefulSet: sts(1, 1, 3, 3, 3), MembersErr: errors.New("x"), ApplyErr: fmt.Errorf("apply")}, metav1.Now())
	for _, cd := range st.Conditions {
		if cd.Type == kvv1.ConditionDegraded && cd.Reason != ReasonReconcileError {
			t.Errorf("Degraded reason = %s", cd.Reason)
		}
	}
}
