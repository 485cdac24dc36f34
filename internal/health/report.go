package health

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/sshdial"
)

// State is a node's state.
type State string

// The node states.
const (
	StateHealthy  State = "healthy"
	StateDegraded State = "degraded"
	StateError    State = "error"
	StateMissing  State = "missing"
	// StatePending is a node a policy gained and has not evaluated yet:
	// the next evaluation is its first (see Pending).
	StatePending State = "pending"
)

// Schedulable reports whether work may be placed on a node in state s.
func (s State) Schedulable() bool { return s == StateHealthy || s == StateDegraded }

// Report is one evaluation of one node.
type Report struct {
	Node    string
	Roles   []string
	Planned []Planned
	Results []Result // one per Planned
	// Reached is false when the node could not be reached to run its
	// checks, or its shell refused to run them (ShellRefused); Unreachable
	// then says why.
	Reached      bool
	Unreachable  *sshdial.Outcome
	ShellRefused bool
	EvaluatedAt  time.Time
}

// TypeHealth is the health of one hosted object type.
type TypeHealth struct {
	Name         string
	Healthy      bool
	FailedChecks []string // the checks keys that failed, sorted
}

// Types returns the health of every object type the node hosts, by name.
func (r Report) Types(p *Policy) []TypeHealth {
	failed := map[string]bool{}
	for i, pl := range r.Planned {
		if !r.Results[i].Healthy {
			for _, n := range pl.Names {
				failed[n] = true
			}
		}
	}
	var names []string
	for _, role := range r.Roles {
		names = append(names, p.Roles[role].Hosts...)
	}
	out := []TypeHealth{}
	for _, t := range sorted(names) {
		th := TypeHealth{Name: t, Healthy: true, FailedChecks: []string{}}
		for _, c := range sorted(p.ObjectTypes[t].Checks) {
			if failed[c] {
				th.Healthy = false
				th.FailedChecks = append(th.FailedChecks, c)
			}
		}
		out = append(out, th)
	}
	return out
}

// State is the node's state from this evaluation alone.
func (r Report) State() State {
	if !r.Reached {
		return StateMissing
	}
	s := StateHealthy
	for i, pl := range r.Planned {
		if r.Results[i].Healthy {
			continue
		}
		if pl.Severity == SeverityDegraded {
			s = StateDegraded
		} else {
			return StateError
		}
	}
	return s
}

// Reason is the evaluation in prose, for a person at 2am: the node, the
// roles and object types concerned, each failed check's target and cause.
func (r Report) Reason(p *Policy) string {
	switch r.State() {
	case StateError, StateDegraded, StatePending: // a report is never pending
	case StateMissing:
		return fmt.Sprintf("node %s is missing: it %s: %s", r.Node, r.notEvaluated(), unreachable(r.Unreachable))
	case StateHealthy:
		if len(r.Planned) == 0 {
			return fmt.Sprintf("node %s is healthy: its roles (%s) host no object type with checks", r.Node, orNone(r.Roles))
		}
		if len(r.Planned) == 1 {
			return fmt.Sprintf("node %s is healthy: its 1 check passes", r.Node)
		}
		return fmt.Sprintf("node %s is healthy: all %d checks pass", r.Node, len(r.Planned))
	}
	verb := "unhealthy"
	if r.State() == StateDegraded {
		verb = "degraded"
	}
	// Failures are grouped by the roles they concern, in check order.
	var roles []string
	failures := map[string][]string{}
	for i, pl := range r.Planned {
		res := r.Results[i]
		if res.Healthy {
			continue
		}
		who := roleWords(p, pl.Roles)
		if _, seen := failures[who]; !seen {
			roles = append(roles, who)
		}
		failures[who] = append(failures[who], fmt.Sprintf("%s (needed by %s) is %s: %s",
			checkWords(pl), strings.Join(pl.Types, ", "), severityWord(pl.Severity), failureWords(pl.Check, res)))
	}
	parts := make([]string, len(roles))
	for i, who := range roles {
		parts[i] = "it is " + who + " and " + strings.Join(failures[who], "; ")
	}
	return fmt.Sprintf("node %s is %s because %s", r.Node, verb, strings.Join(parts, "; and "))
}

func severityWord(severity string) string {
	if severity == SeverityDegraded {
		return "degraded"
	}
	return "unhealthy"
}

func roleWords(p *Policy, roles []string) string {
	words := make([]string, 0, len(roles))
	for _, role := range roles {
		if d := p.Roles[role].Description; d != "" {
			words = append(words, d)
		} else {
			words = append(words, "a "+role+" node")
		}
	}
	return strings.Join(words, " and ")
}

func checkWords(pl Planned) string {
	if pl.Description != "" {
		return pl.Description
	}
	return strings.Join(pl.Names, "/")
}

// failureWords says what a failed check found, naming its target.
func failureWords(c Check, res Result) string {
	target := c.Target()
	if c.Kind() == "path" && (res.TimedOut || res.Outstanding) {
		return fmt.Sprintf("%s is a broken mount (%s)", target, res.Detail)
	}
	switch c.Kind() {
	case "path":
		return fmt.Sprintf("%s: %s", target, res.Detail)
	case "command":
		return fmt.Sprintf("`%s` failed: %s", target, res.Detail)
	case "systemd_unit":
		return fmt.Sprintf("unit %s is %s", target, res.Detail)
	}
	return fmt.Sprintf("%s %s: %s", c.Kind(), target, res.Detail)
}

// notEvaluated says why an unevaluated node was not.
func (r Report) notEvaluated() string {
	if r.ShellRefused {
		return "could not run its checks: its shell refused them"
	}
	return "could not be reached to evaluate its checks"
}

func unreachable(o *sshdial.Outcome) string {
	if o == nil {
		return "not reached"
	}
	if o.Canceled {
		return "the evaluation was interrupted"
	}
	if o.Unchecked() || o.Auth == sshdial.AuthWithheld {
		return fmt.Sprintf("the credentials to log in are not available to this run (%s)", o.Withheld)
	}
	return fmt.Sprintf("%s (%s)", o.Message, o.Reason)
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Summary lists node names by state, each sorted.
type Summary struct {
	Healthy, Schedulable, Error, Missing []string
}

// Summarize sorts nodes into the summary lists by their states.
func Summarize(states map[string]State) Summary {
	s := Summary{Healthy: []string{}, Schedulable: []string{}, Error: []string{}, Missing: []string{}}
	for _, n := range slices.Sorted(maps.Keys(states)) {
		st := states[n]
		if st == StateHealthy {
			s.Healthy = append(s.Healthy, n)
		}
		if st.Schedulable() {
			s.Schedulable = append(s.Schedulable, n)
		}
		if st == StateError {
			s.Error = append(s.Error, n)
		}
		if st == StateMissing {
			s.Missing = append(s.Missing, n)
		}
	}
	for _, l := range [][]string{s.Healthy, s.Schedulable, s.Error, s.Missing} {
		slices.Sort(l)
	}
	return s
}
