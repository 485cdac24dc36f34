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
	unreached        // a transient failure to reach the node: connection refused
	unreachedTimeout // transient: no answer within the timeout
	unreachedAuth    // transient: the node refused the credentials
	unreachedHostKey // sticky: the node's key is not the pinned one
	unreachedConfig  // sticky: the connection cannot be made as configured
)

// unreachedOutcomes are the outcomes of the unreached observations.
var unreachedOutcomes = map[observation]sshdial.Outcome{
	unreached:        {Reason: sshdial.ReasonNetwork, Message: "dial tcp 192.0.2.7:22: connect: connection refused"},
	unreachedTimeout: {Reason: sshdial.ReasonTimeout, Message: "192.0.2.7:22: i/o timeout"},
	unreachedAuth:    {Reason: sshdial.ReasonAuth, Message: "192.0.2.7:22: ssh: unable to authenticate"},
	unreachedHostKey: {Reason: sshdial.ReasonHostKey, Message: "192.0.2.7:22: host key mismatch"},
	unreachedConfig:  {Reason: sshdial.ReasonConfig, Message: "192.0.2.7:22: cannot read /k"},
}

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
	case unreached, unreachedTimeout, unreachedAuth, unreachedHostKey, unreachedConfig:
		o := unreachedOutcomes[o]
		r.Unreachable = &o
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
	t.Parallel()
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
			{name: "unreached once, not in error: held healthy", obs: unreached, state: StateHealthy, reason: []string{"node n1 could not be reached", "keeps its last state (healthy)", "marked missing if the next evaluation fails too"}, errorSince: none, lastClear: 6, healthyCond: ReasonChecksPass},
			{name: "unreached twice: missing", obs: unreached, state: StateMissing, reason: []string{"node n1 is missing"}, errorSince: none, lastClear: 6, healthyCond: ReasonNotEvaluated},
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

// TestAdvanceMissingHysteresis: a node that cannot be reached becomes
// missing by the reachability rule. A transient failure keeps its last
// state for one evaluation (the second in a row makes it missing); a sticky
// one (host key, configuration) makes it missing at once; any evaluation
// that reaches the node ends the streak; error is never hidden; and a node
// with no last state is missing at once.
func TestAdvanceMissingHysteresis(t *testing.T) {
	t.Parallel()
	type step struct {
		obs    observation
		state  State
		streak int
		reason string // part of the reason
	}
	const (
		held    = "keeps its last state"
		missing = "is missing: it could not be reached"
	)
	for _, seq := range []struct {
		name  string
		steps []step
	}{
		{"healthy, one transient failure, back", []step{
			{pass, StateHealthy, 0, "is healthy"},
			{unreached, StateHealthy, 1, held + " (healthy) for now, and will be marked missing if the next evaluation fails too"},
			{pass, StateHealthy, 0, "is healthy"},
			{unreached, StateHealthy, 1, "connection refused (network)"},
		}},
		{"two transient failures in a row, of any kind", []step{
			{pass, StateHealthy, 0, ""},
			{unreachedTimeout, StateHealthy, 1, held},
			{unreachedAuth, StateMissing, 2, missing},
			{unreached, StateMissing, 2, missing}, // the streak stops at the threshold
			{pass, StateHealthy, 0, "is healthy"},
		}},
		{"sticky at once: host key", []step{
			{pass, StateHealthy, 0, ""},
			{unreachedHostKey, StateMissing, 1, "host key mismatch (host_key)"},
			{unreached, StateMissing, 2, missing},
		}},
		{"sticky at once: config", []step{
			{pass, StateHealthy, 0, ""},
			{unreachedConfig, StateMissing, 1, "(config)"},
		}},
		{"sticky after a transient one", []step{
			{pass, StateHealthy, 0, ""},
			{unreached, StateHealthy, 1, held},
			{unreachedHostKey, StateMissing, 2, "(host_key)"},
		}},
		{"never evaluated: missing at once", []step{
			{unreached, StateMissing, 1, missing},
			{unreached, StateMissing, 2, missing},
			{pass, StateHealthy, 0, "is healthy"},
		}},
		{"missing stays missing until reached", []step{
			{unreached, StateMissing, 1, missing},
			{pass, StateHealthy, 0, ""},
			{unreached, StateHealthy, 1, held},
			{unreached, StateMissing, 2, missing},
		}},
		{"error is kept whatever the streak", []step{
			{fail, StateError, 0, "mounted read-only"},
			{unreached, StateError, 1, "could not be evaluated now"},
			{unreached, StateError, 2, "could not be evaluated now"},
			// The streak stops at the threshold: counting on would
			// change the record at every evaluation of a node that stays
			// unreachable.
			{unreachedHostKey, StateError, 2, "could not be evaluated now"},
			{pass, StateError, 0, "awaiting operator clear"},
		}},
		{"a failing check ends the hold", []step{
			{pass, StateHealthy, 0, ""},
			{unreached, StateHealthy, 1, held},
			{fail, StateError, 0, "mounted read-only"},
		}},
	} {
		t.Run(seq.name, func(t *testing.T) {
			p := recordPolicy()
			t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			var prev *Record
			for i, st := range seq.steps {
				r := observe(p, st.obs, t0.Add(time.Duration(i)*time.Minute))
				rec, _, err := Advance(prev, r, p, nil, 0, 7)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if rec.State != st.state || rec.UnreachableStreak != st.streak || !strings.Contains(rec.Reason, st.reason) {
					t.Fatalf("step %d: state %s, streak %d, reason %q; want %s, %d, a reason containing %q",
						i, rec.State, rec.UnreachableStreak, rec.Reason, st.state, st.streak, st.reason)
				}
				conds := map[string]conditions.Condition{}
				for _, c := range rec.Conditions {
					conds[c.Type] = c
				}
				if ev := conds[ConditionEvaluated]; (ev.Status == conditions.True) != r.Reached {
					t.Errorf("step %d: Evaluated %+v, reached %v", i, ev, r.Reached)
				}
				if sched := conds[ConditionSchedulable]; (sched.Status == conditions.True) != rec.State.Schedulable() {
					t.Errorf("step %d: Schedulable %+v in state %s", i, sched, rec.State)
				}
				// A held node was not evaluated: Healthy and Schedulable are
				// the previous evaluation's, untouched.
				if prev != nil && !r.Reached && rec.State == prev.State && rec.State != StateMissing && rec.State != StateError {
					for k := 1; k < len(ConditionTypes); k++ {
						if rec.Conditions[k] != prev.Conditions[k] {
							t.Errorf("step %d: held node's %s changed: %+v → %+v", i, ConditionTypes[k], prev.Conditions[k], rec.Conditions[k])
						}
					}
				}
				prev = &rec
			}
		})
	}
}

// TestInstantUnreachedIsMissing: the data source has no memory, so a node
// it cannot reach is missing at once, whatever the failure.
func TestInstantUnreachedIsMissing(t *testing.T) {
	t.Parallel()
	p := recordPolicy()
	for _, o := range []observation{unreached, unreachedTimeout, unreachedAuth, unreachedHostKey, unreachedConfig} {
		rec, err := Instant(observe(p, o, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), p, 1)
		if err != nil || rec.State != StateMissing {
			t.Errorf("Instant(%s) = %s, %v; want missing", unreachedOutcomes[o].Reason, rec.State, err)
		}
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
	t.Parallel()
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

// A node a policy gains is pending: no state observed, no memory, no
// conditions, in no summary; its first evaluation is as a node's first.
func TestPendingHasNoMemoryAndIsInNoSummary(t *testing.T) {
	t.Parallel()
	rec := Pending(recordNode)
	if rec.State != StatePending || len(rec.Conditions) != 0 || rec.LastClear != nil || !rec.ErrorSince.IsZero() ||
		!strings.Contains(rec.Reason, "not evaluated yet") || !strings.Contains(rec.Reason, recordNode) {
		t.Fatalf("Pending = %+v", rec)
	}
	if s := Summarize(map[string]State{recordNode: StatePending}); len(s.Healthy)+len(s.Schedulable)+len(s.Error)+len(s.Missing) != 0 {
		t.Errorf("a pending node is in a summary: %+v", s)
	}
	if StatePending.Schedulable() {
		t.Error("a pending node is schedulable")
	}
}

// Replay is the report a record's results come from: advancing a record
// in error with an operator's clear and the replay of an evaluation that
// found the checks passing clears it, as of that evaluation; a replay of
// one that found them failing refuses the clear; results that lack a
// check the policy plans are no replay.
func TestReplayDecidesAClearFromTheLastEvaluation(t *testing.T) {
	t.Parallel()
	p := recordPolicy()
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	failed, _, err := Advance(nil, observe(p, fail, t0), p, nil, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Hour)
	passing := observe(p, pass, t1)
	awaiting, _, err := Advance(&failed, passing, p, nil, 0, 1)
	if err != nil || awaiting.State != StateError {
		t.Fatalf("after a passing evaluation: %+v, %v", awaiting, err)
	}
	id := p.Plan(recordNode)[0].ID
	note := "disk replaced"

	rep, ok := Replay(p, recordNode, map[string]Result{id: passing.Results[0]}, t1)
	if !ok {
		t.Fatal("no replay of a complete evaluation")
	}
	cleared, result, err := Advance(&awaiting, rep, p, &note, 0, 2)
	if err != nil || result != ClearApplied || cleared.State != StateHealthy || cleared.LastClear == nil ||
		!cleared.LastClear.At.Equal(t1) || cleared.LastClear.Note != note {
		t.Errorf("a clear of the replay of a passing evaluation: %v, %+v, %v", result, cleared, err)
	}
	if c, _ := conditions.Find(cleared.Conditions, ConditionHealthy); !c.LastTransitionTime.Equal(t1) || c.Status != conditions.True {
		t.Errorf("the cleared node's Healthy condition: %+v, want True as of the evaluation (%s)", c, t1)
	}

	rep, _ = Replay(p, recordNode, map[string]Result{id: {Tier: TierStatvfs, Detail: "mounted read-only"}}, t1)
	if _, result, _ := Advance(&failed, rep, p, &note, 0, 2); result != ClearRefused {
		t.Errorf("a clear of the replay of a failing evaluation: %v, want refused", result)
	}
	if _, ok := Replay(p, recordNode, map[string]Result{}, t1); ok {
		t.Error("a replay of results that lack the node's check")
	}
}
