package provider_test

import (
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
