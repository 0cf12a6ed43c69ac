package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	kvv1 "github.com/levee-io/levee/operator/api/v1alpha1"
)

// The node's member list (docs/cluster.md, "Member list"): a JSON document the node reads from
// ConfigDir/MembersJSONFileName and checks with levee_cluster::MemberList::parse
// (engine/crates/cluster/src/membership/members.rs). A contract test ties the two: the output of
// MembersJSON for a fixed cluster is the fixture engine/crates/cluster/tests/fixtures/
// operator-members.json, which a Rust test parses.

// MemberListDoc is the member list document: {"version": N, "members": [...]}.
type MemberListDoc struct {
	Version uint64        `json:"version"`
	Members []MemberEntry `json:"members"`
}

// MemberEntry is one member: the pod name, its gRPC address through the headless Service, and
// its failure domain.
type MemberEntry struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Zone is always "": status does not record the members' zones (see SettledMemberList).
	Zone string `json:"zone"`
}

// SettledMemberList builds the member list from the settled membership in status:
// version = status.ringVersion (raised by ComputeStatus only when status.members changes),
// one member per address of status.members, named after its pod, sorted by name (the order
// the node keeps). ok is false while the ring forms (status.members is empty): there is no
// settled list yet, and the node would refuse an empty one.
//
// Zones are left empty. A zone is part of the list's content, so it must be recorded with the
// settled membership (a zone read from the Nodes at render time could change the file without
// a new version, which every node refuses); the operator does not read Pods or Nodes today.
//
// The list is validated as the node would (Validate); an error means the file must not be
// written.
func SettledMemberList(c *kvv1.KVCluster) (doc MemberListDoc, ok bool, err error) {
	st := c.Status
	if len(st.Members) == 0 {
		return MemberListDoc{}, false, nil
	}
	if st.RingVersion < 0 {
		return MemberListDoc{}, false, fmt.Errorf("status.ringVersion %d is negative", st.RingVersion)
	}
	doc.Version = uint64(st.RingVersion)
	suffix := fmt.Sprintf(".%s.%s.svc:%d", HeadlessServiceName(c), c.Namespace, GRPCPort)
	for _, addr := range st.Members {
		name, found := strings.CutSuffix(addr, suffix)
		if !found || name == "" {
			return MemberListDoc{}, false, fmt.Errorf("status.members entry %q is not <pod>%s (an address of this cluster's headless Service)", addr, suffix)
		}
		doc.Members = append(doc.Members, MemberEntry{Name: name, Address: addr})
	}
	slices.SortFunc(doc.Members, func(a, b MemberEntry) int { return strings.Compare(a.Name, b.Name) })
	if err := doc.Validate(); err != nil {
		return MemberListDoc{}, false, err
	}
	return doc, true, nil
}

// MembersJSON renders the settled member list as the MembersJSONFileName document (indented,
// ending with a newline). ok is false while the ring forms (see SettledMemberList).
func MembersJSON(c *kvv1.KVCluster) (doc string, ok bool, err error) {
	l, ok, err := SettledMemberList(c)
	if !ok || err != nil {
		return "", ok, err
	}
	return l.JSON(), true, nil
}

// JSON renders the document (indented, ending with a newline).
func (d MemberListDoc) JSON() string {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		panic(err) // strings and integers only: cannot fail
	}
	return string(b) + "\n"
}

// Validate refuses what levee_cluster::MemberList::new refuses, rule by rule, in its order:
// per member (in list order) an empty or malformed name, a malformed zone, a malformed
// address; then a name or an address listed twice; and an empty list.
func (d MemberListDoc) Validate() error {
	if len(d.Members) == 0 {
		return fmt.Errorf("member list version %d has no members", d.Version)
	}
	for _, m := range d.Members {
		if m.Name == "" {
			return fmt.Errorf("member name %q: empty", m.Name)
		}
		if err := checkWord(m.Name); err != nil {
			return fmt.Errorf("member name %q: %w", m.Name, err)
		}
		if err := checkWord(m.Zone); err != nil {
			return fmt.Errorf("member %q has a bad zone %q: %w", m.Name, m.Zone, err)
		}
		if err := CheckMemberAddress(m.Address); err != nil {
			return fmt.Errorf("member %q has a bad address %q: %w", m.Name, m.Address, err)
		}
	}
	names := map[string]bool{}
	for _, m := range d.Members {
		if names[m.Name] {
			return fmt.Errorf("member %q is listed twice", m.Name)
		}
		names[m.Name] = true
	}
	byAddress := map[string]string{}
	for _, m := range d.Members {
		if other, dup := byAddress[m.Address]; dup {
			first, second := min(other, m.Name), max(other, m.Name)
			return fmt.Errorf("members %q and %q have the same address %q", first, second, m.Address)
		}
		byAddress[m.Address] = m.Name
	}
	return nil
}

// checkWord: names and zones are at most 253 characters of A-Z a-z 0-9 - . _ (the characters of
// Kubernetes object names and labels).
func checkWord(s string) error {
	if len(s) > 253 {
		return errors.New("longer than 253 characters")
	}
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' && s[i] != '.' && s[i] != '_' {
			return errors.New("only A-Z a-z 0-9 - . _ are allowed")
		}
	}
	return nil
}

// CheckMemberAddress accepts what the node accepts as a member address (levee_cluster's
// check_address): host:port with a DNS name, an IPv4 address or a bracketed IPv6 address, and
// a port 1-65535. Nothing is resolved.
func CheckMemberAddress(address string) error {
	if strings.Contains(address, "://") {
		return errors.New("write host:port, without a scheme")
	}
	i := strings.LastIndexByte(address, ':')
	if i < 0 {
		return errors.New("expected host:port (port missing)")
	}
	host, port := address[:i], address[i+1:]
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || !allBytes(port, isDigit) {
		return errors.New("the port must be a number from 1 to 65535")
	}
	if inner, bracketed := strings.CutPrefix(host, "["); bracketed {
		ip, closed := strings.CutSuffix(inner, "]")
		if !closed {
			return errors.New("unclosed [ in an IPv6 address")
		}
		// netip also takes IPv4 and zones (%eth0) here; the node's IPv6 parser takes neither.
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is6() || a.Zone() != "" {
			return errors.New("not an IPv6 address inside [ ]")
		}
		return nil
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if strings.Contains(host, ":") {
		return errors.New("an IPv6 address must be written in brackets: [addr]:port")
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return nil
	}
	if len(host) > 253 {
		return errors.New("the host name is longer than 253 characters")
	}
	name := strings.TrimSuffix(host, ".")
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return errors.New("every label of the host name must have 1 to 63 characters")
		}
		if !allBytes(label, func(b byte) bool { return isAlnum(b) || b == '-' }) {
			return errors.New("the host name may only hold A-Z a-z 0-9 - and dots")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return errors.New("a label of the host name cannot start or end with -")
		}
	}
	if allBytes(name, func(b byte) bool { return isDigit(b) || b == '.' }) {
		return errors.New("not a valid IPv4 address")
	}
	return nil
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func isAlnum(b byte) bool { return isDigit(b) || ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') }

func allBytes(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}
