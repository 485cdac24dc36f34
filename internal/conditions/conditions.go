// Package conditions owns the rules of Kubernetes-style status conditions
// (metav1.Condition) for every resource of the provider: a condition's last
// transition time changes only when its status changes, reasons are CamelCase
// codes, conditions are kept in one fixed order per resource so plans do not
// churn, and a summary phase is derived from them by one pure function.
package conditions

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Status is the status of a condition.
type Status string

// The three statuses of metav1.ConditionStatus.
const (
	True    Status = "True"
	False   Status = "False"
	Unknown Status = "Unknown"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	switch s {
	case True, False, Unknown:
		return true
	}
	return false
}

// Condition is one observed aspect of a resource.
type Condition struct {
	Type               string
	Status             Status
	Reason             string
	Message            string
	LastTransitionTime time.Time
	ObservedGeneration int64
}

// camelCase is the form of condition types and reasons: an upper-case letter,
// then letters and digits (stricter than metav1, which also admits "_,:").
var camelCase = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

const maxReasonLength = 1024

// ValidateReason reports whether reason is a CamelCase machine-readable code.
func ValidateReason(reason string) error {
	if len(reason) > maxReasonLength {
		return fmt.Errorf("condition reason is longer than %d characters", maxReasonLength)
	}
	if !camelCase.MatchString(reason) {
		return fmt.Errorf("condition reason %q is not CamelCase (an upper-case letter, then letters and digits)", reason)
	}
	return nil
}

// Types is the fixed, ordered set of condition types one kind of resource
// keeps. Its order is the order of the conditions list in state.
type Types []string

// Set returns conds with c applied, following metav1.SetStatusCondition: a
// condition of a new type is added; for an existing one, reason, message and
// observed generation are replaced, and LastTransitionTime moves to now only
// when the status changes. The result is in the order of ts, and conds is not
// modified. c.LastTransitionTime is ignored: transitions are the caller's now.
func (ts Types) Set(conds []Condition, c Condition, now time.Time) ([]Condition, error) {
	if err := ts.validate(c); err != nil {
		return nil, err
	}
	out := slices.Clone(conds)
	c.LastTransitionTime = now.UTC()
	if i := slices.IndexFunc(out, func(e Condition) bool { return e.Type == c.Type }); i >= 0 {
		if out[i].Status == c.Status {
			c.LastTransitionTime = out[i].LastTransitionTime
		}
		out[i] = c
	} else {
		out = append(out, c)
	}
	ts.sort(out)
	return out, nil
}

// Initial returns one condition of every type with status Unknown, the given
// reason and message: the state of a resource whose observations were reset.
func (ts Types) Initial(generation int64, reason, message string, now time.Time) ([]Condition, error) {
	var out []Condition
	for _, t := range ts {
		var err error
		out, err = ts.Set(out, Condition{Type: t, Status: Unknown, Reason: reason, Message: message, ObservedGeneration: generation}, now)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (ts Types) validate(c Condition) error {
	if !slices.Contains(ts, c.Type) {
		return fmt.Errorf("condition type %q is not one of %s", c.Type, strings.Join(ts, ", "))
	}
	if !c.Status.Valid() {
		return fmt.Errorf("condition %s: status %q is not True, False or Unknown", c.Type, c.Status)
	}
	if err := ValidateReason(c.Reason); err != nil {
		return fmt.Errorf("condition %s: %w", c.Type, err)
	}
	// Messages are shown in plans and CI logs; a key must never reach them.
	if strings.Contains(c.Message, "PRIVATE KEY") {
		return fmt.Errorf("condition %s: message holds key material", c.Type)
	}
	return nil
}

func (ts Types) sort(conds []Condition) {
	slices.SortStableFunc(conds, func(a, b Condition) int {
		return slices.Index(ts, a.Type) - slices.Index(ts, b.Type)
	})
}

// Find returns the condition of type t.
func Find(conds []Condition, t string) (Condition, bool) {
	i := slices.IndexFunc(conds, func(c Condition) bool { return c.Type == t })
	if i < 0 {
		return Condition{}, false
	}
	return conds[i], true
}

// Rung is one step of a phase ladder: the phase holds when the condition of
// Type has Status (and Reason, when the rung names one).
type Rung struct {
	Phase  string
	Type   string
	Status Status
	Reason string
}

// Phase derives a summary phase from conditions: the first rung of ladder
// that holds names the phase; when none holds, the phase is fallback. It is
// the only way a phase is made, so a phase never disagrees with the
// conditions it summarises.
func Phase(conds []Condition, ladder []Rung, fallback string) string {
	for _, r := range ladder {
		if c, ok := Find(conds, r.Type); ok && c.Status == r.Status && (r.Reason == "" || c.Reason == r.Reason) {
			return r.Phase
		}
	}
	return fallback
}
