package deploy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetops/terraform-provider-fleet/internal/deploy"
)

// The deployment's Ready sums its nodes up, and says so plainly when it
// has none (the new-user trial read "every node (0) runs its system").
func TestDeploymentReadySumsTheNodesUp(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		nodes  []string
		phases []deploy.Phase
		status string
		says   string
	}{
		{"no nodes", nil, nil, "True", "the deployment has no nodes"},
		{"all succeeded", []string{"a", "b"}, []deploy.Phase{deploy.PhaseSucceeded, deploy.PhaseSucceeded}, "True", "every node (2) runs its system"},
		{"one failed", []string{"a", "b"}, []deploy.Phase{deploy.PhaseSucceeded, deploy.PhaseFailed}, "False", "1 of 2 nodes failed"},
		{"one held", []string{"a", "b"}, []deploy.Phase{deploy.PhaseSucceeded, deploy.PhaseSkipped}, "Unknown", "1 of 2 nodes are held: b"},
	} {
		conds, err := deploy.DeploymentConditions(nil, c.nodes, c.phases, 1, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		found := false
		for _, cond := range conds {
			if cond.Type == deploy.ConditionReady {
				found = true
				if string(cond.Status) != c.status || !strings.Contains(cond.Message, c.says) {
					t.Errorf("%s: Ready %s %q, want %s saying %q", c.name, cond.Status, cond.Message, c.status, c.says)
				}
			}
		}
		if !found {
			t.Errorf("%s: no Ready condition in %+v", c.name, conds)
		}
	}
}
