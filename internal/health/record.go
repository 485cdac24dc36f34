package health

import (
	"fmt"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// The condition types of a node, in their fixed order.
const (
	ConditionEvaluated   = "Evaluated"
	ConditionHealthy     = "Healthy"
	ConditionSchedulable = "Schedulable"
)

// ConditionTypes is the fixed order of a node's conditions.
var ConditionTypes = conditions.Types{ConditionEvaluated, ConditionHealthy, ConditionSchedulable}

// Condition reasons.
const (
	ReasonChecksRan       = "ChecksRan"
	ReasonChecksPass      = "ChecksPass"
	ReasonChecksFailed    = "ChecksFailed"
	ReasonDegradedChecks  = "DegradedChecksFailed"
	ReasonAwaitingClear   = "AwaitingOperatorClear"
	ReasonNotEvaluated    = "NotEvaluated"
	ReasonNodeError       = "NodeError"
	ReasonNodeMissing     = "NodeMissing"
	ReasonNodeSchedulable = "NodeSchedulable"
)

// Clear is an operator's clear of a node's error, or an automatic one.
type Clear struct {
	Note string
	At   time.Time
}

// Record is what is kept of a node between evaluations: the sticky state,
// since when it is in error, the last clear and the last good heartbeat of
// each path.
type Record struct {
	State         State
	Reason        string
	ErrorSince    time.Time // zero unless State is StateError
	LastClear     *Clear
	HealthyStreak int // evaluations in a row without a failed check, while in error
	// UnreachableStreak is how many evaluations in a row could not reach
	// the node: the streak of the reachability rule, which decides when an
	// unreached node becomes missing.
	UnreachableStreak int
	Heartbeats        map[string]time.Time // path → last good heartbeat
	Conditions        []conditions.Condition
}

// ClearResult says what became of a clear requested with an evaluation.
type ClearResult int

// Clear results.
const (
	ClearNone    ClearResult = iota // no clear was requested, or there was nothing to clear
	ClearApplied                    // the node was in error and its checks passed: cleared
	ClearRefused                    // the node's checks still fail: the error stands
)

// Advance applies an evaluation to a node's record. An error never recovers
// by itself: it is cleared by an operator's clear (clearNote non-nil: the
// node's clear_errors entry was added or changed in this apply) when the
// checks pass at that moment, or after autoClearAfter healthy evaluations
// in a row when that is above zero. Missing never hides an error (error
// takes precedence), and an unreachable node keeps its heartbeats.
//
// A node that cannot be reached becomes missing by the reachability rule
// (reachability.Observe): a host key mismatch or a configuration fault at
// once; a transient failure (network, timeout, auth, unknown) only on the
// second evaluation in a row. Until then the node keeps its last state, and
// its reason says it could not be reached and what comes next. A node never
// evaluated before has no last state to keep: it is missing at once.
func Advance(prev *Record, r Report, p *Policy, clearNote *string, autoClearAfter int, generation int64) (Record, ClearResult, error) {
	now := r.EvaluatedAt
	next := Record{Heartbeats: map[string]time.Time{}}
	if prev != nil {
		for k, v := range prev.Heartbeats {
			next.Heartbeats[k] = v
		}
		next.LastClear = prev.LastClear
	}
	for i, pl := range r.Planned {
		if hb := r.Results[i].Heartbeat; !hb.IsZero() && pl.Check.Kind() == "path" {
			next.Heartbeats[pl.Check.Target()] = hb
		}
	}
	observed := r.State()
	next.State, next.Reason = observed, r.Reason(p)
	held := false // an unreached node keeping its last state for now
	if !r.Reached {
		reach := reachability.Observe(reachOf(prev, r.Node), unreachedObservation(r))
		next.UnreachableStreak = reach.ConsecutiveFailures
		// The rule leaves a reachable host reachable below the threshold; a
		// node in error keeps its error whatever the rule says, below.
		if held = reach.State == reachability.StateReachable && prev.State != StateError; held {
			next.State = prev.State
			next.Reason = fmt.Sprintf("node %s %s: %s. It keeps its last state (%s) for now, "+
				"and will be marked missing if the next evaluation fails too", r.Node, r.notEvaluated(), unreachable(r.Unreachable), prev.State)
		}
	}
	result := ClearNone
	wasError := prev != nil && prev.State == StateError
	switch {
	case observed == StateError:
		next.ErrorSince = now
		if wasError {
			next.ErrorSince = prev.ErrorSince
		}
		if clearNote != nil && wasError {
			result = ClearRefused
		}
	case wasError && observed == StateMissing:
		next.State, next.ErrorSince = StateError, prev.ErrorSince
		next.Reason = fmt.Sprintf("node %s is in error since %s and could not be evaluated now: %s",
			r.Node, prev.ErrorSince.Format(time.RFC3339), unreachable(r.Unreachable))
	case wasError:
		// The streak counts only where it clears: with auto_clear_after off
		// it would change the record at every evaluation of a node
		// awaiting an operator's clear, and a drift job would fire at every
		// run although nothing changed.
		streak := 0
		if autoClearAfter > 0 {
			streak = prev.HealthyStreak + 1
		}
		switch {
		case clearNote != nil:
			next.LastClear, result = &Clear{Note: *clearNote, At: now}, ClearApplied
		case autoClearAfter > 0 && streak >= autoClearAfter:
			next.LastClear = &Clear{Note: fmt.Sprintf("cleared automatically after %s", count(streak, "healthy evaluation")), At: now}
		default:
			next.State, next.ErrorSince, next.HealthyStreak = StateError, prev.ErrorSince, streak
			next.Reason = fmt.Sprintf("node %s: checks pass again; awaiting operator clear (in error since %s; add or change clear_errors[%q] to clear it)",
				r.Node, prev.ErrorSince.Format(time.RFC3339), r.Node)
		}
	}
	var err error
	next.Conditions, err = nodeConditions(prev, next, r, observed, held, generation)
	return next, result, err
}

// reachOf is a node's record as the reachability rule reads it: unknown
// before the first evaluation, unreachable while missing, reachable
// otherwise, with the streak of evaluations that could not reach it.
func reachOf(prev *Record, node string) reachability.Record {
	if prev == nil {
		return reachability.Reset(node)
	}
	state := reachability.StateReachable
	if prev.State == StateMissing {
		state = reachability.StateUnreachable
	}
	return reachability.Record{State: state, ConsecutiveFailures: prev.UnreachableStreak, Host: node}
}

// unreachedObservation is the failure to reach the node, as the
// reachability rule takes it. An outcome that names no failure (none is
// made today) counts as a transient one of unknown cause.
func unreachedObservation(r Report) reachability.Observation {
	var obs reachability.Observation
	if r.Unreachable != nil {
		obs, _ = reachability.ObservationOf(*r.Unreachable)
	}
	if obs.Reason == sshdial.ReasonNone {
		obs.Reason = sshdial.ReasonUnknown
	}
	obs.Host, obs.CheckedAt = r.Node, r.EvaluatedAt
	return obs
}

// nodeConditions sets Evaluated, Healthy and Schedulable from the record.
// A node held in its last state was not evaluated: its Healthy and
// Schedulable conditions stay as they were.
func nodeConditions(prev *Record, next Record, r Report, observed State, held bool, generation int64) ([]conditions.Condition, error) {
	var conds []conditions.Condition
	if prev != nil {
		conds = prev.Conditions
	}
	set := func(t string, s conditions.Status, reason, msg string) error {
		var err error
		conds, err = ConditionTypes.Set(conds, conditions.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation}, r.EvaluatedAt)
		return err
	}
	evaluated := func() error {
		if r.Reached {
			return set(ConditionEvaluated, conditions.True, ReasonChecksRan, fmt.Sprintf("node %s: %s ran", r.Node, count(len(r.Planned), "check")))
		}
		reason := ReasonNotEvaluated
		if r.Unreachable != nil && r.Unreachable.Reason != "" {
			reason = reachability.ConditionReason(r.Unreachable.Reason)
		}
		return set(ConditionEvaluated, conditions.False, reason, next.Reason)
	}
	healthy := func() error {
		switch {
		case next.State == StateError && observed != StateError && observed != StateMissing:
			return set(ConditionHealthy, conditions.False, ReasonAwaitingClear, next.Reason)
		case next.State == StateError:
			return set(ConditionHealthy, conditions.False, ReasonChecksFailed, next.Reason)
		case next.State == StateMissing:
			return set(ConditionHealthy, conditions.Unknown, ReasonNotEvaluated, next.Reason)
		case next.State == StateDegraded:
			return set(ConditionHealthy, conditions.False, ReasonDegradedChecks, next.Reason)
		}
		return set(ConditionHealthy, conditions.True, ReasonChecksPass, next.Reason)
	}
	schedulable := func() error {
		switch next.State {
		case StateError:
			return set(ConditionSchedulable, conditions.False, ReasonNodeError, next.Reason)
		case StateMissing:
			return set(ConditionSchedulable, conditions.False, ReasonNodeMissing, next.Reason)
		case StateHealthy, StateDegraded, StatePending:
		}
		return set(ConditionSchedulable, conditions.True, ReasonNodeSchedulable, fmt.Sprintf("node %s is %s", r.Node, next.State))
	}
	steps := []func() error{evaluated, healthy, schedulable}
	_, hasHealthy := conditions.Find(conds, ConditionHealthy)
	_, hasSchedulable := conditions.Find(conds, ConditionSchedulable)
	if held && hasHealthy && hasSchedulable {
		steps = steps[:1]
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return nil, err
		}
	}
	return conds, nil
}

// Pending is the record of a node a policy gains, until its first
// evaluation: no state observed, no memory, no conditions. A policy's
// change is planned from its records and its configuration alone (what
// hangs on the policy stays known at plan), so a node it adds is first
// evaluated by the next refresh.
func Pending(node string) Record {
	return Record{State: StatePending, Heartbeats: map[string]time.Time{},
		Reason: fmt.Sprintf("node %s is not evaluated yet: it joined the policy at the last apply, and the next refresh evaluates it", node)}
}

// Replay is the report of the evaluation a record's check results come
// from, one that reached the node: results by check identity, at its
// time. It decides an operator's clear from the last evaluation, without
// evaluating again. ok is false when results do not hold every check the
// policy plans for the node.
func Replay(p *Policy, node string, results map[string]Result, at time.Time) (Report, bool) {
	r := Report{Node: node, Roles: p.Nodes[node].Roles, Reached: true, EvaluatedAt: at}
	for _, pl := range p.Plan(node) {
		res, ok := results[pl.ID]
		if !ok {
			return Report{}, false
		}
		r.Planned, r.Results = append(r.Planned, pl), append(r.Results, res)
	}
	return r, true
}

// Instant is the record of an evaluation without memory, as the data
// source reports it: a node is in error exactly while a check fails.
func Instant(r Report, p *Policy, generation int64) (Record, error) {
	rec, _, err := Advance(nil, r, p, nil, 0, generation)
	return rec, err
}
