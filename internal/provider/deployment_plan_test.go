package provider_test

import (
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// resourcePlan is the part of a plan's output about one resource: from
// its "# address will be ..." line to the end of its block.
func resourcePlan(plan, address string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(plan, "\n") {
		switch {
		case strings.Contains(line, "# "+address+" "):
			in = true
		case in && strings.TrimSpace(line) == "" && len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "}":
			return out
		}
		if in {
			out = append(out, line)
		}
	}
	return out
}

// Issue 13: a plan a reviewer can read. Changing one node's system is a
// plan whose size does not grow with the deployment: the records of the
// nodes the change does not touch stay known (and are not printed), and
// what a successful apply decides (the summaries, the phase, the changed
// node's systems) is known too. It shows the node's new system.
func TestDeploymentOneNodeChangeIsAShortPlan(t *testing.T) {
	t.Parallel()
	old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	next := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
	var nodes []*nixtest.Target
	for range 20 {
		tg := nixtest.NewTarget(t)
		tg.Boot(t, old)
		nodes = append(nodes, tg)
	}
	planFor := func(t *testing.T, cli acctest.CLI, nodes []*nixtest.Target) []string {
		systems := make([]string, len(nodes))
		for i := range systems {
			systems[i] = old
		}
		s := acctest.NewSession(t, cli, server())
		s.WriteConfig(deploymentConfig(nodes, systems, ""))
		s.Run("init", "-input=false")
		s.Run("apply", "-auto-approve", "-input=false")
		systems[4] = next
		s.WriteConfig(deploymentConfig(nodes, systems, ""))
		plan, _ := s.Run("plan", "-input=false", "-no-color")
		return resourcePlan(plan, "fleet_ssh_deployment.prod")
	}
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			small, large := planFor(t, cli, nodes[:6]), planFor(t, cli, nodes)
			t.Logf("the plan for a one-node change of 20 nodes (%d lines; %d for 6 nodes):\n%s", len(large), len(small), strings.Join(large, "\n"))
			all := strings.Join(large, "\n")
			if strings.Count(all, `-> "`+next+`"`) < 3 {
				t.Errorf("the plan does not show n5's new system as its system, current system and verified system")
			}
			// With 6 nodes none follow n6: no "# (N unchanged elements
			// hidden)" line after it.
			if len(large) > len(small)+1 {
				t.Errorf("the plan grows with the deployment: %d lines for 20 nodes, %d for 6", len(large), len(small))
			}
			if len(large) > maxOneNodePlanLines {
				t.Errorf("the plan for a one-node change is %d lines, want at most %d", len(large), maxOneNodePlanLines)
			}
			for _, other := range []string{`"n1"`, `"n20"`, "succeeded_nodes", "phase "} {
				if strings.Contains(all, other) {
					t.Errorf("the plan shows %s, which the change does not touch", other)
				}
			}
		})
	}
}

// maxOneNodePlanLines bounds the plan of a one-node change: the changed
// node's input (shown with its neighbours, as Terraform shows a changed
// element of a value it has no schema for), its record (whose six
// conditions, going unknown, are 44 lines), the deployment's generation
// and Ready condition.
const maxOneNodePlanLines = 115
