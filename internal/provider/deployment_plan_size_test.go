package provider_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// The pull-request plan at fleet size (issue 24 point 1), as a user sees
// it (the whole plan output, warnings included), through both CLIs: a
// one-node change of 12 nodes is at most 80 lines, a whole-fleet change at
// most 25 lines a node and 40 more, at 12 and at 48 nodes.
func TestDeploymentPlanIsShortAtFleetSize(t *testing.T) {
	t.Setenv("NIX_CONFIG", nixtest.NixConfig)
	old := nixtest.System(t, nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}, Units: map[string]string{"nginx.service": "1"}, Packages: map[string]int{"nginx-1.26.1": 1024}})
	next := nixtest.System(t, nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed}, Units: map[string]string{"nginx.service": "2"}, Packages: map[string]int{"nginx-1.26.2": 1024}})
	for _, n := range []int{12, 48} {
		var tgs []*nixtest.Target
		for range n {
			tg := nixtest.NewTarget(t)
			tg.Boot(t, old)
			tgs = append(tgs, tg)
		}
		for _, cli := range acctest.CLIs(t) {
			t.Run(fmt.Sprintf("%s/nodes=%d", cli.Name, n), func(t *testing.T) {
				systems := make([]string, n)
				for i := range systems {
					systems[i] = old
				}
				s := acctest.NewSession(t, cli, server())
				s.WriteConfig(deploymentConfig(tgs, systems, ""))
				s.Run("init", "-input=false")
				s.Run("apply", "-auto-approve", "-input=false")
				lines := func(systems []string) int {
					s.WriteConfig(deploymentConfig(tgs, systems, ""))
					out, errOut := s.Run("plan", "-input=false", "-no-color")
					return len(strings.Split(strings.TrimSpace(out+errOut), "\n"))
				}
				one := append([]string{}, systems...)
				one[4] = next
				all := make([]string, n)
				for i := range all {
					all[i] = next
				}
				oneLines, allLines := lines(one), lines(all)
				t.Logf("%s, %d nodes: a one-node change plans %d lines, a whole-fleet change %d (%.1f a node)", cli.Name, n, oneLines, allLines, float64(allLines)/float64(n))
				if n == 12 && oneLines > 80 {
					t.Errorf("a one-node change of %d nodes plans %d lines, want at most 80", n, oneLines)
				}
				if allLines > 25*n+40 {
					t.Errorf("a whole-fleet change of %d nodes plans %d lines, want at most %d", n, allLines, 25*n+40)
				}
			})
		}
	}
}
