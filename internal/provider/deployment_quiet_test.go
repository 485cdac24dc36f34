package provider_test

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
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
// warning; an empty nodes list (a for filter gone wrong) is warned about,
// naming the records the apply would drop.
func TestDeploymentPlanWarnsOnlyWhereSomethingIsWrong(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
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
			// A filter gone wrong on a deployment that has records: the
			// warning says which records the apply drops.
			s.WriteConfig(`
resource "fleet_ssh_deployment" "prod" {
  nodes = [for n in [] : n]
}
`)
			out, _ = s.Run("plan", "-json", "-input=false")
			var said []string
			for _, w := range warnings(t, out) {
				said = append(said, w.Summary+": "+w.Detail)
			}
			if got := strings.Join(said, "; "); !strings.HasPrefix(got, "Deployment deploys nothing: ") || !strings.Contains(got, "drops the record of the node it has now (n1), its host_key_seen with it") || len(said) != 1 {
				t.Errorf("plan warnings of a deployment whose nodes went: %q, want one naming the dropped n1", got)
			}
		})
	}
}

// ciFilter is the deployment guide's jq filter's expression over warning
// summaries.
var ciFilter = regexp.MustCompile(`^Nodes? .* (will switch|will make its boot entry|will reboot|may reboot|is unreachable)$`)

// The guide's CI filter names every node a plan switches (issue 24 point
// 3), through both CLIs: a plan (with its refresh) of two nodes whose
// systems change, one of them down, yields "Node n1 will switch" and
// "Node n2 is unreachable" (the refresh's warning).
func TestDeploymentCIFilterNamesEverySwitchingNode(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
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

// savedPlanFilter is the deployment guide's jq filter over a saved plan,
// as the guide shows it (TestDeploymentGuideShowsTheSavedPlanFilter).
const savedPlanFilter = `.resource_changes[] | select(.type == "fleet_ssh_deployment") | .address as $a | .change as $c
         | ($c.after.actions // {} | keys[]) as $n
         | select($c.after.actions[$n] == "switch" and $c.after_unknown.status[$n].started_at) | "\($a): \($n)"`

// The deployment guide shows the filter the saved-plan test runs.
func TestDeploymentGuideShowsTheSavedPlanFilter(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/guides/deployment.md")
	if err != nil || !strings.Contains(string(b), "jq -r '"+savedPlanFilter+"'") {
		t.Errorf("docs/guides/deployment.md does not show the saved-plan filter the test runs (%v)", err)
	}
}

// Which nodes a saved plan switches is readable from the plan alone
// (issue 24 point 4), by the rule the deployment guide documents: a node
// switches when its planned action is "switch" and its record's
// started_at is unknown (the apply writes it). Through both CLIs, on
// terraform show -json of a saved plan that switches n2 of three.
func TestDeploymentSavedPlanSaysWhichNodesSwitch(t *testing.T) {
	t.Parallel()
	for _, cli := range acctest.CLIs(t) {
		t.Run(cli.Name, func(t *testing.T) {
			t.Parallel()
			var tgs []*nixtest.Target
			old := nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed})
			for range 3 {
				tg := nixtest.NewTarget(t)
				tg.Boot(t, old)
				tgs = append(tgs, tg)
			}
			s := acctest.NewSession(t, cli, server())
			s.WriteConfig(deploymentConfig(tgs, []string{old, old, old}, ""))
			s.Run("init", "-input=false")
			s.Run("apply", "-auto-approve", "-input=false")
			s.WriteConfig(deploymentConfig(tgs, []string{old, nixtest.Closure(t, nixtest.Behaviour{Kind: nixtest.Succeed}), old}, ""))
			s.Run("plan", "-input=false", "-out=saved.plan")
			raw, _ := s.Run("show", "-json", "saved.plan")
			var plan struct {
				ResourceChanges []struct {
					Address string `json:"address"`
					Change  struct {
						After struct {
							Actions map[string]string `json:"actions"`
						} `json:"after"`
						AfterUnknown struct {
							Status map[string]struct {
								StartedAt bool `json:"started_at"`
							} `json:"status"`
						} `json:"after_unknown"`
					} `json:"change"`
				} `json:"resource_changes"`
			}
			if err := json.Unmarshal([]byte(raw), &plan); err != nil || len(plan.ResourceChanges) != 1 {
				t.Fatalf("show -json: %v: %.500s", err, raw)
			}
			c := plan.ResourceChanges[0].Change
			var switching []string
			for _, name := range slices.Sorted(maps.Keys(c.After.Actions)) {
				if c.After.Actions[name] == "switch" && c.AfterUnknown.Status[name].StartedAt {
					switching = append(switching, name)
				}
			}
			if got := strings.Join(switching, ","); got != "n2" {
				t.Errorf("the saved plan's rule says %q switch, want n2 only", got)
			}
			// The guide's jq filter says the same.
			jq := exec.Command("jq", "-r", savedPlanFilter)
			jq.Stdin = strings.NewReader(raw)
			out, err := jq.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "fleet_ssh_deployment.prod: n2" {
				t.Errorf("the guide's jq filter: %v: %q, want fleet_ssh_deployment.prod: n2", err, out)
			}
		})
	}
}
