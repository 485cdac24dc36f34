package provider_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleetops/terraform-provider-fleet/internal/acctest"
	"github.com/fleetops/terraform-provider-fleet/internal/nixtest"
)

// Quiet where nothing is wrong (issue 24 point 5), through both CLIs: a
// hold that names nodes of other deployments (one policy's error_nodes
// holding the nodes of several, as the guides wire it) plans with no
// warning; an empty nodes list (a for filter gone wrong) is warned about.
func TestDeploymentPlanWarnsOnlyWhereSomethingIsWrong(t *testing.T) {
	t.Setenv("NIX_CONFIG", nixtest.NixConfig)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			tg := nixtest.NewTarget(t)
			sys := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			tg.Boot(t, sys)
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig([]*nixtest.Target{tg}, []string{sys}, `  hold = ["db7", "cache3"]`+"\n") + `
resource "fleet_ssh_deployment" "none" {
  nodes = [for n in [] : n]
}
`)
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			out, _ := s.Run("plan", "-json", "-input=false")
			var summaries []string
			for _, w := range warnings(t, out) {
				summaries = append(summaries, w.Summary+" @ "+w.Address)
			}
			if got := strings.Join(summaries, "; "); got != "Deployment deploys nothing @ fleet_ssh_deployment.none" {
				t.Errorf("plan warnings: %q, want only that fleet_ssh_deployment.none deploys nothing", got)
			}
		})
	}
}

// ciFilter is the deployment guide's jq filter's expression over warning
// summaries.
var ciFilter = regexp.MustCompile(`^Nodes? .* (will switch|is unreachable)$`)

// The guide's CI filter names every node a plan switches (issue 24 point
// 3), through both CLIs: a plan (with its refresh) of two nodes whose
// systems change, one of them down, yields "Node n1 will switch" and
// "Node n2 is unreachable" (the refresh's warning).
func TestDeploymentCIFilterNamesEverySwitchingNode(t *testing.T) {
	t.Setenv("NIX_CONFIG", nixtest.NixConfig)
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			up, down := nixtest.NewTarget(t), nixtest.NewTarget(t)
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			up.Boot(t, old)
			down.Boot(t, old)
			nodes := []*nixtest.Target{up, down}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(nodes, []string{old, old}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			next := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			s.WriteConfig(deploymentConfig(nodes, []string{next, next}, ""))
			down.CutSSH(t, nixtest.CutReset)
			out, _ := s.Run("plan", "-json", "-input=false")
			var named []string
			for _, w := range warnings(t, out) {
				if ciFilter.MatchString(w.Summary) {
					named = append(named, w.Summary)
				}
			}
			slices.Sort(named)
			if got := strings.Join(named, "; "); got != "Node n1 will switch; Node n2 is unreachable" {
				t.Errorf("the CI filter names %q, want n1's switch and n2 unreachable", got)
			}
		})
	}
}
