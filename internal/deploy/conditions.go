package deploy

import (
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/conditions"
)

// ConditionReady summarises a node: its last deploy succeeded.
const ConditionReady = "Ready"

// ConditionTypes is the fixed order of a node's conditions.
var ConditionTypes = conditions.Types{string(CondReachable), string(CondCopied), string(CondActivated), string(CondVerdict), string(CondBootloader), ConditionReady}

// NodeConditions are a node's conditions after a deploy: each step's
// outcome, Unknown for the steps it did not reach, and Ready.
func NodeConditions(prev []conditions.Condition, r Result, generation int64, now time.Time) ([]conditions.Condition, error) {
	conds := prev
	var err error
	for _, t := range ConditionTypes[:len(ConditionTypes)-1] {
		c := conditions.Condition{Type: t, Status: conditions.Unknown, Reason: "NotReached", Message: "node " + r.Name + ": the deploy did not reach this step", ObservedGeneration: generation}
		if s, ok := r.Outcomes[Condition(t)]; ok {
			c.Status, c.Reason, c.Message = conditions.False, s.Reason, s.Message
			if s.Passed {
				c.Status = conditions.True
			}
		}
		if r.Phase == PhaseSkipped {
			c.Reason, c.Message = "Skipped", r.Message
		}
		if conds, err = ConditionTypes.Set(conds, c, now); err != nil {
			return nil, err
		}
	}
	ready := conditions.Condition{Type: ConditionReady, Status: conditions.False, Reason: string(r.Phase), Message: r.Message, ObservedGeneration: generation}
	if r.Phase == PhaseSucceeded {
		ready.Status = conditions.True
	}
	if r.Phase == PhaseSkipped || r.Phase == PhasePending {
		ready.Status = conditions.Unknown
	}
	return ConditionTypes.Set(conds, ready, now)
}
