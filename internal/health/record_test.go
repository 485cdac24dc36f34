package health

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// The sticky error record is a pure function of the previous record and a
// report, so its table uses reports as the evaluator makes them: one path
// check, passing, failing or the node not reached.

const recordNode = "n1"

func recordPolicy() *Policy {
	return &Policy{
		StorageRoot: "/srv",
		Checks:      map[string]CheckDecl{"blobs": pathDecl("blobs", "blob storage")},
		ObjectTypes: map[string]ObjectType{"blob": {Checks: []string{"blobs"}}},
		Roles:       map[string]Role{"hypervisor": {Hosts: []string{"blob"}}},
		Nodes:       map[string]Node{recordNode: {Roles: []string{"hypervisor"}, Local: true}},
	}
}

type observation int

const (
	pass observation = iota
	fail
	unreached
)

func observe(p *Policy, o observation, at time.Time) Report {
	planned := p.Plan(recordNode)
	r := Report{Node: recordNode, Roles: []string{"hypervisor"}, Planned: planned, Results: make([]Result, len(planned)), EvaluatedAt: at}
	switch o {
	case pass:
		r.Reached = true
		r.Results[0] = Result{Healthy: true, Tier: TierHeartbeat, Detail: "heartbeat written", Heartbeat: at.Truncate(time.Second)}
	case fail:
		r.Reached = true
		r.Results[0] = Result{Tier: TierStatvfs, Detail: "mounted read-only"}
	case unreached:
		r.Unreachable = &sshdial.Outcome{Reason: sshdial.ReasonNetwork, Message: "dial tcp 192.0.2.7:22: connect: connection refused"}
	}
	return r
}

func strp(s string) *string { return &s }

type recordStep struct {
	name      string
	obs       observation
	clear     *string
	autoClear int

	state       State
	result      ClearResult
	reason      []string
	errorSince  int    // the step whose time ErrorSince holds; -1 for none
	lastClear   int    // the step whose time LastClear.At holds; -1 for none
	clearNote   string // part of LastClear.Note
	healthyCond string // the Healthy condition's reason
}

func TestAdvanceStickyError(t *testing.T) {
	const none = -1
	sequences := []struct {
		name  string
		steps []recordStep
	}{
		{"operator clear", []recordStep{
			{name: "healthy", obs: pass, state: StateHealthy, reason: []string{"node n1 is healthy: its 1 check passes"}, errorSince: none, lastClear: none, healthyCond: ReasonChecksPass},
			{name: "fail", obs: fail, state: StateError, reason: []string{"node n1 is unhealthy because", "/srv/blobs: mounted read-only"}, errorSince: 1, lastClear: none, healthyCond: ReasonChecksFailed},
			{name: "still failing", obs: fail, state: StateError, errorSince: 1, lastClear: none, healthyCond: ReasonChecksFailed},
			{name: "repaired", obs: pass, state: StateError, reason: []string{"checks pass again; awaiting operator clear", "in error since", `clear_errors["n1"]`}, errorSince: 1, lastClear: none, healthyCond: ReasonAwaitingClear},
			{name: "missing while in error", obs: unreached, state: StateError, reason: []string{"node n1 is in error since", "could not be evaluated now", "connection refused (network)"}, errorSince: 1, lastClear: none, healthyCond: ReasonChecksFailed},
			{name: "clear while failing", obs: fail, clear: strp("disk replaced"), state: StateError, result: ClearRefused, reason: []string{"mounted read-only"}, errorSince: 1, lastClear: none, healthyCond: ReasonChecksFailed},
			{name: "clear while passing", obs: pass, clear: strp("disk replaced"), state: StateHealthy, result: ClearApplied, reason: []string{"is healthy"}, errorSince: none, lastClear: 6, clearNote: "disk replaced", healthyCond: ReasonChecksPass},
			{name: "healthy after the clear", obs: pass, state: StateHealthy, errorSince: none, lastClear: 6, clearNote: "disk replaced", healthyCond: ReasonChecksPass},
			{name: "clear of a healthy node", obs: pass, clear: strp("again"), state: StateHealthy, result: ClearNone, errorSince: none, lastClear: 6, clearNote: "disk replaced", healthyCond: ReasonChecksPass},
			{name: "missing, not in error", obs: unreached, state: StateMissing, reason: []string{"node n1 is missing"}, errorSince: none, lastClear: 6, healthyCond: ReasonNotEvaluated},
		}},
		{"auto clear after 2", []recordStep{
			{name: "fail", obs: fail, autoClear: 2, state: StateError, errorSince: 0, lastClear: none, healthyCond: ReasonChecksFailed},
			{name: "pass once", obs: pass, autoClear: 2, state: StateError, reason: []string{"awaiting operator clear"}, errorSince: 0, lastClear: none, healthyCond: ReasonAwaitingClear},
			{name: "fail again resets the streak", obs: fail, autoClear: 2, state: StateError, errorSince: 0, lastClear: none, healthyCond: ReasonChecksFailed},
			{name: "pass once more", obs: pass, autoClear: 2, state: StateError, errorSince: 0, lastClear: none, healthyCond: ReasonAwaitingClear},
			{name: "pass twice in a row", obs: pass, autoClear: 2, state: StateHealthy, result: ClearNone, errorSince: none, lastClear: 4, clearNote: "cleared automatically after 2 healthy evaluations", healthyCond: ReasonChecksPass},
		}},
	}
	p := recordPolicy()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	for _, seq := range sequences {
		t.Run(seq.name, func(t *testing.T) {
			var prev *Record
			for i, st := range seq.steps {
				r := observe(p, st.obs, at(i))
				rec, res, err := Advance(prev, r, p, st.clear, st.autoClear, 7)
				if err != nil {
					t.Fatalf("step %d %s: %v", i, st.name, err)
				}
				if rec.State != st.state || res != st.result {
					t.Fatalf("step %d %s: state %s, clear %v; want %s, %v (reason %q)", i, st.name, rec.State, res, st.state, st.result, rec.Reason)
				}
				for _, want := range st.reason {
					if !strings.Contains(rec.Reason, want) {
						t.Errorf("step %d %s: reason %q lacks %q", i, st.name, rec.Reason, want)
					}
				}
				switch {
				case st.errorSince == none && !rec.ErrorSince.IsZero():
					t.Errorf("step %d %s: ErrorSince %v, want none", i, st.name, rec.ErrorSince)
				case st.errorSince != none && !rec.ErrorSince.Equal(at(st.errorSince)):
					t.Errorf("step %d %s: ErrorSince %v, want %v", i, st.name, rec.ErrorSince, at(st.errorSince))
				}
				switch {
				case st.lastClear == none && rec.LastClear != nil:
					t.Errorf("step %d %s: LastClear %+v, want none", i, st.name, rec.LastClear)
				case st.lastClear != none && (rec.LastClear == nil || !rec.LastClear.At.Equal(at(st.lastClear)) || !strings.Contains(rec.LastClear.Note, st.clearNote)):
					t.Errorf("step %d %s: LastClear %+v, want at %v with note %q", i, st.name, rec.LastClear, at(st.lastClear), st.clearNote)
				}
				checkConditions(t, i, st, prev, rec, r)
				if st.obs == pass {
					if hb := rec.Heartbeats["/srv/blobs"]; !hb.Equal(at(i).Truncate(time.Second)) {
						t.Errorf("step %d %s: heartbeat %v, want this evaluation's", i, st.name, hb)
					}
				} else if prev != nil && !rec.Heartbeats["/srv/blobs"].Equal(prev.Heartbeats["/srv/blobs"]) {
					t.Errorf("step %d %s: heartbeat changed without a heartbeat", i, st.name)
				}
				prev = &rec
			}
		})
	}
}

// checkConditions: the three conditions are there, in order; a condition's
// LastTransitionTime moves to the evaluation's time exactly when its status
// changes.
func checkConditions(t *testing.T, i int, st recordStep, prev *Record, rec Record, r Report) {
	t.Helper()
	if len(rec.Conditions) != len(ConditionTypes) {
		t.Fatalf("step %d %s: conditions %+v, want %v", i, st.name, rec.Conditions, ConditionTypes)
	}
	for k, c := range rec.Conditions {
		if c.Type != ConditionTypes[k] || c.ObservedGeneration != 7 {
			t.Errorf("step %d %s: condition %d = %+v, want type %s, generation 7", i, st.name, k, c, ConditionTypes[k])
		}
		var was *conditions.Condition
		if prev != nil {
			was = &prev.Conditions[k]
		}
		switch {
		case was == nil || was.Status != c.Status:
			if !c.LastTransitionTime.Equal(r.EvaluatedAt) {
				t.Errorf("step %d %s: %s turned %s but LastTransitionTime is %v, want %v", i, st.name, c.Type, c.Status, c.LastTransitionTime, r.EvaluatedAt)
			}
		case !c.LastTransitionTime.Equal(was.LastTransitionTime):
			t.Errorf("step %d %s: %s stayed %s but LastTransitionTime moved %v → %v", i, st.name, c.Type, c.Status, was.LastTransitionTime, c.LastTransitionTime)
		}
	}
	healthy, schedulable := rec.Conditions[1], rec.Conditions[2]
	if healthy.Reason != st.healthyCond {
		t.Errorf("step %d %s: Healthy reason %s, want %s", i, st.name, healthy.Reason, st.healthyCond)
	}
	wantHealthy := map[State]conditions.Status{StateHealthy: conditions.True, StateError: conditions.False, StateMissing: conditions.Unknown}[rec.State]
	if healthy.Status != wantHealthy {
		t.Errorf("step %d %s: Healthy %s, want %s in state %s", i, st.name, healthy.Status, wantHealthy, rec.State)
	}
	if (schedulable.Status == conditions.True) != rec.State.Schedulable() {
		t.Errorf("step %d %s: Schedulable %s in state %s", i, st.name, schedulable.Status, rec.State)
	}
	evaluated := rec.Conditions[0]
	if (evaluated.Status == conditions.True) != r.Reached {
		t.Errorf("step %d %s: Evaluated %s, reached %v", i, st.name, evaluated.Status, r.Reached)
	}
}

// TestInstantHasNoMemory: the data source's record is in error exactly
// while a check fails.
func TestInstantHasNoMemory(t *testing.T) {
	p := recordPolicy()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		obs  observation
		want State
	}{{fail, StateError}, {pass, StateHealthy}, {unreached, StateMissing}} {
		rec, err := Instant(observe(p, c.obs, t0), p, 1)
		if err != nil || rec.State != c.want {
			t.Errorf("Instant(%v) = %s, %v; want %s", c.obs, rec.State, err, c.want)
		}
	}
}
