package provider_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// The pull-request plan at fleet size (issue 24 points 1 and 2), as a
// user sees it (the whole plan output, warnings included), at the fleet
// sizes of fleetSizes: a one-node change plans as many lines at every
// size through the same CLI, a whole-fleet change at most 25 lines a node
// plus 40, and its switches, each host to a system of its own but all
// doing the same (an nginx upgrade), are one warning naming every node. A
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
	t.Parallel()
	// Each host has a system of its own (its hostname unit), as real
	// hosts do; the upgrade is the same for all (nginx).
	system := func(host, nginx, version string) string {
		return nixtest.System(t, nixtest.SystemSpec{Behaviour: nixtest.Behaviour{Kind: nixtest.Succeed},
			Units: map[string]string{"nginx.service": nginx, "hostname.service": host}, Packages: map[string]int{"nginx-" + version: 1024}})
	}
	fleet := fleetSizes(t)
	var olds, nexts []string
	for i := range fleet[len(fleet)-1].n {
		olds = append(olds, system(fmt.Sprint("n", i+1), "1", "1.26.1"))
		nexts = append(nexts, system(fmt.Sprint("n", i+1), "2", "1.26.2"))
	}
	sizes := newPlanSizes(t)
	for _, size := range fleet {
		t.Run(fmt.Sprintf("nodes=%d", size.n), func(t *testing.T) {
			t.Parallel()
			planSizesAtFleetSize(t, sizes, size.n, size.clis, olds, nexts)
		})
	}
}

// planSizesAtFleetSize applies the first n systems of olds to n hosts
// through each CLI in turn, then plans a change of one node and of all.
func planSizesAtFleetSize(t *testing.T, sizes *planSizes, n int, clis []acctest.CLI, olds, nexts []string) {
	var tgs []*nixtest.Target
	for i := range n {
		tg := nixtest.NewTarget(t)
		tg.Boot(t, olds[i])
		tgs = append(tgs, tg)
	}
	for _, cli := range clis {
		t.Run(cli.Name, func(t *testing.T) {
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
			sizes.record(cli.Name, "a one-node change", n, oneLines)
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

// EnvSoak, set to 1 (make soak), runs the fleet-size tests at their
// largest size through both CLIs.
const envSoak = "FLEET_ACC_SOAK"

// fleetSize is a fleet size a fleet-size test runs at, and its CLIs.
type fleetSize struct {
	n    int
	clis []acctest.CLI
}

// fleetSizes are the sizes of the fleet-size tests, smallest first: 12
// hosts through both CLIs, whose plans each renders its own way, and 24
// through one (acctest.AlternateCLIs), so that through that CLI a plan is
// shown not to grow with the fleet (planSizes); with FLEET_ACC_SOAK=1
// (make soak), 12 and 48 through both.
func fleetSizes(t *testing.T) []fleetSize {
	if os.Getenv(envSoak) == "1" {
		return []fleetSize{{12, acctest.CLIs(t)}, {48, acctest.CLIs(t)}}
	}
	return []fleetSize{{12, acctest.CLIs(t)}, {24, acctest.AlternateCLIs(t)}}
}

// planSizes keeps the lines of each plan a fleet-size test makes, by CLI,
// change and fleet size, and once the test's subtests have ended checks
// that through each CLI a change plans as many lines at every size: its
// length does not grow with the fleet.
type planSizes struct {
	mu    sync.Mutex
	lines map[[2]string]map[int]int // CLI and change: lines by fleet size
}

func newPlanSizes(t *testing.T) *planSizes {
	p := &planSizes{lines: map[[2]string]map[int]int{}}
	t.Cleanup(func() {
		if t.Skipped() { // make test-short
			return
		}
		compared := false
		for k, bySize := range p.lines {
			if len(bySize) < 2 {
				continue
			}
			compared = true
			ns := slices.Sorted(maps.Keys(bySize))
			for _, n := range ns[1:] {
				if bySize[n] != bySize[ns[0]] {
					t.Errorf("through %s, %s plans %d lines at %d hosts and %d at %d: a plan's length grows with the fleet", k[0], k[1], bySize[n], n, bySize[ns[0]], ns[0])
				}
			}
		}
		if !compared && !t.Failed() {
			t.Errorf("no CLI planned a change at two fleet sizes: nothing shows that a plan's length does not grow with the fleet")
		}
	})
	return p
}

func (p *planSizes) record(cli, change string, n, lines int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := [2]string{cli, change}
	if p.lines[k] == nil {
		p.lines[k] = map[int]int{}
	}
	p.lines[k][n] = lines
}
