package health

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
	"github.com/fleetops/terraform-provider-fleet/internal/sshtest"
)

// TestSSHDOneConnectionOneSessionPerNode: every script check of a node runs
// in one session over one connection, counted by the evaluator and by sshd.
func TestSSHDOneConnectionOneSessionPerNode(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	root := t.TempDir()
	for _, d := range []string{"blobs", "images", "scratch"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, b := uniqueNode(t, "conn-a"), uniqueNode(t, "conn-b")
	na, nb := sshdNode(s), sshdNode(s)
	na.Roles, nb.Roles = []string{"hypervisor"}, []string{"hypervisor"}
	p := &Policy{
		StorageRoot:  root,
		ProbeTimeout: answers,
		Checks: map[string]CheckDecl{
			"blobs":   {Spec: Spec{Kind: "path", Settings: map[string]any{"path": "blobs"}}},
			"images":  {Spec: Spec{Kind: "path", Settings: map[string]any{"path": "images"}}},
			"scratch": {Spec: Spec{Kind: "path", Settings: map[string]any{"path": "scratch"}}},
			"agent":   {Spec: Spec{Kind: "command", Settings: map[string]any{"command": "echo agent ok"}}},
		},
		ObjectTypes: map[string]ObjectType{"blob": {Checks: []string{"blobs", "agent"}}, "image": {Checks: []string{"images", "scratch"}}},
		Roles:       map[string]Role{"hypervisor": {Hosts: []string{"blob", "image"}}},
		Nodes:       map[string]Node{a: na, b: nb},
	}
	forgetMarkers(t, p, a)
	forgetMarkers(t, p, b)
	e := newEvaluator(nil)
	for round := int64(1); round <= 2; round++ {
		reports, err := e.Evaluate(t.Context(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reports {
			if r.State() != StateHealthy || len(r.Planned) != 4 {
				t.Fatalf("round %d: %s\nsshd log:\n%s", round, describeReport(r, p), s.Log())
			}
		}
		conns, sessions, channels, probes := e.Counters.Snapshot()
		if conns != 2*round || sessions != 2*round || channels != 0 || probes != 8*round {
			t.Errorf("round %d: connections %d, sessions %d, channels %d, probes %d; want %d, %d, 0, %d",
				round, conns, sessions, channels, probes, 2*round, 2*round, 8*round)
		}
		if n := strings.Count(s.Log(), "Accepted publickey"); int64(n) != 2*round {
			t.Errorf("round %d: sshd accepted %d logins, want %d\nsshd log:\n%s", round, n, 2*round, s.Log())
		}
	}
}

// TestSSHDWrongPin: a host whose key is not the pinned one is missing, with
// the mismatch in the reason; it is never in error on that account, no
// script runs on it, and a node already in error stays in error.
func TestSSHDWrongPin(t *testing.T) {
	t.Parallel()
	s := sshtest.StartSSHD(t)
	root := t.TempDir() // root/blobs is missing: the node's check fails
	node := uniqueNode(t, "pin")
	p := pathPolicy(root, node, sshdNode(s), answers)
	forgetMarkers(t, p, node)
	e := newEvaluator(nil)

	// With the right pin, the node is reached and in error.
	r, _ := evalNode(t, e, p, node)
	if r.State() != StateError {
		t.Fatalf("right pin, missing path: %s\nsshd log:\n%s", describeReport(r, p), s.Log())
	}
	inError, _, err := Advance(nil, r, p, nil, 0, 1)
	if err != nil || inError.State != StateError || inError.ErrorSince.IsZero() {
		t.Fatalf("Advance of the failing node: %+v, %v", inError, err)
	}

	wrong := p.Nodes[node]
	wrong.Target.Pin = sshdial.PinKey(sshtest.NewKey(t).Public)
	p.Nodes[node] = wrong
	c0, s0, _, p0 := e.Counters.Snapshot()
	r, _ = evalNode(t, e, p, node)
	if r.Reached || r.State() != StateMissing || r.Unreachable == nil || r.Unreachable.Reason != sshdial.ReasonHostKey {
		t.Fatalf("wrong pin: %s unreachable %+v", describeReport(r, p), r.Unreachable)
	}
	wantContains(t, "wrong pin reason", r.Reason(p), "node "+node+" is missing", "host key mismatch", s.HostKeys[0].Fingerprint(), "(host_key)")
	if c, ss, _, pr := e.Counters.Snapshot(); c != c0 || ss != s0 || pr != p0 {
		t.Errorf("wrong pin: connections %d→%d, sessions %d→%d, probes %d→%d; want no change", c0, c, s0, ss, p0, pr)
	}

	fresh, res, err := Advance(nil, r, p, nil, 0, 1)
	if err != nil || fresh.State != StateMissing || !fresh.ErrorSince.IsZero() || res != ClearNone {
		t.Errorf("Advance(nil, wrong pin): %+v, %v, %v; want missing, never error", fresh, res, err)
	}
	healthyBefore := Record{State: StateHealthy}
	if rec, _, _ := Advance(&healthyBefore, r, p, nil, 0, 1); rec.State != StateMissing {
		t.Errorf("Advance(healthy, wrong pin): state %s, want missing", rec.State)
	}

	// Error takes precedence over missing.
	note := "tried"
	kept, res, err := Advance(&inError, r, p, &note, 0, 1)
	if err != nil || kept.State != StateError || !kept.ErrorSince.Equal(inError.ErrorSince) || res == ClearApplied {
		t.Fatalf("Advance(error, wrong pin): %+v, %v, %v; want error kept since %v", kept, res, err, inError.ErrorSince)
	}
	wantContains(t, "error kept reason", kept.Reason, "node "+node+" is in error since "+inError.ErrorSince.Format(time.RFC3339), "could not be evaluated now", "host key mismatch")
	conds := map[string]conditions.Condition{}
	for _, c := range kept.Conditions {
		conds[c.Type] = c
	}
	if c := conds[ConditionEvaluated]; c.Status != conditions.False || c.Reason != reachability.ConditionReason(sshdial.ReasonHostKey) {
		t.Errorf("Evaluated = %+v, want False, %s", c, reachability.ConditionReason(sshdial.ReasonHostKey))
	}
	if c := conds[ConditionSchedulable]; c.Status != conditions.False || c.Reason != ReasonNodeError {
		t.Errorf("Schedulable = %+v, want False, %s", c, ReasonNodeError)
	}
	if c := conds[ConditionHealthy]; c.Status != conditions.False || c.Reason != ReasonChecksFailed {
		t.Errorf("Healthy = %+v, want False, %s", c, ReasonChecksFailed)
	}
}
