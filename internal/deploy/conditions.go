package deploy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
)

// ConditionReady summarises a node, or the whole deployment: its last
// deploy succeeded.
const ConditionReady = "Ready"

// ConditionTypes is the fixed order of a node's conditions.
var ConditionTypes = conditions.Types{string(CondReachable), string(CondCopied), string(CondActivated), string(CondVerdict), string(CondBootloader), ConditionReady, string(CondKeys), string(CondRebooted)}

// stepTypes are the conditions every node has besides Ready, one a step
// of its deploy; KeysUploaded only a node with keys has (KeysCondition),
// last, so that a node's first key adds a condition and changes none.
var stepTypes = conditions.Types{string(CondReachable), string(CondCopied), string(CondActivated), string(CondVerdict), string(CondBootloader)}

// Reasons of a node's Ready condition when it is not True.
const (
	ReasonRolledBack   = "RolledBack"
	ReasonDeployFailed = "DeployFailed"
	ReasonInterrupted  = "Interrupted"
	ReasonSkipped      = "Skipped"
	ReasonNotStarted   = "NotStarted"
	// ReasonOutcomeUnknown: the deployer could not learn how the deploy
	// ended; the next refresh reads the host and settles it.
	ReasonOutcomeUnknown = "OutcomeUnknown"
)

// NodePhases is the ladder a node's recorded phase is derived from, by
// conditions.Phase; a node no rung fits is Pending.
var NodePhases = []conditions.Rung{
	{Phase: string(PhaseSucceeded), Type: ConditionReady, Status: conditions.True},
	{Phase: string(PhaseSkipped), Type: ConditionReady, Status: conditions.Unknown, Reason: ReasonSkipped},
	{Phase: string(PhaseUnknown), Type: ConditionReady, Status: conditions.Unknown, Reason: ReasonOutcomeUnknown},
	{Phase: string(PhaseRolledBack), Type: ConditionReady, Status: conditions.False, Reason: ReasonRolledBack},
	{Phase: string(PhaseFailed), Type: ConditionReady, Status: conditions.False},
}

// NodePhase is the phase a node's conditions say.
func NodePhase(conds []conditions.Condition) Phase {
	return Phase(conditions.Phase(conds, NodePhases, string(PhasePending)))
}

// NodeConditions are a node's conditions after a deploy: each step's
// outcome, Unknown for the steps it did not reach, and Ready, which sums
// the outcome up (and from which the node's phase is derived).
func NodeConditions(prev []conditions.Condition, r Result, generation int64, now time.Time) ([]conditions.Condition, error) {
	if r.Phase == PhaseSucceeded {
		conds, err := SucceededConditions(prev, r.Name, r.Goal, generation, now)
		if err == nil && r.KeysTouched {
			conds, err = keysConditionOf(conds, r, generation, now)
		}
		if err == nil {
			conds, err = rebootedCondition(conds, r, generation, now)
		}
		return conds, err
	}
	conds := prev
	var err error
	steps := slices.Clone([]string(stepTypes))
	switch {
	case r.Phase == PhaseSkipped && hasAll(prev, steps):
		// Held: the steps stand as its last deploy left them; Ready says
		// it is held.
		steps = nil
	case r.KeysOnly && hasAll(prev, steps):
		// Its keys alone: the system's steps stand, but for one it
		// reached (logging in).
		steps = slices.DeleteFunc(steps, func(t string) bool { _, ok := r.Outcomes[Condition(t)]; return !ok })
	}
	for _, t := range steps {
		c := conditions.Condition{Type: t, Status: conditions.Unknown, Reason: "NotReached", Message: "node " + r.Name + ": the deploy did not reach this step", ObservedGeneration: generation}
		if s, ok := r.Outcomes[Condition(t)]; ok {
			c.Status, c.Reason, c.Message = conditions.False, s.Reason, s.Message
			if s.Passed {
				c.Status = conditions.True
			}
		}
		if r.Phase == PhaseSkipped {
			c.Reason, c.Message = ReasonSkipped, r.Message
		}
		if conds, err = ConditionTypes.Set(conds, c, now); err != nil {
			return nil, err
		}
	}
	ready := conditions.Condition{Type: ConditionReady, Message: r.Message, ObservedGeneration: generation}
	switch {
	case r.Phase == PhaseSkipped:
		ready.Status, ready.Reason = conditions.Unknown, ReasonSkipped
	case r.Phase == PhaseRolledBack:
		ready.Status, ready.Reason = conditions.False, ReasonRolledBack
	case r.Phase == PhaseUnknown:
		ready.Status, ready.Reason = conditions.Unknown, ReasonOutcomeUnknown
	case r.Interrupted:
		ready.Status, ready.Reason = conditions.False, ReasonInterrupted
	case r.Phase == PhaseFailed:
		ready.Status, ready.Reason = conditions.False, ReasonDeployFailed
	default:
		ready.Status, ready.Reason = conditions.Unknown, ReasonNotStarted
	}
	if r.KeysTouched {
		if conds, err = keysConditionOf(conds, r, generation, now); err != nil {
			return nil, err
		}
	}
	if conds, err = rebootedCondition(conds, r, generation, now); err != nil {
		return nil, err
	}
	return ConditionTypes.Set(conds, ready, now)
}

// rebootedCondition sets a node's Rebooted condition from r: the last
// deploy that rebooted its host says how the reboot went (a node never
// rebooted by a deploy has none; one switched live since keeps it).
func rebootedCondition(conds []conditions.Condition, r Result, generation int64, now time.Time) ([]conditions.Condition, error) {
	o, ok := r.Outcomes[CondRebooted]
	switch {
	case r.RebootTried && ok:
		c := conditions.Condition{Type: string(CondRebooted), Status: conditions.False, Reason: o.Reason, Message: o.Message, ObservedGeneration: generation}
		if o.Passed {
			c.Status = conditions.True
		}
		return ConditionTypes.Set(conds, c, now)
	case r.RebootSeen && ok:
		return ConditionTypes.Set(conds, conditions.Condition{Type: string(CondRebooted), Status: conditions.False, Reason: o.Reason, Message: "node " + r.Name + ": " + o.Message, ObservedGeneration: generation}, now)
	case r.RebootTried:
		return ConditionTypes.Set(conds, conditions.Condition{Type: string(CondRebooted), Status: conditions.Unknown, Reason: "NotKnown",
			Message: "node " + r.Name + ": the host was asked to reboot; whether it came back is not known", ObservedGeneration: generation}, now)
	}
	return conds, nil
}

// KeysInPlace is the message of a KeysUploaded condition that is True.
const KeysInPlace = "every key of the node is in place on the host, as configured"

// keysConditionOf sets KeysUploaded from r's outcome for it.
func keysConditionOf(conds []conditions.Condition, r Result, generation int64, now time.Time) ([]conditions.Condition, error) {
	var o *Outcome
	if out, ok := r.Outcomes[CondKeys]; ok {
		o = &out
	}
	return KeysCondition(conds, r.Name, r.HasKeys, o, generation, now)
}

// KeysCondition sets a node's KeysUploaded condition from o (nil: the
// deploy did not reach its keys): False (or Unknown) while a key of the
// node is not in place, saying why. A node whose keys are all in place
// (o passed), or that has none (hasKeys false), has no such condition:
// the deployment's KeysUploaded says it (DeploymentKeysCondition), so
// that keys added to many nodes plan a line or two a node.
func KeysCondition(conds []conditions.Condition, name string, hasKeys bool, o *Outcome, generation int64, now time.Time) ([]conditions.Condition, error) {
	if !hasKeys || o != nil && o.Passed {
		return slices.DeleteFunc(slices.Clone(conds), func(c conditions.Condition) bool { return c.Type == string(CondKeys) }), nil
	}
	c := conditions.Condition{Type: string(CondKeys), Status: conditions.Unknown, Reason: "NotReached", Message: "node " + name + ": the deploy did not reach its keys", ObservedGeneration: generation}
	if o != nil {
		c.Status, c.Reason, c.Message = conditions.False, o.Reason, o.Message
		if o.Passed {
			c.Status = conditions.True
		}
	}
	return ConditionTypes.Set(conds, c, now)
}

// hasAll says whether conds holds a condition of each of types.
func hasAll(conds []conditions.Condition, types []string) bool {
	for _, t := range types {
		if _, ok := conditions.Find(conds, t); !ok {
			return false
		}
	}
	return true
}

// SucceededConditions are the conditions of a node whose deploy with goal
// succeeded: every condition the goal establishes True, the
// others Unknown (the goal does not reach them), each with the one reason
// and message of that outcome, whichever way it came (copied or built on
// the host, activated over a session that dropped, found done already:
// the node's message tells). So a plan knows them before the apply, and a
// switch that succeeds plans no change of its conditions but their
// generation. A condition whose status changes gets now (zero in a plan:
// not known yet).
func SucceededConditions(prev []conditions.Condition, name string, goal Goal, generation int64, now time.Time) ([]conditions.Condition, error) {
	if goal == "" {
		goal = GoalSwitch
	}
	type outcome struct{ reason, message string }
	passed := map[Condition]outcome{
		CondReachable: {"Connected", "logged in over SSH"},
		CondCopied:    {"Copied", "the system is in the host's store"},
		CondActivated: {"Activated", "the new system is active"},
	}
	// The system is the record's; a message without it stays the same
	// from one switch to the next.
	ready := outcome{"Succeeded", "the host runs the node's system after a passing verdict"}
	switch goal {
	case GoalSwitch:
		passed[CondVerdict] = outcome{"VerdictPassed", "the new system is active, reachable and settled"}
		passed[CondBootloader] = outcome{"BootDefault", "the boot entry points at the new system"}
	case GoalTest:
		passed[CondVerdict] = outcome{"VerdictPassed", "the new system is active, reachable and settled"}
	case GoalBoot:
		passed[CondActivated] = outcome{"ProfileSet", "the system profile points at the new system"}
		passed[CondBootloader] = outcome{"BootDefault", "the boot entry points at the new system"}
		ready.message = "the node's system is the boot default from the next boot"
	case GoalDryActivate:
		passed[CondActivated] = outcome{"DryActivated", "the new system's dry activation ran"}
		ready.message = "the node's system was dry-activated"
	}
	conds := prev
	var err error
	for _, t := range stepTypes {
		c := conditions.Condition{Type: t, Status: conditions.Unknown, Reason: "NotReached", Message: "node " + name + ": goal " + string(goal) + " does not take this step", ObservedGeneration: generation}
		if o, ok := passed[Condition(t)]; ok {
			c.Status, c.Reason, c.Message = conditions.True, o.reason, o.message
		}
		if conds, err = ConditionTypes.Set(conds, c, now); err != nil {
			return nil, err
		}
	}
	return ConditionTypes.Set(conds, conditions.Condition{Type: ConditionReady, Status: conditions.True, Reason: ready.reason, Message: ready.message, ObservedGeneration: generation}, now)
}

// DeploymentConditionTypes is the fixed order of a deployment's own
// conditions.
var DeploymentConditionTypes = conditions.Types{ConditionReady, string(CondKeys)}

// DeploymentKeysCondition sets a deployment's KeysUploaded: True when
// every node's keys are in place, False naming the nodes whose are not
// (notInPlace: those with a KeysUploaded condition of their own); none
// for a deployment without keys.
func DeploymentKeysCondition(conds []conditions.Condition, hasKeys bool, notInPlace []string, generation int64, now time.Time) ([]conditions.Condition, error) {
	if !hasKeys {
		return slices.DeleteFunc(slices.Clone(conds), func(c conditions.Condition) bool { return c.Type == string(CondKeys) }), nil
	}
	c := conditions.Condition{Type: string(CondKeys), Status: conditions.True, Reason: "AllKeysInPlace",
		Message: "every node's keys are in place on its host, as configured", ObservedGeneration: generation}
	if len(notInPlace) > 0 {
		c.Status, c.Reason = conditions.False, "KeysNotInPlace"
		c.Message = fmt.Sprintf("the keys of %s are not all in place (see each node's KeysUploaded): %s", plural(len(notInPlace), "node"), strings.Join(notInPlace, ", "))
	}
	return DeploymentConditionTypes.Set(conds, c, now)
}

// DeploymentPhases is the ladder the deployment's phase is derived from:
// Succeeded when every node is, Failed when one failed or was not
// started, else (a node held back) Partial.
var DeploymentPhases = []conditions.Rung{
	{Phase: "Succeeded", Type: ConditionReady, Status: conditions.True},
	{Phase: "Failed", Type: ConditionReady, Status: conditions.False},
	{Phase: "Partial", Type: ConditionReady, Status: conditions.Unknown},
}

// DeploymentConditions sum the nodes' phases (in node order) up.
func DeploymentConditions(prev []conditions.Condition, nodes []string, phases []Phase, generation int64, now time.Time) ([]conditions.Condition, error) {
	var failed, held []string
	for i, p := range phases {
		switch p {
		case PhaseFailed, PhaseRolledBack, PhasePending, PhaseUnknown:
			failed = append(failed, nodes[i])
		case PhaseSkipped:
			held = append(held, nodes[i])
		case PhaseSucceeded, PhaseCopying, PhaseActivating, PhaseVerifying, PhaseFinalizing:
		}
	}
	c := conditions.Condition{Type: ConditionReady, Status: conditions.True, Reason: "AllNodesSucceeded",
		Message: fmt.Sprintf("every node (%d) runs its system after a passing verdict", len(nodes)), ObservedGeneration: generation}
	switch {
	case len(nodes) == 0:
		c.Message = "the deployment has no nodes"
	case len(failed) > 0:
		c.Status, c.Reason, c.Message = conditions.False, "NodesFailed", fmt.Sprintf("%d of %d nodes failed, were not started or have an outcome not known: %s", len(failed), len(nodes), strings.Join(failed, ", "))
	case len(held) > 0:
		c.Status, c.Reason, c.Message = conditions.Unknown, "NodesHeld", fmt.Sprintf("%d of %d nodes are held: %s", len(held), len(nodes), strings.Join(held, ", "))
	}
	return DeploymentConditionTypes.Set(prev, c, now)
}

// plural is n and noun, in the plural unless n is 1: "1 node", "3 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
