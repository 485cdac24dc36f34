package health

import (
	"fmt"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
	"github.com/fleetops/terraform-provider-fleet/internal/reachability"
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
	HealthyStreak int                  // evaluations in a row without a failed check, while in error
	Heartbeats    map[string]time.Time // path → last good heartbeat
	Conditions    []conditions.Condition
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
		streak := prev.HealthyStreak + 1
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
	next.Conditions, err = nodeConditions(prev, next, r, observed, generation)
	return next, result, err
}

// nodeConditions sets Evaluated, Healthy and Schedulable from the record.
func nodeConditions(prev *Record, next Record, r Report, observed State, generation int64) ([]conditions.Condition, error) {
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
		case StateHealthy, StateDegraded:
		}
		return set(ConditionSchedulable, conditions.True, ReasonNodeSchedulable, fmt.Sprintf("node %s is %s", r.Node, next.State))
	}
	for _, f := range []func() error{evaluated, healthy, schedulable} {
		if err := f(); err != nil {
			return nil, err
		}
	}
	return conds, nil
}

// Instant is the record of an evaluation without memory, as the data
// source reports it: a node is in error exactly while a check fails.
func Instant(r Report, p *Policy, generation int64) (Record, error) {
	rec, _, err := Advance(nil, r, p, nil, 0, generation)
	return rec, err
}
